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
//!
//! Under read committed the scan stops at the last stable offset, and the records of aborted
//! transactions and every control batch are dropped before the filter sees them (the
//! consumer gets no aborted list to apply: what it gets is what it may show).

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tinymq_filter::{select, Filter, RecordFields, SelectOptions};
use tinymq_protocol::batch::control::AbortedFilter;
use tinymq_protocol::batch::{
    BatchHeader, BatchIter, ATTR_COMPRESSION_MASK, BATCH_DECOMPRESSED_BYTES_MAX_DEFAULT,
};
use tinymq_protocol::{messages as m, ErrorCode};

use crate::fetch_frame::Records;
use crate::partition::Partition;
use crate::service::fetch::{read_each, PartitionReader};
use crate::service::read::{consumer_partition, read_partition_below, Isolation, PartitionRead};
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
    pub isolation: Isolation,
}

/// The filter of a fetch request: `None` without one; refused on a replica fetch, and when it
/// does not parse (INVALID_FILTER with the parser's message, column included).
pub(crate) fn request_filter(
    req: &m::FetchRequest,
    isolation: Isolation,
) -> Result<Option<FilterScan>, m::Error> {
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
        isolation,
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
            let scan = Scan {
                filter: &self.filter,
                isolation: self.isolation,
            };
            read_filtered(state, fp, position, left, scan, &mut scan_left)
        })
    }

    /// A filtered read looks at every record it scans: always on a blocking thread.
    fn reads_inline_after_wake(&self) -> bool {
        false
    }

    fn answer_now(&mut self, results: &[PartitionRead]) -> bool {
        self.advance(results);
        answer_now(results, self.isolation)
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
/// (Under read committed, before the last stable offset: records at and past it wait for
/// their transactions to end, as an unfiltered read-committed fetch waits.)
fn answer_now(results: &[PartitionRead], isolation: Isolation) -> bool {
    results.iter().any(|(result, records)| {
        records.len() > 0
            || (result.error.is_none() && result.next_offset < isolation.limit(result))
    })
}

/// What a filtered read keeps: the filter's records, and under read committed only those of
/// decided, not aborted, transactions.
#[derive(Clone, Copy)]
pub(crate) struct Scan<'a> {
    pub filter: &'a Filter,
    pub isolation: Isolation,
}

/// One partition of a filtered fetch from `position`: the matching records of whole batches
/// below the high watermark, within `budget` and the partition's bound (one batch past them at
/// most), scanning at most `*scan_left` bytes (reduced by what is read).
pub(crate) fn read_filtered(
    state: &BrokerState,
    fp: &m::FetchPartition,
    position: i64,
    budget: usize,
    scan: Scan<'_>,
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
    let below = scan.isolation.limit(&result);
    while next < below && kept_bytes < limit && *scan_left > 0 {
        let chunk_max = FILTERED_READ_CHUNK_BYTES
            .min(limit - kept_bytes)
            .min(*scan_left);
        let chunk = match read_partition_below(&partition, next, chunk_max, below) {
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
        let chunk_end = chunk_end_offset(&chunk, next);
        let selected = match scan.isolation {
            Isolation::ReadUncommitted => Ok(chunk),
            Isolation::ReadCommitted => committed_only(&partition, chunk, next, chunk_end),
        }
        .and_then(|chunk| select_chunk(&chunk, next, scan.filter));
        let selection = match selected {
            Ok(selection) => selection,
            Err(e) => {
                if next == position {
                    result.error = Some(e);
                }
                break;
            }
        };
        // Batches dropped as aborted (or control) still count as read.
        let read_to = selection.next_offset.max(chunk_end);
        if read_to <= next {
            break; // no whole batch in the chunk: nothing more to read here
        }
        next = read_to;
        if !selection.records.is_empty() {
            kept_bytes += selection.records.len();
            kept.push(selection.records);
        }
    }
    result.next_offset = next;
    (result, Records::Bytes(join(kept, kept_bytes)))
}

/// The offset after the last whole batch of `chunk` (`from` when there is none).
fn chunk_end_offset(chunk: &[u8], from: i64) -> i64 {
    let (mut rest, mut end) = (chunk, from);
    while let Some(header) = BatchHeader::new(rest) {
        match tinymq_protocol::batch::batch_size(rest) {
            Ok(Some(size)) if size <= rest.len() => {
                end = end.max(header.last_offset().saturating_add(1));
                rest = &rest[size..];
            }
            _ => break,
        }
    }
    end
}

/// The batches of `chunk` (read from `from`, ending at `end`) a read-committed consumer may
/// see: no control batch, no batch of an aborted transaction (the partition's aborted list for
/// the range, applied by Kafka's rule). Copied only when something is dropped.
fn committed_only(
    partition: &Partition,
    chunk: Bytes,
    from: i64,
    end: i64,
) -> Result<Bytes, m::Error> {
    let mut aborted = AbortedFilter::new(partition.aborted_in_range(from, end));
    let mut kept = BytesMut::new();
    let mut dropped = false;
    for batch in BatchIter::new(chunk.clone()) {
        let batch = batch.map_err(|e| ErrorCode::CORRUPT_MESSAGE.with_message(e.to_string()))?;
        if aborted.keep(&batch) {
            kept.extend_from_slice(batch.as_bytes());
        } else {
            dropped = true;
        }
    }
    Ok(if dropped { kept.freeze() } else { chunk })
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
