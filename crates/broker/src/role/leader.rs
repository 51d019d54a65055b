//! The leader side of one partition's replication: what each follower last reported, the
//! in-sync replica set as the MetaServer has it (plus an ISR change this leader proposed and
//! the MetaServer has not settled yet), the high watermark that follows from them, and which
//! followers should leave or rejoin the ISR. Pure state, held by the partition under a lock;
//! the rules themselves are [`tinymq_replication::leader_state`]'s (property-tested and
//! stepped by the replication simulation), this type only keeps their inputs.

use std::collections::BTreeMap;

use tinymq_replication::leader_state::{self as rules, FollowerState, Followers};

/// An ISR change sent to the MetaServer and not settled yet.
#[derive(Debug, Clone)]
pub struct Proposal {
    pub isr: Vec<u32>,
    /// The partition epoch it was proposed at; a newer one in the image settles it (the
    /// MetaServer moves the epoch when it applies or refuses a proposal at current epochs).
    pub partition_epoch: u32,
}

/// The leader's replication state for one partition, for one leader epoch.
#[derive(Debug, Clone)]
pub struct LeaderState {
    pub leader_epoch: u32,
    /// The log end when this broker became leader: a follower rejoins the ISR only once it
    /// has reached it (it then holds every record of earlier epochs the leader kept).
    pub epoch_start_offset: i64,
    me: u32,
    /// The ISR and partition epoch as the MetaServer's image has them.
    isr: Vec<u32>,
    partition_epoch: u32,
    proposed: Option<Proposal>,
    followers: Followers,
    /// The registration (broker epoch, as the image had it) each follower fetched under last:
    /// a report from an earlier registration says nothing of what the broker holds now (it
    /// restarted, and may have lost a tail it had not fsynced), so it cannot bring the broker
    /// back into the ISR.
    fetched_as: BTreeMap<u32, Option<u64>>,
    /// The log start each follower reported in its last fetch (DeleteRecords waits for the
    /// in-sync ones to reach its offset).
    log_starts: BTreeMap<u32, i64>,
}

fn ms(now_ms: i64) -> u64 {
    u64::try_from(now_ms).unwrap_or(0)
}

impl LeaderState {
    /// Starts leading at `leader_epoch`, with the ISR and partition epoch of the image and a
    /// log ending at `log_end`. ISR followers are counted as caught up now: each has
    /// `replica_lag_time_max` to show it is fetching before it leaves the ISR.
    pub fn new(
        me: u32,
        leader_epoch: u32,
        partition_epoch: u32,
        isr: &[u32],
        log_end: i64,
        now_ms: i64,
    ) -> Self {
        let followers = isr
            .iter()
            .filter(|&&id| id != me)
            .map(|&id| (id, FollowerState::new(ms(now_ms))))
            .collect();
        LeaderState {
            leader_epoch,
            epoch_start_offset: log_end,
            me,
            isr: isr.to_vec(),
            partition_epoch,
            proposed: None,
            followers,
            fetched_as: BTreeMap::new(),
            log_starts: BTreeMap::new(),
        }
    }

    /// Whether this is `me` leading in `leader_epoch`.
    pub fn is(&self, me: u32, leader_epoch: u32) -> bool {
        self.me == me && self.leader_epoch == leader_epoch
    }

    pub fn isr(&self) -> &[u32] {
        &self.isr
    }

    /// The partition epoch of the ISR this leader holds.
    pub fn partition_epoch(&self) -> u32 {
        self.partition_epoch
    }

    /// The image's ISR and partition epoch (this leader's proposal applied or refused, or
    /// another change). A newer partition epoch settles the pending proposal; an older one
    /// (an image that lags a reply already taken) changes nothing.
    pub fn set_isr(&mut self, isr: &[u32], partition_epoch: u32, now_ms: i64) {
        if partition_epoch < self.partition_epoch {
            return;
        }
        if self
            .proposed
            .as_ref()
            .is_some_and(|p| partition_epoch > p.partition_epoch)
        {
            self.proposed = None;
        }
        for &id in isr {
            if id != self.me {
                self.followers
                    .entry(id)
                    .or_insert_with(|| FollowerState::new(ms(now_ms)));
            }
        }
        self.isr = isr.to_vec();
        self.partition_epoch = partition_epoch;
    }

    /// The replicas whose durable end bounds the high watermark (Kafka's maximal ISR): the
    /// image's ISR, plus any follower a pending proposal adds (it may be elected as soon as the
    /// MetaServer applies the change, so records acknowledged meanwhile must be on it too);
    /// a pending removal counts until it is applied.
    fn maximal_isr(&self) -> Vec<u32> {
        let mut isr = self.isr.clone();
        for p in self.proposed.iter().flat_map(|p| &p.isr) {
            if !isr.contains(p) {
                isr.push(*p);
            }
        }
        isr
    }

