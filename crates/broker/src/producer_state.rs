//! Idempotent-producer state of one partition: for each producer id, its epoch and the last
//! few batches it wrote (sequence range → offsets). Pure logic; the partition applies it
//! around log appends and rebuilds it from the log's batch headers after a restart.
//!
//! Rules (Kafka's, as of KIP-360):
//! - a batch whose producer id is -1 is not idempotent and always appended;
//! - an epoch below the known one is fenced (`INVALID_PRODUCER_EPOCH`);
//! - a producer this partition has no state for (new, expired or evicted) must start at
//!   sequence 0; any other sequence is `UNKNOWN_PRODUCER_ID` (its state is gone, so a
//!   duplicate could not be recognised);
//! - a known producer with a higher epoch must start at sequence 0 (`OUT_OF_ORDER_SEQUENCE`);
//! - a batch whose sequence range equals one of the last [`BATCHES_REMEMBERED`] is a duplicate
//!   and is answered with the offsets it got the first time;
//! - otherwise its first sequence must follow the last one written (`OUT_OF_ORDER_SEQUENCE`).
//!
//! - a transaction marker carries the producer's epoch: one below the known epoch is fenced
//!   (`INVALID_PRODUCER_EPOCH`); a higher one replaces it, as a batch in that epoch would, so
//!   the producer's next batch starts at sequence 0.
//!
//! The table is bounded: a producer not heard from for [`PRODUCER_ID_EXPIRATION_MS`] is
//! forgotten (Kafka's `producer.id.expiration.ms`), and past [`PRODUCERS_PER_PARTITION_MAX`]
//! the producer whose last batch is earliest in the log is forgotten to make room. A producer
//! with an open transaction here is never forgotten (as in Kafka): its marker must find it.
//! When every remembered producer has one, the table takes one producer more than the bound
//! (the next new one replaces it); open transactions are themselves bounded
//! (`partition_txns`).
//!
//! The table also holds the partition's transactions ([`PartitionTxns`]), kept with the
//! producers because both are applied from the same batches, snapshotted together and rebuilt
//! together from the log.

use std::collections::{BTreeSet, HashMap, VecDeque};

use serde::{Deserialize, Serialize};
use tinymq_protocol::batch::control::MarkerType;

use crate::partition_txns::{PartitionTxns, OPEN_TXNS_PER_PARTITION_MAX};

// Every open transaction pins its producer here, so the two bounds are one.
const _: () = assert!(OPEN_TXNS_PER_PARTITION_MAX == PRODUCERS_PER_PARTITION_MAX);

/// How many recent batches are remembered per producer: as many as a client may have in
/// flight, so any retry of an in-flight batch is recognised.
pub const BATCHES_REMEMBERED: usize = 5;
/// A producer that has not written to a partition for this long is forgotten (1 day, as
/// Kafka's default).
pub const PRODUCER_ID_EXPIRATION_MS: i64 = 24 * 3600 * 1000;
/// Most producers remembered per partition (about 200 bytes each).
pub const PRODUCERS_PER_PARTITION_MAX: usize = 10_000;
/// Expired producers are looked for at most this often, on a write.
const EXPIRY_CHECK_INTERVAL_MS: i64 = 60 * 1000;

/// A batch as the producer state sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchIdentity {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub first_sequence: i32,
    pub last_sequence: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct WrittenBatch {
    first_sequence: i32,
    last_sequence: i32,
    base_offset: i64,
    last_offset: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct ProducerEntry {
    epoch: i16,
    batches: VecDeque<WrittenBatch>,
    /// Wall-clock time of the producer's last write here (in a snapshot from before this was
    /// kept, the time it is loaded: expiry never shortens how long a retry is recognised).
    #[serde(default = "wall_clock_ms")]
    last_write_ms: i64,
}

fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// What to do with an incoming batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    Append,
    /// Already written: answer with these offsets and do not append again.
    Duplicate {
        base_offset: i64,
        last_offset: i64,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SequenceError {
    #[error("producer {producer_id} epoch {got} is older than the current epoch {current}")]
    StaleEpoch {
        producer_id: i64,
        got: i16,
        current: i16,
    },
    #[error("producer {producer_id}: expected sequence {expected}, got {got}")]
    OutOfOrder {
        producer_id: i64,
        expected: i32,
        got: i32,
    },
    #[error(
        "producer {producer_id} has no state on this partition (new, or forgotten after \
         expiry or eviction) and sent sequence {got}; a producer starts at sequence 0"
    )]
    UnknownProducer { producer_id: i64, got: i32 },
}

