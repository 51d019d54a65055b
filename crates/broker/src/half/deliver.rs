//! Appending a committed half to its partition exactly once. The coordinator records the
//! decision with the partition's end offset before the append (`resolved`, `scan_from`),
//! appends the records as one batch through the broker's half producer (idempotent, acks =
//! all), each record carrying [`HALF_ID_HEADER`], then records `delivered`. When the append
//! failed, or a new coordinator found the decision without `delivered`, [`recover`] waits
//! until any append still in flight has landed or failed ([`RECOVERY_GRACE`]), reads the
//! partition from `scan_from` for records carrying the half's id, and appends only if none is
//! there.

use std::sync::Arc;
use std::time::Duration;

use tinymq_client::{BatchDelivery, Consumer, ConsumerConfig, ProducerRecord, StartFrom};
use tinymq_protocol::{messages as m, ErrorCode};

use super::durable::{finished, persist};
use super::store::{Half, Outcome};
use super::{HALF_ID_HEADER, HALF_TOPIC};
use crate::internal_client::{HALF_DELIVERY_TIMEOUT, HALF_REQUEST_TIMEOUT};
use crate::state::BrokerState;

/// How long recovery waits before it looks: an append started by the coordinator before
/// (here or on another broker) ends within the producer's delivery timeout plus one request.
pub const RECOVERY_GRACE: Duration = Duration::from_secs(
    APPEND_START_MAX.as_secs()
        + HALF_DELIVERY_TIMEOUT.as_secs()
        + HALF_REQUEST_TIMEOUT.as_secs()
        + 5,
);
/// Longest time from a commit's decision to its batch being handed to the half producer.
pub const APPEND_START_MAX: Duration = Duration::from_secs(5);
/// How long one poll of the recovery scan waits, and how many empty ones in a row end it.
const SCAN_POLL: Duration = Duration::from_millis(500);
const SCAN_EMPTY_POLLS_MAX: u32 = 20;
/// Pause before a failed recovery is tried again.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

fn failed(e: impl std::fmt::Display) -> m::Error {
    ErrorCode::UNKNOWN_SERVER_ERROR.with_message(e.to_string())
}

/// Codes with which a partition refuses a batch and writes nothing: a commit refused so can
/// never be appended, and is rolled back ([`refused`]).
const REFUSALS: &[ErrorCode] = &[
    ErrorCode::MESSAGE_TOO_LARGE,
    ErrorCode::INVALID_RECORD,
    ErrorCode::INVALID_TIMESTAMP,
    ErrorCode::CORRUPT_MESSAGE,
    ErrorCode::UNSUPPORTED_COMPRESSION,
];

/// Whether an append failed because the partition refused the records (nothing written), as
/// opposed to an outcome in doubt.
pub fn refused(e: &m::Error) -> bool {
    REFUSALS.contains(&e.error_code())
}

/// An append's failure: the partition's refusal as it is, anything else in doubt.
fn append_failed(e: tinymq_client::ClientError) -> m::Error {
    match (&e, e.code()) {
        (tinymq_client::ClientError::RecordTooLarge { .. }, _) => {
            ErrorCode::MESSAGE_TOO_LARGE.with_message(e.to_string())
        }
        (_, Some(code)) if REFUSALS.contains(&code) => code.with_message(e.to_string()),
        _ => ErrorCode::REQUEST_TIMED_OUT.with_message(e.to_string()),
    }
}

/// The partition's end offset now, before the half's records are appended.
pub async fn prepare(state: &BrokerState, half: &Half) -> Result<i64, m::Error> {
    let admin = state.internal.admin().map_err(failed)?;
    admin
        .list_offset(&half.topic, half.partition, -1)
        .await
        .map_err(|e| {
            ErrorCode::REQUEST_TIMED_OUT.with_message(format!(
                "cannot read the end offset of {}/{}: {e}; retry",
                half.topic, half.partition
            ))
        })
}

/// A random number for a commit's header (the standard library's random hash keys).
pub fn nonce() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(crate::partition::now_ms())
}

/// The value of [`HALF_ID_HEADER`] for half `id` of partition `index`, committed with
/// `nonce`: `<topic id of __half_messages>.<partition>.<half id>.<nonce>`.
fn half_id_value(state: &BrokerState, index: u32, id: i64, nonce: u64) -> String {
    let half_topic = state
        .cluster
        .image()
        .topics
        .get(HALF_TOPIC)
        .map_or(0, |t| t.id);
    format!("{half_topic}.{index}.{id}.{nonce}")
}

