//! Data handlers: produce, fetch, list offsets, producer ids; each from a decoded request to
//! its response, through the partition service layer (`crate::service`: the checks, writes,
//! reads and long poll live there, shared with every other writer and reader). Only a
//! partition's leader serves it (others answer `NOT_LEADER` naming the leader). Slow disk work
//! runs on blocking threads; no lock is held across an `.await`.

use std::sync::Arc;
use std::time::Duration;

use tinymq_protocol::batch::field;
use tinymq_protocol::{messages as m, ErrorCode};

use crate::service::append::{append, await_append, Written, PRODUCE_TIMEOUT_DEFAULT};
use crate::service::fetch::{
    long_poll, read_each, refused, FetchAnswer, FetchHold, PartitionReader,
};
use crate::service::read::{
    count_consumed, list_partition_offset, read_for_consumer, Isolation, PartitionRead,
};
use crate::service::{blocking, leader_hint, too_many_partitions};
use crate::state::BrokerState;

fn ok() -> Option<m::Error> {
    None
}

fn err(code: ErrorCode, message: impl Into<String>) -> Option<m::Error> {
    Some(code.with_message(message))
}

/// One partition of a produce request after its write: where to wait, or why it failed.
/// Topic, partition, the leader to name with a `NOT_LEADER` (0 otherwise), and the outcome.
type PartitionWrite = (String, u32, u32, Written);

/// A produce request whose batches are written and that waits for the flush policy.
pub struct PreparedProduce {
    state: Arc<BrokerState>,
    /// Where the partitions' errors are counted (the listener that carried the request).
    stats: Arc<tinymq_net::ConnectionStats>,
    acks: i32,
    timeout: Duration,
    partitions: Vec<PartitionWrite>,
}

impl PreparedProduce {
    pub fn acks(&self) -> i32 {
        self.acks
    }
}

/// The first half of a produce: checks and writes every partition's batches, in request order.
/// The connection runs this before reading its next frame, so the produce requests of one
/// connection are stored in the order they were sent, whatever their `acks`.
/// KIP-890's verification: a transactional batch that would open its producer's transaction
/// on a partition led here is written only once the producer's coordinator confirms that the
/// partition is in that transaction (see `txn::verify`). Anything else passes untouched: the
/// partition checks the batch itself.
async fn verify_transactional(
    state: &Arc<BrokerState>,
    transactional_id: &str,
    topic: &str,
    partition: u32,
    records: &bytes::Bytes,
) -> Result<(), m::Error> {
    let Some(header) = tinymq_protocol::batch::BatchHeader::new(records) else {
        return Ok(());
    };
    if !header.is_transactional() || header.is_control() || header.producer_id() < 0 {
        return Ok(());
    }
    let (producer_id, epoch) = (header.producer_id(), header.producer_epoch());
    let Ok((led, _)) = state.led_partition(topic, partition) else {
        return Ok(());
    };
    if !led.needs_txn_verification(producer_id, epoch) {
        return Ok(());
    }
    crate::txn::verify::verify(
        state,
        transactional_id,
        topic,
        partition,
        producer_id,
        epoch,
    )
    .await?;
    led.txn_verified(producer_id, epoch)
        .map_err(|e| e.code.with_message(e.message))
}

pub async fn produce_write(
    state: Arc<BrokerState>,
    req: m::ProduceRequest,
    stats: Arc<tinymq_net::ConnectionStats>,
) -> Result<PreparedProduce, m::ProduceResponse> {
    if !matches!(req.acks, -1..=1) {
        return Err(m::ProduceResponse {
            error: err(
                ErrorCode::INVALID_REQUIRED_ACKS,
                format!("acks must be -1, 0 or 1, got {}", req.acks),
            ),
            partitions: vec![],
        });
    }
    // 0 (proto3's "absent") is the default wait, not an instant timeout.
    let timeout = match req.timeout_ms {
        0 => PRODUCE_TIMEOUT_DEFAULT,
        ms => Duration::from_millis(u64::from(ms)),
    }
    .min(state.config.produce_timeout_max);
    let acks = req.acks;
    if let Some(refusal) = too_many_partitions(req.partitions.len()) {
        return Err(m::ProduceResponse {
            error: Some(refusal),
            partitions: vec![],
        });
    }
    await_producer_ids(&state, &req).await;
    let producer_id_end = state.cluster.image().next_producer_id;
    let mut partitions = Vec::with_capacity(req.partitions.len());
    for p in req.partitions {
        let verified = verify_transactional(
            &state,
            &req.transactional_id,
            &p.topic,
            p.partition,
            &p.records,
        )
        .await;
        let outcome = match verified {
            Ok(()) => {
                append(
                    &state,
                    &p.topic,
                    p.partition,
                    p.records,
                    acks,
                    producer_id_end,
                )
                .await
            }
            Err(e) => Err(e),
        };
        let hint = match &outcome {
            Err(e) => leader_hint(&state, &p.topic, p.partition, e),
            Ok(_) => 0,
        };
        partitions.push((p.topic, p.partition, hint, outcome));
    }
    Ok(PreparedProduce {
        state,
        stats,
        acks,
        timeout,
        partitions,
    })
}

