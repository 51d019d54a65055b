//! The scheduler of one led partition's timer: it sleeps until the earliest deliver-at time
//! (or a store wakes it), then runs rounds that append the due batches to the partition
//! through the broker's own write path, in deliver-at order, exactly once:
//!
//! 1. due entries without a scheduler identity are given one — this leadership's producer id
//!    (allocated from the MetaServer), epoch 0, the next sequences — in `Assigned` entries,
//!    fsynced before anything is appended;
//! 2. every assigned entry, in sequence order, is looked up in the partition's producer state:
//!    written already (a duplicate, or a sequence below the last written) → only marked; the
//!    next sequence → rewritten (`tinymq_delay::deliverable_batch`) and appended. When the
//!    producer state has no answer (the producer is unknown — never seen, or forgotten after
//!    24 h or evicted — or its epoch or sequence does not follow), the partition is read from
//!    the log end offset the `Assigned` entry recorded (`super::doubt`): a batch with the
//!    identity found there → only marked; none → a first sequence is appended, any other is
//!    given a new identity next round. The round stops between appends as soon as this
//!    leadership ends, so no leader batch is written into a log that follows another leader;
//! 3. once the appends meet the flush policy and the in-sync replicas hold them, `Delivered`
//!    marks are written (fsynced with the next group commit; a lost mark only makes step 2
//!    find the batch written).

use std::sync::Arc;
use std::time::Duration;

use tinymq_delay::{deliverable_batch, Entry, SchedulerStamp, Waiting};
use tinymq_protocol::batch::BATCH_DECOMPRESSED_BYTES_MAX_DEFAULT;
use tinymq_protocol::ErrorCode;

use super::doubt;
use super::timer::PartitionTimer;
use crate::partition::{now_ms, PendingAppend, ProduceContext};
use crate::producer_state::{BatchIdentity, SequenceCheck, SequenceError};
use crate::state::BrokerState;

/// Most entries one round delivers (the rest are due in the next, at once).
const ROUND_ENTRIES_MAX: usize = 1000;
/// Longest sleep between checks, so that a lost wake-up or a clock step costs at most this.
const IDLE_WAIT_MAX: Duration = Duration::from_secs(1);
/// Pause after a round that failed (no leader session, a full disk, replicas behind).
const RETRY_PAUSE: Duration = Duration::from_millis(500);
/// How long a round waits for the in-sync replicas to hold its appends.
const REPLICAS_WAIT_MAX: Duration = Duration::from_secs(10);

type RoundError = (ErrorCode, String);

/// Runs rounds until the leadership ends.
pub async fn schedule(state: Arc<BrokerState>, timer: Arc<PartitionTimer>) {
    let mut stamp: Option<SchedulerStamp> = None;
    while !timer.is_stopped() {
        let t = timer.clone();
        // The log's lock may be held by a compaction: not on a runtime thread.
        let next = blocking(move || Ok(t.with_log(|log| log.state().index().next_deliver_at_ms())))
            .await
            .ok()
            .flatten();
        let now = now_ms();
        let wait = match next {
            None => IDLE_WAIT_MAX,
            Some(at) if at > now => Duration::from_millis((at - now) as u64).min(IDLE_WAIT_MAX),
            Some(_) => Duration::ZERO,
        };
        if !wait.is_zero() {
            let _ = tokio::time::timeout(wait, timer.wake.notified()).await;
            continue;
        }
        if let Err((code, message)) = round(&state, &timer, &mut stamp).await {
            if !timer.is_stopped() {
                tracing::warn!(topic = %timer.partition.topic, partition = timer.partition.index, ?code, message, "delayed delivery round failed; retrying");
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, RoundError> + Send + 'static,
) -> Result<T, RoundError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        (
            ErrorCode::UNKNOWN_SERVER_ERROR,
            format!("worker failed: {e}"),
        )
    })?
}

fn io((what, e): (&str, std::io::Error)) -> RoundError {
    (ErrorCode::STORAGE_ERROR, format!("timer log {what}: {e}"))
}

