//! Bearer tokens for the HTTP API: `base64url(PRINCIPAL|EXPIRY_UNIX_MS) . base64url(HMAC)`,
//! where the HMAC-SHA-256 is keyed by [`crate::ClusterSecret::token_key`], so any node of the
//! cluster checks a token any other issued. A token is checked in constant time before its
//! contents are believed; it cannot be revoked before it expires, so keep lifetimes short.
//!
//! A bound token ([`issue_bound_token`], `base64url(BINDING_HEX|PRINCIPAL|EXPIRY_UNIX_MS)`,
//! signed under its own domain so neither kind passes for the other) also carries a binding
//! the issuer chose, such as a digest of the user's current credential: the verifier compares
//! it with the current one, so the token dies with the user or the password it was issued for.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::crypto;
use crate::error::AuthError;
use crate::principal::Principal;

/// Longest token [`verify_token`] reads.
pub const TOKEN_BYTES_MAX: usize = 1024;

/// Longest binding [`issue_bound_token`] carries (it is a digest, not data).
pub const TOKEN_BINDING_BYTES_MAX: usize = 64;

const DOMAIN_V1: &[u8] = b"tinymq token v1\0";
const DOMAIN_BOUND: &[u8] = b"tinymq bound token v2\0";

fn domain_mac(key: &[u8; 32], domain: &[u8], payload: &[u8]) -> Hmac<Sha256> {
    // HMAC accepts keys of every length, so this cannot fail.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key");
    mac.update(domain);
    mac.update(payload);
    mac
}

/// A token naming `principal` until `expires_unix_ms`.
pub fn issue_token(key: &[u8; 32], principal: &Principal, expires_unix_ms: u64) -> String {
    sign(key, DOMAIN_V1, format!("{principal}|{expires_unix_ms}"))
}

/// A token naming `principal` until `expires_unix_ms`, good only while the verifier's
/// current binding for it is still `binding` (at most [`TOKEN_BINDING_BYTES_MAX`] bytes; a
/// longer one is cut, which the verifier must then match).
pub fn issue_bound_token(
    key: &[u8; 32],
    principal: &Principal,
    binding: &[u8],
    expires_unix_ms: u64,
) -> String {
    let binding = &binding[..binding.len().min(TOKEN_BINDING_BYTES_MAX)];
    let hex: String = binding.iter().map(|b| format!("{b:02x}")).collect();
    sign(
        key,
        DOMAIN_BOUND,
        format!("{hex}|{principal}|{expires_unix_ms}"),
    )
}

fn sign(key: &[u8; 32], domain: &[u8], payload: String) -> String {
    let tag = domain_mac(key, domain, payload.as_bytes())
        .finalize()
        .into_bytes();
    format!(
        "{}.{}",
        crypto::b64url(payload.as_bytes()),
        crypto::b64url(&tag)
    )
}

/// The principal a token from [`issue_bound_token`] names and the binding it carries, if
/// `key` signed it and it has not expired at `now_unix_ms`. The caller compares the binding.
pub fn verify_bound_token(
    key: &[u8; 32],
    token: &str,
    now_unix_ms: u64,
) -> Result<(Principal, Vec<u8>), AuthError> {
    let payload = open(key, DOMAIN_BOUND, token)?;
    let (hex, rest) = payload
        .split_once('|')
        .ok_or(AuthError::TokenMalformed("payload has no binding"))?;
    let binding = unhex(hex).ok_or(AuthError::TokenMalformed("binding is not hex"))?;
    let principal = unexpired(rest, now_unix_ms)?;
    Ok((principal, binding))
}

fn unhex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) || hex.len() > 2 * TOKEN_BINDING_BYTES_MAX {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The principal a token names, if `key` signed it and it has not expired at `now_unix_ms`.
pub fn verify_token(key: &[u8; 32], token: &str, now_unix_ms: u64) -> Result<Principal, AuthError> {
    let payload = open(key, DOMAIN_V1, token)?;
    unexpired(&payload, now_unix_ms)
}

/// The signed payload of `token`, once its signature under `domain` is checked.
fn open(key: &[u8; 32], domain: &[u8], token: &str) -> Result<String, AuthError> {
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
    domain_mac(key, domain, &payload)
        .verify_slice(&tag)
        .map_err(|_| AuthError::TokenForged)?;
    // Signed by us, so the rest is well formed unless the format changed.
    String::from_utf8(payload).map_err(|_| AuthError::TokenMalformed("payload not UTF-8"))
}

/// The principal of a `PRINCIPAL|EXPIRY_UNIX_MS` payload, unless it expired.
fn unexpired(payload: &str, now_unix_ms: u64) -> Result<Principal, AuthError> {
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
    fn bound_tokens_carry_their_binding_and_pass_for_no_other_kind() {
        let alice = Principal::user("a|b");
        let token = issue_bound_token(&KEY, &alice, &[0, 0xab, 0xff], 2_000);
        let (p, binding) = verify_bound_token(&KEY, &token, 1_999).unwrap();
        assert_eq!((p, binding), (alice.clone(), vec![0, 0xab, 0xff]));
        assert!(matches!(
            verify_bound_token(&KEY, &token, 2_000),
            Err(AuthError::TokenExpired { .. })
        ));
        // Neither kind verifies as the other, nor under another key.
        assert_eq!(
            verify_token(&KEY, &token, 0).unwrap_err(),
            AuthError::TokenForged
        );
        let plain = issue_token(&KEY, &alice, 2_000);
        assert!(verify_bound_token(&KEY, &plain, 0).is_err());
        assert!(verify_bound_token(&[4; 32], &token, 0).is_err());
        // An empty binding, and a long one cut to the maximum.
        let empty = issue_bound_token(&KEY, &alice, &[], 2_000);
        assert_eq!(
            verify_bound_token(&KEY, &empty, 0).unwrap().1,
            Vec::<u8>::new()
        );
        let long = issue_bound_token(&KEY, &alice, &[1; 100], 2_000);
        assert_eq!(
            verify_bound_token(&KEY, &long, 0).unwrap().1,
            vec![1; TOKEN_BINDING_BYTES_MAX]
        );
        assert_eq!(unhex("0g"), None);
        assert_eq!(unhex("abc"), None);
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
            let tag = domain_mac(&KEY, DOMAIN_V1, payload.as_bytes())
                .finalize()
                .into_bytes();
            let token = format!(
                "{}.{}",
                crypto::b64url(payload.as_bytes()),
                crypto::b64url(&tag)
            );
            assert!(verify_token(&KEY, &token, 0).is_err(), "{payload}");
        }
    }
}
