//! The share groups' background task: every [`SHARE_TICK_MS`] it drops the state of
//! partitions no longer led here, expires acquisition locks (waking long polls), rewrites
//! state logs grown past their bound, and starts dead-lettering where records wait for it:
//! the records are read from the partition, written to the dead-letter topic (created with
//! the source's partition count and replication if missing) through the broker's internal
//! idempotent producer with the origin headers, and only then marked done in the state log:
//! only the records written (each on its own: one refused copy does not hold back the others)
//! and those proven gone from the source log (below its start offset) are marked; a read or
//! decode error fails the pass, retried after [`DEAD_LETTER_RETRY_MS`]. A crash between the
//! two writes the records to the dead-letter topic again on restart.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tinymq_client::ProducerRecord;
use tinymq_protocol::batch::{BatchError, BatchIter, Record};
use tinymq_protocol::messages as m;
use tinymq_share::DeadLetterReason;
use tokio_util::sync::CancellationToken;

use super::registry::SharedPartition;
use super::store::STATE_LOG_REWRITE_BYTES;
use crate::state::BrokerState;

/// How often locks are checked for expiry (an expired record waits at most this long).
pub const SHARE_TICK_MS: u64 = 100;
/// Records one dead-lettering pass of a share partition writes.
pub const DEAD_LETTERS_PER_PASS_MAX: usize = 500;
/// Bytes read per read of records to dead-letter.
const DEAD_LETTER_READ_BYTES: usize = 1 << 20;
/// After a failed dead-lettering pass of a share partition, the next waits this long.
pub const DEAD_LETTER_RETRY_MS: i64 = 1_000;
/// Every this many ticks (1 s) the state logs of partitions led here are loaded if they are
/// not yet: after a start or a leader change, records waiting for the dead-letter topic are
/// written and the state is described without waiting for a member's fetch.
const LOAD_EVERY_TICKS: u32 = 10;
/// Decompressed bytes one batch may take when it is decoded for dead-lettering.
const DEAD_LETTER_DECOMPRESSED_BYTES_MAX: usize = 64 << 20;
/// Record bytes (keys, values, headers) one dead-lettering pass keeps: reading stops once
/// they pass it; the rest waits for the next pass.
pub const DEAD_LETTER_PASS_BYTES_MAX: usize = 16 << 20;

/// Background work (lock expiry, log rewrites, dead-lettering), until `shutdown`.
pub async fn run(state: Arc<BrokerState>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_millis(SHARE_TICK_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut ticks = 0u32;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        if ticks.is_multiple_of(LOAD_EVERY_TICKS) {
            // Loads read the disk (and wait for the registry behind other loads).
            let s = state.clone();
            let _ = tokio::task::spawn_blocking(move || load_led(&s)).await;
        }
        ticks = ticks.wrapping_add(1);
        pass(&state).await;
    }
}

/// Loads the state logs of the partitions led here that are not loaded yet.
fn load_led(state: &BrokerState) {
    for partition in state.all_partitions() {
        if state.current_leader(&partition.topic, partition.index) != state.node_id() {
            continue;
        }
        for group in super::store::groups_in(&*partition.storage, &partition.dir) {
            let loaded = super::lookup::share_partition(
                state,
                &group,
                &partition.topic,
                partition.index,
                false,
            );
            if let Err(e) = loaded {
                tracing::debug!(topic = %partition.topic, partition = partition.index, %group, error = %e.message, "share state not loaded");
            }
        }
    }
}

