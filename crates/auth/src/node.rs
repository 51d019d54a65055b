//! Node authentication with a cluster secret: every node holds the same secret (a file of 64
//! hex digits, mode 0600) and logs in over SCRAM-SHA-256 as [`node_user`] (`node:broker:3`)
//! with the secret's hex as password. A server needs no stored user for it: it derives the
//! same verifier from its own copy of the secret ([`ClusterSecret::node_credential`]).
//!
//! Every node user shares one verifier (one salt derived from the secret), computed once per
//! [`ClusterSecret`] and mechanism, so a client-first naming a node user costs a lookup, not
//! PBKDF2 — a peer cannot make a server burn CPU by naming many node ids. Nothing is lost by
//! sharing: the password is the same secret for every node, so whoever holds it can log in as
//! any node anyway. The secret also keys the HTTP bearer tokens ([`ClusterSecret::token_key`])
//! and the fake verifiers of unknown users ([`ClusterSecret::fake_key`]), so every node answers
//! alike.

use std::fmt;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::OnceLock;

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
#[derive(Clone)]
pub struct ClusterSecret {
    bytes: Vec<u8>,
    /// The node verifier of each mechanism (indexed like [`ScramMechanism::ALL`]), derived on
    /// first use.
    node_verifiers: [OnceLock<StoredCredential>; 2],
}

impl PartialEq for ClusterSecret {
    /// Equal secrets are equal whether or not their verifiers were derived yet.
    fn eq(&self, other: &ClusterSecret) -> bool {
        self.bytes == other.bytes
    }
}

impl Eq for ClusterSecret {}

impl fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClusterSecret({} bytes)", self.bytes.len())
    }
}

impl ClusterSecret {
    fn new(bytes: Vec<u8>) -> ClusterSecret {
        ClusterSecret {
            bytes,
            node_verifiers: Default::default(),
        }
    }

