//! Handlers of the consumer-group operations; the logic is in [`crate::group`].

use std::collections::BTreeMap;
use std::sync::Arc;

use tinymq_protocol::{messages as m, ErrorCode};

use crate::group::{validate_group_id, GROUP_TYPE_CONSUMER, GROUP_TYPE_KAFKA, GROUP_TYPE_SHARE};
use crate::state::BrokerState;

fn wire((code, message): (ErrorCode, String)) -> Option<m::Error> {
    Some(code.with_message(message))
}

/// The coordinator of a group is the leader of its partition of `__consumer_offsets`
/// (`murmur2(group) % 4`), which the MetaServer places like any topic; it is created on the
/// first FindCoordinator of the cluster.
pub async fn find_coordinator(
    state: Arc<BrokerState>,
    req: m::FindCoordinatorRequest,
) -> m::FindCoordinatorResponse {
    let fail = |error: m::Error| m::FindCoordinatorResponse {
        error: Some(error),
        ..Default::default()
    };
    match req.key_type {
        0 => {}
        1 => return crate::txn_handlers::find_coordinator(&state, &req.group_id).await,
        2 => {
            return match crate::half::ops::coordinator_of(&state, &req.group_id).await {
                Ok(broker) => m::FindCoordinatorResponse {
                    error: None,
                    node_id: broker.id,
                    host: broker.host,
                    port: u32::from(broker.port),
                },
                Err(e) => fail(e),
            }
        }
        other => {
            return fail(ErrorCode::INVALID_REQUEST.with_message(format!(
                "key_type {other}: 0 is a group, 1 a transactional id, 2 a producer group's half messages"
            )))
        }
    }
    if let Err(e) = validate_group_id(&req.group_id) {
        return fail(e.0.with_message(e.1));
    }
    if let Err(e) = crate::offsets_partitions::ensure_offsets_topic(&state).await {
        return fail(e);
    }
    match state.coordinator_of(&req.group_id) {
        Ok(broker) => m::FindCoordinatorResponse {
            error: None,
            node_id: broker.id,
            host: broker.host,
            port: u32::from(broker.port),
        },
        Err(e) => fail(e),
    }
}

/// Answers a group request with `NOT_COORDINATOR` unless this broker coordinates the group.
macro_rules! coordinated_here {
    ($state:expr, $group:expr, $response:ty) => {
        if let Err(error) = $state.check_coordinator($group) {
            return <$response>::from_error(error);
        }
    };
}

/// Responses that can carry only an error.
trait FromError: Default {
    fn from_error(error: m::Error) -> Self;
}

macro_rules! from_error {
    ($($t:ty),*) => {$(
        impl FromError for $t {
            #[allow(clippy::needless_update)] // some responses have only the error field
            fn from_error(error: m::Error) -> Self {
                Self { error: Some(error), ..Default::default() }
            }
        }
    )*};
}

from_error!(
    m::JoinGroupResponse,
    m::HeartbeatResponse,
    m::LeaveGroupResponse,
    m::OffsetCommitResponse,
    m::OffsetFetchResponse,
    m::DescribeGroupResponse,
    m::DeleteGroupResponse
);

pub fn join(state: &BrokerState, req: m::JoinGroupRequest) -> m::JoinGroupResponse {
    coordinated_here!(state, &req.group_id, m::JoinGroupResponse);
    state
        .groups
        .join(&req, &|t| state.partition_count(t))
        .unwrap_or_else(|e| m::JoinGroupResponse {
            error: wire(e),
            ..Default::default()
        })
}

pub fn heartbeat(state: &BrokerState, req: m::HeartbeatRequest) -> m::HeartbeatResponse {
    coordinated_here!(state, &req.group_id, m::HeartbeatResponse);
    state
        .groups
        .heartbeat(&req, &|t| state.partition_count(t))
        .unwrap_or_else(|e| m::HeartbeatResponse {
            error: wire(e),
            ..Default::default()
        })
}

