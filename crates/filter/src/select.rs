//! Keeping only chosen records of a run of batches, re-encoded as batches a consumer reads
//! like any other: each output batch keeps its input batch's base offset, last offset delta,
//! partition leader epoch, timestamps, producer fields and attributes, and holds only the kept
//! records (their offset deltas unchanged, so offsets are intact and gaps show where records
//! were dropped). A batch with no kept record is left out; [`Selection::next_offset`] tells the
//! consumer where to continue, past every record read.
//!
//! Output batches are uncompressed (the compression bits cleared): a compressed input batch is
//! decompressed within [`SelectOptions::decompressed_bytes_max`] by the protocol crate and its
//! kept records re-encoded; compressing again would cost the broker CPU for every filtered
//! fetch. An uncompressed batch whose records are all kept is copied verbatim, and kept records
//! of an uncompressed batch are copied byte for byte. Control batches are copied verbatim.
//! Every input batch's CRC is checked first, so a re-encoded batch never vouches for
//! corrupted data.

use bytes::{Bytes, BytesMut};
use tinymq_protocol::batch::{
    batch_size, compute_crc, encode_record, field, BatchError, BatchHeader, Compression,
    RecordBatch, RecordInput, ATTR_COMPRESSION_MASK, ATTR_CONTROL, BATCH_HEADER_BYTES,
    BATCH_LENGTH_PREFIX_BYTES, BATCH_MAGIC,
};

use crate::eval::RecordFields;
use crate::raw::walk_section;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SelectOptions {
    /// Records below this offset (in the first batch, which may start before it) are neither
    /// kept nor counted.
    pub from_offset: i64,
    /// Decompression limit per compressed batch.
    pub decompressed_bytes_max: usize,
}

/// The kept records and where reading continues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// Re-encoded batches holding only kept records.
    pub records: Bytes,
    /// One past the last record of the last whole batch read (at least `from_offset`).
    pub next_offset: i64,
    pub kept: u64,
    pub dropped: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    #[error("record batch at offset {base_offset}: {source}")]
    Batch {
        base_offset: i64,
        #[source]
        source: BatchError,
    },
}

/// Selects the records `keep(offset, fields)` accepts out of back-to-back `batches`. A
/// truncated batch at the end (a read that stopped inside it) ends the selection without an
/// error; `next_offset` then points at it.
pub fn select(
    batches: &[u8],
    mut keep: impl FnMut(i64, &dyn RecordFields) -> bool,
    options: &SelectOptions,
) -> Result<Selection, SelectError> {
    // Output never outgrows uncompressed input: one allocation, not a chain of growths (each
    // a fresh mapping to fault in, for buffers this size).
    let mut out = BytesMut::with_capacity(batches.len());
    let mut selection = Selection {
        records: Bytes::new(),
        next_offset: options.from_offset,
        kept: 0,
        dropped: 0,
    };
    let mut rest = batches;
    while let Some(header) = BatchHeader::new(rest) {
        let base_offset = header.base_offset();
        let fail = |source| SelectError::Batch {
            base_offset,
            source,
        };
        let size = match batch_size(rest).map_err(fail)? {
            Some(size) if size <= rest.len() => size,
            _ => break,
        };
        let (batch, tail) = rest.split_at(size);
        rest = tail;
        check_batch(batch, &header).map_err(fail)?;
        let last_offset = header.last_offset();
        if last_offset < options.from_offset {
            continue;
        }
        selection.next_offset = selection.next_offset.max(last_offset.saturating_add(1));
        if header.attributes() & ATTR_CONTROL != 0 {
            out.extend_from_slice(batch);
            continue;
        }
        let counts = match Compression::from_attributes(header.attributes()).map_err(fail)? {
            Compression::None => select_plain(batch, &header, &mut out, &mut keep, options),
            _ => select_compressed(batch, &mut out, &mut keep, options),
        }
        .map_err(fail)?;
        selection.kept += counts.0;
        selection.dropped += counts.1;
    }
    selection.records = out.freeze();
    Ok(selection)
}

fn check_batch(batch: &[u8], header: &BatchHeader<'_>) -> Result<(), BatchError> {
    if header.magic() != BATCH_MAGIC {
        return Err(BatchError::BadMagic(header.magic()));
    }
    let computed = compute_crc(batch);
    if computed != header.crc() {
        return Err(BatchError::CrcMismatch {
            stored: header.crc(),
            computed,
        });
    }
    if header.record_count() < 0 || header.last_offset_delta() < 0 {
        return Err(BatchError::InvalidHeader(
            "negative record count or offset delta".into(),
        ));
    }
    Ok(())
}

