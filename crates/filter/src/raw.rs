//! Records read in place from an uncompressed records section, and batches decoded with
//! offset gaps allowed. A filtered batch keeps its base offset and last offset delta but only
//! some records, so offset deltas skip values (as in Kafka's compacted batches); the protocol
//! crate's `RecordBatch::records` insists on 0, 1, 2, …, so consumers of filtered batches
//! decode them with [`decode_sparse`].

use tinymq_protocol::batch::varint::{get_varint, get_varlong};
use tinymq_protocol::batch::{BatchError, Compression, Record, RecordBatch, RecordHeader};

use crate::eval::RecordFields;

/// One record located in its records section, nothing copied.
#[derive(Debug, Clone, Copy)]
pub struct RawRecord<'a> {
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    header_count: usize,
    /// The headers' bytes (checked well-formed when the record was read).
    headers: &'a [u8],
    /// The whole record, length prefix included: what a re-encoded batch copies.
    pub bytes: &'a [u8],
}

fn corrupt(message: impl Into<String>) -> BatchError {
    BatchError::Corrupt(message.into())
}

fn take_field<'a>(buf: &mut &'a [u8]) -> Result<Option<&'a [u8]>, BatchError> {
    let len = get_varint(buf).map_err(|e| corrupt(format!("bad varint in record: {e}")))?;
    if len == -1 {
        return Ok(None);
    }
    let len = usize::try_from(len).map_err(|_| corrupt(format!("invalid field length {len}")))?;
    let Some((field, rest)) = buf.split_at_checked(len) else {
        return Err(corrupt(format!(
            "field length {len} runs past the record ({} bytes left)",
            buf.len()
        )));
    };
    *buf = rest;
    Ok(Some(field))
}

impl<'a> RawRecord<'a> {
    /// Reads the record at the front of `*section` and moves past it.
    pub fn read(section: &mut &'a [u8]) -> Result<RawRecord<'a>, BatchError> {
        let all = *section;
        let mut buf = all;
        let length = get_varint(&mut buf).map_err(|e| corrupt(format!("bad varint: {e}")))?;
        let length =
            usize::try_from(length).map_err(|_| corrupt(format!("negative length {length}")))?;
        let prefix = all.len() - buf.len();
        let Some((mut body, rest)) = buf.split_at_checked(length) else {
            return Err(corrupt(format!(
                "record length {length} runs past the batch ({} bytes left)",
                buf.len()
            )));
        };
        let record_bytes = &all[..prefix + length];
        let (_attributes, after) = body
            .split_first()
            .ok_or_else(|| corrupt("record truncated"))?;
        body = after;
        let bad = |e| corrupt(format!("bad varint in record: {e}"));
        let timestamp_delta = get_varlong(&mut body).map_err(bad)?;
        let offset_delta = get_varint(&mut body).map_err(bad)?;
        let key = take_field(&mut body)?;
        let value = take_field(&mut body)?;
        let header_count = get_varint(&mut body).map_err(bad)?;
        let header_count = usize::try_from(header_count)
            .map_err(|_| corrupt(format!("negative header count {header_count}")))?;
        let headers = body;
        let mut walk = body;
        for _ in 0..header_count {
            take_field(&mut walk)?.ok_or_else(|| corrupt("null header key"))?;
            take_field(&mut walk)?;
        }
        if !walk.is_empty() {
            return Err(corrupt(format!(
                "record has {} unread bytes after its headers",
                walk.len()
            )));
        }
        *section = rest;
        Ok(RawRecord {
            timestamp_delta,
            offset_delta,
            key,
            value,
            header_count,
            headers,
            bytes: record_bytes,
        })
    }

    /// The headers as (key, value) byte slices, in order.
    pub fn headers(&self) -> impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)> + 'a {
        let mut buf = self.headers;
        // Checked well-formed by `read`: the walk ends cleanly.
        (0..self.header_count).map_while(move |_| {
            let key = take_field(&mut buf).ok()??;
            let value = take_field(&mut buf).ok()?;
            Some((key, value))
        })
    }
}

impl RecordFields for RawRecord<'_> {
    fn key(&self) -> Option<&[u8]> {
        self.key
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers()
            .find(|(k, _)| *k == name.as_bytes())
            .and_then(|(_, v)| v)
    }
}

/// Walks an uncompressed records section of a batch whose header says `record_count` records
/// and `last_offset_delta`, checking that offset deltas rise strictly within
/// `0..=last_offset_delta` (gaps allowed) and that the count matches.
pub fn walk_section<'a>(
    mut section: &'a [u8],
    record_count: i32,
    last_offset_delta: i32,
    mut each: impl FnMut(RawRecord<'a>) -> Result<(), BatchError>,
) -> Result<(), BatchError> {
    let mut found = 0i32;
    let mut previous_delta = -1i32;
    while !section.is_empty() {
        let record = RawRecord::read(&mut section)?;
        if record.offset_delta <= previous_delta || record.offset_delta > last_offset_delta {
            return Err(corrupt(format!(
                "record offset delta {} after {previous_delta} (last offset delta \
                 {last_offset_delta})",
                record.offset_delta
            )));
        }
        previous_delta = record.offset_delta;
        found = found.saturating_add(1);
        each(record)?;
    }
    if found != record_count {
        return Err(BatchError::RecordCountMismatch {
            header: record_count,
            found: found as usize,
        });
    }
    Ok(())
}

/// Decodes every record of a (CRC-checked) batch, allowing offset gaps as filtered batches
/// have them. A compressed batch is decoded by the protocol crate (within
/// `decompressed_bytes_max`; the broker writes filtered batches uncompressed, so compressed
/// ones are whole log batches without gaps).
pub fn decode_sparse(
    batch: &RecordBatch,
    decompressed_bytes_max: usize,
) -> Result<Vec<Record>, BatchError> {
    if batch.compression() != Compression::None {
        return batch.records(decompressed_bytes_max);
    }
    let all = batch.as_bytes();
    let section = all
        .get(tinymq_protocol::batch::field::RECORDS..)
        .unwrap_or(&[]);
    let base_offset = batch.base_offset();
    let base_timestamp = batch.base_timestamp();
    // Every record takes at least 7 bytes: a larger count must not size an allocation.
    let capacity = usize::try_from(batch.record_count())
        .unwrap_or(0)
        .min(section.len() / 7);
    let mut records = Vec::with_capacity(capacity);
    let slice = |part: &[u8]| all.slice_ref(part);
    walk_section(
        section,
        batch.record_count(),
        batch.last_offset_delta(),
        |raw| {
            let mut headers = Vec::with_capacity(raw.header_count);
            for (key, value) in raw.headers() {
                let key = std::str::from_utf8(key)
                    .map_err(|_| corrupt("header key is not UTF-8"))?
                    .to_string();
                headers.push(RecordHeader {
                    key,
                    value: value.map(slice),
                });
            }
            let timestamp_ms = if batch.is_log_append_time() {
                batch.max_timestamp()
            } else {
                base_timestamp.wrapping_add(raw.timestamp_delta)
            };
            records.push(Record {
                offset: base_offset.wrapping_add(i64::from(raw.offset_delta)),
                timestamp_ms,
                key: raw.key.map(slice),
                value: raw.value.map(slice),
                headers,
            });
            Ok(())
        },
    )?;
    Ok(records)
}
