//! Delayed delivery on the broker (docs/queues.md, "Delayed delivery"): each partition
//! leader's timer log of batches waiting for their deliver-at time (`timer_log`, under
//! `<data dir>/<topic>-<partition>/delay/`), its time-bucketed index (`tinymq_delay`), the
//! `ProduceDelayed` handler that stores a batch durably, and the scheduler (`scheduler`) that
//! appends due batches to the partition in deliver-at order, exactly once.
//!
//! The timer log is on the leader's disk only: when leadership moves, the batches waiting
//! there wait until this broker leads the partition again (they are then delivered, late).

mod doubt;
mod scheduler;
pub(crate) mod slots;
#[cfg(test)]
mod tests;
mod timer;
mod timer_log;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tinymq_delay::{deliverable_batch, ClientIdentity, SchedulerStamp, DELAY_MS_MAX};
use tinymq_protocol::batch::{
    field, BatchHeader, Compression, BATCH_DECOMPRESSED_BYTES_MAX_DEFAULT,
};
use tinymq_protocol::messages as m;
use tinymq_protocol::ErrorCode;
use tokio_util::sync::CancellationToken;

use crate::partition::{now_ms, Partition, ProduceContext};
use crate::state::BrokerState;
use slots::key;

/// How often the led partitions are looked over for leaderships that began (whose timer log
/// must be opened and its scheduler started) or ended.
const SCAN_INTERVAL: Duration = Duration::from_millis(250);

/// Answers a `ProduceDelayed`: once the batch is durable in the partition's timer log.
pub async fn produce_delayed(
    state: Arc<BrokerState>,
    request: m::ProduceDelayedRequest,
) -> m::ProduceDelayedResponse {
    let timeout = match request.timeout_ms {
        0 => crate::service::append::PRODUCE_TIMEOUT_DEFAULT,
        ms => Duration::from_millis(u64::from(ms)),
    }
    .min(state.config.produce_timeout_max);
    let (topic, index) = (request.topic.clone(), request.partition);
    let outcome = match tokio::time::timeout(timeout, store(&state, request)).await {
        Ok(outcome) => outcome,
        Err(_) => Err(ErrorCode::REQUEST_TIMED_OUT.with_message(format!(
            "not stored within {} ms; it may still be",
            timeout.as_millis()
        ))),
    };
    match outcome {
        Ok(deliver_at_ms) => m::ProduceDelayedResponse {
            error: None,
            current_leader: 0,
            deliver_at_ms,
        },
        Err(error) => {
            let current_leader = if error.error_code() == ErrorCode::NOT_LEADER {
                state.current_leader(&topic, index)
            } else {
                0
            };
            m::ProduceDelayedResponse {
                error: Some(error),
                current_leader,
                deliver_at_ms: -1,
            }
        }
    }
}

fn not_leader(topic: &str, index: u32) -> m::Error {
    ErrorCode::NOT_LEADER.with_message(format!(
        "{topic}/{index}: this broker cannot confirm its MetaServer session, or does not lead it in this epoch; retry"
    ))
}

async fn store(state: &Arc<BrokerState>, req: m::ProduceDelayedRequest) -> Result<i64, m::Error> {
    let (partition, epoch) = state.led_partition(&req.topic, req.partition)?;
    if !state.cluster.session_current() || partition.leading_epoch() != Some(epoch) {
        return Err(not_leader(&req.topic, req.partition));
    }
    let now = now_ms();
    if req.deliver_at_ms.saturating_sub(now) > DELAY_MS_MAX {
        return Err(ErrorCode::INVALID_DELIVERY_TIME.with_message(format!(
            "deliver-at {} is more than delay_ms_max = {DELAY_MS_MAX} ms after the broker's clock ({now})",
            req.deliver_at_ms
        )));
    }
    await_producer_id(state, &req.records).await;
    let timer = state
        .delays
        .timer(&partition, epoch, scheduler_of(state))
        .await?;
    let producer_id_end = state.cluster.image().next_producer_id;
    let (records, deliver_at_ms) = (req.records, req.deliver_at_ms);
    let t = timer.clone();
    let stored = tokio::task::spawn_blocking(move || {
        let context = ProduceContext {
            leader_epoch: epoch,
            producer_id_end,
            now_ms: now,
        };
        check(&t.partition, &records, deliver_at_ms, &context)?;
        let client = client_identity(&records);
        let (at, ticket) = t.store(client, records, deliver_at_ms)?;
        t.sync(ticket)
            .map_err(|e| (ErrorCode::STORAGE_ERROR, format!("timer log fsync: {e}")))?;
        Ok::<_, (ErrorCode, String)>(at)
    })
    .await
    .map_err(|e| ErrorCode::UNKNOWN_SERVER_ERROR.with_message(e.to_string()))?;
    let at = stored.map_err(|(code, message)| code.with_message(message))?;
    timer.wake.notify_one();
    Ok(at)
}

