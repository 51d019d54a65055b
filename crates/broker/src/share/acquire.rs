//! One partition's acquisition for a ShareFetch (blocking: it reads the log): follows the
//! share partition's plan, reads the batches from each planned offset, marks done the offsets
//! no batch holds and (with a filter) the records that do not match, acquires the rest, and
//! returns the batches holding acquired records — whole, or with a filter re-encoded to hold
//! only the acquired records (`tinymq_filter::select`).

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tinymq_filter::{select, Filter, RecordFields, SelectOptions};
use tinymq_protocol::batch::{batch_size, BatchHeader, BATCH_DECOMPRESSED_BYTES_MAX_DEFAULT};
use tinymq_protocol::{messages as m, ErrorCode};
use tinymq_share::{AcquiredRange, SharePartition, StateRecord};

use super::registry::{share_error, SharedPartition};
use crate::state::BrokerState;

/// What a fetch asks of each partition.
#[derive(Clone)]
pub(crate) struct Asked {
    pub member: Arc<str>,
    pub max_records: u32,
    pub lock_ms: u32,
    pub filter: Option<Arc<Filter>>,
}

/// One partition's acquisition: the batches, the acquired ranges, the log sequence to sync.
pub(crate) struct Acquisition {
    pub records: Bytes,
    pub acquired: Vec<AcquiredRange>,
    pub sequence: u64,
    /// The deadline the locks were taken with (the answer reports this one, not a later
    /// clock reading, so a member never believes it holds a record longer than it does).
    pub lock_deadline_ms: i64,
}

/// Acquires in one partition. Whatever the state machine logged is appended even when
/// reading fails half-way. Refused (NOT_LEADER) through a retired instance or when this
/// broker no longer leads the partition in the instance's epoch: a long poll holding an old
/// instance must not hand out records the live instance (or the new leader) also hands out.
pub(crate) fn acquire_partition(
    state: &BrokerState,
    shared: &SharedPartition,
    asked: &Asked,
    budget: usize,
) -> Result<Acquisition, m::Error> {
    let max_attempts = shared.settings(state).max_delivery_attempts;
    let mut share = shared.state.lock();
    if !shared.still_led(state) {
        return Err(shared.not_live());
    }
    let mut taking = Taking {
        share: &mut share,
        asked,
        lock_deadline_ms: crate::partition::now_ms() + i64::from(asked.lock_ms),
        max_attempts,
        log: Vec::new(),
        out: BytesMut::new(),
        included: BTreeSet::new(),
        acquired: Vec::new(),
    };
    let outcome = taking.run(shared, budget);
    if outcome.is_err() {
        // Nobody will see these records: available again now, not after `lock_ms`, and this
        // delivery not counted (logged with the acquisitions, so a rebuild agrees).
        taking
            .share
            .return_unseen(&asked.member, &taking.acquired, &mut taking.log);
    }
    let sequence = shared.append(&taking.log)?;
    outcome?;
    Ok(Acquisition {
        records: taking.out.freeze(),
        acquired: coalesce(taking.acquired),
        sequence,
        lock_deadline_ms: taking.lock_deadline_ms,
    })
}

/// Merges adjacent ranges of one delivery count (separate reads and batches split them).
fn coalesce(ranges: Vec<AcquiredRange>) -> Vec<AcquiredRange> {
    let mut merged: Vec<AcquiredRange> = Vec::with_capacity(ranges.len());
    for range in ranges {
        match merged.last_mut() {
            Some(last)
                if last.delivery_count == range.delivery_count
                    && last.last_offset + 1 == range.first_offset =>
            {
                last.last_offset = range.last_offset;
            }
            _ => merged.push(range),
        }
    }
    merged
}

struct Taking<'a> {
    share: &'a mut SharePartition,
    asked: &'a Asked,
    lock_deadline_ms: i64,
    max_attempts: u32,
    log: Vec<StateRecord>,
    out: BytesMut,
    /// Base offsets of the batches in `out`: two planned ranges may lie in one batch.
    included: BTreeSet<i64>,
    acquired: Vec<AcquiredRange>,
}

