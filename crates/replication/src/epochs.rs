//! Leader epochs: the per-partition cache of which leader epoch started at which offset
//! ([`LeaderEpochCache`], persisted by the log as its leader-epoch checkpoint), its answer to
//! Kafka's `OffsetsForLeaderEpoch` question ([`LeaderEpochCache::end_offset_for`]), the
//! leader's check that a follower's fetch continues its log ([`fetch_divergence`]), and where a
//! follower must cut its log before fetching from a new leader ([`truncation_point`]).
//!
//! This is the one leader-epoch cache of tinymq: `tinymq-log` keeps one per partition in
//! memory and in its `leader-epoch-checkpoint` file, the broker's follower and leader ask it
//! through these functions, and the simulation steps the same code.
//!
//! Why epochs and not the high watermark: a follower's high watermark lags the leader's, so
//! truncating to it can drop records the old leader already acknowledged, and a follower that
//! then becomes leader loses them (KIP-101). Two logs that hold a record of the same epoch at
//! the same offset agree on everything up to it, because one leader wrote that epoch and every
//! follower truncated to agree with it before fetching; comparing epoch boundaries therefore
//! finds exactly where two logs part.

use crate::{Epoch, Offset};

/// The leader epochs of one partition's log, as `(epoch, start_offset)` pairs strictly
/// increasing in both: `start_offset` is the offset of the epoch's first record (or, for the
/// current leader's epoch before any record, the log end when it took office).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaderEpochCache {
    entries: Vec<(Epoch, Offset)>,
}

/// An answer to "where does epoch E end": the largest known epoch at or below E, and its end
/// offset (exclusive): the start of the next higher epoch, or the log end if it is the latest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEnd {
    /// The largest epoch the answering log knows that is at or below the requested one.
    pub epoch: Epoch,
    /// Where that epoch's records end in the answering log.
    pub end_offset: Offset,
}

/// An epoch entry or an answer that breaks the cache's order. Nothing is changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EpochError {
    /// Epochs and offsets are never negative.
    #[error("negative leader epoch {epoch} or start offset {start_offset}")]
    Negative {
        /// The refused epoch.
        epoch: Epoch,
        /// The refused start offset.
        start_offset: Offset,
    },
    /// The entry is not after the latest one: an older epoch, or a start offset below the
    /// latest epoch's start. The caller truncates the log (and the cache) first.
    #[error("leader epoch {epoch} at {start_offset} is not after epoch {latest_epoch} at {latest_start}")]
    NonMonotonic {
        /// The refused epoch.
        epoch: Epoch,
        /// The refused start offset.
        start_offset: Offset,
        /// The cache's latest epoch.
        latest_epoch: Epoch,
        /// Where that epoch starts.
        latest_start: Offset,
    },
    /// A leader answered for an epoch above the one the follower asked for (its latest): a
    /// stale or wrong answer. The follower asks again.
    #[error("leader answered for epoch {answered}, above the follower's latest epoch {latest}")]
    AnswerAboveRequest {
        /// The epoch in the leader's answer.
        answered: Epoch,
        /// The follower's latest epoch.
        latest: Epoch,
    },
}

impl LeaderEpochCache {
    /// An empty cache (a new, empty log).
    pub fn new() -> Self {
        Self::default()
    }

    /// A cache read back from a checkpoint: refused unless every entry is non-negative and the
    /// entries strictly increase in both epoch and start offset.
    pub fn from_entries(entries: Vec<(Epoch, Offset)>) -> Result<Self, EpochError> {
        let mut cache = Self::new();
        for &(epoch, start_offset) in &entries {
            if let Some((latest_epoch, latest_start)) = cache.latest() {
                if epoch <= latest_epoch || start_offset <= latest_start {
                    return Err(EpochError::NonMonotonic {
                        epoch,
                        start_offset,
                        latest_epoch,
                        latest_start,
                    });
                }
            }
            cache.assign(epoch, start_offset)?;
        }
        Ok(cache)
    }

    /// The entries, oldest first (what a checkpoint stores).
    pub fn entries(&self) -> &[(Epoch, Offset)] {
        &self.entries
    }

