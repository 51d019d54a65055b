//! Share groups over raw native connections to a real `tinymq server` (docs/queues.md,
//! "Share groups"; docs/protocol.md, ops 50–52): acquisition, accept/release/reject, lock
//! expiry, INVALID_RECORD_STATE, members never holding one record together, state surviving
//! SIGKILL, dead-lettering with origin headers, and hostile requests.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{RawClient, Server};
use tinymq_filter::decode_sparse;
use tinymq_protocol::batch::{BatchBuilder, BatchIter, Compression, ProducerStamp, RecordInput};
use tinymq_protocol::{messages as m, ErrorCode};

const ACCEPT: u32 = 1;
const RELEASE: u32 = 2;
const REJECT: u32 = 3;

fn code(e: ErrorCode) -> u32 {
    u32::from(e.code())
}

fn error_of(e: &Option<m::Error>) -> u32 {
    e.as_ref().map_or(0, |e| e.code)
}

fn create(c: &mut RawClient, name: &str, partitions: u32) {
    let r = c.call(&m::CreateTopicRequest {
        name: name.into(),
        config: Some(m::TopicConfig {
            partitions,
            ..Default::default()
        }),
        validate_only: false,
    });
    assert!(r.error.is_none(), "{:?}", r.error);
}

fn set_config(c: &mut RawClient, topic: &str, key: &str, value: &str) {
    let r = c.call(&m::AlterTopicConfigRequest {
        name: topic.into(),
        set: vec![m::TopicSetting {
            key: key.into(),
            value: value.into(),
        }],
        unset: vec![],
        validate_only: false,
    });
    assert!(r.error.is_none(), "{:?}", r.error);
}

/// Produces values `v{first}..v{first+count}` in batches of `per_batch`, each with header
/// `h: x`.
fn produce(c: &mut RawClient, topic: &str, first: usize, count: usize, per_batch: usize) {
    produce_tagged(c, topic, first, count, per_batch, |_| "none");
}

/// [`produce`] with a `tag` header chosen by the record's number.
fn produce_tagged(
    c: &mut RawClient,
    topic: &str,
    first: usize,
    count: usize,
    per_batch: usize,
    tag: impl Fn(usize) -> &'static str,
) {
    let numbers: Vec<usize> = (first..first + count).collect();
    for chunk in numbers.chunks(per_batch) {
        let mut b = BatchBuilder::new(Compression::None, ProducerStamp::NONE);
        for &i in chunk {
            let value = format!("v{i}");
            b.push(&RecordInput {
                timestamp_ms: 1_700_000_000_000,
                key: Some(b"k"),
                value: Some(value.as_bytes()),
                headers: &[("h", Some(b"x")), ("tag", Some(tag(i).as_bytes()))],
            });
        }
        let r = c.call(&m::ProduceRequest {
            acks: -1,
            timeout_ms: 10_000,
            partitions: vec![m::ProducePartition {
                topic: topic.into(),
                partition: 0,
                records: b.build().unwrap(),
            }],
        });
        assert_eq!(
            error_of(&r.partitions[0].error),
            0,
            "{:?}",
            r.partitions[0].error
        );
    }
}

fn ack(topic: &str, first: i64, last: i64, kind: u32) -> m::ShareAcknowledgement {
    m::ShareAcknowledgement {
        topic: topic.into(),
        partition: 0,
        first_offset: first,
        last_offset: last,
        kind,
    }
}

struct Fetch<'a> {
    group: &'a str,
    member: &'a str,
    topic: &'a str,
    max_records: u32,
    lock_ms: u32,
    wait_ms: u32,
}

