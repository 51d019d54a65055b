//! The partitions of `__consumer_offsets` as the group coordinator sees them: which ones this
//! broker leads (so which groups it coordinates), loading a partition's committed offsets
//! when it starts leading it and dropping them when it stops, and appending commits and
//! tombstones through the partition as its leader, acknowledged once the high watermark (every
//! in-sync replica, fsynced) has passed them.
//!
//! The offsets partitions are ordinary replicated partitions: `reconcile` opens them, followers
//! copy them byte for byte, and leadership moves with the image like any other. Only what
//! reads and writes them is here.

use std::sync::Arc;
use std::time::Duration;

use tinymq_protocol::batch::control::MarkerType;
use tinymq_protocol::{messages as m, ErrorCode};

use crate::group::offsets::{
    encode_commit, partition_for_group, read_log_with_pending, Change, OFFSETS_PARTITIONS,
    OFFSETS_TOPIC,
};
use crate::partition::{now_ms, Partition, PendingAppend, ProduceContext};
use crate::state::BrokerState;

/// The partition `index` of the internal topic `topic` (offsets or transaction states) and the
/// leader epoch in which this broker leads it, for a coordinator's write: `NOT_COORDINATOR`
/// unless it leads it by the image and its own role with its MetaServer session confirmed,
/// `NOT_ENOUGH_REPLICAS` while fewer than `min_insync_replicas` are in sync.
pub(crate) fn led_for_coordination(
    state: &BrokerState,
    topic: &str,
    index: u32,
) -> Result<(Arc<Partition>, u32), m::Error> {
    let (partition, epoch) = state.led_partition_any(topic, index).map_err(|e| {
        ErrorCode::NOT_COORDINATOR
            .with_message(format!("{topic}/{index} is not led here: {}", e.message))
    })?;
    if !state.cluster.session_current() || partition.leading_epoch() != Some(epoch) {
        return Err(ErrorCode::NOT_COORDINATOR.with_message(format!(
            "{topic}/{index}: this broker cannot confirm its MetaServer session or does not lead it yet; retry"
        )));
    }
    if !state.enough_in_sync(&partition) {
        return Err(ErrorCode::NOT_ENOUGH_REPLICAS.with_message(format!(
            "{topic}/{index}: fewer in-sync replicas than min_insync_replicas; retry"
        )));
    }
    Ok((partition, epoch))
}

/// Writes a coordinator's `batch` to `partition` as its leader in `epoch` (no wait). Blocks.
pub(crate) fn write_as_leader(
    state: &BrokerState,
    partition: &Partition,
    epoch: u32,
    batch: bytes::Bytes,
) -> Result<PendingAppend, m::Error> {
    let context = ProduceContext {
        leader_epoch: epoch,
        producer_id_end: state.cluster.image().next_producer_id,
        now_ms: now_ms(),
    };
    crate::service::append::write_partition(partition, batch, context)
}

/// Writes a coordinator's `batch` to its internal `partition` as leader in `epoch`, meets the
/// flush policy (on the blocking pool), and waits until every in-sync replica holds it.
pub(crate) async fn write_replicated(
    state: &Arc<BrokerState>,
    partition: &Arc<Partition>,
    epoch: u32,
    batch: bytes::Bytes,
) -> Result<PendingAppend, WriteError> {
    let (s, p) = (state.clone(), partition.clone());
    let not_written = |error| WriteError {
        error,
        written: None,
    };
    let written = tokio::task::spawn_blocking(move || -> Result<_, WriteError> {
        let pending = write_as_leader(&s, &p, epoch, batch).map_err(not_written)?;
        p.finish(pending).map_err(|e| WriteError {
            error: e.code.with_message(e.message),
            written: Some(pending),
        })?;
        Ok(pending)
    })
    .await
    .map_err(|e| not_written(ErrorCode::UNKNOWN_SERVER_ERROR.with_message(e.to_string())))??;
    await_coordination_replicas(partition, written.end_offset, epoch)
        .await
        .map_err(|error| WriteError {
            error,
            written: Some(written),
        })?;
    Ok(written)
}

/// Why [`write_replicated`] failed, and whether the batch is in the leader's log anyway
/// (then it is there in this epoch, and counts once the high watermark passes it).
#[derive(Debug)]
pub(crate) struct WriteError {
    pub error: m::Error,
    pub written: Option<PendingAppend>,
}

