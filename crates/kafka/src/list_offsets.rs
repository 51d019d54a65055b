//! ListOffsets: earliest, latest and by timestamp, as native ListOffsets.

use std::sync::Arc;

use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use crate::context::Ctx;

pub(crate) async fn handle(
    _ctx: Arc<Ctx>,
    _version: i16,
    _request: ListOffsetsRequest,
) -> ListOffsetsResponse {
    ListOffsetsResponse::default()
}
