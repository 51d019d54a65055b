//! ListOffsets (v1..=7): latest (-1: the high watermark, or under `isolation_level` 1, read
//! committed, the last stable offset), earliest (-2, the log start) and by timestamp (the
//! first record at or after it), as native ListOffsets with the isolation level passed
//! through, and -3 (the first record with the largest timestamp, KIP-734) the same way.

use std::sync::Arc;

use kafka_protocol::error::ResponseError as K;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse, TopicName};
use tinymq_protocol::{messages as m, OpCode};

use crate::answers::Answers;
use crate::context::Ctx;
use crate::errors::{kafka_code_for, Resource};
use crate::leader;

/// Kafka's "latest" timestamp.
const LATEST: i64 = -1;

/// What a Kafka partition asks for, once checked here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ask {
    /// Sent to the broker with this timestamp.
    Native { partition: u32, timestamp: i64 },
    /// Answered here with this Kafka error code.
    Refused(i16),
}

pub(crate) async fn handle(
    ctx: Arc<Ctx>,
    version: i16,
    request: ListOffsetsRequest,
) -> ListOffsetsResponse {
    let (topics, native) = plan(&request);
    let answer = if native.partitions.is_empty() {
        Ok(m::ListOffsetsResponse::default())
    } else {
        ctx.call::<_, m::ListOffsetsResponse>(OpCode::ListOffsets, &native)
            .await
    };
    let mut results = Results::new(answer);
    let topics = topics
        .into_iter()
        .map(|(name, asks)| {
            let partitions = asks
                .into_iter()
                .map(|(index, ask)| {
                    let response =
                        ListOffsetsPartitionResponse::default().with_partition_index(index);
                    let (partition, timestamp) = match ask {
                        Ask::Refused(code) => return response.with_error_code(code),
                        Ask::Native {
                            partition,
                            timestamp,
                        } => (partition, timestamp),
                    };
                    let result = match results.take(name.as_str(), partition) {
                        Ok(result) => result,
                        Err(code) => return response.with_error_code(code),
                    };
                    let code = kafka_code_for(result.error.as_ref(), Resource::Topic);
                    let mut response = response
                        .with_error_code(code)
                        .with_offset(result.offset)
                        .with_timestamp(result.timestamp);
                    // The current epoch only where it is the offset's: at the log's end.
                    if version >= 4 && code == 0 && timestamp == LATEST {
                        response = response.with_leader_epoch(leader::epoch(
                            &ctx,
                            name.as_str(),
                            partition,
                        ));
                    }
                    response
                })
                .collect();
            ListOffsetsTopicResponse::default()
                .with_name(name)
                .with_partitions(partitions)
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}

/// The Kafka topics and partitions in request order with what each asks, and the native
/// request.
#[allow(clippy::type_complexity)]
fn plan(
    request: &ListOffsetsRequest,
) -> (Vec<(TopicName, Vec<(i32, Ask)>)>, m::ListOffsetsRequest) {
    let mut native = m::ListOffsetsRequest {
        // Kafka's 0 and 1 are the native ones; anything else the broker refuses.
        isolation_level: u32::try_from(request.isolation_level).unwrap_or(u32::MAX),
        ..Default::default()
    };
    let mut topics = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let mut asks = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            let ask = match u32::try_from(p.partition_index) {
                Err(_) => Ask::Refused(K::UnknownTopicOrPartition.code()),
                Ok(partition) => {
                    native.partitions.push(m::ListOffsetsPartition {
                        topic: topic.name.as_str().to_owned(),
                        partition,
                        timestamp: p.timestamp,
                    });
                    Ask::Native {
                        partition,
                        timestamp: p.timestamp,
                    }
                }
            };
            asks.push((p.partition_index, ask));
        }
        topics.push((topic.name.clone(), asks));
    }
    (topics, native)
}

/// The native results, each partition's or the Kafka error it gets instead.
struct Results(Answers<m::ListOffsetsPartitionResult>);

impl Results {
    fn new(answer: Result<m::ListOffsetsResponse, m::Error>) -> Results {
        Results(Answers::new(answer))
    }

    fn take(&mut self, topic: &str, partition: u32) -> Result<m::ListOffsetsPartitionResult, i16> {
        if let Some(error) = &self.0.failed {
            return Err(kafka_code_for(Some(error), Resource::Topic));
        }
        self.0
            .take(topic, partition)
            .ok_or(K::UnknownServerError.code())
    }
}

#[cfg(test)]
mod tests;
