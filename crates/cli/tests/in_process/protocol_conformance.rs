//! The protocol contract, replayed against a node in this process: every example of
//! `docs/protocol.md` (its hex bytes parsed out of the doc itself, so editing the doc without
//! the server fails here) and each edge-case statement the doc makes about framing errors, the
//! handshake, zero defaults, ListOffsets, Metadata and record headers. Each case
//! names the doc statement it checks. (The idempotence rules, whose state must survive a
//! kill -9, are a process test in `crash_restart.rs`.)

use std::io::Read;

use crate::common::frames::{batch, code, error_of, fetch, produce, T0};
use crate::common::{error_code, RawClient};
use crate::node::Server;
use bytes::{BufMut, Bytes, BytesMut};
use prost::Message;
use tinymq_protocol::batch::varint::put_varint;
use tinymq_protocol::batch::{
    compute_crc, craft::CraftedBatch, BatchBuilder, BatchIter, Compression, ProducerStamp,
    RecordBatch, RecordInput,
};
use tinymq_protocol::{messages as m, ErrorCode, Frame};

const DOC: &str = include_str!("../../../../docs/protocol.md");

// ---- the doc's own examples -----------------------------------------------------------------

/// The fenced code blocks of the doc section whose heading line is exactly `heading`.
fn code_blocks(heading: &str) -> Vec<String> {
    let start = DOC
        .lines()
        .position(|l| l == heading)
        .unwrap_or_else(|| panic!("docs/protocol.md has no heading {heading:?}"));
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in DOC.lines().skip(start + 1) {
        if current.is_none() && line.starts_with('#') {
            break;
        }
        if line.trim_start().starts_with("```") {
            match current.take() {
                Some(block) => blocks.push(block),
                None => current = Some(String::new()),
            }
        } else if let Some(block) = current.as_mut() {
            block.push_str(line);
            block.push('\n');
        }
    }
    blocks
}

