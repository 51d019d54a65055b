//! Share-group state durability against a real `tinymq server` (docs/queues.md, "Share
//! groups"; docs/storage.md, "Share-group state logs"): accepted records never delivered
//! again after SIGKILL, unaccepted ones delivered again with their delivery counts, a
//! rejected record reaching the dead-letter topic across the kill, the state log rewritten
//! small, and removed with its topic.

mod common;
#[path = "in_process/share_protocol/raw.rs"]
mod raw;

use std::time::{Duration, Instant};

use common::{RawClient, Server};
use raw::*;
use tinymq_protocol::messages as m;

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
    // One group's state log (besides the `.tmp` directory snapshots are written in).
    let logs = std::fs::read_dir(&state_dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".state"))
        })
        .count();
    assert_eq!(logs, 1, "one group's state log");
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
    let path = tmp.path().join("q-0").join("share").join("g.state");
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