impl Fetch<'_> {
    fn request(&self, acks: Vec<m::ShareAcknowledgement>) -> m::ShareFetchRequest {
        m::ShareFetchRequest {
            group_id: self.group.into(),
            member_id: self.member.into(),
            partitions: vec![m::ShareFetchPartition {
                topic: self.topic.into(),
                partition: 0,
            }],
            max_wait_ms: self.wait_ms,
            max_records: self.max_records,
            lock_ms: self.lock_ms,
            acknowledgements: acks,
            ..Default::default()
        }
    }

    /// The delivered records: (offset, value, delivery count).
    fn call(
        &self,
        c: &mut RawClient,
        acks: Vec<m::ShareAcknowledgement>,
    ) -> Vec<(i64, String, u32)> {
        let r = c.call(&self.request(acks));
        assert!(r.error.is_none(), "{:?}", r.error);
        let p = &r.partitions[0];
        assert_eq!(error_of(&p.error), 0, "{:?}", p.error);
        assert_eq!(
            error_of(&p.acknowledge_error),
            0,
            "{:?}",
            p.acknowledge_error
        );
        delivered(p)
    }
}

/// The acquired records of a result, decoded from its batches.
fn delivered(p: &m::ShareFetchPartitionResult) -> Vec<(i64, String, u32)> {
    let count_of = |offset: i64| {
        p.acquired
            .iter()
            .find(|r| (r.first_offset..=r.last_offset).contains(&offset))
            .map(|r| r.delivery_count)
    };
    let mut out = Vec::new();
    for batch in BatchIter::new(p.records.clone()) {
        // Filtered answers hold batches with offset gaps.
        for record in decode_sparse(&batch.unwrap(), 1 << 20).unwrap() {
            if let Some(count) = count_of(record.offset) {
                let value = String::from_utf8(record.value.unwrap().to_vec()).unwrap();
                out.push((record.offset, value, count));
            }
        }
    }
    let acquired: i64 = p
        .acquired
        .iter()
        .map(|r| r.last_offset - r.first_offset + 1)
        .sum();
    assert_eq!(
        out.len() as i64,
        acquired,
        "every acquired record is in the batches"
    );
    out
}

fn acknowledge(
    c: &mut RawClient,
    group: &str,
    member: &str,
    acks: Vec<m::ShareAcknowledgement>,
) -> Vec<u32> {
    let r = c.call(&m::ShareAcknowledgeRequest {
        group_id: group.into(),
        member_id: member.into(),
        acknowledgements: acks,
    });
    assert!(r.error.is_none(), "{:?}", r.error);
    r.results.iter().map(|r| error_of(&r.error)).collect()
}

fn offsets(records: &[(i64, String, u32)]) -> Vec<i64> {
    records.iter().map(|r| r.0).collect()
}

/// The records of `topic`/0 from offset 0 (plain fetch), with their headers.
fn read_topic(c: &mut RawClient, topic: &str) -> Vec<(String, BTreeMap<String, String>)> {
    let r = c.call(&m::FetchRequest {
        max_wait_ms: 0,
        min_bytes: 1,
        max_bytes: 1 << 20,
        partitions: vec![m::FetchPartition {
            topic: topic.into(),
            partition: 0,
            offset: 0,
            ..Default::default()
        }],
        ..Default::default()
    });
    let records: Bytes = r
        .partitions
        .first()
        .map(|p| p.records.clone())
        .unwrap_or_default();
    let mut out = Vec::new();
    for batch in BatchIter::new(records) {
        for record in batch.unwrap().records(1 << 20).unwrap() {
            let value = String::from_utf8(record.value.unwrap().to_vec()).unwrap();
            let headers = record
                .headers
                .into_iter()
                .map(|h| (h.key, String::from_utf8(h.value.unwrap().to_vec()).unwrap()))
                .collect();
            out.push((value, headers));
        }
    }
    out
}