/// The state of every producer that wrote to one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerStateTable {
    producers: HashMap<i64, ProducerEntry>,
    /// Open and aborted transactions (absent from snapshots written before transactions).
    #[serde(default)]
    txns: PartitionTxns,
    /// (last offset written, producer id) of every producer: the least recent writer first,
    /// so that eviction never scans the table. Derived from `producers`; rebuilt after a
    /// snapshot is loaded.
    #[serde(skip)]
    by_recency: BTreeSet<(i64, i64)>,
    #[serde(skip)]
    last_expiry_check_ms: i64,
}

fn recency_key(id: i64, entry: &ProducerEntry) -> (i64, i64) {
    (entry.batches.back().map_or(i64::MIN, |b| b.last_offset), id)
}

fn next_sequence(last: i32) -> i32 {
    if last == i32::MAX {
        0
    } else {
        last + 1
    }
}

impl ProducerStateTable {
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// The last offset of each producer's last batch: what the log cleaner keeps (emptied if
    /// need be) so that the producer's sequence survives a rebuild of this table from the log.
    pub fn last_batch_ends(&self) -> std::collections::HashSet<i64> {
        self.producers
            .values()
            .filter_map(|e| e.batches.back().map(|b| b.last_offset))
            .collect()
    }

    /// The partition's transactions.
    /// Every producer known here (DescribeProducers): id, epoch, last sequence written
    /// (-1 before any batch in its epoch), time of its last write, and where its open
    /// transaction starts, if it has one.
    pub fn describe(&self) -> Vec<(i64, i16, i32, i64, Option<i64>)> {
        let mut all: Vec<_> = self
            .producers
            .iter()
            .map(|(&id, e)| {
                let last_sequence = e.batches.back().map_or(-1, |b| b.last_sequence);
                let open = self.txns.ongoing(id).map(|t| t.first_offset);
                (id, e.epoch, last_sequence, e.last_write_ms, open)
            })
            .collect();
        all.sort_unstable_by_key(|p| p.0);
        all
    }

    /// The coordinator confirmed `producer_id`'s transaction of `producer_epoch` holds this
    /// partition (see [`PartitionTxns::verified`]).
    pub fn txn_verified(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
    ) -> Result<(), crate::partition_txns::TxnError> {
        self.txns.verified(producer_id, producer_epoch)
    }

    pub fn txns(&self) -> &PartitionTxns {
        &self.txns
    }

    /// Forgets aborted transactions below the log start (after retention moved it).
    pub fn trim_txns_below(&mut self, log_start_offset: i64) {
        self.txns.trim_below(log_start_offset);
    }

    /// The producer's epoch here, if it is remembered.
    pub fn epoch(&self, producer_id: i64) -> Option<i16> {
        self.producers.get(&producer_id).map(|e| e.epoch)
    }

    /// Whether a marker of `producer_id` in `producer_epoch` may be written: not below the
    /// epoch this partition knows (that producer has been fenced by a newer instance).
    pub fn check_marker(&self, producer_id: i64, producer_epoch: i16) -> Result<(), SequenceError> {
        match self.producers.get(&producer_id) {
            Some(entry) if producer_epoch < entry.epoch => Err(SequenceError::StaleEpoch {
                producer_id,
                got: producer_epoch,
                current: entry.epoch,
            }),
            _ => Ok(()),
        }
    }

    /// Records a marker written at `offset`: the producer takes its epoch (a higher one
    /// restarts its sequences, as a batch in a new epoch does; a lower one, which the leader
    /// refuses, changes nothing), and its open transaction here is closed.
    pub fn record_marker(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        offset: i64,
        marker: MarkerType,
        now_ms: i64,
    ) {
        if producer_id < 0 {
            return;
        }
        self.txns.apply_marker(producer_id, offset, marker);
        self.make_room(producer_id, now_ms);
        let is_new = !self.producers.contains_key(&producer_id);
        let entry = self.producers.entry(producer_id).or_default();
        self.by_recency.remove(&recency_key(producer_id, entry));
        if is_new || producer_epoch > entry.epoch {
            entry.epoch = producer_epoch;
            entry.batches.clear();
        }
        entry.last_write_ms = entry.last_write_ms.max(now_ms);
        self.by_recency.insert(recency_key(producer_id, entry));
    }

