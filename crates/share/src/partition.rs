//! One share partition's state machine: which records between the start and end offset are
//! available, acquired (by whom, until when), waiting for the dead-letter topic, or done, and
//! each one's delivery count. Every operation that changes what must survive a restart appends
//! the [`StateRecord`]s that replay it to `log`; acquisitions themselves are not durable (on a
//! rebuild acquired records become available again), their delivery counts are.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::ranges::Runs;
use crate::state_log::StateRecord;
use crate::SHARE_IN_FLIGHT_RECORDS_MAX;

/// Why a record goes to the dead-letter topic (the `tinymq.dlq.reason` header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadLetterReason {
    Rejected,
    MaxAttempts,
}

impl DeadLetterReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DeadLetterReason::Rejected => "rejected",
            DeadLetterReason::MaxAttempts => "max-attempts",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordState {
    /// May be acquired (never delivered, released, or its lock expired).
    Available,
    Acquired {
        member: Arc<str>,
        lock_deadline_ms: i64,
    },
    /// To be written to the dead-letter topic, then done.
    DeadLetter(DeadLetterReason),
}

/// A record between the start and end offset that is not done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlightRecord {
    pub state: RecordState,
    /// Deliveries so far (the current one included while acquired), not counting those
    /// released unseen.
    pub delivery_count: u32,
}

impl InFlightRecord {
    /// Available again, the current delivery not counted (released unseen).
    pub(crate) fn uncount_delivery(&mut self) {
        self.state = RecordState::Available;
        self.delivery_count = self.delivery_count.saturating_sub(1);
    }
}

/// How a member acknowledges a record (`ShareAcknowledgement.kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckKind {
    Accept,
    /// Available again; this delivery counts toward `max_delivery_attempts` (the application
    /// saw the record and gave it back).
    Release,
    Reject,
    /// Available again as if this delivery never happened (its count is taken back): the
    /// member never handed the record to its application (acquired beyond what it wanted,
    /// or it shut down first), so nobody can have failed on it.
    ReleaseUnseen,
}

impl AckKind {
    pub fn from_wire(kind: u32) -> Result<AckKind, ShareError> {
        match kind {
            1 => Ok(AckKind::Accept),
            2 => Ok(AckKind::Release),
            3 => Ok(AckKind::Reject),
            4 => Ok(AckKind::ReleaseUnseen),
            other => Err(ShareError::UnknownAckKind(other)),
        }
    }
}

/// Records `first_offset..=last_offset` acquired by one request, each delivered
/// `delivery_count` times (this delivery included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquiredRange {
    pub first_offset: i64,
    pub last_offset: i64,
    pub delivery_count: u32,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ShareError {
    #[error(
        "acknowledgement kind {0}: the kinds are 1 (accept), 2 (release), 3 (reject) and 4 \
         (release unseen)"
    )]
    UnknownAckKind(u32),
    #[error("offsets {first}..={last}: first is above last")]
    InvalidRange { first: i64, last: i64 },
    /// Wire code INVALID_RECORD_STATE.
    #[error(
        "{count} record(s) of {first}..={last} are not acquired by member {member} (lock expired, \
         acknowledged already, or never acquired)"
    )]
    InvalidRecordState {
        first: i64,
        last: i64,
        member: String,
        count: u64,
    },
    /// A caller bug: new records are taken from the end offset on, without holes.
    #[error("offset {offset} is above the end offset {end_offset}: records are taken in order")]
    Gap { offset: i64, end_offset: i64 },
}

/// Counts for DescribeShareGroup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StateCounts {
    pub acquired: u64,
    pub available: u64,
    pub dead_letter_pending: u64,
    /// Done at or above the start offset.
    pub done_above_start: u64,
}

/// One share group's state of one partition. Offsets in `start_offset..end_offset` missing
/// from `records` are done; everything below `start_offset` is done; nothing at or above
/// `end_offset` was handed out yet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SharePartition {
    pub(crate) start_offset: i64,
    pub(crate) end_offset: i64,
    pub(crate) records: BTreeMap<i64, InFlightRecord>,
    pub(crate) dead_lettered_total: u64,
    pub(crate) unseen_returns: UnseenReturns,
}

/// How many times a member may release one record unseen (its delivery taken back) before
/// a further release unseen of it counts as a plain release: a member that keeps giving a
/// record back "unseen" (a bug in its error path) must not keep it from the dead-letter topic
/// forever.
pub const UNSEEN_RETURNS_PER_RECORD_MAX: u32 = 100;

