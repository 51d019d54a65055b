//! ISR maintenance on the leader: every [`ISR_CHECK_INTERVAL`], each partition led here
//! compares its in-sync replicas with what its followers have shown (a follower that has not
//! caught up for `replica_lag_time_max` leaves; one outside that reached the high watermark
//! and this epoch's start rejoins) and proposes the change to the MetaServer with its broker
//! epoch, leader epoch and partition epoch, which refuses it if any is stale (a deposed
//! leader cannot change the ISR). The image then brings the new ISR back to every broker.

use std::sync::Arc;
use std::time::Duration;

use tinymq_meta::{Command, Reply};
use tokio_util::sync::CancellationToken;

use crate::partition::{now_ms, Partition};
use crate::role::Role;
use crate::state::BrokerState;

/// How often each led partition's ISR is checked.
pub const ISR_CHECK_INTERVAL: Duration = Duration::from_millis(500);

/// Checks the ISR of every partition led here until `shutdown`.
pub async fn isr_loop(state: Arc<BrokerState>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(ISR_CHECK_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        for partition in state.all_partitions() {
            if let Some(proposal) = proposal_for(&state, &partition) {
                propose(&state, &partition, proposal).await;
            }
        }
    }
}

/// The AlterPartition command this leader should send for `partition` now, if any: its
/// unsettled proposal again (unchanged: the MetaServer may have applied it, and only a newer
/// partition epoch tells), or a new one, kept pending until the image settles it.
fn proposal_for(state: &BrokerState, partition: &Partition) -> Option<Command> {
    let image = state.cluster.image();
    let record = image
        .topics
        .get(&partition.topic)?
        .partitions
        .get(partition.index as usize)?;
    let lag_max_ms =
        i64::try_from(state.config.replica_lag_time_max.as_millis()).unwrap_or(i64::MAX);
    let registration = |id: u32| registration_of(&image, id);
    let (isr, partition_epoch) = isr_proposal(
        partition,
        record,
        state.node_id(),
        lag_max_ms,
        now_ms(),
        registration,
    )?;
    Some(Command::AlterPartition {
        topic: partition.topic.clone(),
        partition: partition.index,
        broker_id: state.node_id(),
        broker_epoch: state.cluster.epoch(),
        leader_epoch: record.leader_epoch,
        partition_epoch,
        isr,
    })
}

/// The broker epoch of broker `id` in `image`, if it is live: the MetaServer refuses adding
/// a fenced broker (do not ask), and a follower rejoins only on what it reported as this
/// registration.
pub(crate) fn registration_of(image: &tinymq_meta::MetadataImage, id: u32) -> Option<u64> {
    image
        .brokers
        .get(&id)
        .filter(|b| !b.fenced)
        .map(|b| b.epoch)
}

/// The ISR `me`, leading `partition` as `record` (its image) says, should propose now and
/// the partition epoch to propose it at, if any: its unsettled proposal again, or a new one,
/// then kept pending. `registration` gives each live broker's broker epoch
/// ([`registration_of`]). The simulation (`replica::sim`) calls this with its own clock.
pub(crate) fn isr_proposal(
    partition: &Partition,
    record: &tinymq_meta::PartitionRecord,
    me: u32,
    lag_max_ms: i64,
    now_ms: i64,
    registration: impl Fn(u32) -> Option<u64>,
) -> Option<(Vec<u32>, u32)> {
    let hw = partition.high_watermark();
    let leader_end = partition.log.log_end_offset();
    let mut role = partition.role.lock();
    let Role::Leader(leader) = &mut *role else {
        return None;
    };
    if record.leader != Some(me) || !leader.is(me, record.leader_epoch) {
        return None;
    }
    match leader.pending() {
        Some(pending) => Some((pending.isr.clone(), pending.partition_epoch)),
        // The image is ahead of this leader's state (reconcile has not applied it yet): a
        // proposal must be computed from, sent at and kept pending at one partition epoch.
        None if leader.partition_epoch() != record.partition_epoch => None,
        None => {
            let isr = leader.wanted_isr(
                &record.replicas,
                hw,
                leader_end,
                lag_max_ms,
                now_ms,
                registration,
            )?;
            leader.propose(isr.clone());
            Some((isr, record.partition_epoch))
        }
    }
}

async fn propose(state: &BrokerState, partition: &Partition, command: Command) {
    let Command::AlterPartition { isr: proposed, .. } = &command else {
        return;
    };
    let proposed = proposed.clone();
    match state.cluster.write(command).await {
        Ok(Reply::Partition(record)) => {
            if record.isr == proposed {
                tracing::info!(topic = %partition.topic, partition = partition.index, isr = ?record.isr, "in-sync replicas changed");
            } else {
                tracing::info!(topic = %partition.topic, partition = partition.index, proposed = ?proposed, isr = ?record.isr, "ISR change refused");
            }
            partition.assume_role(state.node_id(), &record);
        }
        Ok(_) => {}
        // No answer, or a refusal for stale epochs: the proposal stays pending and is sent
        // again until an image with a newer partition epoch settles it.
        Err(e) => {
            tracing::warn!(topic = %partition.topic, partition = partition.index, isr = ?proposed, error = %e.message, "ISR change not settled; sent again at the next check");
        }
    }
}