    /// The latest `(epoch, start_offset)`, if any.
    pub fn latest(&self) -> Option<(Epoch, Offset)> {
        self.entries.last().copied()
    }

    /// The latest epoch, if any: what a follower asks its leader about.
    pub fn latest_epoch(&self) -> Option<Epoch> {
        self.latest().map(|(epoch, _)| epoch)
    }

    /// Records that `epoch` starts at `start_offset`: called when a leader takes office (at its
    /// log end) and when a record of a new epoch is appended (at its offset).
    ///
    /// - The latest epoch again, at or after its start: nothing to do.
    /// - A higher epoch at a higher offset: appended.
    /// - A higher epoch at the latest epoch's start: the latest epoch never got a record, so
    ///   it is replaced (as Kafka does); the order stays strict.
    /// - Anything else (an older epoch, a negative value, a start below the latest start) is
    ///   refused with [`EpochError`] and the cache is unchanged.
    pub fn assign(&mut self, epoch: Epoch, start_offset: Offset) -> Result<(), EpochError> {
        if epoch < 0 || start_offset < 0 {
            return Err(EpochError::Negative {
                epoch,
                start_offset,
            });
        }
        let Some((latest_epoch, latest_start)) = self.latest() else {
            self.entries.push((epoch, start_offset));
            return Ok(());
        };
        if epoch == latest_epoch && start_offset >= latest_start {
            return Ok(());
        }
        if epoch > latest_epoch && start_offset >= latest_start {
            if start_offset == latest_start {
                self.entries.pop();
            }
            self.entries.push((epoch, start_offset));
            return Ok(());
        }
        Err(EpochError::NonMonotonic {
            epoch,
            start_offset,
            latest_epoch,
            latest_start,
        })
    }

    /// Kafka's `OffsetsForLeaderEpoch` answer for `epoch` in a log ending at `log_end`: the
    /// largest epoch this cache knows at or below `epoch`, ending where the next higher epoch
    /// starts, or at `log_end` if it is the latest. `None` (Kafka's undefined epoch and offset)
    /// when `epoch` is below every known epoch or the cache is empty.
    ///
    /// `log_end` is taken as given; the caller keeps the cache truncated along with its log.
    pub fn end_offset_for(&self, epoch: Epoch, log_end: Offset) -> Option<EpochEnd> {
        let after = self.entries.partition_point(|&(e, _)| e <= epoch);
        let (found, _) = *self.entries.get(after.checked_sub(1)?)?;
        let end_offset = self.entries.get(after).map_or(log_end, |&(_, start)| start);
        Some(EpochEnd {
            epoch: found,
            end_offset,
        })
    }

    /// Forgets the epochs starting at or after `end_offset`: called when the log is truncated
    /// to end there. Any value is accepted (at or below 0 empties the cache). Returns whether
    /// anything changed (the log rewrites its checkpoint only then).
    pub fn truncate_from_end(&mut self, end_offset: Offset) -> bool {
        let keep = self
            .entries
            .partition_point(|&(_, start)| start < end_offset);
        let changed = keep < self.entries.len();
        self.entries.truncate(keep);
        changed
    }

    /// Whether [`LeaderEpochCache::truncate_from_start`] at `start_offset` would change
    /// anything: some epoch starts below it. O(1), asked on every retention pass.
    pub fn starts_below(&self, start_offset: Offset) -> bool {
        self.entries
            .first()
            .is_some_and(|&(_, start)| start < start_offset)
    }

    /// Forgets the epochs wholly below `start_offset`: called when the log's start moves up
    /// (retention). The epoch that covers `start_offset` is kept, starting there. Any value is
    /// accepted (below the first start changes nothing). Returns whether anything changed.
    pub fn truncate_from_start(&mut self, start_offset: Offset) -> bool {
        if !self.starts_below(start_offset) {
            return false;
        }
        let covering = self
            .entries
            .partition_point(|&(_, start)| start <= start_offset);
        // `starts_below`: the first entry covers `start_offset`, so `covering` ≥ 1.
        let first = covering.saturating_sub(1);
        self.entries.drain(..first);
        if let Some(entry) = self.entries.first_mut() {
            entry.1 = start_offset;
        }
        true
    }
}

