//! One record inside a batch, in Kafka's v2 record layout:
//!
//! ```text
//! length          varint   bytes that follow this field
//! attributes      int8     unused, 0
//! timestampDelta  varlong  timestamp - batch's base (first) timestamp
//! offsetDelta     varint   offset - batch's base offset
//! keyLength       varint   -1 for a null key
//! key             bytes
//! valueLength     varint   -1 for a null value
//! value           bytes
//! headerCount     varint
//!   headerKeyLength   varint, headerKey (UTF-8)
//!   headerValueLength varint (-1 = null), headerValue
//! ```
//!
//! Varints are zig-zag encoded (see [`super::varint`]).

use std::ops::Range;

use bytes::{BufMut, Bytes};

use super::varint::{get_varint, get_varlong, put_varint, put_varlong, varint_len, varlong_len};
use super::BatchError;

/// A record header: a UTF-8 key and an optional value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordHeader {
    pub key: String,
    pub value: Option<Bytes>,
}

/// A decoded record. Offsets and timestamps are absolute (the batch's base added).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub offset: i64,
    pub timestamp_ms: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<RecordHeader>,
}

/// The parts of a record a producer supplies.
#[derive(Debug, Clone, Copy)]
pub struct RecordInput<'a> {
    pub timestamp_ms: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: &'a [(&'a str, Option<&'a [u8]>)],
}

fn bytes_field_len(field: Option<&[u8]>) -> usize {
    match field {
        None => varint_len(-1),
        Some(b) => varint_len(b.len() as i32) + b.len(),
    }
}

fn put_bytes_field(out: &mut impl BufMut, field: Option<&[u8]>) {
    match field {
        None => put_varint(out, -1),
        Some(b) => {
            put_varint(out, b.len() as i32);
            out.put_slice(b);
        }
    }
}

/// Size of the record after its length prefix.
fn body_len(input: &RecordInput<'_>, offset_delta: i32, timestamp_delta: i64) -> usize {
    let headers: usize = input
        .headers
        .iter()
        .map(|(k, v)| bytes_field_len(Some(k.as_bytes())) + bytes_field_len(*v))
        .sum();
    1 + varlong_len(timestamp_delta)
        + varint_len(offset_delta)
        + bytes_field_len(input.key)
        + bytes_field_len(input.value)
        + varint_len(input.headers.len() as i32)
        + headers
}

/// Bytes the record takes in a batch's records section (before compression) at
/// `offset_delta` and `timestamp_delta` from the batch's first record: what [`encode_record`]
/// writes. Producers size batches with it before building them.
pub fn record_bytes(input: &RecordInput<'_>, offset_delta: i32, timestamp_delta: i64) -> usize {
    let body = body_len(input, offset_delta, timestamp_delta);
    varint_len(i32::try_from(body).unwrap_or(i32::MAX)) + body
}

/// Appends one encoded record to `out` (what [`record_bytes`] counts); returns the bytes
/// written.
pub fn encode_record(
    out: &mut impl BufMut,
    input: &RecordInput<'_>,
    offset_delta: i32,
    timestamp_delta: i64,
) -> usize {
    let body = body_len(input, offset_delta, timestamp_delta);
    assert!(body <= i32::MAX as usize, "record size fits a varint");
    put_varint(out, body as i32);
    out.put_i8(0);
    put_varlong(out, timestamp_delta);
    put_varint(out, offset_delta);
    put_bytes_field(out, input.key);
    put_bytes_field(out, input.value);
    put_varint(out, input.headers.len() as i32);
    for (key, value) in input.headers {
        put_bytes_field(out, Some(key.as_bytes()));
        put_bytes_field(out, *value);
    }
    varint_len(body as i32) + body
}

/// The fields of one record, located in its batch's record bytes without copying: what a
/// check needs, and what [`decode_record`] turns into a [`Record`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawRecord {
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    pub key: Option<Range<usize>>,
    pub value: Option<Range<usize>>,
    /// Where the headers start, and how many there are (already checked to be well-formed).
    pub headers_start: usize,
    pub header_count: usize,
    /// One past the record's last byte.
    pub end: usize,
}

