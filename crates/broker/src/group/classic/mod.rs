//! Kafka's classic consumer group protocol, as a mode of the broker's one group coordinator
//! ([`super::GroupCoordinator`]'s `classic_*` operations, in `super::classic_mode`): here is
//! one classic group's state machine, without I/O or clocks. Time is passed in and the
//! requests that wait (JoinGroup until the join phase ends, SyncGroup until the leader's
//! assignment arrives) are parked as opaque waiters `W`, handed back with their [`Reply`]
//! when it is due. So it is tested without sockets or sleeping. Its refusals are
//! [`ClassicError`]s, which the Kafka listener turns into Kafka's error codes.
//!
//! Phases, as Kafka's: `Empty` → (a join) `PreparingRebalance`, which waits for every known
//! member to rejoin (up to the longest rebalance timeout; a new group also waits
//! [`INITIAL_REBALANCE_DELAY`] for its other members) → `CompletingRebalance`: the generation
//! is bumped, a protocol all members support is chosen, the leader gets every member's
//! metadata and computes the assignment client-side → (the leader's SyncGroup) `Stable`.
//! A new member, a leaving or expired one, or the leader rejoining, starts over.
//!
//! - `messages`: the requests, the answers and the views of a group;
//! - this module: one group's state and its join phase;
//! - `sync`: SyncGroup, heartbeats, leaving, sessions running out, commit checks;
//! - `static_members`: static membership (`group.instance.id`);
//! - `error`: [`ClassicError`].

mod error;
mod messages;
mod static_members;
mod sync;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::coordinator::GROUP_MEMBERS_MAX;
pub use error::ClassicError;
use messages::protocol_bytes;
pub use messages::{
    ClassicDescription, ClassicMember, ClassicSummary, Deliveries, Join, Joined, JoinedMember,
    Joining, Phase, Protocol, Reply, SyncRequest, Synced, MEMBER_METADATA_BYTES_MAX,
    MEMBER_PROTOCOLS_MAX,
};

/// How long a new group's join phase waits for more members after the first, so that a
/// group whose members start together forms in one rebalance (Kafka's
/// `group.initial.rebalance.delay.ms`, shorter).
pub const INITIAL_REBALANCE_DELAY: Duration = Duration::from_millis(500);
/// Longest join phase a member may ask for (its rebalance timeout is capped to this).
pub const REBALANCE_TIMEOUT_MAX: Duration = Duration::from_secs(30 * 60);
/// Most bytes of one member's assignment in the leader's SyncGroup (a larger one is refused
/// with INVALID_REQUEST): 1000 topics of 100-byte names with 100 partitions each take
/// about 500 KB.
pub const ASSIGNMENT_BYTES_MAX: usize = 1 << 20;
/// Most bytes one group keeps: its members' protocols with their metadata, assignments, ids
/// and client strings (a join or assignment beyond it is refused with
/// GROUP_MAX_SIZE_REACHED). So the leader's JoinGroup answer, and a DescribeGroups answer,
/// for one group stay under the default `frame_bytes_max` (16 MiB). Kafka keeps a group
/// as one record bounded by `message.max.bytes` (1 MiB by default): this is generous.
pub const GROUP_BYTES_MAX: usize = 16 << 20;
/// Most bytes all classic groups of one broker keep together (what [`GROUP_BYTES_MAX`]
/// counts, over every classic group): a join or assignment beyond it is refused with
/// GROUP_MAX_SIZE_REACHED. 32 groups at their own limit, or 500 groups of 100 members
/// subscribed to 1000 topics each, fit. The coordinator keeps a running total, so checking
/// it walks no group.
pub const CLASSIC_GROUPS_BYTES_MAX: usize = 512 << 20;
/// A classic group without members is forgotten after this (its offsets stay); until then
/// Kafka's ListGroups shows it as Empty, and a native join may take its id over.
pub const VACANT_GROUP_FORGET_AFTER: Duration = Duration::from_secs(60);

/// The bytes a group may keep at most now, and the limit that says so (for the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub bytes_max: usize,
    pub limit: &'static str,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget {
            bytes_max: GROUP_BYTES_MAX,
            limit: "GROUP_BYTES_MAX",
        }
    }
}