/// One round of a follower's truncation before fetching from a leader.
///
/// The follower asks the leader about its latest epoch, truncates its log and its cache
/// ([`LeaderEpochCache::truncate_from_end`]) to `offset`, and then, if `done`, fetches from
/// there; if not, it asks again about its (new, lower) latest epoch. Each round that is not
/// `done` lowers the follower's latest epoch, so the rounds end. (A broker's follower asks by
/// fetching: the leader checks every fetch with [`fetch_divergence`], so a fetch after a round
/// that is not `done` is the next question.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Truncation {
    /// Where to cut the follower's log (its new end); within the follower's log, from its
    /// start to its end.
    pub offset: Offset,
    /// Whether the follower now agrees with the leader and may fetch from `offset`.
    pub done: bool,
}

/// Where a follower whose log holds `[follower_log_start, follower_log_end)` must truncate,
/// given the leader's answer to `OffsetsForLeaderEpoch(latest epoch of follower_cache)`
/// (KIP-279; [`fetch_divergence`] computes the same answer on the leader). Never by the high
/// watermark.
///
/// Cases (the result is clamped into `[follower_log_start, follower_log_end]`, the start
/// taken as at least 0 and the end as at least the start: a log cannot be cut below its
/// start):
/// 1. The follower knows no epoch: it holds nothing to compare; no cut, done.
/// 2. The leader knows no epoch at or below the asked one (`None`): every follower record is
///    of an epoch the leader never had (or of none); cut to the follower's log start, done.
/// 3. The leader answered `(E, end)` and the follower has epoch `E` too: both logs hold E's
///    records from E's one leader, so they agree up to where the shorter E ends; cut to
///    `min(end, follower's end of E)`, done. (When E is the asked epoch the follower's end of
///    E is its log end.)
/// 4. The follower has no epoch at or below `E`: its records are all of epochs above `E` that
///    the leader does not have; cut to its log start, done.
/// 5. The follower's largest epoch at or below `E` is some `F < E`: its records after F's end
///    are of epochs the leader does not have, but whether F's records match is not known yet;
///    cut to F's end and ask again about F, not done.
///
/// An answer for an epoch above the follower's latest cannot answer its question (a stale
/// reply): [`EpochError::AnswerAboveRequest`], cut nothing.
pub fn truncation_point(
    follower_cache: &LeaderEpochCache,
    follower_log_start: Offset,
    follower_log_end: Offset,
    leader_answer: Option<EpochEnd>,
) -> Result<Truncation, EpochError> {
    let log_start = follower_log_start.max(0);
    let log_end = follower_log_end.max(log_start);
    let within = |offset: Offset| offset.clamp(log_start, log_end);
    let Some((latest, _)) = follower_cache.latest() else {
        return Ok(Truncation {
            offset: log_end,
            done: true,
        });
    };
    let cut_all = Truncation {
        offset: log_start,
        done: true,
    };
    let Some(answer) = leader_answer else {
        return Ok(cut_all);
    };
    if answer.epoch > latest {
        return Err(EpochError::AnswerAboveRequest {
            answered: answer.epoch,
            latest,
        });
    }
    match follower_cache.end_offset_for(answer.epoch, log_end) {
        None => Ok(cut_all),
        Some(own) if own.epoch == answer.epoch => Ok(Truncation {
            offset: within(answer.end_offset.min(own.end_offset)),
            done: true,
        }),
        Some(own) => Ok(Truncation {
            offset: within(own.end_offset),
            done: false,
        }),
    }
}

/// A leader's check of a follower's fetch, KIP-320's form of KIP-279 (the epoch question
/// rides on the fetch): see [`fetch_divergence`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchCheck {
    /// The follower's log agrees with the leader's up to the fetch offset: serve records
    /// from there.
    Agrees,
    /// It does not: no records, only the leader's `OffsetsForLeaderEpoch` answer for the
    /// follower's latest epoch (`None`: the leader knows no epoch at or below it), which the
    /// follower hands to [`truncation_point`].
    Diverges(Option<EpochEnd>),
}

