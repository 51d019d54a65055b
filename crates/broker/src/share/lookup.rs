//! Finding a share group's state of a partition led here: kept in the registry, or loaded
//! from its state log (`share_partition`), whether an instance is still the live one, and
//! which share groups have state here (`groups_led_here`).

use std::sync::Arc;

use tinymq_protocol::{messages as m, ErrorCode};
use tinymq_share::SharePartition;

use super::registry::{
    storage_error, ShareKey, SharedPartition, DESCRIBE_MEMBERS_MAX, SHARE_GROUPS_PER_PARTITION_MAX,
    SHARE_PARTITIONS_PER_BROKER_MAX,
};
use super::store::{self, StateLog};
use crate::state::BrokerState;
use crate::topic::ShareSettings;

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
    let shared = Arc::new(SharedPartition::new(
        key.clone(),
        partition,
        epoch,
        share,
        log,
    ));
    kept.insert(key, shared.clone());
    Ok(Some(shared))
}

/// The share groups with state on partitions this broker leads, each with the members
/// holding records in the state loaded here (at most `DESCRIBE_MEMBERS_MAX` per
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
            if members.len() >= DESCRIBE_MEMBERS_MAX {
                break;
            }
            if let tinymq_share::RecordState::Acquired { member, .. } = &record.state {
                members.insert(member.to_string());
            }
        }
    }
    groups
}