/// The bytes a block spells: on each line, the two-digit hex tokens before the first other
/// token (the annotation).
fn hex_bytes(block: &str) -> Vec<u8> {
    block
        .lines()
        .flat_map(|line| {
            line.split_whitespace()
                .map_while(|t| {
                    (t.len() == 2)
                        .then(|| u8::from_str_radix(t, 16).ok())
                        .flatten()
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

fn read_exactly(c: &mut RawClient, n: usize) -> Vec<u8> {
    let mut got = vec![0u8; n];
    c.stream.read_exact(&mut got).expect("response bytes");
    got
}

fn create(c: &mut RawClient, name: &str, config: Option<m::TopicConfig>) -> m::CreateTopicResponse {
    c.call(&m::CreateTopicRequest {
        name: name.into(),
        config,
        validate_only: false,
    })
}

#[test]
fn the_docs_example_frames_are_byte_for_byte_what_the_server_sends() {
    let blocks = code_blocks("### Example");
    assert_eq!(blocks.len(), 2, "§1 Example: a request and its response");
    let (request, response) = (hex_bytes(&blocks[0]), hex_bytes(&blocks[1]));
    assert_eq!(request.len(), 12, "the example request is a bare header");
    assert_eq!(
        response.len(),
        20,
        "the example response: header + 8 body bytes"
    );

    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let mut c = RawClient::handshaken(&server.addr);
    assert!(create(&mut c, "orders", None).error.is_none());
    c.send_raw(&request).unwrap();
    assert_eq!(
        read_exactly(&mut c, response.len()),
        response,
        "the server's ListTopics answer differs from docs/protocol.md §1 Example"
    );
}

#[test]
fn the_docs_example_batch_is_accepted_and_stored_verbatim() {
    let blocks = code_blocks("### Example batch");
    assert_eq!(blocks.len(), 1);
    let doc_batch = Bytes::from(hex_bytes(&blocks[0]));
    assert_eq!(doc_batch.len(), 74, "the doc says 74 bytes");
    let parsed = RecordBatch::parse(doc_batch.clone()).expect("the doc's batch parses");
    assert_eq!(
        parsed.crc(),
        compute_crc(&doc_batch),
        "the doc's CRC is right"
    );
    let records = parsed.records(1 << 20).unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].key.as_deref(), Some(&b"k"[..]));
    assert_eq!(records[0].value.as_deref(), Some(&b"hello"[..]));
    assert_eq!(records[0].timestamp_ms, 1_700_000_000_000);

    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let mut c = RawClient::handshaken(&server.addr);
    assert!(create(&mut c, "ex", None).error.is_none());
    for expected_offset in 0..2 {
        let r = produce(&mut c, "ex", doc_batch.clone(), 1).unwrap();
        assert_eq!(error_of(&r.error), 0, "{:?}", r.error);
        assert_eq!(r.base_offset, expected_offset);
        assert_eq!(r.log_append_time_ms, -1, "§3 Produce: always -1");
    }
    let fetched = fetch(&mut c, "ex", 1, 0);
    let stored = BatchIter::new(fetched.records).next().unwrap().unwrap();
    let stored = stored.as_bytes();
    // Only the two stamped fields differ: baseOffset (0..8) and partitionLeaderEpoch (12..16).
    assert_eq!(&stored[8..12], &doc_batch[8..12]);
    assert_eq!(&stored[16..], &doc_batch[16..]);
    assert_eq!(i64::from_be_bytes(stored[0..8].try_into().unwrap()), 1);
}

#[test]
fn the_docs_varint_examples_encode_as_stated() {
    // "(`0 → 00`, `−1 → 01`, `1 → 02`, `64 → 80 01`)"
    let line = DOC
        .lines()
        .skip_while(|l| !l.starts_with("Varints are zig-zag encoded"))
        .take(3)
        .collect::<Vec<_>>()
        .join(" ");
    let mut examples = 0;
    for part in line.split('`').filter(|p| p.contains('→')) {
        let (value, bytes) = part.split_once('→').unwrap();
        let value: i32 = value.trim().replace('−', "-").parse().unwrap();
        let mut out = BytesMut::new();
        put_varint(&mut out, value);
        assert_eq!(out.to_vec(), hex_bytes(bytes), "varint {value}");
        examples += 1;
    }
    assert_eq!(examples, 4, "the doc gives four varint examples");
}

// ---- §1: frames that close the connection, and errors that keep it ----------------------------

/// An answer as the doc describes it: a response frame's kind and id, the error code in its
/// body, and whether the server then closed the connection.
#[derive(Debug, PartialEq)]
struct Answer {
    kind: u8,
    id: u32,
    code: u32,
    closed: bool,
}

fn answer_of(c: &mut RawClient, frame: Frame) -> Answer {
    let kind = frame.header.kind;
    let id = frame.header.message_id;
    let code = error_code(&frame);
    // A connection that stays open must still answer: ListTopics with an id of our own.
    let closed = c.send_raw(&list_topics_frame(4242)).is_err()
        || match c.read_frame() {
            None => true,
            Some(f) => {
                assert_eq!(f.header.message_id, 4242, "the next answer is ours");
                false
            }
        };
    Answer {
        kind,
        id,
        code,
        closed,
    }
}

/// Sends `bytes` and takes the answer (the first frame back) as an [`Answer`].
fn exchange(c: &mut RawClient, bytes: &[u8]) -> Answer {
    c.send_raw(bytes).unwrap();
    let frame = c.read_frame().expect("an answer");
    answer_of(c, frame)
}

/// A request frame of `kind` with message id `id` around `body`.
fn framed(kind: u8, id: u32, body: &[u8]) -> Vec<u8> {
    let mut bytes = header(1, kind, id, body.len() as u32);
    bytes.extend_from_slice(body);
    bytes
}

fn list_topics_frame(id: u32) -> Vec<u8> {
    let mut out = vec![0x54, 0x4d, 1, 5];
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&0u32.to_be_bytes());
    out
}

fn header(version: u8, kind: u8, id: u32, body_len: u32) -> Vec<u8> {
    let mut out = vec![0x54, 0x4d, version, kind];
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&body_len.to_be_bytes());
    out
}

#[test]
fn frames_that_close_the_connection_get_kind_0x80_or_op_and_their_message_id() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let ua = |kind, id, code| Answer {
        kind,
        id,
        code: self::code(code),
        closed: true,
    };
    // (handshaken first?, bytes sent, the doc's answer)
    let cases: Vec<(bool, Vec<u8>, Answer)> = vec![
        // A Produce header (0x07) with frame version 2: 0x87, its id, UNSUPPORTED_VERSION.
        (
            true,
            header(2, 0x07, 42, 0),
            ua(0x87, 42, ErrorCode::UNSUPPORTED_VERSION),
        ),
        // Before the handshake too (a Metadata header).
        (
            false,
            header(9, 0x02, 7, 0),
            ua(0x82, 7, ErrorCode::UNSUPPORTED_VERSION),
        ),
        // A bad magic seen in its first two bytes: kind 0x80, id 0.
        (
            false,
            vec![0x58, 0x58],
            ua(0x80, 0, ErrorCode::INVALID_FRAME),
        ),
        (
            true,
            vec![0x00, 0x00],
            ua(0x80, 0, ErrorCode::INVALID_FRAME),
        ),
        // A body over the pre-handshake limit (64 KiB) in a Handshake header.
        (
            false,
            header(1, 0x01, 5, 65_537),
            ua(0x81, 5, ErrorCode::INVALID_FRAME),
        ),
        // A body over frame_bytes_max (16 MiB) in a Fetch header, before any body byte.
        (
            true,
            header(1, 0x08, 77, 16 * 1024 * 1024 + 1),
            ua(0x88, 77, ErrorCode::INVALID_FRAME),
        ),
    ];
    for (handshaken, bytes, expected) in cases {
        let mut c = if handshaken {
            RawClient::handshaken(&server.addr)
        } else {
            RawClient::connect(&server.addr)
        };
        let got = exchange(&mut c, &bytes);
        assert_eq!(got, expected, "sent {bytes:02x?}");
    }
}