#[derive(Debug)]
pub struct Member<W> {
    pub client_id: String,
    pub client_host: String,
    pub protocols: Vec<Protocol>,
    /// A static member's instance id.
    pub instance_id: Option<String>,
    session_timeout: Duration,
    rebalance_timeout: Duration,
    /// The member is removed when this passes without a heartbeat (unless it waits for a
    /// join or sync answer).
    deadline: Instant,
    /// What the leader assigned it in this generation.
    pub assignment: Bytes,
    join_waiter: Option<W>,
    sync_waiter: Option<W>,
}

impl<W> Member<W> {
    /// Its metadata for `protocol` (empty if it offers none by that name).
    pub fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|p| p.name == protocol)
            .map(|p| p.metadata.clone())
            .unwrap_or_default()
    }

    fn waits(&self) -> bool {
        self.join_waiter.is_some() || self.sync_waiter.is_some()
    }

    /// The bytes this member keeps, known by `id`.
    fn stored_bytes(&self, id: &str) -> usize {
        [
            id.len(),
            self.client_id.len(),
            self.client_host.len(),
            self.instance_id.as_ref().map_or(0, String::len),
            protocol_bytes(&self.protocols),
            self.assignment.len(),
        ]
        .into_iter()
        .fold(0, usize::saturating_add)
    }
}

#[derive(Debug)]
pub struct Group<W> {
    pub phase: Phase,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    pub members: BTreeMap<String, Member<W>>,
    /// Ids handed out with MEMBER_ID_REQUIRED, valid until their deadline.
    pending: BTreeMap<String, Instant>,
    /// Static members: instance id → its current member id.
    static_members: BTreeMap<String, String>,
    /// The join phase ends no earlier than this (a new group's initial delay)...
    join_ready_at: Instant,
    /// ...and no later than this (the longest rebalance timeout).
    join_deadline: Instant,
    /// When the group last became empty.
    empty_since: Instant,
    /// What its members keep ([`Member::stored_bytes`] summed), kept up to date by every
    /// change, so the coordinator's budget costs no walk over members.
    stored_bytes: usize,
    /// What it may keep at most: [`GROUP_BYTES_MAX`], less when the coordinator's budget is
    /// short (the coordinator sets it before a join or sync).
    pub budget: Budget,
}

impl<W> Group<W> {
    pub fn new(now: Instant) -> Group<W> {
        Group {
            phase: Phase::Empty,
            generation: 0,
            protocol_type: None,
            protocol_name: None,
            leader: None,
            members: BTreeMap::new(),
            pending: BTreeMap::new(),
            static_members: BTreeMap::new(),
            join_ready_at: now,
            join_deadline: now,
            empty_since: now,
            stored_bytes: 0,
            budget: Budget::default(),
        }
    }

    /// The bytes its members keep.
    pub fn stored_bytes(&self) -> usize {
        self.stored_bytes
    }

    /// Accounts a change of what one member keeps from `before` to `after` bytes.
    fn restate_bytes(&mut self, before: usize, after: usize) {
        self.stored_bytes = self
            .stored_bytes
            .saturating_sub(before)
            .saturating_add(after);
    }

    /// The bytes the group would keep after `join` (an upper bound): the member it names,
    /// if any, replaced by the join's.
    fn bytes_after_join(&self, join: &Join, fresh_member_id: &str) -> usize {
        let existing_id = if join.member_id.is_empty() {
            join.group_instance_id
                .as_ref()
                .and_then(|i| self.static_members.get(i))
        } else {
            Some(&join.member_id)
        };
        let existing = existing_id.and_then(|id| self.members.get(id).map(|m| (id, m)));
        let (before, assignment) =
            existing.map_or((0, 0), |(id, m)| (m.stored_bytes(id), m.assignment.len()));
        self.stored_bytes
            .saturating_sub(before)
            .saturating_add(join.member_bytes(fresh_member_id))
            .saturating_add(assignment)
    }

