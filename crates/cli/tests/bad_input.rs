//! Bad input over raw sockets: each case gets a clear error (or a clean close), loses nothing,
//! and never disturbs a good client; memory stays flat under 1,000 garbage connections.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{error_code, op, RawClient, Server};
use tinymq_protocol::frame::FrameHeader;
use tinymq_protocol::{messages as m, ErrorCode, OpCode};

fn code(c: ErrorCode) -> u32 {
    u32::from(c.code())
}

/// A good client that creates a topic and then produces and lists between the bad cases.
struct GoodClient {
    raw: RawClient,
    produced: u64,
}

impl GoodClient {
    fn new(addr: &str) -> GoodClient {
        let mut raw = RawClient::handshaken(addr);
        let created = raw.call(&m::CreateTopicRequest {
            name: "good".into(),
            config: None,
            validate_only: false,
        });
        assert!(created.error.is_none(), "{:?}", created.error);
        GoodClient { raw, produced: 0 }
    }

    fn still_served(&mut self) {
        let mut builder = tinymq_protocol::batch::BatchBuilder::new(
            tinymq_protocol::batch::Compression::None,
            tinymq_protocol::batch::ProducerStamp::NONE,
        );
        builder.push(&tinymq_protocol::batch::RecordInput {
            timestamp_ms: 1,
            key: None,
            value: Some(b"ok"),
            headers: &[],
        });
        let response = self.raw.call(&m::ProduceRequest {
            acks: 1,
            timeout_ms: 5000,
            partitions: vec![m::ProducePartition {
                topic: "good".into(),
                partition: 0,
                records: builder.build().unwrap(),
            }],
            transactional_id: String::new(),
        });
        let result = &response.partitions[0];
        assert!(result.error.is_none(), "{:?}", result.error);
        assert_eq!(
            result.base_offset, self.produced as i64,
            "nothing lost, nothing extra"
        );
        self.produced += 1;
    }
}

