//! One Kafka classic consumer group's state machine, without I/O or clocks: time is passed
//! in and the requests that wait (JoinGroup until the join phase ends, SyncGroup until the
//! leader's assignment arrives) are parked as opaque waiters `W`, handed back with their
//! [`Reply`] when it is due. So it is tested without sockets or sleeping.
//!
//! Phases, as Kafka's: `Empty` → (a join) `PreparingRebalance`, which waits for every known
//! member to rejoin (up to the longest rebalance timeout; a new group also waits
//! [`INITIAL_REBALANCE_DELAY`] for its other members) → `CompletingRebalance`: the generation
//! is bumped, a protocol all members support is chosen, the leader gets every member's
//! metadata and computes the assignment client-side → (the leader's SyncGroup) `Stable`.
//! A new member, a leaving or expired one, or the leader rejoining, starts over.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::error::ResponseError as K;

/// How long a new group's join phase waits for more members after the first, so that a
/// group whose members start together forms in one rebalance (Kafka's
/// `group.initial.rebalance.delay.ms`, shorter).
pub const INITIAL_REBALANCE_DELAY: Duration = Duration::from_millis(500);
/// Session timeouts a member may ask for, and members per group: the broker's one set, for
/// both group protocols.
pub use tinymq_broker::group::coordinator::{
    GROUP_MEMBERS_MAX, SESSION_TIMEOUT_MAX, SESSION_TIMEOUT_MIN,
};
/// Longest join phase a member may ask for (its rebalance timeout is capped to this).
pub const REBALANCE_TIMEOUT_MAX: Duration = Duration::from_secs(30 * 60);
/// Most protocols (assignors) one member may offer.
pub const MEMBER_PROTOCOLS_MAX: usize = 32;
/// Most bytes of protocol names and metadata one member may offer in a JoinGroup, all its
/// protocols together (a larger one is refused with INVALID_REQUEST). A consumer subscribed
/// to 1000 topics of 100-byte names sends about 100 KB of subscription per protocol, plus as
/// much again for the partitions it owns (cooperative-sticky) or its previous assignment
/// (sticky's user data): three assignors offered together stay under 700 KB.
pub const MEMBER_METADATA_BYTES_MAX: usize = 1 << 20;
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

/// Kafka's error codes used here.
fn code(e: K) -> i16 {
    e.code()
}

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
}

impl Phase {
    /// The state's name in ListGroups and DescribeGroups.
    pub fn kafka_name(self) -> &'static str {
        match self {
            Phase::Empty => "Empty",
            Phase::PreparingRebalance => "PreparingRebalance",
            Phase::CompletingRebalance => "CompletingRebalance",
            Phase::Stable => "Stable",
        }
    }
}

/// One assignor a member offers, with its subscription metadata (opaque here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protocol {
    pub name: String,
    pub metadata: Bytes,
}

impl Protocol {
    /// The same protocol owning its metadata: a request's `Bytes` are slices of its whole
    /// frame, which a kept slice would pin for the member's life.
    fn detached(self) -> Protocol {
        Protocol {
            metadata: Bytes::copy_from_slice(&self.metadata),
            ..self
        }
    }
}

/// The bytes of `protocols`' names and metadata.
fn protocol_bytes(protocols: &[Protocol]) -> usize {
    protocols
        .iter()
        .map(|p| p.name.len().saturating_add(p.metadata.len()))
        .fold(0, usize::saturating_add)
}

/// A JoinGroup, as the state machine needs it.
#[derive(Debug, Clone)]
pub struct Join {
    pub member_id: String,
    /// The id a new member gets (unique: the caller makes it).
    pub fresh_member_id: String,
    /// JoinGroup v4+: a new member is first told MEMBER_ID_REQUIRED with its id.
    pub require_known_member_id: bool,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    pub protocol_type: String,
    pub protocols: Vec<Protocol>,
    /// A static member's `group.instance.id` (see `static_members`).
    pub group_instance_id: Option<String>,
}