    /// No members, and none on their way (MEMBER_ID_REQUIRED).
    pub fn is_vacant(&self) -> bool {
        self.members.is_empty() && self.pending.is_empty()
    }

    /// Vacant since `idle` ago or longer: it may be forgotten (its offsets are native).
    pub fn is_forgettable(&self, now: Instant, idle: Duration) -> bool {
        self.is_vacant() && now.saturating_duration_since(self.empty_since) >= idle
    }

    /// Whether some protocol of `protocol_type` is offered by every member other than
    /// `except`, and in `offered`.
    fn supports(&self, protocol_type: &str, offered: &[Protocol], except: &str) -> bool {
        if self.members.keys().all(|id| id == except) {
            return true;
        }
        if self.protocol_type.as_deref() != Some(protocol_type) {
            return false;
        }
        offered.iter().any(|p| {
            self.members
                .iter()
                .filter(|(id, _)| id.as_str() != except)
                .all(|(_, m)| m.protocols.iter().any(|q| q.name == p.name))
        })
    }

    pub fn join(&mut self, joining: Joining, waiter: W, now: Instant) -> Deliveries<W> {
        let Joining {
            join,
            fresh_member_id,
        } = joining;
        let refuse = |error: ClassicError, waiter: W| {
            vec![(waiter, Reply::Join(Joined::error(error, &join.member_id)))]
        };
        if let Err((error, why)) = join.check() {
            tracing::info!("kafka join refused: {why}");
            return refuse(error, waiter);
        }
        if !self.supports(&join.protocol_type, &join.protocols, &join.member_id) {
            return refuse(ClassicError::InconsistentGroupProtocol, waiter);
        }
        let bytes = self.bytes_after_join(&join, &fresh_member_id);
        if bytes > self.budget.bytes_max {
            let Budget { bytes_max, limit } = self.budget;
            tracing::info!(
                "kafka join refused: the group would keep {bytes} bytes, over {limit} \
                 ({bytes_max} bytes now)"
            );
            return refuse(ClassicError::GroupMaxSizeReached, waiter);
        }
        if let Some(instance) = join.group_instance_id.clone() {
            return self.join_static(instance, join, fresh_member_id, waiter, now);
        }
        if join.member_id.is_empty() {
            if self.members.len() + self.pending.len() >= GROUP_MEMBERS_MAX {
                return refuse(ClassicError::GroupMaxSizeReached, waiter);
            }
            let id = fresh_member_id;
            if join.require_known_member_id {
                self.pending.insert(id.clone(), now + join.session_timeout);
                let answer = Joined::error(ClassicError::MemberIdRequired, &id);
                return vec![(waiter, Reply::Join(answer))];
            }
            return self.add_member(id, join, waiter, now);
        }
        if self.pending.remove(&join.member_id).is_some() {
            let id = join.member_id.clone();
            return self.add_member(id, join, waiter, now);
        }
        if !self.members.contains_key(&join.member_id) {
            return refuse(ClassicError::UnknownMemberId, waiter);
        }
        self.rejoin(join, waiter, now)
    }

    fn add_member(&mut self, id: String, join: Join, waiter: W, now: Instant) -> Deliveries<W> {
        if self.members.is_empty() {
            self.protocol_type = Some(join.protocol_type.clone());
        }
        if let Some(instance) = &join.group_instance_id {
            self.static_members.insert(instance.clone(), id.clone());
        }
        let member = Member {
            client_id: join.client_id,
            client_host: join.client_host,
            protocols: join.protocols.into_iter().map(Protocol::detached).collect(),
            instance_id: join.group_instance_id,
            session_timeout: join.session_timeout,
            rebalance_timeout: join.rebalance_timeout.min(REBALANCE_TIMEOUT_MAX),
            deadline: now + join.session_timeout,
            assignment: Bytes::new(),
            join_waiter: Some(waiter),
            sync_waiter: None,
        };
        self.restate_bytes(0, member.stored_bytes(&id));
        if let Some(replaced) = self.members.insert(id.clone(), member) {
            // Not expected (ids are fresh), but the accounting stays exact.
            self.restate_bytes(replaced.stored_bytes(&id), 0);
        }
        let mut out = Vec::new();
        if self.phase == Phase::PreparingRebalance {
            // A new group's members keep arriving: wait a little longer for the next one.
            if self.join_ready_at > now {
                self.join_ready_at = (now + INITIAL_REBALANCE_DELAY).min(self.join_deadline);
            }
        } else {
            out = self.prepare_rebalance(now);
        }
        out.extend(self.try_complete_join(now));
        out
    }