async fn pass(state: &Arc<BrokerState>) {
    let now = crate::partition::now_ms();
    // The registry is busy while a share partition loads (on the blocking pool): this tick
    // is skipped rather than blocking an async thread behind the disk.
    let Some(all) = state.share.try_all() else {
        return;
    };
    for shared in all {
        if !shared.still_led(state) {
            state.share.drop_partition(&shared);
            continue;
        }
        let max_attempts = shared.settings(state).max_delivery_attempts;
        let waiting = {
            // Held for long only by an acquisition reading the log (on the blocking pool):
            // then this share partition's expiry waits for the next tick, the others' do not.
            let Some(mut share) = shared.state.try_lock() else {
                continue;
            };
            if shared.is_retired() {
                continue;
            }
            let mut log = Vec::new();
            if share.expire_locks(now, max_attempts, &mut log) > 0 {
                shared.notify_released();
            }
            if shared.append(&log).is_err() {
                continue;
            }
            !share.dead_letter_pending(1).is_empty()
        };
        if shared.log.size_bytes() > STATE_LOG_REWRITE_BYTES {
            let s = shared.clone();
            let rewritten = tokio::task::spawn_blocking(move || {
                let share = s.state.lock();
                // A retired instance must not rename its snapshot over the live one's log.
                if s.is_retired() {
                    return Ok(());
                }
                s.log.rewrite(&share)
            })
            .await;
            if !matches!(rewritten, Ok(Ok(()))) {
                tracing::error!(?rewritten, key = ?shared.key, "share state log rewrite failed");
                state.share.drop_partition(&shared);
                continue;
            }
        }
        let due = shared.dead_letter_retry_at_ms.load(Ordering::Acquire) <= now;
        if !(waiting && due) {
            continue;
        }
        let Ok(permit) = state.share.dead_letter_passes.clone().try_acquire_owned() else {
            continue;
        };
        if !shared.dead_lettering.swap(true, Ordering::AcqRel) {
            let (state, shared) = (state.clone(), shared.clone());
            tokio::spawn(async move {
                let _permit = permit;
                if let Err(why) = dead_letter(&state, &shared).await {
                    tracing::warn!(key = ?shared.key, %why, "dead-lettering failed; retried in {DEAD_LETTER_RETRY_MS} ms");
                    let retry_at = crate::partition::now_ms() + DEAD_LETTER_RETRY_MS;
                    shared
                        .dead_letter_retry_at_ms
                        .store(retry_at, Ordering::Release);
                }
                shared.dead_lettering.store(false, Ordering::Release);
            });
        }
    }
}

/// The records of `offsets` (ascending) read from the partition, and the offsets proven gone
/// from it (below its log start: removed by retention). A read or decode error is an error:
/// the records behind it are neither written nor marked.
fn read_records(
    shared: &SharedPartition,
    offsets: &[i64],
) -> Result<(Vec<Record>, Vec<i64>), String> {
    let log = &shared.partition.log;
    let mut found: Vec<Record> = Vec::new();
    let mut gone = Vec::new();
    let mut kept_bytes = 0usize;
    for &offset in offsets {
        if found.last().is_some_and(|r| r.offset >= offset) {
            continue;
        }
        if offset < log.log_start_offset() {
            gone.push(offset);
            continue;
        }
        let bytes = match crate::service::read::read_partition(
            &shared.partition,
            offset,
            DEAD_LETTER_READ_BYTES,
        ) {
            Ok(bytes) => bytes,
            // Retention may have removed it between the check and the read.
            Err(_) if offset < log.log_start_offset() => {
                gone.push(offset);
                continue;
            }
            Err(e) => return Err(format!("reading offset {offset}: {}", e.message)),
        };
        if kept_bytes >= DEAD_LETTER_PASS_BYTES_MAX {
            break;
        }
        for batch in BatchIter::new(bytes) {
            let batch = match batch {
                Ok(batch) => batch,
                // A read ends with part of a batch: the next read starts there.
                Err(BatchError::Truncated { .. }) => break,
                Err(e) => return Err(format!("decoding a batch at {offset}: {e}")),
            };
            let records = crate::partition::with_decompression_slot(|| {
                batch.records(DEAD_LETTER_DECOMPRESSED_BYTES_MAX)
            })
            .map_err(|e| format!("decoding a batch at {offset}: {e}"))?;
            for record in records {
                if offsets.binary_search(&record.offset).is_ok() {
                    kept_bytes = kept_bytes.saturating_add(record_bytes(&record));
                    found.push(record);
                }
            }
        }
        found.sort_by_key(|r| r.offset);
        found.dedup_by_key(|r| r.offset);
    }
    Ok((found, gone))
}

/// What a record held for dead-lettering weighs.
fn record_bytes(record: &Record) -> usize {
    let len = |b: &Option<Bytes>| b.as_ref().map_or(0, Bytes::len);
    let headers: usize = record
        .headers
        .iter()
        .map(|h| h.key.len() + len(&h.value))
        .sum();
    len(&record.key) + len(&record.value) + headers
}

