//! Share groups on the broker (docs/queues.md, "Share groups"): for each partition led here,
//! each share group's share-partition state (acquisition locks, delivery counts, the start
//! offset), kept durable in a state log and rebuilt at start; ShareFetch, ShareAcknowledge and
//! DescribeShareGroup; dead-lettering.
//!
//! Owner: the share-groups server work of issue 18 (a stub until it lands).

use std::sync::Arc;

use tinymq_auth::Principal;
use tinymq_meta::authorize::Access;
use tinymq_protocol::messages as m;
use tinymq_protocol::ErrorCode;
use tokio_util::sync::CancellationToken;

use crate::state::BrokerState;

/// Every share group's state on this broker.
#[derive(Debug, Default)]
pub struct ShareGroups {}

fn not_yet() -> Option<m::Error> {
    Some(ErrorCode::UNKNOWN_OPERATION.with_message("share groups are not served yet"))
}

pub async fn share_fetch(
    _state: Arc<BrokerState>,
    _access: &Access,
    _principal: &Principal,
    _request: m::ShareFetchRequest,
) -> m::ShareFetchResponse {
    m::ShareFetchResponse {
        error: not_yet(),
        ..Default::default()
    }
}

pub async fn share_acknowledge(
    _state: Arc<BrokerState>,
    _access: &Access,
    _principal: &Principal,
    _request: m::ShareAcknowledgeRequest,
) -> m::ShareAcknowledgeResponse {
    m::ShareAcknowledgeResponse {
        error: not_yet(),
        ..Default::default()
    }
}

pub async fn describe_share_group(
    _state: Arc<BrokerState>,
    _request: m::DescribeShareGroupRequest,
) -> m::DescribeShareGroupResponse {
    m::DescribeShareGroupResponse {
        error: not_yet(),
        ..Default::default()
    }
}

/// Background work (lock expiry, dead-lettering), until `shutdown`.
pub async fn run(_state: Arc<BrokerState>, _shutdown: CancellationToken) {}
