//! The 12-byte frame header and the sans-IO frame decoder.
//!
//! Every frame on a tinymq connection is a header followed by `body_len` bytes of body:
//!
//! ```text
//! offset size field       meaning
//!      0    2 magic       0x544D ("TM"), big-endian
//!      2    1 version     frame format version, FRAME_VERSION
//!      3    1 kind        bit 7 set on responses; bits 0..=6 are the operation code
//!      4    4 message_id  chosen by the requester, echoed in the response
//!      8    4 body_len    length of the body that follows, big-endian
//! ```
//!
//! The decoder only looks at bytes: it answers "complete frame", "need more bytes" or
//! "invalid", and it checks `body_len` against the connection's limit before anyone allocates
//! room for the body. It never panics on any input.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// `"TM"` in ASCII: the first two bytes of every frame.
pub const FRAME_MAGIC: u16 = 0x544D;
/// The frame format this crate reads and writes.
pub const FRAME_VERSION: u8 = 1;
/// Size of the fixed frame header in bytes.
pub const FRAME_HEADER_BYTES: usize = 12;
/// Default limit on a frame body once the handshake has succeeded.
pub const FRAME_BODY_BYTES_MAX_DEFAULT: u32 = 16 * 1024 * 1024;
/// Default limit on a frame body before the handshake has succeeded: small, so that an
/// unauthenticated peer cannot make the server reserve much memory.
pub const FRAME_BODY_BYTES_MAX_PRE_HANDSHAKE: u32 = 64 * 1024;
/// Bit of `kind` that marks a response.
pub const KIND_RESPONSE_BIT: u8 = 0x80;

const _: () = assert!(FRAME_HEADER_BYTES == 2 + 1 + 1 + 4 + 4);
const _: () = assert!(FRAME_BODY_BYTES_MAX_PRE_HANDSHAKE <= FRAME_BODY_BYTES_MAX_DEFAULT);

/// The fixed part of every frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FrameHeader {
    pub version: u8,
    /// Bit 7: response; bits 0..=6: operation code.
    pub kind: u8,
    pub message_id: u32,
    pub body_len: u32,
}

impl FrameHeader {
    pub fn request(op_code: u8, message_id: u32, body_len: u32) -> FrameHeader {
        assert!(
            op_code & KIND_RESPONSE_BIT == 0,
            "operation codes are 7 bits"
        );
        FrameHeader {
            version: FRAME_VERSION,
            kind: op_code,
            message_id,
            body_len,
        }
    }

    pub fn response(op_code: u8, message_id: u32, body_len: u32) -> FrameHeader {
        assert!(
            op_code & KIND_RESPONSE_BIT == 0,
            "operation codes are 7 bits"
        );
        FrameHeader {
            version: FRAME_VERSION,
            kind: op_code | KIND_RESPONSE_BIT,
            message_id,
            body_len,
        }
    }

    pub fn is_response(&self) -> bool {
        self.kind & KIND_RESPONSE_BIT != 0
    }

    /// The operation code without the response bit.
    pub fn op_code(&self) -> u8 {
        self.kind & !KIND_RESPONSE_BIT
    }

    pub fn encode(&self, out: &mut impl BufMut) {
        out.put_u16(FRAME_MAGIC);
        out.put_u8(self.version);
        out.put_u8(self.kind);
        out.put_u32(self.message_id);
        out.put_u32(self.body_len);
    }

    pub fn to_bytes(&self) -> [u8; FRAME_HEADER_BYTES] {
        let mut out = [0u8; FRAME_HEADER_BYTES];
        self.encode(&mut &mut out[..]);
        out
    }

    /// Parses a header from exactly [`FRAME_HEADER_BYTES`] bytes, checking magic and version.
    /// The body limit is checked by [`FrameDecoder`], which knows the connection's state.
    pub fn parse(bytes: &[u8; FRAME_HEADER_BYTES]) -> Result<FrameHeader, FrameError> {
        let mut buf = &bytes[..];
        let magic = buf.get_u16();
        if magic != FRAME_MAGIC {
            return Err(FrameError::BadMagic { found: magic });
        }
        let header = FrameHeader {
            version: buf.get_u8(),
            kind: buf.get_u8(),
            message_id: buf.get_u32(),
            body_len: buf.get_u32(),
        };
        if header.version != FRAME_VERSION {
            return Err(FrameError::UnsupportedVersion {
                found: header.version,
                supported: FRAME_VERSION,
            });
        }
        Ok(header)
    }
}

