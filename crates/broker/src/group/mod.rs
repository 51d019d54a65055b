//! Consumer groups: the coordinator (membership, server-side assignment, generations) and the
//! committed offsets, behind one thread-safe [`GroupCoordinator`]. It does no I/O: commits
//! are appended to the replicated offsets partitions by `crate::offsets_partitions`, which
//! also loads and drops the groups of each offsets partition as its leadership moves.

pub mod assignment;
pub mod coordinator;
pub mod offsets;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tinymq_protocol::{messages as m, ErrorCode};

use assignment::{Strategy, Tp};
use coordinator::{Group, GroupError};
use offsets::{partition_for_group, Change, Committed, OffsetStore};

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
/// Groups with members one broker coordinates at most, over both group protocols (native
/// groups with members, and the groups Kafka's classic protocol holds here); a join that would
/// start another is refused with `LIMIT_EXCEEDED`. (A group without members takes no memory
/// here: it is dropped, and only its committed offsets stay.)
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
    groups: Mutex<HashMap<String, Group>>,
    /// The committed offsets of the offsets partitions led here. A group with committed
    /// offsets that gets its first member within a session of its partition's load grants
    /// nothing until that session has passed ([`Group::hold_until`]): members of the previous
    /// coordinator may still be reading.
    pub offsets: OffsetStore,
    /// Groups whose members speak another protocol (Kafka's classic group protocol, whose
    /// membership tinymq-kafka keeps): one namespace of group ids, so a native join of one of
    /// these is refused, and so is its native deletion, while the other protocol holds it.
    /// Claimed and released by that protocol ([`GroupCoordinator::claim_for_other_protocol`]);
    /// at most [`GROUPS_MAX`] entries.
    held_by_other_protocol: Mutex<HashSet<String>>,
    /// Lists the groups that other protocol keeps here (set by its listener), for ListGroups.
    other_protocol_lister: OtherProtocolLister,
}

/// A group another protocol's coordinator keeps on this broker, as ListGroups shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtherProtocolGroup {
    pub group_id: String,
    /// "empty", "stable" or "rebalancing" (the native names).
    pub state: String,
    pub members: u32,
}

/// What lists another protocol's groups: a closure the listener registers (it keeps only a
/// weak reference to its own state, so a stopped listener lists nothing).
pub type ListOtherProtocolGroups = dyn Fn() -> Vec<OtherProtocolGroup> + Send + Sync;

#[derive(Default)]
struct OtherProtocolLister(Mutex<Option<std::sync::Arc<ListOtherProtocolGroups>>>);

impl std::fmt::Debug for OtherProtocolLister {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = self.0.lock().is_some();
        f.debug_struct("OtherProtocolLister")
            .field("set", &set)
            .finish()
    }
}

impl GroupCoordinator {
    /// Marks `group` as held by another protocol's members (the caller has members of its
    /// own for it): refused while the group has native members. Lock order: groups, then
    /// the held set (as [`GroupCoordinator::join`]), so a native join and a claim cannot both
    /// succeed.
    pub fn claim_for_other_protocol(&self, group: &str) -> Result<(), GroupError> {
        let groups = self.groups.lock();
        if groups.get(group).is_some_and(|g| !g.is_empty()) {
            return Err((
                ErrorCode::GROUP_NOT_EMPTY,
                format!("group {group} has native members"),
            ));
        }
        let mut held = self.held_by_other_protocol.lock();
        if !held.contains(group) && groups.len() + held.len() >= GROUPS_MAX {
            return Err((
                ErrorCode::LIMIT_EXCEEDED,
                format!("this broker coordinates {GROUPS_MAX} groups with members already"),
            ));
        }
        held.insert(group.to_string());
        Ok(())
    }

    /// The other protocol has no members left in `group`.
    pub fn release_other_protocol(&self, group: &str) {
        self.held_by_other_protocol.lock().remove(group);
    }