/// Waits (up to 20 s) until `topic` holds `count` records, and returns them.
fn await_records(
    c: &mut RawClient,
    topic: &str,
    count: usize,
) -> Vec<(String, BTreeMap<String, String>)> {
    let start = Instant::now();
    loop {
        let got = read_topic(c, topic);
        if got.len() >= count || start.elapsed() > Duration::from_secs(20) {
            return got;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn acquire_accept_release_reject_expiry_and_dead_letters() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let mut c = RawClient::handshaken(&server.addr);
    create(&mut c, "q", 1);
    produce(&mut c, "q", 0, 10, 5);
    let fetch = |member: &'static str| Fetch {
        group: "g",
        member,
        topic: "q",
        max_records: 4,
        lock_ms: 60_000,
        wait_ms: 0,
    };
    // Work queue: the first member starts at the earliest record.
    let m1 = fetch("m1").call(&mut c, vec![]);
    assert_eq!(
        m1,
        (0..4).map(|i| (i, format!("v{i}"), 1)).collect::<Vec<_>>()
    );
    let m2 = Fetch {
        max_records: 100,
        ..fetch("m2")
    }
    .call(&mut c, vec![]);
    assert_eq!(
        offsets(&m2),
        (4..10).collect::<Vec<_>>(),
        "never m1's records"
    );
    // m2 cannot acknowledge what m1 holds; m1 can.
    let invalid = code(ErrorCode::INVALID_RECORD_STATE);
    assert_eq!(
        acknowledge(&mut c, "g", "m2", vec![ack("q", 0, 3, ACCEPT)]),
        vec![invalid]
    );
    let acks = vec![
        ack("q", 0, 1, ACCEPT),
        ack("q", 2, 2, RELEASE),
        ack("q", 3, 3, REJECT),
    ];
    assert_eq!(acknowledge(&mut c, "g", "m1", acks), vec![0, 0, 0]);
    assert_eq!(
        acknowledge(&mut c, "g", "m1", vec![ack("q", 0, 0, ACCEPT)]),
        vec![invalid]
    );
    // The released record comes back with its second delivery (m2 accepts its own on the way).
    let again = fetch("m2").call(&mut c, vec![ack("q", 4, 9, ACCEPT)]);
    assert_eq!(again, vec![(2, "v2".into(), 2)]);

    // Lock expiry: m3's short lock runs out and a long-polling m4 gets the record.
    produce(&mut c, "q", 10, 1, 1);
    let m3 = Fetch {
        lock_ms: 300,
        ..fetch("m3")
    }
    .call(&mut c, vec![]);
    assert_eq!(m3, vec![(10, "v10".into(), 1)]);
    let started = Instant::now();
    let m4 = Fetch {
        wait_ms: 10_000,
        ..fetch("m4")
    }
    .call(&mut c, vec![]);
    println!(
        "record re-delivered {:?} after its 300 ms lock was taken",
        started.elapsed()
    );
    assert_eq!(m4, vec![(10, "v10".into(), 2)]);
    assert_eq!(
        acknowledge(&mut c, "g", "m3", vec![ack("q", 10, 10, ACCEPT)]),
        vec![invalid]
    );

    // The rejected record is in q.dlq with its origin.
    let dlq = await_records(&mut c, "q.dlq", 1);
    assert_eq!(dlq.len(), 1, "exactly one dead letter");
    let (value, headers) = &dlq[0];
    assert_eq!(value, "v3");
    let want = [
        ("h", "x"),
        ("tinymq.dlq.topic", "q"),
        ("tinymq.dlq.partition", "0"),
        ("tinymq.dlq.offset", "3"),
        ("tinymq.dlq.group", "g"),
        ("tinymq.dlq.attempts", "1"),
        ("tinymq.dlq.reason", "rejected"),
    ];
    for (k, v) in want {
        assert_eq!(
            headers.get(k).map(String::as_str),
            Some(v),
            "header {k} of {headers:?}"
        );
    }
    // Describe once the dead letter is marked done: m2 holds 2, m4 holds 10, the rest of
    // 0..=10 is done.
    let start = Instant::now();
    let d = loop {
        let d = c.call(&m::DescribeShareGroupRequest {
            group_id: "g".into(),
        });
        assert!(d.error.is_none(), "{:?}", d.error);
        if d.partitions[0].dead_lettered_total == 1 || start.elapsed() > Duration::from_secs(20) {
            break d;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let p = &d.partitions[0];
    assert_eq!(p.dead_lettered_total, 1);
    assert_eq!(
        (p.start_offset, p.end_offset, p.high_watermark),
        (2, 11, 11)
    );
    assert_eq!((p.acquired, p.available, p.accepted), (2, 0, 7));
    assert_eq!(d.member_ids, vec!["m2".to_string(), "m4".to_string()]);
}

#[test]
fn max_delivery_attempts_send_a_record_to_the_configured_dead_letter_topic() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let mut c = RawClient::handshaken(&server.addr);
    create(&mut c, "jobs", 1);
    set_config(&mut c, "jobs", "max_delivery_attempts", "2");
    set_config(&mut c, "jobs", "dead_letter_topic", "jobs-failed");
    produce(&mut c, "jobs", 0, 2, 2);
    let fetch = Fetch {
        group: "g",
        member: "w",
        topic: "jobs",
        max_records: 1,
        lock_ms: 60_000,
        wait_ms: 0,
    };
    assert_eq!(fetch.call(&mut c, vec![]), vec![(0, "v0".into(), 1)]);
    assert_eq!(
        fetch.call(&mut c, vec![ack("jobs", 0, 0, RELEASE)]),
        vec![(0, "v0".into(), 2)]
    );
    // The second release used up the attempts: the next record comes instead.
    assert_eq!(
        fetch.call(&mut c, vec![ack("jobs", 0, 0, RELEASE)]),
        vec![(1, "v1".into(), 1)]
    );
    let dlq = await_records(&mut c, "jobs-failed", 1);
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].0, "v0");
    assert_eq!(dlq[0].1["tinymq.dlq.reason"], "max-attempts");
    assert_eq!(dlq[0].1["tinymq.dlq.attempts"], "2");
}

