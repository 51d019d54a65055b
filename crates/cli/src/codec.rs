//! How bytes travel in `consume --format json` and `produce --input-format json` lines: as
//! UTF-8 text, standard base64 (RFC 4648, padded) or lowercase hex, with the choice named in
//! an `*_encoding` field next to each value so any bytes round-trip.

use serde_json::Value;

/// An encoding of bytes as JSON text; also the `--value-format` choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Encoding {
    /// UTF-8 text (in JSON: base64 for bytes that are not UTF-8).
    Utf8,
    /// Standard base64 with padding (RFC 4648).
    Base64,
    /// Lowercase hex, two digits a byte.
    Hex,
}

impl Encoding {
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Utf8 => "utf8",
            Encoding::Base64 => "base64",
            Encoding::Hex => "hex",
        }
    }

    pub fn from_name(name: &str) -> Option<Encoding> {
        match name {
            "utf8" => Some(Encoding::Utf8),
            "base64" => Some(Encoding::Base64),
            "hex" => Some(Encoding::Hex),
            _ => None,
        }
    }
}

/// `bytes` as text in `wanted`, falling back to base64 when `wanted` is UTF-8 and the bytes
/// are not; returns the encoding used.
pub fn encode(bytes: &[u8], wanted: Encoding) -> (String, Encoding) {
    match wanted {
        Encoding::Utf8 => match std::str::from_utf8(bytes) {
            Ok(text) => (text.to_string(), Encoding::Utf8),
            Err(_) => (base64(bytes), Encoding::Base64),
        },
        Encoding::Base64 => (base64(bytes), Encoding::Base64),
        Encoding::Hex => (hex(bytes), Encoding::Hex),
    }
}

/// A JSON value (string or null) and the name of its encoding.
pub fn to_json(bytes: Option<&[u8]>, wanted: Encoding) -> (Value, &'static str) {
    match bytes {
        Some(b) => {
            let (text, used) = encode(b, wanted);
            (Value::String(text), used.name())
        }
        // Null has no bytes to encode; the field still says what a value would use.
        None => (Value::Null, wanted.name()),
    }
}

/// Text in `encoding` back to bytes.
pub fn decode(text: &str, encoding: Encoding) -> Result<Vec<u8>, String> {
    match encoding {
        Encoding::Utf8 => Ok(text.as_bytes().to_vec()),
        Encoding::Base64 => unbase64(text),
        Encoding::Hex => unhex(text),
    }
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

pub fn base64(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(BASE64[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn unbase64(text: &str) -> Result<Vec<u8>, String> {
    let text = text.as_bytes();
    if !text.len().is_multiple_of(4) {
        return Err("base64 text must be a multiple of 4 characters long (padded)".into());
    }
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let last = text.len() / 4;
    for (index, quad) in text.chunks(4).enumerate() {
        let pad = quad.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && index + 1 != last) {
            return Err("base64 padding '=' only at the end, at most two".into());
        }
        let mut n = 0u32;
        for &c in &quad[..4 - pad] {
            let v = BASE64
                .iter()
                .position(|&a| a == c)
                .ok_or_else(|| format!("{:?} is not a base64 character", char::from(c)))?;
            n = n << 6 | v as u32;
        }
        n <<= 6 * pad as u32;
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    Ok(out)
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Result<Vec<u8>, String> {
    if !text.len().is_multiple_of(2) {
        return Err("hex text must have an even number of digits".into());
    }
    text.as_bytes()
        .chunks(2)
        .map(|pair| {
            std::str::from_utf8(pair)
                .ok()
                .and_then(|p| u8::from_str_radix(p, 16).ok())
                .ok_or_else(|| format!("{:?} is not a hex byte", String::from_utf8_lossy(pair)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_encoding_round_trips_and_matches_the_rfc_examples() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), encoded);
            assert_eq!(unbase64(encoded).unwrap(), plain.as_bytes());
        }
        let all: Vec<u8> = (0..=255).collect();
        for e in [Encoding::Utf8, Encoding::Base64, Encoding::Hex] {
            let (text, used) = encode(&all, e);
            assert_ne!(used, Encoding::Utf8, "not UTF-8: never sent as text");
            assert_eq!(decode(&text, used).unwrap(), all);
        }
        assert_eq!(encode("é".as_bytes(), Encoding::Utf8).1, Encoding::Utf8);
        assert!(unbase64("Zg=").is_err());
        assert!(unbase64("Zg==Zg==").is_err());
        assert!(unbase64("Z!==").is_err());
        assert!(unhex("abc").is_err());
        assert!(unhex("zz").is_err());
    }
}
