//! Compression codecs for the records section of a batch (attributes bits 0..=2).
//!
//! Codes follow Kafka: 0 none, 1 gzip, 2 snappy, 3 lz4 (LZ4 frame format), 4 zstd. Every one
//! is read and written, since Kafka clients produce all five (see [`snappy`] for the two
//! snappy framings they use). Decompression is always bounded by the caller's limit, so a
//! small batch cannot expand into an unbounded allocation (a decompression bomb).

use std::io::{Read, Write};

use super::BatchError;

mod snappy;

/// zstd window limit for decompression (2^23 = 8 MiB): the decoder refuses frames that would
/// need a larger window, which bounds its memory whatever the frame header claims.
const ZSTD_WINDOW_LOG_MAX: u32 = 23;
/// zstd level used by producers: zstd's own default, a good speed/ratio balance.
const ZSTD_LEVEL: i32 = 3;
/// gzip level used by producers: zlib's default (6), as Kafka's Java client uses.
const GZIP_LEVEL: u32 = 6;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Compression {
    #[default]
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Compression {
    pub fn from_attributes(attributes: i16) -> Result<Compression, BatchError> {
        match attributes & 0x07 {
            0 => Ok(Compression::None),
            1 => Ok(Compression::Gzip),
            2 => Ok(Compression::Snappy),
            3 => Ok(Compression::Lz4),
            4 => Ok(Compression::Zstd),
            other => Err(BatchError::UnsupportedCompression(other as u8)),
        }
    }

    pub fn attribute_bits(self) -> i16 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }

    /// Parses the names users type: `none`, `gzip`, `snappy`, `lz4`, `zstd`.
    pub fn from_name(name: &str) -> Option<Compression> {
        match name {
            "none" => Some(Compression::None),
            "gzip" => Some(Compression::Gzip),
            "snappy" => Some(Compression::Snappy),
            "lz4" => Some(Compression::Lz4),
            "zstd" => Some(Compression::Zstd),
            _ => None,
        }
    }

    pub fn compress(self, input: &[u8]) -> Result<Vec<u8>, BatchError> {
        match self {
            Compression::None => Ok(input.to_vec()),
            Compression::Lz4 => {
                let mut encoder = lz4_flex::frame::FrameEncoder::new(Vec::new());
                encoder.write_all(input).map_err(compress_error)?;
                encoder
                    .finish()
                    .map_err(|e| BatchError::Compression(e.to_string()))
            }
            Compression::Zstd => zstd::bulk::compress(input, ZSTD_LEVEL).map_err(compress_error),
            Compression::Gzip => {
                let level = flate2::Compression::new(GZIP_LEVEL);
                let mut encoder = flate2::write::GzEncoder::new(Vec::new(), level);
                encoder.write_all(input).map_err(compress_error)?;
                encoder.finish().map_err(compress_error)
            }
            Compression::Snappy => snappy::compress(input),
        }
    }

    /// Decompresses `input`, failing if the output would exceed `output_bytes_max`.
    pub(crate) fn decompress(
        self,
        input: &[u8],
        output_bytes_max: usize,
    ) -> Result<Vec<u8>, BatchError> {
        match self {
            Compression::None => Ok(input.to_vec()),
            Compression::Lz4 => {
                read_bounded(lz4_flex::frame::FrameDecoder::new(input), output_bytes_max)
            }
            Compression::Zstd => {
                let mut decoder =
                    zstd::stream::read::Decoder::with_buffer(input).map_err(decompress_error)?;
                decoder
                    .window_log_max(ZSTD_WINDOW_LOG_MAX)
                    .map_err(decompress_error)?;
                read_bounded(decoder, output_bytes_max)
            }
            // Several gzip members back to back read as one stream, as Java's GZIPInputStream
            // reads them.
            Compression::Gzip => {
                read_bounded(flate2::read::MultiGzDecoder::new(input), output_bytes_max)
            }
            Compression::Snappy => snappy::decompress(input, output_bytes_max),
        }
    }
}

fn read_bounded(reader: impl Read, output_bytes_max: usize) -> Result<Vec<u8>, BatchError> {
    let mut out = Vec::new();
    // One byte past the limit tells "exactly at the limit" from "over it".
    reader
        .take(output_bytes_max as u64 + 1)
        .read_to_end(&mut out)
        .map_err(decompress_error)?;
    if out.len() > output_bytes_max {
        return Err(BatchError::DecompressedTooLarge {
            limit: output_bytes_max,
        });
    }
    Ok(out)
}

fn compress_error(e: std::io::Error) -> BatchError {
    BatchError::Compression(e.to_string())
}

fn decompress_error(e: std::io::Error) -> BatchError {
    BatchError::Corrupt(format!("decompression failed: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    #[test]
    fn every_codec_round_trips() {
        let input: Vec<u8> = (0..10_000u32)
            .flat_map(|i| (i % 251).to_be_bytes())
            .collect();
        for codec in ALL {
            let compressed = codec.compress(&input).unwrap();
            assert_eq!(codec.decompress(&compressed, input.len()).unwrap(), input);
        }
    }

    /// The producer cuts compressed batches `256 + limit / 1024` bytes below the limit
    /// (`compression_room` in the client); incompressible data must not grow more than that.
    #[test]
    fn incompressible_data_grows_by_less_than_a_thousandth() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for len in [1000usize, 64 * 1024, 1 << 20, 16 << 20] {
            let input: Vec<u8> = (0..len)
                .map(|_| {
                    // xorshift: bytes no codec can shrink
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            for codec in &ALL[1..] {
                let compressed = codec.compress(&input).unwrap();
                assert!(
                    compressed.len() <= len + 256 + len / 1024,
                    "{codec:?} made {len} random bytes {}",
                    compressed.len()
                );
            }
        }
    }

    #[test]
    fn a_bomb_is_refused_at_the_limit() {
        let input = vec![0u8; 10 * 1024 * 1024];
        for codec in &ALL[1..] {
            let compressed = codec.compress(&input).unwrap();
            assert!(
                compressed.len() < 600 * 1024,
                "{codec:?} compresses zeros well"
            );
            assert_eq!(
                codec.decompress(&compressed, 1024 * 1024),
                Err(BatchError::DecompressedTooLarge { limit: 1024 * 1024 })
            );
        }
    }

    #[test]
    fn an_unknown_codec_is_refused_clearly() {
        assert_eq!(
            Compression::from_attributes(7),
            Err(BatchError::UnsupportedCompression(7))
        );
        for codec in ALL {
            assert_eq!(Compression::from_name(codec.name()), Some(codec));
            assert_eq!(
                Compression::from_attributes(codec.attribute_bits()),
                Ok(codec)
            );
        }
    }

    #[test]
    fn several_gzip_members_read_as_one_stream() {
        let mut both = Compression::Gzip.compress(b"hello, ").unwrap();
        both.extend(Compression::Gzip.compress(b"world").unwrap());
        assert_eq!(
            Compression::Gzip.decompress(&both, 100).unwrap(),
            b"hello, world"
        );
    }

    #[test]
    fn corrupt_input_is_an_error_not_a_panic() {
        for codec in &ALL[1..] {
            let mut compressed = codec.compress(&[7u8; 5000]).unwrap();
            let middle = compressed.len() / 2;
            compressed.truncate(middle);
            assert!(codec.decompress(&compressed, 1 << 20).is_err(), "{codec:?}");
            assert!(codec.decompress(&[0xff; 40], 1 << 20).is_err(), "{codec:?}");
        }
    }
}
