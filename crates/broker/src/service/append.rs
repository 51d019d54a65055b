//! Writing to a partition: the produce checks (led here in the image's epoch, the MetaServer
//! session confirmed, enough in-sync replicas for `acks = -1`), the write itself, and the wait
//! for the flush policy and the in-sync replicas. A produce request, a delayed batch coming
//! due, a dead letter, a group's offset commit and a transaction marker all write through
//! here.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tinymq_protocol::{messages as m, ErrorCode};

use super::blocking;
use crate::partition::{MarkerWrite, Partition, PartitionError, PendingAppend, ProduceContext};
use crate::state::BrokerState;
use tinymq_protocol::batch::control::MarkerType;

/// How long a produce waits for its flush policy when its `timeout_ms` is 0: like Kafka's
/// `request.timeout.ms`.
pub const PRODUCE_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);

/// A write taken by its partition's log, still to meet its flush policy.
pub(crate) type Written = Result<(Arc<Partition>, PendingAppend), m::Error>;

/// Checks and writes `records` to `topic/index`: the partition must be led here in the epoch
/// the image names, with the MetaServer session confirmed, and (for `acks = -1`) at least
/// `min_insync_replicas` in sync. `producer_id_end` is the image's next producer id (ids at
/// or past it were never handed out).
pub(crate) async fn append(
    state: &BrokerState,
    topic: &str,
    index: u32,
    records: Bytes,
    acks: i32,
    producer_id_end: i64,
) -> Written {
    let (partition, leader_epoch) = state.led_partition(topic, index)?;
    if !state.cluster.session_current() || partition.leading_epoch() != Some(leader_epoch) {
        return Err(session_lost(topic, index));
    }
    if acks == -1 && !state.enough_in_sync(&partition) {
        return Err(ErrorCode::NOT_ENOUGH_REPLICAS.with_message(format!(
            "{topic}/{index}: fewer in-sync replicas than min_insync_replicas"
        )));
    }
    let context = ProduceContext {
        leader_epoch,
        producer_id_end,
        now_ms: crate::partition::now_ms(),
    };
    let pending = write_partition_async(&partition, records, context).await?;
    Ok((partition, pending))
}

/// [`write_partition`] from the caller's task: the checks and the page-cache write run right
/// here, with no hop to the blocking pool, unless they may block (a compressed batch's
/// decompression slot, a segment roll's fsyncs, a writer holding the partition across one);
/// then the rest of the work goes to a blocking thread.
async fn write_partition_async(
    partition: &Arc<Partition>,
    records: Bytes,
    context: ProduceContext,
) -> Result<PendingAppend, m::Error> {
    let batch_max = partition.log.batch_bytes_max();
    if crate::partition::check_may_block(&records) {
        let p = partition.clone();
        return blocking(move || write_partition(&p, records, context)).await?;
    }
    let checked = partition
        .check(records, batch_max, &context)
        .map_err(to_wire)?;
    if let Some(pending) = partition.try_append(&checked, context).map_err(to_wire)? {
        return Ok(pending);
    }
    let p = partition.clone();
    blocking(move || p.append(&checked, context))
        .await?
        .map_err(to_wire)
}

/// How long a marker write waits for its flush policy and every in-sync replica: as long as
/// a produce's default wait (the coordinator retries a marker that timed out).
pub const MARKER_TIMEOUT: Duration = PRODUCE_TIMEOUT_DEFAULT;

/// Writes the marker ending `producer_id`'s transaction on `topic/partition` (COMMIT when
/// `commit`, else ABORT), as the transaction coordinator does for every partition of a
/// transaction, internal topics (`__consumer_offsets`) included. The checks are a produce's
/// with `acks = -1`: led here in the image's epoch with the MetaServer session confirmed, and
/// enough replicas in sync; then the marker is written and answered once the flush policy and
/// every in-sync replica hold it, within [`MARKER_TIMEOUT`] (and the broker's
/// `produce_timeout_max`). Returns the marker's offset.
///
/// Errors: `NOT_LEADER` (its message names the leader), `NOT_ENOUGH_REPLICAS`,
/// `REQUEST_TIMED_OUT` (the marker may still become durable; writing it again is harmless),
/// `INVALID_PRODUCER_EPOCH` (the partition knows a newer epoch of the producer: fenced).
// Called by the transaction coordinator (`crate::txn`, written beside this) and the tests.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) async fn write_marker(
    state: &Arc<BrokerState>,
    topic: &str,
    partition: u32,
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    coordinator_epoch: i32,
) -> Result<i64, m::Error> {
    let named = |e: m::Error| named_leader(state, topic, partition, e);
    let (p, leader_epoch) = state.led_partition_any(topic, partition).map_err(named)?;
    if !state.cluster.session_current() || p.leading_epoch() != Some(leader_epoch) {
        return Err(named(session_lost(topic, partition)));
    }
    if !state.enough_in_sync(&p) {
        return Err(ErrorCode::NOT_ENOUGH_REPLICAS.with_message(format!(
            "{topic}/{partition}: fewer in-sync replicas than min_insync_replicas"
        )));
    }
    let marker = MarkerWrite {
        producer_id,
        producer_epoch,
        marker: if commit {
            MarkerType::Commit
        } else {
            MarkerType::Abort
        },
        coordinator_epoch,
    };
    let pending = match p
        .try_append_marker(&marker, leader_epoch)
        .map_err(to_wire)?
    {
        Some(pending) => pending,
        None => {
            let q = p.clone();
            blocking(move || q.append_marker(&marker, leader_epoch))
                .await?
                .map_err(to_wire)?
        }
    };
    let timeout = MARKER_TIMEOUT.min(state.config.produce_timeout_max);
    let written = Ok((p, pending));
    await_append(state.clone(), -1, timeout, written)
        .await
        .map(|(offset, _)| offset)
        .map_err(named)
}