/// Waits until every in-sync replica of a coordinator's internal `partition` holds the write
/// ending at `end` (taken in leader `epoch`), at most [`OFFSET_COMMIT_TIMEOUT`].
pub(crate) async fn await_coordination_replicas(
    partition: &Arc<Partition>,
    end: i64,
    epoch: u32,
) -> Result<(), m::Error> {
    let name = || format!("{}/{}", partition.topic, partition.index);
    let replicated = crate::service::append::await_replicas(partition, end, epoch);
    match tokio::time::timeout(OFFSET_COMMIT_TIMEOUT, replicated).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(ErrorCode::NOT_COORDINATOR.with_message(format!(
            "{} is not led here: {}",
            name(),
            e.message
        ))),
        Err(_) => Err(ErrorCode::REQUEST_TIMED_OUT.with_message(format!(
            "the in-sync replicas of {} did not confirm the write within {} ms; retry",
            name(),
            OFFSET_COMMIT_TIMEOUT.as_millis()
        ))),
    }
}

/// Creates `__consumer_offsets` unless it exists (the first FindCoordinator of a cluster).
pub(crate) async fn ensure_offsets_topic(state: &BrokerState) -> Result<(), m::Error> {
    if !state.cluster.image().topics.contains_key(OFFSETS_TOPIC) {
        let ensure = tinymq_meta::Command::EnsureOffsetsTopic {
            partitions: OFFSETS_PARTITIONS,
        };
        state.cluster.write(ensure).await?;
        state
            .cluster
            .wait_until(OFFSETS_TOPIC_WAIT, |image| {
                image.topics.contains_key(OFFSETS_TOPIC)
            })
            .await;
    }
    Ok(())
}

/// The broker coordinating a key of internal topic `topic` (transaction states, half
/// messages): the live leader of partition `index`, creating the topic with `ensure` first
/// (waiting up to `wait` for it to appear). `what` names the key in errors.
pub(crate) async fn coordinator_in(
    state: &BrokerState,
    (topic, ensure, wait): (&str, tinymq_meta::Command, Duration),
    index: u32,
    what: &str,
) -> Result<tinymq_meta::image::BrokerRecord, m::Error> {
    if !state.cluster.image().topics.contains_key(topic) {
        state.cluster.write(ensure).await?;
        state
            .cluster
            .wait_until(wait, |image| image.topics.contains_key(topic))
            .await;
    }
    let image = state.cluster.image();
    let partition = image
        .topics
        .get(topic)
        .and_then(|t| t.partitions.get(index as usize))
        .ok_or_else(|| {
            ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
                .with_message(format!("{topic} is being created; retry"))
        })?;
    partition
        .leader
        .and_then(|leader| image.brokers.get(&leader))
        .filter(|b| !b.fenced)
        .cloned()
        .ok_or_else(|| {
            ErrorCode::COORDINATOR_LOAD_IN_PROGRESS.with_message(format!(
                "the coordinator of {what} ({topic}/{index}) is offline; retry"
            ))
        })
}

/// How long a commit waits for the in-sync replicas before it is answered
/// `REQUEST_TIMED_OUT` (Kafka's `offsets.commit.timeout.ms`); the client retries it.
pub const OFFSET_COMMIT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the first FindCoordinator waits for a new `__consumer_offsets` to appear.
const OFFSETS_TOPIC_WAIT: Duration = Duration::from_secs(10);

/// The leader epoch in which this broker leads offsets partition `index` now, by both the
/// image and the partition's own role, with the partition.
fn led_here(state: &BrokerState, index: u32) -> Option<(Arc<Partition>, u32)> {
    let (partition, epoch) = state.led_partition_any(OFFSETS_TOPIC, index).ok()?;
    (partition.leading_epoch() == Some(epoch)).then_some((partition, epoch))
}

/// Brings the coordinated groups in line with the offsets partitions led here: drops the
/// groups of partitions no longer led (or led in a new epoch) and starts loading those newly
/// led. Call after every reconciliation, on the runtime; loads run on the blocking pool.
pub fn sync(state: &Arc<BrokerState>) {
    let store = &state.groups.offsets;
    for index in 0..OFFSETS_PARTITIONS {
        let Some((partition, epoch)) = led_here(state, index) else {
            if store.led().contains_key(&index) {
                tracing::info!(partition = index, "no longer leading this offsets partition; its groups are coordinated elsewhere");
                state.groups.drop_partition(index);
            }
            continue;
        };
        if store.led().get(&index) == Some(&epoch) {
            continue;
        }
        // Members of the previous epoch's groups are gone with it: start over from the log.
        state.groups.drop_partition(index);
        if !store.begin_load(index, epoch) {
            continue;
        }
        let s = state.clone();
        tokio::task::spawn_blocking(move || load(&s, &partition, index, epoch));
    }
}

