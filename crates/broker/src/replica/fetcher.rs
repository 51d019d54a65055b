//! Follower fetching: one task per leader broker fetches every partition this broker follows
//! from it, in one long-polling request at a time, and appends what comes back byte for byte
//! (or truncates where the leader says the logs diverge). Each request reports how far this
//! replica's log is durable, which is what moves the leader's high watermark.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tinymq_client::{ClientError, Connection, NodeRole};
use tinymq_protocol::{messages as m, ErrorCode};
use tinymq_replication::EpochEnd;
use tokio_util::sync::CancellationToken;

use crate::partition::Partition;
use crate::replica::fetchers::Followed;
use crate::replica::Role;
use crate::state::BrokerState;

/// How long a follower's fetch waits at the leader for new records.
pub const REPLICA_FETCH_WAIT_MS: u32 = 500;
/// Most record bytes one follower fetch asks for, over all its partitions.
pub const REPLICA_FETCH_BYTES_MAX: u32 = 16 << 20;
/// Most record bytes one follower fetch asks for per partition.
pub const REPLICA_FETCH_PARTITION_BYTES_MAX: u32 = 4 << 20;
/// How long a follower waits for a fetch's answer beyond the long poll.
const REPLICA_FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Pauses after a failed connection or fetch: it doubles up to the maximum.
const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Starts, updates and stops the fetch tasks (`state.fetchers`) so that each partition
/// followed here is fetched from its current leader. Call after every reconciliation, on the
/// runtime.
pub fn sync(state: &Arc<BrokerState>) {
    state
        .fetchers
        .sync(state.all_partitions(), |leader, followed, stop| {
            tokio::spawn(fetch_loop(state.clone(), leader, followed, stop));
        });
}

