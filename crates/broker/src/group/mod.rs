//! Consumer groups: the one coordinator of this broker's groups and their committed
//! offsets, behind one thread-safe [`GroupCoordinator`]. A group's members speak one of two
//! protocols, and the coordinator has a mode for each over one map of groups
//! (`table`): native groups (membership, server-side assignment, generations; in
//! `coordinator` and this module) and Kafka's classic groups (client-side assignment; the
//! state machine in `classic`, the coordinator's `classic_*` operations in `classic_mode`).
//! So one set of limits bounds both: [`GROUPS_MAX`], the members per group and the session
//! timeouts of `coordinator`. It does no I/O: commits are appended to the replicated offsets
//! partitions by `crate::offsets_partitions`, which also loads and drops the groups of each
//! offsets partition as its leadership moves; the broker's group timer
//! (`crate::server`) calls [`GroupCoordinator::expire`] and
//! [`GroupCoordinator::classic_tick`].

pub mod assignment;
pub mod classic;
mod classic_mode;
pub mod coordinator;
mod member_ids;
pub mod offsets;
mod table;
pub mod txn_offsets;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tinymq_protocol::{messages as m, ErrorCode};

use assignment::{Strategy, Tp};
use coordinator::{Group, GroupError};
use member_ids::MemberIds;
use offsets::{partition_for_group, Change, Committed, OffsetStore};
use table::{Entry, Groups};

/// One partition of a request and the error that refused it, if any.
pub type PartitionOutcome = (Tp, Option<GroupError>);

pub use tinymq_protocol::names::GROUP_ID_BYTES_MAX;
/// Offsets of a group without members are deleted this long after its last commit.
pub const OFFSETS_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// Members are asked to heartbeat this often relative to their session timeout...
const HEARTBEATS_PER_SESSION: u32 = 3;
/// ...but at least this often, because a member learns that it must release partitions only
/// from a heartbeat: this bounds how long a rebalance takes.
pub const HEARTBEAT_INTERVAL_MAX: Duration = Duration::from_millis(500);
/// How soon a member whose partitions are moving is asked to heartbeat again.
pub const HEARTBEAT_INTERVAL_MOVING: Duration = Duration::from_millis(100);

fn heartbeat_interval_ms(session: Duration, moving: bool) -> u32 {
    let interval = if moving {
        HEARTBEAT_INTERVAL_MOVING
    } else {
        (session / HEARTBEATS_PER_SESSION).min(HEARTBEAT_INTERVAL_MAX)
    };
    interval.as_millis() as u32
}
/// Longest a new coordinator holds back assignments of a group with committed offsets after
/// loading them, for members of the previous coordinator still reading: the session the
/// first joiner asks for, up to this (the longest native session before sessions reached
/// Kafka's 30 minutes).
pub const HOLD_AFTER_LOAD_MAX: Duration = Duration::from_secs(300);
/// Groups one broker coordinates at most, over both group protocols (native groups with
/// members, and classic groups with members or vacant for up to
/// [`classic::VACANT_GROUP_FORGET_AFTER`]): a join that would start another is refused
/// (native: `LIMIT_EXCEEDED`; classic: GROUP_MAX_SIZE_REACHED). (A native group without
/// members takes no memory here: it is dropped, and only its committed offsets stay.)
pub const GROUPS_MAX: usize = 100_000;
/// Most topics one member may subscribe to.
pub const MEMBER_TOPICS_MAX: usize = 10_000;
/// Most offsets one commit may carry.
pub const COMMIT_OFFSETS_MAX: usize = 1_000;
/// Memory the committed offsets of one broker may take, over all groups (counted by
/// [`offsets::entry_bytes`]: names, metadata and a fixed cost per entry); a commit that would
/// take more is refused with `LIMIT_EXCEEDED` (offsets of groups empty for 7 days expire and
/// make room). About a million offsets with short metadata.
pub const COMMITTED_OFFSETS_BYTES_MAX: usize = 256 << 20;
/// `GroupListing.group_type`'s values in the native ListGroups (docs/protocol.md): native
/// consumer groups, classic (Kafka-protocol) groups, share groups.
pub const GROUP_TYPE_CONSUMER: &str = "consumer";
pub const GROUP_TYPE_KAFKA: &str = "kafka";
pub const GROUP_TYPE_SHARE: &str = "share";
/// Longest metadata string stored with a committed offset (Kafka's
/// `offset.metadata.max.bytes`).
pub const OFFSET_METADATA_BYTES_MAX: usize = 4096;