/// Whether a follower fetching at `fetch_offset`, the latest epoch of whose log is
/// `last_fetched_epoch`, continues the leader's log `[leader_log_start, leader_log_end)` with
/// epochs `leader_cache` (Kafka's `Partition.fetchRecords` epoch validation).
///
/// It agrees when it has no epoch yet (nothing to compare), when it fetches at or below the
/// leader's log start (the leader no longer holds what it could compare; the read answers
/// out of range if the follower is behind it), or when the leader's end of
/// `last_fetched_epoch` is that very epoch and ends at or after `fetch_offset`. Otherwise it
/// diverges: the leader knows a lower epoch only (the follower's last epoch is one the leader
/// never had), or the epoch ends before the follower's log does (the follower has records of
/// it the leader lacks, or fetches past the leader's end).
pub fn fetch_divergence(
    leader_cache: &LeaderEpochCache,
    leader_log_start: Offset,
    leader_log_end: Offset,
    fetch_offset: Offset,
    last_fetched_epoch: Option<Epoch>,
) -> FetchCheck {
    let Some(last) = last_fetched_epoch else {
        return FetchCheck::Agrees;
    };
    if fetch_offset <= leader_log_start {
        return FetchCheck::Agrees;
    }
    match leader_cache.end_offset_for(last, leader_log_end) {
        Some(own) if own.epoch == last && own.end_offset >= fetch_offset => FetchCheck::Agrees,
        answer => FetchCheck::Diverges(answer),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(entries: &[(Epoch, Offset)]) -> LeaderEpochCache {
        LeaderEpochCache::from_entries(entries.to_vec()).unwrap()
    }

    #[test]
    fn assign_appends_replaces_empty_epochs_and_refuses_the_rest() {
        let mut c = LeaderEpochCache::new();
        c.assign(1, 0).unwrap();
        c.assign(1, 5).unwrap();
        c.assign(3, 4).unwrap();
        c.assign(4, 4).unwrap(); // epoch 3 had no record
        assert_eq!(c.entries(), &[(1, 0), (4, 4)]);
        assert!(matches!(
            c.assign(2, 9),
            Err(EpochError::NonMonotonic { .. })
        ));
        assert!(matches!(
            c.assign(5, 3),
            Err(EpochError::NonMonotonic { .. })
        ));
        assert!(matches!(c.assign(-1, 9), Err(EpochError::Negative { .. })));
        assert_eq!(c.entries(), &[(1, 0), (4, 4)]);
        assert!(LeaderEpochCache::from_entries(vec![(1, 0), (2, 0)]).is_err());
        assert!(LeaderEpochCache::from_entries(vec![(2, 0), (1, 3)]).is_err());
    }

    #[test]
    fn end_offset_for_follows_offsets_for_leader_epoch() {
        let c = cache(&[(1, 0), (3, 5), (6, 9)]);
        assert_eq!(c.end_offset_for(0, 12), None);
        let at = |epoch, end_offset| Some(EpochEnd { epoch, end_offset });
        assert_eq!(c.end_offset_for(1, 12), at(1, 5));
        assert_eq!(c.end_offset_for(2, 12), at(1, 5));
        assert_eq!(c.end_offset_for(3, 12), at(3, 9));
        assert_eq!(c.end_offset_for(6, 12), at(6, 12));
        assert_eq!(c.end_offset_for(9, 12), at(6, 12));
        assert_eq!(LeaderEpochCache::new().end_offset_for(1, 0), None);
    }

    #[test]
    fn truncation_from_both_ends() {
        let mut c = cache(&[(1, 0), (3, 5), (6, 9)]);
        assert!(c.truncate_from_end(9));
        assert_eq!(c.entries(), &[(1, 0), (3, 5)]);
        assert!(!c.truncate_from_end(10), "nothing starts at or after 10");
        assert!(c.starts_below(7));
        assert!(c.truncate_from_start(7));
        assert_eq!(c.entries(), &[(3, 7)]);
        assert!(!c.starts_below(7));
        assert!(!c.truncate_from_start(7));
        assert!(!c.truncate_from_start(2));
        assert_eq!(c.entries(), &[(3, 7)]);
        assert!(c.truncate_from_end(i64::MIN));
        assert!(c.entries().is_empty());
        assert!(!c.truncate_from_end(0));
        // A start exactly at an epoch's start drops the epochs before it whole.
        let mut d = cache(&[(1, 0), (4, 10)]);
        assert!(d.truncate_from_start(10));
        assert_eq!(d.entries(), &[(4, 10)]);
    }

    #[test]
    fn truncation_point_cases() {
        let f = cache(&[(1, 0), (2, 4), (5, 6)]); // follower log [0, 8)
        let ans = |epoch, end_offset| Some(EpochEnd { epoch, end_offset });
        let t = |offset, done| Ok(Truncation { offset, done });
        // 1. nothing known
        assert_eq!(
            truncation_point(&LeaderEpochCache::new(), 0, 3, None),
            t(3, true)
        );
        // 2. leader knows no epoch that old
        assert_eq!(truncation_point(&f, 0, 8, None), t(0, true));
        // 3. same latest epoch: the shorter end
        assert_eq!(truncation_point(&f, 0, 8, ans(5, 7)), t(7, true));
        assert_eq!(truncation_point(&f, 0, 8, ans(5, 20)), t(8, true));
        // 3. an older epoch both have: where it ends on the shorter side
        assert_eq!(truncation_point(&f, 0, 8, ans(2, 9)), t(6, true));
        assert_eq!(truncation_point(&f, 0, 8, ans(2, 5)), t(5, true));
        // 5. the follower lacks epoch 4: cut to its end of epoch 2 and ask again
        assert_eq!(truncation_point(&f, 0, 8, ans(4, 7)), t(6, false));
        // 4. nothing at or below the leader's epoch: everything from the log start goes
        let g = cache(&[(3, 2)]);
        assert_eq!(truncation_point(&g, 2, 5, ans(2, 4)), t(2, true));
        assert_eq!(truncation_point(&g, 0, 5, ans(2, 4)), t(0, true));
        // a stale answer
        assert!(truncation_point(&f, 0, 8, ans(6, 8)).is_err());
    }

    #[test]
    fn truncation_point_stays_within_the_log() {
        // Retention moved the follower's start to 5 (its cache trimmed along).
        let f = cache(&[(2, 5), (5, 6)]); // follower log [5, 8)
        let ans = |epoch, end_offset| Some(EpochEnd { epoch, end_offset });
        let t = |offset, done| Ok(Truncation { offset, done });
        assert_eq!(truncation_point(&f, 5, 8, None), t(5, true));
        assert_eq!(truncation_point(&f, 5, 8, ans(2, 3)), t(5, true));
        assert_eq!(truncation_point(&f, 5, 8, ans(5, 2)), t(5, true));
        // Nonsense bounds: a negative start is 0, an end below the start is the start.
        assert_eq!(truncation_point(&f, -4, 3, ans(5, 7)), t(3, true));
        assert_eq!(truncation_point(&f, 5, 1, ans(5, 7)), t(5, true));
    }

    #[test]
    fn fetch_divergence_follows_kafkas_fetch_validation() {
        let leader = cache(&[(1, 0), (3, 5), (6, 9)]); // leader log [0, 12)
        let check = |offset, last| fetch_divergence(&leader, 0, 12, offset, last);
        let diverges =
            |epoch, end_offset| FetchCheck::Diverges(Some(EpochEnd { epoch, end_offset }));
        assert_eq!(check(0, None), FetchCheck::Agrees, "an empty follower");
        assert_eq!(
            check(0, Some(1)),
            FetchCheck::Agrees,
            "at the leader's start"
        );
        assert_eq!(check(5, Some(1)), FetchCheck::Agrees);
        assert_eq!(
            check(6, Some(1)),
            diverges(1, 5),
            "more of epoch 1 than the leader has"
        );
        assert_eq!(
            check(7, Some(4)),
            diverges(3, 9),
            "an epoch the leader never had"
        );
        assert_eq!(check(12, Some(6)), FetchCheck::Agrees);
        assert_eq!(check(13, Some(6)), diverges(6, 12), "past the leader's end");
        assert_eq!(check(3, Some(0)), FetchCheck::Diverges(None));
        // Below the leader's log start nothing can be compared.
        assert_eq!(
            fetch_divergence(&leader, 20, 30, 20, Some(0)),
            FetchCheck::Agrees
        );
    }
}
