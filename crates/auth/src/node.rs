//! Node authentication with a cluster secret: every node holds the same secret (a file of 64
//! hex digits, mode 0600) and logs in over SCRAM-SHA-256 as [`node_user`] (`node:broker:3`)
//! with the secret's hex as password. A server needs no stored user for it: it derives the
//! same verifier from its own copy of the secret ([`ClusterSecret::node_credential`], with a
//! salt derived from the secret and the user name so every node agrees). The secret also keys
//! the HTTP bearer tokens ([`ClusterSecret::token_key`]), so any node verifies any node's.

use std::fmt;
use std::io::Write;
use std::path::Path;

use crate::credential::{CredentialLookup, ScramMechanism, StoredCredential, SCRAM_ITERATIONS_MIN};
use crate::crypto;
use crate::error::AuthError;
use crate::principal::{parse_id, NodeKind};

/// Bytes of a generated secret.
const SECRET_BYTES: usize = 32;
/// Shortest secret accepted from a file: 128 bits.
const SECRET_BYTES_MIN: usize = 16;
/// Longest secret file read (bytes of text).
const SECRET_FILE_BYTES_MAX: u64 = 4096;

/// The SCRAM user name of a node, e.g. `node:broker:3`, `node:meta:1`.
pub fn node_user(kind: NodeKind, id: u64) -> String {
    format!("node:{}:{id}", kind.name())
}

/// The role and id of a [`node_user`] name; `None` for any other name.
pub fn parse_node_user(user: &str) -> Option<(NodeKind, u64)> {
    let rest = user.strip_prefix("node:")?;
    let (kind, id) = rest.split_once(':')?;
    Some((NodeKind::from_name(kind)?, parse_id(id)?))
}

/// The cluster's shared secret. Its `Debug` never shows the bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSecret(Vec<u8>);

impl fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClusterSecret({} bytes)", self.0.len())
    }
}

impl ClusterSecret {
    /// Reads a secret file: hex digits (at least 32, i.e. 128 bits), surrounding whitespace
    /// ignored.
    pub fn load(path: impl AsRef<Path>) -> Result<ClusterSecret, AuthError> {
        let path = path.as_ref();
        let err = |reason: String| AuthError::ClusterSecret {
            path: path.display().to_string(),
            reason,
        };
        let len = std::fs::metadata(path)
            .map_err(|e| err(e.to_string()))?
            .len();
        if len > SECRET_FILE_BYTES_MAX {
            return Err(err(format!("{len} bytes, at most {SECRET_FILE_BYTES_MAX}")));
        }
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        let bytes = crypto::hex_decode(text.trim())
            .ok_or_else(|| err("not hex digits (expected e.g. 64 of 0-9a-f)".into()))?;
        ClusterSecret::from_bytes(&bytes).map_err(|e| match e {
            AuthError::ClusterSecret { reason, .. } => err(reason),
            other => other,
        })
    }

    /// A secret from raw bytes (at least 16).
    pub fn from_bytes(bytes: &[u8]) -> Result<ClusterSecret, AuthError> {
        if bytes.len() < SECRET_BYTES_MIN {
            return Err(AuthError::ClusterSecret {
                path: "<bytes>".into(),
                reason: format!("{} bytes, at least {SECRET_BYTES_MIN} needed", bytes.len()),
            });
        }
        Ok(ClusterSecret(bytes.to_vec()))
    }

    /// Creates `path` (which must not exist) holding 32 random bytes as hex, mode 0600, synced.
    pub fn generate_into(path: impl AsRef<Path>) -> Result<ClusterSecret, AuthError> {
        let path = path.as_ref();
        let err = |e: std::io::Error| AuthError::ClusterSecret {
            path: path.display().to_string(),
            reason: e.to_string(),
        };
        let secret = ClusterSecret(crypto::try_random_bytes::<SECRET_BYTES>()?.to_vec());
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(path).map_err(err)?;
        file.write_all(format!("{}\n", secret.password()).as_bytes())
            .map_err(err)?;
        file.sync_all().map_err(err)?;
        Ok(secret)
    }

    /// Loads `path` if it exists, else generates it (the standalone server's first start).
    pub fn load_or_generate(path: impl AsRef<Path>) -> Result<ClusterSecret, AuthError> {
        let path = path.as_ref();
        if path.exists() {
            ClusterSecret::load(path)
        } else {
            ClusterSecret::generate_into(path)
        }
    }

    /// The password a node logs in with: the secret as lowercase hex.
    pub fn password(&self) -> String {
        crypto::hex(&self.0)
    }

    /// The verifier of node user `user`, the same on every node holding this secret.
    pub fn node_credential(&self, user: &str, m: ScramMechanism) -> StoredCredential {
        let mut salt =
            crypto::hmac_sha256(&self.0, format!("tinymq node salt\0{user}").as_bytes()).to_vec();
        salt.truncate(16);
        StoredCredential::derive_with_salt(m, &self.password(), &salt, SCRAM_ITERATIONS_MIN)
    }