/// A group id ([`tinymq_protocol::names::validate_group_id`]), refused with its wire code
/// (`INVALID_GROUP_ID`).
pub fn validate_group_id(group: &str) -> Result<(), GroupError> {
    tinymq_protocol::names::validate_group_id(group).map_err(|e| (e.error_code(), e.to_string()))
}

pub fn to_wire(set: &BTreeSet<Tp>) -> Vec<m::TopicPartitions> {
    let mut by_topic: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for (t, p) in set {
        by_topic.entry(t).or_default().push(*p);
    }
    by_topic
        .into_iter()
        .map(|(topic, partitions)| m::TopicPartitions {
            topic: topic.into(),
            partitions,
        })
        .collect()
}

pub fn from_wire(list: &[m::TopicPartitions]) -> BTreeSet<Tp> {
    list.iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.topic.clone(), *p)))
        .collect()
}

/// Refuses a commit of too many offsets, of partitions that do not exist, of a negative
/// offset (other than -1, "none") or of oversized metadata: each would be kept in memory and
/// in the offsets log.
fn check_commit_offsets(
    offsets: &[m::CommittedOffset],
    count: &dyn Fn(&str) -> Option<u32>,
) -> Result<(), GroupError> {
    if offsets.len() > COMMIT_OFFSETS_MAX {
        return Err((
            ErrorCode::INVALID_REQUEST,
            format!(
                "{} offsets in one commit; at most {COMMIT_OFFSETS_MAX}",
                offsets.len()
            ),
        ));
    }
    for o in offsets {
        if count(&o.topic).is_none_or(|n| o.partition >= n) {
            return Err((
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                format!(
                    "cannot commit an offset for unknown partition {}/{}",
                    o.topic, o.partition
                ),
            ));
        }
        if o.metadata.len() > OFFSET_METADATA_BYTES_MAX {
            return Err((
                ErrorCode::MESSAGE_TOO_LARGE,
                format!(
                    "offset metadata of {} bytes for {}/{}; at most {OFFSET_METADATA_BYTES_MAX}",
                    o.metadata.len(),
                    o.topic,
                    o.partition
                ),
            ));
        }
        if o.offset < -1 {
            return Err((
                ErrorCode::INVALID_REQUEST,
                format!(
                    "offset {} for {}/{} is negative",
                    o.offset, o.topic, o.partition
                ),
            ));
        }
    }
    Ok(())
}

/// Every group this broker coordinates and their offsets.
#[derive(Debug, Default)]
pub struct GroupCoordinator {
    /// Native and classic groups, one namespace of ids.
    groups: Mutex<Groups>,
    /// The committed offsets of the offsets partitions led here, one set per group whatever
    /// protocol its members speak. A group with committed offsets that gets its first
    /// native member within a session of its partition's load grants nothing until that
    /// session has passed ([`Group::hold_until`]): members of the previous coordinator may
    /// still be reading.
    pub offsets: OffsetStore,
    /// The ids new classic members get.
    member_ids: MemberIds,
}

/// Why a native request is refused while a group's members speak Kafka's protocol.
fn held_by_classic(group: &str) -> GroupError {
    (
        ErrorCode::GROUP_NOT_EMPTY,
        format!(
            "group {group} has members speaking Kafka's group protocol; a group's members \
             must all speak one protocol"
        ),
    )
}

impl GroupCoordinator {
    /// This broker no longer coordinates the groups of offsets partition `partition` (or
    /// starts over with them in a new leader epoch): drops their members and offsets. The
    /// requests classic members park are answered NOT_COORDINATOR, so that they look for
    /// the new coordinator.
    pub fn drop_partition(&self, partition: u32) {
        let mut out = Vec::new();
        self.groups.lock().retain(|name, entry| {
            let keep = partition_for_group(name) != partition;
            if let (false, Entry::Classic(group)) = (keep, entry) {
                out.extend(group.abandon(classic::ClassicError::NotCoordinator));
            }
            keep
        });
        table::deliver(out);
        self.offsets.drop_partition(partition);
    }