/// One round: assign, append, mark (see the module's comment).
async fn round(
    state: &Arc<BrokerState>,
    timer: &Arc<PartitionTimer>,
    stamp: &mut Option<SchedulerStamp>,
) -> Result<(), RoundError> {
    if !state.cluster.session_current() {
        return Err((ErrorCode::NOT_LEADER, "no MetaServer session".into()));
    }
    let t = timer.clone();
    let due = blocking(move || Ok(t.with_log(|log| log.state().due(now_ms(), ROUND_ENTRIES_MAX))))
        .await?;
    let unassigned: Vec<&Waiting> = due.iter().filter(|w| w.slot.assigned.is_none()).collect();
    if !unassigned.is_empty() {
        // A batch appended under an identity given now lands at or above this offset.
        let scan_from_offset = timer.partition.log.log_end_offset();
        let mut assigned = Vec::with_capacity(unassigned.len());
        for w in unassigned {
            let next = next_stamp(state, timer, stamp, w.slot.record_count).await?;
            assigned.push(Entry::Assigned {
                entry_id: w.entry_id,
                stamp: next,
                scan_from_offset,
            });
        }
        // A failed write or fsync stops the timer (`PartitionTimer::append`, `sync`): the
        // identities it applied in memory may not be on disk, so nothing is appended under
        // them; the next open rebuilds from the file.
        let t = timer.clone();
        blocking(move || {
            let ticket = t.append(&assigned).map_err(|e| io(("write", e)))?;
            t.sync(ticket).map_err(|e| io(("fsync", e)))
        })
        .await?;
    }
    let t = timer.clone();
    let producer_id_end = state.cluster.image().next_producer_id;
    let Appended { done, last, renew } =
        blocking(move || append_assigned(producer_id_end, &t)).await?;
    if renew {
        // A sequence was skipped or forgotten: the next batches start a new producer.
        *stamp = None;
    }
    if let Some(pending) = last {
        let p = timer.partition.clone();
        p.finish_async(pending)
            .await
            .map_err(|e| (e.code, e.message))?;
        let replicated =
            crate::service::append::await_replicas(&p, pending.end_offset, timer.leader_epoch);
        match tokio::time::timeout(REPLICAS_WAIT_MAX, replicated).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err((ErrorCode::NOT_LEADER, e.message)),
            Err(_) => {
                return Err((
                    ErrorCode::REQUEST_TIMED_OUT,
                    "in-sync replicas are behind".into(),
                ))
            }
        }
    }
    if !done.is_empty() {
        let t = timer.clone();
        blocking(move || {
            let delivered_at_ms = now_ms();
            let marks: Vec<Entry> = done
                .into_iter()
                .map(|entry_id| Entry::Delivered {
                    entry_id,
                    delivered_at_ms,
                })
                .collect();
            t.append(&marks).map_err(|e| io(("write", e)))?;
            t.compact_if_due().map_err(|e| io(("compaction", e)))
        })
        .await?;
    }
    Ok(())
}

/// The identity for the next batch of `records` records: this leadership's producer (a new
/// one at the first round, when the partition forgot it, or before its sequence wraps).
async fn next_stamp(
    state: &BrokerState,
    timer: &PartitionTimer,
    stamp: &mut Option<SchedulerStamp>,
    records: i32,
) -> Result<SchedulerStamp, RoundError> {
    let usable = stamp.filter(|s| {
        s.sequence.checked_add(records).is_some() && (s.sequence == 0 || known(timer, s))
    });
    let current = match usable {
        Some(s) => s,
        None => {
            let producer_id = state.cluster.allocate_producer_id().await.map_err(wire)?;
            // Writes check the id against the image, which follows the MetaServer.
            let visible = |image: &tinymq_meta::MetadataImage| image.next_producer_id > producer_id;
            state
                .cluster
                .wait_until(Duration::from_secs(5), visible)
                .await;
            SchedulerStamp {
                producer_id,
                producer_epoch: 0,
                sequence: 0,
            }
        }
    };
    *stamp = Some(SchedulerStamp {
        sequence: current.sequence + records,
        ..current
    });
    Ok(current)
}

fn wire(e: tinymq_protocol::messages::Error) -> RoundError {
    (e.error_code(), e.message)
}

/// Whether the partition still remembers the scheduler's producer (so `stamp`'s sequence,
/// the next one, may follow).
fn known(timer: &PartitionTimer, stamp: &SchedulerStamp) -> bool {
    let identity = identity(stamp, 1);
    !matches!(
        timer.partition.producers.lock().check(&identity),
        Err(SequenceError::UnknownProducer { .. })
    )
}

fn identity(stamp: &SchedulerStamp, records: i32) -> BatchIdentity {
    BatchIdentity {
        producer_id: stamp.producer_id,
        producer_epoch: stamp.producer_epoch,
        first_sequence: stamp.sequence,
        last_sequence: stamp.sequence + records.max(1) - 1,
    }
}

/// What [`append_assigned`] did.
#[derive(Debug, Default)]
pub(super) struct Appended {
    /// Entries whose batch is in the partition now (or was dropped for good).
    pub done: Vec<u64>,
    /// The last append, to wait for.
    pub last: Option<PendingAppend>,
    /// The scheduler's producer must be replaced (a sequence gap or a forgotten producer).
    pub renew: bool,
}