    /// A fetch from follower `id` reporting `durable_end` (every offset below it is durable
    /// there), while the leader's log ends at `leader_end` and the image has the follower
    /// registered as `broker_epoch`. A report outside the leader's log is ignored: the
    /// follower is told where it diverges and truncates first.
    pub fn on_fetch(
        &mut self,
        id: u32,
        durable_end: i64,
        leader_end: i64,
        now_ms: i64,
        broker_epoch: Option<u64>,
    ) {
        let state = self
            .followers
            .entry(id)
            .or_insert_with(|| FollowerState::new(ms(now_ms)));
        if state.on_fetch(durable_end, ms(now_ms), leader_end).is_ok() {
            self.fetched_as.insert(id, broker_epoch);
        }
    }

    /// Follower `id` reported its log start at `log_start`.
    pub fn note_log_start(&mut self, id: u32, log_start: i64) {
        self.log_starts.insert(id, log_start);
    }

    /// The lowest log start the in-sync followers reported (a follower that has reported
    /// none counts as 0); `None` without in-sync followers.
    pub fn followers_log_start(&self) -> Option<i64> {
        self.isr
            .iter()
            .filter(|&&id| id != self.me)
            .map(|id| self.log_starts.get(id).copied().unwrap_or(0))
            .min()
    }

    /// The high watermark the replicas support, never below `current_hw`: the lowest durable
    /// end among the maximal ISR, this leader's own being `own_durable_end`.
    pub fn high_watermark(&self, current_hw: i64, own_durable_end: i64) -> i64 {
        rules::high_watermark(
            current_hw,
            self.me,
            own_durable_end,
            &self.maximal_isr(),
            &self.followers,
        )
    }

    /// The ISR change waiting for the MetaServer, to be sent (again) until settled.
    /// Whether follower `id` last fetched under the registration it has now, and is live.
    fn reported_as_now(&self, id: u32, registration: impl Fn(u32) -> Option<u64>) -> bool {
        let now = registration(id);
        now.is_some() && self.fetched_as.get(&id) == Some(&now)
    }

    pub fn pending(&self) -> Option<&Proposal> {
        self.proposed.as_ref()
    }

    pub fn propose(&mut self, isr: Vec<u32>) {
        self.proposed = Some(Proposal {
            isr,
            partition_epoch: self.partition_epoch,
        });
    }

