//! The coordinator's requests, each a [`change`] of one transactional id through the rules of
//! [`super::state`], and its timer: transactions past their timeout are aborted (with the
//! producer fenced), ids idle past `TRANSACTIONAL_ID_EXPIRATION` are forgotten.

use std::sync::Arc;
use std::time::Duration;

use tinymq_protocol::{messages as m, ErrorCode};

use super::durable::{change, wire};
use super::markers;
use super::state::{self, EndStep, InitStep, TxnMetadata, TxnPartition, TxnState};
use crate::partition::now_ms;
use crate::state::BrokerState;

/// An id whose last transaction ended this long ago is forgotten (Kafka's
/// `transactional.id.expiration.ms`, 7 days).
pub const TRANSACTIONAL_ID_EXPIRATION: Duration = Duration::from_secs(7 * 24 * 3600);
/// Most transactional ids one DescribeTransactions names.
pub const DESCRIBE_TRANSACTIONS_IDS_MAX: usize = 1000;

/// InitProducerId for a transactional id: the id's producer id and its bumped epoch.
pub async fn init_producer_id(
    state: &Arc<BrokerState>,
    request: &m::InitProducerIdRequest,
) -> Result<(i64, i16), m::Error> {
    // An open transaction of an earlier instance is aborted first: wait for that too.
    settled(state, || init_once(state, request)).await
}

async fn init_once(
    state: &Arc<BrokerState>,
    request: &m::InitProducerIdRequest,
) -> Result<(i64, i16), m::Error> {
    let id = request.transactional_id.as_str();
    let expected = if request.producer_id >= 0 && request.producer_epoch >= 0 {
        let epoch = i16::try_from(request.producer_epoch).map_err(|_| bad_epoch())?;
        Some((request.producer_id, epoch))
    } else {
        None
    };
    let timeout = request.transaction_timeout_ms;
    let mut fresh = None;
    // At most twice: once to learn that a producer id is needed, once with it.
    for _ in 0..2 {
        let (changed, step) = change(state, id, |current| {
            let step = state::init_producer_id(current, timeout, expected, fresh, now_ms())
                .map_err(wire)?;
            let next = match &step {
                InitStep::Ready(m) | InitStep::AbortFirst(m) => Some(m.clone()),
                InitStep::NeedProducerId => None,
            };
            Ok((next, step))
        })
        .await?;
        match step {
            InitStep::NeedProducerId => fresh = Some(state.cluster.allocate_producer_id().await?),
            InitStep::Ready(m) => return Ok((m.producer_id, m.producer_epoch)),
            InitStep::AbortFirst(_) => {
                if let Some((ticket, m)) = changed {
                    tokio::spawn(markers::complete(state.clone(), id.to_string(), ticket, m));
                }
                return Err(ErrorCode::CONCURRENT_TRANSACTIONS.with_message(
                    "the previous instance left a transaction open: it is being aborted; retry",
                ));
            }
        }
    }
    Err(ErrorCode::CONCURRENT_TRANSACTIONS
        .with_message("the transactional id changed while a producer id was allocated; retry"))
}

/// How long a request that finds its id between states (the last transaction's markers
/// being written) waits for it to settle before it is answered CONCURRENT_TRANSACTIONS: the
/// next transaction's first AddPartitionsToTxn usually arrives while the markers of the one
/// just ended are written, and a refusal would cost the client its retry backoff.
const SETTLE_WAIT_MAX: Duration = Duration::from_secs(2);

/// Runs `attempt` again after each durable change while it fails with
/// CONCURRENT_TRANSACTIONS, for at most [`SETTLE_WAIT_MAX`].
async fn settled<T, F, Fut>(state: &Arc<BrokerState>, mut attempt: F) -> Result<T, m::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, m::Error>>,
{
    let deadline = tokio::time::Instant::now() + SETTLE_WAIT_MAX;
    loop {
        let changed = state.txns.changed();
        tokio::pin!(changed);
        changed.as_mut().enable();
        match attempt().await {
            Err(e)
                if e.error_code() == ErrorCode::CONCURRENT_TRANSACTIONS
                    && tokio::time::Instant::now() < deadline =>
            {
                // A change made durable meanwhile, or the deadline, ends the wait.
                let _ = tokio::time::timeout_at(deadline, changed).await;
            }
            other => return other,
        }
    }
}

/// AddPartitionsToTxn and AddOffsetsToTxn (whose partition is the group's offsets partition).
pub async fn add_partitions(
    state: &Arc<BrokerState>,
    id: &str,
    producer_id: i64,
    producer_epoch: i16,
    partitions: &[TxnPartition],
) -> Result<(), m::Error> {
    settled(state, || async {
        change(state, id, |current| {
            let m = current.ok_or_else(unknown_id)?;
            let next = state::add_partitions(m, producer_id, producer_epoch, partitions, now_ms())
                .map_err(wire)?;
            Ok((next, ()))
        })
        .await
        .map(|_| ())
    })
    .await
}

/// EndTxn: decides the transaction (durably) and starts writing its markers; the answer does
/// not wait for them (a next AddPartitionsToTxn meanwhile is CONCURRENT_TRANSACTIONS).
pub async fn end_txn(state: &Arc<BrokerState>, request: &m::EndTxnRequest) -> Result<(), m::Error> {
    settled(state, || end_once(state, request)).await
}

