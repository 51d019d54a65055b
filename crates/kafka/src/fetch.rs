//! Fetch: a Kafka FetchRequest as a native FetchRequest (long poll included).

use std::sync::Arc;

use kafka_protocol::messages::{FetchRequest, FetchResponse};

use crate::context::Ctx;

pub(crate) async fn handle(_ctx: Arc<Ctx>, _version: i16, _request: FetchRequest) -> FetchResponse {
    FetchResponse::default()
}