#[test]
fn state_survives_sigkill_accepted_never_again_unaccepted_with_their_counts() {
    let tmp = tempfile::tempdir().unwrap();
    let mut server = Server::start(tmp.path());
    let mut c = RawClient::handshaken(&server.addr);
    create(&mut c, "q", 1);
    produce(&mut c, "q", 0, 20, 4);
    let fetch = Fetch {
        group: "g",
        member: "m1",
        topic: "q",
        max_records: 100,
        lock_ms: 60_000,
        wait_ms: 0,
    };
    assert_eq!(fetch.call(&mut c, vec![]).len(), 20);
    // Released records were delivered once; accepted ones are done.
    let acks = vec![
        ack("q", 0, 9, ACCEPT),
        ack("q", 10, 11, RELEASE),
        ack("q", 12, 12, REJECT),
    ];
    assert_eq!(acknowledge(&mut c, "g", "m1", acks), vec![0, 0, 0]);
    drop(c);
    server.kill9();

    let server = Server::start(tmp.path());
    let mut c = RawClient::handshaken(&server.addr);
    // The rejected record reaches the dead-letter topic, before or after the kill (at least
    // once), without any member asking after the restart.
    let dlq = await_records(&mut c, "q.dlq", 1);
    assert!(
        !dlq.is_empty() && dlq.iter().all(|r| r.0 == "v12"),
        "{dlq:?}"
    );
    println!(
        "rejected record written to q.dlq {} time(s) across the kill",
        dlq.len()
    );
    let m2 = Fetch {
        member: "m2",
        ..fetch
    }
    .call(&mut c, vec![]);
    let expected: Vec<i64> = (10..20).filter(|o| *o != 12).collect();
    assert_eq!(
        offsets(&m2),
        expected,
        "no accepted or rejected record again"
    );
    assert!(m2.iter().all(|r| r.2 == 2), "delivery counts kept: {m2:?}");
    let m2_again = Fetch {
        member: "m2",
        wait_ms: 200,
        ..fetch
    };
    assert!(m2_again
        .call(
            &mut c,
            vec![ack("q", 10, 11, ACCEPT), ack("q", 13, 19, ACCEPT)]
        )
        .is_empty());
    let d = c.call(&m::DescribeShareGroupRequest {
        group_id: "g".into(),
    });
    assert_eq!(d.partitions[0].start_offset, 20);
}