    /// Registers what lists the other protocol's groups (a later listener replaces it).
    pub fn set_other_protocol_lister(&self, lister: std::sync::Arc<ListOtherProtocolGroups>) {
        *self.other_protocol_lister.0.lock() = Some(lister);
    }

    /// The groups the other protocol keeps here (none when no listener registered). The
    /// lister runs outside this coordinator's locks.
    pub fn other_protocol_groups(&self) -> Vec<OtherProtocolGroup> {
        let lister = self.other_protocol_lister.0.lock().clone();
        lister.map_or_else(Vec::new, |list| list())
    }

    /// Whether another protocol's members hold `group`.
    pub fn is_held_by_other_protocol(&self, group: &str) -> bool {
        self.held_by_other_protocol.lock().contains(group)
    }

    fn refuse_if_held(&self, group: &str) -> Result<(), GroupError> {
        if self.is_held_by_other_protocol(group) {
            return Err((
                ErrorCode::GROUP_NOT_EMPTY,
                format!(
                    "group {group} has members speaking Kafka's group protocol; a group's \
                     members must all speak one protocol"
                ),
            ));
        }
        Ok(())
    }

    /// This broker no longer coordinates the groups of offsets partition `partition` (or
    /// starts over with them in a new leader epoch): drops their members and offsets.
    pub fn drop_partition(&self, partition: u32) {
        self.groups
            .lock()
            .retain(|name, _| partition_for_group(name) != partition);
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
        let mut groups = self.groups.lock();
        self.refuse_if_held(&req.group_id)?;
        let held = self.held_by_other_protocol.lock().len();
        if !groups.contains_key(&req.group_id) && groups.len() + held >= GROUPS_MAX {
            return Err((
                ErrorCode::LIMIT_EXCEEDED,
                format!("this broker coordinates {GROUPS_MAX} groups with members already"),
            ));
        }
        let now = Instant::now();
        let group = groups.entry(req.group_id.clone()).or_insert_with(|| {
            let mut group = Group::new(strategy);
            // Members of the previous coordinator may still read for a session (at most
            // HOLD_AFTER_LOAD_MAX: a joiner asking for a 30-minute session does not stall
            // its group that long after a coordinator moves).
            let loaded = self.offsets.loaded_at(partition_for_group(&req.group_id));
            let hold = loaded.unwrap_or(now) + session.min(HOLD_AFTER_LOAD_MAX);
            if now < hold && self.offsets.has_offsets(&req.group_id) {
                group.hold_until(hold);
            }
            group
        });
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

    pub fn heartbeat(
        &self,
        req: &m::HeartbeatRequest,
        count: &dyn Fn(&str) -> Option<u32>,
    ) -> Result<m::HeartbeatResponse, GroupError> {
        let mut groups = self.groups.lock();
        let group = groups.get_mut(&req.group_id).ok_or_else(|| {
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
            .get_mut(&req.group_id)
            .ok_or_else(|| (ErrorCode::UNKNOWN_MEMBER_ID, "no such group".to_string()))?;
        group.leave(&req.member_id, count)?;
        if group.is_empty() {
            groups.remove(&req.group_id);
        }
        tracing::info!(group = %req.group_id, member = %req.member_id, "member left");
        Ok(())
    }

    /// Removes members whose sessions expired, in every group (called on a timer), and drops
    /// groups left without members (their committed offsets stay).
    pub fn expire(&self, count: &dyn Fn(&str) -> Option<u32>) {
        let now = Instant::now();
        let mut groups = self.groups.lock();
        for (name, group) in groups.iter_mut() {
            for member in group.expire(now, count) {
                tracing::info!(group = %name, %member, "member session expired");
            }
        }
        groups.retain(|_, group| !group.is_empty());
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
        if let Some(group) = self.groups.lock().get(&req.group_id) {
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
        let mut names: BTreeSet<String> = self
            .groups
            .lock()
            .iter()
            .filter(|(_, g)| !g.is_empty())
            .map(|(n, _)| n.clone())
            .collect();
        names.extend(self.offsets.groups());
        names.into_iter().collect()
    }

    pub fn describe(&self, group_id: &str) -> Option<m::DescribeGroupResponse> {
        let groups = self.groups.lock();
        let group = groups.get(group_id).filter(|g| !g.is_empty());
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

    /// Deletes a group without members, returning the tombstones of its offsets to append.
    pub fn prepare_delete(&self, group_id: &str) -> Result<Vec<Change>, GroupError> {
        let mut groups = self.groups.lock();
        self.refuse_if_held(group_id)?;
        if groups.get(group_id).is_some_and(|g| !g.is_empty()) {
            return Err((
                ErrorCode::GROUP_NOT_EMPTY,
                format!("group {group_id} has active members"),
            ));
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
            .filter(|group| self.groups.lock().get(group).is_none_or(Group::is_empty))
            .filter(|group| !self.is_held_by_other_protocol(group))
            .map(|group| {
                let tombstones = self.tombstones(&group);
                (group, tombstones)
            })
            .filter(|(_, tombstones)| !tombstones.is_empty())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none(_: &str) -> Option<u32> {
        None
    }

    /// A coordinator leading (in epoch 1, loaded, empty) every offsets partition.
    fn leading_everything() -> GroupCoordinator {
        let coordinator = GroupCoordinator::default();
        for p in 0..offsets::OFFSETS_PARTITIONS {
            coordinator.offsets.begin_load(p, 1);
            coordinator
                .offsets
                .finish_load(p, 1, offsets::LoadedOffsets::new());
        }
        coordinator
    }

    /// Appends `changes` as if written at the next offset and replicated at once.
    fn append_replicated(coordinator: &GroupCoordinator, group: &str, changes: Vec<Change>) {
        static END: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
        let end = END.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        coordinator
            .offsets
            .append(group, 1, changes, || Ok(((), end)))
            .unwrap();
        coordinator
            .offsets
            .apply_up_to(partition_for_group(group), 1, end);
    }

    #[test]
    fn offsets_of_empty_groups_expire_but_not_of_groups_with_members() {
        let coordinator = leading_everything();
        let commit = |group: &str, member: &str, generation: u32| m::OffsetCommitRequest {
            group_id: group.into(),
            member_id: member.into(),
            generation,
            offsets: vec![m::CommittedOffset {
                topic: "t".into(),
                partition: 0,
                offset: 3,
                metadata: String::new(),
                error: None,
            }],
        };
        let topic_t = |t: &str| (t == "t").then_some(1);
        let changes = coordinator
            .prepare_commit(&commit("idle", "", 0), &topic_t)
            .unwrap();
        append_replicated(&coordinator, "idle", changes);
        let join = coordinator
            .join(
                &m::JoinGroupRequest {
                    group_id: "busy".into(),
                    topics: vec!["t".into()],
                    session_timeout_ms: 10_000,
                    client_id: "c".into(),
                    ..Default::default()
                },
                &none,
            )
            .unwrap();
        let changes = coordinator
            .prepare_commit(&commit("busy", &join.member_id, join.generation), &topic_t)
            .unwrap();
        append_replicated(&coordinator, "busy", changes);
        std::thread::sleep(Duration::from_millis(5));
        let expired = coordinator.expired_offsets(Duration::ZERO);
        assert_eq!(
            expired,
            vec![("idle".to_string(), vec![(("t".to_string(), 0), None)])],
            "an empty group's offsets expire, a group with members keeps them"
        );
        for (group, tombstones) in expired {
            append_replicated(&coordinator, &group, tombstones);
        }
        assert!(coordinator.committed("idle").is_empty());
        assert_eq!(coordinator.committed("busy").len(), 1);
        assert_eq!(coordinator.list(), vec!["busy".to_string()]);
        assert_eq!(
            validate_group_id("bad/id").unwrap_err().0,
            ErrorCode::INVALID_GROUP_ID
        );
    }

    #[test]
    fn losing_an_offsets_partition_drops_its_groups_members_and_offsets() {
        let coordinator = leading_everything();
        let join = |group: &str| {
            coordinator
                .join(
                    &m::JoinGroupRequest {
                        group_id: group.into(),
                        topics: vec!["t".into()],
                        session_timeout_ms: 10_000,
                        client_id: "c".into(),
                        ..Default::default()
                    },
                    &none,
                )
                .unwrap()
        };
        let a = "a";
        let b = ["b", "c", "d", "e", "f", "g"]
            .into_iter()
            .find(|b| partition_for_group(b) != partition_for_group(a))
            .unwrap();
        join(a);
        join(b);
        let committed = Some(Committed {
            offset: 1,
            metadata: String::new(),
        });
        append_replicated(&coordinator, a, vec![(("t".into(), 0), committed)]);
        coordinator.drop_partition(partition_for_group(a));
        assert!(
            coordinator.describe(a).is_none(),
            "members and offsets are gone"
        );
        assert!(coordinator.describe(b).is_some());
        assert_eq!(coordinator.list(), vec![b.to_string()]);
    }

    #[test]
    fn a_group_held_by_another_protocol_refuses_native_joins_and_deletion() {
        let coordinator = leading_everything();
        let join = |group: &str| {
            coordinator.join(
                &m::JoinGroupRequest {
                    group_id: group.into(),
                    topics: vec!["t".into()],
                    session_timeout_ms: 10_000,
                    client_id: "c".into(),
                    ..Default::default()
                },
                &none,
            )
        };
        coordinator.claim_for_other_protocol("k").unwrap();
        assert_eq!(join("k").unwrap_err().0, ErrorCode::GROUP_NOT_EMPTY);
        assert_eq!(
            coordinator.prepare_delete("k").unwrap_err().0,
            ErrorCode::GROUP_NOT_EMPTY
        );
        coordinator.release_other_protocol("k");
        join("k").unwrap();
        assert_eq!(
            coordinator.claim_for_other_protocol("k").unwrap_err().0,
            ErrorCode::GROUP_NOT_EMPTY,
            "a group with native members cannot be claimed"
        );
    }

    #[test]
    fn groups_of_both_protocols_count_against_one_bound() {
        let coordinator = leading_everything();
        let join = |group: &str| {
            let request = m::JoinGroupRequest {
                group_id: group.into(),
                topics: vec!["t".into()],
                session_timeout_ms: 10_000,
                client_id: "c".into(),
                ..Default::default()
            };
            coordinator.join(&request, &none)
        };
        join("native").unwrap();
        for i in 0..GROUPS_MAX - 1 {
            coordinator
                .claim_for_other_protocol(&format!("kafka-{i}"))
                .unwrap();
        }
        let refused = join("one-more-native").unwrap_err();
        assert_eq!(refused.0, ErrorCode::LIMIT_EXCEEDED, "{}", refused.1);
        let refused = coordinator
            .claim_for_other_protocol("one-more-kafka")
            .unwrap_err();
        assert_eq!(refused.0, ErrorCode::LIMIT_EXCEEDED, "{}", refused.1);
        // Groups already counted keep working.
        join("native").unwrap();
        coordinator.claim_for_other_protocol("kafka-0").unwrap();
        coordinator.release_other_protocol("kafka-0");
        join("one-more-native").unwrap();
    }

    #[test]
    fn session_timeouts_up_to_kafkas_maximum_are_taken_natively() {
        let coordinator = leading_everything();
        let join = |session_timeout_ms: u32| {
            let request = m::JoinGroupRequest {
                group_id: "g".into(),
                topics: vec!["t".into()],
                session_timeout_ms,
                client_id: "c".into(),
                ..Default::default()
            };
            coordinator.join(&request, &none)
        };
        join(30 * 60 * 1000).unwrap();
        let refused = join(30 * 60 * 1000 + 1).unwrap_err();
        assert_eq!(refused.0, ErrorCode::INVALID_REQUEST, "{}", refused.1);
    }
}
