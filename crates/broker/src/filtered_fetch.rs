//! Fetch with a filter (`FetchRequest.filter`, docs/queues.md "Filters"): the partition's
//! batches are read into memory (never sent with `sendfile`: their bytes change), the records
//! the filter keeps are re-encoded into batches by [`tinymq_filter::select`], and
//! `next_offset` tells the consumer where to continue, past every record read, matching or
//! not. One fetch scans at most [`FILTERED_FETCH_SCAN_BYTES_MAX`] of log across its
//! partitions, so a selective filter still fills responses while a filter that matches
//! nothing cannot hold a broker thread for long; reads are [`FILTERED_READ_CHUNK_BYTES`] at a
//! time, so memory stays bounded whatever the scan.
//!
//! Long polling: the scan position of each partition is kept across the fetch's reads, so a
//! wait that ends with new data scans only that data; the fetch answers as soon as any record
//! matched (its `min_bytes` counts as one byte: matched records cannot be held back for more
//! without being scanned again), when a scan stopped before the high watermark (more is
//! there to scan), or when the wait ends, then with `next_offset` past everything scanned.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tinymq_filter::{select, Filter, RecordFields, SelectOptions};
use tinymq_protocol::batch::{
    BatchHeader, ATTR_COMPRESSION_MASK, BATCH_DECOMPRESSED_BYTES_MAX_DEFAULT,
};
use tinymq_protocol::{messages as m, ErrorCode};

use crate::fetch_frame::Records;
use crate::service::fetch::{read_each, PartitionReader};
use crate::service::read::{consumer_partition, read_partition, PartitionRead};
use crate::state::BrokerState;

/// Most bytes of log one filtered fetch reads, over all its partitions (32 MiB: about 10 ms
/// of scanning; a 1%-selective filter over 1 KiB records still returns about 320 KiB).
pub(crate) const FILTERED_FETCH_SCAN_BYTES_MAX: usize = 32 << 20;
/// Bytes of whole batches read from the log at a time during a filtered scan.
pub(crate) const FILTERED_READ_CHUNK_BYTES: usize = 1 << 20;

/// A filtered fetch's filter and, per requested partition, where its scan has reached.
#[derive(Clone)]
pub(crate) struct FilterScan {
    pub filter: Arc<Filter>,
    pub positions: Vec<i64>,
}

/// The filter of a fetch request: `None` without one; refused on a replica fetch, and when it
/// does not parse (INVALID_FILTER with the parser's message, column included).
pub(crate) fn request_filter(req: &m::FetchRequest) -> Result<Option<FilterScan>, m::Error> {
    if req.filter.is_empty() {
        return Ok(None);
    }
    if req.replica_id != 0 {
        return Err(ErrorCode::INVALID_REQUEST
            .with_message("a replica fetch cannot carry a filter (consumers only)"));
    }
    let filter = Filter::parse(&req.filter)
        .map_err(|e| ErrorCode::INVALID_FILTER.with_message(e.to_string()))?;
    Ok(Some(FilterScan {
        filter: Arc::new(filter),
        positions: req.partitions.iter().map(|p| p.offset).collect(),
    }))
}

impl FilterScan {
    /// Moves each partition's scan position to the `next_offset` its read reached.
    fn advance(&mut self, results: &[PartitionRead]) {
        for (position, (result, _)) in self.positions.iter_mut().zip(results) {
            if result.error.is_none() {
                *position = (*position).max(result.next_offset);
            }
        }
    }
}

impl PartitionReader for FilterScan {
    fn read(
        &self,
        state: &BrokerState,
        req: &m::FetchRequest,
        budget: usize,
    ) -> Vec<PartitionRead> {
        let mut scan_left = FILTERED_FETCH_SCAN_BYTES_MAX;
        read_each(req, budget, |i, fp, left| {
            let position = self.positions.get(i).copied().unwrap_or(fp.offset);
            read_filtered(state, fp, position, left, &self.filter, &mut scan_left)
        })
    }

    /// A filtered read looks at every record it scans: always on a blocking thread.
    fn reads_inline_after_wake(&self) -> bool {
        false
    }

    fn answer_now(&mut self, results: &[PartitionRead]) -> bool {
        self.advance(results);
        answer_now(results)
    }