    pub fn join(
        &self,
        req: &m::JoinGroupRequest,
        count: &dyn Fn(&str) -> Option<u32>,
    ) -> Result<m::JoinGroupResponse, GroupError> {
        validate_group_id(&req.group_id)?;
        let strategy = Strategy::parse(&req.strategy).ok_or_else(|| {
            (
                ErrorCode::INVALID_REQUEST,
                format!(
                    "unknown strategy {:?}: range, roundrobin or sticky",
                    req.strategy
                ),
            )
        })?;
        if let Some(bad) = req
            .topics
            .iter()
            .find(|t| crate::topic::validate_topic_name(t).is_err())
        {
            return Err((
                ErrorCode::INVALID_TOPIC,
                format!("cannot subscribe to {bad:?}: not a valid topic name"),
            ));
        }
        if req.topics.len() > MEMBER_TOPICS_MAX {
            return Err((
                ErrorCode::INVALID_REQUEST,
                format!(
                    "{} topics in one subscription; at most {MEMBER_TOPICS_MAX}",
                    req.topics.len()
                ),
            ));
        }
        let session = Duration::from_millis(u64::from(req.session_timeout_ms));
        let now = Instant::now();
        let mut groups = self.groups.lock();
        let group = self.native_for_join(&mut groups, &req.group_id, strategy, session, now)?;
        let topics = req.topics.iter().cloned().collect();
        let (member_id, grant) =
            group.join(&req.member_id, &req.client_id, topics, session, now, count)?;
        tracing::info!(group = %req.group_id, member = %member_id, generation = grant.generation, "member joined");
        Ok(m::JoinGroupResponse {
            error: None,
            member_id,
            generation: grant.generation,
            assignment: to_wire(&grant.partitions),
            heartbeat_interval_ms: heartbeat_interval_ms(session, grant.moving),
        })
    }

