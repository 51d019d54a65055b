//! The group consumer's promises with real processes (issue 11, items 2–4 and 10): a group
//! commits exactly what `consume` printed (with `--count`, on Ctrl-C and on SIGTERM), members
//! that join close together never both deliver a record, and a group whose members start
//! together settles before records arrive.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::consume::Consume;
use common::Server;

fn consume(server: &Server, args: &[&str]) -> Consume {
    Consume::start(server.tool(&[&["consume"], args].concat()))
}

fn produce(server: &Server, topic: &str, from: usize, to: usize) {
    let lines: String = (from..to).map(|i| format!("m{i}\n")).collect();
    server.run_tool(&["produce", topic], lines.as_bytes());
}

fn values(from: usize, to: usize) -> Vec<String> {
    (from..to).map(|i| format!("m{i}")).collect()
}

/// Committed offset per partition of `group`, from `group describe --json`.
fn committed(server: &Server, group: &str) -> BTreeMap<u64, Option<i64>> {
    let d = describe(server, group);
    d["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["partition"].as_u64().unwrap(),
                p["committed_offset"].as_i64(),
            )
        })
        .collect()
}

fn describe(server: &Server, group: &str) -> serde_json::Value {
    let out = server.run_tool(&["group", "describe", group, "--json"], b"");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn consume_with_count_commits_only_what_it_printed() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    server.run_tool(&["topic", "create", "one"], b"");
    produce(&server, "one", 0, 100);
    let args = ["one", "--group", "g1", "--from-beginning", "--count", "3"];
    let out = server.run_tool(&[&["consume"], &args[..]].concat(), b"");
    let printed: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(printed, values(0, 3));
    assert_eq!(committed(&server, "g1"), BTreeMap::from([(0, Some(3))]));
    // The rest goes to the next run of the group, each record once.
    let args = [
        "one",
        "--group",
        "g1",
        "--count",
        "97",
        "--timeout-ms",
        "20000",
    ];
    let out = server.run_tool(&[&["consume"], &args[..]].concat(), b"");
    let printed: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(printed, values(3, 100));
    assert_eq!(committed(&server, "g1"), BTreeMap::from([(0, Some(100))]));
}

#[test]
fn ctrl_c_and_sigterm_commit_what_was_printed_and_leave() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    server.run_tool(&["topic", "create", "two", "--partitions", "2"], b"");
    produce(&server, "two", 0, 100);
    let args = ["two", "--group", "g2", "--from-beginning"];
    let mut first = consume(&server, &args);
    first.wait_printed(100);
    let status = first.signal(libc::SIGINT);
    assert_eq!(status.code(), Some(130), "Ctrl-C exits 130: {status:?}");
    let mut printed = first.printed();
    printed.sort();
    let mut want = values(0, 100);
    want.sort();
    assert_eq!(printed, want);
    let d = describe(&server, "g2");
    assert_eq!(d["members"].as_array().unwrap().len(), 0, "it left: {d}");
    let total: i64 = committed(&server, "g2").values().map(|c| c.unwrap()).sum();
    assert_eq!(total, 100, "everything printed is committed");

    produce(&server, "two", 100, 150);
    let mut second = consume(&server, &args);
    second.wait_printed(50);
    assert_eq!(second.signal(libc::SIGTERM).code(), Some(0));
    let mut printed = second.printed();
    printed.sort();
    let mut want = values(100, 150);
    want.sort();
    assert_eq!(
        printed, want,
        "the rerun starts after what the first printed"
    );
    let total: i64 = committed(&server, "g2").values().map(|c| c.unwrap()).sum();
    assert_eq!(total, 150);
}

#[test]
fn members_joining_close_together_never_deliver_a_record_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    server.run_tool(&["topic", "create", "dup", "--partitions", "6"], b"");
    produce(&server, "dup", 0, 600);
    let args = ["dup", "--group", "dup", "--from-beginning"];
    let mut a = consume(&server, &args);
    std::thread::sleep(Duration::from_secs(1));
    let mut b = consume(&server, &args);
    for _ in 0..600 {
        if a.printed().len() + b.printed().len() >= 600 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Give a duplicate time to show up before stopping.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(a.signal(libc::SIGTERM).code(), Some(0));
    assert_eq!(b.signal(libc::SIGTERM).code(), Some(0));
    let (pa, pb) = (a.printed(), b.printed());
    let both: BTreeSet<&String> = pa.iter().filter(|v| pb.contains(v)).collect();
    assert!(
        both.is_empty(),
        "{} records delivered to both members",
        both.len()
    );
    let mut all: Vec<String> = pa.into_iter().chain(pb).collect();
    all.sort();
    let mut want = values(0, 600);
    want.sort();
    assert_eq!(all, want, "every record delivered exactly once");
    let total: i64 = committed(&server, "dup").values().map(|c| c.unwrap()).sum();
    assert_eq!(total, 600);
}

#[test]
fn members_started_together_share_the_records_that_follow() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    server.run_tool(&["topic", "create", "grp", "--partitions", "6"], b"");
    let args = ["grp", "--group", "grp", "--timeout-ms", "6000"];
    let mut members: Vec<Consume> = (0..3).map(|_| consume(&server, &args)).collect();
    std::thread::sleep(Duration::from_secs(5));
    produce(&server, "grp", 0, 60_000);
    for m in &mut members {
        assert!(m.wait().success());
    }
    let counts: Vec<usize> = members.iter().map(|m| m.printed().len()).collect();
    assert!(
        counts.iter().all(|c| *c > 0),
        "every member received records: {counts:?}"
    );
    let mut all: Vec<String> = members.iter().flat_map(|m| m.printed()).collect();
    all.sort();
    let mut want = values(0, 60_000);
    want.sort();
    assert_eq!(all.len(), want.len(), "counts {counts:?}");
    assert_eq!(all, want, "every record exactly once");
}

/// `poll` dropped at random points (as `tokio::select!` does) loses, repeats and forgets
/// nothing: every record arrives once, and the consumer is still a member that can commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_poll_loses_nothing_and_keeps_the_membership() {
    use tinymq_client::{Consumer, ConsumerConfig, StartFrom};
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    server.run_tool(&["topic", "create", "cancel", "--partitions", "3"], b"");
    produce(&server, "cancel", 0, 3000);
    let mut config = ConsumerConfig::new(&server.addr);
    config.start_from = StartFrom::Earliest;
    config.max_poll_records = 7;
    let mut consumer = Consumer::new(config).unwrap();
    consumer
        .subscribe("cancel-group", &["cancel"])
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut cancelled = 0;
    for round in 0u64..20_000 {
        if got.len() >= 3000 {
            break;
        }
        // Cut polls short after 0–3 ms: some finish, some are dropped mid-way.
        let cut = Duration::from_micros((round * 7919) % 3000);
        tokio::select! {
            records = consumer.poll(Duration::from_millis(50)) => got.extend(records.unwrap()),
            _ = tokio::time::sleep(cut) => cancelled += 1,
        }
    }
    assert!(cancelled > 0, "some polls were cancelled");
    let mut delivered: Vec<String> = got
        .iter()
        .map(|r| String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap())
        .collect();
    delivered.sort();
    let mut want = values(0, 3000);
    want.sort();
    assert_eq!(delivered, want, "every record exactly once");
    consumer.commit().await.unwrap();
    consumer.close().await.unwrap();
    let total: i64 = committed(&server, "cancel-group")
        .values()
        .map(|c| c.unwrap())
        .sum();
    assert_eq!(total, 3000);
}