async fn end_once(state: &Arc<BrokerState>, request: &m::EndTxnRequest) -> Result<(), m::Error> {
    let id = request.transactional_id.as_str();
    let epoch = i16::try_from(request.producer_epoch).map_err(|_| bad_epoch())?;
    let (changed, _) = change(state, id, |current| {
        let m = current.ok_or_else(unknown_id)?;
        match state::end_txn(m, request.producer_id, epoch, request.commit, now_ms())
            .map_err(wire)?
        {
            EndStep::Done => Ok((None, ())),
            EndStep::Prepare(next) => Ok((Some(next), ())),
        }
    })
    .await?;
    if let Some((ticket, m)) = changed {
        tokio::spawn(markers::complete(state.clone(), id.to_string(), ticket, m));
    }
    Ok(())
}

pub(crate) fn bad_epoch() -> m::Error {
    ErrorCode::INVALID_REQUEST.with_message("producer_epoch must fit in 16 bits")
}

fn unknown_id() -> m::Error {
    ErrorCode::INVALID_PRODUCER_ID_MAPPING
        .with_message("this transactional id has no producer: call InitProducerId first")
}

/// The wire form of an id's state.
pub fn describe_one(id: &str, m: &TxnMetadata, coordinator: u32) -> m::TransactionState {
    let mut topics: Vec<m::TxnTopic> = Vec::new();
    for (topic, partition) in &m.partitions {
        match topics.last_mut() {
            Some(t) if &t.topic == topic => t.partitions.push(*partition),
            _ => topics.push(m::TxnTopic {
                topic: topic.clone(),
                partitions: vec![*partition],
            }),
        }
    }
    m::TransactionState {
        transactional_id: id.to_string(),
        error: None,
        state: m.state.name().to_string(),
        producer_id: m.producer_id,
        producer_epoch: i32::from(m.producer_epoch),
        timeout_ms: m.timeout_ms,
        start_ms: m.start_ms,
        topics,
        coordinator,
    }
}

/// DescribeTransactions: each id's state, or why this broker cannot say.
pub fn describe(state: &Arc<BrokerState>, ids: &[String]) -> Vec<m::TransactionState> {
    ids.iter()
        .take(DESCRIBE_TRANSACTIONS_IDS_MAX)
        .map(|id| {
            let found = super::durable::coordinator_epoch(state, id)
                .and_then(|epoch| state.txns.get(id, epoch))
                .and_then(|m| {
                    m.ok_or_else(|| {
                        ErrorCode::TRANSACTIONAL_ID_NOT_FOUND
                            .with_message(format!("no transactional id {id}"))
                    })
                });
            match found {
                Ok(m) => describe_one(id, &m, state.node_id()),
                Err(error) => m::TransactionState {
                    transactional_id: id.clone(),
                    error: Some(error),
                    producer_id: -1,
                    producer_epoch: -1,
                    start_ms: -1,
                    ..Default::default()
                },
            }
        })
        .collect()
}

/// ListTransactions: the ids coordinated here that pass the request's filters.
pub fn list(
    state: &Arc<BrokerState>,
    request: &m::ListTransactionsRequest,
) -> Vec<m::TransactionState> {
    let now = now_ms();
    state
        .txns
        .all()
        .into_iter()
        .filter(|(_, m, _)| {
            (request.states.is_empty() || request.states.iter().any(|s| s == m.state.name()))
                && (request.producer_ids.is_empty()
                    || request.producer_ids.contains(&m.producer_id))
                && (request.duration_min_ms <= 0
                    || (m.state == TxnState::Ongoing
                        && now.saturating_sub(m.start_ms) >= request.duration_min_ms))
        })
        .map(|(id, m, _)| describe_one(&id, &m, state.node_id()))
        .collect()
}

/// The coordinator's timer (every second): aborts transactions open past their timeout and
/// forgets ids idle past [`TRANSACTIONAL_ID_EXPIRATION`].
pub async fn tick(state: &Arc<BrokerState>) {
    let now = now_ms();
    let expiration_ms = TRANSACTIONAL_ID_EXPIRATION.as_millis() as i64;
    for (id, m, _) in state.txns.all() {
        if state::timed_out(&m, now).is_some() {
            abort_timed_out(state, &id).await;
        } else if matches!(
            m.state,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        ) && now.saturating_sub(m.update_ms) > expiration_ms
        {
            expire(state, &id, m.update_ms).await;
        }
    }
}

async fn abort_timed_out(state: &Arc<BrokerState>, id: &str) {
    let changed = change(state, id, |current| {
        Ok((current.and_then(|m| state::timed_out(m, now_ms())), ()))
    })
    .await;
    match changed {
        Ok((Some((ticket, m)), ())) => {
            tracing::info!(
                transactional_id = id,
                producer_id = m.producer_id,
                epoch = m.producer_epoch,
                "aborting a transaction that passed its timeout"
            );
            tokio::spawn(markers::complete(state.clone(), id.to_string(), ticket, m));
        }
        Ok((None, ())) => {}
        Err(e) => {
            tracing::debug!(transactional_id = id, error = %e, "could not abort a timed-out transaction yet")
        }
    }
}

/// Writes the tombstone of `id` if it is still idle since `update_ms`.
async fn expire(state: &Arc<BrokerState>, id: &str, update_ms: i64) {
    let Ok(epoch) = super::durable::coordinator_epoch(state, id) else {
        return;
    };
    let begun = state.txns.begin(id, epoch, |current| {
        let idle = current.is_some_and(|m| m.update_ms == update_ms);
        Ok((current.filter(|_| idle).cloned(), ()))
    });
    let Ok((Some((ticket, m)), ())) = begun else {
        return;
    };
    match super::durable::persist(state, id, ticket, None).await {
        Ok(()) => state.txns.forget(id, ticket),
        Err(_) => state.txns.finish(id, ticket, Some(m)),
    }
}
