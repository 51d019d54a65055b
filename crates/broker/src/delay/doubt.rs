//! Whether in-doubt batches are in the partition, read from the partition itself: the
//! fallback for when the partition's producer state cannot tell (review finding 2).
//!
//! The producer state forgets a producer 24 h after its last write, and evicts the oldest of
//! more than 10,000 per partition; a broker that leads a partition again a day after a crash
//! between an append and its `Delivered` mark (or after a clean stop in that window) meets
//! exactly that. "Unknown producer" then says nothing about whether the batch is there, so
//! each `Assigned` entry records the partition's log end offset when its identity was given:
//! a batch appended under that identity lies at or above it (offsets are the same on every
//! replica, and an append under it comes after the entry is fsynced). One scan from the
//! lowest such offset to the log end finds every in-doubt identity written there.
//!
//! Why a scan rather than exempting scheduler producers from expiry: the producer state
//! belongs to the partition (and is rebuilt from snapshots and followers' replication), and
//! keeping ids forever there would grow it without bound; the scan costs one read of what the
//! partition received since the oldest in-doubt assignment, and only happens when the
//! producer state has no answer (a new scheduler producer's first batch, normally a scan of a
//! few batches; after a long absence, of everything written meanwhile, once per round).
//!
//! What it cannot see: batches retention has removed. When the log now starts above the
//! recorded offset the scan is incomplete, and an identity not found is appended again — at
//! least once rather than lost (and logged).

use std::collections::HashSet;

use tinymq_delay::Waiting;
use tinymq_log::LogError;
use tinymq_protocol::batch::{batch_size, BatchHeader};

use crate::partition::Partition;

/// Bytes read from the partition per step of a scan.
const SCAN_READ_BYTES: usize = 1 << 20;

/// (producer id, producer epoch, base sequence) of a batch.
pub(super) type BatchKey = (i64, i16, i32);

/// What a scan found.
#[derive(Debug, Default)]
pub(super) struct Written {
    /// The wanted identities that have a batch in the scanned range.
    pub found: HashSet<BatchKey>,
    /// False when the log starts above where the scan was to start (some may be gone).
    pub complete: bool,
}

/// The identity an assigned entry's batch carries, when it has one and a recorded offset.
pub(super) fn key_of(w: &Waiting) -> Option<BatchKey> {
    let stamp = w.slot.assigned?;
    (w.slot.scan_from_offset >= 0).then_some((
        stamp.producer_id,
        stamp.producer_epoch,
        stamp.sequence,
    ))
}

/// Scans `partition` from the lowest recorded offset of `doubtful` to its end for batches
/// with their identities (blocks: it reads the log).
pub(super) fn scan(partition: &Partition, doubtful: &[Waiting]) -> Result<Written, LogError> {
    let wanted: HashSet<BatchKey> = doubtful.iter().filter_map(key_of).collect();
    let from = doubtful
        .iter()
        .filter(|w| key_of(w).is_some())
        .map(|w| w.slot.scan_from_offset)
        .min();
    let Some(from) = from else {
        return Ok(Written {
            found: HashSet::new(),
            complete: true,
        });
    };
    let start = partition.log.log_start_offset();
    let mut written = Written {
        found: HashSet::new(),
        complete: start <= from,
    };
    let mut offset = from.max(start);
    // The log may end below the recorded offset (truncated to another leader's since): then
    // nothing appended under these identities survived, and reading there would be refused.
    if offset >= partition.log.log_end_offset() {
        return Ok(written);
    }
    loop {
        let read = partition.log.read(offset, SCAN_READ_BYTES, None)?;
        let next = collect(&read.records, offset, &wanted, &mut written.found);
        // No progress (nothing readable at `offset`): the end is reached.
        if next <= offset || next >= read.log_end_offset {
            return Ok(written);
        }
        offset = next;
    }
}

/// Adds the wanted identities of the whole batches in `records` that end at or above
/// `offset`; returns the offset after the last batch read (`offset` if none).
fn collect(
    records: &[u8],
    offset: i64,
    wanted: &HashSet<BatchKey>,
    found: &mut HashSet<BatchKey>,
) -> i64 {
    let mut next = offset;
    let mut rest = records;
    while let (Some(header), Ok(Some(size))) = (BatchHeader::new(rest), batch_size(rest)) {
        let Some(after) = rest.get(size..) else {
            break;
        };
        if header.last_offset() >= offset {
            let key = (
                header.producer_id(),
                header.producer_epoch(),
                header.base_sequence(),
            );
            if wanted.contains(&key) {
                found.insert(key);
            }
        }
        next = next.max(header.last_offset().saturating_add(1));
        rest = after;
    }
    next
}
