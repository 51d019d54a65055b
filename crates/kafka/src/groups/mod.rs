//! Kafka's classic consumer groups: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup (membership and client-side assignment, kept here: tinymq's native groups
//! assign server-side), OffsetCommit and OffsetFetch (the native group's committed offsets),
//! ListGroups, DescribeGroups, DeleteGroups.
//!
//! - `state`: one group's state machine (pure: time passed in, waiting requests parked),
//!   with static membership (`group.instance.id`) in `state::static_members`.
//! - this module: the [`Coordinator`] holding those groups (bounded), the timer that expires
//!   sessions and ends join phases, and the checks every group request makes natively.
//! - `membership`, `offsets`, `admin`: the handlers.
//!
//! One namespace of group ids with native groups: a group whose members speak Kafka's
//! protocol is claimed on the native coordinator
//! ([`tinymq_broker::group::GroupCoordinator::claim_for_other_protocol`]) while it has
//! members, so native joins are refused; a group with native members refuses a Kafka join
//! with INCONSISTENT_GROUP_PROTOCOL. Groups vacant for [`VACANT_GROUP_FORGET_AFTER`] are
//! forgotten here; their committed offsets stay native.

mod admin;
mod consumer_protocol;
mod membership;
mod offsets;
mod state;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use kafka_protocol::error::ResponseError as K;
use parking_lot::Mutex;
use tinymq_auth::{AclOperation, Principal};
use tinymq_broker::group::GroupCoordinator;
use tinymq_broker::state::BrokerState;
use tinymq_meta::authorize::{Access, AuthorizerCache, Permission};
use tinymq_protocol::{messages as m, ErrorCode, OpCode};
use tokio::sync::oneshot;

use crate::context::{Ctx, Shared};
use crate::errors::{kafka_code_for, Resource};
use state::{Budget, Deliveries, Group, Join, Joined, Reply, GROUP_BYTES_MAX};

pub(crate) use admin::{delete_groups, describe_groups, find_coordinator, list_groups};
pub(crate) use membership::{heartbeat, join_group, leave_group, sync_group};
pub(crate) use offsets::{offset_commit, offset_fetch};

/// Most Kafka groups this listener keeps (with members, or vacant and not yet forgotten); a
/// join that would add another is refused. Below the broker's one bound on groups with
/// members (`tinymq_broker::group::GROUPS_MAX`, which a Kafka group counts against through its
/// claim), because a join or sync walks these groups to share [`KAFKA_GROUPS_BYTES_MAX`].
pub const KAFKA_GROUPS_MAX: usize = 10_000;
/// Most bytes all Kafka groups here keep together (members' protocol metadata,
/// assignments, ids and client strings; see [`state::GROUP_BYTES_MAX`] for one group): a
/// join or assignment beyond it is refused with GROUP_MAX_SIZE_REACHED. 32 groups at their
/// own limit, or 500 groups of 100 members subscribed to 1000 topics each, fit.
pub const KAFKA_GROUPS_BYTES_MAX: usize = 512 << 20;
/// Most chars of a client id a fresh member id starts with (Kafka's member ids are the
/// client id and a unique suffix; clients never parse them): a member id handed out with
/// MEMBER_ID_REQUIRED is kept before the member is, so its length is bounded here.
const MEMBER_ID_CLIENT_ID_CHARS_MAX: usize = 128;
/// A group without members is forgotten after this (its offsets are native and stay).
pub const VACANT_GROUP_FORGET_AFTER: Duration = Duration::from_secs(60);
/// How often sessions and join phases are checked: the precision of session timeouts.
const TICK: Duration = Duration::from_millis(100);

/// A request waiting for its join or sync answer.
type Waiter = oneshot::Sender<Reply>;

