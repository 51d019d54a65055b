//! The leader's side of replication: what the leader of a partition knows of each follower
//! ([`FollowerState`]), and the rules it applies with that knowledge: the high watermark,
//! which followers leave or may rejoin the in-sync replicas (ISR), when an `acks=all` produce
//! may be answered, and the `min_insync_replicas` check.
//!
//! The leader owns a [`Followers`] map for the length of one leadership (one leader epoch). It
//! calls [`FollowerState::new`] for every other replica of the partition when it becomes
//! leader, [`FollowerState::on_fetch`] on every follower fetch, and then recomputes
//! [`high_watermark`]. Periodically (and after fetches) it asks [`isr_shrink`] and
//! [`isr_expand_candidates`] whether to propose an ISR change to the MetaServer.
//!
//! The ISR given to these functions is the leader's *maximal* view: the ISR the MetaServer last
//! confirmed, plus members the leader has proposed to add, and still including members it has
//! proposed to remove until the MetaServer confirms the removal (Kafka's "maximal ISR"). A
//! high watermark computed over a superset of the committed ISR is never too high.

use std::collections::BTreeMap;

use crate::{BrokerId, Offset};

/// The leader's knowledge of each follower of one partition, by broker id.
pub type Followers = BTreeMap<BrokerId, FollowerState>;

/// What a leader knows of one follower during its leadership.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerState {
    /// The durable end the follower last reported in this leadership (it reports an offset only
    /// after fsyncing it). `None` until its first fetch to this leader: an unknown end holds
    /// the high watermark where it is.
    pub log_end: Option<Offset>,
    /// The last time the follower was caught up: its reported end was at least the leader's log
    /// end as of its previous fetch (Kafka's `Replica.updateFetchState`).
    pub last_caught_up_ms: u64,
    /// The time of its previous fetch and the leader's log end then; `None` before the first.
    pub last_fetch: Option<LastFetch>,
}

/// The time of a follower's previous fetch and the leader's log end at that time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastFetch {
    /// When the leader handled the fetch.
    pub at_ms: u64,
    /// The leader's log end (every appended record, durable or not) at that time.
    pub leader_log_end: Offset,
}

/// A follower reported an end the leader cannot accept. The leader answers the fetch with an
/// error (Kafka's `OFFSET_OUT_OF_RANGE`) and the follower truncates again before fetching.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FetchStateError {
    /// Negative, or beyond the leader's log end: the follower has a tail the leader lacks.
    #[error("follower reported end {reported}, outside the leader's log [0, {leader_log_end}]")]
    OutOfRange {
        /// The end the follower reported.
        reported: Offset,
        /// The leader's log end when the fetch arrived.
        leader_log_end: Offset,
    },
}

impl FollowerState {
    /// The state of a follower when this broker becomes leader. Counting it as caught up
    /// `now_ms` gives an ISR member a full `replica_lag_time_max_ms` to fetch from the new
    /// leader before it is removed.
    pub fn new(now_ms: u64) -> Self {
        FollowerState {
            log_end: None,
            last_caught_up_ms: now_ms,
            last_fetch: None,
        }
    }

    /// Records a fetch in which the follower reported `reported_end` (its durable end) at
    /// `now_ms`, while the leader's log end (durable or not) was `leader_log_end`.
    ///
    /// The follower was caught up now if it reached the leader's current end, or caught up at
    /// its previous fetch if it reached the leader's end as of that fetch. A reported end
    /// outside `[0, leader_log_end]` is refused and changes nothing.
    pub fn on_fetch(
        &mut self,
        reported_end: Offset,
        now_ms: u64,
        leader_log_end: Offset,
    ) -> Result<(), FetchStateError> {
        if reported_end < 0 || reported_end > leader_log_end {
            return Err(FetchStateError::OutOfRange {
                reported: reported_end,
                leader_log_end,
            });
        }
        if reported_end >= leader_log_end {
            self.last_caught_up_ms = self.last_caught_up_ms.max(now_ms);
        } else if let Some(prev) = self.last_fetch {
            if reported_end >= prev.leader_log_end {
                self.last_caught_up_ms = self.last_caught_up_ms.max(prev.at_ms);
            }
        }
        self.last_fetch = Some(LastFetch {
            at_ms: now_ms,
            leader_log_end,
        });
        self.log_end = Some(reported_end);
        Ok(())
    }
}

