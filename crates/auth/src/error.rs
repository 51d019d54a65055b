//! [`AuthError`]: every way authentication, credential, ACL, quota and token handling can
//! fail, each mapped to a stable wire code.
//!
//! A wrong password and an unknown user are deliberately the same variant with the same text,
//! so that an answer never tells a caller whether a user exists.

use tinymq_protocol::ErrorCode;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// Wrong password or unknown user: one variant so the two cannot be told apart.
    #[error("authentication failed: wrong user name or password")]
    AuthenticationFailed,
    #[error("malformed SCRAM message: {0}")]
    MalformedMessage(String),
    #[error("SCRAM message of {len} bytes is over scram_message_bytes_max ({max})")]
    MessageTooLarge { len: usize, max: usize },
    #[error("SCRAM exchange out of order: {0}")]
    OutOfOrder(&'static str),
    /// The client-final's nonce is not this exchange's (a replayed or spliced message).
    #[error("SCRAM nonce does not match this exchange")]
    NonceMismatch,
    #[error("SCRAM channel binding is not supported (send 'n,' or 'y,', not 'p=')")]
    ChannelBindingUnsupported,
    #[error("unsupported SASL mechanism '{0}' (supported: SCRAM-SHA-256, SCRAM-SHA-512)")]
    UnsupportedMechanism(String),
    /// The client's check of the server-final: the server does not hold the verifier.
    #[error("the server's SCRAM signature does not verify: it does not know this password")]
    ServerSignatureMismatch,
    /// The server-final carried `e=...`.
    #[error("the server refused the SCRAM exchange: {0}")]
    ServerRefused(String),
    #[error("invalid user name '{name}': {reason}")]
    InvalidUserName { name: String, reason: &'static str },
    #[error("invalid principal '{principal}': {reason}")]
    InvalidPrincipal {
        principal: String,
        reason: &'static str,
    },
    #[error("invalid SCRAM credential: {0}")]
    InvalidCredential(String),
    #[error("invalid ACL: {0}")]
    InvalidAcl(String),
    #[error("invalid quota: {0}")]
    InvalidQuota(String),
    #[error("token expired at {expires_unix_ms} ms since the epoch")]
    TokenExpired { expires_unix_ms: u64 },
    #[error("token signature does not verify")]
    TokenForged,
    #[error("malformed token: {0}")]
    TokenMalformed(&'static str),
    #[error("cluster secret {path}: {reason}")]
    ClusterSecret { path: String, reason: String },
    #[error("the operating system's random source failed: {0}")]
    RandomUnavailable(String),
}

impl AuthError {
    /// The wire code a server answers with.
    pub fn code(&self) -> ErrorCode {
        match self {
            AuthError::AuthenticationFailed
            | AuthError::MalformedMessage(_)
            | AuthError::MessageTooLarge { .. }
            | AuthError::OutOfOrder(_)
            | AuthError::NonceMismatch
            | AuthError::ChannelBindingUnsupported
            | AuthError::ServerSignatureMismatch
            | AuthError::ServerRefused(_)
            | AuthError::TokenExpired { .. }
            | AuthError::TokenForged
            | AuthError::TokenMalformed(_) => ErrorCode::AUTHENTICATION_FAILED,
            AuthError::UnsupportedMechanism(_) => ErrorCode::UNSUPPORTED_SASL_MECHANISM,
            AuthError::InvalidUserName { .. }
            | AuthError::InvalidPrincipal { .. }
            | AuthError::InvalidCredential(_)
            | AuthError::InvalidAcl(_)
            | AuthError::InvalidQuota(_) => ErrorCode::INVALID_REQUEST,
            AuthError::ClusterSecret { .. } | AuthError::RandomUnavailable(_) => {
                ErrorCode::UNKNOWN_SERVER_ERROR
            }
        }
    }

    pub(crate) fn malformed(what: impl Into<String>) -> AuthError {
        AuthError::MalformedMessage(what.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_the_contract() {
        assert_eq!(
            AuthError::AuthenticationFailed.code(),
            ErrorCode::AUTHENTICATION_FAILED
        );
        assert_eq!(
            AuthError::UnsupportedMechanism("PLAIN".into()).code(),
            ErrorCode::UNSUPPORTED_SASL_MECHANISM
        );
        assert_eq!(
            AuthError::InvalidAcl("x".into()).code(),
            ErrorCode::INVALID_REQUEST
        );
        assert_eq!(
            AuthError::TokenForged.code(),
            ErrorCode::AUTHENTICATION_FAILED
        );
    }
}