#[test]
fn errors_that_keep_the_connection_and_the_handshake_rules() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let keep = |kind, id, code: ErrorCode| Answer {
        kind,
        id,
        code: self::code(code),
        closed: false,
    };
    let handshake = |min_version, max_version| {
        m::HandshakeRequest {
            min_version,
            max_version,
            cluster_id: String::new(),
            client_id: "conformance".into(),
            role: 0,
            node_id: 0,
        }
        .encode_to_vec()
    };

    // Before the handshake: HANDSHAKE_REQUIRED for anything but a Handshake, kind 0x80 | op,
    // the frame's id, and the connection stays open; so do a malformed and a refused
    // handshake; then a good one succeeds on the same connection.
    let mut c = RawClient::connect(&server.addr);
    let pre: Vec<(u8, Vec<u8>, Answer)> = vec![
        (0x02, vec![], keep(0x82, 1, ErrorCode::HANDSHAKE_REQUIRED)),
        (
            0x33,
            vec![1, 2, 3],
            keep(0xB3, 2, ErrorCode::HANDSHAKE_REQUIRED),
        ),
        (0x85, vec![], keep(0x85, 3, ErrorCode::HANDSHAKE_REQUIRED)),
        (
            0x01,
            vec![0xff, 0xff, 0xff],
            keep(0x81, 4, ErrorCode::MALFORMED_BODY),
        ),
        (
            0x01,
            handshake(2, 3),
            keep(0x81, 5, ErrorCode::UNSUPPORTED_VERSION),
        ),
    ];
    for (kind, body, expected) in pre {
        // Still before the handshake, the ListTopics probe itself gets HANDSHAKE_REQUIRED.
        let got = exchange(&mut c, &framed(kind, expected.id, &body));
        assert_eq!(got, expected, "pre-handshake kind {kind:#04x}");
    }
    let ok = c.call(&m::HandshakeRequest {
        min_version: 1,
        max_version: 1,
        ..Default::default()
    });
    assert!(ok.error.is_none(), "a handshake after refusals succeeds");
    assert_eq!(ok.frame_bytes_max, 16 * 1024 * 1024);

    // After it: unknown operation, a response frame, a malformed body, a second handshake,
    // a node-only operation from a client: each answered and the connection kept.
    let post: Vec<(u8, Vec<u8>, Answer)> = vec![
        (0x4F, vec![], keep(0xCF, 11, ErrorCode::UNKNOWN_OPERATION)),
        (0x85, vec![], keep(0x85, 12, ErrorCode::UNKNOWN_OPERATION)),
        (
            0x02,
            vec![0xff, 0xff, 0xff],
            keep(0x82, 13, ErrorCode::MALFORMED_BODY),
        ),
        (
            0x01,
            handshake(1, 1),
            keep(0x81, 14, ErrorCode::INVALID_REQUEST),
        ),
        (
            40,
            vec![],
            keep(0x80 | 40, 15, ErrorCode::CLUSTER_AUTHORIZATION_FAILED),
        ),
    ];
    for (kind, body, expected) in post {
        let got = exchange(&mut c, &framed(kind, expected.id, &body));
        assert_eq!(got, expected, "handshaken, kind {kind:#04x}");
    }
}

// ---- §2: zero means the server's default ------------------------------------------------------