/// Why a byte stream is not a valid sequence of frames. Each of these ends the connection:
/// once framing is lost there is no safe way to find the next frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("bad frame magic 0x{found:04X} (expected 0x{FRAME_MAGIC:04X}): not a tinymq peer")]
    BadMagic { found: u16 },
    #[error("unsupported frame version {found} (this peer speaks {supported})")]
    UnsupportedVersion { found: u8, supported: u8 },
    #[error("frame body of {body_len} bytes exceeds the limit of {limit} bytes")]
    BodyTooLarge { body_len: u32, limit: u32 },
}

/// A whole frame: its header and its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub header: FrameHeader,
    pub body: Bytes,
}

impl Frame {
    /// Encodes header and body into one buffer.
    pub fn encode(&self, out: &mut BytesMut) {
        assert_eq!(
            self.header.body_len as usize,
            self.body.len(),
            "body_len matches body"
        );
        out.reserve(FRAME_HEADER_BYTES + self.body.len());
        self.header.encode(out);
        out.put_slice(&self.body);
    }
}

/// What the decoder found at the front of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded {
    /// A complete frame: its header; the frame occupies `FRAME_HEADER_BYTES + body_len` bytes.
    Complete(FrameHeader),
    /// Not enough bytes yet; the frame needs `total_bytes` bytes in all (known once the header
    /// has arrived, and then already checked against the limit).
    NeedMore { total_bytes: usize },
}

/// Sans-IO frame decoder with a body limit that the connection can raise after its handshake.
#[derive(Debug, Clone)]
pub struct FrameDecoder {
    body_bytes_max: u32,
}

impl FrameDecoder {
    pub fn new(body_bytes_max: u32) -> FrameDecoder {
        FrameDecoder { body_bytes_max }
    }

    /// A decoder for a fresh connection: the pre-handshake limit applies.
    pub fn pre_handshake() -> FrameDecoder {
        FrameDecoder::new(FRAME_BODY_BYTES_MAX_PRE_HANDSHAKE)
    }

    pub fn body_bytes_max(&self) -> u32 {
        self.body_bytes_max
    }

    pub fn set_body_bytes_max(&mut self, body_bytes_max: u32) {
        self.body_bytes_max = body_bytes_max;
    }

    /// Looks at the front of `buf` without consuming it.
    pub fn peek(&self, buf: &[u8]) -> Result<Decoded, FrameError> {
        let Some(header_bytes) = buf.first_chunk::<FRAME_HEADER_BYTES>() else {
            // Reject a wrong magic as soon as its two bytes are here, so a garbage peer is
            // cut off before it sends a whole header.
            if buf.len() >= 2 {
                let magic = u16::from_be_bytes([buf[0], buf[1]]);
                if magic != FRAME_MAGIC {
                    return Err(FrameError::BadMagic { found: magic });
                }
            }
            return Ok(Decoded::NeedMore {
                total_bytes: FRAME_HEADER_BYTES,
            });
        };
        let header = FrameHeader::parse(header_bytes)?;
        if header.body_len > self.body_bytes_max {
            return Err(FrameError::BodyTooLarge {
                body_len: header.body_len,
                limit: self.body_bytes_max,
            });
        }
        let total_bytes = FRAME_HEADER_BYTES + header.body_len as usize;
        if buf.len() < total_bytes {
            return Ok(Decoded::NeedMore { total_bytes });
        }
        Ok(Decoded::Complete(header))
    }

    /// Takes one complete frame off the front of `buf`, if there is one. The body shares
    /// `buf`'s allocation (no copy).
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        match self.peek(buf)? {
            Decoded::NeedMore { .. } => Ok(None),
            Decoded::Complete(header) => {
                buf.advance(FRAME_HEADER_BYTES);
                let body = buf.split_to(header.body_len as usize).freeze();
                Ok(Some(Frame { header, body }))
            }
        }
    }
}

