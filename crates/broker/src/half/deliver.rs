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

use tinymq_client::{Consumer, ConsumerConfig, ProducerRecord, StartFrom};
use tinymq_protocol::{messages as m, ErrorCode};

use super::durable::{finished, persist};
use super::store::{Half, Outcome};
use super::{HALF_ID_HEADER, HALF_TOPIC};
use crate::internal_client::{HALF_DELIVERY_TIMEOUT, HALF_REQUEST_TIMEOUT};
use crate::state::BrokerState;

/// How long recovery waits before it looks: an append started by the coordinator before
/// (here or on another broker) ends within the producer's delivery timeout plus one request.
pub const RECOVERY_GRACE: Duration =
    Duration::from_secs(HALF_DELIVERY_TIMEOUT.as_secs() + HALF_REQUEST_TIMEOUT.as_secs() + 5);
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

/// The topic's id and the partition's end offset now, before the half's records are
/// appended.
pub async fn prepare(state: &BrokerState, half: &Half) -> Result<(i64, u64), m::Error> {
    let topic_id = state
        .cluster
        .image()
        .topics
        .get(&half.topic)
        .map(|t| t.id)
        .ok_or_else(|| {
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.with_message(format!(
                "topic {} no longer exists; roll the half back",
                half.topic
            ))
        })?;
    let admin = state.internal.admin().map_err(failed)?;
    let end = admin
        .list_offset(&half.topic, half.partition, -1)
        .await
        .map_err(|e| {
            ErrorCode::REQUEST_TIMED_OUT.with_message(format!(
                "cannot read the end offset of {}/{}: {e}; retry",
                half.topic, half.partition
            ))
        })?;
    Ok((end, topic_id))
}

/// The value of [`HALF_ID_HEADER`] for half `id` of partition `index`.
fn half_id_value(state: &BrokerState, index: u32, id: i64) -> String {
    let half_topic = state
        .cluster
        .image()
        .topics
        .get(HALF_TOPIC)
        .map_or(0, |t| t.id);
    format!("{half_topic}.{index}.{id}")
}

/// Appends the half's records to their partition as one batch; returns its base offset.
pub async fn append(
    state: &BrokerState,
    index: u32,
    id: i64,
    half: &Half,
    topic_id: u64,
) -> Result<i64, m::Error> {
    let current = state.cluster.image().topics.get(&half.topic).map(|t| t.id);
    if current != Some(topic_id) {
        return Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.with_message(format!(
            "topic {} was deleted after the commit was decided",
            half.topic
        )));
    }
    let marker = half_id_value(state, index, id);
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
    let delivery = producer
        .send_batch(&half.topic, records)
        .await
        .map_err(append_failed)?;
    let landed = delivery.await.map_err(append_failed)?;
    Ok(landed.base_offset)
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
                if let Some(h) = p.halves.get_mut(&id) {
                    h.busy = false;
                }
            });
        }
    }
}

/// Finishes committed half `id` (marked busy by the timer) whose append is in doubt.
pub async fn recover(state: Arc<BrokerState>, at: (u32, u32), id: i64, half: Half) {
    let super::store::HalfPhase::Committing {
        scan_from,
        topic_id,
    } = half.phase
    else {
        return;
    };
    tokio::time::sleep(RECOVERY_GRACE).await;
    let outcome = async {
        if state.halves.with(at.0, Some(at.1), |_| ()).is_err() {
            return Err(ErrorCode::NOT_COORDINATOR.with_message("no longer coordinated here"));
        }
        if state.cluster.image().topics.get(&half.topic).map(|t| t.id) != Some(topic_id) {
            tracing::warn!(half_id = id, topic = %half.topic, "a committed half's topic was deleted; nothing to append");
            return Ok(-1);
        }
        let marker = half_id_value(&state, at.0, id);
        match scan(&state, &half, scan_from, &marker).await? {
            Some(offset) => {
                tracing::warn!(half_id = id, offset, "a committed half left in doubt was found appended");
                Ok(offset)
            }
            None => {
                let offset = append(&state, at.0, id, &half, topic_id).await?;
                tracing::warn!(half_id = id, offset, "a committed half left in doubt was not appended; appended it");
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
        Err(e) => {
            tracing::warn!(half_id = id, error = %e.message, "finishing a committed half failed; retrying");
            tokio::time::sleep(RETRY_PAUSE).await;
            let _ = state.halves.with(at.0, Some(at.1), |p| {
                if let Some(h) = p.halves.get_mut(&id) {
                    h.busy = false;
                }
            });
        }
    }
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