impl Taking<'_> {
    fn run(&mut self, shared: &SharedPartition, budget: usize) -> Result<(), m::Error> {
        let partition = &shared.partition;
        self.share
            .advance_to(partition.log.log_start_offset(), &mut self.log);
        let plan = self
            .share
            .plan(self.asked.max_records, partition.high_watermark());
        for (first, last) in plan {
            let mut next = first;
            while next <= last {
                let left = budget.saturating_sub(self.out.len());
                if left == 0 {
                    return Ok(());
                }
                let bytes = crate::service::read::read_partition(partition, next, left)?;
                let before = next;
                let mut rest = &bytes[..];
                while let Some(header) = BatchHeader::new(rest) {
                    let size = match batch_size(rest) {
                        Ok(Some(size)) if size <= rest.len() => size,
                        _ => break,
                    };
                    let (base, batch_last) = (header.base_offset(), header.last_offset());
                    let batch = &rest[..size];
                    rest = &rest[size..];
                    if batch_last < next {
                        continue;
                    }
                    // No batch holds the offsets before `base`: done without delivery.
                    let hole_last = base.saturating_sub(1).min(last);
                    if hole_last >= next {
                        self.skip(next, hole_last)?;
                        next = hole_last.saturating_add(1);
                    }
                    if base > last {
                        break;
                    }
                    if !self.out.is_empty() && self.out.len() + size > budget {
                        return Ok(());
                    }
                    let high = batch_last.min(last);
                    self.take_batch(batch, base, (next, high))?;
                    next = high.saturating_add(1);
                }
                if next == before {
                    // Nothing readable at `next` (below the log start, or not visible yet).
                    break;
                }
            }
        }
        Ok(())
    }

    fn skip(&mut self, first: i64, last: i64) -> Result<(), m::Error> {
        self.share
            .skip(first, last, &mut self.log)
            .map_err(|e| share_error(&e))
    }

    fn acquire(&mut self, first: i64, last: i64) -> Result<Vec<AcquiredRange>, m::Error> {
        let (member, deadline) = (&self.asked.member, self.lock_deadline_ms);
        self.share
            .acquire(
                member,
                (first, last),
                deadline,
                self.max_attempts,
                &mut self.log,
            )
            .map_err(|e| share_error(&e))
    }

    /// Acquires `first..=last` of one batch (the matching records, with a filter) and keeps
    /// the batch for the answer if any record of it was acquired.
    fn take_batch(
        &mut self,
        batch: &[u8],
        base: i64,
        (first, last): (i64, i64),
    ) -> Result<(), m::Error> {
        let Some(filter) = self.asked.filter.clone() else {
            let ranges = self.acquire(first, last)?;
            if !ranges.is_empty() {
                if self.included.insert(base) {
                    self.out.extend_from_slice(batch);
                }
                self.acquired.extend(ranges);
            }
            return Ok(());
        };
        let mut matching = Vec::new();
        select_from(batch, first, |offset, fields| {
            if (first..=last).contains(&offset) {
                matching.push((offset, filter.matches(fields)));
            }
            false
        })?;
        // Runs of matching and non-matching records, in offset order (new records must be
        // taken from the end offset on without holes).
        let mut taken = BTreeSet::new();
        let mut at = 0;
        while let Some(&(run_first, matches)) = matching.get(at) {
            let mut run_last = run_first;
            while let Some(&(offset, m)) = matching.get(at + 1) {
                if m != matches || offset != run_last + 1 {
                    break;
                }
                run_last = offset;
                at += 1;
            }
            at += 1;
            if matches {
                for range in self.acquire(run_first, run_last)? {
                    taken.extend(range.first_offset..=range.last_offset);
                    self.acquired.push(range);
                }
            } else {
                self.skip(run_first, run_last)?;
            }
        }
        if !taken.is_empty() {
            let kept = select_from(batch, first, |offset, _| taken.contains(&offset))?;
            self.out.extend_from_slice(&kept);
        }
        Ok(())
    }
}

/// `tinymq_filter::select` over one batch from `from_offset`, within the broker's
/// decompression slots and limit.
fn select_from(
    batch: &[u8],
    from_offset: i64,
    keep: impl FnMut(i64, &dyn RecordFields) -> bool,
) -> Result<Bytes, m::Error> {
    let options = SelectOptions {
        from_offset,
        decompressed_bytes_max: BATCH_DECOMPRESSED_BYTES_MAX_DEFAULT,
    };
    crate::partition::with_decompression_slot(|| select(batch, keep, &options))
        .map(|selection| selection.records)
        .map_err(|e| ErrorCode::CORRUPT_MESSAGE.with_message(e.to_string()))
}