/// Appends the half's records to their partition as one batch; returns its base offset.
/// Gives up before handing the batch to the producer unless this broker still coordinates
/// the partition in the epoch of `at`, and unless the batch is handed over within
/// [`APPEND_START_MAX`]: so an append starts at most that long after it was decided, and
/// lands or fails within the producer's delivery timeout after ([`RECOVERY_GRACE`]).
pub async fn append(
    state: &BrokerState,
    at: (u32, u32),
    id: i64,
    half: &Half,
    nonce: u64,
) -> Result<BatchDelivery, m::Error> {
    match tokio::time::timeout(APPEND_START_MAX, hand_over(state, at, id, half, nonce)).await {
        Ok(handed) => handed,
        Err(_) => Err(ErrorCode::REQUEST_TIMED_OUT.with_message(format!(
            "the append of half {id} did not start within {} ms",
            APPEND_START_MAX.as_millis()
        ))),
    }
}

async fn hand_over(
    state: &BrokerState,
    at: (u32, u32),
    id: i64,
    half: &Half,
    nonce: u64,
) -> Result<BatchDelivery, m::Error> {
    let marker = half_id_value(state, at.0, id, nonce);
    let stored = half.records.clone();
    let records = tokio::task::spawn_blocking(move || super::records::decode_half(stored))
        .await
        .map_err(failed)??
        .into_iter()
        .map(|r| {
            let mut headers: Vec<(String, Option<bytes::Bytes>)> = r
                .headers
                .into_iter()
                .filter(|h| h.key != HALF_ID_HEADER)
                .map(|h| (h.key, h.value))
                .collect();
            headers.push((HALF_ID_HEADER.to_string(), Some(marker.clone().into())));
            ProducerRecord {
                key: r.key,
                value: r.value,
                headers,
                partition: Some(half.partition),
                timestamp_ms: Some(r.timestamp_ms),
            }
        })
        .collect();
    let producer = state.internal.half_producer().map_err(failed)?;
    // The last moment to find out that another broker coordinates the partition now.
    let (_, epoch) = crate::offsets_partitions::led_for_coordination(state, HALF_TOPIC, at.0)?;
    state.halves.with(at.0, Some(at.1), |_| ())?;
    if epoch != at.1
        || state.cluster.image().topics.get(&half.topic).map(|t| t.id) != Some(half.topic_id)
    {
        return Err(ErrorCode::NOT_COORDINATOR.with_message(format!(
            "half {id}: the coordinator or the topic changed before its append"
        )));
    }
    producer
        .send_batch(&half.topic, records)
        .await
        .map_err(append_failed)
}

/// Waits for an append handed over by [`append`]; returns its base offset.
pub async fn landed(delivery: BatchDelivery) -> Result<i64, m::Error> {
    Ok(delivery.await.map_err(append_failed)?.base_offset)
}

/// Records that half `id`'s records are in their partition and forgets it. A failure to
/// record it is only logged: the half stays committing and [`recover`] finds the records.
pub async fn delivered(
    state: &Arc<BrokerState>,
    at: (u32, u32),
    id: i64,
    group: &str,
    base_offset: i64,
) {
    let entry = m::half_log_record::Entry::Delivered(m::HalfDelivered {
        half_id: id,
        base_offset,
    });
    match persist(state, at, group, entry).await {
        Ok(_) => finished(state, at, id, group, Outcome::Committed { base_offset }),
        Err(e) => {
            tracing::warn!(half_id = id, error = %e.message, "recording a delivered half failed; it is looked for again");
            let _ = state.halves.with(at.0, Some(at.1), |p| {
                if let Some(h) = p.get_mut(id) {
                    h.busy = false;
                }
            });
        }
    }
}

