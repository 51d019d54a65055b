//! Raw-frame requests for tests that speak the native protocol with a [`RawClient`]: one
//! record's batch, and a topic's create, produce and fetch on partition 0.

use bytes::Bytes;
use prost::Message;
use tinymq_protocol::batch::{BatchBuilder, Compression, ProducerStamp, RecordInput};
use tinymq_protocol::{messages as m, ErrorCode, OpCode};

use super::RawClient;

/// A batch of one record holding `value`, stamped by `producer`, at [`T0`].
/// The timestamp of [`batch`]'s record (milliseconds since the Unix epoch).
pub const T0: i64 = 1_700_000_000_000;

pub fn batch(value: &str, producer: ProducerStamp) -> Bytes {
    let mut builder = BatchBuilder::new(Compression::None, producer);
    builder.push(&RecordInput {
        timestamp_ms: T0,
        key: None,
        value: Some(value.as_bytes()),
        headers: &[],
    });
    builder.build().unwrap()
}

/// Produces `records` to partition 0 of `topic`; with `acks` 0 nothing is answered (`None`).
pub fn produce(
    c: &mut RawClient,
    topic: &str,
    records: Bytes,
    acks: i32,
) -> Option<m::ProducePartitionResult> {
    produce_to(c, topic, 0, records, acks)
}

/// [`produce`] to `partition`.
pub fn produce_to(
    c: &mut RawClient,
    topic: &str,
    partition: u32,
    records: Bytes,
    acks: i32,
) -> Option<m::ProducePartitionResult> {
    let request = m::ProduceRequest {
        acks,
        timeout_ms: 10_000,
        partitions: vec![m::ProducePartition {
            topic: topic.into(),
            partition,
            records,
        }],
        transactional_id: String::new(),
    };
    if acks == 0 {
        c.send_frame(OpCode::Produce.code(), &request.encode_to_vec());
        return None;
    }
    let r = c.call(&request);
    assert!(r.error.is_none(), "{:?}", r.error);
    Some(r.partitions.into_iter().next().expect("one result"))
}

/// Creates `name` with `partitions` and the default settings otherwise.
pub fn create(c: &mut RawClient, name: &str, partitions: u32) {
    let r = c.call(&m::CreateTopicRequest {
        name: name.into(),
        config: Some(m::TopicConfig {
            partitions,
            ..m::TopicConfig::default()
        }),
        validate_only: false,
    });
    assert!(r.error.is_none(), "create {name}: {:?}", r.error);
}

/// A fetch of partition 0 of `topic` from `offset`, waiting up to `max_wait_ms` for a byte.
pub fn fetch_request(topic: &str, offset: i64, max_wait_ms: u32) -> m::FetchRequest {
    m::FetchRequest {
        max_wait_ms,
        min_bytes: 1,
        max_bytes: 1 << 20,
        partitions: vec![m::FetchPartition {
            topic: topic.into(),
            partition: 0,
            offset,
            partition_bytes_max: 1 << 20,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// [`fetch_request`]'s answer for the partition.
pub fn fetch(
    c: &mut RawClient,
    topic: &str,
    offset: i64,
    max_wait_ms: u32,
) -> m::FetchPartitionResult {
    c.call(&fetch_request(topic, offset, max_wait_ms))
        .partitions
        .remove(0)
}

/// `e`'s code on the wire.
pub fn code(e: ErrorCode) -> u32 {
    u32::from(e.code())
}

/// The code of an answer's error; 0 when there is none.
pub fn error_of(e: &Option<m::Error>) -> u32 {
    e.as_ref().map_or(0, |e| e.code)
}

/// A new producer id and epoch from the node (InitProducerId without a transactional id).
pub fn init_producer_id(c: &mut RawClient) -> m::InitProducerIdResponse {
    let id = c.call(&m::InitProducerIdRequest {
        transactional_id: String::new(),
        producer_id: -1,
        producer_epoch: -1,
        transaction_timeout_ms: 0,
    });
    assert!(id.error.is_none(), "{:?}", id.error);
    id
}