/// The second half: waits (concurrently across partitions) for each write to meet its flush
/// policy, and builds the response.
pub async fn produce_finish(prepared: PreparedProduce) -> m::ProduceResponse {
    let (timeout, acks) = (prepared.timeout, prepared.acks);
    let (state, prepared_stats) = (prepared.state, prepared.stats);
    let mut results = Vec::with_capacity(prepared.partitions.len());
    if prepared.partitions.len() == 1 {
        // Nothing to wait for concurrently: no task to spawn and hand the wait to.
        for (topic, partition, hint, written) in prepared.partitions {
            let outcome = await_append(state.clone(), acks, timeout, written).await;
            results.push(partition_result(topic, partition, hint, outcome));
        }
    } else {
        let waits: Vec<_> = prepared
            .partitions
            .into_iter()
            .map(|(topic, partition, hint, written)| {
                let task = tokio::spawn(await_append(state.clone(), acks, timeout, written));
                (topic, partition, hint, task)
            })
            .collect();
        for (topic, partition, hint, task) in waits {
            let outcome = task.await.unwrap_or_else(|e| {
                Err(ErrorCode::UNKNOWN_SERVER_ERROR.with_message(e.to_string()))
            });
            results.push(partition_result(topic, partition, hint, outcome));
        }
    }
    for result in &results {
        if let Some(error) = &result.error {
            let requests = &prepared_stats.requests;
            requests.record_error(tinymq_protocol::OpCode::Produce, error.code);
        }
    }
    m::ProduceResponse {
        error: ok(),
        partitions: results,
    }
}

fn partition_result(
    topic: String,
    partition: u32,
    current_leader: u32,
    outcome: Result<(i64, i64), m::Error>,
) -> m::ProducePartitionResult {
    let (error, base_offset, log_start_offset) = match outcome {
        Ok((offset, log_start)) => (None, offset, log_start),
        Err(e) => (Some(e), -1, -1),
    };
    m::ProducePartitionResult {
        topic,
        partition,
        error,
        base_offset,
        log_append_time_ms: -1,
        log_start_offset,
        current_leader,
    }
}

/// How long a produce naming a producer id this broker's image does not cover yet waits for
/// the image to catch up: the id may come from a block another broker was just given, and the
/// image here follows the MetaServer by a long poll.
const PRODUCER_ID_VISIBLE_WAIT: Duration = Duration::from_secs(2);

/// Waits (up to [`PRODUCER_ID_VISIBLE_WAIT`]) until this broker's image covers the largest
/// producer id the request's batches carry, so that an id handed out a moment ago is not
/// refused as never handed out; an id that really never was is refused after the wait.
async fn await_producer_ids(state: &BrokerState, req: &m::ProduceRequest) {
    let newest = req
        .partitions
        .iter()
        .filter_map(|p| p.records.get(field::PRODUCER_ID..field::PRODUCER_ID + 8))
        .filter_map(|b| b.try_into().ok().map(i64::from_be_bytes))
        .max();
    let Some(newest) = newest.filter(|id| *id >= state.cluster.image().next_producer_id) else {
        return;
    };
    state
        .cluster
        .wait_until(PRODUCER_ID_VISIBLE_WAIT, |image| {
            image.next_producer_id > newest
        })
        .await;
}

/// A consumer's reads: below the high watermark (the last stable offset under read
/// committed), waking when it moves (a marker moving the last stable offset wakes the same
/// watch).
#[derive(Clone)]
struct ConsumerReads(Isolation);