#[test]
fn concurrent_members_never_hold_the_same_record() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let mut c = RawClient::handshaken(&server.addr);
    create(&mut c, "q", 1);
    const RECORDS: usize = 2_000;
    produce(&mut c, "q", 0, RECORDS, 50);
    let started = Instant::now();
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let addr = server.addr.clone();
            std::thread::spawn(move || {
                let mut c = RawClient::handshaken(&addr);
                let member = format!("w{w}");
                let fetch = Fetch {
                    group: "g",
                    member: &member,
                    topic: "q",
                    max_records: 37,
                    lock_ms: 120_000,
                    wait_ms: 200,
                };
                let (mut accepted, mut acks, mut empty) = (Vec::new(), Vec::new(), 0);
                while empty < 3 {
                    let got = fetch.call(&mut c, std::mem::take(&mut acks));
                    empty = if got.is_empty() { empty + 1 } else { 0 };
                    for (offset, _, count) in got {
                        // Every 7th first delivery is released: another member gets it.
                        if offset % 7 == 0 && count == 1 {
                            acks.push(ack("q", offset, offset, RELEASE));
                        } else {
                            acks.push(ack("q", offset, offset, ACCEPT));
                            accepted.push(offset);
                        }
                    }
                }
                accepted
            })
        })
        .collect();
    let mut seen = BTreeSet::new();
    let mut per_worker = Vec::new();
    for w in workers {
        let accepted = w.join().unwrap();
        per_worker.push(accepted.len());
        for offset in accepted {
            assert!(seen.insert(offset), "offset {offset} accepted twice");
        }
    }
    let elapsed = started.elapsed();
    println!(
        "accepted per member: {per_worker:?}; {RECORDS} records in {elapsed:?} ({:.0} records/s, \
         37 per fetch, each fetch and acknowledgement fsynced)",
        RECORDS as f64 / elapsed.as_secs_f64()
    );
    let missing: Vec<i64> = (0..RECORDS as i64).filter(|o| !seen.contains(o)).collect();
    assert!(
        missing.is_empty(),
        "{} never accepted, first {:?}",
        missing.len(),
        &missing[..missing.len().min(20)]
    );
    assert_eq!(seen.len(), RECORDS);
}

