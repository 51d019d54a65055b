//! Bearer tokens for the HTTP API: `base64url(PRINCIPAL|EXPIRY_UNIX_MS) . base64url(HMAC)`,
//! where the HMAC-SHA-256 is keyed by [`crate::ClusterSecret::token_key`], so any node of the
//! cluster checks a token any other issued. A token is checked in constant time before its
//! contents are believed; it cannot be revoked before it expires, so keep lifetimes short.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::crypto;
use crate::error::AuthError;
use crate::principal::Principal;

/// Longest token [`verify_token`] reads.
pub const TOKEN_BYTES_MAX: usize = 1024;

fn mac(key: &[u8; 32], payload: &[u8]) -> Hmac<Sha256> {
    // HMAC accepts keys of every length, so this cannot fail.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key");
    mac.update(b"tinymq token v1\0");
    mac.update(payload);
    mac
}

/// A token naming `principal` until `expires_unix_ms`.
pub fn issue_token(key: &[u8; 32], principal: &Principal, expires_unix_ms: u64) -> String {
    let payload = format!("{principal}|{expires_unix_ms}");
    let tag = mac(key, payload.as_bytes()).finalize().into_bytes();
    format!(
        "{}.{}",
        crypto::b64url(payload.as_bytes()),
        crypto::b64url(&tag)
    )
}

/// The principal a token names, if `key` signed it and it has not expired at `now_unix_ms`.
pub fn verify_token(key: &[u8; 32], token: &str, now_unix_ms: u64) -> Result<Principal, AuthError> {
    if token.len() > TOKEN_BYTES_MAX {
        return Err(AuthError::TokenMalformed(
            "longer than token_bytes_max (1024)",
        ));
    }
    let (payload, tag) = token
        .split_once('.')
        .ok_or(AuthError::TokenMalformed("expected PAYLOAD.SIGNATURE"))?;
    let payload = crypto::b64url_decode(payload)
        .ok_or(AuthError::TokenMalformed("payload is not base64url"))?;
    let tag = crypto::b64url_decode(tag)
        .ok_or(AuthError::TokenMalformed("signature is not base64url"))?;
    mac(key, &payload)
        .verify_slice(&tag)
        .map_err(|_| AuthError::TokenForged)?;
    // Signed by us, so the rest is well formed unless the format changed.
    let payload = std::str::from_utf8(&payload)
        .map_err(|_| AuthError::TokenMalformed("payload not UTF-8"))?;
    let (principal, expires) = payload
        .rsplit_once('|')
        .ok_or(AuthError::TokenMalformed("payload has no expiry"))?;
    let expires_unix_ms: u64 = expires
        .parse()
        .map_err(|_| AuthError::TokenMalformed("expiry is not a number"))?;
    if now_unix_ms >= expires_unix_ms {
        return Err(AuthError::TokenExpired { expires_unix_ms });
    }
    Principal::parse(principal)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::principal::NodeKind;

    const KEY: [u8; 32] = [3; 32];

    #[test]
    fn issue_then_verify() {
        for p in [
            Principal::user("alice"),
            Principal::user("a|b"),
            Principal::node(NodeKind::Meta, 2),
        ] {
            let token = issue_token(&KEY, &p, 2_000);
            assert!(
                !token.contains(['+', '/', '=', ' ']),
                "URL and header safe: {token}"
            );
            assert_eq!(verify_token(&KEY, &token, 1_999).unwrap(), p);
        }
    }

    #[test]
    fn expired() {
        let token = issue_token(&KEY, &Principal::user("alice"), 2_000);
        assert_eq!(
            verify_token(&KEY, &token, 2_000).unwrap_err(),
            AuthError::TokenExpired {
                expires_unix_ms: 2_000
            }
        );
        assert!(verify_token(&KEY, &token, u64::MAX).is_err());
    }

    #[test]
    fn forged() {
        let token = issue_token(&KEY, &Principal::user("alice"), 2_000);
        assert_eq!(
            verify_token(&[4; 32], &token, 0).unwrap_err(),
            AuthError::TokenForged
        );
        // Another principal or a later expiry under the same signature.
        let (_, tag) = token.split_once('.').unwrap();
        for payload in ["User:admin|2000", "User:alice|99999999"] {
            let forged = format!("{}.{tag}", crypto::b64url(payload.as_bytes()));
            assert_eq!(
                verify_token(&KEY, &forged, 0).unwrap_err(),
                AuthError::TokenForged
            );
        }
        let truncated = &token[..token.len() - 2];
        assert!(verify_token(&KEY, truncated, 0).is_err());
    }

    #[test]
    fn malformed() {
        for bad in [
            "",
            ".",
            "abc",
            "a.b.c",
            "!!.AAAA",
            "AAAA.!!",
            &"a".repeat(2000),
        ] {
            let err = verify_token(&KEY, bad, 0).unwrap_err();
            assert!(
                matches!(err, AuthError::TokenMalformed(_) | AuthError::TokenForged),
                "{bad}: {err}"
            );
            assert_eq!(
                err.code(),
                tinymq_protocol::ErrorCode::AUTHENTICATION_FAILED
            );
        }
        // Correctly signed garbage is still refused, without a panic.
        for payload in ["no-expiry", "User:alice|soon", "alice|5"] {
            let tag = mac(&KEY, payload.as_bytes()).finalize().into_bytes();
            let token = format!(
                "{}.{}",
                crypto::b64url(payload.as_bytes()),
                crypto::b64url(&tag)
            );
            assert!(verify_token(&KEY, &token, 0).is_err(), "{payload}");
        }
    }
}