/// `error`, with the current leader named in its message when it is `NOT_LEADER`.
fn named_leader(state: &BrokerState, topic: &str, partition: u32, mut error: m::Error) -> m::Error {
    let leader = super::leader_hint(state, topic, partition, &error);
    if leader != 0 {
        error.message = format!("{} (the leader is broker {leader})", error.message);
    }
    error
}

fn to_wire(PartitionError { code, message }: PartitionError) -> m::Error {
    code.with_message(message)
}

/// The write path of one partition whose leadership the caller checked: every batch check,
/// then the write (the wait for the flush policy is [`await_append`]). Blocks.
pub(crate) fn write_partition(
    partition: &Partition,
    records: Bytes,
    context: ProduceContext,
) -> Result<PendingAppend, m::Error> {
    let batch_max = partition.log.batch_bytes_max();
    partition
        .write(records, batch_max, context)
        .map_err(to_wire)
}

/// Waits for a write to meet its flush policy (and, with `acks = -1`, its in-sync replicas),
/// within `timeout`: its base offset and the log start offset, or why not.
pub(crate) async fn await_append(
    state: Arc<BrokerState>,
    acks: i32,
    timeout: Duration,
    written: Written,
) -> Result<(i64, i64), m::Error> {
    let (p, pending) = written?;
    let log_start = p.log.log_start_offset();
    let partition = p.clone();
    let work = async move {
        let offset = p.finish_async(pending).await;
        if acks == -1 && offset.is_ok() {
            await_replicas(&partition, pending.end_offset, pending.leader_epoch).await?;
            // The ISR may have shrunk below the minimum while waiting: the write is then on
            // too few disks to acknowledge.
            if !state.enough_in_sync(&partition) {
                return Err(ErrorCode::NOT_ENOUGH_REPLICAS.with_message(format!(
                    "{}/{}: written, but fewer in-sync replicas than min_insync_replicas hold it",
                    partition.topic, partition.index
                )));
            }
        }
        // A leader that lost its MetaServer session may have been replaced.
        if offset.is_ok() && !state.cluster.session_current() {
            return Err(session_lost(&partition.topic, partition.index));
        }
        Ok(offset)
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(Ok(Ok(offset))) => Ok((offset, log_start)),
        Ok(Ok(Err(e))) => Err(to_wire(e)),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(ErrorCode::REQUEST_TIMED_OUT.with_message(format!(
            "append not confirmed within {} ms; it may still complete",
            timeout.as_millis()
        ))),
    }
}

/// A leader whose MetaServer session is not confirmed (cut off, or paused and resumed) neither
/// takes nor acknowledges writes: another broker may already lead the partition.
pub(crate) fn session_lost(topic: &str, partition: u32) -> m::Error {
    ErrorCode::NOT_LEADER.with_message(format!(
        "{topic}/{partition}: this broker cannot confirm its MetaServer session, or has not taken the leadership its metadata names yet; retry"
    ))
}

/// Waits until the high watermark passes `end_offset` (every in-sync replica holds the write
/// durably) while this broker still leads the partition in `leader_epoch`, the epoch the write
/// was taken in; fails once it does not: the write may then be lost, and the producer retries
/// against the new leader (idempotence makes that safe). Leadership is checked after the high
/// watermark too: a broker deposed meanwhile learns its high watermark from the new leader,
/// whose records may sit where this write was.
pub(crate) async fn await_replicas(
    partition: &Partition,
    end_offset: i64,
    leader_epoch: u32,
) -> Result<(), m::Error> {
    let mut hw = partition.watch_high_watermark();
    loop {
        let reached = *hw.borrow_and_update() >= end_offset;
        // Roles only move to higher epochs, so leading in `leader_epoch` now means leading in
        // it all along: the high watermark seen is this leadership's.
        if partition.leading_epoch() != Some(leader_epoch) {
            return Err(ErrorCode::NOT_LEADER.with_message(format!(
                "{}/{}: leadership moved before the in-sync replicas confirmed the write; retry",
                partition.topic, partition.index
            )));
        }
        if reached {
            return Ok(());
        }
        // Woken by the high watermark, and at least every 100 ms to notice a lost leadership.
        let _ = tokio::time::timeout(Duration::from_millis(100), hw.changed()).await;
    }
}
