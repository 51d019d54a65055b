//! Share groups on the broker (docs/queues.md, "Share groups"): for each partition led here,
//! each share group's share-partition state (acquisition locks, delivery counts, the start
//! offset), kept durable in a state log (`store`) and rebuilt when first used after this
//! broker starts leading the partition (or by the background task's scan, within a second); ShareFetch (`fetch`), ShareAcknowledge and
//! DescribeShareGroup (`answer`); lock expiry, state-log rewrites and dead-lettering in the
//! background task (`run`, `dead_letter`).

mod acquire;
mod answer;
mod dead_letter;
mod fetch;
mod store;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tinymq_protocol::{messages as m, ErrorCode};
use tinymq_share::SharePartition;
use tokio::sync::watch;

pub use answer::{describe_share_group, share_acknowledge};
pub use dead_letter::run;
pub use fetch::share_fetch;

use crate::partition::Partition;
use crate::state::BrokerState;
use crate::topic::ShareSettings;
use store::StateLog;

/// Most share groups with state on one partition: each costs a state log and up to
/// `SHARE_IN_FLIGHT_RECORDS_MAX` in-flight records of memory.
pub const SHARE_GROUPS_PER_PARTITION_MAX: usize = 64;
/// Most share partitions (group, topic, partition) one broker keeps: at most ~1 MB of
/// in-flight records each, so about 1 GB in the worst case.
pub const SHARE_PARTITIONS_PER_BROKER_MAX: usize = 1024;

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
    /// The topic's share settings in the current image (defaults if it just went away).
    pub fn settings(&self, state: &BrokerState) -> ShareSettings {
        let image = state.cluster.image();
        match image.topics.get(&self.key.topic) {
            Some(topic) => ShareSettings::of(&self.key.topic, topic),
            None => ShareSettings {
                max_delivery_attempts: tinymq_protocol::names::max_delivery_attempts(None),
                dead_letter_topic: tinymq_protocol::names::dead_letter_topic(&self.key.topic, None),
            },
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

    /// Whether this broker still leads the partition in the epoch this instance was loaded
    /// in, and the instance is live.
    pub fn still_led(&self, state: &BrokerState) -> bool {
        !self.is_retired()
            && matches!(
                state.led_partition(&self.key.topic, self.key.partition),
                Ok((partition, epoch))
                    if epoch == self.leader_epoch && Arc::ptr_eq(&partition, &self.partition)
            )
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
    partitions: Mutex<HashMap<ShareKey, Arc<SharedPartition>>>,
    /// Bounds the dead-lettering passes running at once (`DEAD_LETTER_PASSES_MAX`).
    pub(crate) dead_letter_passes: Arc<tokio::sync::Semaphore>,
}

impl Default for ShareGroups {
    fn default() -> Self {
        ShareGroups {
            partitions: Mutex::new(HashMap::new()),
            dead_letter_passes: Arc::new(tokio::sync::Semaphore::new(
                dead_letter::DEAD_LETTER_PASSES_MAX,
            )),
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

/// The share partition of `group` on `topic`/`index` if this broker leads it: kept, or
/// loaded from its state log (created at the log's earliest offset on first use when
/// `create`). `Ok(None)`: no state and `create` is false.
pub(crate) fn share_partition(
    state: &BrokerState,
    group: &str,
    topic: &str,
    index: u32,
    create: bool,
) -> Result<Option<Arc<SharedPartition>>, m::Error> {
    let (partition, epoch) = state.led_partition(topic, index)?;
    let key = ShareKey {
        group: group.into(),
        topic: topic.into(),
        partition: index,
    };
    let groups = &state.share;
    // Loading runs under the registry's lock, and a replaced instance is retired (waiting
    // for its change in progress) before the log is read, so one log never has two writers.
    // Lock order: registry, then a share partition's state (never the reverse).
    let mut kept = groups.partitions.lock();
    if let Some(shared) = kept.get(&key) {
        let live = !shared.is_retired()
            && shared.leader_epoch == epoch
            && Arc::ptr_eq(&shared.partition, &partition);
        if live {
            return Ok(Some(shared.clone()));
        }
        if let Some(old) = kept.remove(&key) {
            old.retire();
        }
    }
    let path = store::state_path(&partition.dir, group);
    if !create && !partition.storage.exists(&path) {
        return Ok(None);
    }
    let on_partition = kept
        .keys()
        .filter(|k| k.topic == key.topic && k.partition == index)
        .count();
    if on_partition >= SHARE_GROUPS_PER_PARTITION_MAX
        || kept.len() >= SHARE_PARTITIONS_PER_BROKER_MAX
    {
        return Err(ErrorCode::LIMIT_EXCEEDED.with_message(format!(
            "{topic}/{index} has share state for {on_partition} groups here (at most \
             {SHARE_GROUPS_PER_PARTITION_MAX}); the broker keeps {} share partitions (at most \
             {SHARE_PARTITIONS_PER_BROKER_MAX})",
            kept.len()
        )));
    }
    let fresh = SharePartition::new(partition.log.log_start_offset());
    let (log, mut share) = StateLog::open(partition.storage.clone(), path, fresh)
        .map_err(|e| storage_error(&key, &e))?;
    // A partition log truncated below the state's end offset (unclean election, truncation
    // to a new leader): the offsets from its end on were not handed out in this log.
    if share.truncate_to(partition.log.log_end_offset()) {
        tracing::warn!(
            topic,
            partition = index,
            group,
            end = partition.log.log_end_offset(),
            "partition log ends below the share state's end offset; state cut to it"
        );
        log.rewrite(&share).map_err(|e| storage_error(&key, &e))?;
    }
    // Records retention removed meanwhile are done.
    let mut records = Vec::new();
    share.advance_to(partition.log.log_start_offset(), &mut records);
    log.append(&records).map_err(|e| storage_error(&key, &e))?;
    let shared = Arc::new(SharedPartition {
        key: key.clone(),
        partition,
        leader_epoch: epoch,
        state: Mutex::new(share),
        log: Arc::new(log),
        dead_lettering: AtomicBool::new(false),
        dead_letter_retry_at_ms: AtomicI64::new(0),
        retired: AtomicBool::new(false),
        released: watch::Sender::new(0),
    });
    kept.insert(key, shared.clone());
    Ok(Some(shared))
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

/// The share groups with state on partitions this broker leads, each with the members
/// holding records in the state loaded here (at most `answer::DESCRIBE_MEMBERS_MAX` per
/// group): what ListGroups lists (issue 27). Reads partition directories: call it on the
/// blocking pool. A state not loaded yet (within a second of this broker starting to lead)
/// lists its group without members.
pub fn groups_led_here(
    state: &BrokerState,
) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let mut groups: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    for partition in state.all_partitions() {
        if state
            .led_partition(&partition.topic, partition.index)
            .is_err()
        {
            continue;
        }
        for group in store::groups_in(&*partition.storage, &partition.dir) {
            groups.entry(group).or_default();
        }
    }
    for shared in state.share.all() {
        let Some(members) = groups.get_mut(&shared.key.group) else {
            continue;
        };
        if !shared.still_led(state) {
            continue;
        }
        let share = shared.state.lock();
        for (_, record) in share.in_flight() {
            if members.len() >= answer::DESCRIBE_MEMBERS_MAX {
                break;
            }
            if let tinymq_share::RecordState::Acquired { member, .. } = &record.state {
                members.insert(member.to_string());
            }
        }
    }
    groups
}
