//! Delayed delivery on the broker (docs/queues.md, "Delayed delivery"): each partition
//! leader's timer log of batches waiting for their deliver-at time, its time-bucketed index,
//! and the scheduler that appends due batches to the partition in deliver-at order.
//!
//! Owner: the delayed-delivery work of issue 18 (a stub until it lands).

use std::sync::Arc;

use tinymq_protocol::messages as m;
use tinymq_protocol::ErrorCode;
use tokio_util::sync::CancellationToken;

use crate::state::BrokerState;

/// Every partition's timer log on this broker.
#[derive(Debug, Default)]
pub struct Delays {}

pub async fn produce_delayed(
    _state: Arc<BrokerState>,
    _request: m::ProduceDelayedRequest,
) -> m::ProduceDelayedResponse {
    m::ProduceDelayedResponse {
        error: Some(ErrorCode::UNKNOWN_OPERATION.with_message("delayed produce is not served yet")),
        ..Default::default()
    }
}

/// The scheduler, until `shutdown`.
pub async fn run(_state: Arc<BrokerState>, _shutdown: CancellationToken) {}
