//! The two forms a fetch's records leave the broker in — a segment-file range sent with
//! `sendfile` (large reads) and one copy into a buffer (small ones) — give the same bytes,
//! whole and valid batches, also when several fetch responses are written back to back.

use crate::common::RawClient;
use crate::node::Server;
use bytes::Bytes;
use prost::Message;
use tinymq_protocol::batch::{BatchBuilder, BatchIter, Compression, ProducerStamp, RecordInput};
use tinymq_protocol::{messages as m, OpCode};

const BATCHES: usize = 40;
const RECORDS_PER_BATCH: usize = 20;

fn batch(n: usize) -> Bytes {
    let mut builder = BatchBuilder::new(Compression::None, ProducerStamp::NONE);
    for r in 0..RECORDS_PER_BATCH {
        let value = format!("batch {n} record {r} ").repeat(40);
        builder.push(&RecordInput {
            timestamp_ms: 1_700_000_000_000,
            key: None,
            value: Some(value.as_bytes()),
            headers: &[],
        });
    }
    builder.build().unwrap()
}

fn fetch_request(offset: i64, partition_bytes_max: u32) -> m::FetchRequest {
    m::FetchRequest {
        max_wait_ms: 0,
        min_bytes: 1,
        max_bytes: 8 << 20,
        partitions: vec![m::FetchPartition {
            topic: "paths".into(),
            partition: 0,
            offset,
            partition_bytes_max,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// Every batch parses (CRC checked); returns the next offset after them and the record count.
fn check_batches(records: &Bytes) -> (i64, usize) {
    let (mut next, mut count) = (0, 0);
    for batch in BatchIter::new(records.clone()) {
        let batch = batch.expect("a whole, valid batch");
        next = batch.next_offset();
        count += batch.records(1 << 20).expect("records").len();
    }
    (next, count)
}

#[test]
fn sendfile_and_copied_fetches_return_the_same_batches() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let mut c = RawClient::handshaken(&server.addr);
    let created = c.call(&m::CreateTopicRequest {
        name: "paths".into(),
        config: None,
        validate_only: false,
    });
    assert!(created.error.is_none(), "{:?}", created.error);
    for n in 0..BATCHES {
        let produced = c.call(&m::ProduceRequest {
            acks: 1,
            timeout_ms: 5000,
            partitions: vec![m::ProducePartition {
                topic: "paths".into(),
                partition: 0,
                records: batch(n),
            }],
            transactional_id: String::new(),
        });
        assert!(produced.partitions[0].error.is_none());
    }
    let total_records = (BATCHES * RECORDS_PER_BATCH) as i64;

    // One large read: well over the size that goes by sendfile.
    let whole = c.call(&fetch_request(0, 0)).partitions.remove(0);
    assert!(whole.error.is_none(), "{:?}", whole.error);
    assert!(
        whole.records.len() > 256 * 1024,
        "{} bytes",
        whole.records.len()
    );
    assert_eq!(
        check_batches(&whole.records),
        (total_records, BATCHES * RECORDS_PER_BATCH)
    );

    // The same log a batch at a time: each read is small, so it is copied.
    let mut pieces = Vec::new();
    let mut offset = 0;
    while offset < total_records {
        let piece = c.call(&fetch_request(offset, 1)).partitions.remove(0);
        assert!(piece.error.is_none(), "{:?}", piece.error);
        assert!(piece.records.len() < 64 * 1024);
        offset = check_batches(&piece.records).0;
        pieces.extend_from_slice(&piece.records);
    }
    assert!(pieces == whole.records.to_vec(), "the two forms differ");

    // Several large responses queued at once on one connection: each arrives whole.
    let ids: Vec<u32> = (0..4)
        .map(|_| c.send_frame(OpCode::Fetch.code(), &fetch_request(0, 0).encode_to_vec()))
        .collect();
    let mut answered = Vec::new();
    for _ in &ids {
        let frame = c.read_frame().expect("a response");
        let response = m::FetchResponse::decode(frame.body).expect("a fetch response");
        assert!(response.partitions[0].records == whole.records);
        answered.push(frame.header.message_id);
    }
    answered.sort();
    assert_eq!(answered, ids);
}
