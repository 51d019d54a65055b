//! Broker behaviours seen through raw frames: long polling, the connection limit and
//! acks = 0 (the idempotent-producer state across a SIGKILL is a process test in
//! `crash_restart.rs`).

use std::time::Duration;

use crate::common::frames::{batch, create, fetch, fetch_request, produce};
use crate::common::{self, RawClient};
use crate::node::Server;
use prost::Message;
use tinymq_protocol::batch::{BatchIter, ProducerStamp};
use tinymq_protocol::{messages as m, ErrorCode, OpCode};

#[test]
fn a_long_poll_fetch_returns_when_data_arrives() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let mut admin = RawClient::handshaken(&server.addr);
    create(&mut admin, "lp", 1);
    // The fetch waits up to 30 s; it returns as soon as the record below is stored.
    let mut c = RawClient::handshaken(&server.addr);
    let request = fetch_request("lp", 0, 30_000);
    let fetch_id = c.send_frame(OpCode::Fetch.code(), &request.encode_to_vec());
    // A request sent after it on the same connection is answered while it waits: the server
    // has read the fetch (frames are read in order) before the record is produced.
    assert_eq!(c.call(&m::ListTopicsRequest {}).names, vec!["lp"]);
    let result = produce(&mut admin, "lp", batch("late", ProducerStamp::NONE), -1).unwrap();
    assert!(result.error.is_none());
    let frame = c.read_frame().expect("the fetch's answer");
    assert_eq!(frame.header.message_id, fetch_id);
    let fetched = m::FetchResponse::decode(frame.body)
        .expect("a fetch response")
        .partitions
        .remove(0);
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
    let server = Server::start_tuned(tmp.path(), |c| c.listener.connections_max = 3);
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
    create(&mut c, "fire", 1);
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
