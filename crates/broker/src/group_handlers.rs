//! Handlers of the consumer-group operations; the logic is in [`crate::group`].

use std::sync::Arc;

use tinymq_protocol::{messages as m, ErrorCode};

use crate::group::validate_group_id;
use crate::state::BrokerState;

fn wire((code, message): (ErrorCode, String)) -> Option<m::Error> {
    Some(code.with_message(message))
}

/// The coordinator of a group is the leader of its offsets partition, derived from the group
/// id; on a single node that is always this broker.
pub fn find_coordinator(
    state: &BrokerState,
    req: m::FindCoordinatorRequest,
) -> m::FindCoordinatorResponse {
    if let Err(e) = validate_group_id(&req.group_id) {
        return m::FindCoordinatorResponse {
            error: wire(e),
            ..Default::default()
        };
    }
    m::FindCoordinatorResponse {
        error: None,
        node_id: state.config.node_id,
        host: state.advertised.ip().to_string(),
        port: u32::from(state.advertised.port()),
    }
}

pub fn join(state: &BrokerState, req: m::JoinGroupRequest) -> m::JoinGroupResponse {
    state
        .groups
        .join(&req, &|t| state.partition_count(t))
        .unwrap_or_else(|e| m::JoinGroupResponse {
            error: wire(e),
            ..Default::default()
        })
}

pub fn heartbeat(state: &BrokerState, req: m::HeartbeatRequest) -> m::HeartbeatResponse {
    state
        .groups
        .heartbeat(&req, &|t| state.partition_count(t))
        .unwrap_or_else(|e| m::HeartbeatResponse {
            error: wire(e),
            ..Default::default()
        })
}

pub fn leave(state: &BrokerState, req: m::LeaveGroupRequest) -> m::LeaveGroupResponse {
    m::LeaveGroupResponse {
        error: state
            .groups
            .leave(&req, &|t| state.partition_count(t))
            .err()
            .and_then(wire),
    }
}

pub async fn commit(
    state: Arc<BrokerState>,
    req: m::OffsetCommitRequest,
) -> m::OffsetCommitResponse {
    let offsets = req.offsets.clone();
    let outcome = tokio::task::spawn_blocking(move || state.groups.commit(&req))
        .await
        .unwrap_or_else(|e| Err((ErrorCode::UNKNOWN_SERVER_ERROR, e.to_string())));
    match outcome {
        Ok(()) => m::OffsetCommitResponse {
            error: None,
            offsets,
        },
        Err(e) => m::OffsetCommitResponse {
            error: wire(e),
            offsets: vec![],
        },
    }
}

pub fn fetch_offsets(state: &BrokerState, req: m::OffsetFetchRequest) -> m::OffsetFetchResponse {
    let committed = state.groups.committed(&req.group_id);
    let offsets = if req.partitions.is_empty() {
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
    m::OffsetFetchResponse {
        error: None,
        offsets,
    }
}

pub fn list(state: &BrokerState) -> m::ListGroupsResponse {
    m::ListGroupsResponse {
        error: None,
        group_ids: state.groups.list(),
    }
}

pub fn describe(state: &BrokerState, req: m::DescribeGroupRequest) -> m::DescribeGroupResponse {
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
    let outcome = tokio::task::spawn_blocking(move || state.groups.delete(&req.group_id))
        .await
        .unwrap_or_else(|e| Err((ErrorCode::UNKNOWN_SERVER_ERROR, e.to_string())));
    m::DeleteGroupResponse {
        error: outcome.err().and_then(wire),
    }
}