/// The dead-letter copy of `record` with its origin headers.
fn dead_letter_record(
    shared: &SharedPartition,
    record: Record,
    reason: DeadLetterReason,
    attempts: u32,
    partition: u32,
) -> ProducerRecord {
    let mut headers: Vec<(String, Option<Bytes>)> = record
        .headers
        .into_iter()
        .map(|h| (h.key, h.value))
        .collect();
    let text = |s: String| Some(Bytes::from(s));
    headers.extend([
        ("tinymq.dlq.topic".into(), text(shared.key.topic.clone())),
        (
            "tinymq.dlq.partition".into(),
            text(shared.key.partition.to_string()),
        ),
        ("tinymq.dlq.offset".into(), text(record.offset.to_string())),
        ("tinymq.dlq.group".into(), text(shared.key.group.clone())),
        ("tinymq.dlq.attempts".into(), text(attempts.to_string())),
        ("tinymq.dlq.reason".into(), text(reason.as_str().into())),
    ]);
    ProducerRecord {
        key: record.key,
        value: record.value,
        headers,
        partition: Some(partition),
        timestamp_ms: Some(record.timestamp_ms),
    }
}

/// The dead-letter topic's partition count, creating the topic like the source if missing.
async fn ensure_topic(
    state: &BrokerState,
    shared: &SharedPartition,
    name: &str,
) -> Result<u32, String> {
    if let Some(count) = state.partition_count(name) {
        return Ok(count);
    }
    let (partitions, replication_factor) = {
        let image = state.cluster.image();
        let source = image
            .topics
            .get(&shared.key.topic)
            .ok_or_else(|| format!("topic {} is gone", shared.key.topic))?;
        (source.partitions.len() as u32, source.replication_factor())
    };
    let admin = state.internal.admin().map_err(|e| e.to_string())?;
    let config = m::TopicConfig {
        partitions,
        replication_factor,
        ..Default::default()
    };
    let created = admin
        .create_topic(name, config)
        .await
        .map_err(|e| format!("creating dead-letter topic {name}: {e}"))?;
    Ok(created.partitions.max(1))
}

async fn dead_letter(
    state: &Arc<BrokerState>,
    shared: &Arc<SharedPartition>,
) -> Result<(), String> {
    let settings = shared.settings(state);
    let pending = shared
        .state
        .lock()
        .dead_letter_pending(DEAD_LETTERS_PER_PASS_MAX);
    if pending.is_empty() {
        return Ok(());
    }
    let offsets: Vec<i64> = pending.iter().map(|p| p.0).collect();
    let (s, o) = (shared.clone(), offsets.clone());
    let (records, gone) = tokio::task::spawn_blocking(move || read_records(&s, &o))
        .await
        .map_err(|e| e.to_string())??;
    let topic = &settings.dead_letter_topic;
    let count = ensure_topic(state, shared, topic).await?;
    let producer = state.internal.producer().map_err(|e| e.to_string())?;
    let mut deliveries = Vec::with_capacity(records.len());
    let mut failures = Vec::new();
    for record in records {
        let offset = record.offset;
        let Some((_, reason, attempts)) = pending.iter().find(|p| p.0 == offset) else {
            continue;
        };
        let copy = dead_letter_record(
            shared,
            record,
            *reason,
            *attempts,
            shared.key.partition % count,
        );
        // Each record on its own: one the dead-letter topic refuses (too large, outside
        // its timestamp bounds, …) does not hold back the others.
        match producer.send(topic, copy).await {
            Ok(delivery) => deliveries.push((offset, delivery)),
            Err(e) => failures.push(format!("{offset}: {e}")),
        }
    }
    let mut marked = gone;
    for (offset, delivery) in deliveries {
        match delivery.await {
            Ok(_) => marked.push(offset),
            Err(e) => failures.push(format!("{offset}: {e}")),
        }
    }
    marked.sort_unstable();
    let sequence = {
        let mut share = shared.state.lock();
        // A retired instance's records are dead-lettered again by the live one.
        if shared.is_retired() {
            return Err("share state reloaded meanwhile; its pass is redone".into());
        }
        let mut log = Vec::new();
        share.mark_dead_lettered(&marked, &mut log);
        shared.append(&log).map_err(|e| e.message)?
    };
    if let Err(e) = shared.log.sync(sequence).await {
        shared.retire();
        return Err(e.to_string());
    }
    if failures.is_empty() {
        return Ok(());
    }
    let unread = offsets.len().saturating_sub(marked.len() + failures.len());
    Err(format!(
        "{} records not written to {topic} ({unread} not found in the log): {}",
        failures.len(),
        failures.join("; ")
    ))
}