/// The classic groups this broker coordinates.
pub(crate) struct Coordinator {
    groups: Mutex<HashMap<String, Group<Waiter>>>,
    ticking: AtomicBool,
    next_member: AtomicU64,
    /// Makes member ids unique across restarts: a member of a previous incarnation cannot
    /// rejoin with its old id as if it were another member.
    incarnation: u128,
    /// The broker's ACLs, for what the native side cannot check for us (which Kafka groups
    /// ListGroups may show): built from the broker's own authorization settings and image,
    /// so it decides as the native checks do.
    acls: OnceLock<AuthorizerCache>,
}

impl Default for Coordinator {
    fn default() -> Coordinator {
        let incarnation = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Coordinator {
            groups: Mutex::new(HashMap::new()),
            ticking: AtomicBool::new(false),
            next_member: AtomicU64::new(1),
            incarnation,
            acls: OnceLock::new(),
        }
    }
}

impl Coordinator {
    fn fresh_member_id(&self, client_id: &str) -> String {
        let n = self.next_member.fetch_add(1, Ordering::Relaxed);
        let prefix: String = client_id
            .chars()
            .take(MEMBER_ID_CLIENT_ID_CHARS_MAX)
            .collect();
        format!("{prefix}-{:x}-{n}", self.incarnation)
    }

    /// Runs a JoinGroup through `group_id`'s state machine, creating the group (bounded)
    /// and claiming its id from the native coordinator for its first member.
    fn join(
        &self,
        native: &GroupCoordinator,
        group_id: &str,
        join: Join,
        waiter: Waiter,
        now: Instant,
    ) -> Deliveries<Waiter> {
        let refuse = |error: K, why: &str, waiter: Waiter| {
            tracing::info!(group = %group_id, "kafka join refused: {why}");
            let answer = Joined::error(error.code(), &join.member_id);
            vec![(waiter, Reply::Join(answer))]
        };
        // Before the group exists: a join refused for itself creates nothing.
        if let Err((error, why)) = join.check() {
            return refuse(error, &why, waiter);
        }
        let mut groups = self.groups.lock();
        let created = !groups.contains_key(group_id);
        if created && groups.len() >= KAFKA_GROUPS_MAX {
            let why = format!(
                "this broker keeps KAFKA_GROUPS_MAX ({KAFKA_GROUPS_MAX}) Kafka groups already"
            );
            return refuse(K::GroupMaxSizeReached, &why, waiter);
        }
        let budget = budget_of(&groups, group_id, KAFKA_GROUPS_BYTES_MAX);
        let group = groups
            .entry(group_id.to_string())
            .or_insert_with(|| Group::new(now));
        group.budget = budget;
        let out = if group.is_vacant() {
            native.claim_for_other_protocol(group_id).err()
        } else {
            None
        };
        let out = match out {
            // The broker's one bound on groups with members, native and Kafka together.
            Some((ErrorCode::LIMIT_EXCEEDED, why)) => refuse(K::GroupMaxSizeReached, &why, waiter),
            Some((_, why)) => refuse(K::InconsistentGroupProtocol, &why, waiter),
            None => group.join(join, waiter, now),
        };
        if group.is_vacant() {
            native.release_other_protocol(group_id);
            if created {
                // Refused (or left nothing behind): it does not count against KAFKA_GROUPS_MAX.
                groups.remove(group_id);
            }
        }
        out
    }

    /// [`Coordinator::with_group`] for a change that may add bytes (a leader's SyncGroup):
    /// the group's budget is set first.
    fn with_group_budgeted<T>(
        &self,
        native: &GroupCoordinator,
        group_id: &str,
        f: impl FnOnce(&mut Group<Waiter>) -> T,
    ) -> Option<T> {
        let mut groups = self.groups.lock();
        let budget = budget_of(&groups, group_id, KAFKA_GROUPS_BYTES_MAX);
        let group = groups.get_mut(group_id)?;
        group.budget = budget;
        let out = f(group);
        if group.is_vacant() {
            native.release_other_protocol(group_id);
        }
        Some(out)
    }