impl Join {
    /// The refusals that depend on the request alone, checked before any state is touched
    /// (so a refused join creates no group): the error and why.
    pub fn check(&self) -> Result<(), (K, String)> {
        if self.protocol_type.is_empty() || self.protocols.is_empty() {
            let why = "a join needs a protocol type and at least one protocol";
            return Err((K::InconsistentGroupProtocol, why.into()));
        }
        if self.protocols.len() > MEMBER_PROTOCOLS_MAX {
            let why = format!(
                "{} protocols offered, over MEMBER_PROTOCOLS_MAX ({MEMBER_PROTOCOLS_MAX})",
                self.protocols.len()
            );
            return Err((K::InconsistentGroupProtocol, why));
        }
        let bytes = protocol_bytes(&self.protocols);
        if bytes > MEMBER_METADATA_BYTES_MAX {
            let why = format!(
                "{bytes} bytes of protocol metadata, over MEMBER_METADATA_BYTES_MAX \
                 ({MEMBER_METADATA_BYTES_MAX})"
            );
            return Err((K::InvalidRequest, why));
        }
        if !(SESSION_TIMEOUT_MIN..=SESSION_TIMEOUT_MAX).contains(&self.session_timeout) {
            let why = format!(
                "session timeout {:?} outside {SESSION_TIMEOUT_MIN:?}..={SESSION_TIMEOUT_MAX:?}",
                self.session_timeout
            );
            return Err((K::InvalidSessionTimeout, why));
        }
        Ok(())
    }

    /// The bytes a member made of this join keeps, but its assignment: an upper bound, as
    /// its id is either id the join carries.
    fn member_bytes(&self) -> usize {
        [
            self.member_id.len().max(self.fresh_member_id.len()),
            self.client_id.len(),
            self.client_host.len(),
            self.group_instance_id.as_ref().map_or(0, String::len),
            protocol_bytes(&self.protocols),
        ]
        .into_iter()
        .fold(0, usize::saturating_add)
    }
}

/// One member as the leader learns it: id, instance id, metadata for the chosen protocol.
pub type JoinedMember = (String, Option<String>, Bytes);

/// The answer to a JoinGroup.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Joined {
    pub error: i16,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// The leader's answer only: every member and its metadata for the chosen protocol.
    pub members: Vec<JoinedMember>,
}

impl Joined {
    pub fn error(error: i16, member_id: &str) -> Joined {
        Joined {
            error,
            generation: -1,
            member_id: member_id.to_string(),
            ..Joined::default()
        }
    }
}

/// The answer to a SyncGroup.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Synced {
    pub error: i16,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Join(Joined),
    Sync(Synced),
}

