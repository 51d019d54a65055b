//! What a listener asks of a connection before serving it: TLS (a [`ServerTls`] whose
//! configuration may be reloaded while the listener runs), the authentication mode, the
//! cluster secret that node peers prove, and how many failed logins a connection gets.

use std::sync::Arc;

use tinymq_auth::{ClusterSecret, LoginLimiter, ScramMechanism};
pub use tinymq_tls::{ClientAuth, ServerTls};

/// Failed Authenticate exchanges one connection may make before it is closed.
pub const AUTH_FAILURES_MAX_DEFAULT: u32 = 3;

/// How a listener's peers prove who they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuthMode {
    /// Nobody has to authenticate: a peer that does not is `User:ANONYMOUS`. When a cluster
    /// secret is configured, node peers prove themselves with it, and a client may still log
    /// in as a user (which changes nothing but the name its quotas and logs see, since
    /// authorization is off).
    #[default]
    None,
    /// SCRAM-SHA-256/512 against the credentials the server holds.
    Scram,
    /// The verified client certificate names the principal; SCRAM for peers without one.
    Mtls,
}

impl AuthMode {
    pub fn name(self) -> &'static str {
        match self {
            AuthMode::None => "none",
            AuthMode::Scram => "scram",
            AuthMode::Mtls => "mtls",
        }
    }

    pub fn parse(s: &str) -> Option<AuthMode> {
        match s {
            "none" => Some(AuthMode::None),
            "scram" => Some(AuthMode::Scram),
            "mtls" => Some(AuthMode::Mtls),
            _ => None,
        }
    }
}

/// The security of one listener; cheap to clone (a reload through any clone is seen by all).
#[derive(Clone)]
pub struct ListenerSecurity {
    /// `None`: plain TCP. `Some`: every connection must start with a TLS handshake.
    pub tls: Option<ServerTls>,
    pub auth: AuthMode,
    /// The secret node peers log in with (as `node_user(kind, id)`); with one set, the node
    /// roles of the handshake count only once a peer has proven it with this secret.
    pub cluster_secret: Option<Arc<ClusterSecret>>,
    /// Failed Authenticate exchanges a connection may make before it is closed.
    pub auth_failures_max: u32,
    /// Failed logins per source address, shared by every listener of the node this security
    /// is cloned into — the native port, the Kafka port and the HTTP listener — so a guesser
    /// gets one budget per address per node, not one per port.
    pub login_limiter: Arc<LoginLimiter>,
}

impl Default for ListenerSecurity {
    fn default() -> ListenerSecurity {
        ListenerSecurity {
            tls: None,
            auth: AuthMode::None,
            cluster_secret: None,
            auth_failures_max: AUTH_FAILURES_MAX_DEFAULT,
            login_limiter: Arc::new(LoginLimiter::default()),
        }
    }
}

impl std::fmt::Debug for ListenerSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenerSecurity")
            .field("tls", &self.tls)
            .field("auth", &self.auth)
            .field("cluster_secret", &self.cluster_secret.is_some())
            .field("auth_failures_max", &self.auth_failures_max)
            .finish()
    }
}

impl ListenerSecurity {
    /// Whether node roles need a node login: with authentication on, or a cluster secret set.
    pub fn nodes_authenticate(&self) -> bool {
        self.auth != AuthMode::None || self.cluster_secret.is_some()
    }

    /// The mechanisms Authenticate accepts here: every SCRAM one whenever anyone can log in.
    pub fn mechanisms(&self) -> Vec<ScramMechanism> {
        if self.auth == AuthMode::None && self.cluster_secret.is_none() {
            return vec![];
        }
        vec![ScramMechanism::Sha256, ScramMechanism::Sha512]
    }
}