pub fn leave(state: &BrokerState, req: m::LeaveGroupRequest) -> m::LeaveGroupResponse {
    coordinated_here!(state, &req.group_id, m::LeaveGroupResponse);
    m::LeaveGroupResponse {
        error: state
            .groups
            .leave(&req, &|t| state.partition_count(t))
            .err()
            .and_then(wire),
    }
}

/// Checks a commit, appends it to the group's offsets partition and answers once every
/// in-sync replica holds it ([`crate::offsets_partitions::append`]).
pub async fn commit(
    state: Arc<BrokerState>,
    req: m::OffsetCommitRequest,
) -> m::OffsetCommitResponse {
    coordinated_here!(state, &req.group_id, m::OffsetCommitResponse);
    let changes = state
        .groups
        .prepare_commit(&req, &|t| state.partition_count(t))
        .map_err(|(code, message)| code.with_message(message));
    let outcome = match changes {
        Ok(changes) => crate::offsets_partitions::append(&state, &req.group_id, changes).await,
        Err(e) => Err(e),
    };
    match outcome {
        Ok(()) => m::OffsetCommitResponse {
            error: None,
            offsets: req.offsets,
        },
        Err(e) => m::OffsetCommitResponse {
            error: Some(e),
            offsets: vec![],
        },
    }
}

pub fn fetch_offsets(state: &BrokerState, req: m::OffsetFetchRequest) -> m::OffsetFetchResponse {
    coordinated_here!(state, &req.group_id, m::OffsetFetchResponse);
    let committed = state.groups.committed(&req.group_id);
    let mut offsets: Vec<m::CommittedOffset> = if req.partitions.is_empty() {
        committed.into_iter().map(|(tp, c)| c.to_wire(tp)).collect()
    } else {
        crate::group::from_wire(&req.partitions)
            .into_iter()
            .map(|tp| {
                let c = committed.get(&tp);
                m::CommittedOffset {
                    topic: tp.0,
                    partition: tp.1,
                    offset: c.map_or(-1, |c| c.offset),
                    metadata: c.map(|c| c.metadata.clone()).unwrap_or_default(),
                    error: None,
                }
            })
            .collect()
    };
    if req.require_stable {
        for o in &mut offsets {
            let tp: crate::group::assignment::Tp = (o.topic.clone(), o.partition);
            if state.groups.offsets.unstable(&req.group_id, &tp) {
                o.offset = -1;
                o.metadata.clear();
                o.error = Some(ErrorCode::UNSTABLE_OFFSET_COMMIT.with_message(format!(
                    "an open transaction holds offsets of {}/{} for group {}; retry",
                    o.topic, o.partition, req.group_id
                )));
            }
        }
    }
    m::OffsetFetchResponse {
        error: None,
        offsets,
    }
}