#[test]
fn hostile_requests_are_refused_with_their_codes() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let mut c = RawClient::handshaken(&server.addr);
    create(&mut c, "q", 1);
    produce(&mut c, "q", 0, 3, 3);
    let fetch = Fetch {
        group: "g",
        member: "m",
        topic: "q",
        max_records: 0,
        lock_ms: 0,
        wait_ms: 0,
    };
    let refused = |c: &mut RawClient, req: m::ShareFetchRequest| error_of(&c.call(&req).error);
    let invalid = code(ErrorCode::INVALID_REQUEST);
    for member in ["", "a b", "ä", &"x".repeat(256)] {
        let req = Fetch { member, ..fetch }.request(vec![]);
        assert_eq!(refused(&mut c, req), invalid, "member {member:?}");
    }
    let req = Fetch { group: "", ..fetch }.request(vec![]);
    assert_eq!(refused(&mut c, req), code(ErrorCode::INVALID_GROUP_ID));
    let mut req = fetch.request(vec![]);
    req.max_records = 10_001;
    assert_eq!(refused(&mut c, req), invalid);
    let mut req = fetch.request(vec![]);
    req.max_records = u32::MAX;
    assert_eq!(refused(&mut c, req), invalid);
    let mut req = fetch.request(vec![]);
    req.lock_ms = 600_001;
    assert_eq!(refused(&mut c, req), invalid);
    let req = fetch.request((0..10_001).map(|i| ack("q", i, i, ACCEPT)).collect());
    assert_eq!(refused(&mut c, req), invalid);

    // Per-partition refusals.
    let r = c.call(
        &Fetch {
            topic: "nope",
            ..fetch
        }
        .request(vec![]),
    );
    assert_eq!(
        error_of(&r.partitions[0].error),
        code(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
    );
    let r = c.call(
        &Fetch {
            topic: "__consumer_offsets",
            ..fetch
        }
        .request(vec![]),
    );
    assert_eq!(
        error_of(&r.partitions[0].error),
        code(ErrorCode::INVALID_TOPIC)
    );
    let mut req = fetch.request(vec![]);
    req.partitions[0].partition = 7;
    let r = c.call(&req);
    assert_eq!(
        error_of(&r.partitions[0].error),
        code(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
    );

    // Acknowledgements: unknown kind, reversed and huge ranges, records never acquired.
    let acks = vec![
        ack("q", 0, 0, 9),
        ack("q", 5, 4, ACCEPT),
        ack("q", i64::MIN, i64::MAX, ACCEPT),
        ack("q", 0, 2, ACCEPT),
        ack("nope", 0, 0, ACCEPT),
    ];
    let state = code(ErrorCode::INVALID_RECORD_STATE);
    let unknown = code(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
    assert_eq!(
        acknowledge(&mut c, "g", "m", acks),
        vec![invalid, invalid, state, state, unknown]
    );
    // Nothing was disturbed: all three records are still there for a member.
    let got = fetch.call(&mut c, vec![]);
    assert_eq!(offsets(&got), vec![0, 1, 2]);
    // A filter is either served or refused with INVALID_FILTER, never ignored.
    let mut req = Fetch {
        member: "f",
        ..fetch
    }
    .request(vec![]);
    req.filter = "tag = ".into();
    assert_eq!(refused(&mut c, req), code(ErrorCode::INVALID_FILTER));
}

#[test]
fn a_filtered_share_fetch_delivers_matching_records_and_finishes_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let mut c = RawClient::handshaken(&server.addr);
    create(&mut c, "q", 1);
    produce_tagged(&mut c, "q", 0, 30, 7, |i| {
        if i % 3 == 0 {
            "red"
        } else {
            "blue"
        }
    });
    let fetch = Fetch {
        group: "g",
        member: "r",
        topic: "q",
        max_records: 100,
        lock_ms: 60_000,
        wait_ms: 0,
    };
    let mut req = fetch.request(vec![]);
    req.filter = "tag = 'red'".into();
    let r = c.call(&req);
    assert!(r.error.is_none(), "{:?}", r.error);
    let p = &r.partitions[0];
    let got = delivered(p);
    let reds: Vec<i64> = (0..30).filter(|i| i % 3 == 0).collect();
    assert_eq!(offsets(&got), reds);
    // Only the acquired records crossed the network.
    let sent: usize = BatchIter::new(p.records.clone())
        .map(|b| decode_sparse(&b.unwrap(), 1 << 20).unwrap().len())
        .sum();
    assert_eq!(sent, reds.len());
    // The others were finished without delivery: nobody gets them.
    let acks = vec![ack("q", 0, 29, ACCEPT)];
    let errors = acknowledge(&mut c, "g", "r", acks);
    assert_eq!(
        errors,
        vec![code(ErrorCode::INVALID_RECORD_STATE)],
        "20 were never r's"
    );
    assert!(Fetch {
        member: "other",
        ..fetch
    }
    .call(&mut c, vec![])
    .is_empty());
    let d = c.call(&m::DescribeShareGroupRequest {
        group_id: "g".into(),
    });
    assert_eq!(
        (d.partitions[0].start_offset, d.partitions[0].end_offset),
        (30, 30)
    );
    // A malformed filter is refused with a message pointing at the error.
    let mut req = fetch.request(vec![]);
    req.filter = "tag = 'red' AND".into();
    let error = c.call(&req).error.expect("refused");
    assert_eq!(error.code, code(ErrorCode::INVALID_FILTER));
    assert!(error.message.contains("column"), "{}", error.message);
}

#[test]
fn deleting_the_topic_removes_its_share_state() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let mut c = RawClient::handshaken(&server.addr);
    create(&mut c, "q", 1);
    produce(&mut c, "q", 0, 5, 5);
    let fetch = Fetch {
        group: "g",
        member: "m",
        topic: "q",
        max_records: 100,
        lock_ms: 60_000,
        wait_ms: 0,
    };
    fetch.call(&mut c, vec![]);
    let state_dir = tmp.path().join("q-0").join("share");
    assert_eq!(
        std::fs::read_dir(&state_dir).unwrap().count(),
        1,
        "one group's state log"
    );
    let r = c.call(&m::DeleteTopicRequest { name: "q".into() });
    assert!(r.error.is_none(), "{:?}", r.error);
    let start = Instant::now();
    while state_dir.exists() && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!state_dir.exists(), "the state log went with the topic");
    // A new topic of the same name starts its share group from its earliest record.
    let start = Instant::now();
    loop {
        let r = c.call(&m::CreateTopicRequest {
            name: "q".into(),
            config: None,
            validate_only: false,
        });
        if r.error.is_none() || start.elapsed() > Duration::from_secs(20) {
            assert!(r.error.is_none(), "{:?}", r.error);
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    produce(&mut c, "q", 0, 2, 2);
    let got = fetch.call(&mut c, vec![]);
    assert_eq!(got, vec![(0, "v0".into(), 1), (1, "v1".into(), 1)]);
}

#[test]
fn a_long_state_log_is_rewritten_small_and_still_restores_the_state() {
    let tmp = tempfile::tempdir().unwrap();
    let mut server = Server::start(tmp.path());
    let mut c = RawClient::handshaken(&server.addr);
    create(&mut c, "q", 1);
    const RECORDS: i64 = 50_000;
    produce(&mut c, "q", 0, RECORDS as usize, 500);
    let fetch = Fetch {
        group: "g",
        member: "m",
        topic: "q",
        max_records: 10_000,
        lock_ms: 60_000,
        wait_ms: 0,
    };
    let path = tmp.path().join("q-0").join("share").join("67.state");
    let mut largest = 0;
    let mut accepted = 0i64;
    while accepted < RECORDS {
        let mut req = fetch.request(vec![]);
        req.max_bytes = 4 << 20;
        let r = c.call(&req);
        let got = delivered(&r.partitions[0]);
        assert!(!got.is_empty(), "records left from {accepted}");
        // One acknowledgement per record: the log grows by a record each.
        let acks = got.iter().map(|r| ack("q", r.0, r.0, ACCEPT)).collect();
        let errors = acknowledge(&mut c, "g", "m", acks);
        assert!(errors.iter().all(|e| *e == 0));
        accepted += got.len() as i64;
        largest = largest.max(std::fs::metadata(&path).unwrap().len());
    }
    // The background task rewrites it within a tick or two.
    let start = Instant::now();
    let mut size = std::fs::metadata(&path).unwrap().len();
    while size > 1 << 20 && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
        size = std::fs::metadata(&path).unwrap().len();
    }
    println!("state log: largest seen {largest} bytes, now {size} bytes");
    assert!(size < 1 << 20, "rewritten: {size} bytes");
    assert!(largest > size, "it had grown: {largest}");
    server.kill9();
    let server = Server::start(tmp.path());
    let mut c = RawClient::handshaken(&server.addr);
    assert!(Fetch {
        wait_ms: 100,
        ..fetch
    }
    .call(&mut c, vec![])
    .is_empty());
    let d = c.call(&m::DescribeShareGroupRequest {
        group_id: "g".into(),
    });
    assert_eq!(d.partitions[0].start_offset, RECORDS);
}