/// Releases unseen so far per in-flight offset, for [`UNSEEN_RETURNS_PER_RECORD_MAX`].
/// Advisory and in memory only: not in the state log, so a rebuild starts every count at zero
/// (the bound then holds per run of the leader); for the same reason it is not part of a
/// share partition's identity (`==` ignores it), which is what the log rebuilds.
#[derive(Debug, Clone, Default)]
pub(crate) struct UnseenReturns(BTreeMap<i64, u32>);

impl UnseenReturns {
    /// Counts one release unseen of `offset`; false when it had reached the bound already.
    fn take_one(&mut self, offset: i64) -> bool {
        let count = self.0.entry(offset).or_insert(0);
        if *count >= UNSEEN_RETURNS_PER_RECORD_MAX {
            return false;
        }
        *count += 1;
        true
    }

    /// Forgets offsets no longer in flight, once there are more entries than in-flight
    /// records (so it holds at most twice `share_in_flight_records_max` entries).
    fn prune(&mut self, records: &BTreeMap<i64, InFlightRecord>) {
        if self.0.len() > records.len() {
            self.0.retain(|offset, _| records.contains_key(offset));
        }
    }
}

impl PartialEq for UnseenReturns {
    fn eq(&self, _: &UnseenReturns) -> bool {
        true
    }
}

impl Eq for UnseenReturns {}

impl SharePartition {
    /// A new share partition whose first record is `start_offset` (the log's earliest).
    pub fn new(start_offset: i64) -> SharePartition {
        SharePartition {
            start_offset,
            end_offset: start_offset,
            ..SharePartition::default()
        }
    }

    pub fn start_offset(&self) -> i64 {
        self.start_offset
    }

    pub fn end_offset(&self) -> i64 {
        self.end_offset
    }

    pub fn dead_lettered_total(&self) -> u64 {
        self.dead_lettered_total
    }

    pub fn in_flight(&self) -> impl Iterator<Item = (i64, &InFlightRecord)> {
        self.records.iter().map(|(o, r)| (*o, r))
    }

    pub fn counts(&self) -> StateCounts {
        let mut counts = StateCounts::default();
        for record in self.records.values() {
            match record.state {
                RecordState::Available => counts.available += 1,
                RecordState::Acquired { .. } => counts.acquired += 1,
                RecordState::DeadLetter(_) => counts.dead_letter_pending += 1,
            }
        }
        let span = u64::try_from(self.end_offset.saturating_sub(self.start_offset)).unwrap_or(0);
        counts.done_above_start = span.saturating_sub(self.records.len() as u64);
        counts
    }

    /// The offset ranges the next acquisition would take, lowest first, at most
    /// `max_records` offsets: available records, then new ones from the end offset up to the
    /// high watermark and the in-flight bound. The caller reads them, skips what must not be
    /// delivered ([`SharePartition::skip`]) and acquires the rest, in offset order.
    pub fn plan(&self, max_records: u32, high_watermark: i64) -> Vec<(i64, i64)> {
        let mut left = i64::from(max_records);
        let mut runs = Runs::default();
        for (&offset, record) in &self.records {
            if left == 0 {
                break;
            }
            if record.state == RecordState::Available {
                runs.push(offset, ());
                left -= 1;
            }
        }
        let new_end = high_watermark
            .min(
                self.start_offset
                    .saturating_add(SHARE_IN_FLIGHT_RECORDS_MAX),
            )
            .min(self.end_offset.saturating_add(left));
        let mut plan: Vec<(i64, i64)> = runs
            .into_vec()
            .into_iter()
            .map(|(f, l, _)| (f, l))
            .collect();
        if new_end > self.end_offset {
            plan.push((self.end_offset, new_end - 1));
        }
        plan
    }

    /// Checks a range of new offsets starts at the end offset (no holes).
    fn check_contiguous(&self, first: i64, last: i64) -> Result<(), ShareError> {
        if first > last {
            return Err(ShareError::InvalidRange { first, last });
        }
        if last >= self.end_offset && first > self.end_offset {
            return Err(ShareError::Gap {
                offset: first,
                end_offset: self.end_offset,
            });
        }
        Ok(())
    }

