//! SCRAM verifiers as the MetaServer stores them ([`StoredCredential`]: salt, iteration count,
//! StoredKey and ServerKey of RFC 5802 — never the password), the mechanisms, user-name rules
//! and the [`CredentialLookup`] through which a SCRAM server finds a user's verifier.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;
use tinymq_protocol::messages as m;

use crate::crypto;
use crate::error::AuthError;

/// Iterations for new credentials unless the operator asks for more.
pub const SCRAM_ITERATIONS_DEFAULT: u32 = 8192;
/// RFC 7677's minimum; fewer makes offline guessing from a stolen image too cheap.
pub const SCRAM_ITERATIONS_MIN: u32 = 4096;
/// Bounds the work a login (and a hostile server's answer to a client) can demand.
pub const SCRAM_ITERATIONS_MAX: u32 = 1_000_000;
pub const SCRAM_SALT_BYTES_MIN: usize = 8;
pub const SCRAM_SALT_BYTES_MAX: usize = 64;
/// Salt length of credentials this crate derives.
const SALT_BYTES: usize = 16;
/// Longest user name (the protocol's limit; the characters are [`validate_user_name`]'s).
pub use tinymq_protocol::names::USER_NAME_BYTES_MAX;
// `validate_user_name`'s reasons are static text that names the limit.
const _: () = assert!(
    USER_NAME_BYTES_MAX == 255,
    "update validate_user_name's message"
);

/// The SCRAM hash functions a server offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ScramMechanism {
    Sha256,
    Sha512,
}

impl ScramMechanism {
    pub const ALL: [ScramMechanism; 2] = [ScramMechanism::Sha256, ScramMechanism::Sha512];

