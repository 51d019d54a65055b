//! Deleting the records of a partition below an offset (the native `DeleteRecords`, Kafka's
//! DeleteRecords): on the partition's leader, up to its high watermark, through the log's
//! [`tinymq_log::PartitionLog::delete_records_before`], which moves the log start durably
//! before this answers. Followers move theirs to the leader's when they next fetch (the fetch
//! answer carries the leader's log start; `crate::replica::fetcher`).

use std::sync::Arc;

use tinymq_protocol::{messages as m, ErrorCode};

use super::{blocking, leader_hint, too_many_partitions};
use crate::state::BrokerState;

/// What the offset `-1` stands for: the high watermark.
const HIGH_WATERMARK: i64 = -1;

/// Deletes the records of each partition asked (already authorized) below its offset.
pub(crate) async fn delete_records(
    state: Arc<BrokerState>,
    request: m::DeleteRecordsRequest,
) -> m::DeleteRecordsResponse {
    if let Some(refusal) = too_many_partitions(request.partitions.len()) {
        return m::DeleteRecordsResponse {
            error: Some(refusal),
            partitions: Vec::new(),
        };
    }
    let answered = blocking(move || {
        request
            .partitions
            .into_iter()
            .map(|dp| delete_one(&state, dp))
            .collect()
    })
    .await;
    match answered {
        Ok(partitions) => m::DeleteRecordsResponse {
            error: None,
            partitions,
        },
        Err(e) => m::DeleteRecordsResponse {
            error: Some(e),
            partitions: Vec::new(),
        },
    }
}

fn delete_one(
    state: &BrokerState,
    dp: m::DeleteRecordsPartition,
) -> m::DeleteRecordsPartitionResult {
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
            return result;
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
            return result;
        }
    };
    match partition.log.delete_records_before(offset) {
        Ok(log_start) => result.low_watermark = log_start,
        Err(e) => result.error = Some(e.error_code().with_message(e.to_string())),
    }
    result
}