/// The high watermark: the smallest durable end over the ISR, the leader's own
/// (`leader_durable_end`) included, never below `current_hw`.
///
/// An ISR member with no known end (no state, or no fetch yet in this leadership) leaves the
/// high watermark at `current_hw`. The leader's own entry in `isr` is ignored in `followers`.
///
/// Why never backwards: a consumer may already have read up to `current_hw`; a smaller value
/// would hide records it has seen and make its position look out of range. The minimum can
/// only come out below `current_hw` transiently: every ISR member held every record below the
/// high watermark when the leader raised it, a member joins only once it holds them too
/// ([`isr_expand_candidates`]), and a crash loses only what was never reported. A new leader
/// starts from the high watermark it learned as a follower, which may lag the old leader's;
/// see [`visible_high_watermark`] for what it may show consumers until it catches up.
pub fn high_watermark(
    current_hw: Offset,
    leader_id: BrokerId,
    leader_durable_end: Offset,
    isr: &[BrokerId],
    followers: &Followers,
) -> Offset {
    let mut computed = leader_durable_end;
    for &id in isr.iter().filter(|&&id| id != leader_id) {
        match followers.get(&id).and_then(|f| f.log_end) {
            Some(end) => computed = computed.min(end),
            None => return current_hw,
        }
    }
    current_hw.max(computed)
}

/// The high watermark a leader may show consumers (fetch limits, list-offsets "latest"):
/// `None` until `hw` reaches `leader_epoch_start_offset`, the leader's log end when it took
/// office (Kafka's KIP-207; the broker answers `OFFSET_NOT_AVAILABLE`, retriable).
///
/// Why: a new leader's `hw` is what it learned from the old leader's fetch answers and may lag
/// the old leader's real high watermark, which consumers may have read to. The old high
/// watermark is at most the new leader's log end at election (the new leader was in the ISR,
/// so it held every record below it), so once `hw` passes the epoch's start offset it is
/// past anything the old leader ever showed.
pub fn visible_high_watermark(hw: Offset, leader_epoch_start_offset: Offset) -> Option<Offset> {
    (hw >= leader_epoch_start_offset).then_some(hw)
}

/// The followers to remove from the ISR at `now_ms`: members (other than the leader) with no
/// state, or that have not been caught up for more than `replica_lag_time_max_ms` and are not
/// at the leader's log end now. A follower that stopped fetching and one that fetches but
/// stays behind are both removed. Times are compared with saturating arithmetic, so a clock
/// that went backwards removes no one.
pub fn isr_shrink(
    now_ms: u64,
    leader_id: BrokerId,
    leader_log_end: Offset,
    isr: &[BrokerId],
    followers: &Followers,
    replica_lag_time_max_ms: u64,
) -> Vec<BrokerId> {
    isr.iter()
        .copied()
        .filter(|&id| id != leader_id)
        .filter(|id| match followers.get(id) {
            None => true,
            Some(f) => {
                let at_end = f.log_end.is_some_and(|end| end >= leader_log_end);
                let lag_ms = now_ms.saturating_sub(f.last_caught_up_ms);
                !at_end && lag_ms > replica_lag_time_max_ms
            }
        })
        .collect()
}

/// The followers outside the ISR that may rejoin it: their durable end is at least the high
/// watermark `hw` (so counting them cannot lower it) and at least `leader_epoch_start_offset`
/// (so they have truncated against and fetched from this leader: everything they hold is the
/// leader's). The leader proposes them to the MetaServer, which still refuses fenced brokers.
pub fn isr_expand_candidates(
    leader_id: BrokerId,
    isr: &[BrokerId],
    followers: &Followers,
    hw: Offset,
    leader_epoch_start_offset: Offset,
) -> Vec<BrokerId> {
    followers
        .iter()
        .filter(|(id, _)| **id != leader_id && !isr.contains(id))
        .filter(|(_, f)| {
            f.log_end
                .is_some_and(|end| end >= hw && end >= leader_epoch_start_offset)
        })
        .map(|(id, _)| *id)
        .collect()
}

/// Whether an `acks=all` produce whose batch ends at `batch_end_offset` (exclusive: its last
/// offset plus one) may be answered: the high watermark covers the whole batch. The caller also checks
/// [`min_insync_check`] at that moment and answers `NOT_ENOUGH_REPLICAS` (after append) if the
/// ISR shrank below the minimum meanwhile, since the batch is then on too few disks.
pub fn acks_all_ready(batch_end_offset: Offset, hw: Offset) -> bool {
    hw >= batch_end_offset
}