    /// The native group `group_id` a join goes to, created (bounded by [`GROUPS_MAX`]) if
    /// need be. A classic group with members refuses it; a vacant one (kept only to be
    /// listed a while) gives way.
    fn native_for_join<'g>(
        &self,
        groups: &'g mut Groups,
        group_id: &str,
        strategy: Strategy,
        session: Duration,
        now: Instant,
    ) -> Result<&'g mut Group, GroupError> {
        match groups.classic(group_id) {
            Some(classic) if !classic.is_vacant() => return Err(held_by_classic(group_id)),
            Some(_) => {
                groups.remove(group_id);
            }
            None => {}
        }
        if !groups.contains(group_id) {
            if groups.len() >= GROUPS_MAX {
                return Err((
                    ErrorCode::LIMIT_EXCEEDED,
                    format!("this broker coordinates {GROUPS_MAX} groups already"),
                ));
            }
            let mut group = Group::new(strategy);
            // Members of the previous coordinator may still read for a session (at most
            // HOLD_AFTER_LOAD_MAX: a joiner asking for a 30-minute session does not stall
            // its group that long after a coordinator moves).
            let loaded = self.offsets.loaded_at(partition_for_group(group_id));
            let hold = loaded.unwrap_or(now) + session.min(HOLD_AFTER_LOAD_MAX);
            if now < hold && self.offsets.has_offsets(group_id) {
                group.hold_until(hold);
            }
            groups.insert(group_id.to_string(), Entry::Native(group));
        }
        groups.native_mut(group_id).ok_or_else(|| {
            // Not reached: the entry is native, or was just made so.
            (
                ErrorCode::UNKNOWN_SERVER_ERROR,
                format!("group {group_id} vanished"),
            )
        })
    }

    pub fn heartbeat(
        &self,
        req: &m::HeartbeatRequest,
        count: &dyn Fn(&str) -> Option<u32>,
    ) -> Result<m::HeartbeatResponse, GroupError> {
        let mut groups = self.groups.lock();
        // A classic group's id too: no native member there.
        let group = groups.native_mut(&req.group_id).ok_or_else(|| {
            (
                ErrorCode::UNKNOWN_MEMBER_ID,
                format!("group {} has no members; join again", req.group_id),
            )
        })?;
        let grant =
            group.heartbeat(&req.member_id, from_wire(&req.owned), Instant::now(), count)?;
        let session = group.session_timeout(&req.member_id);
        Ok(m::HeartbeatResponse {
            error: None,
            generation: grant.generation,
            assignment: to_wire(&grant.partitions),
            heartbeat_interval_ms: heartbeat_interval_ms(session, grant.moving),
        })
    }

    pub fn leave(
        &self,
        req: &m::LeaveGroupRequest,
        count: &dyn Fn(&str) -> Option<u32>,
    ) -> Result<(), GroupError> {
        let mut groups = self.groups.lock();
        let group = groups
            .native_mut(&req.group_id)
            .ok_or_else(|| (ErrorCode::UNKNOWN_MEMBER_ID, "no such group".to_string()))?;
        group.leave(&req.member_id, count)?;
        if group.is_empty() {
            groups.remove(&req.group_id);
        }
        tracing::info!(group = %req.group_id, member = %req.member_id, "member left");
        Ok(())
    }

    /// Removes native members whose sessions expired, in every native group (called on a
    /// timer), and drops native groups left without members (their committed offsets stay).
    /// Classic groups have their own tick ([`GroupCoordinator::classic_tick`]).
    pub fn expire(&self, count: &dyn Fn(&str) -> Option<u32>) {
        let now = Instant::now();
        let mut groups = self.groups.lock();
        for (name, group) in groups.natives_mut() {
            for member in group.expire(now, count) {
                tracing::info!(group = %name, %member, "member session expired");
            }
        }
        groups.retain(|_, entry| !matches!(entry, Entry::Native(group) if group.is_empty()));
    }

    /// Checks the committer and the offsets (existing partitions, bounded metadata, the
    /// memory they would take) and returns the changes to append to the offsets partition.
    pub fn prepare_commit(
        &self,
        req: &m::OffsetCommitRequest,
        count: &dyn Fn(&str) -> Option<u32>,
    ) -> Result<Vec<Change>, GroupError> {
        validate_group_id(&req.group_id)?;
        check_commit_offsets(&req.offsets, count)?;
        // A classic group's members commit through the Kafka listener, which checks them
        // ([`GroupCoordinator::classic_check_commit`]) and commits as an administrator
        // (member "", as for a group without members).
        if let Some(group) = self.groups.lock().native(&req.group_id) {
            group.check_commit(&req.member_id, req.generation)?;
        } else if !req.member_id.is_empty() {
            return Err((
                ErrorCode::UNKNOWN_MEMBER_ID,
                format!("{} is not in group {}", req.member_id, req.group_id),
            ));
        }
        let offsets: Vec<Change> = req
            .offsets
            .iter()
            .map(|o| {
                (
                    (o.topic.clone(), o.partition),
                    Some(Committed {
                        offset: o.offset,
                        metadata: o.metadata.clone(),
                    }),
                )
            })
            .collect();
        let (stored, growth) = self.offsets.growth(&req.group_id, &offsets);
        if growth > 0 && stored.saturating_add(growth) > COMMITTED_OFFSETS_BYTES_MAX {
            return Err((
                ErrorCode::LIMIT_EXCEEDED,
                format!(
                    "this broker's committed offsets take {stored} bytes; at most \
                     {COMMITTED_OFFSETS_BYTES_MAX}"
                ),
            ));
        }
        Ok(offsets)
    }

    pub fn committed(&self, group: &str) -> BTreeMap<Tp, Committed> {
        self.offsets.all(group)
    }

    pub fn list(&self) -> Vec<String> {
        // Classic groups are listed apart ([`GroupCoordinator::classic_groups`]), and here
        // by their offsets only.
        let mut names: BTreeSet<String> = self
            .groups
            .lock()
            .natives()
            .filter(|(_, g)| !g.is_empty())
            .map(|(n, _)| n.clone())
            .collect();
        names.extend(self.offsets.groups());
        names.into_iter().collect()
    }

    /// The native view of a group: a classic group's members are not shown (Kafka's
    /// DescribeGroups shows them: [`GroupCoordinator::classic_describe`]), its offsets are.
    pub fn describe(&self, group_id: &str) -> Option<m::DescribeGroupResponse> {
        let groups = self.groups.lock();
        let group = groups.native(group_id).filter(|g| !g.is_empty());
        let offsets = self.offsets.all(group_id);
        if group.is_none() && offsets.is_empty() {
            return None;
        }
        let members = group.map_or_else(Vec::new, |g| {
            g.members
                .iter()
                .map(|(id, member)| m::GroupMember {
                    member_id: id.clone(),
                    client_id: member.client_id.clone(),
                    assignment: to_wire(&member.owned),
                    topics: member.topics.iter().cloned().collect(),
                })
                .collect()
        });
        Some(m::DescribeGroupResponse {
            error: None,
            group_id: group_id.into(),
            state: group.map_or("empty", Group::state).into(),
            generation: group.map_or(0, |g| g.generation),
            strategy: group.map_or("", |g| g.strategy.name()).into(),
            members,
            offsets: offsets.into_iter().map(|(tp, c)| c.to_wire(tp)).collect(),
        })
    }

    /// Deletes a group without members (of either protocol), returning the tombstones of
    /// its offsets to append.
    pub fn prepare_delete(&self, group_id: &str) -> Result<Vec<Change>, GroupError> {
        let mut groups = self.groups.lock();
        match groups.get(group_id) {
            Some(Entry::Classic(g)) if !g.is_vacant() => return Err(held_by_classic(group_id)),
            Some(Entry::Native(g)) if !g.is_empty() => {
                return Err((
                    ErrorCode::GROUP_NOT_EMPTY,
                    format!("group {group_id} has active members"),
                ))
            }
            _ => {}
        }
        let had_group = groups.remove(group_id).is_some();
        drop(groups);
        let tombstones = self.tombstones(group_id);
        if !had_group && tombstones.is_empty() {
            return Err((
                ErrorCode::GROUP_ID_NOT_FOUND,
                format!("unknown group {group_id}"),
            ));
        }
        Ok(tombstones)
    }

    /// Deletes the committed offsets of `partitions` and keeps the group (Kafka's
    /// OffsetDelete): the tombstones to append, and each partition asked with the error that
    /// refused it. A partition is refused while a live member consumes its topic: a native
    /// member subscribed to it, or any member of a classic group (whose subscriptions are the
    /// clients' own bytes, not read here). A partition without an offset needs no tombstone.
    pub fn prepare_delete_offsets(
        &self,
        group_id: &str,
        partitions: &BTreeSet<Tp>,
    ) -> Result<(Vec<Change>, Vec<PartitionOutcome>), GroupError> {
        let consumed: Option<BTreeSet<String>> = match self.groups.lock().get(group_id) {
            Some(Entry::Native(g)) => Some(
                g.members
                    .values()
                    .flat_map(|member| member.topics.iter().cloned())
                    .collect(),
            ),
            Some(Entry::Classic(g)) if !g.is_vacant() => None,
            _ => Some(BTreeSet::new()),
        };
        let committed = self.offsets.all(group_id);
        if committed.is_empty() && !self.groups.lock().contains(group_id) {
            return Err((
                ErrorCode::GROUP_ID_NOT_FOUND,
                format!("unknown group {group_id}"),
            ));
        }
        let mut tombstones = Vec::new();
        let mut outcomes = Vec::with_capacity(partitions.len());
        for tp in partitions {
            let subscribed = consumed
                .as_ref()
                .is_none_or(|topics| topics.contains(&tp.0));
            if subscribed {
                let why = match consumed {
                    None => {
                        format!("group {group_id} has live members of Kafka's classic protocol")
                    }
                    Some(_) => format!("a live member of group {group_id} consumes topic {}", tp.0),
                };
                outcomes.push((
                    tp.clone(),
                    Some((ErrorCode::GROUP_SUBSCRIBED_TO_TOPIC, why)),
                ));
                continue;
            }
            if committed.contains_key(tp) {
                tombstones.push((tp.clone(), None));
            }
            outcomes.push((tp.clone(), None));
        }
        Ok((tombstones, outcomes))
    }

    fn tombstones(&self, group_id: &str) -> Vec<Change> {
        self.offsets
            .all(group_id)
            .into_keys()
            .map(|tp| (tp, None))
            .collect()
    }

    /// The groups that have had no members and no commit for `retention`, with the
    /// tombstones that delete their offsets.
    pub fn expired_offsets(&self, retention: Duration) -> Vec<(String, Vec<Change>)> {
        self.offsets
            .idle_groups(retention)
            .into_iter()
            .filter(|group| {
                !self
                    .groups
                    .lock()
                    .get(group)
                    .is_some_and(Entry::has_members)
            })
            .map(|group| {
                let tombstones = self.tombstones(&group);
                (group, tombstones)
            })
            .filter(|(_, tombstones)| !tombstones.is_empty())
            .collect()
    }
}

#[cfg(test)]
mod tests;
