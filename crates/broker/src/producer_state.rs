//! Idempotent-producer state of one partition: for each producer id, its epoch and the last
//! few batches it wrote (sequence range → offsets). Pure logic; the partition applies it
//! around log appends and rebuilds it from the log's batch headers after a restart.
//!
//! Rules (the same as Kafka's):
//! - a batch whose producer id is -1 is not idempotent and always appended;
//! - an epoch below the known one is fenced (`INVALID_PRODUCER_EPOCH`);
//! - a new producer, or a known one with a higher epoch, must start at sequence 0;
//! - a batch whose sequence range equals one of the last [`BATCHES_REMEMBERED`] is a duplicate
//!   and is answered with the offsets it got the first time;
//! - otherwise its first sequence must follow the last one written (`OUT_OF_ORDER_SEQUENCE`).

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};

/// How many recent batches are remembered per producer: as many as a client may have in
/// flight, so any retry of an in-flight batch is recognised.
pub const BATCHES_REMEMBERED: usize = 5;

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
}

/// The state of every producer that wrote to one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerStateTable {
    producers: HashMap<i64, ProducerEntry>,
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

    pub fn check(&self, batch: &BatchIdentity) -> Result<SequenceCheck, SequenceError> {
        if batch.producer_id < 0 {
            return Ok(SequenceCheck::Append);
        }
        let Some(entry) = self.producers.get(&batch.producer_id) else {
            return expect_first(batch, 0);
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

    /// Records a batch that was appended at `base_offset..=last_offset`.
    pub fn record(&mut self, batch: &BatchIdentity, base_offset: i64, last_offset: i64) {
        if batch.producer_id < 0 {
            return;
        }
        let entry = self.producers.entry(batch.producer_id).or_default();
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
        table.record(&id(0, 0, 9), 100, 109);
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
            table.record(&id(0, i, i), i64::from(i), i64::from(i));
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
        table.record(&id(3, 0, 4), 0, 4);
        assert!(matches!(
            table.check(&id(2, 5, 5)),
            Err(SequenceError::StaleEpoch { current: 3, .. })
        ));
        assert!(matches!(
            table.check(&id(4, 5, 5)),
            Err(SequenceError::OutOfOrder { expected: 0, .. })
        ));
        assert_eq!(table.check(&id(4, 0, 0)), Ok(SequenceCheck::Append));
        table.record(&id(4, 0, 0), 5, 5);
        assert_eq!(table.check(&id(4, 1, 1)), Ok(SequenceCheck::Append));
    }

    #[test]
    fn new_producers_start_at_zero_and_non_idempotent_batches_pass() {
        let table = ProducerStateTable::default();
        assert!(table.check(&id(0, 3, 3)).is_err());
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
        table.record(&id(0, i32::MAX - 1, i32::MAX), 0, 1);
        assert_eq!(table.check(&id(0, 0, 3)), Ok(SequenceCheck::Append));
    }
}
