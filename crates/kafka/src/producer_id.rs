//! InitProducerId (v0..=4): an idempotent producer's id and epoch from the native
//! InitProducerId, so Kafka and native producers draw from the same ids and their batches
//! meet the same per-partition sequence state.
//!
//! A v3+ request naming the producer's current id and epoch asks for an epoch bump (KIP-360,
//! after a sequence error): the native side hands out a fresh id with epoch 0 instead, which
//! Kafka clients accept the same way (they take whatever id and epoch come back and restart
//! their sequences at 0).
//!
//! With a `transactional_id` the request goes to the id's transaction coordinator, which
//! bumps the id's epoch (fencing older instances) after aborting any transaction it left
//! open (answering CONCURRENT_TRANSACTIONS meanwhile, which clients retry).

use std::sync::Arc;

use kafka_protocol::error::ResponseError as K;
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use tinymq_protocol::{messages as m, OpCode};

use crate::context::Ctx;
use crate::errors::{kafka_code_for, Resource};

pub(crate) async fn handle(
    ctx: Arc<Ctx>,
    _version: i16,
    request: InitProducerIdRequest,
) -> InitProducerIdResponse {
    let transactional = is_transactional(&request);
    let native = m::InitProducerIdRequest {
        transactional_id: request
            .transactional_id
            .as_ref()
            .map_or(String::new(), |id| id.0.to_string()),
        producer_id: request.producer_id.0,
        producer_epoch: i32::from(request.producer_epoch),
        transaction_timeout_ms: u32::try_from(request.transaction_timeout_ms).unwrap_or(0),
    };
    let answer = ctx
        .call::<_, m::InitProducerIdResponse>(OpCode::InitProducerId, &native)
        .await;
    if transactional {
        return respond_transactional(answer);
    }
    respond(answer)
}

/// A transaction coordinator's answer: its refusals are the transactional id's.
fn respond_transactional(
    answer: Result<m::InitProducerIdResponse, m::Error>,
) -> InitProducerIdResponse {
    let error = match &answer {
        Ok(response) => response.error.clone().filter(|e| !e.is_ok()),
        Err(e) => Some(e.clone()),
    };
    match (error, answer) {
        (None, Ok(response)) => respond(Ok(response)),
        (Some(e), _) => refusal(crate::txn::txn_code(Some(&e))),
        (None, Err(_)) => refusal(K::UnknownServerError.code()),
    }
}

fn is_transactional(request: &InitProducerIdRequest) -> bool {
    request
        .transactional_id
        .as_ref()
        .is_some_and(|id| !id.is_empty())
}

fn respond(answer: Result<m::InitProducerIdResponse, m::Error>) -> InitProducerIdResponse {
    let response = match answer {
        Ok(response) => response,
        // Idempotent writes are a cluster permission in Kafka (IDEMPOTENT_WRITE).
        Err(error) => return refusal(kafka_code_for(Some(&error), Resource::Cluster)),
    };
    let code = kafka_code_for(response.error.as_ref(), Resource::Cluster);
    let epoch = i16::try_from(response.producer_epoch);
    match epoch {
        Ok(epoch) if code == 0 && response.producer_id > 0 => InitProducerIdResponse::default()
            .with_producer_id(ProducerId(response.producer_id))
            .with_producer_epoch(epoch),
        _ if code != 0 => refusal(code),
        _ => refusal(K::UnknownServerError.code()),
    }
}

fn refusal(code: i16) -> InitProducerIdResponse {
    InitProducerIdResponse::default()
        .with_error_code(code)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1)
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::TransactionalId;
    use kafka_protocol::protocol::StrBytes;
    use tinymq_protocol::ErrorCode;

    use super::*;

    #[test]
    fn an_idempotent_producer_gets_the_native_id_and_epoch() {
        let native = m::InitProducerIdResponse {
            error: None,
            producer_id: 4096,
            producer_epoch: 0,
        };
        let response = respond(Ok(native));
        assert_eq!(
            (
                response.error_code,
                response.producer_id.0,
                response.producer_epoch
            ),
            (0, 4096, 0)
        );
    }

    #[test]
    fn refusals_carry_no_id() {
        let denied = ErrorCode::AUTHORIZATION_FAILED.with_message("no IDEMPOTENT_WRITE");
        let response = respond(Ok(m::InitProducerIdResponse {
            error: Some(denied),
            producer_id: -1,
            producer_epoch: -1,
        }));
        assert_eq!(response.error_code, K::ClusterAuthorizationFailed.code());
        assert_eq!((response.producer_id.0, response.producer_epoch), (-1, -1));
    }

    #[test]
    fn only_a_named_transactional_id_is_transactional() {
        let mut request = InitProducerIdRequest::default();
        assert!(!is_transactional(&request));
        request.transactional_id = Some(TransactionalId(StrBytes::from_static_str("")));
        assert!(!is_transactional(&request));
        request.transactional_id = Some(TransactionalId(StrBytes::from_static_str("tx-1")));
        assert!(is_transactional(&request));
    }
}