/// Finishes committed half `id` (marked busy by the timer) whose append is in doubt.
pub async fn recover(state: Arc<BrokerState>, at: (u32, u32), id: i64, half: Half) {
    let super::store::HalfPhase::Committing {
        scan_from, nonce, ..
    } = half.phase
    else {
        return;
    };
    tokio::time::sleep(RECOVERY_GRACE).await;
    // A few at a time: each reads its partition.
    let Ok(_turn) = state.halves.recoveries.acquire().await else {
        return;
    };
    let outcome = async {
        state.halves.with(at.0, Some(at.1), |_| ())?;
        confirm_log(&state, at).await?;
        if state.cluster.image().topics.get(&half.topic).map(|t| t.id) != Some(half.topic_id) {
            return Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.with_message("topic deleted"));
        }
        let marker = half_id_value(&state, at.0, id, nonce);
        match scan(&state, &half, scan_from, &marker).await? {
            Some(offset) => {
                tracing::warn!(
                    half_id = id,
                    offset,
                    "a committed half left in doubt was found appended"
                );
                Ok(offset)
            }
            None => {
                let offset = landed(append(&state, at, id, &half, nonce).await?).await?;
                tracing::warn!(
                    half_id = id,
                    offset,
                    "a committed half left in doubt was not appended; appended it"
                );
                Ok(offset)
            }
        }
    }
    .await;
    match outcome {
        Ok(base_offset) => delivered(&state, at, id, &half.group, base_offset).await,
        Err(e) if refused(&e) => {
            let _ = super::durable::roll_back_refused(&state, at, id, &half, &e).await;
        }
        Err(e) if e.error_code() == ErrorCode::UNKNOWN_TOPIC_OR_PARTITION => {
            let reason = "topic deleted".to_string();
            let _ = super::durable::roll_back_decided(&state, at, id, &half, reason).await;
        }
        Err(e) => {
            tracing::warn!(half_id = id, error = %e.message, "finishing a committed half failed; retrying");
            tokio::time::sleep(RETRY_PAUSE).await;
            let _ = state.halves.with(at.0, Some(at.1), |p| {
                if let Some(h) = p.get_mut(id) {
                    h.busy = false;
                }
            });
        }
    }
}

/// Waits until every in-sync replica holds this leader's whole `__half_messages` partition
/// (the commit's decision included) before recovery acts on it.
async fn confirm_log(state: &BrokerState, at: (u32, u32)) -> Result<(), m::Error> {
    let (partition, epoch) =
        crate::offsets_partitions::led_for_coordination(state, HALF_TOPIC, at.0)?;
    if epoch != at.1 {
        return Err(ErrorCode::NOT_COORDINATOR.with_message("led in a new epoch"));
    }
    let end = partition.log.log_end_offset();
    crate::offsets_partitions::await_coordination_replicas(&partition, end, epoch).await
}

/// The offset of the first record in the half's partition, from `from` to its end now,
/// carrying `marker` in [`HALF_ID_HEADER`].
async fn scan(
    state: &BrokerState,
    half: &Half,
    from: i64,
    marker: &str,
) -> Result<Option<i64>, m::Error> {
    let admin = state.internal.admin().map_err(failed)?;
    let (topic, partition) = (half.topic.as_str(), half.partition);
    let end = admin
        .list_offset(topic, partition, -1)
        .await
        .map_err(failed)?;
    if from >= end {
        return Ok(None);
    }
    let mut config = ConsumerConfig::new("");
    config.client = state.internal.client_config();
    config.start_from = StartFrom::Earliest;
    config.auto_commit_interval = None;
    let mut consumer = Consumer::new(config).map_err(failed)?;
    consumer
        .assign(topic, Some(vec![partition]))
        .await
        .map_err(failed)?;
    consumer.seek(topic, partition, from).map_err(failed)?;
    let mut empty_polls = 0;
    while consumer.position(topic, partition).unwrap_or(from) < end {
        let records = consumer.poll(SCAN_POLL).await.map_err(failed)?;
        if records.is_empty() {
            empty_polls += 1;
            if empty_polls >= SCAN_EMPTY_POLLS_MAX {
                return Err(failed(format!(
                    "the scan of {topic}/{partition} for a committed half stopped short of offset {end}"
                )));
            }
            continue;
        }
        empty_polls = 0;
        let found = records.iter().find(|r| {
            r.offset < end
                && r.headers
                    .iter()
                    .any(|(k, v)| k == HALF_ID_HEADER && v.as_deref() == Some(marker.as_bytes()))
        });
        if let Some(record) = found {
            return Ok(Some(record.offset));
        }
    }
    Ok(None)
}