    /// The key that signs and checks bearer tokens.
    pub fn token_key(&self) -> [u8; 32] {
        crypto::hmac_sha256(&self.0, b"tinymq token key")
    }
}

/// A [`CredentialLookup`] that answers node users from the cluster secret (when there is one)
/// and everyone else from `users` (the MetaServer image).
pub struct WithNodes<'a> {
    pub secret: Option<&'a ClusterSecret>,
    pub users: &'a dyn CredentialLookup,
}

impl CredentialLookup for WithNodes<'_> {
    fn credential(&self, user: &str, m: ScramMechanism) -> Option<StoredCredential> {
        if parse_node_user(user).is_some() {
            // Node logins are SCRAM-SHA-256 only; never fall through to stored users.
            return match (self.secret, m) {
                (Some(secret), ScramMechanism::Sha256) => Some(secret.node_credential(user, m)),
                _ => None,
            };
        }
        self.users.credential(user, m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scram::{ScramClient, ScramServer};

    struct NoUsers;
    impl CredentialLookup for NoUsers {
        fn credential(&self, _: &str, _: ScramMechanism) -> Option<StoredCredential> {
            None
        }
    }

    #[test]
    fn node_user_names() {
        assert_eq!(node_user(NodeKind::Broker, 3), "node:broker:3");
        assert_eq!(node_user(NodeKind::Meta, 1), "node:meta:1");
        assert_eq!(
            parse_node_user("node:broker:3"),
            Some((NodeKind::Broker, 3))
        );
        assert_eq!(parse_node_user("node:meta:0"), Some((NodeKind::Meta, 0)));
        for bad in [
            "broker:3",
            "node:broker",
            "node:x:1",
            "node:meta:01",
            "node:meta:-1",
            "node:meta:1:2",
        ] {
            assert_eq!(parse_node_user(bad), None, "{bad}");
        }
    }

    #[test]
    fn generate_load_and_permissions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.secret");
        let made = ClusterSecret::generate_into(&path).unwrap();
        assert_eq!(made.password().len(), 64);
        assert_eq!(ClusterSecret::load(&path).unwrap(), made);
        assert_eq!(ClusterSecret::load_or_generate(&path).unwrap(), made);
        assert!(
            ClusterSecret::generate_into(&path).is_err(),
            "never overwrites"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(!format!("{made:?}").contains(&made.password()));
    }

    #[test]
    fn load_refuses_bad_files() {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in [
            ("short", "00ff"),
            ("odd", "abc"),
            ("nothex", &"zz".repeat(20)),
        ] {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            let err = ClusterSecret::load(&path).unwrap_err();
            assert!(err.to_string().contains(name), "{err}");
        }
        let big = dir.path().join("big");
        std::fs::write(&big, "a".repeat(5000)).unwrap();
        assert!(ClusterSecret::load(&big).is_err());
        assert!(ClusterSecret::load(dir.path().join("missing")).is_err());
        let spaced = dir.path().join("spaced");
        std::fs::write(&spaced, format!("  {}\n\n", "ab".repeat(16))).unwrap();
        assert_eq!(
            ClusterSecret::load(&spaced).unwrap().password(),
            "ab".repeat(16)
        );
    }

    #[test]
    fn every_node_derives_the_same_verifier_and_nodes_log_in() {
        let secret = ClusterSecret::from_bytes(&[7u8; 32]).unwrap();
        let copy = ClusterSecret::from_bytes(&[7u8; 32]).unwrap();
        let user = node_user(NodeKind::Broker, 2);
        let m = ScramMechanism::Sha256;
        assert_eq!(
            secret.node_credential(&user, m),
            copy.node_credential(&user, m)
        );
        assert_ne!(
            secret.node_credential(&user, m).salt,
            secret.node_credential("node:broker:3", m).salt
        );

        let login = |client_secret: &ClusterSecret, server_secret: Option<&ClusterSecret>| {
            let lookup = WithNodes {
                secret: server_secret,
                users: &NoUsers,
            };
            let mut client = ScramClient::new(m, &user, &client_secret.password(), None);
            let mut server = ScramServer::new(m);
            let sf = server.first(&client.first(), &lookup)?;
            let cf = client.second(&sf)?;
            let (last, who) = server.finish(&cf)?;
            client.finish(&last)?;
            Ok::<_, AuthError>(who)
        };
        assert_eq!(login(&copy, Some(&secret)).unwrap().user, user);
        let other = ClusterSecret::from_bytes(&[8u8; 32]).unwrap();
        assert_eq!(
            login(&other, Some(&secret)).unwrap_err(),
            AuthError::AuthenticationFailed
        );
        assert_eq!(
            login(&copy, None).unwrap_err(),
            AuthError::AuthenticationFailed
        );
        assert!(ClusterSecret::from_bytes(&[1; 15]).is_err());
        assert_ne!(secret.token_key(), other.token_key());
    }
}