    /// The SASL name, as in `auth_mechanisms` and `AuthenticateRequest.mechanism`.
    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(name: &str) -> Option<ScramMechanism> {
        ScramMechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Length of the hash's output, and so of every key and proof.
    pub fn key_bytes(self) -> usize {
        match self {
            ScramMechanism::Sha256 => 32,
            ScramMechanism::Sha512 => 64,
        }
    }
}

impl std::fmt::Display for ScramMechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One user's verifier for one mechanism.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredCredential {
    pub mechanism: ScramMechanism,
    pub salt: Vec<u8>,
    pub iterations: u32,
    /// H(ClientKey).
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl StoredCredential {
    /// A verifier for `password` with a fresh random salt. `iterations` is clamped into
    /// `SCRAM_ITERATIONS_MIN..=SCRAM_ITERATIONS_MAX` (callers taking a count from an operator
    /// should refuse one outside it first, with [`check_iterations`]).
    pub fn derive(mechanism: ScramMechanism, password: &str, iterations: u32) -> StoredCredential {
        let salt: [u8; SALT_BYTES] = crypto::random_bytes();
        let iterations = iterations.clamp(SCRAM_ITERATIONS_MIN, SCRAM_ITERATIONS_MAX);
        StoredCredential::derive_with_salt(mechanism, password, &salt, iterations)
    }

    /// The verifier for a given salt and count (RFC 5802 §3). Deterministic: node verifiers
    /// and test vectors use it.
    pub fn derive_with_salt(
        mechanism: ScramMechanism,
        password: &str,
        salt: &[u8],
        iterations: u32,
    ) -> StoredCredential {
        let keys = ClientKeys::new(mechanism, password.as_bytes(), salt, iterations);
        StoredCredential {
            mechanism,
            salt: salt.to_vec(),
            iterations,
            stored_key: crypto::hash(mechanism, &keys.client_key),
            server_key: keys.server_key,
        }
    }

    /// The verifier of a password a client already salted and hashed (`SaltedPassword` of
    /// RFC 5802: Kafka's AlterUserScramCredentials sends that, never the password). Checked as
    /// [`StoredCredential::from_wire`] checks a stored one; the salted password must be as long
    /// as the mechanism's hash.
    pub fn from_salted_password(
        mechanism: ScramMechanism,
        salted_password: &[u8],
        salt: &[u8],
        iterations: u32,
    ) -> Result<StoredCredential, AuthError> {
        if salted_password.len() != mechanism.key_bytes() {
            return Err(AuthError::InvalidCredential(format!(
                "a salted password of {} bytes, {mechanism} needs {}",
                salted_password.len(),
                mechanism.key_bytes()
            )));
        }
        let client_key = crypto::hmac(mechanism, salted_password, b"Client Key");
        let credential = StoredCredential {
            mechanism,
            salt: salt.to_vec(),
            iterations,
            stored_key: crypto::hash(mechanism, &client_key),
            server_key: crypto::hmac(mechanism, salted_password, b"Server Key"),
        };
        credential.validate()?;
        Ok(credential)
    }

    /// Whether `password` is the one this verifier was derived from (HTTP Basic), compared in
    /// constant time. Costs `iterations` rounds of PBKDF2.
    pub fn verify_password(&self, password: &str) -> bool {
        let other = StoredCredential::derive_with_salt(
            self.mechanism,
            password,
            &self.salt,
            self.iterations,
        );
        let stored = other.stored_key.ct_eq(&self.stored_key);
        let server = other.server_key.ct_eq(&self.server_key);
        bool::from(stored & server)
    }

    pub fn to_wire(&self) -> m::ScramCredential {
        m::ScramCredential {
            mechanism: self.mechanism.name().to_string(),
            salt: Bytes::from(self.salt.clone()),
            iterations: self.iterations,
            stored_key: Bytes::from(self.stored_key.clone()),
            server_key: Bytes::from(self.server_key.clone()),
        }
    }

    /// Checks every field: a known mechanism, a salt of 8..=64 bytes, an iteration count in
    /// range and keys as long as the mechanism's hash.
    pub fn from_wire(w: &m::ScramCredential) -> Result<StoredCredential, AuthError> {
        let mechanism = ScramMechanism::from_name(&w.mechanism)
            .ok_or_else(|| AuthError::UnsupportedMechanism(truncated(&w.mechanism)))?;
        let credential = StoredCredential {
            mechanism,
            salt: w.salt.to_vec(),
            iterations: w.iterations,
            stored_key: w.stored_key.to_vec(),
            server_key: w.server_key.to_vec(),
        };
        credential.validate()?;
        Ok(credential)
    }

    /// The checks of [`StoredCredential::from_wire`], for a credential from elsewhere.
    pub fn validate(&self) -> Result<(), AuthError> {
        let salt = self.salt.len();
        if !(SCRAM_SALT_BYTES_MIN..=SCRAM_SALT_BYTES_MAX).contains(&salt) {
            return Err(AuthError::InvalidCredential(format!(
                "salt of {salt} bytes, expected {SCRAM_SALT_BYTES_MIN}..={SCRAM_SALT_BYTES_MAX}"
            )));
        }
        check_iterations(self.iterations)?;
        let want = self.mechanism.key_bytes();
        for (name, key) in [
            ("stored_key", &self.stored_key),
            ("server_key", &self.server_key),
        ] {
            if key.len() != want {
                return Err(AuthError::InvalidCredential(format!(
                    "{name} of {} bytes, {} needs {want}",
                    key.len(),
                    self.mechanism
                )));
            }
        }
        Ok(())
    }
}

/// Refuses an iteration count outside `SCRAM_ITERATIONS_MIN..=SCRAM_ITERATIONS_MAX`.
pub fn check_iterations(iterations: u32) -> Result<(), AuthError> {
    if (SCRAM_ITERATIONS_MIN..=SCRAM_ITERATIONS_MAX).contains(&iterations) {
        Ok(())
    } else {
        Err(AuthError::InvalidCredential(format!(
            "{iterations} iterations, expected {SCRAM_ITERATIONS_MIN}..={SCRAM_ITERATIONS_MAX}"
        )))
    }
}

/// The keys a client derives from its password (RFC 5802 §3).
pub(crate) struct ClientKeys {
    pub client_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl ClientKeys {
    pub fn new(m: ScramMechanism, password: &[u8], salt: &[u8], iterations: u32) -> ClientKeys {
        let salted = crypto::hi(m, password, salt, iterations);
        ClientKeys {
            client_key: crypto::hmac(m, &salted, b"Client Key"),
            server_key: crypto::hmac(m, &salted, b"Server Key"),
        }
    }
}

/// Checks a name for a new user: 1..=255 bytes of `[A-Za-z0-9._@-]`. Names beginning with
/// `node:` belong to cluster nodes ([`crate::node_user`]) and are refused, and so is
/// `ANONYMOUS` in any case: it is the principal of connections when authentication is off,
/// and a real user of that name would be mistaken for (or get the grants of) them.
pub fn validate_user_name(name: &str) -> Result<(), AuthError> {
    let invalid = |reason| AuthError::InvalidUserName {
        name: truncated(name),
        reason,
    };
    if name.eq_ignore_ascii_case(crate::principal::ANONYMOUS_USER) {
        return Err(invalid(
            "ANONYMOUS is reserved for connections when authentication is off",
        ));
    }
    if name.starts_with("node:") {
        return Err(invalid(
            "names beginning with 'node:' are reserved for cluster nodes",
        ));
    }
    if name.is_empty() || name.len() > USER_NAME_BYTES_MAX {
        return Err(invalid("a user name is 1..=255 bytes"));
    }
    let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'@' | b'-');
    if !name.bytes().all(allowed) {
        return Err(invalid("a user name uses only A-Z a-z 0-9 . _ @ -"));
    }
    Ok(())
}

/// Where a SCRAM server finds verifiers (the MetaServer image, plus node users; see
/// [`crate::WithNodes`]).
pub trait CredentialLookup: Send + Sync {
    fn credential(&self, user: &str, mechanism: ScramMechanism) -> Option<StoredCredential>;

