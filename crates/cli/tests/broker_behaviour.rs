//! Broker behaviours seen through raw frames: long polling, the connection limit, acks = 0,
//! and idempotent-producer state surviving a SIGKILL.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{RawClient, Server};
use tinymq_protocol::batch::{BatchBuilder, BatchIter, Compression, ProducerStamp, RecordInput};
use tinymq_protocol::{messages as m, ErrorCode};

fn batch(value: &str, producer: ProducerStamp) -> Bytes {
    let mut builder = BatchBuilder::new(Compression::None, producer);
    builder.push(&RecordInput {
        timestamp_ms: 1_700_000_000_000,
        key: None,
        value: Some(value.as_bytes()),
        headers: &[],
    });
    builder.build().unwrap()
}

fn produce(
    c: &mut RawClient,
    topic: &str,
    records: Bytes,
    acks: i32,
) -> Option<m::ProducePartitionResult> {
    let request = m::ProduceRequest {
        acks,
        timeout_ms: 5000,
        partitions: vec![m::ProducePartition {
            topic: topic.into(),
            partition: 0,
            records,
        }],
    };
    if acks == 0 {
        use prost::Message;
        c.send_frame(
            tinymq_protocol::OpCode::Produce.code(),
            &request.encode_to_vec(),
        );
        return None;
    }
    Some(c.call(&request).partitions.remove(0))
}

fn create(c: &mut RawClient, name: &str) {
    let r = c.call(&m::CreateTopicRequest {
        name: name.into(),
        config: None,
        validate_only: false,
    });
    assert!(r.error.is_none(), "{:?}", r.error);
}

fn fetch(c: &mut RawClient, topic: &str, offset: i64, max_wait_ms: u32) -> m::FetchPartitionResult {
    c.call(&m::FetchRequest {
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
    })
    .partitions
    .remove(0)
}

#[test]
fn a_long_poll_fetch_returns_when_data_arrives() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let mut admin = RawClient::handshaken(&server.addr);
    create(&mut admin, "lp");
    let addr = server.addr.clone();
    let waiter = std::thread::spawn(move || {
        let mut c = RawClient::handshaken(&addr);
        // Waits up to 30 s; returns as soon as the record below is stored.
        fetch(&mut c, "lp", 0, 30_000)
    });
    std::thread::sleep(Duration::from_millis(300));
    let result = produce(&mut admin, "lp", batch("late", ProducerStamp::NONE), -1).unwrap();
    assert!(result.error.is_none());
    let fetched = waiter.join().unwrap();
    assert_eq!(fetched.high_watermark, 1);
    let batches: Vec<_> = BatchIter::new(fetched.records)
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        batches[0].records(1024).unwrap()[0].value.as_deref(),
        Some(&b"late"[..])
    );
}

#[test]
fn connections_over_the_limit_are_closed_and_the_others_served() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start_with(tmp.path(), &["--connections-max", "3"]);
    let mut held: Vec<RawClient> = (0..3)
        .map(|_| RawClient::handshaken(&server.addr))
        .collect();
    let mut extra = RawClient::connect(&server.addr);
    let refusal = extra
        .read_frame()
        .expect("the fourth connection is told why");
    assert_eq!(refusal.header.message_id, 0);
    assert_eq!(
        common::error_code(&refusal),
        u32::from(ErrorCode::LIMIT_EXCEEDED.code())
    );
    assert!(
        extra.closed_by_server(),
        "the fourth connection is closed at once"
    );
    assert!(
        held[0].call(&m::ListTopicsRequest {}).error.is_none(),
        "the others are served"
    );
    held.pop();
    // A slot frees when a connection ends.
    let mut again = None;
    for _ in 0..50 {
        let mut c = RawClient::connect(&server.addr);
        let handshake = m::HandshakeRequest {
            min_version: 1,
            max_version: 1,
            cluster_id: String::new(),
            client_id: "x".into(),
            ..Default::default()
        };
        let id = c.send_frame(
            tinymq_protocol::OpCode::Handshake.code(),
            &prost::Message::encode_to_vec(&handshake),
        );
        // Until the server has seen the close, a new connection is still refused (id 0).
        if let Some(frame) = c.read_frame().filter(|f| f.header.message_id != 0) {
            assert_eq!(frame.header.message_id, id);
            again = Some(c);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        again.is_some(),
        "a new connection is accepted once one closed"
    );
}

#[test]
fn acks_zero_gets_no_response_but_stores_the_records() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let mut c = RawClient::handshaken(&server.addr);
    create(&mut c, "fire");
    for i in 0..10 {
        produce(
            &mut c,
            "fire",
            batch(&format!("m{i}"), ProducerStamp::NONE),
            0,
        );
    }
    // The next response on the connection is the list's: no produce answers came before it.
    assert_eq!(c.call(&m::ListTopicsRequest {}).names, vec!["fire"]);
    // acks = 0 is not waited for, so the records become visible a little later.
    let mut fetched = fetch(&mut c, "fire", 0, 1000);
    for _ in 0..100 {
        if fetched.high_watermark == 10 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        fetched = fetch(&mut c, "fire", 0, 1000);
    }
    assert_eq!(fetched.high_watermark, 10);
    // Stored in the order sent: a connection's produce requests are written in order.
    let values: Vec<String> = BatchIter::new(fetched.records)
        .flat_map(|b| b.unwrap().records(1024).unwrap())
        .map(|r| String::from_utf8(r.value.unwrap().to_vec()).unwrap())
        .collect();
    assert_eq!(values, (0..10).map(|i| format!("m{i}")).collect::<Vec<_>>());
}

#[test]
fn idempotence_state_survives_a_sigkill() {
    let tmp = tempfile::tempdir().unwrap();
    let mut server = Server::start(tmp.path());
    let mut c = RawClient::handshaken(&server.addr);
    create(&mut c, "idem");
    let id = c.call(&m::InitProducerIdRequest {
        transactional_id: String::new(),
        producer_id: -1,
        producer_epoch: -1,
    });
    assert!(id.error.is_none());
    let stamp = |seq| ProducerStamp {
        producer_id: id.producer_id,
        producer_epoch: id.producer_epoch as i16,
        base_sequence: seq,
    };
    for seq in 0..3 {
        let r = produce(&mut c, "idem", batch(&format!("s{seq}"), stamp(seq)), -1).unwrap();
        assert_eq!(r.base_offset, i64::from(seq));
    }
    server.kill9();

    let server = Server::start(tmp.path());
    let mut c = RawClient::handshaken(&server.addr);
    // A retry of the last batch is recognised after the crash: original offset, not re-stored.
    let retry = produce(&mut c, "idem", batch("s2", stamp(2)), -1).unwrap();
    assert!(retry.error.is_none(), "{:?}", retry.error);
    assert_eq!(retry.base_offset, 2);
    // A gap in the sequence is refused.
    let gap = produce(&mut c, "idem", batch("s9", stamp(9)), -1).unwrap();
    assert_eq!(
        gap.error.unwrap().code,
        u32::from(ErrorCode::OUT_OF_ORDER_SEQUENCE.code())
    );
    // The next sequence is stored at the next offset.
    let next = produce(&mut c, "idem", batch("s3", stamp(3)), -1).unwrap();
    assert_eq!(next.base_offset, 3);
    // A new producer id from the restarted server is never one handed out before.
    let fresh = c.call(&m::InitProducerIdRequest {
        transactional_id: String::new(),
        producer_id: -1,
        producer_epoch: -1,
    });
    assert!(fresh.producer_id > id.producer_id);
    assert_eq!(fetch(&mut c, "idem", 0, 100).high_watermark, 4);
}
