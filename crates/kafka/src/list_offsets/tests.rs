//! ListOffsets translation without a broker: what goes to the broker and what is answered here.

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::protocol::StrBytes;
use tinymq_protocol::ErrorCode;

use super::*;

fn request(partitions: &[(i32, i64)]) -> ListOffsetsRequest {
    let partitions = partitions
        .iter()
        .map(|(index, timestamp)| {
            ListOffsetsPartition::default()
                .with_partition_index(*index)
                .with_timestamp(*timestamp)
        })
        .collect();
    ListOffsetsRequest::default().with_topics(vec![ListOffsetsTopic::default()
        .with_name(TopicName(StrBytes::from_static_str("t")))
        .with_partitions(partitions)])
}

#[test]
fn latest_earliest_times_and_max_timestamp_go_to_the_broker() {
    let (topics, native) = plan(&request(&[
        (0, -1),
        (1, -2),
        (2, 1_700_000_000_000),
        (3, -3),
        (-4, -1),
    ]));
    let sent: Vec<_> = native
        .partitions
        .iter()
        .map(|p| (p.partition, p.timestamp))
        .collect();
    assert_eq!(
        sent,
        vec![(0, -1), (1, -2), (2, 1_700_000_000_000), (3, -3)]
    );
    let asks: Vec<_> = topics[0].1.iter().map(|(_, ask)| *ask).collect();
    assert_eq!(
        asks[3],
        Ask::Native {
            partition: 3,
            timestamp: -3
        }
    );
    assert_eq!(asks[4], Ask::Refused(K::UnknownTopicOrPartition.code()));
}

#[test]
fn results_are_matched_by_partition_and_errors_mapped() {
    let response = m::ListOffsetsResponse {
        error: None,
        partitions: vec![
            m::ListOffsetsPartitionResult {
                topic: "t".into(),
                partition: 1,
                error: Some(ErrorCode::NOT_LEADER.with_message("moved")),
                offset: -1,
                timestamp: -1,
                current_leader: 2,
            },
            m::ListOffsetsPartitionResult {
                topic: "t".into(),
                partition: 0,
                offset: 42,
                timestamp: -1,
                ..Default::default()
            },
        ],
    };
    let mut results = Results::new(Ok(response));
    assert_eq!(results.take("t", 0).unwrap().offset, 42);
    let moved = results.take("t", 1).unwrap();
    assert_eq!(
        kafka_code_for(moved.error.as_ref(), Resource::Topic),
        K::NotLeaderOrFollower.code()
    );
    assert_eq!(results.take("t", 0), Err(K::UnknownServerError.code()));
}
