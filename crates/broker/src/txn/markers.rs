//! Ending a decided transaction: the COMMIT or ABORT marker is written to every partition of
//! the transaction by that partition's leader (this broker's own partitions directly, others'
//! with WriteTxnMarkers), each answered once every in-sync replica holds it; then the id's
//! `Complete*` state is made durable. A partition whose leader is away is retried until it
//! answers, so a transaction's markers are all written or the coordinator stops trying
//! because it stopped coordinating (the next one finds the `Prepare*` state when it loads and
//! starts over: writing a marker twice is harmless, a partition's reader skips it).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tinymq_protocol::{messages as m, ErrorCode};

use super::coordinator::Ticket;
use super::state::{self, TxnMetadata, TxnState};
use crate::partition::now_ms;
use crate::state::BrokerState;

/// First wait before a partition whose marker failed is tried again; doubled up to
/// [`MARKER_RETRY_BACKOFF_MAX`].
const MARKER_RETRY_BACKOFF: Duration = Duration::from_millis(50);
const MARKER_RETRY_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// How long a WriteTxnMarkers to another broker may take (it waits for that partition's
/// in-sync replicas).
const MARKER_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Writes the markers of `decided` (a `Prepare*` state made durable under `ticket`), then
/// its `Complete*` state, retrying each until it is done. Gives up silently only when this
/// broker stops coordinating the id (the next coordinator finds the `Prepare*` state when it
/// loads and starts over).
pub async fn complete(state: Arc<BrokerState>, id: String, ticket: Ticket, decided: TxnMetadata) {
    let commit = decided.state == TxnState::PrepareCommit;
    let mut left: Vec<(String, u32)> = decided.partitions.iter().cloned().collect();
    let mut backoff = MARKER_RETRY_BACKOFF;
    loop {
        if !still_coordinating(&state, &id, ticket) {
            return;
        }
        if !left.is_empty() {
            left = write_all(&state, &decided, commit, ticket, left).await;
        }
        if left.is_empty() {
            let done = super::durable::change(&state, &id, |current| {
                // Only the very state the markers were written for completes.
                let next = current
                    .filter(|m| **m == decided)
                    .and_then(|m| state::complete(m, now_ms()));
                Ok((next, ()))
            })
            .await;
            match done {
                Ok(_) => return,
                Err(e) => {
                    tracing::debug!(transactional_id = %id, error = %e, "could not record a transaction's completion yet; retrying")
                }
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MARKER_RETRY_BACKOFF_MAX);
    }
}

fn still_coordinating(state: &BrokerState, id: &str, ticket: Ticket) -> bool {
    super::durable::coordinator_epoch(state, id).ok() == Some(ticket.coordinator_epoch)
        && state
            .txns
            .is_loaded(ticket.partition, ticket.coordinator_epoch)
}

/// One round: each partition's marker once, grouped by leader. Returns those to try again.
async fn write_all(
    state: &Arc<BrokerState>,
    decided: &TxnMetadata,
    commit: bool,
    ticket: Ticket,
    partitions: Vec<(String, u32)>,
) -> Vec<(String, u32)> {
    let image = state.cluster.image();
    let mut by_leader: BTreeMap<u32, Vec<(String, u32)>> = BTreeMap::new();
    let mut left = Vec::new();
    for (topic, index) in partitions {
        let leader = image
            .topics
            .get(&topic)
            .and_then(|t| t.partitions.get(index as usize))
            .map(|p| p.leader);
        match leader {
            // The partition is gone with its topic: nothing to mark.
            None => {}
            Some(None) => left.push((topic, index)),
            Some(Some(leader)) => by_leader.entry(leader).or_default().push((topic, index)),
        }
    }
    let coordinator_epoch = ticket.coordinator_epoch as i32;
    for (leader, partitions) in by_leader {
        if leader == state.node_id() {
            let writes = partitions.into_iter().map(|(topic, index)| async move {
                let written = write_here(
                    state,
                    &topic,
                    index,
                    decided.producer_id,
                    decided.producer_epoch,
                    commit,
                    coordinator_epoch,
                )
                .await;
                ((topic, index), written)
            });
            for (partition, written) in futures::future::join_all(writes).await {
                if let Err(e) = written {
                    retry_or_skip(&mut left, partition, &e);
                }
            }
            continue;
        }
        let request = m::WriteTxnMarkersRequest {
            markers: vec![m::TxnMarker {
                producer_id: decided.producer_id,
                producer_epoch: i32::from(decided.producer_epoch),
                commit,
                coordinator_epoch,
                topics: group_topics(&partitions),
            }],
        };
        match send(state, leader, &request).await {
            Ok(response) => {
                let results = response.markers.into_iter().flat_map(|r| r.partitions);
                let mut answered = std::collections::HashSet::new();
                for r in results {
                    answered.insert((r.topic.clone(), r.partition));
                    if let Some(e) = r.error.filter(|e| !e.is_ok()) {
                        retry_or_skip(&mut left, (r.topic, r.partition), &e);
                    }
                }
                left.extend(partitions.into_iter().filter(|p| !answered.contains(p)));
            }
            Err(e) => {
                tracing::debug!(leader, error = %e, "markers not written yet; retrying");
                left.extend(partitions);
            }
        }
    }
    left
}

async fn send(
    state: &Arc<BrokerState>,
    leader: u32,
    request: &m::WriteTxnMarkersRequest,
) -> Result<m::WriteTxnMarkersResponse, m::Error> {
    let image = state.cluster.image();
    let connection = state
        .txn_links
        .to(&image, state.node_id(), &state.config.links, leader)
        .await?;
    connection
        .request(request, MARKER_REQUEST_TIMEOUT)
        .await
        .map_err(|e| ErrorCode::LEADER_NOT_AVAILABLE.with_message(e.to_string()))
}

/// A marker refused for good (its partition is gone) is not retried; any other refusal is.
fn retry_or_skip(left: &mut Vec<(String, u32)>, partition: (String, u32), e: &m::Error) {
    if e.error_code() == ErrorCode::UNKNOWN_TOPIC_OR_PARTITION {
        return;
    }
    tracing::debug!(topic = %partition.0, partition = partition.1, error = %e, "marker not written yet; retrying");
    left.push(partition);
}

/// Partitions grouped by topic, in the wire form.
pub fn group_topics(partitions: &[(String, u32)]) -> Vec<m::TxnTopic> {
    let mut topics: Vec<m::TxnTopic> = Vec::new();
    for (topic, index) in partitions {
        match topics.iter_mut().find(|t| &t.topic == topic) {
            Some(t) => t.partitions.push(*index),
            None => topics.push(m::TxnTopic {
                topic: topic.clone(),
                partitions: vec![*index],
            }),
        }
    }
    topics
}

/// Writes one marker to a partition led here and waits for its in-sync replicas: through the
/// offsets store for an offsets partition (the transaction's offsets become committed or are
/// dropped), through the partition service layer for any other.
pub async fn write_here(
    state: &Arc<BrokerState>,
    topic: &str,
    partition: u32,
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    coordinator_epoch: i32,
) -> Result<(), m::Error> {
    if topic == crate::group::offsets::OFFSETS_TOPIC {
        return crate::offsets_partitions::write_marker(
            state,
            partition,
            producer_id,
            producer_epoch,
            commit,
            coordinator_epoch,
        )
        .await;
    }
    crate::service::append::write_marker(
        state,
        topic,
        partition,
        producer_id,
        producer_epoch,
        commit,
        coordinator_epoch,
    )
    .await
    .map(|_| ())
}

/// A newly loaded partition's transactions that were deciding: their markers are written
/// again and they complete.
pub async fn resume(state: Arc<BrokerState>, partition: u32) {
    for (id, m, epoch) in state.txns.all() {
        if super::coordinator::partition_for_txn(&id) != partition || !m.state.is_preparing() {
            continue;
        }
        let ticket = Ticket {
            partition,
            coordinator_epoch: epoch,
        };
        tracing::info!(transactional_id = %id, state = m.state.name(), "finishing the markers of a transaction decided before this coordinator took over");
        tokio::spawn(complete(state.clone(), id, ticket, m));
    }
}