/// Reads an offsets partition to its log end and serves its groups. Everything on this
/// leader's log counts: it is the log the followers will converge to. Blocks.
fn load(state: &BrokerState, partition: &Partition, index: u32, epoch: u32) {
    let end = partition.log.log_end_offset();
    match read_log_with_pending(&partition.log, index) {
        Ok((loaded, pending)) => {
            let groups = loaded.len();
            if state
                .groups
                .offsets
                .finish_load_with(index, epoch, loaded, pending)
            {
                tracing::info!(
                    partition = index,
                    leader_epoch = epoch,
                    groups,
                    log_end = end,
                    "loaded the committed offsets of an offsets partition; coordinating its groups"
                );
            }
        }
        Err(e) => {
            // Stay "loading" (clients retry): the next leadership change tries again.
            tracing::error!(partition = index, error = %e, "cannot read an offsets partition; its groups stay unavailable here");
        }
    }
}

/// Appends `changes` to `group`'s offsets partition as its leader and waits until every
/// in-sync replica holds them (fsynced), then serves them. Refused with
/// `NOT_ENOUGH_REPLICAS` while fewer than the topic's `min_insync_replicas` are in sync, and
/// `NOT_COORDINATOR` once the partition is led elsewhere (the commit may or may not survive;
/// the client sends it again to the new coordinator).
pub async fn append(
    state: &Arc<BrokerState>,
    group: &str,
    changes: Vec<Change>,
) -> Result<(), m::Error> {
    append_commit(state, group, changes, None).await
}

/// [`append`] for a TxnOffsetCommit of a producer (id, epoch: `Some`): the offsets are written now and
/// count once the transaction's COMMIT marker follows them ([`write_marker`]).
pub async fn append_commit(
    state: &Arc<BrokerState>,
    group: &str,
    changes: Vec<Change>,
    producer: Option<(i64, i16)>,
) -> Result<(), m::Error> {
    if changes.is_empty() {
        return Ok(());
    }
    let index = partition_for_group(group);
    let batch = encode_commit(group, &changes, producer, now_ms())
        .map_err(|e| ErrorCode::UNKNOWN_SERVER_ERROR.with_message(e.to_string()))?;
    let g = group.to_string();
    write_staged(state, index, move |s, p, epoch| {
        let write = || {
            let written = write_as_leader(s, p, epoch, batch)?;
            Ok((written, written.end_offset))
        };
        match producer {
            None => s.groups.offsets.append(&g, epoch, changes, write),
            Some(p) => s.groups.offsets.append_txn(&g, epoch, p, changes, write),
        }
    })
    .await
}

/// Writes a transaction marker to offsets partition `index` as its leader: once every
/// in-sync replica holds it, the producer's offsets pending there are committed (or dropped).
pub async fn write_marker(
    state: &Arc<BrokerState>,
    index: u32,
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    coordinator_epoch: i32,
) -> Result<(), m::Error> {
    write_staged(state, index, move |s, p, epoch| {
        let producer = (producer_id, producer_epoch);
        s.groups
            .offsets
            .append_marker(index, epoch, producer, commit, || {
                let marker = crate::partition::txn::MarkerWrite {
                    producer_id,
                    producer_epoch,
                    marker: if commit {
                        MarkerType::Commit
                    } else {
                        MarkerType::Abort
                    },
                    coordinator_epoch,
                };
                let written = p
                    .append_marker(&marker, epoch)
                    .map_err(|e| e.code.with_message(e.message))?;
                Ok((written, written.end_offset))
            })
    })
    .await
}

/// Runs `write` (a write to offsets partition `index` staged in the offsets store) on the
/// blocking pool as the partition's leader, waits for the flush policy and every in-sync
/// replica, then applies what the high watermark passed.
async fn write_staged(
    state: &Arc<BrokerState>,
    index: u32,
    write: impl FnOnce(&BrokerState, &Partition, u32) -> Result<PendingAppend, m::Error>
        + Send
        + 'static,
) -> Result<(), m::Error> {
    let (partition, epoch) = led_for_coordination(state, OFFSETS_TOPIC, index)?;
    let (s, p) = (state.clone(), partition.clone());
    let written = tokio::task::spawn_blocking(move || -> Result<PendingAppend, m::Error> {
        let pending = write(&s, &p, epoch)?;
        p.finish(pending)
            .map_err(|e| e.code.with_message(e.message))?;
        Ok(pending)
    })
    .await
    .map_err(|e| ErrorCode::UNKNOWN_SERVER_ERROR.with_message(e.to_string()))??;
    await_coordination_replicas(&partition, written.end_offset, epoch).await?;
    state
        .groups
        .offsets
        .apply_up_to(index, epoch, partition.high_watermark());
    Ok(())
}

#[cfg(test)]
mod tests;