/// Too few in-sync replicas for an `acks=all` write (the wire's `NOT_ENOUGH_REPLICAS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{isr_len} in-sync replicas, fewer than min_insync_replicas {min_insync_replicas}")]
pub struct NotEnoughReplicas {
    /// The size of the ISR at the check.
    pub isr_len: usize,
    /// The topic's `min_insync_replicas`.
    pub min_insync_replicas: usize,
}

/// Refuses an `acks=all` write when the ISR (leader included) is smaller than
/// `min_insync_replicas`: checked before appending, and again before answering.
pub fn min_insync_check(
    isr_len: usize,
    min_insync_replicas: usize,
) -> Result<(), NotEnoughReplicas> {
    if isr_len >= min_insync_replicas {
        Ok(())
    } else {
        Err(NotEnoughReplicas {
            isr_len,
            min_insync_replicas,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn follower(end: Offset, caught_up_ms: u64) -> FollowerState {
        FollowerState {
            log_end: Some(end),
            last_caught_up_ms: caught_up_ms,
            last_fetch: None,
        }
    }

    #[test]
    fn hw_is_the_smallest_isr_end_and_ignores_non_members() {
        let followers = Followers::from([(2, follower(7, 0)), (3, follower(2, 0))]);
        assert_eq!(high_watermark(0, 1, 9, &[1, 2], &followers), 7);
        assert_eq!(high_watermark(0, 1, 5, &[1, 2], &followers), 5);
        assert_eq!(high_watermark(0, 1, 9, &[1, 2, 3], &followers), 2);
        assert_eq!(high_watermark(4, 1, 9, &[1, 2, 3], &followers), 4);
    }

    #[test]
    fn hw_waits_for_an_unknown_member() {
        let followers = Followers::from([(2, FollowerState::new(0))]);
        assert_eq!(high_watermark(3, 1, 9, &[1, 2], &followers), 3);
        assert_eq!(high_watermark(3, 1, 9, &[1, 4], &followers), 3);
    }

    #[test]
    fn caught_up_follows_kafkas_rule() {
        let mut f = FollowerState::new(0);
        f.on_fetch(5, 100, 10).unwrap(); // behind, no previous fetch
        assert_eq!(f.last_caught_up_ms, 0);
        f.on_fetch(10, 200, 12).unwrap(); // reached the end as of the previous fetch
        assert_eq!(f.last_caught_up_ms, 100);
        f.on_fetch(12, 300, 12).unwrap(); // at the end now
        assert_eq!(f.last_caught_up_ms, 300);
        assert_eq!(f.log_end, Some(12));
    }

    #[test]
    fn out_of_range_reports_are_refused() {
        let mut f = FollowerState::new(0);
        assert!(f.on_fetch(11, 1, 10).is_err());
        assert!(f.on_fetch(-1, 1, 10).is_err());
        assert_eq!(f, FollowerState::new(0));
    }

    #[test]
    fn shrink_removes_laggards_and_silent_members_only() {
        let followers = Followers::from([
            (2, follower(10, 0)),    // at the end: stays however old
            (3, follower(4, 0)),     // behind for too long
            (4, follower(4, 9_500)), // behind, recently caught up
        ]);
        let out = isr_shrink(10_001, 1, 10, &[1, 2, 3, 4, 5], &followers, 10_000);
        assert_eq!(out, vec![3, 5]);
        assert!(isr_shrink(0, 1, 10, &[1, 3], &followers, 10_000).is_empty());
    }

    #[test]
    fn expand_needs_hw_and_epoch_start() {
        let followers = Followers::from([
            (2, follower(10, 0)),
            (3, follower(6, 0)),
            (4, follower(8, 0)),
            (5, FollowerState::new(0)),
        ]);
        assert_eq!(isr_expand_candidates(1, &[1, 2], &followers, 7, 8), vec![4]);
    }

    #[test]
    fn acks_and_min_insync() {
        assert!(acks_all_ready(5, 5));
        assert!(!acks_all_ready(6, 5));
        assert!(min_insync_check(2, 2).is_ok());
        assert_eq!(
            min_insync_check(1, 2),
            Err(NotEnoughReplicas {
                isr_len: 1,
                min_insync_replicas: 2
            })
        );
        assert_eq!(visible_high_watermark(4, 5), None);
        assert_eq!(visible_high_watermark(5, 5), Some(5));
    }
}
