//! kcat (Debian's, librdkafka inside; `scripts/install-kafka-tools.sh`) against tinymq's Kafka
//! listener: `-L` metadata, produce with keys and headers (`-K`, `-H`) and consume them back
//! (`-C -o beginning -e`), the same records read by `tinymq consume`, and `-G` group consume
//! that resumes from the group's committed offsets.

mod common;
mod kafka_clients;

use common::kafka::KafkaServer;
use kafka_clients::{json_lines, kcat, native_records, run_ok};
use serde_json::{json, Value};

/// `kcat -b KAFKA ARGS`.
fn kcat_at(server: &KafkaServer, args: &[&str]) -> std::process::Command {
    let mut command = kcat();
    command.args(["-b", &server.kafka]).args(args);
    command
}

#[test]
fn kcat_lists_brokers_and_topics() {
    let server = KafkaServer::start();
    server.create_topic("orders", 3);
    let listed = run_ok(kcat_at(&server, &["-L", "-J"]), b"");
    let metadata: Value = serde_json::from_str(&listed).expect("kcat -L -J prints JSON");

    let brokers = metadata["brokers"].as_array().expect("brokers");
    assert_eq!(brokers.len(), 1, "{metadata}");
    assert_eq!(brokers[0]["name"], server.kafka.as_str(), "{metadata}");
    let orders = metadata["topics"]
        .as_array()
        .expect("topics")
        .iter()
        .find(|topic| topic["topic"] == "orders")
        .unwrap_or_else(|| panic!("no topic orders in {metadata}"));
    let partitions = orders["partitions"].as_array().expect("partitions");
    assert_eq!(partitions.len(), 3, "{orders}");
    for partition in partitions {
        assert_eq!(partition["leader"], brokers[0]["id"], "{partition}");
    }
}

#[test]
fn kcat_produces_keys_and_headers_that_kcat_and_tinymq_read_back() {
    let server = KafkaServer::start();
    server.create_topic("events", 1);
    let produce = [
        "-P",
        "-t",
        "events",
        "-K",
        ":",
        "-H",
        "trace=abc",
        "-H",
        "origin=kcat",
    ];
    run_ok(
        kcat_at(&server, &produce),
        b"k1:hello\nk2:world\nk3:again\n",
    );

    let consume = ["-C", "-t", "events", "-o", "beginning", "-e", "-J"];
    let read = json_lines(&run_ok(kcat_at(&server, &consume), b""));
    let expected = [("k1", "hello"), ("k2", "world"), ("k3", "again")];
    assert_eq!(read.len(), expected.len(), "{read:?}");
    for (offset, (record, (key, value))) in read.iter().zip(expected).enumerate() {
        assert_eq!(record["partition"], 0, "{record}");
        assert_eq!(record["offset"], offset, "{record}");
        assert_eq!(record["key"], key, "{record}");
        assert_eq!(record["payload"], value, "{record}");
        assert_eq!(
            record["headers"],
            json!(["trace", "abc", "origin", "kcat"]),
            "{record}"
        );
    }

    // The native consumer sees the same records: offsets, keys, values, headers, timestamps.
    let native = native_records(&server, "events");
    assert_eq!(native.len(), read.len(), "{native:?}");
    for (mine, theirs) in native.iter().zip(&read) {
        assert_eq!(mine["offset"], theirs["offset"], "{mine} vs {theirs}");
        assert_eq!(mine["key"], theirs["key"], "{mine} vs {theirs}");
        assert_eq!(mine["value"], theirs["payload"], "{mine} vs {theirs}");
        assert_eq!(mine["timestamp"], theirs["ts"], "{mine} vs {theirs}");
        assert_eq!(
            mine["headers"],
            json!([
                {"key": "trace", "value": "abc", "value_encoding": "utf8"},
                {"key": "origin", "value": "kcat", "value_encoding": "utf8"},
            ]),
            "{mine}"
        );
    }
}

#[test]
fn kcat_group_consumer_reads_everything_then_resumes_from_its_commits() {
    let server = KafkaServer::start();
    server.create_topic("jobs", 2);
    let lines: String = (0..10).map(|i| format!("job{i}:payload{i}\n")).collect();
    run_ok(
        kcat_at(&server, &["-P", "-t", "jobs", "-K", ":"]),
        lines.as_bytes(),
    );

    // `-G` is librdkafka's balanced consumer: FindCoordinator, JoinGroup, SyncGroup,
    // OffsetFetch, heartbeats, and at exit an OffsetCommit and LeaveGroup.
    let group = [
        "-G",
        "workers",
        "-X",
        "auto.offset.reset=earliest",
        "-e",
        "-J",
    ];
    let mut first = kcat_at(&server, &group);
    first.arg("jobs");
    let read = json_lines(&run_ok(first, b""));
    let mut keys: Vec<String> = read
        .iter()
        .map(|record| record["key"].as_str().expect("key").to_string())
        .collect();
    keys.sort();
    let mut expected: Vec<String> = (0..10).map(|i| format!("job{i}")).collect();
    expected.sort();
    assert_eq!(keys, expected, "{read:?}");

    // The group committed what it read: the next member gets only what came after.
    run_ok(
        kcat_at(&server, &["-P", "-t", "jobs", "-K", ":"]),
        b"late1:x\nlate2:y\n",
    );
    let mut second = kcat_at(&server, &group);
    second.arg("jobs");
    let read = json_lines(&run_ok(second, b""));
    let mut keys: Vec<&str> = read.iter().filter_map(|r| r["key"].as_str()).collect();
    keys.sort();
    assert_eq!(keys, ["late1", "late2"], "{read:?}");
}