    /// Applies `f` to `group_id`'s state (`None`: no such group here), then gives the
    /// group's id back to the native coordinator if it has no members left.
    fn with_group<T>(
        &self,
        native: &GroupCoordinator,
        group_id: &str,
        f: impl FnOnce(&mut Group<Waiter>) -> T,
    ) -> Option<T> {
        let mut groups = self.groups.lock();
        let group = groups.get_mut(group_id)?;
        let out = f(group);
        if group.is_vacant() {
            native.release_other_protocol(group_id);
        }
        Some(out)
    }

    /// Forgets `group_id` if it is known here and vacant (DeleteGroups, once the native
    /// deletion passed); whether it was.
    fn forget_if_vacant(&self, native: &GroupCoordinator, group_id: &str) -> bool {
        let mut groups = self.groups.lock();
        if !groups.get(group_id).is_some_and(Group::is_vacant) {
            return false;
        }
        groups.remove(group_id);
        native.release_other_protocol(group_id);
        true
    }

    /// Expires sessions, ends join phases past their deadline, forgets long-vacant groups.
    fn tick(&self, native: &GroupCoordinator, now: Instant) -> Deliveries<Waiter> {
        let mut out = Vec::new();
        let mut groups = self.groups.lock();
        for (group_id, group) in groups.iter_mut() {
            let was_vacant = group.is_vacant();
            let (expired, delivered) = group.tick(now);
            for member in expired {
                tracing::info!(group = %group_id, %member, "kafka group member session expired");
            }
            out.extend(delivered);
            // Released once, when the last session expires (join and leave release their own).
            if !was_vacant && group.is_vacant() {
                native.release_other_protocol(group_id);
            }
        }
        groups.retain(|_, g| !g.is_forgettable(now, VACANT_GROUP_FORGET_AFTER));
        out
    }

    /// Starts the timer on the first group request (the listener's shared state is built
    /// outside a runtime); it stops when the listener is gone.
    fn ensure_ticking(&self, shared: &Arc<Shared>) {
        if self.ticking.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak: Weak<Shared> = Arc::downgrade(shared);
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(TICK);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                interval.tick().await;
                let Some(shared) = weak.upgrade() else { return };
                let out = shared.groups.tick(&shared.front.0.groups, Instant::now());
                deliver(out);
            }
        });
    }

    /// The access rules of the broker's current image (as the native side's own checks).
    fn access(&self, state: &BrokerState) -> Access {
        let acls = self
            .acls
            .get_or_init(|| AuthorizerCache::new(state.config.authorization.clone()));
        acls.current(|| state.cluster.version(), || state.cluster.image())
    }

    /// [`Coordinator::list`], only the groups `principal` may DESCRIBE: what ListGroups
    /// shows, as the native ListGroups filters its own groups.
    fn list_describable(
        &self,
        access: &Access,
        principal: &Principal,
    ) -> Vec<(String, &'static str, String)> {
        let mut groups = self.list();
        groups.retain(|(id, _, _)| {
            access.allows(principal, Permission::group(id, AclOperation::Describe))
        });
        groups
    }

    /// The Kafka groups kept here as the native ListGroups lists them (issue 27), with the
    /// native names of their states.
    fn native_listing(&self) -> Vec<tinymq_broker::group::OtherProtocolGroup> {
        self.groups
            .lock()
            .iter()
            .map(|(id, g)| tinymq_broker::group::OtherProtocolGroup {
                group_id: id.clone(),
                state: native_state_name(g.phase.kafka_name()).to_string(),
                members: g.members.len() as u32,
            })
            .collect()
    }

    /// A snapshot of the Kafka groups kept here: (id, state, protocol type).
    fn list(&self) -> Vec<(String, &'static str, String)> {
        self.groups
            .lock()
            .iter()
            .map(|(id, g)| {
                let protocol_type = g.protocol_type.clone().unwrap_or_default();
                (id.clone(), g.phase.kafka_name(), protocol_type)
            })
            .collect()
    }
}

