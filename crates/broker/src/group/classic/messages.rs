//! What the classic group protocol is asked and answers, apart from any group's state: the
//! requests (with the refusals that depend on a request alone, [`Join::check`]), the answers
//! parked requests get, and the views of a group that ListGroups and DescribeGroups show.

use std::time::Duration;

use bytes::Bytes;

use super::super::coordinator::{SESSION_TIMEOUT_MAX, SESSION_TIMEOUT_MIN};
use super::error::ClassicError;

/// Most protocols (assignors) one member may offer.
pub const MEMBER_PROTOCOLS_MAX: usize = 32;
/// Most bytes of protocol names and metadata one member may offer in a JoinGroup, all its
/// protocols together (a larger one is refused with INVALID_REQUEST). A consumer subscribed
/// to 1000 topics of 100-byte names sends about 100 KB of subscription per protocol, plus as
/// much again for the partitions it owns (cooperative-sticky) or its previous assignment
/// (sticky's user data): three assignors offered together stay under 700 KB.
pub const MEMBER_METADATA_BYTES_MAX: usize = 1 << 20;

/// A group's phase: Kafka's group states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
}

impl Phase {
    /// The state's name in Kafka's ListGroups and DescribeGroups.
    pub fn kafka_name(self) -> &'static str {
        match self {
            Phase::Empty => "Empty",
            Phase::PreparingRebalance => "PreparingRebalance",
            Phase::CompletingRebalance => "CompletingRebalance",
            Phase::Stable => "Stable",
        }
    }

    /// The state under its native name (the native ListGroups): both rebalancing phases
    /// are "rebalancing".
    pub fn native_name(self) -> &'static str {
        match self {
            Phase::Empty => "empty",
            Phase::PreparingRebalance | Phase::CompletingRebalance => "rebalancing",
            Phase::Stable => "stable",
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
    pub(super) fn detached(self) -> Protocol {
        Protocol {
            metadata: Bytes::copy_from_slice(&self.metadata),
            ..self
        }
    }
}

/// The bytes of `protocols`' names and metadata.
pub(super) fn protocol_bytes(protocols: &[Protocol]) -> usize {
    protocols
        .iter()
        .map(|p| p.name.len().saturating_add(p.metadata.len()))
        .fold(0, usize::saturating_add)
}

/// A JoinGroup: what the member asks for.
#[derive(Debug, Clone)]
pub struct Join {
    pub member_id: String,
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

/// A JoinGroup as the state machine takes it: the request, and the id a new member made
/// of it gets (unique: the coordinator makes it, see `super::classic_mode`).
#[derive(Debug, Clone)]
pub struct Joining {
    pub join: Join,
    pub fresh_member_id: String,
}

impl Join {
    /// The refusals that depend on the request alone, checked before any state is touched
    /// (so a refused join creates no group): the error and why.
    pub fn check(&self) -> Result<(), (ClassicError, String)> {
        if self.protocol_type.is_empty() || self.protocols.is_empty() {
            let why = "a join needs a protocol type and at least one protocol";
            return Err((ClassicError::InconsistentGroupProtocol, why.into()));
        }
        if self.protocols.len() > MEMBER_PROTOCOLS_MAX {
            let why = format!(
                "{} protocols offered, over MEMBER_PROTOCOLS_MAX ({MEMBER_PROTOCOLS_MAX})",
                self.protocols.len()
            );
            return Err((ClassicError::InconsistentGroupProtocol, why));
        }
        let bytes = protocol_bytes(&self.protocols);
        if bytes > MEMBER_METADATA_BYTES_MAX {
            let why = format!(
                "{bytes} bytes of protocol metadata, over MEMBER_METADATA_BYTES_MAX \
                 ({MEMBER_METADATA_BYTES_MAX})"
            );
            return Err((ClassicError::InvalidRequest, why));
        }
        if !(SESSION_TIMEOUT_MIN..=SESSION_TIMEOUT_MAX).contains(&self.session_timeout) {
            let why = format!(
                "session timeout {:?} outside {SESSION_TIMEOUT_MIN:?}..={SESSION_TIMEOUT_MAX:?}",
                self.session_timeout
            );
            return Err((ClassicError::InvalidSessionTimeout, why));
        }
        Ok(())
    }

    /// The bytes a member made of this join keeps, but its assignment: an upper bound, as
    /// its id is either the join's or `fresh_member_id`.
    pub(super) fn member_bytes(&self, fresh_member_id: &str) -> usize {
        [
            self.member_id.len().max(fresh_member_id.len()),
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
    /// `None`: joined.
    pub error: Option<ClassicError>,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// The leader's answer only: every member and its metadata for the chosen protocol.
    pub members: Vec<JoinedMember>,
}

impl Joined {
    pub fn error(error: ClassicError, member_id: &str) -> Joined {
        Joined {
            error: Some(error),
            generation: -1,
            member_id: member_id.to_string(),
            ..Joined::default()
        }
    }
}

/// A SyncGroup: the member, its generation, and (from the leader) every member's
/// assignment.
#[derive(Debug, Clone, Default)]
pub struct SyncRequest {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub generation: i32,
    /// The protocol type and name the member believes in (SyncGroup v5+), checked.
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    /// (member id, assignment); slices of the request's frame are fine (what is kept is
    /// copied).
    pub assignments: Vec<(String, Bytes)>,
}

/// The answer to a SyncGroup.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Synced {
    /// `None`: the assignment is the member's.
    pub error: Option<ClassicError>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl Synced {
    pub fn error(error: ClassicError) -> Synced {
        Synced {
            error: Some(error),
            ..Synced::default()
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Join(Joined),
    Sync(Synced),
}

/// Replies due now, each to the request that waits for it.
pub type Deliveries<W> = Vec<(W, Reply)>;

/// A classic group as ListGroups shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicSummary {
    pub group_id: String,
    pub phase: Phase,
    /// Empty while the group is.
    pub protocol_type: String,
    pub members: u32,
}

/// A classic group as DescribeGroups shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicDescription {
    pub phase: Phase,
    pub protocol_type: String,
    /// The chosen protocol (assignor), empty before one is.
    pub protocol_name: String,
    pub members: Vec<ClassicMember>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// Its metadata for the chosen protocol.
    pub metadata: Bytes,
    pub assignment: Bytes,
}
