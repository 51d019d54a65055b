//! Broker lifecycle and topic deletion with real processes: a broker stopped with SIGTERM
//! leaves placement at once (and returns when restarted), `tinymq broker decommission` retires
//! a broker for good, and deleting topics with thousands of partitions neither holds up the
//! next topic change nor lets a topic created again under the same name see the old records.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, start, RawClient, Server, BIN};
use tinymq_protocol::messages as m;

fn tool(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run tinymq")
}

fn tool_ok(args: &[&str]) -> String {
    let out = tool(args);
    assert!(
        out.status.success(),
        "tinymq {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a tool that must fail; returns what it printed on stderr.
fn tool_fails(args: &[&str]) -> String {
    let out = tool(args);
    assert!(!out.status.success(), "tinymq {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs `tinymq produce TOPIC` with `lines` on stdin; returns whether every line was
/// acknowledged, and what it printed on stderr.
fn produce(topic: &str, bootstrap: &str, lines: &[String]) -> (bool, String) {
    let mut child = Command::new(BIN)
        .args(["produce", topic, "--key-separator", ":"])
        .args(["--bootstrap", bootstrap])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn produce");
    let mut stdin = child.stdin.take().expect("stdin");
    std::io::Write::write_all(&mut stdin, lines.join("\n").as_bytes()).expect("write");
    drop(stdin);
    let out = child.wait_with_output().expect("produce");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn produce_ok(topic: &str, bootstrap: &str, lines: &[String]) {
    let (ok, stderr) = produce(topic, bootstrap, lines);
    assert!(ok, "produce to {topic}: {stderr}");
}

/// `count` keyed lines `k<i>:<prefix>-<i>`, and their values sorted.
fn keyed_lines(prefix: &str, count: usize) -> (Vec<String>, Vec<String>) {
    let values: Vec<String> = (0..count).map(|i| format!("{prefix}-{i:05}")).collect();
    let lines = values
        .iter()
        .enumerate()
        .map(|(i, v)| format!("k{i}:{v}"))
        .collect();
    let mut sorted = values;
    sorted.sort();
    (lines, sorted)
}

/// The first `count` values of the topic from the beginning, sorted.
fn consume(topic: &str, bootstrap: &str, count: usize) -> Vec<String> {
    let count = count.to_string();
    let out = tool_ok(&[
        "consume",
        topic,
        "--from-beginning",
        "--count",
        &count,
        "--bootstrap",
        bootstrap,
    ]);
    let mut values: Vec<String> = out.lines().map(String::from).collect();
    values.sort();
    values
}

fn describe(topic: &str, bootstrap: &str) -> serde_json::Value {
    let out = tool_ok(
        &["topic", "describe", topic, "--json"]
            .into_iter()
            .chain(["--bootstrap", bootstrap])
            .collect::<Vec<_>>(),
    );
    serde_json::from_str(&out).expect("describe prints JSON")
}

/// Every broker id named in the topic's replica lists.
fn replica_holders(topic: &str, bootstrap: &str) -> Vec<u64> {
    let mut holders: Vec<u64> = describe(topic, bootstrap)["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .flat_map(|p| p["replicas"].as_array().expect("replicas").clone())
        .map(|r| r.as_u64().expect("broker id"))
        .collect();
    holders.sort_unstable();
    holders.dedup();
    holders
}

/// Broker id → live, as `cluster status` reports it.
fn broker_states(meta: &str) -> Vec<(u64, bool)> {
    let out = tool_ok(&["cluster", "status", "--json", "--bootstrap", meta]);
    let status: serde_json::Value = serde_json::from_str(&out).expect("status JSON");
    status["brokers"]
        .as_array()
        .expect("brokers")
        .iter()
        .map(|b| (b["id"].as_u64().unwrap(), b["live"].as_bool().unwrap()))
        .collect()
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..300 {
        if done() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("timed out waiting for {what}");
}

/// One `ListOffsets` (latest) per partition, sent once to `addr`: the offsets, or the first
/// error any partition answered.
fn latest_offsets(addr: &str, topic: &str, partitions: u32) -> Result<Vec<i64>, String> {
    let answer = RawClient::handshaken(addr).call(&m::ListOffsetsRequest {
        partitions: (0..partitions)
            .map(|partition| m::ListOffsetsPartition {
                topic: topic.into(),
                partition,
                timestamp: -1,
            })
            .collect(),
        isolation_level: 0,
    });
    answer
        .partitions
        .iter()
        .map(|p| match &p.error {
            Some(e) if e.code != 0 => Err(format!("{topic}/{}: {}", p.partition, e.message)),
            _ => Ok(p.offset),
        })
        .collect()
}

/// Directories in `data` left by deletions and not yet removed.
fn deleted_dirs(data: &Path) -> Vec<String> {
    std::fs::read_dir(data)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| name.ends_with(".deleted"))
                .collect()
        })
        .unwrap_or_default()
}

/// Two topics of 1,024 partitions each (the per-topic limit; with the offsets topic 2,052
/// partition replicas on one broker, within its 4,000) are deleted and at once a topic is
/// created and used: its `topic create` answer means its partitions are open (a single
/// `ListOffsets` right after finds them), produce and consume work, a topic created again
/// under a deleted topic's name starts empty, and the deleted data (and a `.deleted` directory
/// left from an earlier run) is removed in the background.
#[test]
fn deleting_large_topics_holds_up_nothing_and_a_recreated_topic_starts_empty() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("server");
    // A deletion an earlier run did not finish (it stopped in the middle).
    let leftover = data.join("gone-0.1.deleted");
    std::fs::create_dir_all(&leftover).unwrap();
    std::fs::write(leftover.join("00000000000000000000.log"), b"old").unwrap();
    let server = Server::start(&data);
    let s = server.addr.as_str();

    for big in ["big1", "big2"] {
        tool_ok(&[
            "topic",
            "create",
            big,
            "--partitions",
            "1024",
            "--bootstrap",
            s,
        ]);
        // Keyed records reach most partitions (the producer waits for them to open).
        let (lines, _) = keyed_lines(big, 3000);
        produce_ok(big, s, &lines);
    }

    let started = Instant::now();
    tool_ok(&["topic", "delete", "big1", "--bootstrap", s]);
    tool_ok(&["topic", "delete", "big2", "--bootstrap", s]);
    let deleted = started.elapsed();
    tool_ok(&[
        "topic",
        "create",
        "fresh",
        "--partitions",
        "3",
        "--bootstrap",
        s,
    ]);
    let created = started.elapsed();
    // The answer to a create promises its partitions are open here: one try, no retry.
    assert_eq!(latest_offsets(s, "fresh", 3), Ok(vec![0, 0, 0]));
    let (lines, expected) = keyed_lines("fresh", 100);
    produce_ok("fresh", s, &lines);
    let produced = started.elapsed();
    assert_eq!(consume("fresh", s, 100), expected);

    // Created again under the old name: nothing of the old records is visible.
    tool_ok(&[
        "topic",
        "create",
        "big1",
        "--partitions",
        "8",
        "--bootstrap",
        s,
    ]);
    assert_eq!(latest_offsets(s, "big1", 8), Ok(vec![0; 8]));
    let (lines, expected) = keyed_lines("again", 50);
    produce_ok("big1", s, &lines);
    assert_eq!(consume("big1", s, 50), expected);
    eprintln!(
        "measured: both deletes answered after {deleted:?}, create after {created:?}, \
         100 records produced after {produced:?}"
    );

    wait_for("the deleted partitions' data to be removed", || {
        deleted_dirs(&data).is_empty()
    });
    assert!(!leftover.exists());
    for big in ["big1-8", "big2-0", "big2-1023"] {
        assert!(!data.join(big).exists(), "{big} is removed");
    }
}

/// A MetaServer and three brokers. A broker stopped with SIGTERM leaves the cluster before it
/// exits: a topic created right after places nothing on it, and every record produced to the
/// topic is acknowledged. Restarted, it is placed on again. Decommissioned (only once stopped,
/// and only with its partitions moved), it is gone for good: its id cannot register again.
#[test]
fn a_stopped_broker_gets_no_partitions_and_a_decommissioned_one_never_returns() {
    let tmp = tempfile::tempdir().unwrap();
    let meta = format!("127.0.0.1:{}", free_port());
    let _meta = start(1, std::slice::from_ref(&meta), tmp.path());
    let addrs: Vec<String> = (0..3)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let dir = |id: usize| tmp.path().join(format!("broker-{id}"));
    let mut brokers: Vec<Server> = (1..=3)
        .map(|id| Server::start_broker(id as u32, &addrs[id - 1], &meta, &dir(id)))
        .collect();
    let b1 = addrs[0].as_str();

    // SIGTERM broker 3 and create a topic at once.
    let stopped = brokers[2].terminate();
    assert!(stopped.success(), "broker 3 stopped with {stopped:?}");
    assert_eq!(broker_states(&meta), vec![(1, true), (2, true), (3, false)]);
    tool_ok(&[
        "topic",
        "create",
        "after-stop",
        "--partitions",
        "60",
        "--bootstrap",
        b1,
    ]);
    assert_eq!(replica_holders("after-stop", b1), vec![1, 2]);
    let (lines, expected) = keyed_lines("stop", 600);
    produce_ok("after-stop", b1, &lines);
    assert_eq!(consume("after-stop", &addrs[1], 600), expected);

    // Restarted after a clean stop, it registers again and is placed on.
    brokers[2] = Server::start_broker(3, &addrs[2], &meta, &dir(3));
    assert_eq!(broker_states(&meta), vec![(1, true), (2, true), (3, true)]);
    // One copy each: decommissioning broker 3 then moves its partitions to the two others.
    tool_ok(&[
        "topic",
        "create",
        "after-restart",
        "--partitions",
        "6",
        "--replicas",
        "1",
        "--bootstrap",
        b1,
    ]);
    assert!(replica_holders("after-restart", b1).contains(&3));

    // Decommission is refused while broker 3 runs...
    let refusal = tool_fails(&["broker", "decommission", "3", "--bootstrap", b1]);
    assert!(refusal.contains("broker 3 is live"), "{refusal}");
    // ...and, once it is stopped, while it holds partitions, unless they are moved.
    let stopped = brokers[2].terminate();
    assert!(stopped.success(), "broker 3 stopped with {stopped:?}");
    let refusal = tool_fails(&["broker", "decommission", "3", "--bootstrap", b1]);
    assert!(
        refusal.contains("after-restart/") && refusal.contains("--move-partitions"),
        "{refusal}"
    );
    let done = tool_ok(&[
        "broker",
        "decommission",
        "3",
        "--move-partitions",
        "--bootstrap",
        b1,
    ]);
    assert!(done.contains("decommissioned broker 3"), "{done}");
    assert_eq!(broker_states(&meta), vec![(1, true), (2, true)]);
    assert!(!replica_holders("after-restart", b1).contains(&3));
    let (lines, expected) = keyed_lines("moved", 60);
    produce_ok("after-restart", b1, &lines);
    assert_eq!(consume("after-restart", &addrs[1], 60), expected);
    // Asking again finds it done.
    tool_ok(&["broker", "decommission", "3", "--bootstrap", b1]);

    // The id never comes back, not even with its own data directory.
    let dir3 = dir(3);
    let refusal = tool_fails(&[
        "broker",
        "--id",
        "3",
        "--listen",
        &addrs[2],
        "--meta",
        &meta,
        "--data",
        dir3.to_str().unwrap(),
    ]);
    assert!(refusal.contains("broker 3 was decommissioned"), "{refusal}");
    tool_ok(&[
        "topic",
        "create",
        "after-decommission",
        "--partitions",
        "6",
        "--bootstrap",
        b1,
    ]);
    assert_eq!(replica_holders("after-decommission", b1), vec![1, 2]);
}