/// Appends every assigned entry not written yet, in sequence order (blocks). Stops at the
/// first append refused for a passing reason, so the order holds; the rest are retried next
/// round.
pub(super) fn append_assigned(
    producer_id_end: i64,
    timer: &PartitionTimer,
) -> Result<Appended, RoundError> {
    let partition = &timer.partition;
    let assigned = timer.with_log(|log| log.state().in_doubt());
    let mut out = Appended::default();
    let mut scanned: Option<doubt::Written> = None;
    for w in &assigned {
        if timer.is_stopped() {
            // The leadership ended: the log may follow another leader now.
            break;
        }
        let Some(stamp) = w.slot.assigned else {
            continue;
        };
        let check = partition
            .producers
            .lock()
            .check(&identity(&stamp, w.slot.record_count));
        let state_has_no_answer = match &check {
            Ok(SequenceCheck::Duplicate { .. }) => false,
            Ok(SequenceCheck::Append) => stamp.sequence == 0,
            Err(SequenceError::OutOfOrder { expected, got, .. }) => expected <= got,
            Err(_) => true,
        };
        if let Some(key) = doubt::key_of(w).filter(|_| state_has_no_answer) {
            let written = match &mut scanned {
                Some(written) => written,
                None => scanned.insert(
                    doubt::scan(partition, &assigned)
                        .map_err(|e| (e.error_code(), format!("reading the partition: {e}")))?,
                ),
            };
            if written.found.contains(&key) {
                out.done.push(w.entry_id);
                continue;
            }
            if !written.complete {
                tracing::warn!(topic = %partition.topic, partition = partition.index, entry = w.entry_id, "the partition's log now starts above where this in-doubt batch would be; it may have been delivered and removed by retention, and is delivered again (at least once)");
            }
        }
        match check {
            Ok(SequenceCheck::Duplicate { .. }) => out.done.push(w.entry_id),
            Err(SequenceError::OutOfOrder { expected, got, .. }) if expected > got => {
                out.done.push(w.entry_id)
            }
            Ok(SequenceCheck::Append) => {
                let context = ProduceContext {
                    leader_epoch: timer.leader_epoch,
                    producer_id_end,
                    now_ms: now_ms(),
                };
                let stored = timer
                    .with_log(|log| log.read_batch(&w.slot))
                    .map_err(|e| io(("read", e)))?;
                let batch = match deliverable_batch(
                    stored,
                    stamp,
                    w.deliver_at_ms,
                    context.now_ms,
                    BATCH_DECOMPRESSED_BYTES_MAX_DEFAULT,
                ) {
                    Ok(batch) => batch,
                    Err(e) => {
                        // Checked when stored; a batch that cannot be rewritten now never will.
                        tracing::error!(topic = %partition.topic, partition = partition.index, entry = w.entry_id, error = %e, "a delayed batch cannot be delivered; dropped");
                        out.done.push(w.entry_id);
                        out.renew = true;
                        continue;
                    }
                };
                let written = crate::service::append::write_partition(partition, batch, context);
                match written {
                    Ok(pending) => {
                        out.last = Some(pending);
                        out.done.push(w.entry_id);
                    }
                    Err(e) => return refused(timer, out, w.entry_id, e),
                }
            }
            // The partition forgot the producer (or its epoch moved on, or a sequence before
            // this one was dropped) and the scan above did not find the batch: it gets a new
            // identity.
            Err(_) => {
                timer.with_log(|log| log.state_mut().unassign(w.entry_id));
                out.renew = true;
            }
        }
    }
    Ok(out)
}

/// After an append the partition refused: what was appended before it is kept; the refused
/// batch is dropped if it can never be appended (too large, invalid), else retried.
fn refused(
    timer: &PartitionTimer,
    mut out: Appended,
    entry_id: u64,
    e: tinymq_protocol::messages::Error,
) -> Result<Appended, RoundError> {
    let code = e.error_code();
    let identity_refused = matches!(
        code,
        ErrorCode::UNKNOWN_PRODUCER_ID
            | ErrorCode::OUT_OF_ORDER_SEQUENCE
            | ErrorCode::INVALID_PRODUCER_EPOCH
    );
    if identity_refused {
        // Not this batch's fault: it goes again under a new producer.
        timer.with_log(|log| log.state_mut().unassign(entry_id));
        out.renew = true;
    } else if !code.is_retriable() {
        let p = &timer.partition;
        tracing::error!(topic = %p.topic, partition = p.index, entry = entry_id, ?code, message = e.message, "the partition refuses a delayed batch; dropped");
        out.done.push(entry_id);
        out.renew = true;
    }
    if out.done.is_empty() && !out.renew {
        return Err((code, e.message));
    }
    Ok(out)
}
