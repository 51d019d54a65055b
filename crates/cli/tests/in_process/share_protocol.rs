//! Share groups over raw native connections to a node in this process (docs/queues.md,
//! "Share groups"; docs/protocol.md, ops 50–52): acquisition, accept/release/reject, lock
//! expiry, INVALID_RECORD_STATE, members never holding one record together, dead-lettering
//! with origin headers, filters, and hostile requests (durability: `share_durability.rs`).

#[path = "share_protocol/raw.rs"]
mod raw;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::common::RawClient;
use crate::node::Server;
use raw::*;
use tinymq_filter::decode_sparse;
use tinymq_protocol::batch::BatchIter;
use tinymq_protocol::{messages as m, ErrorCode};

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