    /// Acquires for `member` the available and new records of `first..=last` (new ones only
    /// within the in-flight bound); records with `max_attempts` deliveries already go to the
    /// dead-letter topic instead. Returns the acquired ranges.
    pub fn acquire(
        &mut self,
        member: &Arc<str>,
        (first, last): (i64, i64),
        lock_deadline_ms: i64,
        max_attempts: u32,
        log: &mut Vec<StateRecord>,
    ) -> Result<Vec<AcquiredRange>, ShareError> {
        self.check_contiguous(first, last)?;
        let new_last = last.min(
            self.start_offset
                .saturating_add(SHARE_IN_FLIGHT_RECORDS_MAX - 1),
        );
        let mut acquired = Runs::default();
        let mut exhausted = Runs::default();
        let held = RecordState::Acquired {
            member: member.clone(),
            lock_deadline_ms,
        };
        for (&offset, record) in self.records.range_mut(first..=last) {
            if record.state != RecordState::Available {
                continue;
            }
            if record.delivery_count >= max_attempts {
                record.state = RecordState::DeadLetter(DeadLetterReason::MaxAttempts);
                exhausted.push(offset, ());
                continue;
            }
            record.delivery_count = record.delivery_count.saturating_add(1);
            record.state = held.clone();
            acquired.push(offset, record.delivery_count);
        }
        let new_first = first.max(self.end_offset);
        for offset in new_first..=new_last {
            let record = InFlightRecord {
                state: held.clone(),
                delivery_count: 1,
            };
            self.records.insert(offset, record);
            acquired.push(offset, 1);
        }
        self.end_offset = self.end_offset.max(new_last.saturating_add(1));
        let acquired = acquired.into_vec();
        let mut logged = Runs::default();
        for &(f, l, _) in &acquired {
            for offset in f..=l {
                logged.push(offset, ());
            }
        }
        for (f, l, ()) in logged.into_vec() {
            log.push(StateRecord::Acquired { first: f, last: l });
        }
        for (f, l, ()) in exhausted.into_vec() {
            log.push(StateRecord::DeadLetterPending {
                first: f,
                last: l,
                reason: DeadLetterReason::MaxAttempts,
            });
        }
        self.advance_start();
        Ok(acquired
            .into_iter()
            .map(|(f, l, count)| AcquiredRange {
                first_offset: f,
                last_offset: l,
                delivery_count: count,
            })
            .collect())
    }

    /// Marks the available and new records of `first..=last` done without delivering them
    /// (they do not match the fetch's filter, or no record has that offset).
    pub fn skip(
        &mut self,
        first: i64,
        last: i64,
        log: &mut Vec<StateRecord>,
    ) -> Result<(), ShareError> {
        self.check_contiguous(first, last)?;
        let mut done = Runs::default();
        let skipped: Vec<i64> = self
            .records
            .range(first..=last)
            .filter(|(_, r)| r.state == RecordState::Available)
            .map(|(o, _)| *o)
            .collect();
        for offset in skipped {
            self.records.remove(&offset);
            done.push(offset, ());
        }
        for (f, l, ()) in done.into_vec() {
            log.push(StateRecord::Done { first: f, last: l });
        }
        if last >= self.end_offset {
            log.push(StateRecord::Done {
                first: first.max(self.end_offset),
                last,
            });
            self.end_offset = last.saturating_add(1);
        }
        self.advance_start();
        Ok(())
    }

    /// Cuts the state to a partition log that now ends at `log_end_offset` below the end
    /// offset (the log was truncated, e.g. after an unclean leader election): offsets from
    /// there on count as never handed out, so the records written there later are delivered.
    /// Returns whether anything changed (the caller then persists a snapshot).
    pub fn truncate_to(&mut self, log_end_offset: i64) -> bool {
        if log_end_offset >= self.end_offset {
            return false;
        }
        let log_end_offset = log_end_offset.max(0);
        drop(self.records.split_off(&log_end_offset));
        self.end_offset = log_end_offset;
        self.start_offset = self.start_offset.min(log_end_offset);
        true
    }

    /// Makes the records of `ranges` that `member` holds available again and takes their
    /// delivery back (logged as [`StateRecord::Returned`]): for an acquisition whose request
    /// failed before the member saw the records. Returns how many were returned.
    pub fn return_unseen(
        &mut self,
        member: &str,
        ranges: &[AcquiredRange],
        log: &mut Vec<StateRecord>,
    ) -> u64 {
        let mut returned = 0;
        for range in ranges {
            let (first, last) = (range.first_offset, range.last_offset);
            if first > last {
                continue;
            }
            let mut runs = Runs::default();
            for (&offset, record) in self.records.range_mut(first..=last) {
                let held = matches!(
                    &record.state,
                    RecordState::Acquired { member: holder, .. } if &**holder == member
                );
                if held {
                    record.uncount_delivery();
                    runs.push(offset, Outcome::Returned);
                    returned += 1;
                }
            }
            self.settle(runs.into_vec(), log);
        }
        returned
    }