    /// [`ProducerStateTable::record`] for a batch that may be transactional: a transactional
    /// one also opens (or extends) its producer's transaction here.
    pub fn record_batch(
        &mut self,
        batch: &BatchIdentity,
        transactional: bool,
        base_offset: i64,
        last_offset: i64,
        now_ms: i64,
    ) {
        if transactional && batch.producer_id >= 0 {
            self.txns.apply_data(
                batch.producer_id,
                batch.producer_epoch,
                base_offset,
                last_offset,
            );
        }
        self.record(batch, base_offset, last_offset, now_ms);
    }

    /// Expires producers (at most once a minute) and, when the table is full and
    /// `producer_id` is not in it, forgets the least recent writer.
    fn make_room(&mut self, producer_id: i64, now_ms: i64) {
        if self.by_recency.len() != self.producers.len() {
            self.reindex();
        }
        if now_ms.saturating_sub(self.last_expiry_check_ms) >= EXPIRY_CHECK_INTERVAL_MS {
            self.expire(now_ms);
        }
        if !self.producers.contains_key(&producer_id)
            && self.producers.len() >= PRODUCERS_PER_PARTITION_MAX
        {
            self.evict_least_recent();
        }
    }

    pub fn check(&self, batch: &BatchIdentity) -> Result<SequenceCheck, SequenceError> {
        if batch.producer_id < 0 {
            return Ok(SequenceCheck::Append);
        }
        let Some(entry) = self.producers.get(&batch.producer_id) else {
            return match batch.first_sequence {
                0 => Ok(SequenceCheck::Append),
                got => Err(SequenceError::UnknownProducer {
                    producer_id: batch.producer_id,
                    got,
                }),
            };
        };
        if batch.producer_epoch < entry.epoch {
            return Err(SequenceError::StaleEpoch {
                producer_id: batch.producer_id,
                got: batch.producer_epoch,
                current: entry.epoch,
            });
        }
        if batch.producer_epoch > entry.epoch {
            return expect_first(batch, 0);
        }
        if let Some(written) = entry.batches.iter().find(|w| {
            w.first_sequence == batch.first_sequence && w.last_sequence == batch.last_sequence
        }) {
            return Ok(SequenceCheck::Duplicate {
                base_offset: written.base_offset,
                last_offset: written.last_offset,
            });
        }
        let expected = entry
            .batches
            .back()
            .map_or(0, |last| next_sequence(last.last_sequence));
        expect_first(batch, expected)
    }

    /// Records a batch that was appended at `base_offset..=last_offset` at wall-clock time
    /// `now_ms`, forgetting expired producers (at most once a minute) and, when the table is
    /// full, the least recently written one.
    pub fn record(
        &mut self,
        batch: &BatchIdentity,
        base_offset: i64,
        last_offset: i64,
        now_ms: i64,
    ) {
        if batch.producer_id < 0 {
            return;
        }
        self.make_room(batch.producer_id, now_ms);
        let entry = self.producers.entry(batch.producer_id).or_default();
        self.by_recency
            .remove(&recency_key(batch.producer_id, entry));
        if batch.producer_epoch != entry.epoch {
            entry.epoch = batch.producer_epoch;
            entry.batches.clear();
        }
        if entry.batches.len() == BATCHES_REMEMBERED {
            entry.batches.pop_front();
        }
        entry.batches.push_back(WrittenBatch {
            first_sequence: batch.first_sequence,
            last_sequence: batch.last_sequence,
            base_offset,
            last_offset,
        });
        entry.last_write_ms = entry.last_write_ms.max(now_ms);
        self.by_recency
            .insert(recency_key(batch.producer_id, entry));
    }

    fn reindex(&mut self) {
        self.by_recency = self
            .producers
            .iter()
            .map(|(id, e)| recency_key(*id, e))
            .collect();
    }

    /// Forgets every producer that has not written for [`PRODUCER_ID_EXPIRATION_MS`] and has
    /// no open transaction here.
    pub fn expire(&mut self, now_ms: i64) {
        self.last_expiry_check_ms = now_ms;
        let before = self.producers.len();
        let (by_recency, txns) = (&mut self.by_recency, &self.txns);
        self.producers.retain(|id, e| {
            let keep = now_ms.saturating_sub(e.last_write_ms) < PRODUCER_ID_EXPIRATION_MS
                || txns.is_open(*id);
            if !keep {
                by_recency.remove(&recency_key(*id, e));
            }
            keep
        });
        let expired = before - self.producers.len();
        if expired > 0 {
            tracing::debug!(expired, "forgot producers idle past their expiration");
        }
    }

