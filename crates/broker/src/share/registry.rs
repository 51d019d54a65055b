//! The share groups' state held by this broker, as data: which share partitions are loaded
//! ([`ShareGroups`]), each one's state machine and state log ([`SharedPartition`]), and the
//! limits on them. Loading one and answering requests are `lookup`, `fetch` and `answer`,
//! above the broker's state; this module is below it (the state holds the registry).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tinymq_protocol::{messages as m, ErrorCode};
use tinymq_share::SharePartition;
use tokio::sync::watch;

use super::store::StateLog;
use crate::partition::Partition;

/// Most share groups with state on one partition: each costs a state log and up to
/// `SHARE_IN_FLIGHT_RECORDS_MAX` in-flight records of memory.
pub const SHARE_GROUPS_PER_PARTITION_MAX: usize = 64;
/// Most share partitions (group, topic, partition) one broker keeps: at most ~1 MB of
/// in-flight records each, so about 1 GB in the worst case.
pub const SHARE_PARTITIONS_PER_BROKER_MAX: usize = 1024;

/// Member ids DescribeShareGroup lists.
pub const DESCRIBE_MEMBERS_MAX: usize = 1_000;
/// Dead-lettering passes running at once on a broker (each holds up to
/// `dead_letter::DEAD_LETTER_PASS_BYTES_MAX` plus a decoded batch); others wait for a later
/// tick.
pub const DEAD_LETTER_PASSES_MAX: usize = 4;

/// The share partition a request names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ShareKey {
    pub group: String,
    pub topic: String,
    pub partition: u32,
}

/// One share group's state of one partition led here.
#[derive(Debug)]
pub(crate) struct SharedPartition {
    pub key: ShareKey,
    pub partition: Arc<Partition>,
    /// The leader epoch it was loaded in: a new epoch reloads it from the log.
    pub leader_epoch: u32,
    pub state: Mutex<SharePartition>,
    pub log: Arc<StateLog>,
    /// Set while a dead-lettering task runs for it.
    pub dead_lettering: AtomicBool,
    /// After a failed dead-lettering pass: not retried before this (ms since the epoch).
    pub dead_letter_retry_at_ms: AtomicI64,
    /// Set (under `state`'s lock) once this instance is no longer the registry's: leadership
    /// moved, or its log failed. Every change checks it under the same lock first, so a task
    /// still holding the old instance can neither hand out records nor write its log while a
    /// new instance reads the same file.
    retired: AtomicBool,
    /// Bumped when records of this share partition become available again (released, lock
    /// expired) and when it is retired: the long polls naming it wait on it as on the high
    /// watermark (only those: a release elsewhere wakes nobody here).
    released: watch::Sender<i64>,
}

impl SharedPartition {
    /// A live instance of `key`'s state, loaded in `leader_epoch` into `share` from `log`.
    pub(super) fn new(
        key: ShareKey,
        partition: Arc<Partition>,
        leader_epoch: u32,
        share: SharePartition,
        log: StateLog,
    ) -> SharedPartition {
        SharedPartition {
            key,
            partition,
            leader_epoch,
            state: Mutex::new(share),
            log: Arc::new(log),
            dead_lettering: AtomicBool::new(false),
            dead_letter_retry_at_ms: AtomicI64::new(0),
            retired: AtomicBool::new(false),
            released: watch::Sender::new(0),
        }
    }

    /// Appends what an operation logged (call under `state`'s lock); on a write error the
    /// in-memory state is no longer the log's, so the instance is retired (the registry
    /// reloads it from the log on next use).
    pub fn append(&self, records: &[tinymq_share::StateRecord]) -> Result<u64, m::Error> {
        self.log.append(records).map_err(|e| {
            self.retired.store(true, Ordering::Release);
            self.notify_released();
            storage_error(&self.key, &e)
        })
    }

    pub fn notify_released(&self) {
        self.released.send_modify(|n| *n = n.wrapping_add(1));
    }

    pub fn watch_released(&self) -> watch::Receiver<i64> {
        self.released.subscribe()
    }

    /// Whether this instance may still change its state (read under `state`'s lock).
    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// Retires this instance: waits for any change in progress to finish, so nothing is
    /// written through it afterwards (the lock is never held across an await or the
    /// registry's lock).
    pub fn retire(&self) {
        {
            let _state = self.state.lock();
            self.retired.store(true, Ordering::Release);
        }
        // Long polls holding it wake up and re-resolve the live instance.
        self.notify_released();
    }

    /// The refusal of a change through a retired instance or one whose partition is no
    /// longer led here (the member retries, reaching the live instance or the new leader).
    pub fn not_live(&self) -> m::Error {
        ErrorCode::NOT_LEADER.with_message(format!(
            "share state of {}/{} for group {} was reloaded or moved; retry",
            self.key.topic, self.key.partition, self.key.group
        ))
    }
}

pub(crate) fn storage_error(key: &ShareKey, e: &std::io::Error) -> m::Error {
    ErrorCode::STORAGE_ERROR.with_message(format!(
        "share group {} state of {}/{}: {e}",
        key.group, key.topic, key.partition
    ))
}

/// Every share group's state on this broker.
#[derive(Debug)]
pub struct ShareGroups {
    pub(super) partitions: Mutex<HashMap<ShareKey, Arc<SharedPartition>>>,
    /// Bounds the dead-lettering passes running at once (`DEAD_LETTER_PASSES_MAX`).
    pub(crate) dead_letter_passes: Arc<tokio::sync::Semaphore>,
}

impl Default for ShareGroups {
    fn default() -> Self {
        ShareGroups {
            partitions: Mutex::new(HashMap::new()),
            dead_letter_passes: Arc::new(tokio::sync::Semaphore::new(DEAD_LETTER_PASSES_MAX)),
        }
    }
}

impl ShareGroups {
    /// Removes `shared` from the registry (if it is still the registered instance) and
    /// retires it.
    pub(crate) fn drop_partition(&self, shared: &Arc<SharedPartition>) {
        {
            let mut kept = self.partitions.lock();
            if kept
                .get(&shared.key)
                .is_some_and(|k| Arc::ptr_eq(k, shared))
            {
                kept.remove(&shared.key);
            }
        }
        shared.retire();
    }

    /// Every loaded share partition; waits for a load in progress (as a fetch would), so an
    /// answer built from it misses no member.
    pub(crate) fn all(&self) -> Vec<Arc<SharedPartition>> {
        self.partitions.lock().values().cloned().collect()
    }

    /// Every loaded share partition, or `None` while the registry is busy (a load runs).
    pub(crate) fn try_all(&self) -> Option<Vec<Arc<SharedPartition>>> {
        Some(self.partitions.try_lock()?.values().cloned().collect())
    }
}

/// Checks a share request's group and member ids.
pub(crate) fn check_ids(group: &str, member: &str) -> Result<(), m::Error> {
    crate::group::validate_group_id(group).map_err(|(code, why)| code.with_message(why))?;
    tinymq_protocol::names::validate_member_id(member)
        .map_err(|e| e.error_code().with_message(e.to_string()))
}

/// The wire error of a state-machine refusal.
pub(crate) fn share_error(e: &tinymq_share::ShareError) -> m::Error {
    use tinymq_share::ShareError;
    let code = match e {
        ShareError::InvalidRecordState { .. } => ErrorCode::INVALID_RECORD_STATE,
        ShareError::Gap { .. } => ErrorCode::UNKNOWN_SERVER_ERROR,
        _ => ErrorCode::INVALID_REQUEST,
    };
    code.with_message(e.to_string())
}
