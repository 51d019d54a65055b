//! Metadata: brokers (with their Kafka addresses), topics and partition leaders.

use std::sync::Arc;

use kafka_protocol::messages::{MetadataRequest, MetadataResponse};

use crate::context::Ctx;

pub(crate) async fn handle(
    _ctx: Arc<Ctx>,
    _version: i16,
    _request: MetadataRequest,
) -> MetadataResponse {
    MetadataResponse::default()
}

/// The Kafka address (host, port) of broker `node_id`, as it registered it; `None` for a
/// broker without a Kafka listener or one not in the cluster. Used by FindCoordinator,
/// DescribeCluster and the current-leader fields of Produce and Fetch errors.
pub(crate) fn kafka_broker(ctx: &Ctx, node_id: u32) -> Option<(String, u16)> {
    // Until brokers register their Kafka address: this broker's own only.
    (node_id == ctx.state().node_id()).then(|| ctx.config().advertised.clone())
}
