//! A partition's side of transactions (KIP-98): the leader's write of a transaction marker,
//! the last stable offset and aborted transactions a read-committed fetch is bounded by, and
//! how a batch read back from the log (a follower's replicated append, the replay at open)
//! moves the producer and transaction state. The state itself is `crate::partition_txns`,
//! held in the producer table under the partition's producer-state lock.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use tinymq_log::PartitionLog;
use tinymq_protocol::batch::control::{encode_marker, parse_marker, MarkerType};
use tinymq_protocol::batch::{BatchHeader, BatchIter, RecordBatch};
use tinymq_protocol::ErrorCode;

use super::{
    identity_of, identity_of_header, now_ms, Partition, PartitionError, PendingAppend,
    PRODUCERS_WAIT_INLINE_MAX,
};
use crate::producer_state::ProducerStateTable;

/// A transaction marker to write: whose transaction on this partition ends, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarkerWrite {
    pub producer_id: i64,
    /// The producer's epoch, possibly bumped by the coordinator; below the partition's
    /// known epoch is fenced.
    pub producer_epoch: i16,
    pub marker: MarkerType,
    pub coordinator_epoch: i32,
}

impl Partition {
    /// Writes a marker as this partition's leader in `leader_epoch` (stamped like a produced
    /// batch), without waiting for the flush policy; [`Partition::finish`] does that. Refused
    /// (`INVALID_PRODUCER_EPOCH`), with nothing written, when the producer's epoch here is
    /// newer. Blocks on slow disk work (a roll); [`Partition::try_append_marker`] does not.
    pub fn append_marker(
        &self,
        marker: &MarkerWrite,
        leader_epoch: u32,
    ) -> Result<PendingAppend, PartitionError> {
        match self.append_marker_with(marker, leader_epoch, true)? {
            Some(pending) => Ok(pending),
            None => Err(PartitionError::new(
                ErrorCode::UNKNOWN_SERVER_ERROR,
                "a marker write allowed to block did not write",
            )),
        }
    }

    /// [`Partition::append_marker`] for an async task: `Ok(None)`, with nothing changed,
    /// when the write would wait for slow disk work; then run that on a blocking thread.
    pub fn try_append_marker(
        &self,
        marker: &MarkerWrite,
        leader_epoch: u32,
    ) -> Result<Option<PendingAppend>, PartitionError> {
        self.append_marker_with(marker, leader_epoch, false)
    }

    fn append_marker_with(
        &self,
        marker: &MarkerWrite,
        leader_epoch: u32,
        may_block: bool,
    ) -> Result<Option<PendingAppend>, PartitionError> {
        if marker.producer_id < 0 || marker.producer_epoch < 0 {
            return Err(PartitionError::new(
                ErrorCode::INVALID_REQUEST,
                format!(
                    "a marker needs a producer id and epoch (got {} and {})",
                    marker.producer_id, marker.producer_epoch
                ),
            ));
        }
        let now = now_ms();
        let bytes = encode_marker(
            marker.producer_id,
            marker.producer_epoch,
            marker.marker,
            marker.coordinator_epoch,
            now,
        );
        let batch = RecordBatch::parse(bytes)?;
        let mut producers = if may_block {
            self.producers.lock()
        } else {
            match self.producers.try_lock_for(PRODUCERS_WAIT_INLINE_MAX) {
                Some(producers) => producers,
                None => return Ok(None),
            }
        };
        producers.check_marker(marker.producer_id, marker.producer_epoch)?;
        let epoch = leader_epoch as i32;
        let info = if may_block {
            self.log.write_batch(&batch, epoch)?
        } else {
            match self.log.try_write_batch(&batch, epoch)? {
                Some(info) => info,
                None => return Ok(None),
            }
        };
        producers.record_marker(
            marker.producer_id,
            marker.producer_epoch,
            info.base_offset,
            marker.marker,
            now,
        );
        self.publish_unstable(&producers);
        drop(producers);
        self.log_end.send_replace(info.log_end_offset);
        self.stable_offset_moved();
        Ok(Some(PendingAppend {
            base_offset: info.base_offset,
            end_offset: info.log_end_offset,
            leader_epoch,
        }))
    }

    /// The last stable offset: the high watermark, or the first offset of the oldest open
    /// transaction if lower. A read-committed consumer reads below it.
    /// Whether a transactional batch of `producer_id` in `producer_epoch` must first be
    /// verified with its coordinator: it would open a transaction here.
    pub fn needs_txn_verification(&self, producer_id: i64, producer_epoch: i16) -> bool {
        self.producers
            .lock()
            .txns()
            .needs_verification(producer_id, producer_epoch)
    }

