//! tinymq's security logic, with no I/O beyond the cluster-secret file and no async runtime:
//! who a peer is ([`Principal`]), how it proves it (SCRAM-SHA-256/512 exchanges over
//! [`StoredCredential`] verifiers, node logins derived from a [`ClusterSecret`], signed bearer
//! tokens), what it may do ([`AclEntry`], [`Authorizer`]) and how fast ([`QuotaConfig`],
//! [`RateLimiter`]).
//!
//! The network front end (tinymq-net), the MetaServer image (tinymq-meta), the brokers and the
//! HTTP API call into this crate; it never touches a socket. Every function that network data
//! can reach returns an [`AuthError`] rather than panicking. See `docs/security.md`.
//!
//! One SCRAM login, both sides (a server answers node users from the cluster secret and
//! everyone else from its stored users through [`WithNodes`]):
//!
//! ```
//! use tinymq_auth::*;
//!
//! struct Users(StoredCredential);
//! impl CredentialLookup for Users {
//!     fn credential(&self, user: &str, _: ScramMechanism) -> Option<StoredCredential> {
//!         (user == "alice").then(|| self.0.clone())
//!     }
//! }
//! let m = ScramMechanism::Sha256;
//! let users = Users(StoredCredential::derive(m, "s3cret", SCRAM_ITERATIONS_MIN));
//!
//! let mut client = ScramClient::new(m, "alice", "s3cret", None);
//! let mut server = ScramServer::new(m);
//! let server_first = server.first(&client.first(), &users)?;
//! let client_final = client.second(&server_first)?;
//! let (server_final, who) = server.finish(&client_final)?;
//! client.finish(&server_final)?;
//! assert_eq!(who.user, "alice");
//! # Ok::<(), AuthError>(())
//! ```

pub mod acl;
pub mod credential;
pub mod error;
pub mod limiter;
pub mod node;
pub mod principal;
pub mod quota;
pub mod scram;
pub mod token;

mod crypto;

pub use acl::{
    describe_refusal_as, AclEntry, AclFilter, AclOperation, AclPermission, Authorizer, Denied,
    PatternType, ResourceType, ACL_RESOURCE_NAME_BYTES_MAX, CLUSTER_RESOURCE_NAME,
};
pub use credential::{
    validate_user_name, CredentialLookup, ScramMechanism, StoredCredential,
    SCRAM_ITERATIONS_DEFAULT, SCRAM_ITERATIONS_MAX, SCRAM_ITERATIONS_MIN, SCRAM_SALT_BYTES_MAX,
    SCRAM_SALT_BYTES_MIN, USER_NAME_BYTES_MAX,
};
pub use error::AuthError;
pub use limiter::{
    Admission, LoginLimiter, LOGIN_FAILURES_PER_IP_MAX, LOGIN_FAILURE_WINDOW, LOGIN_LIMITER_IPS_MAX,
};
pub use node::{node_user, parse_node_user, ClusterSecret, WithNodes};
pub use principal::{NodeKind, Principal, PrincipalKind};
pub use quota::{QuotaConfig, RateLimiter, QUOTA_DEFAULT_PRINCIPAL, QUOTA_DELAY_MAX};
pub use scram::{Authenticated, ScramClient, ScramServer, SCRAM_MESSAGE_BYTES_MAX};
pub use token::{
    issue_bound_token, issue_token, verify_bound_token, verify_token, TOKEN_BINDING_BYTES_MAX,
    TOKEN_BYTES_MAX,
};
