//! DeleteRecords (v0..=2) as the native `DeleteRecords`: each partition's records below its
//! offset (`-1`: the high watermark) are deleted on its leader, which needs DELETE on the topic;
//! the answer's low watermark is the partition's log start after the deletion, once every
//! in-sync follower has deleted them too (within the request's `timeout_ms`). A client sends
//! each partition to its leader (from Metadata); a partition led elsewhere is answered
//! NOT_LEADER_OR_FOLLOWER.

use std::sync::Arc;

use kafka_protocol::error::ResponseError as K;
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
use tinymq_protocol::{messages as m, OpCode};

use crate::answers::Answers;
use crate::context::Ctx;
use crate::errors::{kafka_code_for, Resource};

pub(crate) async fn delete_records(
    ctx: Arc<Ctx>,
    _version: i16,
    request: DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    let native = native_request(&request);
    let answer = if native.partitions.is_empty() {
        Ok(m::DeleteRecordsResponse::default())
    } else {
        ctx.call::<_, m::DeleteRecordsResponse>(OpCode::DeleteRecords, &native)
            .await
    };
    let mut answers = Answers::new(answer);
    let topics = request
        .topics
        .iter()
        .map(|topic| {
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let result = DeleteRecordsPartitionResult::default()
                        .with_partition_index(p.partition_index)
                        .with_low_watermark(-1);
                    let Ok(index) = u32::try_from(p.partition_index) else {
                        return result.with_error_code(K::UnknownTopicOrPartition.code());
                    };
                    if let Some(error) = &answers.failed {
                        return result
                            .with_error_code(kafka_code_for(Some(error), Resource::Topic));
                    }
                    match answers.take(topic.name.as_str(), index) {
                        Some(answer) => result
                            .with_error_code(kafka_code_for(answer.error.as_ref(), Resource::Topic))
                            .with_low_watermark(answer.low_watermark),
                        None => result.with_error_code(K::UnknownServerError.code()),
                    }
                })
                .collect();
            DeleteRecordsTopicResult::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    DeleteRecordsResponse::default().with_topics(topics)
}

/// The native request: every partition with a valid index, in request order.
fn native_request(request: &DeleteRecordsRequest) -> m::DeleteRecordsRequest {
    let partitions = request
        .topics
        .iter()
        .flat_map(|topic| {
            topic.partitions.iter().filter_map(|p| {
                Some(m::DeleteRecordsPartition {
                    topic: topic.name.as_str().to_string(),
                    partition: u32::try_from(p.partition_index).ok()?,
                    offset: p.offset,
                })
            })
        })
        .collect();
    // Kafka's timeout (the admin client's request timeout), within what the broker takes; 0
    // or less answers at once (1 ms: the native 0 means the default wait).
    let timeout_max = tinymq_broker::DELETE_RECORDS_TIMEOUT_MAX;
    let timeout_ms = u32::try_from(request.timeout_ms).unwrap_or(0).clamp(
        1,
        u32::try_from(timeout_max.as_millis()).unwrap_or(u32::MAX),
    );
    m::DeleteRecordsRequest {
        partitions,
        timeout_ms,
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::delete_records_request::{
        DeleteRecordsPartition, DeleteRecordsTopic,
    };
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::StrBytes;

    use super::*;

    #[test]
    fn partitions_with_a_valid_index_go_to_the_broker_with_their_offsets() {
        let partition = |index, offset| {
            DeleteRecordsPartition::default()
                .with_partition_index(index)
                .with_offset(offset)
        };
        let request =
            DeleteRecordsRequest::default().with_topics(vec![DeleteRecordsTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("t")))
                .with_partitions(vec![partition(0, 5), partition(-2, 1), partition(3, -1)])]);
        let sent: Vec<(u32, i64)> = native_request(&request)
            .partitions
            .iter()
            .map(|p| (p.partition, p.offset))
            .collect();
        assert_eq!(sent, vec![(0, 5), (3, -1)]);
    }
}
