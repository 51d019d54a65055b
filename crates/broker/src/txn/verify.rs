//! KIP-890's server-side defence, part 1: before the first transactional batch of a producer
//! opens a transaction on a partition, the partition's leader asks the producer's coordinator
//! whether that partition is in the producer's open transaction of that epoch. A batch that
//! is late (its transaction already ended), stray, or sent before AddPartitionsToTxn is then
//! refused (INVALID_TXN_STATE) instead of opening a transaction that nobody will end and that
//! would hold the partition's last stable offset back forever.

use std::sync::Arc;
use std::time::Duration;

use tinymq_protocol::{messages as m, ErrorCode};

use super::coordinator::partition_for_txn;
use super::durable::coordinator_epoch;
use super::state::{TxnMetadata, TxnState};
use crate::state::BrokerState;
use tinymq_meta::command::TRANSACTION_TOPIC;

/// How long a leader waits for a remote coordinator's answer.
const VERIFY_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether `(topic, partition)` is in the transaction `m` holds for `producer_id` in
/// `producer_epoch`.
pub fn holds(
    m: &TxnMetadata,
    producer_id: i64,
    producer_epoch: i16,
    topic: &str,
    partition: u32,
) -> bool {
    m.state == TxnState::Ongoing
        && m.producer_id == producer_id
        && m.producer_epoch == producer_epoch
        && m.partitions.contains(&(topic.to_string(), partition))
}

fn not_in_transaction(id: &str, topic: &str, partition: u32) -> m::Error {
    ErrorCode::INVALID_TXN_STATE.with_message(format!(
        "{topic}/{partition} is not in the open transaction of {id:?} for this producer and \
         epoch (add it with AddPartitionsToTxn first; or the transaction ended)"
    ))
}

/// Asks `id`'s coordinator (this broker or another) whether `(topic, partition)` is in the
/// open transaction of `producer_id` in `producer_epoch`.
pub async fn verify(
    state: &Arc<BrokerState>,
    id: &str,
    topic: &str,
    partition: u32,
    producer_id: i64,
    producer_epoch: i16,
) -> Result<(), m::Error> {
    if id.is_empty() {
        return Err(ErrorCode::INVALID_TXN_STATE.with_message(
            "a transactional batch needs the request's transactional_id (the producer's)",
        ));
    }
    let image = state.cluster.image();
    let coordinator = image
        .topics
        .get(TRANSACTION_TOPIC)
        .and_then(|t| t.partitions.get(partition_for_txn(id) as usize))
        .and_then(|p| p.leader)
        .ok_or_else(|| {
            ErrorCode::NOT_ENOUGH_REPLICAS
                .with_message(format!("the coordinator of {id:?} is not available; retry"))
        })?;
    if coordinator == state.node_id() {
        let epoch = coordinator_epoch(state, id)?;
        let known = state.txns.get(id, epoch)?;
        return match known {
            Some(m) if holds(&m, producer_id, producer_epoch, topic, partition) => Ok(()),
            _ => Err(not_in_transaction(id, topic, partition)),
        };
    }
    let request = m::AddPartitionsToTxnRequest {
        transactional_id: id.to_string(),
        producer_id,
        producer_epoch: i32::from(producer_epoch),
        topics: vec![m::TxnTopic {
            topic: topic.to_string(),
            partitions: vec![partition],
        }],
        verify_only: true,
    };
    let connection = state
        .txn_links
        .to(&image, state.node_id(), &state.config.links, coordinator)
        .await?;
    let retry = |e: String| {
        ErrorCode::NOT_ENOUGH_REPLICAS.with_message(format!(
            "the coordinator of {id:?} did not answer ({e}); retry"
        ))
    };
    let answer = connection
        .request(&request, VERIFY_TIMEOUT)
        .await
        .map_err(|e| retry(e.to_string()))?;
    if let Some(e) = answer.error.filter(|e| !e.is_ok()) {
        // The coordinator moved or is loading: the producer retries its batch.
        if e.error_code().is_retriable() {
            return Err(retry(e.to_string()));
        }
        return Err(e);
    }
    match answer.partitions.into_iter().find_map(|p| p.error) {
        Some(e) if !e.is_ok() => Err(e),
        _ => Ok(()),
    }
}
