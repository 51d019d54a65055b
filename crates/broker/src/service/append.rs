//! Writing to a partition: the produce checks (led here in the image's epoch, the MetaServer
//! session confirmed, enough in-sync replicas for `acks = -1`), the write itself, and the wait
//! for the flush policy and the in-sync replicas. A produce request, a delayed batch coming
//! due, a dead letter and a group's offset commit all write through here.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tinymq_protocol::{messages as m, ErrorCode};

use super::blocking;
use crate::partition::{Partition, PartitionError, PendingAppend, ProduceContext};
use crate::state::BrokerState;

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
