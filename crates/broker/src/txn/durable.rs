//! Where a transactional id's changes are made durable: finding its coordinator (creating
//! `__transaction_state` on first use), the coordinator epoch, and [`change`], the one way the
//! coordinator's state changes (decide, write to the log, wait for every in-sync replica,
//! apply).

use std::sync::Arc;
use std::time::Duration;

use tinymq_protocol::{messages as m, ErrorCode};

use super::coordinator::{self, partition_for_txn, TRANSACTION_PARTITIONS};
use super::log;
use super::state;
use crate::partition::now_ms;
use crate::state::BrokerState;
use tinymq_meta::command::TRANSACTION_TOPIC;

/// How long InitProducerId and FindCoordinator wait for a new `__transaction_state` to appear.
const TRANSACTION_TOPIC_WAIT: Duration = Duration::from_secs(10);

/// The broker coordinating `transactional_id`, creating `__transaction_state` on first use.
pub async fn coordinator_of(
    state: &Arc<BrokerState>,
    transactional_id: &str,
) -> Result<tinymq_meta::image::BrokerRecord, m::Error> {
    let ensure = tinymq_meta::Command::EnsureTransactionTopic {
        partitions: TRANSACTION_PARTITIONS,
    };
    crate::offsets_partitions::coordinator_in(
        state,
        (TRANSACTION_TOPIC, ensure, TRANSACTION_TOPIC_WAIT),
        partition_for_txn(transactional_id),
        &format!("transactional id {transactional_id}"),
    )
    .await
}

/// The leader epoch of `transactional_id`'s partition if this broker leads it (by the image),
/// else `NOT_COORDINATOR`: the coordinator epoch every change of the id is made in.
pub(crate) fn coordinator_epoch(
    state: &BrokerState,
    transactional_id: &str,
) -> Result<u32, m::Error> {
    let index = partition_for_txn(transactional_id);
    state
        .led_partition_any(TRANSACTION_TOPIC, index)
        .map(|(_, epoch)| epoch)
        .map_err(|e| {
            ErrorCode::NOT_COORDINATOR.with_message(format!(
                "transactional id {transactional_id} is not coordinated here \
                 ({TRANSACTION_TOPIC}/{index}): {}",
                e.message
            ))
        })
}

/// Writes `metadata` (None: a tombstone) for `id` to its partition as its leader in the
/// ticket's epoch and waits until every in-sync replica holds it.
pub(crate) async fn persist(
    state: &Arc<BrokerState>,
    id: &str,
    ticket: coordinator::Ticket,
    metadata: Option<&state::TxnMetadata>,
) -> Result<(), m::Error> {
    let (partition, epoch) = crate::offsets_partitions::led_for_coordination(
        state,
        TRANSACTION_TOPIC,
        ticket.partition,
    )?;
    if epoch != ticket.coordinator_epoch {
        return Err(ErrorCode::NOT_COORDINATOR.with_message(format!(
            "{TRANSACTION_TOPIC}/{} is led in a new epoch; find the coordinator again",
            ticket.partition
        )));
    }
    let batch = log::encode_batch(id, metadata, now_ms())
        .map_err(|e| ErrorCode::UNKNOWN_SERVER_ERROR.with_message(e.to_string()))?;
    crate::offsets_partitions::write_replicated(state, &partition, epoch, batch)
        .await
        .map(drop)
        .map_err(|e| e.error)
}

/// Makes `id`'s change decided by `decide` durable and applies it: the one way the
/// coordinator's state changes. Returns the durable state (None: nothing changed) and what
/// `decide` answered.
pub(crate) async fn change<T>(
    state: &Arc<BrokerState>,
    id: &str,
    decide: impl FnOnce(
        Option<&state::TxnMetadata>,
    ) -> Result<(Option<state::TxnMetadata>, T), m::Error>,
) -> Result<(Option<(coordinator::Ticket, state::TxnMetadata)>, T), m::Error> {
    let epoch = coordinator_epoch(state, id)?;
    let (begun, answer) = state.txns.begin(id, epoch, decide)?;
    let Some((ticket, next)) = begun else {
        return Ok((None, answer));
    };
    match persist(state, id, ticket, Some(&next)).await {
        Ok(()) => {
            state.txns.finish(id, ticket, Some(next.clone()));
            Ok((Some((ticket, next)), answer))
        }
        Err(e) => {
            state.txns.finish(id, ticket, None);
            Err(e)
        }
    }
}

/// A refusal from the state machine as a wire error.
pub(crate) fn wire(e: state::TxnError) -> m::Error {
    e.code.with_message(e.message)
}
