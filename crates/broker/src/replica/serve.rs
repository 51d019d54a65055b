//! The leader's side of a follower's fetch: the follower must follow this leader's epoch, its
//! log must agree with the leader's at its end (else it is told where they diverge), its
//! reported position moves the high watermark, and it reads up to the leader's log end.

use std::sync::Arc;

use bytes::Bytes;
use tinymq_protocol::{messages as m, ErrorCode};
use tinymq_replication::{fetch_divergence, FetchCheck};

use crate::fetch_frame::{read_records, Records};
use crate::partition::{now_ms, Partition};
use crate::role::Role;
use crate::service::fetch::{long_poll, read_each, FetchAnswer, FetchHold, PartitionReader};
use crate::service::read::PartitionRead;
use crate::state::BrokerState;

/// Where a follower's log stops agreeing with the leader's, if it does: the leader's last
/// epoch at or below the follower's last one, and where that epoch ends in the leader's log
/// (the rule is [`tinymq_replication::fetch_divergence`]). A leader that knows no such epoch
/// answers epoch -1 at its log start.
fn divergence(partition: &Partition, fp: &m::FetchPartition) -> Option<m::DivergingEpoch> {
    let (check, log_start) = partition.log.with_epochs(|cache, log_start, log_end| {
        let check = fetch_divergence(cache, log_start, log_end, fp.offset, fp.last_fetched_epoch);
        (check, log_start)
    });
    match check {
        FetchCheck::Agrees => None,
        FetchCheck::Diverges(Some(answer)) => Some(m::DivergingEpoch {
            epoch: answer.epoch,
            end_offset: answer.end_offset,
        }),
        FetchCheck::Diverges(None) => Some(m::DivergingEpoch {
            epoch: -1,
            end_offset: log_start,
        }),
    }
}

/// Whether the follower follows the epoch `partition` is led in here.
fn follows_this_leadership(partition: &Partition, fp: &m::FetchPartition) -> Result<(), m::Error> {
    let epoch = partition.leading_epoch().ok_or_else(|| {
        ErrorCode::NOT_LEADER
            .with_message(format!("{}/{} is not led here yet", fp.topic, fp.partition))
    })?;
    match fp.current_leader_epoch {
        Some(theirs) if i64::from(theirs) != i64::from(epoch) => Err(ErrorCode::NOT_LEADER
            .with_message(format!(
            "{}/{}: the follower follows leader epoch {theirs}; this leader is in epoch {epoch}",
            fp.topic, fp.partition
        ))),
        Some(_) => Ok(()),
        // Without its epoch a follower's report could come from following another leader.
        None => Err(ErrorCode::INVALID_REQUEST.with_message(format!(
            "{}/{}: a replica fetch must carry current_leader_epoch",
            fp.topic, fp.partition
        ))),
    }
}

/// Answers a follower's fetch (`replica_id` set, checked by [`authorize`]): records where the
/// follower stands in each partition, then long-polls for records past its log end.
pub(crate) async fn fetch(
    state: Arc<BrokerState>,
    req: m::FetchRequest,
    turns: Arc<tokio::sync::Semaphore>,
    stats: Arc<tinymq_net::ConnectionStats>,
) -> (FetchAnswer, Option<FetchHold>) {
    for fp in &req.partitions {
        note_follower(&state, req.replica_id, fp);
    }
    long_poll(state, req, turns, FollowerReads, stats).await
}

/// A follower's reads: up to the leader's log end, waking when it moves.
#[derive(Clone)]
struct FollowerReads;

impl PartitionReader for FollowerReads {
    const FOLLOWER: bool = true;

    fn read(
        &self,
        state: &BrokerState,
        req: &m::FetchRequest,
        budget: usize,
    ) -> Vec<PartitionRead> {
        read_each(req, budget, |_, fp, left| {
            read_for_follower(state, fp, left)
        })
    }
}