/// The checks a produce of `records` gets (the partition's own, not a copy), and that the
/// batch will still fit the partition once each record carries its `tinymq.deliver-at`
/// header. Blocks (decompression, as a produce's check does).
fn check(
    partition: &Partition,
    records: &bytes::Bytes,
    deliver_at_ms: i64,
    context: &ProduceContext,
) -> Result<(), (ErrorCode, String)> {
    let batch_max = partition.log.batch_bytes_max();
    partition
        .check(records.clone(), batch_max, context)
        .map_err(|e| (e.code, e.message))?;
    let compressed = !matches!(compression_of(records), Some(Compression::None));
    let probe = || {
        let stamp = SchedulerStamp {
            producer_id: 0,
            producer_epoch: 0,
            sequence: 0,
        };
        let at = deliver_at_ms.max(context.now_ms);
        deliverable_batch(
            records.clone(),
            stamp,
            at,
            context.now_ms,
            BATCH_DECOMPRESSED_BYTES_MAX_DEFAULT,
        )
    };
    let rewritten = if compressed {
        crate::partition::with_decompression_slot(probe)
    } else {
        probe()
    };
    let rewritten = rewritten.map_err(|e| (ErrorCode::INVALID_RECORD, e.to_string()))?;
    if rewritten.len() > batch_max as usize {
        return Err((
            ErrorCode::MESSAGE_TOO_LARGE,
            format!(
                "with the tinymq.deliver-at header on each record the batch is {} bytes, more than message_bytes_max {batch_max}",
                rewritten.len()
            ),
        ));
    }
    Ok(())
}

fn compression_of(records: &[u8]) -> Option<Compression> {
    let header = BatchHeader::new(records)?;
    Compression::from_attributes(header.attributes()).ok()
}

/// The producer fields of a batch that passed the checks.
fn client_identity(records: &[u8]) -> ClientIdentity {
    match BatchHeader::new(records) {
        Some(h) => ClientIdentity {
            producer_id: h.producer_id(),
            producer_epoch: h.producer_epoch(),
            first_sequence: h.base_sequence(),
            last_sequence: h.last_sequence(),
        },
        None => ClientIdentity {
            producer_id: -1,
            producer_epoch: -1,
            first_sequence: -1,
            last_sequence: -1,
        },
    }
}

/// Waits (up to 2 s) until this broker's image covers the batch's producer id, which another
/// broker may have handed out a moment ago (as a produce does).
async fn await_producer_id(state: &BrokerState, records: &[u8]) {
    let id = records
        .get(field::PRODUCER_ID..field::PRODUCER_ID + 8)
        .and_then(|b| b.try_into().ok())
        .map(i64::from_be_bytes);
    let Some(id) = id.filter(|id| *id >= state.cluster.image().next_producer_id) else {
        return;
    };
    let covered = |image: &tinymq_meta::MetadataImage| image.next_producer_id > id;
    state
        .cluster
        .wait_until(Duration::from_secs(2), covered)
        .await;
}

/// Starts a timer's scheduler on the runtime, for [`slots::Delays::timer`].
fn scheduler_of(state: &Arc<BrokerState>) -> impl FnOnce(Arc<timer::PartitionTimer>) {
    let state = state.clone();
    move |timer| {
        tokio::spawn(scheduler::schedule(state, timer));
    }
}

/// Opens the timer of every leadership that begins here on a partition with a timer log
/// (its scheduler then delivers what waits there), and stops those that end, until
/// `shutdown`.
pub async fn run(state: Arc<BrokerState>, shutdown: CancellationToken) {
    // Leaderships found without a timer log (a delayed produce opens the timer itself).
    let mut without_log: HashMap<(String, u32), (usize, u32)> = HashMap::new();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(SCAN_INTERVAL) => {}
        }
        state
            .delays
            .retire_ended(|topic, index| state.local_partition(topic, index))
            .await;
        let mut still_without = HashMap::with_capacity(without_log.len());
        for partition in state.all_partitions() {
            let Some(epoch) = partition.leading_epoch() else {
                continue;
            };
            if state.delays.is_running(&partition, epoch) {
                continue;
            }
            let (k, mark) = (key(&partition), (Arc::as_ptr(&partition) as usize, epoch));
            if without_log.get(&k) == Some(&mark)
                || !timer_log::exists(&*partition.storage, &partition.dir)
            {
                still_without.insert(k, mark);
                continue;
            }
            if let Err(e) = state
                .delays
                .timer(&partition, epoch, scheduler_of(&state))
                .await
            {
                tracing::warn!(topic = %partition.topic, partition = partition.index, error = %e, "cannot start delayed delivery; retried");
            }
        }
        without_log = still_without;
    }
    state.delays.stop_all().await;
}
