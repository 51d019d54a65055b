//! The Kafka requests the data-path tests send, built with kafka-protocol's types, and the
//! records they carry.

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::list_offsets_response::ListOffsetsPartitionResponse;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::PartitionProduceResponse;
use kafka_protocol::messages::{FetchRequest, ListOffsetsRequest, ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use tinymq_protocol::batch::{Compression, ProducerStamp};

use super::wire::{batch, Kafka, Rec};

pub const T0: i64 = 1_700_000_000_000;

pub fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_owned()))
}

pub fn produce_request(topic: &str, records: Bytes, acks: i16) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])])
}

/// Produces `records` to partition 0 of `topic`; the partition's answer.
pub fn produce(
    k: &mut Kafka,
    version: i16,
    topic: &str,
    records: Bytes,
    acks: i16,
) -> PartitionProduceResponse {
    let response = k.call(version, &produce_request(topic, records, acks));
    assert_eq!(response.responses.len(), 1);
    assert_eq!(response.responses[0].name, name(topic));
    response.responses[0].partition_responses[0].clone()
}

pub fn fetch_request(topic: &str, offset: i64, max_wait_ms: i32) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id((-1).into())
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)])])
}

/// Fetches partition 0 of `topic` from `offset` (answered at once when there is nothing).
pub fn fetch(k: &mut Kafka, version: i16, topic: &str, offset: i64) -> PartitionData {
    let response = k.call(version, &fetch_request(topic, offset, 0));
    assert_eq!(response.error_code, 0);
    assert_eq!(response.session_id, 0, "sessionless");
    response.responses[0].partitions[0].clone()
}

pub fn list_offset(
    k: &mut Kafka,
    version: i16,
    topic: &str,
    timestamp: i64,
) -> ListOffsetsPartitionResponse {
    let request = ListOffsetsRequest::default()
        .with_replica_id((-1).into())
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(name(topic))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(timestamp)])]);
    let response = k.call(version, &request);
    response.topics[0].partitions[0].clone()
}

pub fn records(prefix: &str, count: usize, first_timestamp_ms: i64) -> Vec<Rec> {
    (0..count)
        .map(|i| {
            Rec::new(
                &format!("{prefix}{i}"),
                &format!("value {prefix}{i}"),
                first_timestamp_ms + i as i64,
            )
        })
        .collect()
}

pub fn plain(records: &[Rec]) -> Bytes {
    batch(records, Compression::None, ProducerStamp::NONE)
}