    /// The ISR this leader should propose now, if it differs from the image's: followers
    /// that have not been caught up for `lag_max_ms` leave; replicas outside it that reached
    /// the high watermark `hw` and this epoch's start, that the MetaServer would accept
    /// (`registration` gives the broker epoch of a live broker, `None` for a fenced one),
    /// and that reported so under that very registration, rejoin. The order is `replicas`'.
    pub fn wanted_isr(
        &self,
        replicas: &[u32],
        hw: i64,
        leader_end: i64,
        lag_max_ms: i64,
        now_ms: i64,
        registration: impl Fn(u32) -> Option<u64>,
    ) -> Option<Vec<u32>> {
        if !replicas.contains(&self.me) {
            // This broker is not (or no longer) a replica: not for it to change the ISR.
            return None;
        }
        let lag_max_ms = u64::try_from(lag_max_ms).unwrap_or(0);
        let leave = rules::isr_shrink(
            ms(now_ms),
            self.me,
            leader_end,
            &self.isr,
            &self.followers,
            lag_max_ms,
        );
        let join = rules::isr_expand_candidates(
            self.me,
            &self.isr,
            &self.followers,
            hw,
            self.epoch_start_offset,
        );
        let wanted: Vec<u32> = replicas
            .iter()
            .copied()
            .filter(|&id| {
                id == self.me
                    || (self.isr.contains(&id) && !leave.contains(&id))
                    || (join.contains(&id) && self.reported_as_now(id, &registration))
            })
            .collect();
        let mut current = self.isr.clone();
        current.sort_unstable();
        let mut sorted = wanted.clone();
        sorted.sort_unstable();
        (sorted != current).then_some(wanted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAG_MS: i64 = 10_000;
    fn all_live(_: u32) -> Option<u64> {
        Some(0)
    }

    #[test]
    fn the_high_watermark_is_the_lowest_durable_end_in_the_isr() {
        let mut l = LeaderState::new(1, 5, 0, &[1, 2, 3], 100, 0);
        assert_eq!(
            l.high_watermark(0, 100),
            0,
            "followers not heard from hold it"
        );
        l.on_fetch(2, 90, 100, 1, Some(0));
        l.on_fetch(3, 95, 100, 1, Some(0));
        assert_eq!(l.high_watermark(0, 100), 90);
        assert_eq!(
            l.high_watermark(0, 80),
            80,
            "the leader's own durable end counts"
        );
        assert_eq!(l.high_watermark(92, 80), 92, "never backwards");
        // A follower outside the ISR does not hold it back.
        l.set_isr(&[1, 3], 1, 2);
        assert_eq!(l.high_watermark(0, 100), 95);
    }

    #[test]
    fn a_pending_addition_counts_until_a_newer_partition_epoch_settles_it() {
        let mut l = LeaderState::new(1, 5, 7, &[1], 100, 0);
        l.on_fetch(2, 100, 100, 1, Some(0));
        let wanted = l.wanted_isr(&[1, 2], 100, 100, LAG_MS, 2, all_live);
        assert_eq!(wanted, Some(vec![1, 2]));
        l.propose(vec![1, 2]);
        l.on_fetch(2, 100, 110, 3, Some(0));
        assert_eq!(
            l.high_watermark(100, 110),
            100,
            "the added follower holds it"
        );
        // An image at the same partition epoch (no answer yet) keeps it pending.
        l.set_isr(&[1], 7, 4);
        assert!(l.pending().is_some());
        // Refused: the MetaServer moved the epoch without taking the ISR.
        l.set_isr(&[1], 8, 5);
        assert!(l.pending().is_none());
        assert_eq!(l.high_watermark(100, 110), 110);
    }

    #[test]
    fn a_lagging_follower_leaves_and_a_caught_up_one_rejoins() {
        let mut l = LeaderState::new(1, 5, 0, &[1, 2, 3], 100, 0);
        l.on_fetch(2, 100, 100, 1_000, Some(0));
        l.on_fetch(3, 50, 100, 1_000, Some(0));
        assert_eq!(
            l.wanted_isr(&[1, 2, 3], 50, 100, LAG_MS, 5_000, all_live),
            None
        );
        // Follower 3 never catches up; after the lag time it leaves.
        l.on_fetch(2, 100, 100, 10_500, Some(0));
        l.on_fetch(3, 60, 100, 10_500, Some(0));
        assert_eq!(
            l.wanted_isr(&[1, 2, 3], 60, 100, LAG_MS, 10_500, all_live),
            Some(vec![1, 2])
        );
        l.set_isr(&[1, 2], 1, 10_600);
        // It catches up: back in, unless the MetaServer has it fenced.
        l.on_fetch(3, 100, 100, 11_000, Some(0));
        assert_eq!(
            l.wanted_isr(&[1, 2, 3], 100, 100, LAG_MS, 11_000, all_live),
            Some(vec![1, 2, 3])
        );
        assert_eq!(
            l.wanted_isr(&[1, 2, 3], 100, 100, LAG_MS, 11_000, |id| (id != 3)
                .then_some(0)),
            None
        );
    }

    #[test]
    fn a_follower_below_the_epoch_start_does_not_rejoin() {
        let mut l = LeaderState::new(1, 5, 0, &[1], 200, 0);
        l.on_fetch(2, 150, 200, 1, Some(0));
        assert_eq!(l.wanted_isr(&[1, 2], 100, 200, LAG_MS, 2, all_live), None);
    }

    /// Issue 28 (the production simulation, seed 468 of the first long run): a follower that
    /// restarted lost a tail it had reported (flush `os`), and the MetaServer took it out of
    /// the ISR; its report from before the restart must not bring it back in, or it can be
    /// elected without records that were acknowledged.
    #[test]
    fn a_report_from_before_a_follower_registered_again_does_not_bring_it_back() {
        let mut l = LeaderState::new(1, 5, 0, &[1, 2], 100, 0);
        l.on_fetch(2, 100, 100, 1, Some(7));
        // Broker 2 restarts (registration 8) and leaves the ISR before fetching again.
        l.set_isr(&[1], 1, 2);
        let registered_again = |id: u32| (id == 2).then_some(8);
        assert_eq!(
            l.wanted_isr(&[1, 2], 100, 100, LAG_MS, 3, registered_again),
            None
        );
        // Once it has fetched as its new registration and caught up, it rejoins.
        l.on_fetch(2, 60, 100, 4, Some(8));
        assert_eq!(
            l.wanted_isr(&[1, 2], 100, 100, LAG_MS, 5, registered_again),
            None
        );
        l.on_fetch(2, 100, 100, 6, Some(8));
        assert_eq!(
            l.wanted_isr(&[1, 2], 100, 100, LAG_MS, 7, registered_again),
            Some(vec![1, 2])
        );
    }
}