    /// The key the fake verifier of an unknown user is derived from. A key every server of
    /// the cluster shares (and keeps across restarts) makes an unknown user's salt as stable
    /// as a real user's, so probing several brokers or one broker across restarts does not
    /// tell which users exist. `None` (the default) uses a random key of this process, which
    /// hides nothing from a prober who can compare two processes. [`crate::WithNodes`]
    /// derives one from the cluster secret.
    fn fake_key(&self) -> Option<[u8; 32]> {
        None
    }
}

/// A client-controlled string cut short enough to quote in an error.
pub(crate) fn truncated(s: &str) -> String {
    s.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_salted_password_gives_the_verifier_of_its_password() {
        for mechanism in ScramMechanism::ALL {
            let salt = [7u8; 16];
            let derived = StoredCredential::derive_with_salt(mechanism, "pencil", &salt, 4096);
            let salted = crypto::hi(mechanism, b"pencil", &salt, 4096);
            let from_salted =
                StoredCredential::from_salted_password(mechanism, &salted, &salt, 4096)
                    .expect("a valid salted password");
            assert_eq!(from_salted, derived);
            assert!(from_salted.verify_password("pencil"));
            let short =
                StoredCredential::from_salted_password(mechanism, &salted[1..], &salt, 4096);
            assert!(short.is_err(), "a salted password of the wrong length");
            let few = StoredCredential::from_salted_password(mechanism, &salted, &salt, 10);
            assert!(few.is_err(), "too few iterations");
            let no_salt = StoredCredential::from_salted_password(mechanism, &salted, &[], 4096);
            assert!(no_salt.is_err(), "an empty salt");
        }
    }

    #[test]
    fn derive_then_verify() {
        for mechanism in ScramMechanism::ALL {
            let c = StoredCredential::derive(mechanism, "pencil", SCRAM_ITERATIONS_MIN);
            assert!(c.verify_password("pencil"));
            assert!(!c.verify_password("pencil "));
            assert!(!c.verify_password(""));
            assert_eq!(c.stored_key.len(), mechanism.key_bytes());
            assert_eq!(c.salt.len(), SALT_BYTES);
            c.validate().unwrap();
            assert_eq!(StoredCredential::from_wire(&c.to_wire()).unwrap(), c);
        }
    }

    #[test]
    fn salts_differ_and_iterations_are_clamped() {
        let a = StoredCredential::derive(ScramMechanism::Sha256, "x", 1);
        let b = StoredCredential::derive(ScramMechanism::Sha256, "x", 1);
        assert_ne!(a.salt, b.salt);
        assert_ne!(a.stored_key, b.stored_key);
        assert_eq!(a.iterations, SCRAM_ITERATIONS_MIN);
    }

    #[test]
    fn rfc7677_verifier() {
        // The salted password of RFC 7677's example; its proof check is in scram.rs.
        let salt = crypto::b64_decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let c = StoredCredential::derive_with_salt(ScramMechanism::Sha256, "pencil", &salt, 4096);
        assert!(c.verify_password("pencil"));
    }

    #[test]
    fn from_wire_checks_every_field() {
        let good =
            StoredCredential::derive(ScramMechanism::Sha512, "pw", SCRAM_ITERATIONS_MIN).to_wire();
        type Mutation = Box<dyn Fn(&mut m::ScramCredential)>;
        let cases: Vec<(&str, Mutation)> = vec![
            (
                "mechanism",
                Box::new(|w| w.mechanism = "SCRAM-SHA-1".into()),
            ),
            ("short salt", Box::new(|w| w.salt = vec![1; 7].into())),
            ("long salt", Box::new(|w| w.salt = vec![1; 65].into())),
            ("few iterations", Box::new(|w| w.iterations = 4095)),
            ("many iterations", Box::new(|w| w.iterations = 1_000_001)),
            ("stored key", Box::new(|w| w.stored_key.truncate(32))),
            (
                "server key",
                Box::new(|w| w.server_key = vec![0; 65].into()),
            ),
        ];
        for (name, mutate) in cases {
            let mut w = good.clone();
            mutate(&mut w);
            assert!(StoredCredential::from_wire(&w).is_err(), "{name}");
        }
        let mut edge = good.clone();
        edge.salt = vec![9; 8].into();
        edge.iterations = SCRAM_ITERATIONS_MAX;
        StoredCredential::from_wire(&edge).unwrap();
    }

    #[test]
    fn user_names() {
        for ok in [
            "alice",
            "a",
            "svc.orders-1_x@corp",
            "anonymous2",
            "ANONYMOUS.x",
            &"a".repeat(255),
        ] {
            validate_user_name(ok).unwrap();
        }
        for bad in [
            "",
            "node:broker:1",
            "a b",
            "a,b",
            "a=b",
            "é",
            "User:x",
            "ANONYMOUS",
            "anonymous",
            "AnOnYmOuS",
            &"a".repeat(256),
        ] {
            assert!(validate_user_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn mechanism_names() {
        for m in ScramMechanism::ALL {
            assert_eq!(ScramMechanism::from_name(m.name()), Some(m));
        }
        assert_eq!(ScramMechanism::from_name("scram-sha-256"), None);
        assert_eq!(ScramMechanism::from_name("PLAIN"), None);
    }
}
