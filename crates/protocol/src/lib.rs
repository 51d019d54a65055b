//! tinymq's wire protocol, with no I/O: the 12-byte frame header and its decoder, operation
//! codes, protobuf message bodies, stable error codes, the record-batch codec, and the names
//! and limits a client can see ([`names`]: topic names, group ids, setting ranges).
//!
//! Everything here works on byte buffers. The broker and the client own the sockets; this crate
//! only says what the bytes mean. See `docs/protocol.md` for the byte-level description.

pub mod batch;
pub mod error;
pub mod frame;
pub mod hash;
pub mod names;
pub mod op;
pub mod stats;

/// Protobuf bodies generated from `proto/tinymq/v1/tinymq.proto`.
#[allow(clippy::all, missing_docs)]
pub mod messages {
    include!(concat!(env!("OUT_DIR"), "/tinymq.v1.rs"));
}

pub use error::ErrorCode;
pub use frame::{Frame, FrameDecoder, FrameError, FrameHeader};
pub use op::{OpCode, Request};

/// Protocol versions this build speaks (negotiated in the handshake).
pub const PROTOCOL_VERSION_MIN: u32 = 1;
pub const PROTOCOL_VERSION_MAX: u32 = 1;
