//! The leader side of one partition's replication: what each follower last reported, the
//! in-sync replica set as the MetaServer has it (plus an addition this leader proposed and
//! the MetaServer has not confirmed yet), the high watermark that follows from them, and which
//! followers should leave or rejoin the ISR. Pure state; the partition holds it under a lock.

use std::collections::BTreeMap;

/// What the leader knows of one follower, from its fetches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerState {
    /// The follower's log end (its fetch offset).
    pub log_end: i64,
    /// Every offset below this is durable on the follower.
    pub durable_end: i64,
    /// The last time (ms) the follower had everything the leader had at its previous fetch.
    pub caught_up_ms: i64,
    /// The leader's log end when the follower last fetched.
    leader_end_at_fetch: i64,
    /// When the follower last fetched (ms).
    fetch_ms: i64,
}

/// The leader's replication state for one partition, for one leader epoch.
#[derive(Debug, Clone)]
pub struct LeaderState {
    pub leader_epoch: u32,
    /// The log end when this broker became leader: a follower rejoins the ISR only once it
    /// has reached it (it then holds every record of earlier epochs the leader kept).
    pub epoch_start_offset: i64,
    me: u32,
    /// The ISR as the MetaServer's image has it.
    isr: Vec<u32>,
    /// An ISR this leader proposed and the MetaServer has not applied yet.
    proposed: Option<Vec<u32>>,
    followers: BTreeMap<u32, FollowerState>,
}

impl LeaderState {
    /// Starts leading at `leader_epoch`, with the ISR of the image and a log ending at
    /// `log_end`. Followers are counted as caught up now: each has `replica_lag_time_max` to
    /// show it is fetching before it leaves the ISR.
    pub fn new(me: u32, leader_epoch: u32, isr: &[u32], log_end: i64, now_ms: i64) -> Self {
        let followers = isr
            .iter()
            .filter(|&&id| id != me)
            .map(|&id| (id, FollowerState::unknown(now_ms)))
            .collect();
        LeaderState {
            leader_epoch,
            epoch_start_offset: log_end,
            me,
            isr: isr.to_vec(),
            proposed: None,
            followers,
        }
    }

    /// Whether this is `me` leading in `leader_epoch`.
    pub fn is(&self, me: u32, leader_epoch: u32) -> bool {
        self.me == me && self.leader_epoch == leader_epoch
    }

    pub fn isr(&self) -> &[u32] {
        &self.isr
    }

    /// The image's ISR changed (this leader's proposal applied, or another change).
    pub fn set_isr(&mut self, isr: &[u32], now_ms: i64) {
        if self.proposed.as_deref() == Some(isr) || self.isr != isr {
            self.proposed = None;
        }
        for &id in isr {
            if id != self.me {
                self.followers
                    .entry(id)
                    .or_insert_with(|| FollowerState::unknown(now_ms));
            }
        }
        self.isr = isr.to_vec();
    }

    /// The replicas whose durable end bounds the high watermark: the ISR, plus any follower
    /// a pending proposal adds (a follower being added may be elected as soon as the
    /// MetaServer applies the change, so records acknowledged meanwhile must be on it too).
    fn counted(&self) -> impl Iterator<Item = u32> + '_ {
        let added = self
            .proposed
            .iter()
            .flatten()
            .filter(|id| !self.isr.contains(id));
        self.isr.iter().chain(added).copied()
    }

    /// A fetch from follower `id` at `log_end` reporting `durable_end`, while the leader's
    /// log ends at `leader_end`.
    pub fn on_fetch(
        &mut self,
        id: u32,
        log_end: i64,
        durable_end: i64,
        leader_end: i64,
        now_ms: i64,
    ) {
        let state = self
            .followers
            .entry(id)
            .or_insert_with(|| FollowerState::unknown(now_ms));
        // Kafka's rule: caught up if it has everything the leader had now, or at its previous
        // fetch (so a steady stream of writes does not make a fetching follower lag forever).
        if log_end >= leader_end {
            state.caught_up_ms = now_ms;
        } else if log_end >= state.leader_end_at_fetch {
            state.caught_up_ms = state.caught_up_ms.max(state.fetch_ms);
        }
        state.log_end = log_end;
        state.durable_end = durable_end.min(log_end);
        state.leader_end_at_fetch = leader_end;
        state.fetch_ms = now_ms;
    }

    /// The high watermark the replicas support: the lowest durable end among the counted
    /// replicas, this leader's own being `own_durable_end`. Callers keep the published one
    /// from going backwards.
    pub fn high_watermark(&self, own_durable_end: i64) -> i64 {
        self.counted()
            .filter(|&id| id != self.me)
            .map(|id| self.followers.get(&id).map_or(i64::MIN, |f| f.durable_end))
            .fold(own_durable_end, i64::min)
    }

    /// Whether an ISR change is waiting for the MetaServer.
    pub fn proposal_pending(&self) -> bool {
        self.proposed.is_some()
    }

    pub fn propose(&mut self, isr: Vec<u32>) {
        self.proposed = Some(isr);
    }

    /// The proposal failed: propose again at the next check.
    pub fn proposal_failed(&mut self) {
        self.proposed = None;
    }

    /// The ISR this leader should propose now, if it differs from the current one: followers
    /// that have not been caught up for `lag_max_ms` leave; replicas outside it that have
    /// reached the high watermark `hw` and this epoch's start rejoin.
    pub fn wanted_isr(
        &self,
        replicas: &[u32],
        hw: i64,
        lag_max_ms: i64,
        now_ms: i64,
    ) -> Option<Vec<u32>> {
        let keep = |id: u32| {
            id == self.me
                || self
                    .followers
                    .get(&id)
                    .is_some_and(|f| now_ms.saturating_sub(f.caught_up_ms) <= lag_max_ms)
        };
        let rejoin = |id: u32| {
            self.followers.get(&id).is_some_and(|f| {
                f.log_end >= hw
                    && f.log_end >= self.epoch_start_offset
                    && now_ms.saturating_sub(f.caught_up_ms) <= lag_max_ms
            })
        };
        let wanted: Vec<u32> = replicas
            .iter()
            .copied()
            .filter(|&id| {
                if self.isr.contains(&id) {
                    keep(id)
                } else {
                    rejoin(id)
                }
            })
            .collect();
        if !wanted.contains(&self.me) {
            // This broker is not (or no longer) a replica: not for it to change the ISR.
            return None;
        }
        let mut current = self.isr.clone();
        current.sort_unstable();
        let mut sorted = wanted.clone();
        sorted.sort_unstable();
        (sorted != current).then_some(wanted)
    }

    pub fn follower(&self, id: u32) -> Option<&FollowerState> {
        self.followers.get(&id)
    }
}