    fn rejoin(&mut self, join: Join, waiter: W, now: Instant) -> Deliveries<W> {
        let is_leader = self.leader.as_deref() == Some(join.member_id.as_str());
        let Some(member) = self.members.get_mut(&join.member_id) else {
            return Vec::new();
        };
        let before = member.stored_bytes(&join.member_id);
        let unchanged = member.protocols == join.protocols;
        member.client_id = join.client_id;
        member.client_host = join.client_host;
        if !unchanged {
            member.protocols = join.protocols.into_iter().map(Protocol::detached).collect();
        }
        member.session_timeout = join.session_timeout;
        member.rebalance_timeout = join.rebalance_timeout.min(REBALANCE_TIMEOUT_MAX);
        member.deadline = now + join.session_timeout;
        let after = member.stored_bytes(&join.member_id);
        self.restate_bytes(before, after);
        let Some(member) = self.members.get_mut(&join.member_id) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        match self.phase {
            Phase::CompletingRebalance | Phase::Stable if unchanged && !is_leader => {
                // A follower that lost our answer: the current generation again.
                let answer = self.joined(&join.member_id);
                return vec![(waiter, Reply::Join(answer))];
            }
            Phase::PreparingRebalance => {
                // A second join of the same member replaces the first (whose request is
                // answered when its waiter is dropped).
                member.join_waiter = Some(waiter);
            }
            _ => {
                member.join_waiter = Some(waiter);
                out = self.prepare_rebalance(now);
            }
        }
        out.extend(self.try_complete_join(now));
        out
    }

    /// Starts a join phase: every member must rejoin; followers waiting for their
    /// assignment are told the rebalance started.
    fn prepare_rebalance(&mut self, now: Instant) -> Deliveries<W> {
        let mut out = Vec::new();
        let mut freed = 0usize;
        for member in self.members.values_mut() {
            if let Some(waiter) = member.sync_waiter.take() {
                let answer = Synced::error(ClassicError::RebalanceInProgress);
                out.push((waiter, Reply::Sync(answer)));
            }
            freed = freed.saturating_add(member.assignment.len());
            member.assignment = Bytes::new();
        }
        self.restate_bytes(freed, 0);
        let longest = self
            .members
            .values()
            .map(|m| m.rebalance_timeout)
            .max()
            .unwrap_or_default();
        self.join_deadline = now + longest;
        self.join_ready_at = if self.phase == Phase::Empty {
            (now + INITIAL_REBALANCE_DELAY).min(self.join_deadline)
        } else {
            now
        };
        self.phase = Phase::PreparingRebalance;
        out
    }

    /// Ends the join phase if every member rejoined (after a new group's initial delay) or
    /// the rebalance timeout passed (members that did not rejoin are removed).
    fn try_complete_join(&mut self, now: Instant) -> Deliveries<W> {
        if self.phase != Phase::PreparingRebalance {
            return Vec::new();
        }
        let all_joined = self.members.values().all(|m| m.join_waiter.is_some());
        if !(all_joined && now >= self.join_ready_at) && now < self.join_deadline {
            return Vec::new();
        }
        let mut freed = 0usize;
        self.members.retain(|id, m| {
            let keep = m.join_waiter.is_some();
            if !keep {
                freed = freed.saturating_add(m.stored_bytes(id));
            }
            keep
        });
        self.restate_bytes(freed, 0);
        self.generation += 1;
        if self.members.is_empty() {
            self.become_empty(now);
            return Vec::new();
        }
        self.protocol_name = self.choose_protocol();
        if !self
            .leader
            .as_ref()
            .is_some_and(|l| self.members.contains_key(l))
        {
            self.leader = self.members.keys().next().cloned();
        }
        self.phase = Phase::CompletingRebalance;
        let ids: Vec<String> = self.members.keys().cloned().collect();
        let mut out = Vec::new();
        for id in ids {
            let answer = self.joined(&id);
            if let Some(member) = self.members.get_mut(&id) {
                member.deadline = now + member.session_timeout;
                if let Some(waiter) = member.join_waiter.take() {
                    out.push((waiter, Reply::Join(answer)));
                }
            }
        }
        out
    }