/// Records where follower `replica` stands (once per fetch request, before any read), which
/// may raise the high watermark.
fn note_follower(state: &BrokerState, replica: u32, fp: &m::FetchPartition) {
    if let Ok((partition, _)) = state.led_partition_any(&fp.topic, fp.partition) {
        let registration = state.cluster.image().brokers.get(&replica).map(|b| b.epoch);
        note_follower_of(&partition, replica, fp, now_ms(), registration);
    }
}

/// [`note_follower`] once the image names this broker the leader of `partition` and has
/// `replica` registered as `registration` (its broker epoch): the simulation
/// (`replica::sim`) calls this with its own clock.
pub(crate) fn note_follower_of(
    partition: &Partition,
    replica: u32,
    fp: &m::FetchPartition,
    now_ms: i64,
    registration: Option<u64>,
) {
    if follows_this_leadership(partition, fp).is_err() {
        return;
    }
    if divergence(partition, fp).is_some() {
        return;
    }
    let leader_end = partition.log.log_end_offset();
    if let Role::Leader(leader) = &mut *partition.role.lock() {
        let durable_end = fp.replica_durable_end.min(fp.offset);
        leader.on_fetch(replica, durable_end, leader_end, now_ms, registration);
        leader.note_log_start(replica, fp.replica_log_start);
    }
    partition.publish_high_watermark();
}

/// The head of a result for `fp`, before anything is known of the partition.
fn result_head(fp: &m::FetchPartition) -> m::FetchPartitionResult {
    m::FetchPartitionResult {
        topic: fp.topic.clone(),
        partition: fp.partition,
        high_watermark: -1,
        log_start_offset: -1,
        log_end_offset: -1,
        ..Default::default()
    }
}

/// One partition of a follower's fetch: the batches from its log end, up to the leader's log
/// end and `bytes_max`, or where it diverges, or the error.
fn read_for_follower(
    state: &BrokerState,
    fp: &m::FetchPartition,
    bytes_max: usize,
) -> PartitionRead {
    let current_leader = || state.current_leader(&fp.topic, fp.partition);
    match state.led_partition_any(&fp.topic, fp.partition) {
        Ok((partition, _)) => read_led_for_follower(&partition, fp, bytes_max, current_leader),
        Err(e) => {
            let mut result = result_head(fp);
            result.current_leader = current_leader();
            result.error = Some(e);
            (result, Records::Bytes(Bytes::new()))
        }
    }
}

/// [`read_for_follower`] once the image names this broker the leader of `partition`;
/// `current_leader` names the leader in a refusal. The simulation (`replica::sim`) calls
/// this.
pub(crate) fn read_led_for_follower(
    partition: &Arc<Partition>,
    fp: &m::FetchPartition,
    bytes_max: usize,
    current_leader: impl FnOnce() -> u32,
) -> PartitionRead {
    let empty = || Records::Bytes(Bytes::new());
    let mut result = result_head(fp);
    if let Err(e) = follows_this_leadership(partition, fp) {
        result.current_leader = current_leader();
        result.error = Some(e);
        return (result, empty());
    }
    result.high_watermark = partition.high_watermark();
    result.log_start_offset = partition.log.log_start_offset();
    result.log_end_offset = partition.log.log_end_offset();
    if let Some(diverging) = divergence(partition, fp) {
        result.diverging_epoch = Some(diverging);
        return (result, empty());
    }
    if bytes_max == 0 {
        return (result, empty());
    }
    match read_records(partition, fp.offset, bytes_max, None) {
        Ok(records) => (result, records),
        Err(e) => {
            result.error = Some(e);
            (result, empty())
        }
    }
}

/// A fetch may carry a replica id only from the broker with that id.
pub(crate) fn authorize(replica: u32, peer: &tinymq_net::Peer) -> Result<(), m::Error> {
    let is_that_broker = peer.role == m::NodeRole::Broker && peer.node_id == u64::from(replica);
    if is_that_broker {
        Ok(())
    } else {
        Err(ErrorCode::CLUSTER_AUTHORIZATION_FAILED.with_message(format!(
            "a fetch with replica_id {replica} is accepted only from broker {replica}'s own connections"
        )))
    }
}