impl FollowerState {
    fn unknown(now_ms: i64) -> FollowerState {
        FollowerState {
            log_end: -1,
            durable_end: -1,
            caught_up_ms: now_ms,
            leader_end_at_fetch: i64::MAX,
            fetch_ms: now_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_high_watermark_is_the_lowest_durable_end_in_the_isr() {
        let mut l = LeaderState::new(1, 5, &[1, 2, 3], 100, 0);
        assert!(
            l.high_watermark(100) < 0,
            "followers not heard from hold it"
        );
        l.on_fetch(2, 100, 90, 100, 1);
        l.on_fetch(3, 100, 95, 100, 1);
        assert_eq!(l.high_watermark(100), 90);
        assert_eq!(
            l.high_watermark(80),
            80,
            "the leader's own durable end counts"
        );
        // A follower outside the ISR does not hold it back.
        l.set_isr(&[1, 3], 2);
        assert_eq!(l.high_watermark(100), 95);
    }

    #[test]
    fn a_pending_addition_counts_before_the_metaserver_applies_it() {
        let mut l = LeaderState::new(1, 5, &[1], 100, 0);
        l.on_fetch(2, 100, 100, 100, 1);
        assert_eq!(l.wanted_isr(&[1, 2], 100, 10_000, 2), Some(vec![1, 2]));
        l.propose(vec![1, 2]);
        l.on_fetch(2, 100, 100, 110, 3);
        assert_eq!(l.high_watermark(110), 100, "the added follower holds it");
        l.set_isr(&[1, 2], 4);
        assert!(!l.proposal_pending());
    }

    #[test]
    fn a_lagging_follower_leaves_and_a_caught_up_one_rejoins() {
        let mut l = LeaderState::new(1, 5, &[1, 2, 3], 100, 0);
        l.on_fetch(2, 100, 100, 100, 1_000);
        l.on_fetch(3, 50, 50, 100, 1_000);
        assert_eq!(l.wanted_isr(&[1, 2, 3], 50, 10_000, 5_000), None);
        // Follower 3 never catches up; after the lag time it leaves.
        l.on_fetch(2, 100, 100, 100, 10_500);
        l.on_fetch(3, 60, 60, 100, 10_500);
        assert_eq!(
            l.wanted_isr(&[1, 2, 3], 60, 10_000, 10_500),
            Some(vec![1, 2])
        );
        l.set_isr(&[1, 2], 10_600);
        // It catches up: back in.
        l.on_fetch(3, 100, 100, 100, 11_000);
        assert_eq!(
            l.wanted_isr(&[1, 2, 3], 100, 10_000, 11_000),
            Some(vec![1, 2, 3])
        );
    }

    #[test]
    fn a_follower_below_the_epoch_start_does_not_rejoin() {
        let mut l = LeaderState::new(1, 5, &[1], 200, 0);
        l.on_fetch(2, 150, 150, 200, 1);
        assert_eq!(l.wanted_isr(&[1, 2], 100, 10_000, 2), None);
    }
}
