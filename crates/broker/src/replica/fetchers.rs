//! The follower fetch tasks of this broker as data ([`Fetchers`]: one per leader, with the
//! partitions it follows from that leader); the broker state holds it. Starting a task is
//! `fetcher::sync`'s, above the state.
//!
//! Also the fetch tasks' evidence about their leaders: since when a leader's connection is
//! closed or refused ([`Fetchers::leader_unreachable`]). A hint for clients only (the Kafka
//! listener's Metadata answers such a leader's partitions `LEADER_NOT_AVAILABLE`, so clients
//! look again soon instead of waiting on a dead address); leadership moves only when the
//! MetaServer ends the leader's session.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::partition::Partition;
use crate::role::Role;

/// A partition followed from one leader, in one leader epoch.
#[derive(Debug, Clone)]
pub(crate) struct Followed {
    pub partition: Arc<Partition>,
    pub leader_epoch: u32,
}

#[derive(Debug)]
struct FetcherHandle {
    followed: Arc<Mutex<Vec<Followed>>>,
    stop: CancellationToken,
}

/// How long a leader whose connection a fetch task saw closed or refused counts as
/// unreachable: past the MetaServer's session timeout, by when a dead leader has been fenced
/// and replaced; a leader the image still names after that is alive by the MetaServer's word,
/// whatever this broker sees.
pub const LEADER_UNREACHABLE_HINT: Duration =
    tinymq_meta::command::BROKER_SESSION_TIMEOUT.saturating_add(Duration::from_millis(500));

/// The follower fetch tasks of this broker, by leader.
#[derive(Debug, Default)]
pub struct Fetchers {
    by_leader: Mutex<HashMap<u32, FetcherHandle>>,
    /// Leaders whose connection a fetch task saw closed or refused, and since when; removed at
    /// the next fetch answered, or when the task stops.
    unreachable: Mutex<HashMap<u32, Instant>>,
    stop: CancellationToken,
}

impl Fetchers {
    /// Starts (with `start(leader, followed, stop)`), updates and stops fetch tasks so that
    /// each of `partitions` followed here is fetched from its current leader.
    pub(crate) fn sync(
        &self,
        partitions: Vec<Arc<Partition>>,
        start: impl Fn(u32, Arc<Mutex<Vec<Followed>>>, CancellationToken),
    ) {
        let mut wanted: HashMap<u32, Vec<Followed>> = HashMap::new();
        for partition in partitions {
            let role = partition.role.lock().clone();
            if let Role::Follower {
                leader: Some(leader),
                leader_epoch,
            } = role
            {
                wanted.entry(leader).or_default().push(Followed {
                    partition,
                    leader_epoch,
                });
            }
        }
        let mut by_leader = self.by_leader.lock();
        by_leader.retain(|leader, handle| {
            let keep = wanted.contains_key(leader);
            if !keep {
                handle.stop.cancel();
            }
            keep
        });
        for (leader, followed) in wanted {
            if let Some(handle) = by_leader.get(&leader) {
                *handle.followed.lock() = followed;
                continue;
            }
            let handle = FetcherHandle {
                followed: Arc::new(Mutex::new(followed)),
                stop: self.stop.child_token(),
            };
            start(leader, handle.followed.clone(), handle.stop.clone());
            by_leader.insert(leader, handle);
        }
    }

    /// Stops every fetch task (the broker is shutting down).
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// The fetch task of `leader` found its connection closed, or could not connect, at `now`.
    pub(crate) fn lost(&self, leader: u32, now: Instant) {
        self.unreachable.lock().entry(leader).or_insert(now);
    }

    /// The fetch task of `leader` had an answer, or stopped: no evidence either way.
    pub(crate) fn reached(&self, leader: u32) {
        self.unreachable.lock().remove(&leader);
    }

    /// Whether this broker's fetches from `leader` have found its connection closed or
    /// refused since less than [`LEADER_UNREACHABLE_HINT`] before `now`, with no answer since.
    pub fn leader_unreachable(&self, leader: u32, now: Instant) -> bool {
        let since = self.unreachable.lock().get(&leader).copied();
        since.is_some_and(|at| now.saturating_duration_since(at) < LEADER_UNREACHABLE_HINT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_leader_counts_as_unreachable_until_answered_or_the_hint_lapses() {
        let fetchers = Fetchers::default();
        let t0 = Instant::now();
        assert!(!fetchers.leader_unreachable(1, t0));
        fetchers.lost(1, t0);
        // Later failures do not move the start.
        fetchers.lost(1, t0 + Duration::from_millis(400));
        assert!(fetchers.leader_unreachable(1, t0 + Duration::from_millis(100)));
        assert!(!fetchers.leader_unreachable(2, t0));
        assert!(!fetchers.leader_unreachable(1, t0 + LEADER_UNREACHABLE_HINT));
        fetchers.reached(1);
        assert!(!fetchers.leader_unreachable(1, t0 + Duration::from_millis(100)));
    }
}