#[test]
fn zero_and_absent_fields_take_the_documented_defaults() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let mut c = RawClient::handshaken(&server.addr);
    let defaults = m::TopicConfig {
        partitions: 1,
        replication_factor: 1,
        retention_ms: 7 * 24 * 3600 * 1000,
        retention_bytes: -1,
        segment_bytes: 1 << 30,
        flush: "always".into(),
        message_bytes_max: 1 << 20,
        segment_ms: 0,
        message_timestamp_after_max_ms: 3600 * 1000,
        message_timestamp_before_max_ms: -1,
        // By the replication factor: 1 for a single copy.
        min_insync_replicas: 1,
        unclean_leader_election: false,
        cleanup_policy: "delete".into(),
        delete_retention_ms: Some(24 * 3600 * 1000),
        min_compaction_lag_ms: 0,
        max_compaction_lag_ms: -1,
        min_cleanable_dirty_ratio: Some(0.5),
    };
    for (name, config) in [("absent", None), ("zeros", Some(m::TopicConfig::default()))] {
        let r = create(&mut c, name, config);
        assert!(r.error.is_none(), "{:?}", r.error);
        assert_eq!(r.config.as_ref(), Some(&defaults), "CreateTopic {name}");
    }

    // Produce timeout_ms 0 is 30 s, not an instant timeout.
    let r = c.call(&m::ProduceRequest {
        acks: 1,
        timeout_ms: 0,
        partitions: vec![m::ProducePartition {
            topic: "zeros".into(),
            partition: 0,
            records: batch("v", ProducerStamp::NONE),
        }],
        transactional_id: String::new(),
    });
    assert!(r.error.is_none());
    assert_eq!(error_of(&r.partitions[0].error), 0, "{:?}", r.partitions);

    // Fetch with every number 0: max_bytes = the cap, no per-partition bound, min_bytes 1,
    // answered at once.
    let f = c.call(&m::FetchRequest {
        max_wait_ms: 0,
        min_bytes: 0,
        max_bytes: 0,
        partitions: vec![m::FetchPartition {
            topic: "zeros".into(),
            partition: 0,
            offset: 0,
            partition_bytes_max: 0,
            ..Default::default()
        }],
        ..Default::default()
    });
    assert_eq!(error_of(&f.partitions[0].error), 0);
    assert_eq!(BatchIter::new(f.partitions[0].records.clone()).count(), 1);

    // Metadata with no topics lists every (user) topic.
    let md = c.call(&m::MetadataRequest { topics: vec![] });
    let mut names: Vec<_> = md.topics.iter().map(|t| t.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["absent", "zeros"]);

    // InitProducerId: never id 0, epoch 0, and the request's id and epoch are ignored.
    let mut seen = Vec::new();
    // (-1, -1) asks for a new id; (1, 7) looks like a request to bump producer 1's epoch.
    for (producer_id, producer_epoch) in [(-1, -1), (0, 0), (1, 7)] {
        let r = c.call(&m::InitProducerIdRequest {
            transactional_id: String::new(),
            producer_id,
            producer_epoch,
            transaction_timeout_ms: 0,
        });
        assert!(r.error.is_none());
        assert!(r.producer_id >= 1, "producer id 0 is never handed out");
        assert_eq!(r.producer_epoch, 0);
        assert!(!seen.contains(&r.producer_id), "a new id every call");
        seen.push(r.producer_id);
    }
}

// ---- §3 Produce and §5: idempotence, timestamps, headers --------------------------------------

/// A one-record batch whose record bytes are given whole (for headers the builder cannot
/// write, like a null key).
fn batch_of_raw_record(record: &[u8]) -> Bytes {
    let mut framed = BytesMut::new();
    put_varint(&mut framed, record.len() as i32);
    framed.extend_from_slice(record);
    let mut out = BytesMut::new();
    out.put_i64(0);
    out.put_i32((61 - 12 + framed.len()) as i32);
    out.put_i32(-1);
    out.put_i8(2);
    out.put_u32(0);
    out.put_i16(0);
    out.put_i32(0);
    out.put_i64(T0);
    out.put_i64(T0);
    out.put_i64(-1);
    out.put_i16(-1);
    out.put_i32(-1);
    out.put_i32(1);
    out.extend_from_slice(&framed);
    let crc = compute_crc(&out);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    out.freeze()
}