    /// Forgets the producer whose last batch is earliest in the log: the least recent writer,
    /// known without a clock (so the order is the same after a rebuild from the log). Producers
    /// with an open transaction are passed over (there are at most
    /// [`PRODUCERS_PER_PARTITION_MAX`] of them); when every one has one, nobody is forgotten.
    fn evict_least_recent(&mut self) {
        let victim = self
            .by_recency
            .iter()
            .find(|(_, id)| !self.txns.is_open(*id))
            .copied();
        if let Some(key @ (_, id)) = victim {
            tracing::debug!(
                producer = id,
                "producer table full; forgetting the least recent"
            );
            self.by_recency.remove(&key);
            self.producers.remove(&id);
        }
    }
}

fn expect_first(batch: &BatchIdentity, expected: i32) -> Result<SequenceCheck, SequenceError> {
    if batch.first_sequence == expected {
        Ok(SequenceCheck::Append)
    } else {
        Err(SequenceError::OutOfOrder {
            producer_id: batch.producer_id,
            expected,
            got: batch.first_sequence,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000_000;

    fn id(epoch: i16, first: i32, last: i32) -> BatchIdentity {
        BatchIdentity {
            producer_id: 7,
            producer_epoch: epoch,
            first_sequence: first,
            last_sequence: last,
        }
    }

    #[test]
    fn sequences_must_follow_and_retries_are_duplicates() {
        let mut table = ProducerStateTable::default();
        assert_eq!(table.check(&id(0, 0, 9)), Ok(SequenceCheck::Append));
        table.record(&id(0, 0, 9), 100, 109, NOW);
        assert_eq!(
            table.check(&id(0, 0, 9)),
            Ok(SequenceCheck::Duplicate {
                base_offset: 100,
                last_offset: 109
            })
        );
        assert_eq!(table.check(&id(0, 10, 12)), Ok(SequenceCheck::Append));
        assert!(matches!(
            table.check(&id(0, 11, 12)),
            Err(SequenceError::OutOfOrder { expected: 10, .. })
        ));
        assert!(matches!(
            table.check(&id(0, 20, 22)),
            Err(SequenceError::OutOfOrder { .. })
        ));
    }

    #[test]
    fn only_the_last_five_batches_are_remembered() {
        let mut table = ProducerStateTable::default();
        for i in 0..6 {
            table.record(&id(0, i, i), i64::from(i), i64::from(i), NOW);
        }
        assert!(matches!(
            table.check(&id(0, 0, 0)),
            Err(SequenceError::OutOfOrder { .. })
        ));
        assert!(matches!(
            table.check(&id(0, 1, 1)),
            Ok(SequenceCheck::Duplicate { .. })
        ));
    }

    #[test]
    fn epochs_fence_and_reset() {
        let mut table = ProducerStateTable::default();
        table.record(&id(3, 0, 4), 0, 4, NOW);
        assert!(matches!(
            table.check(&id(2, 5, 5)),
            Err(SequenceError::StaleEpoch { current: 3, .. })
        ));
        assert!(matches!(
            table.check(&id(4, 5, 5)),
            Err(SequenceError::OutOfOrder { expected: 0, .. })
        ));
        assert_eq!(table.check(&id(4, 0, 0)), Ok(SequenceCheck::Append));
        table.record(&id(4, 0, 0), 5, 5, NOW);
        assert_eq!(table.check(&id(4, 1, 1)), Ok(SequenceCheck::Append));
    }

    #[test]
    fn new_producers_start_at_zero_and_non_idempotent_batches_pass() {
        let table = ProducerStateTable::default();
        assert_eq!(
            table.check(&id(0, 3, 3)),
            Err(SequenceError::UnknownProducer {
                producer_id: 7,
                got: 3
            })
        );
        let plain = BatchIdentity {
            producer_id: -1,
            producer_epoch: -1,
            first_sequence: -1,
            last_sequence: -1,
        };
        assert_eq!(table.check(&plain), Ok(SequenceCheck::Append));
    }

    #[test]
    fn sequences_wrap_at_i32_max() {
        let mut table = ProducerStateTable::default();
        table.record(&id(0, i32::MAX - 1, i32::MAX), 0, 1, NOW);
        assert_eq!(table.check(&id(0, 0, 3)), Ok(SequenceCheck::Append));
    }

    #[test]
    fn markers_fence_lower_epochs_and_a_higher_one_restarts_sequences() {
        let mut table = ProducerStateTable::default();
        table.record_batch(&id(2, 0, 4), true, 0, 4, NOW);
        assert!(table.txns().is_open(7));
        assert!(matches!(
            table.check_marker(7, 1),
            Err(SequenceError::StaleEpoch { current: 2, .. })
        ));
        assert!(table.check_marker(7, 2).is_ok());
        assert!(table.check_marker(99, 0).is_ok(), "unknown producers pass");
        // Same epoch: the sequence continues after the marker.
        table.record_marker(7, 2, 5, MarkerType::Commit, NOW);
        assert!(!table.txns().is_open(7));
        assert_eq!(table.check(&id(2, 5, 5)), Ok(SequenceCheck::Append));
        // A bumped epoch (the coordinator's abort after a timeout): the old epoch is fenced
        // and the next batch starts at 0.
        table.record_batch(&id(2, 5, 5), true, 6, 6, NOW);
        table.record_marker(7, 3, 7, MarkerType::Abort, NOW);
        assert_eq!(table.epoch(7), Some(3));
        assert!(matches!(
            table.check(&id(2, 6, 6)),
            Err(SequenceError::StaleEpoch { .. })
        ));
        assert!(matches!(
            table.check(&id(3, 6, 6)),
            Err(SequenceError::OutOfOrder { expected: 0, .. })
        ));
        assert_eq!(table.check(&id(3, 0, 0)), Ok(SequenceCheck::Append));
        assert_eq!(table.txns().aborted_in_range(0, 10), vec![(7, 6)]);
    }

    #[test]
    fn a_producer_with_an_open_transaction_is_neither_expired_nor_evicted() {
        let mut table = ProducerStateTable::default();
        table.record_batch(&of(1), true, 0, 0, NOW);
        table.record(&of(2), 1, 1, NOW);
        table.expire(NOW + 2 * PRODUCER_ID_EXPIRATION_MS);
        assert_eq!(table.len(), 1);
        assert_eq!(
            table.epoch(1),
            Some(0),
            "kept while its transaction is open"
        );
        let mut full = ProducerStateTable::default();
        full.record_batch(&of(0), true, 0, 0, NOW);
        for p in 1..PRODUCERS_PER_PARTITION_MAX as i64 {
            full.record(&of(p), p, p, NOW);
        }
        full.record(&of(100_000), 20_000, 20_000, NOW);
        assert_eq!(full.len(), PRODUCERS_PER_PARTITION_MAX);
        assert!(
            full.epoch(0).is_some(),
            "the least recent, but in a transaction"
        );
        assert!(full.epoch(1).is_none(), "the least recent without one");
        full.record_marker(0, 0, 20_001, MarkerType::Commit, NOW);
        full.record(&of(100_001), 20_002, 20_002, NOW);
        assert!(
            full.epoch(0).is_none(),
            "evictable once its transaction ended"
        );
    }

    fn of(producer_id: i64) -> BatchIdentity {
        BatchIdentity {
            producer_id,
            ..id(0, 0, 0)
        }
    }

    #[test]
    fn idle_producers_expire_and_a_full_table_forgets_the_least_recent() {
        let mut table = ProducerStateTable::default();
        table.record(&of(1), 0, 0, NOW);
        table.record(&of(2), 1, 1, NOW + PRODUCER_ID_EXPIRATION_MS - 1);
        // Expiry runs at most once a minute, on a write.
        table.record(&of(3), 2, 2, NOW + PRODUCER_ID_EXPIRATION_MS + 60_000);
        assert_eq!(table.len(), 2, "producer 1 expired");
        assert!(matches!(
            table.check(&BatchIdentity {
                first_sequence: 1,
                last_sequence: 1,
                ..of(1)
            }),
            Err(SequenceError::UnknownProducer { .. })
        ));

        let mut full = ProducerStateTable::default();
        for p in 0..PRODUCERS_PER_PARTITION_MAX as i64 {
            full.record(&of(p), p, p, NOW + p);
        }
        full.record(
            &BatchIdentity {
                first_sequence: 1,
                last_sequence: 1,
                ..of(1)
            },
            20_000,
            20_000,
            NOW,
        );
        assert_eq!(full.len(), PRODUCERS_PER_PARTITION_MAX);
        full.record(&of(100_000), 20_001, 20_001, NOW);
        assert_eq!(full.len(), PRODUCERS_PER_PARTITION_MAX, "bounded");
        assert!(
            full.check(&BatchIdentity {
                first_sequence: 1,
                last_sequence: 1,
                ..of(0)
            })
            .is_err(),
            "producer 0 wrote least recently and was forgotten"
        );
        assert!(matches!(
            full.check(&BatchIdentity {
                first_sequence: 1,
                last_sequence: 1,
                ..of(1)
            }),
            Ok(SequenceCheck::Duplicate { .. })
        ));
    }
}