#[test]
fn every_kind_of_bad_input_gets_a_clear_answer_and_the_good_client_keeps_working() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start_with(tmp.path(), &["--handshake-timeout-ms", "1000"]);
    let mut good = GoodClient::new(&server.addr);
    good.still_served();

    // Wrong magic: an INVALID_FRAME error frame, then close.
    let mut c = RawClient::connect(&server.addr);
    c.send_raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let frame = c.read_frame().expect("error frame before close");
    assert!(frame.header.is_response());
    assert_eq!(error_code(&frame), code(ErrorCode::INVALID_FRAME));
    assert!(c.closed_by_server());
    good.still_served();

    // Wrong frame version: UNSUPPORTED_VERSION, then close.
    let mut c = RawClient::connect(&server.addr);
    let mut header = FrameHeader::request(op(OpCode::Handshake), 7, 0).to_bytes();
    header[2] = 99;
    c.send_raw(&header).unwrap();
    let frame = c.read_frame().expect("error frame");
    assert_eq!(frame.header.message_id, 7);
    assert_eq!(error_code(&frame), code(ErrorCode::UNSUPPORTED_VERSION));
    assert!(c.closed_by_server());

    // A 4 GiB body length: refused from the header alone, nothing allocated.
    let rss_before = server.rss_kib();
    let mut c = RawClient::handshaken(&server.addr);
    c.send_raw(&FrameHeader::request(op(OpCode::Produce), 9, u32::MAX).to_bytes())
        .unwrap();
    let frame = c.read_frame().expect("error frame");
    assert_eq!(error_code(&frame), code(ErrorCode::INVALID_FRAME));
    assert!(c.closed_by_server());
    assert!(
        server.rss_kib() < rss_before + 8 * 1024,
        "no 4 GiB allocation"
    );

    // Before the handshake the limit is 64 KiB.
    let mut c = RawClient::connect(&server.addr);
    c.send_raw(&FrameHeader::request(op(OpCode::Handshake), 1, 100_000).to_bytes())
        .unwrap();
    assert_eq!(
        error_code(&c.read_frame().unwrap()),
        code(ErrorCode::INVALID_FRAME)
    );
    assert!(c.closed_by_server());

    // Any request before the handshake: HANDSHAKE_REQUIRED, connection kept.
    let mut c = RawClient::connect(&server.addr);
    c.send_frame(op(OpCode::ListTopics), &[]);
    assert_eq!(
        error_code(&c.read_frame().unwrap()),
        code(ErrorCode::HANDSHAKE_REQUIRED)
    );
    let handshake = m::HandshakeRequest {
        min_version: 1,
        max_version: 1,
        cluster_id: String::new(),
        client_id: "late".into(),
        ..Default::default()
    };
    assert!(c.call(&handshake).error.is_none());

    // Unknown operation: UNKNOWN_OPERATION and the connection stays usable.
    let id = c.send_frame(0x55, b"whatever");
    let frame = c.read_frame().unwrap();
    assert_eq!(
        (frame.header.message_id, frame.header.op_code()),
        (id, 0x55)
    );
    assert_eq!(error_code(&frame), code(ErrorCode::UNKNOWN_OPERATION));
    // Malformed body: MALFORMED_BODY and still usable.
    c.send_frame(op(OpCode::CreateTopic), &[0xFF, 0xFF, 0xFF]);
    assert_eq!(
        error_code(&c.read_frame().unwrap()),
        code(ErrorCode::MALFORMED_BODY)
    );
    // A corrupt record batch: CORRUPT_MESSAGE for that partition, nothing appended.
    let response = c.call(&m::ProduceRequest {
        acks: 1,
        timeout_ms: 1000,
        partitions: vec![m::ProducePartition {
            topic: "good".into(),
            partition: 0,
            records: vec![0u8; 80].into(),
        }],
        transactional_id: String::new(),
    });
    assert_eq!(
        response.partitions[0].error.as_ref().unwrap().code,
        code(ErrorCode::CORRUPT_MESSAGE)
    );
    assert_eq!(c.call(&m::ListTopicsRequest {}).names, vec!["good"]);
    good.still_served();

    // A truncated frame: the server waits for the rest and closes at EOF.
    let mut t = TcpStream::connect(&server.addr).unwrap();
    t.write_all(&FrameHeader::request(op(OpCode::Handshake), 1, 50).to_bytes())
        .unwrap();
    t.write_all(&[0u8; 10]).unwrap();
    t.shutdown(std::net::Shutdown::Write).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut rest = Vec::new();
    let _ = t.read_to_end(&mut rest);
    assert!(rest.is_empty(), "no response to half a frame");

    // A silent client is dropped at the handshake deadline.
    let mut silent = TcpStream::connect(&server.addr).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    assert!(
        common::closed_by_server(&mut silent),
        "closed after the handshake timeout"
    );
    good.still_served();
}

#[test]
fn a_thousand_garbage_connections_leave_memory_flat_and_service_intact() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let mut good = GoodClient::new(&server.addr);
    good.still_served();
    let rss_before = server.rss_kib();
    for wave in 0..5 {
        let clients: Vec<_> = (0..200)
            .map(|i| {
                let addr = server.addr.clone();
                std::thread::spawn(move || {
                    let mut s = TcpStream::connect(&addr).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                    let garbage: Vec<u8> = (0..4096u32)
                        .map(|j| (j * 31 + i * 7 + wave) as u8)
                        .collect();
                    let _ = s.write_all(&garbage);
                    let mut sink = Vec::new();
                    let _ = s.read_to_end(&mut sink);
                })
            })
            .collect();
        for c in clients {
            c.join().unwrap();
        }
        good.still_served();
    }
    let rss_after = server.rss_kib();
    assert!(
        rss_after < rss_before + 32 * 1024,
        "RSS grew from {rss_before} KiB to {rss_after} KiB"
    );
    // A new client is served normally after all that.
    let mut c = RawClient::handshaken(&server.addr);
    assert_eq!(c.call(&m::ListTopicsRequest {}).names, vec!["good"]);
}