/// (kept, dropped) of one uncompressed batch, kept records appended to `out` as a batch.
fn select_plain(
    batch: &[u8],
    header: &BatchHeader<'_>,
    out: &mut BytesMut,
    keep: &mut impl FnMut(i64, &dyn RecordFields) -> bool,
    options: &SelectOptions,
) -> Result<(u64, u64), BatchError> {
    let start = out.len();
    out.extend_from_slice(&batch[..BATCH_HEADER_BYTES]);
    let (mut kept, mut dropped, mut below) = (0u64, 0u64, 0u64);
    let base_offset = header.base_offset();
    let section = &batch[field::RECORDS..];
    walk_section(
        section,
        header.record_count(),
        header.last_offset_delta(),
        |record| {
            let offset = base_offset.wrapping_add(i64::from(record.offset_delta));
            if offset < options.from_offset {
                below += 1;
            } else if keep(offset, &record) {
                out.extend_from_slice(record.bytes);
                kept += 1;
            } else {
                dropped += 1;
            }
            Ok(())
        },
    )?;
    finish_batch(out, start, kept, dropped + below == 0, header.attributes())?;
    Ok((kept, dropped))
}

/// (kept, dropped) of one compressed batch, kept records re-encoded uncompressed.
fn select_compressed(
    batch: &[u8],
    out: &mut BytesMut,
    keep: &mut impl FnMut(i64, &dyn RecordFields) -> bool,
    options: &SelectOptions,
) -> Result<(u64, u64), BatchError> {
    let parsed = RecordBatch::parse(Bytes::copy_from_slice(batch))?;
    let records = parsed.records(options.decompressed_bytes_max)?;
    let start = out.len();
    out.extend_from_slice(&batch[..BATCH_HEADER_BYTES]);
    let (mut kept, mut dropped) = (0u64, 0u64);
    for record in &records {
        if record.offset < options.from_offset {
            continue;
        }
        if !keep(record.offset, record) {
            dropped += 1;
            continue;
        }
        let headers: Vec<(&str, Option<&[u8]>)> = record
            .headers
            .iter()
            .map(|h| (h.key.as_str(), h.value.as_deref()))
            .collect();
        let input = RecordInput {
            timestamp_ms: record.timestamp_ms,
            key: record.key.as_deref(),
            value: record.value.as_deref(),
            headers: &headers,
        };
        // Offsets were checked to be base + 0, 1, 2, … by `records`.
        let offset_delta = i32::try_from(record.offset.wrapping_sub(parsed.base_offset()))
            .map_err(|_| BatchError::Corrupt("offset delta beyond i32".into()))?;
        let timestamp_delta = record.timestamp_ms.wrapping_sub(parsed.base_timestamp());
        encode_record(out, &input, offset_delta, timestamp_delta);
        kept += 1;
    }
    finish_batch(out, start, kept, false, parsed.attributes())?;
    Ok((kept, dropped))
}

/// Completes the batch started at `out[start..]`: removed when it kept nothing, left as is
/// when it is the input batch unchanged, otherwise given its new length, record count,
/// attributes (uncompressed) and CRC.
fn finish_batch(
    out: &mut BytesMut,
    start: usize,
    kept: u64,
    unchanged: bool,
    attributes: i16,
) -> Result<(), BatchError> {
    if kept == 0 {
        out.truncate(start);
        return Ok(());
    }
    if unchanged {
        return Ok(());
    }
    let batch = &mut out[start..];
    let too_big = || BatchError::Corrupt("re-encoded batch larger than 2 GiB".into());
    let length = i32::try_from(batch.len() - BATCH_LENGTH_PREFIX_BYTES).map_err(|_| too_big())?;
    let count = i32::try_from(kept).map_err(|_| too_big())?;
    put(batch, field::BATCH_LENGTH, &length.to_be_bytes());
    put(
        batch,
        field::ATTRIBUTES,
        &(attributes & !ATTR_COMPRESSION_MASK).to_be_bytes(),
    );
    put(batch, field::RECORD_COUNT, &count.to_be_bytes());
    let crc = compute_crc(batch);
    put(batch, field::CRC, &crc.to_be_bytes());
    Ok(())
}

/// Writes `bytes` at `at` of a buffer that holds at least a batch header.
fn put(batch: &mut [u8], at: usize, bytes: &[u8]) {
    if let Some(target) = batch.get_mut(at..at + bytes.len()) {
        target.copy_from_slice(bytes);
    }
}

#[cfg(test)]
mod tests;