/// The groups this broker coordinates (a tool asks every broker for the whole list):
/// `group_ids` as before, and `groups` with each one's type, state and members — the
/// consumer groups, the groups of Kafka's classic protocol, and the share groups
/// with state on the partitions it leads.
pub async fn list(state: Arc<BrokerState>) -> m::ListGroupsResponse {
    let mut group_ids = state.groups.list();
    group_ids.retain(|g| state.check_coordinator(g).is_ok());
    let mut listed: BTreeMap<(String, &'static str), m::GroupListing> = BTreeMap::new();
    for group_id in &group_ids {
        let (group_state, members) = state
            .groups
            .describe(group_id)
            .map_or(("empty".to_string(), 0), |d| {
                (d.state, d.members.len() as u32)
            });
        listed.insert(
            (group_id.clone(), GROUP_TYPE_CONSUMER),
            listing(group_id, GROUP_TYPE_CONSUMER, group_state, members),
        );
    }
    // A classic group's committed offsets are the group's: while the coordinator keeps the
    // group it is listed as a Kafka group, not as a consumer group too.
    for g in state.groups.classic_groups() {
        if state.check_coordinator(&g.group_id).is_err() {
            continue;
        }
        listed.remove(&(g.group_id.clone(), GROUP_TYPE_CONSUMER));
        let group_state = g.phase.native_name().to_string();
        listed.insert(
            (g.group_id.clone(), GROUP_TYPE_KAFKA),
            listing(&g.group_id, GROUP_TYPE_KAFKA, group_state, g.members),
        );
    }
    // Listing share state reads partition directories: on the blocking pool.
    let s = state.clone();
    let shared = tokio::task::spawn_blocking(move || crate::share::groups_led_here(&s))
        .await
        .unwrap_or_default();
    for (group_id, members) in shared {
        let group_state = if members.is_empty() {
            "empty"
        } else {
            "stable"
        };
        let mut entry = listing(
            &group_id,
            GROUP_TYPE_SHARE,
            group_state.to_string(),
            members.len() as u32,
        );
        entry.member_ids = members.into_iter().collect();
        listed.insert((group_id, GROUP_TYPE_SHARE), entry);
    }
    m::ListGroupsResponse {
        error: None,
        group_ids,
        groups: listed.into_values().collect(),
    }
}

fn listing(group_id: &str, group_type: &str, state: String, members: u32) -> m::GroupListing {
    m::GroupListing {
        group_id: group_id.to_string(),
        group_type: group_type.to_string(),
        state,
        members,
        member_ids: Vec::new(),
    }
}

pub fn describe(state: &BrokerState, req: m::DescribeGroupRequest) -> m::DescribeGroupResponse {
    coordinated_here!(state, &req.group_id, m::DescribeGroupResponse);
    state
        .groups
        .describe(&req.group_id)
        .unwrap_or_else(|| m::DescribeGroupResponse {
            error: wire((
                ErrorCode::GROUP_ID_NOT_FOUND,
                format!("unknown group {}", req.group_id),
            )),
            ..Default::default()
        })
}

pub async fn delete(state: Arc<BrokerState>, req: m::DeleteGroupRequest) -> m::DeleteGroupResponse {
    coordinated_here!(state, &req.group_id, m::DeleteGroupResponse);
    if !req.offsets.is_empty() {
        return delete_offsets(state, req).await;
    }
    let outcome = match state.groups.prepare_delete(&req.group_id) {
        Ok(tombstones) => {
            crate::offsets_partitions::append(&state, &req.group_id, tombstones).await
        }
        Err((code, message)) => Err(code.with_message(message)),
    };
    m::DeleteGroupResponse {
        error: outcome.err(),
        offsets: Vec::new(),
    }
}

/// `DeleteGroup` with `offsets` (Kafka's OffsetDelete): the tombstones of the partitions
/// asked (at most [`crate::group::COMMIT_OFFSETS_MAX`], as a commit), appended as a commit's.
async fn delete_offsets(
    state: Arc<BrokerState>,
    req: m::DeleteGroupRequest,
) -> m::DeleteGroupResponse {
    let refuse = |error: m::Error| m::DeleteGroupResponse {
        error: Some(error),
        offsets: Vec::new(),
    };
    let asked = crate::group::from_wire(&req.offsets);
    if asked.len() > crate::group::COMMIT_OFFSETS_MAX {
        return refuse(ErrorCode::LIMIT_EXCEEDED.with_message(format!(
            "{} partitions: at most {} per request",
            asked.len(),
            crate::group::COMMIT_OFFSETS_MAX
        )));
    }
    let (tombstones, outcomes) = match state.groups.prepare_delete_offsets(&req.group_id, &asked) {
        Ok(prepared) => prepared,
        Err((code, message)) => return refuse(code.with_message(message)),
    };
    if let Err(e) = crate::offsets_partitions::append(&state, &req.group_id, tombstones).await {
        return refuse(e);
    }
    let offsets = outcomes
        .into_iter()
        .map(|((topic, partition), refused)| m::CommittedOffset {
            topic,
            partition,
            offset: -1,
            metadata: String::new(),
            error: refused.and_then(wire),
        })
        .collect();
    m::DeleteGroupResponse {
        error: None,
        offsets,
    }
}
