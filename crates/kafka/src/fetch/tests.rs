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

/// The native request for `request`, without a session.
fn planned(request: &FetchRequest) -> m::FetchRequest {
    let asked = session_request(12, request);
    let names: Vec<_> = asked
        .partitions
        .iter()
        .map(|_| Some("t".to_owned()))
        .collect();
    let read: Vec<usize> = (0..names.len()).collect();
    plan(request, &asked.partitions, &names, &read)
}

#[test]
fn every_partition_is_asked_for_with_its_offset_and_bound() {
    let request = request(1, &[(0, 5, 1000), (2, 0, 0), (-1, 0, 10)]);
    let asked = session_request(12, &request);
    let bounds: Vec<_> = asked
        .partitions
        .iter()
        .map(|w| (w.key.index, w.partition_max_bytes))
        .collect();
    assert_eq!(bounds, vec![(0, 1000), (2, 0), (-1, 10)]);
    let native = planned(&request);
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
    let native = planned(&request(0, &[(0, 0, 100)]));
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

#[test]
fn from_version_13_topics_are_named_by_id_and_an_unknown_id_is_not_read() {
    let id = Uuid::from_u64_pair(9, 9);
    let mut request = request(1, &[(0, 5, 1000)]);
    request.topics[0].topic_id = id;
    request.forgotten_topics_data = vec![
        kafka_protocol::messages::fetch_request::ForgottenTopic::default()
            .with_topic_id(id)
            .with_partitions(vec![3]),
    ];
    let asked = session_request(13, &request);
    assert!(asked.topic_ids);
    assert_eq!(asked.partitions[0].key.topic, TopicRef::Id(id));
    assert_eq!(
        asked.forgotten[0],
        Key {
            topic: TopicRef::Id(id),
            index: 3
        }
    );
    let native = plan(&request, &asked.partitions, &[None], &[0]);
    assert!(native.partitions.is_empty());
    let by_name = session_request(12, &request);
    assert_eq!(
        by_name.partitions[0].key.topic,
        TopicRef::Name(TopicName(StrBytes::from_static_str("t")))
    );
}

#[test]
fn answers_are_grouped_by_runs_of_one_topic() {
    let image = MetadataImage::default();
    let name = |n: &'static str| TopicRef::Name(TopicName(StrBytes::from_static_str(n)));
    let keys = [
        Key {
            topic: name("a"),
            index: 0,
        },
        Key {
            topic: name("a"),
            index: 1,
        },
        Key {
            topic: name("b"),
            index: 0,
        },
        Key {
            topic: name("a"),
            index: 2,
        },
    ];
    let listed = keys
        .iter()
        .map(|k| (k, PartitionData::default().with_partition_index(k.index)));
    let topics = by_topic(&image, listed);
    let shape: Vec<(String, Vec<i32>)> = topics
        .iter()
        .map(|t| {
            let indexes = t.partitions.iter().map(|p| p.partition_index).collect();
            (t.topic.as_str().to_owned(), indexes)
        })
        .collect();
    assert_eq!(
        shape,
        vec![
            ("a".into(), vec![0, 1]),
            ("b".into(), vec![0]),
            ("a".into(), vec![2])
        ]
    );
}