/// A client that pipelines fetches of a 20 MiB partition and never reads the answers holds no
/// more than the broker's fetch memory (`--fetch-memory-bytes-max`), however many it sends;
/// other clients are still served.
#[test]
fn unread_fetch_responses_stay_within_the_fetch_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start_with(tmp.path(), &["--fetch-memory-bytes-max", "67108864"]);
    let mut good = GoodClient::new(&server.addr);
    let value = vec![b'v'; 900 * 1024];
    for _ in 0..22 {
        let batch = tinymq_protocol::batch::craft::CraftedBatch::honest(now_ms(), &[&value]);
        let response = good.raw.call(&m::ProduceRequest {
            acks: 1,
            timeout_ms: 10_000,
            partitions: vec![m::ProducePartition {
                topic: "good".into(),
                partition: 0,
                records: batch.encode(),
            }],
            transactional_id: String::new(),
        });
        assert!(response.partitions[0].error.is_none());
    }
    good.produced = 22;
    let rss_before = server.rss_kib();
    let mut slow = RawClient::handshaken(&server.addr);
    let fetch = m::FetchRequest {
        max_wait_ms: 0,
        min_bytes: 1,
        max_bytes: 40 << 20,
        partitions: vec![m::FetchPartition {
            topic: "good".into(),
            partition: 0,
            offset: 0,
            partition_bytes_max: 40 << 20,
            ..Default::default()
        }],
        ..Default::default()
    };
    let body = prost::Message::encode_to_vec(&fetch);
    for _ in 0..100 {
        slow.send_frame(op(OpCode::Fetch), &body);
    }
    // Not a wait for an event: memory must stay bounded for as long as the reader stalls, so
    // the pause outlasts the server answering what it can (what it cannot is held back).
    std::thread::sleep(Duration::from_secs(3));
    let grown_mib = server.rss_kib().saturating_sub(rss_before) / 1024;
    assert!(
        grown_mib < 200,
        "100 unread 20 MiB fetch responses grew the server by {grown_mib} MiB"
    );
    good.still_served();
    drop(slow);
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The internal offsets topic is reached through the group operations only: a plain client
/// cannot delete it, grow it, produce to it or fetch from it. A produce with `timeout_ms` 0
/// (proto3's "absent") waits the default time instead of timing out at once.
#[test]
fn internal_topics_are_refused_to_clients_and_a_zero_produce_timeout_is_the_default() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let mut good = GoodClient::new(&server.addr);
    let c = &mut good.raw;
    let internal = "__consumer_offsets".to_string();
    let deleted = c.call(&m::DeleteTopicRequest {
        name: internal.clone(),
    });
    assert_eq!(
        deleted.error.map(|e| e.code),
        Some(code(ErrorCode::INVALID_TOPIC))
    );
    let grown = c.call(&m::AlterPartitionsRequest {
        name: internal.clone(),
        partitions: 10,
    });
    assert_eq!(
        grown.error.map(|e| e.code),
        Some(code(ErrorCode::INVALID_TOPIC))
    );
    let batch = tinymq_protocol::batch::craft::CraftedBatch::honest(now_ms(), &[b"x"]).encode();
    let produced = c.call(&m::ProduceRequest {
        acks: 1,
        timeout_ms: 1000,
        partitions: vec![m::ProducePartition {
            topic: internal.clone(),
            partition: 0,
            records: batch.clone(),
        }],
        transactional_id: String::new(),
    });
    let error = produced.partitions[0].error.clone().expect("refused");
    assert_eq!(
        error.code,
        code(ErrorCode::INVALID_TOPIC),
        "{}",
        error.message
    );
    let fetched = c.call(&m::FetchRequest {
        max_wait_ms: 0,
        min_bytes: 1,
        max_bytes: 1 << 20,
        partitions: vec![m::FetchPartition {
            topic: internal,
            partition: 0,
            offset: 0,
            partition_bytes_max: 1 << 20,
            ..Default::default()
        }],
        ..Default::default()
    });
    let error = fetched.partitions[0].error.clone().expect("refused");
    assert_eq!(error.code, code(ErrorCode::INVALID_TOPIC));
    // Every one of many produces with timeout_ms 0 is acknowledged, none timed out.
    for _ in 0..50 {
        let response = c.call(&m::ProduceRequest {
            acks: 1,
            timeout_ms: 0,
            partitions: vec![m::ProducePartition {
                topic: "good".into(),
                partition: 0,
                records: batch.clone(),
            }],
            transactional_id: String::new(),
        });
        assert!(
            response.partitions[0].error.is_none(),
            "{:?}",
            response.partitions[0].error
        );
    }
    good.produced = 50;
    good.still_served();
}
