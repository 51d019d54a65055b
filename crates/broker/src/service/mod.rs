//! The partition service layer: what every part of the broker that writes or reads a
//! partition goes through, below the request handlers. [`append`] checks a write against the
//! partition's leadership, session and in-sync replicas, writes it, and waits for its flush
//! policy and replicas; [`read`] reads whole batches below the high watermark and lists
//! offsets; [`fetch`] is the long poll a consumer's or a follower's fetch waits in;
//! [`delete_records`] moves a partition's log start up (DeleteRecords). The native
//! handlers, the share groups, delays, routes, the group offsets and the fuzz harness all use
//! these functions, so a rule added here holds for every writer and reader.
//!
//! This module only declares its parts and the helpers they share; it uses none of them, so
//! the parts can use it without an import cycle.

pub(crate) mod append;
pub(crate) mod delete_records;
pub(crate) mod fetch;
pub(crate) mod read;

use tinymq_protocol::{messages as m, ErrorCode};

use crate::state::BrokerState;

/// Most partitions one produce, fetch or list-offsets request may name: each costs the
/// broker a result (and a watch while a fetch waits), so the count is bounded, not only the
/// frame's bytes.
pub const REQUEST_PARTITIONS_MAX: usize = 10_000;

/// The refusal of a request naming more than [`REQUEST_PARTITIONS_MAX`] partitions.
pub(crate) fn too_many_partitions(count: usize) -> Option<m::Error> {
    (count > REQUEST_PARTITIONS_MAX).then(|| {
        ErrorCode::INVALID_REQUEST.with_message(format!(
            "{count} partitions in one request; at most {REQUEST_PARTITIONS_MAX}"
        ))
    })
}

/// Runs blocking disk work off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, m::Error> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ErrorCode::UNKNOWN_SERVER_ERROR.with_message(format!("worker failed: {e}")))
}

/// The current leader to name in a result carrying `error` (only with `NOT_LEADER`).
pub(crate) fn leader_hint(
    state: &BrokerState,
    topic: &str,
    partition: u32,
    error: &m::Error,
) -> u32 {
    if error.code == u32::from(ErrorCode::NOT_LEADER.code()) {
        state.current_leader(topic, partition)
    } else {
        0
    }
}

#[cfg(test)]
mod marker_tests;
