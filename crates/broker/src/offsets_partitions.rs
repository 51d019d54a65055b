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

use tinymq_protocol::{messages as m, ErrorCode};

use crate::group::offsets::{
    encode_batch, partition_for_group, read_log, Change, OFFSETS_PARTITIONS, OFFSETS_TOPIC,
};
use crate::partition::{now_ms, Partition, PendingAppend, ProduceContext};
use crate::state::BrokerState;

/// How long a commit waits for the in-sync replicas before it is answered
/// `REQUEST_TIMED_OUT` (Kafka's `offsets.commit.timeout.ms`); the client retries it.
pub const OFFSET_COMMIT_TIMEOUT: Duration = Duration::from_secs(5);

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
    match read_log(&partition.log) {
        Ok(loaded) => {
            let groups = loaded.len();
            if state.groups.offsets.finish_load(index, epoch, loaded) {
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
    if changes.is_empty() {
        return Ok(());
    }
    let index = partition_for_group(group);
    let not_coordinator = |e: m::Error| {
        ErrorCode::NOT_COORDINATOR.with_message(format!(
            "{OFFSETS_TOPIC}/{index} is not led here: {}",
            e.message
        ))
    };
    let (partition, epoch) = state
        .led_partition_any(OFFSETS_TOPIC, index)
        .map_err(not_coordinator)?;
    if !state.cluster.session_current() || partition.leading_epoch() != Some(epoch) {
        return Err(ErrorCode::NOT_COORDINATOR.with_message(format!(
            "{OFFSETS_TOPIC}/{index}: this broker cannot confirm its MetaServer session or does not lead it yet; retry"
        )));
    }
    if !state.enough_in_sync(&partition) {
        return Err(ErrorCode::NOT_ENOUGH_REPLICAS.with_message(format!(
            "{OFFSETS_TOPIC}/{index}: fewer in-sync replicas than min_insync_replicas; retry"
        )));
    }
    let batch = encode_batch(group, &changes, now_ms())
        .map_err(|e| ErrorCode::UNKNOWN_SERVER_ERROR.with_message(e.to_string()))?;
    let (s, p, g) = (state.clone(), partition.clone(), group.to_string());
    let written = tokio::task::spawn_blocking(move || -> Result<PendingAppend, m::Error> {
        let pending = s.groups.offsets.append(&g, epoch, changes, || {
            let context = ProduceContext {
                leader_epoch: epoch,
                producer_id_end: s.cluster.image().next_producer_id,
                now_ms: now_ms(),
            };
            let written = crate::service::append::write_partition(&p, batch, context)?;
            Ok((written, written.end_offset))
        })?;
        p.finish(pending)
            .map_err(|e| e.code.with_message(e.message))?;
        Ok(pending)
    })
    .await
    .map_err(|e| ErrorCode::UNKNOWN_SERVER_ERROR.with_message(e.to_string()))??;
    let replicated = crate::service::append::await_replicas(&partition, written.end_offset, epoch);
    match tokio::time::timeout(OFFSET_COMMIT_TIMEOUT, replicated).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(not_coordinator(e)),
        Err(_) => {
            return Err(ErrorCode::REQUEST_TIMED_OUT.with_message(format!(
                "the in-sync replicas of {OFFSETS_TOPIC}/{index} did not confirm the commit within {} ms; retry",
                OFFSET_COMMIT_TIMEOUT.as_millis()
            )))
        }
    }
    state
        .groups
        .offsets
        .apply_up_to(index, epoch, partition.high_watermark());
    Ok(())
}

#[cfg(test)]
mod tests;
