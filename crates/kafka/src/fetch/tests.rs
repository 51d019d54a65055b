//! Fetch translation without a broker: the native request built and the answers matched.

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::protocol::StrBytes;
use tinymq_protocol::ErrorCode;

use super::*;

fn request(min_bytes: i32, partitions: &[(i32, i64, i32)]) -> FetchRequest {
    let partitions = partitions
        .iter()
        .map(|(index, offset, bytes_max)| {
            FetchPartition::default()
                .with_partition(*index)
                .with_fetch_offset(*offset)
                .with_partition_max_bytes(*bytes_max)
        })
        .collect();
    FetchRequest::default()
        .with_max_wait_ms(500)
        .with_min_bytes(min_bytes)
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(partitions)])
}

fn result(partition: u32, high_watermark: i64) -> m::FetchPartitionResult {
    m::FetchPartitionResult {
        topic: "t".into(),
        partition,
        high_watermark,
        ..Default::default()
    }
}

#[test]
fn every_partition_is_asked_for_with_its_offset_and_bound() {
    let (topics, native) = plan(&request(1, &[(0, 5, 1000), (2, 0, 0), (-1, 0, 10)]));
    assert_eq!(topics[0].1, vec![(0, 1000), (2, 0), (-1, 10)]);
    let asked: Vec<_> = native
        .partitions
        .iter()
        .map(|p| (p.partition, p.offset, p.partition_bytes_max))
        .collect();
    assert_eq!(asked, vec![(0, 5, 1000), (2, 0, 1)]);
    assert_eq!(
        (native.max_wait_ms, native.min_bytes, native.max_bytes),
        (500, 1, 1 << 20)
    );
    assert_eq!(
        native.replica_id, 0,
        "a Kafka client is a consumer, never a follower"
    );
}

#[test]
fn min_bytes_zero_answers_at_once() {
    let (_, native) = plan(&request(0, &[(0, 0, 100)]));
    assert_eq!(native.max_wait_ms, 0);
}

#[test]
fn results_are_matched_by_partition_whatever_their_order() {
    let response = m::FetchResponse {
        error: None,
        partitions: vec![result(2, 7), result(0, 3)],
    };
    let mut results = Results::new(Ok(response));
    assert_eq!(results.take("t", 0).unwrap().high_watermark, 3);
    assert_eq!(results.take("t", 2).unwrap().high_watermark, 7);
    let (code, _) = results.take("t", -1).unwrap_err();
    assert_eq!(code, K::UnknownTopicOrPartition.code());
    assert_eq!(results.top_level_code(), 0);
}

#[test]
fn a_refused_fetch_refuses_every_partition_and_says_so_at_the_top() {
    let refusal = ErrorCode::INVALID_REQUEST.with_message("too many partitions");
    let mut results = Results::new(Ok(m::FetchResponse {
        error: Some(refusal),
        partitions: vec![],
    }));
    let (code, message) = results.take("t", 0).unwrap_err();
    assert_eq!(code, K::InvalidRequest.code());
    assert_eq!(message, "too many partitions");
    assert_eq!(results.top_level_code(), K::InvalidRequest.code());
}