    fn become_empty(&mut self, now: Instant) {
        self.phase = Phase::Empty;
        self.protocol_type = None;
        self.protocol_name = None;
        self.leader = None;
        self.empty_since = now;
    }

    /// The protocol every member offers that most members prefer (first in their list);
    /// ties go to the leader's order of preference.
    fn choose_protocol(&self) -> Option<String> {
        let first = self.members.values().next()?;
        let common: Vec<&str> = first
            .protocols
            .iter()
            .map(|p| p.name.as_str())
            .filter(|name| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|p| p.name == *name))
            })
            .collect();
        let votes = |name: &str| {
            self.members
                .values()
                .filter(|m| {
                    m.protocols
                        .iter()
                        .find(|p| common.contains(&p.name.as_str()))
                        .is_some_and(|p| p.name == name)
                })
                .count()
        };
        let preference = self
            .leader
            .as_ref()
            .and_then(|l| self.members.get(l))
            .unwrap_or(first);
        preference
            .protocols
            .iter()
            .map(|p| p.name.as_str())
            .filter(|name| common.contains(name))
            .rev()
            .max_by_key(|name| votes(name))
            .map(str::to_string)
    }

    /// The join answer of member `id` in the current generation.
    fn joined(&self, id: &str) -> Joined {
        let leader = self.leader.clone().unwrap_or_default();
        let protocol = self.protocol_name.clone().unwrap_or_default();
        let members = if leader == id {
            self.members
                .iter()
                .map(|(id, m)| (id.clone(), m.instance_id.clone(), m.metadata(&protocol)))
                .collect()
        } else {
            Vec::new()
        };
        Joined {
            error: None,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader,
            member_id: id.to_string(),
            members,
        }
    }
}

impl<W> Group<W> {
    /// The group as ListGroups shows it, known by `id`.
    pub fn summary(&self, id: &str) -> ClassicSummary {
        ClassicSummary {
            group_id: id.to_string(),
            phase: self.phase,
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            members: u32::try_from(self.members.len()).unwrap_or(u32::MAX),
        }
    }

    /// The group as DescribeGroups shows it.
    pub fn describe(&self) -> ClassicDescription {
        let protocol = self.protocol_name.clone().unwrap_or_default();
        let members = self
            .members
            .iter()
            .map(|(id, m)| ClassicMember {
                member_id: id.clone(),
                instance_id: m.instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                metadata: m.metadata(&protocol),
                assignment: m.assignment.clone(),
            })
            .collect();
        ClassicDescription {
            phase: self.phase,
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            protocol_name: protocol,
            members,
        }
    }
}

/// Answers a departing member's waiting requests with `error`.
fn answer_waiters<W>(
    member: &mut Member<W>,
    member_id: &str,
    error: ClassicError,
) -> Deliveries<W> {
    let mut out = Vec::new();
    if let Some(waiter) = member.join_waiter.take() {
        out.push((waiter, Reply::Join(Joined::error(error, member_id))));
    }
    if let Some(waiter) = member.sync_waiter.take() {
        out.push((waiter, Reply::Sync(Synced::error(error))));
    }
    out
}

impl<W> Group<W> {
    /// What its members keep, counted afresh: what [`Group::stored_bytes`] must equal.
    #[cfg(test)]
    fn recount_bytes(&self) -> usize {
        self.members.iter().map(|(id, m)| m.stored_bytes(id)).sum()
    }
}

#[cfg(test)]
mod bytes_tests;
#[cfg(test)]
mod tests;
