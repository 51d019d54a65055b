//! Kafka's framing: every request and response is a 4-byte big-endian size followed by that
//! many bytes; a request starts with its header (API key, API version, correlation id,
//! client id, and tagged fields in flexible versions), a response with the correlation id
//! (and tagged fields in flexible versions, except ApiVersions, whose response header is
//! always version 0 so that a client can read it whatever it asked for).
//!
//! The size is checked against `frame_bytes_max` before anything is allocated for the body.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Bytes of the size prefix.
pub const SIZE_BYTES: usize = 4;
/// The smallest request: API key, API version and correlation id.
pub const REQUEST_HEADER_BYTES_MIN: usize = 8;

/// Why a connection's input cannot be read as Kafka requests; the connection is closed with
/// this reason logged (Kafka's protocol has no way to answer a request it cannot parse).
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("request of {size} bytes is over frame_bytes_max ({max})")]
    TooLarge { size: i64, max: u32 },
    #[error("request size {0} is smaller than a request header")]
    TooSmall(i32),
    #[error("connection closed in the middle of a request")]
    Truncated,
    #[error("unknown API key {api_key} (correlation id {correlation_id})")]
    UnknownApi { api_key: i16, correlation_id: i32 },
    #[error("cannot parse the request header: {0}")]
    Header(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Reads the next request's bytes (without the size prefix); `None` at a clean end of input.
/// `frame_bytes_max` may change between calls (it is smaller before SASL authentication).
pub async fn read_request<R: AsyncRead + Unpin>(
    reader: &mut R,
    frame_bytes_max: u32,
) -> Result<Option<Bytes>, FrameError> {
    let mut size = [0u8; SIZE_BYTES];
    match reader.read_exact(&mut size[..1]).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    read_exact(reader, &mut size[1..]).await?;
    let size = i32::from_be_bytes(size);
    if size < REQUEST_HEADER_BYTES_MIN as i32 {
        return Err(FrameError::TooSmall(size));
    }
    if size as u32 > frame_bytes_max {
        return Err(FrameError::TooLarge {
            size: i64::from(size),
            max: frame_bytes_max,
        });
    }
    let mut body = BytesMut::zeroed(size as usize);
    read_exact(reader, &mut body).await?;
    Ok(Some(body.freeze()))
}

async fn read_exact<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut [u8],
) -> Result<(), FrameError> {
    match reader.read_exact(buf).await {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(FrameError::Truncated),
        Err(e) => Err(e.into()),
    }
}

/// A request's header, parsed; `body` is what follows it.
#[derive(Debug)]
pub struct Request {
    pub api_key: ApiKey,
    pub header: RequestHeader,
    pub body: Bytes,
}

/// Splits a request into header and body. The API key must be one Kafka defines (its
/// header version depends on it); the version is checked later, by `dispatch`.
pub fn parse_request(mut frame: Bytes) -> Result<Request, FrameError> {
    // REQUEST_HEADER_BYTES_MIN were checked by `read_request`; checked again for other callers.
    if frame.len() < REQUEST_HEADER_BYTES_MIN {
        return Err(FrameError::TooSmall(frame.len() as i32));
    }
    let raw_key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let api_key = ApiKey::try_from(raw_key).map_err(|()| FrameError::UnknownApi {
        api_key: raw_key,
        correlation_id,
    })?;
    let header_version = api_key.request_header_version(version);
    let header = RequestHeader::decode(&mut frame, header_version)
        .map_err(|e| FrameError::Header(e.to_string()))?;
    Ok(Request {
        api_key,
        header,
        body: frame,
    })
}

/// The response to `request`: size prefix, response header, body encoded at the request's
/// version. `Err` only when the body cannot be encoded at that version (a handler filled a
/// field the version lacks), which the caller logs and answers by closing.
pub fn encode_response(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    response: &ResponseKind,
) -> Result<Bytes, String> {
    let header_version = api_key.response_header_version(version);
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let mut out = BytesMut::with_capacity(64);
    out.put_u32(0);
    header
        .encode(&mut out, header_version)
        .map_err(|e| format!("response header: {e}"))?;
    response
        .encode(&mut out, version)
        .map_err(|e| format!("{api_key:?} v{version} response: {e}"))?;
    let size = out.len() - SIZE_BYTES;
    let size = u32::try_from(size).map_err(|_| "response over 4 GiB".to_string())?;
    out[..SIZE_BYTES].copy_from_slice(&size.to_be_bytes());
    Ok(out.freeze())
}

/// `bytes` after their 4-byte big-endian size: a raw SASL token's framing.
pub fn size_prefixed(bytes: &[u8]) -> Result<Bytes, String> {
    let size = u32::try_from(bytes.len()).map_err(|_| "token over 4 GiB".to_string())?;
    let mut out = BytesMut::with_capacity(SIZE_BYTES + bytes.len());
    out.put_u32(size);
    out.extend_from_slice(bytes);
    Ok(out.freeze())
}

/// Reads a response written by [`encode_response`] (tests and tools): correlation id and body.
pub fn split_response(mut frame: Bytes, header_version: i16) -> Result<(i32, Bytes), String> {
    if frame.len() < SIZE_BYTES {
        return Err("short response".into());
    }
    let size = frame.get_u32() as usize;
    if size != frame.len() {
        return Err(format!("size {size} but {} bytes", frame.len()));
    }
    let header = ResponseHeader::decode(&mut frame, header_version).map_err(|e| e.to_string())?;
    Ok((header.correlation_id, frame))
}