    /// Applies `member`'s acknowledgement of the records of `first..=last` it holds; the
    /// others are left alone and counted in the `InvalidRecordState` error.
    pub fn acknowledge(
        &mut self,
        member: &str,
        (first, last): (i64, i64),
        kind: AckKind,
        max_attempts: u32,
        log: &mut Vec<StateRecord>,
    ) -> Result<u64, ShareError> {
        if first > last {
            return Err(ShareError::InvalidRange { first, last });
        }
        let mut outcomes = Runs::default();
        for (&offset, record) in self.records.range_mut(first..=last) {
            let RecordState::Acquired { member: holder, .. } = &record.state else {
                continue;
            };
            if &**holder != member {
                continue;
            }
            let outcome = match kind {
                AckKind::ReleaseUnseen if self.unseen_returns.take_one(offset) => {
                    // Never dead-lettered: the count goes back to what it was before this
                    // delivery, below `max_attempts` (acquire checked it).
                    record.uncount_delivery();
                    outcomes.push(offset, Outcome::Returned);
                    continue;
                }
                AckKind::Accept => None,
                AckKind::Reject => Some(DeadLetterReason::Rejected),
                // Past UNSEEN_RETURNS_PER_RECORD_MAX a release unseen is a plain release.
                AckKind::Release | AckKind::ReleaseUnseen
                    if record.delivery_count >= max_attempts =>
                {
                    Some(DeadLetterReason::MaxAttempts)
                }
                AckKind::Release | AckKind::ReleaseUnseen => {
                    record.state = RecordState::Available;
                    // Not logged: a rebuild makes acquired records available anyway.
                    outcomes.push(offset, Outcome::Released);
                    continue;
                }
            };
            outcomes.push(offset, outcome.map_or(Outcome::Done, Outcome::DeadLetter));
        }
        self.unseen_returns.prune(&self.records);
        let outcomes = outcomes.into_vec();
        let applied: u64 = outcomes.iter().map(|(f, l, _)| range_len(*f, *l)).sum();
        self.settle(outcomes, log);
        // In i128: a hostile range (i64::MIN..=i64::MAX) would overflow i64.
        let span = i128::from(last) - i128::from(first) + 1;
        let requested = u64::try_from(span).unwrap_or(u64::MAX);
        if applied < requested {
            return Err(ShareError::InvalidRecordState {
                first,
                last,
                member: member.into(),
                count: requested - applied,
            });
        }
        Ok(applied)
    }

    pub(crate) fn settle(
        &mut self,
        outcomes: Vec<(i64, i64, Outcome)>,
        log: &mut Vec<StateRecord>,
    ) {
        for (first, last, outcome) in outcomes {
            match outcome {
                Outcome::Released => {}
                Outcome::Returned => log.push(StateRecord::Returned { first, last }),
                Outcome::Done => {
                    log.push(StateRecord::Done { first, last });
                    self.mark_done(first, last);
                }
                Outcome::DeadLetter(reason) => {
                    log.push(StateRecord::DeadLetterPending {
                        first,
                        last,
                        reason,
                    });
                    self.mark_dead_letter(first, last, reason);
                }
            }
        }
        self.advance_start();
    }

    /// Removes `first..=last` (done), moving the end offset past it.
    pub(crate) fn mark_done(&mut self, first: i64, last: i64) {
        let done: Vec<i64> = self.records.range(first..=last).map(|(o, _)| *o).collect();
        for offset in done {
            self.records.remove(&offset);
        }
        self.end_offset = self.end_offset.max(last.saturating_add(1));
        self.advance_start();
    }

    pub(crate) fn mark_dead_letter(&mut self, first: i64, last: i64, reason: DeadLetterReason) {
        for record in self.records.range_mut(first..=last).map(|(_, r)| r) {
            record.state = RecordState::DeadLetter(reason);
        }
    }

    /// The start offset moves up to the first record that is not done.
    pub(crate) fn advance_start(&mut self) {
        self.start_offset = self
            .records
            .keys()
            .next()
            .copied()
            .unwrap_or(self.end_offset)
            .max(self.start_offset);
    }

    /// The state as a rebuild from the log sees it: acquired records available again.
    pub fn rebuilt(&self) -> SharePartition {
        let mut copy = self.clone();
        for record in copy.records.values_mut() {
            if matches!(record.state, RecordState::Acquired { .. }) {
                record.state = RecordState::Available;
            }
        }
        copy
    }
}

/// What an acknowledgement or expiry does to one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Available again, the delivery counted (not logged: a rebuild makes acquired records
    /// available anyway, and the acquisition logged the count).
    Released,
    /// Available again, the delivery taken back (logged, so a rebuild takes it back too).
    Returned,
    Done,
    DeadLetter(DeadLetterReason),
}

/// Offsets in `first..=last` (0 when reversed, at most `u64::MAX`), without overflow.
pub fn range_len(first: i64, last: i64) -> u64 {
    let count = (i128::from(last) - i128::from(first) + 1).clamp(0, i128::from(u64::MAX));
    u64::try_from(count).unwrap_or(u64::MAX)
}
