//! The primitives SCRAM, the node verifiers and tokens share: H, HMAC and Hi (PBKDF2) for
//! either SCRAM hash, base64, and the operating system's random source.

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};

use crate::credential::ScramMechanism;
use crate::error::AuthError;

pub(crate) fn hash(m: ScramMechanism, data: &[u8]) -> Vec<u8> {
    match m {
        ScramMechanism::Sha256 => Sha256::digest(data).to_vec(),
        ScramMechanism::Sha512 => Sha512::digest(data).to_vec(),
    }
}

pub(crate) fn hmac(m: ScramMechanism, key: &[u8], data: &[u8]) -> Vec<u8> {
    match m {
        ScramMechanism::Sha256 => hmac_with::<Hmac<Sha256>>(key, data),
        ScramMechanism::Sha512 => hmac_with::<Hmac<Sha512>>(key, data),
    }
}

fn hmac_with<M: Mac + hmac::digest::KeyInit>(key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC accepts keys of every length (long ones are hashed), so this cannot fail.
    let mut mac = <M as Mac>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

/// HMAC-SHA-256 with a 32-byte result, for tokens and derived keys.
pub(crate) fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(&hmac(ScramMechanism::Sha256, key, data));
    out
}

/// RFC 5802's Hi(): PBKDF2 with HMAC of the mechanism's hash, one output block.
pub(crate) fn hi(m: ScramMechanism, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
    let mut out = vec![0u8; m.key_bytes()];
    match m {
        ScramMechanism::Sha256 => {
            pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out)
        }
        ScramMechanism::Sha512 => {
            pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out)
        }
    }
    out
}

pub(crate) fn b64(data: &[u8]) -> String {
    STANDARD.encode(data)
}

/// Strict standard base64 with padding, as SCRAM spells it.
pub(crate) fn b64_decode(text: &str) -> Option<Vec<u8>> {
    STANDARD.decode(text).ok()
}

pub(crate) fn b64url(data: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(data)
}

pub(crate) fn b64url_decode(text: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(text).ok()
}

/// Bytes from the operating system's random source, for paths a peer can reach: its failure
/// fails the request instead of the process.
pub(crate) fn try_random_bytes<const N: usize>() -> Result<[u8; N], AuthError> {
    let mut out = [0u8; N];
    getrandom::fill(&mut out).map_err(|e| AuthError::RandomUnavailable(e.to_string()))?;
    Ok(out)
}

/// Bytes from the operating system's random source, for local calls (deriving a credential,
/// starting a client exchange, creating the cluster secret). Its failure means the machine
/// cannot do cryptography at all, so it stops the process rather than going on with weak
/// secrets.
pub(crate) fn random_bytes<const N: usize>() -> [u8; N] {
    match try_random_bytes() {
        Ok(bytes) => bytes,
        Err(e) => panic!("{e}"),
    }
}

pub(crate) fn hex(data: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(data.len() * 2);
    for b in data {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

pub(crate) fn hex_decode(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| {
        char::from(c)
            .to_digit(16)
            .and_then(|d| u8::try_from(d).ok())
    };
    text.as_bytes()
        .chunks_exact(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_refusals() {
        let data = [0u8, 1, 0xab, 0xff];
        assert_eq!(hex(&data), "0001abff");
        assert_eq!(hex_decode("0001ABff").unwrap(), data);
        assert!(hex_decode("abc").is_none());
        assert!(hex_decode("zz").is_none());
        assert!(hex_decode("+1").is_none());
    }
}