/// A Kafka group state under its native name: both rebalancing phases are "rebalancing".
fn native_state_name(kafka: &str) -> &'static str {
    match kafka {
        "Stable" => "stable",
        "PreparingRebalance" | "CompletingRebalance" => "rebalancing",
        _ => "empty",
    }
}

/// Lets the native ListGroups (`tinymq group list`, `GET /api/v1/groups`) show the Kafka
/// groups this listener keeps; the lister holds the listener's state weakly.
pub(crate) fn register_native_listing(shared: &Arc<Shared>) {
    let weak: Weak<Shared> = Arc::downgrade(shared);
    shared
        .front
        .0
        .groups
        .set_other_protocol_lister(Arc::new(move || {
            weak.upgrade()
                .map_or_else(Vec::new, |s| s.groups.native_listing())
        }));
}

/// What group `group_id` may keep: [`GROUP_BYTES_MAX`], or less when the other groups
/// leave less of `groups_bytes_max` ([`KAFKA_GROUPS_BYTES_MAX`]). (A walk over the groups,
/// on joins and syncs only.)
fn budget_of(
    groups: &HashMap<String, Group<Waiter>>,
    group_id: &str,
    groups_bytes_max: usize,
) -> Budget {
    let others = groups
        .iter()
        .filter(|(id, _)| id.as_str() != group_id)
        .map(|(_, g)| g.stored_bytes())
        .fold(0, usize::saturating_add);
    let left = groups_bytes_max.saturating_sub(others);
    if left < GROUP_BYTES_MAX {
        Budget {
            bytes_max: left,
            limit: "KAFKA_GROUPS_BYTES_MAX",
        }
    } else {
        Budget::default()
    }
}

/// Sends the replies due; a request that is no longer waiting (its connection closed) is
/// skipped.
fn deliver(out: Deliveries<Waiter>) {
    for (waiter, reply) in out {
        let _ = waiter.send(reply);
    }
}

/// A native group error as Kafka's code for a group request.
fn group_code(error: Option<&m::Error>) -> i16 {
    if error.is_some_and(|e| e.code == u32::from(ErrorCode::LEADER_NOT_AVAILABLE.code())) {
        // The offsets partition that names the coordinator has no live leader.
        return K::CoordinatorNotAvailable.code();
    }
    kafka_code_for(error, Resource::Group)
}

/// The checks every Kafka group request makes before this module's state is touched,
/// through the native path: a valid group id, this broker coordinates the group (else
/// NOT_COORDINATOR), and the principal may READ it. A native Heartbeat of no member asks
/// exactly that (its UNKNOWN_MEMBER_ID is the expected answer).
async fn admit_group(ctx: &Arc<Ctx>, group_id: &str) -> Result<(), i16> {
    ctx.shared.groups.ensure_ticking(&ctx.shared);
    if let Err(e) = tinymq_protocol::names::validate_group_id(group_id) {
        tracing::debug!(group = %group_id, "kafka group request refused: {e}");
        return Err(group_code(Some(
            &e.error_code().with_message(e.to_string()),
        )));
    }
    let probe = m::HeartbeatRequest {
        group_id: group_id.to_string(),
        ..Default::default()
    };
    let answer: Result<m::HeartbeatResponse, m::Error> = ctx.call(OpCode::Heartbeat, &probe).await;
    let error = match answer {
        Ok(response) => response.error,
        Err(e) => Some(e),
    };
    match error {
        None => Ok(()),
        Some(e) if e.code == u32::from(ErrorCode::UNKNOWN_MEMBER_ID.code()) || e.code == 0 => {
            Ok(())
        }
        Some(e) => Err(group_code(Some(&e))),
    }
}

/// Kafka's group id string.
fn group_name(id: &kafka_protocol::messages::GroupId) -> String {
    id.0.to_string()
}

#[cfg(test)]
mod tests;