    /// Records the coordinator's confirmation that this partition is in `producer_id`'s open
    /// transaction of `producer_epoch`: its next batch may open the transaction here, unless
    /// a marker for it comes first.
    pub fn txn_verified(
        &self,
        producer_id: i64,
        producer_epoch: i16,
    ) -> Result<(), PartitionError> {
        Ok(self
            .producers
            .lock()
            .txn_verified(producer_id, producer_epoch)?)
    }

    pub fn last_stable_offset(&self) -> i64 {
        self.last_stable_offset_at(self.high_watermark())
    }

    /// The last stable offset given a high watermark read before (so the two agree). Takes
    /// no lock.
    pub fn last_stable_offset_at(&self, high_watermark: i64) -> i64 {
        high_watermark.min(self.first_unstable.load(Ordering::Acquire))
    }

    /// Publishes the oldest open transaction's first offset of `table` (this partition's,
    /// whose lock the caller holds) for [`Partition::last_stable_offset_at`].
    pub(crate) fn publish_unstable(&self, table: &ProducerStateTable) {
        let first = table.txns().last_stable_offset(i64::MAX);
        self.first_unstable.store(first, Ordering::Release);
    }

    /// The aborted transactions (producer id, first offset) a read-committed fetch returning
    /// the records in `fetch_offset..upper_offset` carries (Kafka's rule: marker at or after
    /// the fetch offset, first offset below the upper one).
    pub fn aborted_in_range(&self, fetch_offset: i64, upper_offset: i64) -> Vec<(i64, i64)> {
        self.producers
            .lock()
            .txns()
            .aborted_in_range(fetch_offset, upper_offset)
    }

    /// Wakes whatever waits on the high watermark: the last stable offset moved without it
    /// (a marker closed a transaction), and read-committed long polls wait on that watch.
    pub(crate) fn stable_offset_moved(&self) {
        self.high_watermark.send_modify(|_| {});
    }

    /// Applies batches appended as they are (a follower's copy of its leader's) to the
    /// producer and transaction state, as the leader did when it wrote them. Returns whether
    /// any was a marker (the last stable offset may have moved).
    pub(crate) fn record_replicated(&self, records: Bytes) -> Result<bool, PartitionError> {
        let now = now_ms();
        let mut producers = self.producers.lock();
        let mut outcome = Ok(false);
        for batch in BatchIter::new(records) {
            match batch {
                Ok(batch) => {
                    if batch.is_control() {
                        outcome = Ok(true);
                    }
                    apply_logged_batch(&mut producers, &batch, now);
                }
                Err(e) => {
                    outcome = Err(e.into());
                    break;
                }
            }
        }
        self.publish_unstable(&producers);
        outcome
    }
}

/// One batch read back from the log, applied to the table: a marker closes its producer's
/// transaction; a data batch records its producer's sequence and, when transactional, opens
/// or extends its transaction. A control batch that is not a marker this version knows is
/// skipped with a warning (the leader checked what it wrote; nothing read from disk panics).
fn apply_logged_batch(table: &mut ProducerStateTable, batch: &RecordBatch, now: i64) {
    if batch.is_control() {
        match parse_marker(batch) {
            Ok(m) => table.record_marker(
                m.producer_id,
                m.producer_epoch,
                batch.base_offset(),
                m.marker,
                now,
            ),
            Err(e) => tracing::warn!(
                offset = batch.base_offset(),
                error = %e,
                "control batch is not a marker; ignored"
            ),
        }
        return;
    }
    let identity = identity_of(batch);
    let (base, last) = (batch.base_offset(), batch.last_offset());
    table.record_batch(&identity, batch.is_transactional(), base, last, now);
}

/// One batch header of the replay at open, applied to the table: a data batch from its
/// header alone; a control batch is read whole from `log` (it is tiny) for its marker type.
pub(crate) fn replay_header(
    table: &mut ProducerStateTable,
    log: &PartitionLog,
    header: BatchHeader<'_>,
    now: i64,
) {
    if !header.is_control() {
        let (identity, base, last) = identity_of_header(header);
        table.record_batch(&identity, header.is_transactional(), base, last, now);
        return;
    }
    let base = header.base_offset();
    let batch = log
        .read(base, 1, None)
        .map_err(|e| e.to_string())
        .and_then(|read| match BatchIter::new(read.records).next() {
            Some(Ok(batch)) if batch.base_offset() == base => Ok(batch),
            Some(Err(e)) => Err(e.to_string()),
            _ => Err("not found where its header is".into()),
        });
    match batch {
        Ok(batch) => apply_logged_batch(table, &batch, now),
        Err(e) => tracing::warn!(offset = base, error = %e, "control batch unreadable; ignored"),
    }
}

#[cfg(test)]
#[path = "txn_tests.rs"]
mod tests;
