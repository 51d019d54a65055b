//! Produce translation without a broker: how a Kafka request is split into native partitions
//! and how native answers are combined back per Kafka partition.

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::TransactionalId;
use tinymq_protocol::batch::{BatchBuilder, Compression, ProducerStamp, RecordInput};

use super::*;

fn batch(value: &[u8]) -> Bytes {
    let mut builder = BatchBuilder::new(Compression::None, ProducerStamp::NONE);
    builder.push(&RecordInput {
        timestamp_ms: 1_700_000_000_000,
        key: None,
        value: Some(value),
        headers: &[],
    });
    builder.build().unwrap()
}

fn request(partitions: Vec<(i32, Option<Bytes>)>) -> ProduceRequest {
    let data = partitions
        .into_iter()
        .map(|(index, records)| {
            PartitionProduceData::default()
                .with_index(index)
                .with_records(records)
        })
        .collect();
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partition_data(data)])
}

fn result(partition: u32, base_offset: i64, error: Option<m::Error>) -> m::ProducePartitionResult {
    m::ProducePartitionResult {
        topic: "t".into(),
        partition,
        error,
        base_offset,
        log_append_time_ms: -1,
        log_start_offset: 0,
        current_leader: 0,
    }
}

#[test]
fn each_batch_becomes_one_native_partition_in_order() {
    let (a, b, c) = (batch(b"a"), batch(b"b"), batch(b"c"));
    let two = Bytes::from([a.to_vec(), b.to_vec()].concat());
    let plan = plan(request(vec![(0, Some(two)), (1, Some(c.clone()))]));
    let sent: Vec<_> = plan
        .native
        .partitions
        .iter()
        .map(|p| (p.partition, p.records.clone()))
        .collect();
    assert_eq!(sent, vec![(0, a), (0, b), (1, c)]);
    assert_eq!((plan.native.acks, plan.native.timeout_ms), (-1, 5000));
    assert_eq!(plan.topics[0].1[0].1, Slot::Native { batches: 2 });
}

#[test]
fn what_the_broker_need_not_see_is_refused_here() {
    let plan = plan(request(vec![
        (-1, Some(batch(b"x"))),
        (0, None),
        (1, Some(Bytes::from_static(b"junk"))),
    ]));
    assert!(plan.native.partitions.is_empty());
    let codes: Vec<_> = plan.topics[0]
        .1
        .iter()
        .map(|(_, slot)| match slot {
            Slot::Refused { code, .. } => *code,
            Slot::Native { .. } => 0,
        })
        .collect();
    assert_eq!(
        codes,
        vec![
            K::UnknownTopicOrPartition.code(),
            K::CorruptMessage.code(),
            K::CorruptMessage.code()
        ]
    );
}

#[test]
fn a_transactional_produce_goes_to_the_broker_as_it_is() {
    let mut req = request(vec![(0, Some(batch(b"x")))]);
    req.transactional_id = Some(TransactionalId(StrBytes::from_static_str("tx")));
    let plan = plan(req);
    assert_eq!(plan.native.partitions.len(), 1);
}

#[test]
fn results_are_matched_by_partition_and_combined_per_kafka_partition() {
    // The broker answers refused partitions last: partition 1 comes before partition 0 here.
    let denied = ErrorCode::AUTHORIZATION_FAILED.with_message("no WRITE");
    let response = m::ProduceResponse {
        error: None,
        partitions: vec![
            result(0, 10, None),
            result(0, 11, None),
            result(2, 5, None),
            result(
                2,
                -1,
                Some(ErrorCode::OUT_OF_ORDER_SEQUENCE.with_message("seq")),
            ),
            result(1, -1, Some(denied)),
        ],
    };
    let mut results = Results::new(Ok(response));
    let one = results.take("t", 1, 1);
    assert_eq!(one.code, K::TopicAuthorizationFailed.code());
    let zero = results.take("t", 0, 2);
    assert_eq!((zero.code, zero.base_offset), (0, 10));
    let two = results.take("t", 2, 2);
    assert_eq!(two.code, K::OutOfOrderSequenceNumber.code());
    assert_eq!(two.message.as_deref(), Some("seq"));
    assert_eq!(results.take("t", 3, 1).code, K::UnknownServerError.code());
}

#[test]
fn a_refused_request_refuses_every_partition() {
    let refusal = m::ProduceResponse {
        error: Some(ErrorCode::INVALID_REQUIRED_ACKS.with_message("acks must be -1, 0 or 1")),
        partitions: vec![],
    };
    let mut results = Results::new(Ok(refusal));
    let answer = results.take("t", 0, 1);
    assert_eq!(answer.code, K::InvalidRequiredAcks.code());
    assert_eq!(answer.base_offset, -1);
}
