//! Snappy as Kafka clients write it, in one of two framings:
//! - xerial (snappy-java's `SnappyOutputStream`, used by the Java client and kafka-python): a
//!   16-byte header (magic `\x82SNAPPY\0`, version, compatible version), then blocks, each a
//!   4-byte big-endian length and a raw snappy block;
//! - raw: one snappy block, no header (librdkafka writes this; snappy-java reads it too).
//!
//! A raw block states its uncompressed length up front, so each block's length is checked
//! against what is left of the caller's limit before anything is allocated for it.

use super::BatchError;

/// The xerial stream's magic, its first 8 bytes.
const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
/// Magic, then version and minimum compatible version (both 1, big-endian i32).
const XERIAL_HEADER_BYTES: usize = 16;
/// Uncompressed bytes per xerial block: snappy-java's default block size.
const XERIAL_BLOCK_BYTES: usize = 32 * 1024;
/// Each xerial block's compressed length: big-endian i32.
const XERIAL_BLOCK_LENGTH_BYTES: usize = 4;

/// Compresses `input` in xerial framing, which every Kafka client reads.
pub(super) fn compress(input: &[u8]) -> Result<Vec<u8>, BatchError> {
    let mut out = Vec::with_capacity(XERIAL_HEADER_BYTES + input.len() / 2 + 64);
    out.extend_from_slice(&XERIAL_MAGIC);
    out.extend_from_slice(&1i32.to_be_bytes());
    out.extend_from_slice(&1i32.to_be_bytes());
    let mut encoder = snap::raw::Encoder::new();
    for block in input.chunks(XERIAL_BLOCK_BYTES) {
        let compressed = encoder
            .compress_vec(block)
            .map_err(|e| BatchError::Compression(e.to_string()))?;
        let length = i32::try_from(compressed.len())
            .map_err(|_| BatchError::Compression("snappy block over 2 GiB".into()))?;
        out.extend_from_slice(&length.to_be_bytes());
        out.extend_from_slice(&compressed);
    }
    Ok(out)
}

/// Decompresses either framing, failing if the output would exceed `output_bytes_max`.
pub(super) fn decompress(input: &[u8], output_bytes_max: usize) -> Result<Vec<u8>, BatchError> {
    let Some(mut blocks) = input
        .strip_prefix(&XERIAL_MAGIC)
        .and_then(|rest| rest.get(XERIAL_HEADER_BYTES - XERIAL_MAGIC.len()..))
    else {
        let mut out = Vec::new();
        decompress_block(input, output_bytes_max, &mut out)?;
        return Ok(out);
    };
    let mut out = Vec::new();
    while !blocks.is_empty() {
        let (length, rest) = blocks
            .split_first_chunk::<XERIAL_BLOCK_LENGTH_BYTES>()
            .ok_or_else(|| corrupt("a snappy block length is cut short"))?;
        let length = usize::try_from(i32::from_be_bytes(*length))
            .map_err(|_| corrupt("a snappy block length is negative"))?;
        let block = rest
            .get(..length)
            .ok_or_else(|| corrupt("a snappy block is cut short"))?;
        decompress_block(block, output_bytes_max, &mut out)?;
        blocks = &rest[length..];
    }
    Ok(out)
}

/// Appends one raw block's contents to `out`, within `output_bytes_max` in all.
fn decompress_block(
    block: &[u8],
    output_bytes_max: usize,
    out: &mut Vec<u8>,
) -> Result<(), BatchError> {
    let length = snap::raw::decompress_len(block).map_err(|e| corrupt(&e.to_string()))?;
    let start = out.len();
    if length > output_bytes_max.saturating_sub(start) {
        return Err(BatchError::DecompressedTooLarge {
            limit: output_bytes_max,
        });
    }
    out.resize(start + length, 0);
    let written = snap::raw::Decoder::new()
        .decompress(block, &mut out[start..])
        .map_err(|e| corrupt(&e.to_string()))?;
    if written != length {
        return Err(corrupt("a snappy block is shorter than its stated length"));
    }
    Ok(())
}

fn corrupt(why: &str) -> BatchError {
    BatchError::Corrupt(format!("snappy decompression failed: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_blocks_as_librdkafka_writes_them_are_read() {
        let input = b"raw snappy, no framing: librdkafka's way".repeat(50);
        let raw = snap::raw::Encoder::new().compress_vec(&input).unwrap();
        assert_eq!(decompress(&raw, input.len()).unwrap(), input);
    }

    #[test]
    fn xerial_streams_of_several_blocks_are_read() {
        let input: Vec<u8> = (0..100_000u32).map(|i| (i % 97) as u8).collect();
        let framed = compress(&input).unwrap();
        assert_eq!(&framed[..8], &XERIAL_MAGIC);
        assert_eq!(decompress(&framed, input.len()).unwrap(), input);
        assert_eq!(
            decompress(&framed, input.len() - 1),
            Err(BatchError::DecompressedTooLarge {
                limit: input.len() - 1
            })
        );
    }

    #[test]
    fn a_stated_length_over_the_limit_is_refused_before_allocating() {
        // A varint preamble claiming 2^32 - 1 bytes, and nothing behind it.
        let bomb = [0xff, 0xff, 0xff, 0xff, 0x0f];
        assert!(decompress(&bomb, 1 << 20).is_err());
        let mut framed = compress(b"x").unwrap();
        framed.extend_from_slice(&[0, 0, 0, 9]);
        assert!(matches!(
            decompress(&framed, 1 << 20),
            Err(BatchError::Corrupt(_))
        ));
    }
}
