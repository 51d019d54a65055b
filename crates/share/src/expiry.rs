//! The background side of a share partition: lock expiry, the records waiting for the
//! dead-letter topic and their completion, and records gone from the log (retention).

use crate::partition::{DeadLetterReason, InFlightRecord, Outcome, RecordState, SharePartition};
use crate::ranges::Runs;
use crate::state_log::StateRecord;

impl SharePartition {
    /// Releases the records whose lock expired by `now_ms` (to the dead-letter topic when
    /// they used up `max_attempts`); returns how many.
    pub fn expire_locks(
        &mut self,
        now_ms: i64,
        max_attempts: u32,
        log: &mut Vec<StateRecord>,
    ) -> u64 {
        let mut outcomes = Runs::default();
        for (&offset, record) in self.records.iter_mut() {
            if let RecordState::Acquired {
                lock_deadline_ms, ..
            } = record.state
            {
                if lock_deadline_ms > now_ms {
                    continue;
                }
                if record.delivery_count >= max_attempts {
                    outcomes.push(offset, Outcome::DeadLetter(DeadLetterReason::MaxAttempts));
                } else {
                    record.state = RecordState::Available;
                    outcomes.push(offset, Outcome::Released);
                }
            }
        }
        let outcomes = outcomes.into_vec();
        let expired = outcomes
            .iter()
            .map(|(f, l, _)| super::partition::range_len(*f, *l))
            .sum();
        self.settle(outcomes, log);
        expired
    }

    /// The earliest lock deadline, for the expiry task's wake-up.
    pub fn next_lock_deadline_ms(&self) -> Option<i64> {
        self.records
            .values()
            .filter_map(|r| match r.state {
                RecordState::Acquired {
                    lock_deadline_ms, ..
                } => Some(lock_deadline_ms),
                _ => None,
            })
            .min()
    }

    /// Records waiting for the dead-letter topic, lowest first, at most `limit`:
    /// (offset, reason, delivery count).
    pub fn dead_letter_pending(&self, limit: usize) -> Vec<(i64, DeadLetterReason, u32)> {
        self.records
            .iter()
            .filter_map(|(o, r)| match r.state {
                RecordState::DeadLetter(reason) => Some((*o, reason, r.delivery_count)),
                _ => None,
            })
            .take(limit)
            .collect()
    }

    /// Marks records written to the dead-letter topic done (only those still waiting).
    pub fn mark_dead_lettered(&mut self, offsets: &[i64], log: &mut Vec<StateRecord>) {
        let mut runs = Runs::default();
        for offset in offsets {
            let waiting = matches!(
                self.records.get(offset),
                Some(InFlightRecord {
                    state: RecordState::DeadLetter(_),
                    ..
                })
            );
            if waiting {
                self.records.remove(offset);
                self.dead_lettered_total += 1;
                runs.push(*offset, ());
            }
        }
        for (f, l, ()) in runs.into_vec() {
            log.push(StateRecord::DeadLettered { first: f, last: l });
        }
        self.advance_start();
    }

    /// The log's records below `log_start_offset` are gone (retention): everything below it is
    /// done.
    pub fn advance_to(&mut self, log_start_offset: i64, log: &mut Vec<StateRecord>) {
        if log_start_offset <= self.start_offset {
            return;
        }
        log.push(StateRecord::Done {
            first: self.start_offset,
            last: log_start_offset - 1,
        });
        self.mark_done(self.start_offset, log_start_offset - 1);
    }
}
