//! OffsetDelete (v0): the committed offsets of some partitions deleted while the group stays,
//! as the native `DeleteGroup` with `offsets`. The coordinator checks the principal's DELETE
//! on the group and READ on each topic, and refuses, per partition, a topic a live member consumes
//! (`GROUP_SUBSCRIBED_TO_TOPIC`); a group of Kafka's classic protocol with members has every
//! partition refused, since tinymq does not read its members' subscriptions (the client's own
//! bytes).

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::error::ResponseError as K;
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};
use tinymq_protocol::{messages as m, OpCode};

use super::{group_code, group_name};
use crate::context::Ctx;
use crate::errors::{kafka_code_for, Resource};

pub(crate) async fn offset_delete(
    ctx: Arc<Ctx>,
    _version: i16,
    request: OffsetDeleteRequest,
) -> OffsetDeleteResponse {
    let native = native_request(&request);
    let answer: Result<m::DeleteGroupResponse, m::Error> = if native.offsets.is_empty() {
        Ok(m::DeleteGroupResponse::default())
    } else {
        ctx.call(OpCode::DeleteGroup, &native).await
    };
    let response = match answer {
        Ok(response) => response,
        Err(e) => m::DeleteGroupResponse {
            error: Some(e),
            offsets: Vec::new(),
        },
    };
    if response.error.is_some() {
        return OffsetDeleteResponse::default()
            .with_error_code(group_code(response.error.as_ref()));
    }
    let codes: BTreeMap<(&str, u32), i16> = response
        .offsets
        .iter()
        .map(|o| {
            // A refused partition is refused for its topic (READ): TOPIC_AUTHORIZATION_FAILED.
            let code = kafka_code_for(o.error.as_ref(), Resource::Topic);
            ((o.topic.as_str(), o.partition), code)
        })
        .collect();
    let topics = request
        .topics
        .iter()
        .map(|topic| {
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let code = match u32::try_from(p.partition_index) {
                        Ok(partition) => codes
                            .get(&(topic.name.as_str(), partition))
                            .copied()
                            .unwrap_or(K::UnknownServerError.code()),
                        Err(_) => K::UnknownTopicOrPartition.code(),
                    };
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                })
                .collect();
            OffsetDeleteResponseTopic::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    OffsetDeleteResponse::default().with_topics(topics)
}

/// The native request: every partition with a valid index.
fn native_request(request: &OffsetDeleteRequest) -> m::DeleteGroupRequest {
    let offsets = request
        .topics
        .iter()
        .map(|topic| m::TopicPartitions {
            topic: topic.name.as_str().to_string(),
            partitions: topic
                .partitions
                .iter()
                .filter_map(|p| u32::try_from(p.partition_index).ok())
                .collect(),
        })
        .filter(|t| !t.partitions.is_empty())
        .collect();
    m::DeleteGroupRequest {
        group_id: group_name(&request.group_id),
        offsets,
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::offset_delete_request::{
        OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
    };
    use kafka_protocol::messages::{GroupId, TopicName};
    use kafka_protocol::protocol::StrBytes;

    use super::*;

    #[test]
    fn partitions_with_a_valid_index_are_asked_for() {
        let partition = |i| OffsetDeleteRequestPartition::default().with_partition_index(i);
        let request = OffsetDeleteRequest::default()
            .with_group_id(GroupId(StrBytes::from_static_str("g")))
            .with_topics(vec![
                OffsetDeleteRequestTopic::default()
                    .with_name(TopicName(StrBytes::from_static_str("a")))
                    .with_partitions(vec![partition(0), partition(-1), partition(2)]),
                OffsetDeleteRequestTopic::default()
                    .with_name(TopicName(StrBytes::from_static_str("b")))
                    .with_partitions(vec![partition(-5)]),
            ]);
        let native = native_request(&request);
        assert_eq!(native.group_id, "g");
        assert_eq!(
            native.offsets,
            vec![m::TopicPartitions {
                topic: "a".into(),
                partitions: vec![0, 2],
            }]
        );
    }
}
