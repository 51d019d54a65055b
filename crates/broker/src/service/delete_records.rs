//! Deleting the records of a partition below an offset (the native `DeleteRecords`, Kafka's
//! DeleteRecords): on the partition's leader, up to its high watermark, through the log's
//! [`tinymq_log::PartitionLog::delete_records_before`], which moves the log start durably.
//! Followers move theirs to the leader's when they next fetch (the fetch answer carries the
//! leader's log start; `crate::replica::fetcher`) and report it in their next fetch; the answer
//! waits until every in-sync follower has, as Kafka's does, so a new leader elected after the
//! answer has deleted the records too.

use std::sync::Arc;
use std::time::Duration;

use tinymq_protocol::{messages as m, ErrorCode};

use super::{blocking, leader_hint, too_many_partitions};
use crate::partition::Partition;
use crate::role::Role;
use crate::state::BrokerState;

/// What the offset `-1` stands for: the high watermark.
const HIGH_WATERMARK: i64 = -1;
/// How long an answer waits for the followers when the request names no time.
const FOLLOWERS_WAIT_DEFAULT: Duration = Duration::from_secs(30);
/// The longest wait a request may ask for.
pub const DELETE_RECORDS_TIMEOUT_MAX: Duration = Duration::from_secs(300);
/// How often a waiting answer looks at the followers' reports.
const FOLLOWERS_POLL: Duration = Duration::from_millis(10);

/// Deletes the records of each partition asked (already authorized) below its offset.
pub(crate) async fn delete_records(
    state: Arc<BrokerState>,
    request: m::DeleteRecordsRequest,
) -> m::DeleteRecordsResponse {
    let refuse = |error| m::DeleteRecordsResponse {
        error: Some(error),
        partitions: Vec::new(),
    };
    if let Some(refusal) = too_many_partitions(request.partitions.len()) {
        return refuse(refusal);
    }
    let wait = match request.timeout_ms {
        0 => FOLLOWERS_WAIT_DEFAULT,
        ms => Duration::from_millis(ms.into()),
    };
    if wait > DELETE_RECORDS_TIMEOUT_MAX {
        return refuse(ErrorCode::INVALID_REQUEST.with_message(format!(
            "timeout_ms {}: at most {} ms",
            request.timeout_ms,
            DELETE_RECORDS_TIMEOUT_MAX.as_millis()
        )));
    }
    let deleted = blocking(move || {
        request
            .partitions
            .into_iter()
            .map(|dp| delete_one(&state, dp))
            .collect::<Vec<_>>()
    })
    .await;
    let deleted = match deleted {
        Ok(deleted) => deleted,
        Err(e) => return refuse(e),
    };
    let deadline = tokio::time::Instant::now() + wait;
    let mut partitions = Vec::with_capacity(deleted.len());
    for (mut result, deleted) in deleted {
        if let Some((partition, offset)) = deleted {
            wait_for_followers(&partition, offset, deadline, &mut result).await;
        }
        partitions.push(result);
    }
    m::DeleteRecordsResponse {
        error: None,
        partitions,
    }
}

/// The answer for one partition, and the partition and offset to wait for when its records
/// were deleted here.
type Deleted = (
    m::DeleteRecordsPartitionResult,
    Option<(Arc<Partition>, i64)>,
);

fn delete_one(state: &BrokerState, dp: m::DeleteRecordsPartition) -> Deleted {
    let mut result = m::DeleteRecordsPartitionResult {
        topic: dp.topic.clone(),
        partition: dp.partition,
        error: None,
        low_watermark: -1,
        current_leader: 0,
    };
    let partition = match state.led_partition(&dp.topic, dp.partition) {
        Ok((partition, _)) => partition,
        Err(e) => {
            result.current_leader = leader_hint(state, &dp.topic, dp.partition, &e);
            result.error = Some(e);
            return (result, None);
        }
    };
    let high_watermark = partition.high_watermark();
    let offset = match dp.offset {
        HIGH_WATERMARK => high_watermark,
        offset if (0..=high_watermark).contains(&offset) => offset,
        offset => {
            result.error = Some(ErrorCode::OFFSET_OUT_OF_RANGE.with_message(format!(
                "{}/{}: offset {offset} is not between 0 and the high watermark {high_watermark} (-1: the high watermark)",
                dp.topic, dp.partition
            )));
            return (result, None);
        }
    };
    match partition.log.delete_records_before(offset) {
        Ok(log_start) => {
            result.low_watermark = log_start;
            (result, Some((partition, log_start)))
        }
        Err(e) => {
            result.error = Some(e.error_code().with_message(e.to_string()));
            (result, None)
        }
    }
}

/// Waits until every in-sync follower reported a log start at `offset` or above (the low
/// watermark is then the lowest of the replicas'), or `deadline` (REQUEST_TIMED_OUT), or this
/// broker no longer leads (NOT_LEADER: the new leader may not have deleted them).
async fn wait_for_followers(
    partition: &Partition,
    offset: i64,
    deadline: tokio::time::Instant,
    result: &mut m::DeleteRecordsPartitionResult,
) {
    loop {
        let followers = match &*partition.role.lock() {
            Role::Leader(leader) => Ok(leader.followers_log_start()),
            _ => Err(()),
        };
        match followers {
            Err(()) => {
                result.error = Some(ErrorCode::NOT_LEADER.with_message(format!(
                    "{}/{}: leadership moved before every in-sync follower deleted the records",
                    partition.topic, partition.index
                )));
                return;
            }
            Ok(None) => return,
            Ok(Some(lowest)) if lowest >= offset => {
                result.low_watermark = offset.min(lowest);
                return;
            }
            Ok(Some(_)) if tokio::time::Instant::now() >= deadline => {
                result.error = Some(ErrorCode::REQUEST_TIMED_OUT.with_message(format!(
                    "{}/{}: the records are deleted on the leader, not yet on every in-sync follower",
                    partition.topic, partition.index
                )));
                return;
            }
            Ok(Some(_)) => tokio::time::sleep(FOLLOWERS_POLL).await,
        }
    }
}