impl Default for FrameDecoder {
    fn default() -> FrameDecoder {
        FrameDecoder::new(FRAME_BODY_BYTES_MAX_DEFAULT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frame_strategy() -> impl Strategy<Value = Frame> {
        (
            0u8..=0x7F,
            any::<bool>(),
            any::<u32>(),
            proptest::collection::vec(any::<u8>(), 0..300),
        )
            .prop_map(|(op, response, message_id, body)| {
                let len = body.len() as u32;
                let header = if response {
                    FrameHeader::response(op, message_id, len)
                } else {
                    FrameHeader::request(op, message_id, len)
                };
                Frame {
                    header,
                    body: Bytes::from(body),
                }
            })
    }

    fn encode_all(frames: &[Frame]) -> Vec<u8> {
        let mut out = BytesMut::new();
        for frame in frames {
            frame.encode(&mut out);
        }
        out.to_vec()
    }

    proptest! {
        #[test]
        fn header_round_trips(op in 0u8..=0x7F, response: bool, id: u32, len: u32) {
            let header = if response {
                FrameHeader::response(op, id, len)
            } else {
                FrameHeader::request(op, id, len)
            };
            let bytes = header.to_bytes();
            let parsed = FrameHeader::parse(&bytes).unwrap();
            prop_assert_eq!(parsed, header);
            prop_assert_eq!(parsed.op_code(), op);
            prop_assert_eq!(parsed.is_response(), response);
        }

        /// A stream of frames fed in two pieces, split at every byte, decodes to the same
        /// frames as the whole stream.
        #[test]
        fn frames_split_at_every_byte_decode_the_same(
            frames in proptest::collection::vec(frame_strategy(), 1..5)
        ) {
            let stream = encode_all(&frames);
            let decoder = FrameDecoder::default();
            for split in 0..=stream.len() {
                let mut buf = BytesMut::new();
                let mut decoded = Vec::new();
                for piece in [&stream[..split], &stream[split..]] {
                    buf.extend_from_slice(piece);
                    while let Some(frame) = decoder.decode(&mut buf).unwrap() {
                        decoded.push(frame);
                    }
                }
                prop_assert!(buf.is_empty());
                prop_assert_eq!(&decoded, &frames);
            }
        }

        /// A stream fed one byte at a time decodes to the same frames.
        #[test]
        fn frames_fed_byte_by_byte_decode_the_same(
            frames in proptest::collection::vec(frame_strategy(), 1..4)
        ) {
            let stream = encode_all(&frames);
            let decoder = FrameDecoder::default();
            let mut buf = BytesMut::new();
            let mut decoded = Vec::new();
            for byte in stream {
                buf.put_u8(byte);
                while let Some(frame) = decoder.decode(&mut buf).unwrap() {
                    decoded.push(frame);
                }
            }
            prop_assert_eq!(decoded, frames);
        }

        /// Random bytes never panic, and the decoder never asks for more than the limit allows.
        #[test]
        fn random_bytes_never_panic_or_exceed_limit(
            bytes in proptest::collection::vec(any::<u8>(), 0..64),
            limit in 0u32..100_000,
        ) {
            let decoder = FrameDecoder::new(limit);
            match decoder.peek(&bytes) {
                Ok(Decoded::NeedMore { total_bytes }) => {
                    prop_assert!(total_bytes <= FRAME_HEADER_BYTES + limit as usize);
                }
                Ok(Decoded::Complete(header)) => {
                    prop_assert!(header.body_len <= limit);
                }
                Err(_) => {}
            }
            let mut buf = BytesMut::from(&bytes[..]);
            let _ = decoder.decode(&mut buf);
        }
    }

    #[test]
    fn bad_magic_is_rejected_after_two_bytes() {
        let decoder = FrameDecoder::default();
        assert_eq!(
            decoder.peek(b"GE"),
            Err(FrameError::BadMagic { found: 0x4745 })
        );
        assert_eq!(
            decoder.peek(b"T"),
            Ok(Decoded::NeedMore { total_bytes: 12 })
        );
    }

    #[test]
    fn wrong_version_is_rejected() {
        let mut bytes = FrameHeader::request(1, 7, 0).to_bytes();
        bytes[2] = 9;
        assert_eq!(
            FrameDecoder::default().peek(&bytes),
            Err(FrameError::UnsupportedVersion {
                found: 9,
                supported: FRAME_VERSION
            })
        );
    }

    #[test]
    fn four_gib_body_is_rejected_before_any_body_byte() {
        let bytes = FrameHeader::request(7, 1, u32::MAX).to_bytes();
        assert_eq!(
            FrameDecoder::default().peek(&bytes),
            Err(FrameError::BodyTooLarge {
                body_len: u32::MAX,
                limit: FRAME_BODY_BYTES_MAX_DEFAULT
            })
        );
    }

    #[test]
    fn pre_handshake_limit_is_smaller() {
        let bytes = FrameHeader::request(1, 1, 100_000).to_bytes();
        assert!(FrameDecoder::pre_handshake().peek(&bytes).is_err());
        assert!(FrameDecoder::default().peek(&bytes).is_ok());
    }
}
