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