/// Replies due now, each to the request that waits for it.
pub type Deliveries<W> = Vec<(W, Reply)>;

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
    fn bytes_after_join(&self, join: &Join) -> usize {
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
            .saturating_add(join.member_bytes())
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

    pub fn join(&mut self, join: Join, waiter: W, now: Instant) -> Deliveries<W> {
        let refuse = |error: K, waiter: W| {
            vec![(
                waiter,
                Reply::Join(Joined::error(code(error), &join.member_id)),
            )]
        };
        if let Err((error, why)) = join.check() {
            tracing::info!("kafka join refused: {why}");
            return refuse(error, waiter);
        }
        if !self.supports(&join.protocol_type, &join.protocols, &join.member_id) {
            return refuse(K::InconsistentGroupProtocol, waiter);
        }
        let bytes = self.bytes_after_join(&join);
        if bytes > self.budget.bytes_max {
            let Budget { bytes_max, limit } = self.budget;
            tracing::info!(
                "kafka join refused: the group would keep {bytes} bytes, over {limit} \
                 ({bytes_max} bytes now)"
            );
            return refuse(K::GroupMaxSizeReached, waiter);
        }
        if let Some(instance) = join.group_instance_id.clone() {
            return self.join_static(instance, join, waiter, now);
        }
        if join.member_id.is_empty() {
            if self.members.len() + self.pending.len() >= GROUP_MEMBERS_MAX {
                return refuse(K::GroupMaxSizeReached, waiter);
            }
            let id = join.fresh_member_id.clone();
            if join.require_known_member_id {
                self.pending.insert(id.clone(), now + join.session_timeout);
                let answer = Joined::error(code(K::MemberIdRequired), &id);
                return vec![(waiter, Reply::Join(answer))];
            }
            return self.add_member(id, join, waiter, now);
        }
        if self.pending.remove(&join.member_id).is_some() {
            let id = join.member_id.clone();
            return self.add_member(id, join, waiter, now);
        }
        if !self.members.contains_key(&join.member_id) {
            return refuse(K::UnknownMemberId, waiter);
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
                let answer = Synced {
                    error: code(K::RebalanceInProgress),
                    ..Synced::default()
                };
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
            error: 0,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader,
            member_id: id.to_string(),
            members,
        }
    }

    /// `UNKNOWN_MEMBER_ID` or `ILLEGAL_GENERATION` unless `member_id` is a member of
    /// `generation`.
    fn check_member(&self, member_id: &str, generation: i32) -> Result<(), i16> {
        if self.phase == Phase::Empty || !self.members.contains_key(member_id) {
            return Err(code(K::UnknownMemberId));
        }
        if generation != self.generation {
            return Err(code(K::IllegalGeneration));
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub fn sync(
        &mut self,
        member_id: &str,
        generation: i32,
        protocol_type: Option<&str>,
        protocol_name: Option<&str>,
        assignments: Vec<(String, Bytes)>,
        waiter: W,
        now: Instant,
    ) -> Deliveries<W> {
        let refuse = |error: i16, waiter: W| {
            let answer = Synced {
                error,
                ..Synced::default()
            };
            vec![(waiter, Reply::Sync(answer))]
        };
        if let Err(error) = self.check_member(member_id, generation) {
            return refuse(error, waiter);
        }
        let mismatch = |asked: Option<&str>, ours: &Option<String>| {
            asked.is_some_and(|a| ours.as_deref() != Some(a))
        };
        if mismatch(protocol_type, &self.protocol_type)
            || mismatch(protocol_name, &self.protocol_name)
        {
            return refuse(code(K::InconsistentGroupProtocol), waiter);
        }
        let is_leader = self.leader.as_deref() == Some(member_id);
        match self.phase {
            Phase::Empty | Phase::PreparingRebalance => {
                refuse(code(K::RebalanceInProgress), waiter)
            }
            Phase::Stable => {
                let answer = self.synced(member_id);
                vec![(waiter, Reply::Sync(answer))]
            }
            Phase::CompletingRebalance => {
                let assignments = if is_leader {
                    match self.check_assignments(assignments) {
                        Ok(assignments) => Some(assignments),
                        Err(error) => return refuse(error, waiter),
                    }
                } else {
                    None
                };
                if let Some(member) = self.members.get_mut(member_id) {
                    member.deadline = now + member.session_timeout;
                    member.sync_waiter = Some(waiter);
                }
                let Some(assignments) = assignments else {
                    return Vec::new();
                };
                self.assign(assignments);
                self.phase = Phase::Stable;
                let ids: Vec<String> = self.members.keys().cloned().collect();
                let mut out = Vec::new();
                for id in ids {
                    let answer = self.synced(&id);
                    if let Some(waiter) =
                        self.members.get_mut(&id).and_then(|m| m.sync_waiter.take())
                    {
                        out.push((waiter, Reply::Sync(answer)));
                    }
                }
                out
            }
        }
    }

    /// The leader's assignments of current members (an id given twice: the last), unless
    /// one is over [`ASSIGNMENT_BYTES_MAX`] (INVALID_REQUEST) or they would take the group
    /// over its budget (GROUP_MAX_SIZE_REACHED).
    fn check_assignments(
        &self,
        assignments: Vec<(String, Bytes)>,
    ) -> Result<BTreeMap<String, Bytes>, i16> {
        if let Some((id, a)) = assignments
            .iter()
            .find(|(_, a)| a.len() > ASSIGNMENT_BYTES_MAX)
        {
            tracing::info!(
                member = %id,
                "kafka sync refused: an assignment of {} bytes, over ASSIGNMENT_BYTES_MAX \
                 ({ASSIGNMENT_BYTES_MAX})",
                a.len()
            );
            return Err(code(K::InvalidRequest));
        }
        let mut assignments: BTreeMap<String, Bytes> = assignments.into_iter().collect();
        assignments.retain(|id, _| self.members.contains_key(id));
        let sum = |lens: &mut dyn Iterator<Item = usize>| lens.fold(0, usize::saturating_add);
        let current = sum(&mut self.members.values().map(|m| m.assignment.len()));
        let incoming = sum(&mut assignments.values().map(Bytes::len));
        let bytes = self
            .stored_bytes
            .saturating_sub(current)
            .saturating_add(incoming);
        if bytes > self.budget.bytes_max {
            let Budget { bytes_max, limit } = self.budget;
            tracing::info!(
                "kafka sync refused: the group would keep {bytes} bytes, over {limit} \
                 ({bytes_max} bytes now)"
            );
            return Err(code(K::GroupMaxSizeReached));
        }
        Ok(assignments)
    }

    /// Gives every member its part of `assignments` (copied: the request's bytes are
    /// slices of its whole frame), nothing for a member left out.
    fn assign(&mut self, mut assignments: BTreeMap<String, Bytes>) {
        let (mut before, mut after) = (0usize, 0usize);
        for (id, member) in self.members.iter_mut() {
            let assignment = assignments.remove(id).unwrap_or_default();
            before = before.saturating_add(member.assignment.len());
            after = after.saturating_add(assignment.len());
            member.assignment = Bytes::copy_from_slice(&assignment);
        }
        self.restate_bytes(before, after);
    }

    fn synced(&self, member_id: &str) -> Synced {
        Synced {
            error: 0,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            assignment: self
                .members
                .get(member_id)
                .map(|m| m.assignment.clone())
                .unwrap_or_default(),
        }
    }

    /// A heartbeat's error code (0: carry on).
    pub fn heartbeat(&mut self, member_id: &str, generation: i32, now: Instant) -> i16 {
        if let Err(error) = self.check_member(member_id, generation) {
            return error;
        }
        if let Some(member) = self.members.get_mut(member_id) {
            member.deadline = now + member.session_timeout;
        }
        if self.phase == Phase::PreparingRebalance {
            code(K::RebalanceInProgress)
        } else {
            0
        }
    }

    /// Removes `member_id` (a LeaveGroup); the others rebalance.
    pub fn leave(&mut self, member_id: &str, now: Instant) -> (i16, Deliveries<W>) {
        if self.pending.remove(member_id).is_some() {
            return (0, Vec::new());
        }
        match self.remove_member(member_id, now) {
            Some(out) => (0, out),
            None => (code(K::UnknownMemberId), Vec::new()),
        }
    }

    /// Removes a member, answering its waiting requests with UNKNOWN_MEMBER_ID, and starts
    /// a rebalance of the others; `None` if it is not a member.
    fn remove_member(&mut self, member_id: &str, now: Instant) -> Option<Deliveries<W>> {
        let mut member = self.members.remove(member_id)?;
        self.restate_bytes(member.stored_bytes(member_id), 0);
        if let Some(instance) = &member.instance_id {
            if self
                .static_members
                .get(instance)
                .is_some_and(|id| id == member_id)
            {
                self.static_members.remove(instance);
            }
        }
        let mut out = answer_waiters(&mut member, member_id, code(K::UnknownMemberId));
        if self.phase != Phase::PreparingRebalance {
            out.extend(self.prepare_rebalance(now));
        }
        out.extend(self.try_complete_join(now));
        Some(out)
    }

    /// Time passes: members whose session ran out (and that wait for no answer) are
    /// removed, unused MEMBER_ID_REQUIRED ids expire, a join phase past its deadline ends.
    pub fn tick(&mut self, now: Instant) -> (Vec<String>, Deliveries<W>) {
        self.pending.retain(|_, deadline| *deadline > now);
        let expired: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| !m.waits() && m.deadline <= now)
            .map(|(id, _)| id.clone())
            .collect();
        let mut out = Vec::new();
        for id in &expired {
            out.extend(self.remove_member(id, now).unwrap_or_default());
        }
        out.extend(self.try_complete_join(now));
        (expired, out)
    }

    /// Whether an OffsetCommit from `member_id` at `generation` is accepted (Kafka's rules:
    /// a negative generation on an empty group is a consumer that assigns partitions
    /// itself; otherwise a current member of the current generation, not while the leader's
    /// assignment is awaited).
    pub fn check_commit(&self, member_id: &str, generation: i32) -> Result<(), i16> {
        if generation < 0 && self.phase == Phase::Empty {
            return Ok(());
        }
        self.check_member(member_id, generation)?;
        if self.phase == Phase::CompletingRebalance {
            return Err(code(K::RebalanceInProgress));
        }
        Ok(())
    }
}

/// Answers a departing member's waiting requests with `error`.
fn answer_waiters<W>(member: &mut Member<W>, member_id: &str, error: i16) -> Deliveries<W> {
    let mut out = Vec::new();
    if let Some(waiter) = member.join_waiter.take() {
        out.push((waiter, Reply::Join(Joined::error(error, member_id))));
    }
    if let Some(waiter) = member.sync_waiter.take() {
        let answer = Synced {
            error,
            ..Synced::default()
        };
        out.push((waiter, Reply::Sync(answer)));
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
mod static_members;
#[cfg(test)]
mod tests;