    /// Reads a secret file: hex digits (at least 32, i.e. 128 bits), surrounding whitespace
    /// ignored. The file must be a regular file (a symlink to one is followed) and, on Unix,
    /// neither readable nor writable by group or others: a secret others can read is no secret,
    /// and one others can write lets them choose it.
    pub fn load(path: impl AsRef<Path>) -> Result<ClusterSecret, AuthError> {
        let path = path.as_ref();
        let err = |reason: String| AuthError::ClusterSecret {
            path: path.display().to_string(),
            reason,
        };
        // Checked on the opened file, so what is checked is what is read.
        let file = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
        let meta = file.metadata().map_err(|e| err(e.to_string()))?;
        if !meta.is_file() {
            return Err(err("not a regular file".into()));
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(err(format!(
                    "mode {mode:03o} lets group or others read or write it; \
                     run `chmod 600 {}`",
                    path.display()
                )));
            }
        }
        let len = meta.len();
        if len > SECRET_FILE_BYTES_MAX {
            return Err(err(format!("{len} bytes, at most {SECRET_FILE_BYTES_MAX}")));
        }
        let mut text = String::new();
        // The file may grow after the check: read no more than the limit plus one byte.
        file.take(SECRET_FILE_BYTES_MAX + 1)
            .read_to_string(&mut text)
            .map_err(|e| err(e.to_string()))?;
        if text.len() as u64 > SECRET_FILE_BYTES_MAX {
            return Err(err(format!("over {SECRET_FILE_BYTES_MAX} bytes")));
        }
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
        Ok(ClusterSecret::new(bytes.to_vec()))
    }

    /// Creates `path` (which must not exist) holding 32 random bytes as hex, mode 0600, synced.
    pub fn generate_into(path: impl AsRef<Path>) -> Result<ClusterSecret, AuthError> {
        let path = path.as_ref();
        let err = |e: std::io::Error| AuthError::ClusterSecret {
            path: path.display().to_string(),
            reason: e.to_string(),
        };
        let secret = ClusterSecret::new(crypto::try_random_bytes::<SECRET_BYTES>()?.to_vec());
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
        crypto::hex(&self.bytes)
    }

    /// The verifier of node user `user`, the same on every node holding this secret. Every
    /// node user has the same one (see the module doc); it is derived once per mechanism and
    /// then cloned, so calling this for every client-first is cheap.
    pub fn node_credential(&self, _user: &str, m: ScramMechanism) -> StoredCredential {
        let slot = match m {
            ScramMechanism::Sha256 => &self.node_verifiers[0],
            ScramMechanism::Sha512 => &self.node_verifiers[1],
        };
        slot.get_or_init(|| {
            let mut salt = crypto::hmac_sha256(&self.bytes, b"tinymq node salt").to_vec();
            salt.truncate(16);
            StoredCredential::derive_with_salt(m, &self.password(), &salt, SCRAM_ITERATIONS_MIN)
        })
        .clone()
    }

    /// The key that signs and checks bearer tokens.
    pub fn token_key(&self) -> [u8; 32] {
        crypto::hmac_sha256(&self.bytes, b"tinymq token key")
    }

    /// The key of unknown users' fake SCRAM verifiers ([`CredentialLookup::fake_key`]): the
    /// same on every node and across restarts, like a real user's verifier.
    pub fn fake_key(&self) -> [u8; 32] {
        crypto::hmac_sha256(&self.bytes, b"scram fake")
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

    /// The cluster secret's [`ClusterSecret::fake_key`], else whatever `users` says.
    fn fake_key(&self) -> Option<[u8; 32]> {
        match self.secret {
            Some(secret) => Some(secret.fake_key()),
            None => self.users.fake_key(),
        }
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

    /// Writes `text` to `path` with mode 0600, as an operator would.
    fn write_private(path: &Path, text: &str) {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        options
            .open(path)
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
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
            write_private(&path, text);
            let err = ClusterSecret::load(&path).unwrap_err();
            assert!(err.to_string().contains(name), "{err}");
            assert!(!err.to_string().contains("chmod"), "{err}");
        }
        let big = dir.path().join("big");
        write_private(&big, &"a".repeat(5000));
        assert!(ClusterSecret::load(&big).is_err());
        assert!(ClusterSecret::load(dir.path().join("missing")).is_err());
        let not_a_file = ClusterSecret::load(dir.path()).unwrap_err();
        assert!(
            not_a_file.to_string().contains("not a regular file"),
            "{not_a_file}"
        );
        let spaced = dir.path().join("spaced");
        write_private(&spaced, &format!("  {}\n\n", "ab".repeat(16)));
        assert_eq!(
            ClusterSecret::load(&spaced).unwrap().password(),
            "ab".repeat(16)
        );
    }

    #[cfg(unix)]
    #[test]
    fn load_refuses_a_file_group_or_others_can_read_or_write() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.secret");
        let made = ClusterSecret::generate_into(&path).unwrap();
        for mode in [0o640, 0o604, 0o620, 0o602, 0o644, 0o666] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = ClusterSecret::load(&path).unwrap_err().to_string();
            assert!(
                err.contains(&format!("chmod 600 {}", path.display())),
                "{mode:o}: {err}"
            );
            assert!(err.contains(&format!("{mode:03o}")), "{mode:o}: {err}");
        }
        for mode in [0o600, 0o400] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(ClusterSecret::load(&path).unwrap(), made, "{mode:o}");
        }
        // A symlink to a private file is followed (as secret mounts use them).
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert_eq!(ClusterSecret::load(&link).unwrap(), made);
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

    #[test]
    fn node_verifier_is_shared_by_node_users_and_derived_once() {
        let secret = ClusterSecret::from_bytes(&[7u8; 32]).unwrap();
        assert!(secret.node_verifiers.iter().all(|v| v.get().is_none()));
        let lookup = WithNodes {
            secret: Some(&secret),
            users: &NoUsers,
        };
        let m = ScramMechanism::Sha256;
        let first = lookup.credential("node:broker:1", m).unwrap();
        assert!(secret.node_verifiers[0].get().is_some(), "derived once");
        assert!(secret.node_verifiers[1].get().is_none());
        // Any id a peer names answers with the cached verifier: no PBKDF2 per client-first.
        for id in [2, 3, u64::MAX] {
            assert_eq!(
                lookup.credential(&node_user(NodeKind::Broker, id), m),
                Some(first.clone())
            );
            assert_eq!(
                lookup.credential(&node_user(NodeKind::Meta, id), m),
                Some(first.clone())
            );
        }
        assert_eq!(first.salt.len(), 16);
        assert!(first.verify_password(&secret.password()));
        // A copy made after the derivation still equals a fresh secret of the same bytes.
        let cloned = secret.clone();
        assert_eq!(cloned, ClusterSecret::from_bytes(&[7u8; 32]).unwrap());
        assert_eq!(cloned.node_credential("node:meta:1", m), first);
        assert_eq!(
            lookup.credential("node:meta:1", ScramMechanism::Sha512),
            None
        );
        let sha512 = secret.node_credential("node:meta:1", ScramMechanism::Sha512);
        assert_eq!(sha512.mechanism, ScramMechanism::Sha512);
        assert!(sha512.verify_password(&secret.password()));
    }

    /// The salt of the server-first a server answers `user` with.
    fn salt_for(lookup: &dyn CredentialLookup, user: &str) -> String {
        let m = ScramMechanism::Sha256;
        let mut client = ScramClient::new(m, user, "guess", None);
        let mut server = ScramServer::new(m);
        let first = String::from_utf8(server.first(&client.first(), lookup).unwrap()).unwrap();
        first.split(',').nth(1).unwrap().to_string()
    }

    #[test]
    fn unknown_users_fake_salt_is_the_same_on_every_node_holding_the_secret() {
        let secret = ClusterSecret::from_bytes(&[7u8; 32]).unwrap();
        let restarted = ClusterSecret::from_bytes(&[7u8; 32]).unwrap();
        let other = ClusterSecret::from_bytes(&[8u8; 32]).unwrap();
        let with = |s| WithNodes {
            secret: Some(s),
            users: &NoUsers,
        };
        assert_eq!(with(&secret).fake_key(), Some(secret.fake_key()));
        assert_ne!(secret.fake_key(), secret.token_key());
        let ghost = salt_for(&with(&secret), "ghost");
        assert_eq!(ghost, salt_for(&with(&restarted), "ghost"));
        assert_ne!(ghost, salt_for(&with(&secret), "ghost2"));
        assert_ne!(ghost, salt_for(&with(&other), "ghost"));
        // Without a secret: the per-process key (stable within this process only).
        let without = WithNodes {
            secret: None,
            users: &NoUsers,
        };
        assert_eq!(without.fake_key(), None);
        assert_eq!(salt_for(&without, "ghost"), salt_for(&without, "ghost"));
        assert_ne!(salt_for(&without, "ghost"), ghost);
    }
}