impl PartitionReader for ConsumerReads {
    fn read(
        &self,
        state: &BrokerState,
        req: &m::FetchRequest,
        budget: usize,
    ) -> Vec<PartitionRead> {
        read_each(req, budget, |_, fp, left| {
            read_for_consumer(state, fp, left, self.0)
        })
    }

    fn answered(
        &self,
        state: &BrokerState,
        stats: &tinymq_net::ConnectionStats,
        results: &[PartitionRead],
    ) {
        count_consumed(state, stats, results);
    }
}

/// Answers a fetch: a follower's (`replica_id` set) in `crate::replica::serve`, a filtered one
/// in `crate::filtered_fetch`, a consumer's here; each waits in the same long poll
/// ([`long_poll`]) under the connection's fetch turn `turns`.
pub(crate) async fn fetch(
    state: Arc<BrokerState>,
    req: m::FetchRequest,
    turns: Arc<tokio::sync::Semaphore>,
    stats: Arc<tinymq_net::ConnectionStats>,
) -> (FetchAnswer, Option<FetchHold>) {
    if let Some(refusal) = too_many_partitions(req.partitions.len()) {
        return refused(refusal);
    }
    // Followers read every batch whatever the level they send.
    let isolation = match Isolation::of(req.isolation_level) {
        Ok(isolation) => isolation,
        Err(_) if req.replica_id != 0 => Isolation::ReadUncommitted,
        Err(refusal) => return refused(refusal),
    };
    match crate::filtered_fetch::request_filter(&req, isolation) {
        Err(refusal) => refused(refusal),
        Ok(Some(scan)) => long_poll(state, req, turns, scan, stats).await,
        Ok(None) if req.replica_id != 0 => {
            crate::replica::serve::fetch(state, req, turns, stats).await
        }
        Ok(None) => long_poll(state, req, turns, ConsumerReads(isolation), stats).await,
    }
}

pub async fn list_offsets(
    state: Arc<BrokerState>,
    req: m::ListOffsetsRequest,
) -> m::ListOffsetsResponse {
    if let Some(refusal) = too_many_partitions(req.partitions.len()) {
        return m::ListOffsetsResponse {
            error: Some(refusal),
            partitions: vec![],
        };
    }
    let isolation = match Isolation::of(req.isolation_level) {
        Ok(isolation) => isolation,
        Err(refusal) => {
            return m::ListOffsetsResponse {
                error: Some(refusal),
                partitions: vec![],
            }
        }
    };
    let result = blocking(move || {
        req.partitions
            .into_iter()
            .map(|lp| {
                let mut out = m::ListOffsetsPartitionResult {
                    topic: lp.topic.clone(),
                    partition: lp.partition,
                    error: ok(),
                    offset: -1,
                    timestamp: -1,
                    current_leader: 0,
                };
                let p = match state.led_partition(&lp.topic, lp.partition) {
                    Ok((p, _)) => p,
                    Err(e) => {
                        out.current_leader = leader_hint(&state, &lp.topic, lp.partition, &e);
                        out.error = Some(e);
                        return out;
                    }
                };
                match list_partition_offset(&p, lp.timestamp, isolation) {
                    Ok((offset, timestamp)) => (out.offset, out.timestamp) = (offset, timestamp),
                    Err(e) => out.error = Some(e),
                }
                out
            })
            .collect()
    })
    .await;
    match result {
        Ok(partitions) => m::ListOffsetsResponse {
            error: ok(),
            partitions,
        },
        Err(e) => m::ListOffsetsResponse {
            error: Some(e),
            partitions: vec![],
        },
    }
}

pub async fn init_producer_id(
    state: Arc<BrokerState>,
    req: m::InitProducerIdRequest,
) -> m::InitProducerIdResponse {
    if !req.transactional_id.is_empty() {
        return crate::txn_handlers::init_producer_id(&state, &req).await;
    }
    match state.cluster.allocate_producer_id().await {
        Ok(producer_id) => m::InitProducerIdResponse {
            error: ok(),
            producer_id,
            producer_epoch: 0,
        },
        Err(e) => m::InitProducerIdResponse {
            error: Some(e),
            producer_id: -1,
            producer_epoch: -1,
        },
    }
}
