//! Content-based routes on the broker (docs/queues.md, "Routes"): CreateRoute, DeleteRoute and
//! ListRoutes (routes live in the metadata image), and the runners that copy each matching
//! record of a source partition led here into the target topic exactly once.
//!
//! Owner: the routes work of issue 18 (a stub until it lands).

use std::sync::Arc;

use tinymq_protocol::messages as m;
use tinymq_protocol::ErrorCode;
use tokio_util::sync::CancellationToken;

use crate::state::BrokerState;

/// The route runners of this broker.
#[derive(Debug, Default)]
pub struct Routes {}

fn not_yet() -> Option<m::Error> {
    Some(ErrorCode::UNKNOWN_OPERATION.with_message("routes are not served yet"))
}

pub async fn create_route(
    _state: Arc<BrokerState>,
    _request: m::CreateRouteRequest,
) -> m::CreateRouteResponse {
    m::CreateRouteResponse { error: not_yet() }
}

pub async fn delete_route(
    _state: Arc<BrokerState>,
    _request: m::DeleteRouteRequest,
) -> m::DeleteRouteResponse {
    m::DeleteRouteResponse { error: not_yet() }
}

pub async fn list_routes(
    _state: Arc<BrokerState>,
    _request: m::ListRoutesRequest,
) -> m::ListRoutesResponse {
    m::ListRoutesResponse {
        error: not_yet(),
        ..Default::default()
    }
}

/// Starts and stops runners as routes and leaderships change, until `shutdown`.
pub async fn run(_state: Arc<BrokerState>, _shutdown: CancellationToken) {}