    fn answered(
        &self,
        state: &BrokerState,
        stats: &tinymq_net::ConnectionStats,
        results: &[PartitionRead],
    ) {
        crate::service::read::count_consumed(state, stats, results);
    }
}

/// Whether a filtered fetch should answer now rather than wait for new data: something
/// matched, or a scan stopped before the high watermark (the scan budget ran out).
fn answer_now(results: &[PartitionRead]) -> bool {
    results.iter().any(|(result, records)| {
        records.len() > 0 || (result.error.is_none() && result.next_offset < result.high_watermark)
    })
}

/// One partition of a filtered fetch from `position`: the matching records of whole batches
/// below the high watermark, within `budget` and the partition's bound (one batch past them at
/// most), scanning at most `*scan_left` bytes (reduced by what is read).
pub(crate) fn read_filtered(
    state: &BrokerState,
    fp: &m::FetchPartition,
    position: i64,
    budget: usize,
    filter: &Filter,
    scan_left: &mut usize,
) -> PartitionRead {
    let (mut result, partition) = match consumer_partition(state, fp) {
        (result, Some(partition)) => (result, partition),
        (refused, None) => return (refused, Records::Bytes(Bytes::new())),
    };
    result.next_offset = position;
    let limit = match fp.partition_bytes_max {
        0 => budget,
        asked => (asked as usize).min(budget),
    };
    // Each chunk's selection, joined once at the end (usually there is one: no copy).
    let mut kept: Vec<Bytes> = Vec::new();
    let mut kept_bytes = 0usize;
    let mut next = position;
    while next < result.high_watermark && kept_bytes < limit && *scan_left > 0 {
        let chunk_max = FILTERED_READ_CHUNK_BYTES
            .min(limit - kept_bytes)
            .min(*scan_left);
        let chunk = match read_partition(&partition, next, chunk_max) {
            Ok(chunk) if !chunk.is_empty() => chunk,
            Ok(_) => break,
            Err(e) => {
                // Reported only when nothing was scanned: otherwise the next fetch, from the
                // new position, meets it first.
                if next == position {
                    result.error = Some(e);
                }
                break;
            }
        };
        *scan_left = scan_left.saturating_sub(chunk.len());
        let selection = match select_chunk(&chunk, next, filter) {
            Ok(selection) => selection,
            Err(e) => {
                if next == position {
                    result.error = Some(e);
                }
                break;
            }
        };
        if selection.next_offset <= next {
            break; // no whole batch in the chunk: nothing more to read here
        }
        next = selection.next_offset;
        if !selection.records.is_empty() {
            kept_bytes += selection.records.len();
            kept.push(selection.records);
        }
    }
    result.next_offset = next;
    (result, Records::Bytes(join(kept, kept_bytes)))
}

/// The parts back to back, copied only when there are several.
fn join(mut parts: Vec<Bytes>, total: usize) -> Bytes {
    if parts.len() <= 1 {
        return parts.pop().unwrap_or_default();
    }
    let mut joined = BytesMut::with_capacity(total);
    for part in &parts {
        joined.extend_from_slice(part);
    }
    joined.freeze()
}

/// The records of `chunk` (whole batches) at or after `from_offset` that `filter` keeps. A
/// chunk holding a compressed batch takes one of the broker's decompression slots.
fn select_chunk(
    chunk: &[u8],
    from_offset: i64,
    filter: &Filter,
) -> Result<tinymq_filter::Selection, m::Error> {
    let options = SelectOptions {
        from_offset,
        decompressed_bytes_max: BATCH_DECOMPRESSED_BYTES_MAX_DEFAULT,
    };
    let run = || {
        select(chunk, |_, r: &dyn RecordFields| filter.matches(r), &options)
            .map_err(|e| ErrorCode::CORRUPT_MESSAGE.with_message(e.to_string()))
    };
    if holds_compressed(chunk) {
        crate::partition::with_decompression_slot(run)
    } else {
        run()
    }
}

/// Whether any batch of `chunk` is compressed (headers only).
fn holds_compressed(chunk: &[u8]) -> bool {
    let mut rest = chunk;
    while let Some(header) = BatchHeader::new(rest) {
        if header.attributes() & ATTR_COMPRESSION_MASK != 0 {
            return true;
        }
        match tinymq_protocol::batch::batch_size(rest) {
            Ok(Some(size)) if size <= rest.len() => rest = &rest[size..],
            _ => break,
        }
    }
    false
}