/// Fetches from `leader` until stopped.
async fn fetch_loop(
    state: Arc<BrokerState>,
    leader: u32,
    followed: Arc<Mutex<Vec<Followed>>>,
    stop: CancellationToken,
) {
    let me = state.node_id();
    let mut connection: Option<Connection> = None;
    let mut backoff = BACKOFF_MIN;
    tracing::info!(leader, "following partitions led by broker {leader}");
    while !stop.is_cancelled() {
        let parts = followed.lock().clone();
        let outcome = match connection.as_ref().filter(|c| !c.is_closed()) {
            Some(c) => tokio::select! {
                fetched = fetch_once(&state, leader, c, &parts) => fetched,
                // An answer to a fetch sent before this loop was stopped must not be applied.
                _ = stop.cancelled() => break,
            },
            None => match connect(&state, leader, me).await {
                Ok(c) => {
                    connection = Some(c);
                    continue;
                }
                Err(e) => Err(e),
            },
        };
        match outcome {
            // The long poll at the leader was the wait: fetch again at once.
            Ok(Fetched::Progress | Fetched::Idle) => {
                state.fetchers.reached(leader);
                backoff = BACKOFF_MIN;
                continue;
            }
            Ok(Fetched::Refused) => {
                state.fetchers.reached(leader);
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
            Err(e) => {
                tracing::debug!(leader, error = %e, "follower fetch failed; retrying");
                // Refused: evidence the leader may be gone (a fetch whose connection closed
                // under it recorded that already).
                if connection.as_ref().is_none_or(Connection::is_closed) {
                    state.fetchers.lost(leader, std::time::Instant::now());
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.cancelled() => {}
        }
    }
    state.fetchers.reached(leader);
    tracing::debug!(leader, "stopped following broker {leader}");
}

async fn connect(state: &BrokerState, leader: u32, me: u32) -> Result<Connection, String> {
    let image = state.cluster.image();
    let broker = image
        .brokers
        .get(&leader)
        .filter(|b| !b.fenced)
        .ok_or_else(|| format!("broker {leader} is not live"))?;
    let addr = format!("{}:{}", broker.host, broker.port);
    Connection::connect_secure(
        &addr,
        &format!("tinymq-replica-{me}"),
        &image.cluster_id,
        NodeRole::Broker,
        u64::from(me),
        &state.config.links,
    )
    .await
    .map_err(|e| e.to_string())
}

/// What one fetch from a leader came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fetched {
    /// Records appended or a divergent tail cut.
    Progress,
    /// Nothing new within the long poll.
    Idle,
    /// Nothing to fetch, or a partition refused or failed: wait before asking again.
    Refused,
}

/// One fetch of every followed partition and what came of it.
async fn fetch_once(
    state: &Arc<BrokerState>,
    leader: u32,
    connection: &Connection,
    parts: &[Followed],
) -> Result<Fetched, String> {
    if parts.is_empty() {
        return Ok(Fetched::Refused);
    }
    let request = replica_fetch_request(
        state.node_id(),
        parts
            .iter()
            .map(|f| fetch_partition(&f.partition, f.leader_epoch))
            .collect(),
    );
    let wait = REPLICA_FETCH_TIMEOUT + Duration::from_millis(u64::from(REPLICA_FETCH_WAIT_MS));
    let response = match connection.request(&request, wait).await {
        Ok(response) => response,
        Err(e) => {
            // Closed under the fetch, not merely slow or refused: evidence the leader is gone,
            // recorded before anything else runs (a client may ask for metadata right now).
            if matches!(e, ClientError::ConnectionClosed(_)) || connection.is_closed() {
                state.fetchers.lost(leader, std::time::Instant::now());
            }
            return Err(e.to_string());
        }
    };
    let parts = parts.to_vec();
    tokio::task::spawn_blocking(move || apply(leader, &parts, response.partitions))
        .await
        .map_err(|e| e.to_string())
}

/// The fetch follower `me` sends its leader for `partitions` (each from
/// [`fetch_partition`]). The simulation (`replica::sim`) sends the same.
pub(crate) fn replica_fetch_request(
    me: u32,
    partitions: Vec<m::FetchPartition>,
) -> m::FetchRequest {
    m::FetchRequest {
        filter: String::new(),
        max_wait_ms: REPLICA_FETCH_WAIT_MS,
        min_bytes: 1,
        max_bytes: REPLICA_FETCH_BYTES_MAX,
        replica_id: me,
        partitions,
        isolation_level: 0,
    }
}

/// What a follower of `p` in `leader_epoch` asks its leader for: the records from its log
/// end, with its latest epoch (for the divergence check) and its durable end (which moves
/// the leader's high watermark).
pub(crate) fn fetch_partition(p: &Partition, leader_epoch: u32) -> m::FetchPartition {
    let position = p.follower_position();
    m::FetchPartition {
        topic: p.topic.clone(),
        partition: p.index,
        offset: position.log_end,
        partition_bytes_max: REPLICA_FETCH_PARTITION_BYTES_MAX,
        current_leader_epoch: i32::try_from(leader_epoch).ok(),
        last_fetched_epoch: position.last_epoch,
        replica_durable_end: position.durable_end,
        replica_log_start: p.log.log_start_offset(),
    }
}

/// Applies a fetch's results to the followed partitions. Blocks (appends, fsyncs,
/// truncations).
fn apply(leader: u32, parts: &[Followed], results: Vec<m::FetchPartitionResult>) -> Fetched {
    let (mut progress, mut failed) = (false, false);
    for result in results {
        let Some(followed) = parts
            .iter()
            .find(|f| f.partition.topic == result.topic && f.partition.index == result.partition)
        else {
            continue;
        };
        let p = &followed.partition;
        let Some(applied) = apply_current(p, leader, followed.leader_epoch, result) else {
            continue;
        };
        match applied {
            Ok(moved) => progress |= moved,
            Err(e) => {
                failed = true;
                tracing::debug!(topic = %p.topic, partition = p.index, error = %e, "replicating from the leader failed; retrying");
            }
        }
    }
    match (progress, failed) {
        (true, _) => Fetched::Progress,
        (false, false) => Fetched::Idle,
        (false, true) => Fetched::Refused,
    }
}

/// Applies one partition's result, fetched from `leader` while following it in
/// `leader_epoch`, if the partition still follows it so; `None` (nothing done) if not. The
/// fetch task calls this for every result, and so does the simulation (`replica::sim`).
/// Blocks (appends, fsyncs, truncations).
pub(crate) fn apply_current(
    p: &Partition,
    leader: u32,
    leader_epoch: u32,
    result: m::FetchPartitionResult,
) -> Option<Result<bool, String>> {
    // The answer counts only while the partition still follows this leader in the epoch it
    // was fetched in; the role stays locked while it is applied, so a role change waits for
    // it (a stale answer must not cut or extend a log that leads or follows another leader
    // now).
    let role = p.role.lock();
    let current = matches!(&*role, Role::Follower { leader: Some(l), leader_epoch: e }
        if *l == leader && *e == leader_epoch);
    if !current {
        return None;
    }
    let applied = apply_one(p, result);
    drop(role);
    Some(applied)
}

/// Applies one partition's result; `Ok(true)` if the log changed. A failure here is
/// logged at WARN (the local log refused or failed); a refusal by the leader is returned
/// for a DEBUG line (expected while leadership moves).
fn apply_one(p: &Partition, result: m::FetchPartitionResult) -> Result<bool, String> {
    let local = |e: String| {
        tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "cannot apply what the leader sent; fetching again");
        e
    };
    if let Some(diverging) = result.diverging_epoch {
        let point = cut_for_divergence(p, &diverging)?;
        p.truncate_for_leader(point)
            .map_err(|e| local(e.to_string()))?;
        return Ok(true);
    }
    if let Some(error) = result.error {
        let code = ErrorCode::from_code(error.code);
        if code == Some(ErrorCode::OFFSET_OUT_OF_RANGE)
            && p.log.log_end_offset() < result.log_start_offset
        {
            // The leader no longer has what comes next here: start over at its log start.
            p.restart_at(result.log_start_offset)
                .map_err(|e| local(e.to_string()))?;
            return Ok(true);
        }
        return Err(format!("leader answered {}: {}", error.code, error.message));
    }
    let moved = !result.records.is_empty();
    p.append_from_leader(result.records, result.high_watermark)
        .map_err(|e| local(e.message))?;
    // The leader's log start moves up with its deletions (DeleteRecords) and retention; this
    // replica's follows, up to what it holds, so records deleted stay deleted if it leads.
    let follow_to = result.log_start_offset.min(p.log.log_end_offset());
    if follow_to > p.log.log_start_offset() {
        p.log
            .delete_records_before(follow_to)
            .map_err(|e| local(e.to_string()))?;
    }
    Ok(moved)
}

/// Where a follower cuts its log when the leader reports a divergence: the one rule,
/// [`tinymq_replication::truncation_point`], given the leader's answer for this log's latest
/// epoch (epoch -1: the leader knows no epoch at or below it). A cut that is not `done` needs
/// no second question here: the next fetch carries the new latest epoch and the leader checks
/// it again ([`tinymq_replication::fetch_divergence`]). A stale answer (for an epoch above
/// this log's latest) cuts nothing and is an error; the next fetch asks again.
fn cut_for_divergence(p: &Partition, diverging: &m::DivergingEpoch) -> Result<i64, String> {
    let answer = (diverging.epoch >= 0).then_some(EpochEnd {
        epoch: diverging.epoch,
        end_offset: diverging.end_offset,
    });
    p.log
        .with_epochs(|cache, log_start, log_end| {
            tinymq_replication::truncation_point(cache, log_start, log_end, answer)
        })
        .map(|cut| cut.offset)
        .map_err(|e| format!("the leader's diverging epoch is stale: {e}"))
}
