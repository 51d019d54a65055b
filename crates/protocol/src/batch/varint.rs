//! Zig-zag varints, as Kafka's record format uses them: a signed value is mapped to unsigned
//! (`(n << 1) ^ (n >> 63)`) and written 7 bits at a time, low bits first, with the high bit of
//! each byte set when more bytes follow.

use bytes::BufMut;

/// Longest varint for a 64-bit value.
pub const VARLONG_BYTES_MAX: usize = 10;
/// Longest varint for a 32-bit value.
pub const VARINT_BYTES_MAX: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VarintError {
    #[error("varint runs past the end of its buffer")]
    Truncated,
    #[error("varint is longer than {0} bytes")]
    TooLong(usize),
}

fn zigzag64(n: i64) -> u64 {
    ((n << 1) ^ (n >> 63)) as u64
}

fn unzigzag64(n: u64) -> i64 {
    ((n >> 1) as i64) ^ -((n & 1) as i64)
}

/// Bytes needed to write `n` as a zig-zag varint.
pub fn varlong_len(n: i64) -> usize {
    let mut v = zigzag64(n);
    let mut len = 1;
    while v >= 0x80 {
        v >>= 7;
        len += 1;
    }
    len
}

pub fn varint_len(n: i32) -> usize {
    varlong_len(i64::from(n))
}

pub fn put_varlong(out: &mut impl BufMut, n: i64) {
    let mut v = zigzag64(n);
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

pub fn put_varint(out: &mut impl BufMut, n: i32) {
    put_varlong(out, i64::from(n));
}

/// Reads a zig-zag varlong from the front of `buf`, advancing it.
pub fn get_varlong(buf: &mut &[u8]) -> Result<i64, VarintError> {
    read_unsigned(buf, VARLONG_BYTES_MAX).map(unzigzag64)
}

/// Reads a zig-zag varint (at most 5 bytes, value within i32) from the front of `buf`.
pub fn get_varint(buf: &mut &[u8]) -> Result<i32, VarintError> {
    let v = unzigzag64(read_unsigned(buf, VARINT_BYTES_MAX)?);
    i32::try_from(v).map_err(|_| VarintError::TooLong(VARINT_BYTES_MAX))
}

fn read_unsigned(buf: &mut &[u8], bytes_max: usize) -> Result<u64, VarintError> {
    let mut value: u64 = 0;
    for i in 0..bytes_max {
        let Some((&byte, rest)) = buf.split_first() else {
            return Err(VarintError::Truncated);
        };
        *buf = rest;
        value |= u64::from(byte & 0x7F) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(VarintError::TooLong(bytes_max))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn varlong_round_trips(n: i64) {
            let mut out = Vec::new();
            put_varlong(&mut out, n);
            prop_assert_eq!(out.len(), varlong_len(n));
            let mut slice = &out[..];
            prop_assert_eq!(get_varlong(&mut slice).unwrap(), n);
            prop_assert!(slice.is_empty());
        }

        #[test]
        fn varint_round_trips(n: i32) {
            let mut out = Vec::new();
            put_varint(&mut out, n);
            prop_assert_eq!(out.len(), varint_len(n));
            let mut slice = &out[..];
            prop_assert_eq!(get_varint(&mut slice).unwrap(), n);
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..12)) {
            let _ = get_varlong(&mut &bytes[..]);
            let _ = get_varint(&mut &bytes[..]);
        }
    }

    #[test]
    fn known_encodings_match_kafka() {
        // Kafka: 0 -> 00, -1 -> 01, 1 -> 02, 63 -> 7E, 64 -> 80 01.
        for (n, bytes) in [
            (0i64, &[0x00u8][..]),
            (-1, &[0x01]),
            (1, &[0x02]),
            (63, &[0x7E]),
            (64, &[0x80, 0x01]),
        ] {
            let mut out = Vec::new();
            put_varlong(&mut out, n);
            assert_eq!(out, bytes);
        }
    }

    #[test]
    fn overlong_and_truncated_are_errors() {
        assert_eq!(get_varint(&mut &[0x80u8][..]), Err(VarintError::Truncated));
        assert_eq!(
            get_varint(&mut &[0xFFu8, 0xFF, 0xFF, 0xFF, 0xFF, 0x01][..]),
            Err(VarintError::TooLong(5))
        );
    }
}