#[test]
fn headers_timestamps_list_offsets_and_metadata_as_documented() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let mut c = RawClient::handshaken(&server.addr);
    assert!(create(&mut c, "h", None).error.is_none());

    // Header keys: empty allowed, duplicates kept in order, values null or empty.
    let headers: &[(&str, Option<&[u8]>)] = &[
        ("dup", Some(b"1")),
        ("", Some(b"")),
        ("dup", None),
        ("dup", Some(b"3")),
    ];
    let mut b = BatchBuilder::new(Compression::None, ProducerStamp::NONE);
    b.push(&RecordInput {
        timestamp_ms: T0,
        key: Some(b"k"),
        value: Some(b"v"),
        headers,
    });
    let r = produce(&mut c, "h", b.build().unwrap(), 1).unwrap();
    assert_eq!((error_of(&r.error), r.base_offset), (0, 0));
    let fetched = fetch(&mut c, "h", 0, 0);
    let record = BatchIter::new(fetched.records)
        .next()
        .unwrap()
        .unwrap()
        .records(1 << 20)
        .unwrap()
        .remove(0);
    let got: Vec<(&str, Option<&[u8]>)> = record
        .headers
        .iter()
        .map(|h| (h.key.as_str(), h.value.as_deref()))
        .collect();
    assert_eq!(got, headers);

    // A null header key (keyLength −1) is CORRUPT_MESSAGE; nothing is written.
    // attributes 0, timestampDelta 0, offsetDelta 0, key null, value "v", 1 header: key −1.
    let null_key = [0x00, 0x00, 0x00, 0x01, 0x02, b'v', 0x02, 0x01, 0x00];
    let r = produce(&mut c, "h", batch_of_raw_record(&null_key), 1).unwrap();
    assert_eq!(error_of(&r.error), code(ErrorCode::CORRUPT_MESSAGE));
    // The same record with an empty key is fine: the crafting above is sound.
    let empty_key = [0x00, 0x00, 0x00, 0x01, 0x02, b'v', 0x02, 0x00, 0x00];
    let r = produce(&mut c, "h", batch_of_raw_record(&empty_key), 1).unwrap();
    assert_eq!((error_of(&r.error), r.base_offset), (0, 1));

    // Timestamp type bit 3 (log append time) is refused: no log-append-time topics.
    let mut lat = CraftedBatch::honest(T0, &[b"x"]);
    lat.attributes = 0x08;
    let r = produce(&mut c, "h", lat.encode(), 1).unwrap();
    assert_eq!(error_of(&r.error), code(ErrorCode::INVALID_RECORD));

    // ListOffsets: -1 the high watermark, -2 the start, -3 the first record with the largest
    // timestamp, a time the first record at or after it with that record's timestamp, 0 a
    // real time; -1/-1 when nothing is at or after.
    let later = CraftedBatch::honest(T0 + 5_000, &[b"later"]).encode();
    assert_eq!(produce(&mut c, "h", later, 1).unwrap().base_offset, 2);
    let cases = [
        (-1, (3, -1)),
        (-2, (0, -1)),
        (-3, (2, T0 + 5_000)),
        (0, (0, T0)),
        (T0, (0, T0)),
        (T0 + 1, (2, T0 + 5_000)),
        (T0 + 5_001, (-1, -1)),
    ];
    for (timestamp, expected) in cases {
        let r = c.call(&m::ListOffsetsRequest {
            partitions: vec![m::ListOffsetsPartition {
                topic: "h".into(),
                partition: 0,
                timestamp,
            }],
            isolation_level: 0,
        });
        let p = &r.partitions[0];
        assert_eq!(error_of(&p.error), 0);
        assert_eq!((p.offset, p.timestamp), expected, "ListOffsets {timestamp}");
    }
    // Other negative timestamps are refused, not searched for as times.
    for timestamp in [-4, i64::MIN] {
        let r = c.call(&m::ListOffsetsRequest {
            partitions: vec![m::ListOffsetsPartition {
                topic: "h".into(),
                partition: 0,
                timestamp,
            }],
            isolation_level: 0,
        });
        let p = &r.partitions[0];
        assert_eq!(
            error_of(&p.error),
            code(ErrorCode::INVALID_REQUEST),
            "ListOffsets {timestamp}"
        );
    }

    // Metadata for an unknown topic: error 3, no partitions, the response a success with the
    // brokers; and the topic is not created.
    for _ in 0..2 {
        let md = c.call(&m::MetadataRequest {
            topics: vec!["nope".into()],
        });
        assert!(md.error.is_none());
        assert!(!md.brokers.is_empty());
        assert_eq!(md.topics.len(), 1);
        assert_eq!(md.topics[0].name, "nope");
        assert_eq!(error_of(&md.topics[0].error), 3);
        assert!(md.topics[0].partitions.is_empty());
    }
    let names = c.call(&m::ListTopicsRequest {}).names;
    assert_eq!(names, ["h"], "Metadata never creates a topic");
}