/// Locates and checks the record at `start` in `all` (lengths, varints, header keys in UTF-8),
/// without allocating.
pub(crate) fn parse_record(all: &[u8], start: usize) -> Result<RawRecord, BatchError> {
    let mut buf = all
        .get(start..)
        .ok_or_else(|| BatchError::Corrupt("record starts past the batch".into()))?;
    let length = get_varint(&mut buf).map_err(corrupt)?;
    let length = usize::try_from(length)
        .map_err(|_| BatchError::Corrupt(format!("negative record length {length}")))?;
    if length > buf.len() {
        return Err(BatchError::Corrupt(format!(
            "record length {length} runs past the batch ({} bytes left)",
            buf.len()
        )));
    }
    let body_start = all.len() - buf.len();
    let end = body_start + length;
    let mut body = &all[body_start..end];
    let _attributes = take_u8(&mut body)?;
    let timestamp_delta = get_varlong(&mut body).map_err(corrupt)?;
    let offset_delta = get_varint(&mut body).map_err(corrupt)?;
    let key = take_field(end, &mut body)?;
    let value = take_field(end, &mut body)?;
    let header_count = get_varint(&mut body).map_err(corrupt)?;
    let header_count = usize::try_from(header_count)
        .map_err(|_| BatchError::Corrupt(format!("negative header count {header_count}")))?;
    // Every header takes at least two bytes, so a count beyond that is a lie; checking it
    // first keeps a hostile count from reserving memory.
    if header_count > body.len() / 2 {
        return Err(BatchError::Corrupt(format!(
            "header count {header_count} exceeds what the record can hold"
        )));
    }
    let headers_start = end - body.len();
    let headers_end = walk_headers(all, headers_start, end, header_count, |_, _| {})?;
    if headers_end != end {
        return Err(BatchError::Corrupt(format!(
            "record has {} unread bytes after its headers",
            end - headers_end
        )));
    }
    Ok(RawRecord {
        timestamp_delta,
        offset_delta,
        key,
        value,
        headers_start,
        header_count,
        end,
    })
}

/// Walks `count` headers from `start` (within a record ending at `record_end`), handing each
/// key (checked to be UTF-8) and value range to `f`; returns where the headers end.
fn walk_headers(
    all: &[u8],
    start: usize,
    record_end: usize,
    count: usize,
    mut f: impl FnMut(Range<usize>, Option<Range<usize>>),
) -> Result<usize, BatchError> {
    let mut body = &all[start..record_end];
    for _ in 0..count {
        let key = take_field(record_end, &mut body)?
            .ok_or_else(|| BatchError::Corrupt("null header key".into()))?;
        if std::str::from_utf8(&all[key.clone()]).is_err() {
            return Err(BatchError::Corrupt("header key is not UTF-8".into()));
        }
        let value = take_field(record_end, &mut body)?;
        f(key, value);
    }
    Ok(record_end - body.len())
}

/// Reads the record at `*cursor` of `all` (shared, so that keys and values are zero-copy
/// sub-slices) and moves the cursor past it.
pub(crate) fn decode_record(
    all: &Bytes,
    cursor: &mut usize,
    base_offset: i64,
    base_timestamp: i64,
) -> Result<Record, BatchError> {
    let raw = parse_record(all, *cursor)?;
    let mut headers = Vec::with_capacity(raw.header_count);
    walk_headers(
        all,
        raw.headers_start,
        raw.end,
        raw.header_count,
        |key, value| {
            headers.push(RecordHeader {
                // Checked to be UTF-8 by the walk.
                key: String::from_utf8_lossy(&all[key]).into_owned(),
                value: value.map(|v| all.slice(v)),
            })
        },
    )?;
    *cursor = raw.end;
    Ok(Record {
        offset: base_offset.wrapping_add(i64::from(raw.offset_delta)),
        timestamp_ms: base_timestamp.wrapping_add(raw.timestamp_delta),
        key: raw.key.map(|k| all.slice(k)),
        value: raw.value.map(|v| all.slice(v)),
        headers,
    })
}

fn take_u8(buf: &mut &[u8]) -> Result<u8, BatchError> {
    let (&b, rest) = buf
        .split_first()
        .ok_or_else(|| BatchError::Corrupt("record truncated".into()))?;
    *buf = rest;
    Ok(b)
}

/// Reads a length-prefixed field and returns where its bytes lie in the record's buffer
/// (`None` for a null field); `record_end` is the record's end within that buffer.
fn take_field(record_end: usize, buf: &mut &[u8]) -> Result<Option<Range<usize>>, BatchError> {
    let len = get_varint(buf).map_err(corrupt)?;
    if len == -1 {
        return Ok(None);
    }
    let len = usize::try_from(len)
        .map_err(|_| BatchError::Corrupt(format!("invalid field length {len}")))?;
    if len > buf.len() {
        return Err(BatchError::Corrupt(format!(
            "field length {len} runs past the record ({} bytes left)",
            buf.len()
        )));
    }
    let start = record_end - buf.len();
    *buf = &buf[len..];
    Ok(Some(start..start + len))
}

fn corrupt(e: super::varint::VarintError) -> BatchError {
    BatchError::Corrupt(format!("bad varint in record: {e}"))
}
