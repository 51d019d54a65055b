//! The follower fetch tasks of this broker as data ([`Fetchers`]: one per leader, with the
//! partitions it follows from that leader); the broker state holds it. Starting a task is
//! `fetcher::sync`'s, above the state.

use std::collections::HashMap;
use std::sync::Arc;

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

/// The follower fetch tasks of this broker, by leader.
#[derive(Debug, Default)]
pub struct Fetchers {
    by_leader: Mutex<HashMap<u32, FetcherHandle>>,
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
}
