//! kcat (Debian's, librdkafka inside; `scripts/install-kafka-tools.sh`) against tinymq's Kafka
//! listener: `-L` metadata, produce with keys and headers (`-K`, `-H`) and consume them back
//! (`-C -o beginning -e`), the same records read by `tinymq consume`, and `-G` group consume
//! that resumes from the group's committed offsets; SASL SCRAM logins (both mechanisms, a
//! wrong password refused).

mod common;
mod kafka_clients;

use std::time::Duration;

use common::kafka::{KafkaServer, Launch};
use kafka_clients::{json_lines, kcat, native_records, run, run_ok};
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

const ADMIN_PASSWORD: &str = "admin-secret-1";

/// `kcat -b KAFKA` logging in with SASL SCRAM `mechanism` as admin with `password`, then ARGS.
fn kcat_scram(
    server: &KafkaServer,
    mechanism: &str,
    password: &str,
    args: &[&str],
) -> std::process::Command {
    let sasl = [
        "-X",
        "security.protocol=SASL_PLAINTEXT",
        "-X",
        &format!("sasl.mechanism={mechanism}"),
        "-X",
        "sasl.username=admin",
        "-X",
        &format!("sasl.password={password}"),
    ];
    let mut command = kcat_at(server, &sasl);
    command.args(args);
    command
}

/// Debian's kcat carries librdkafka 2.0.2, whose SCRAM client-final (before librdkafka 2.6.1)
/// repeats the client nonce ahead of the combined one: the Kafka port accepts that form.
#[test]
fn kcat_logs_in_with_scram() {
    let server = Launch::server()
        .args(&["--auth", "scram"])
        .admin_password(ADMIN_PASSWORD)
        .start();
    // The topic, once the first super user can log in.
    let created = common::retry(100, Duration::from_millis(100), || {
        let out = server
            .tool(&["topic", "create", "secured", "--partitions", "1"])
            .output()
            .expect("run tinymq");
        out.status.success().then_some(())
    });
    assert!(created.is_some(), "topic secured never created");

    for mechanism in ["SCRAM-SHA-256", "SCRAM-SHA-512"] {
        let listed = run_ok(
            kcat_scram(&server, mechanism, ADMIN_PASSWORD, &["-L", "-J"]),
            b"",
        );
        let metadata: Value = serde_json::from_str(&listed).expect("kcat -L -J prints JSON");
        let brokers = metadata["brokers"].as_array().expect("brokers");
        assert_eq!(brokers.len(), 1, "{mechanism}: {metadata}");
        assert_eq!(brokers[0]["name"], server.kafka.as_str(), "{metadata}");
        let topics = metadata["topics"].as_array().expect("topics");
        assert!(
            topics.iter().any(|t| t["topic"] == "secured"),
            "{mechanism}: {metadata}"
        );
    }

    let produce = ["-P", "-t", "secured", "-K", ":"];
    run_ok(
        kcat_scram(&server, "SCRAM-SHA-512", ADMIN_PASSWORD, &produce),
        b"k:logged in\n",
    );
    let consume = ["-C", "-t", "secured", "-o", "beginning", "-e", "-J"];
    let read = json_lines(&run_ok(
        kcat_scram(&server, "SCRAM-SHA-256", ADMIN_PASSWORD, &consume),
        b"",
    ));
    assert_eq!(read.len(), 1, "{read:?}");
    assert_eq!(
        (&read[0]["key"], &read[0]["payload"]),
        (&json!("k"), &json!("logged in")),
        "{read:?}"
    );

    // Last, as its failures count against this address's login budget.
    let refused = run(
        kcat_scram(&server, "SCRAM-SHA-256", "not-the-password", &["-L"]),
        b"",
    );
    assert!(!refused.status.success(), "{}", refused.printed());
    assert!(
        refused.stderr.contains("SASL authentication error"),
        "{}",
        refused.printed()
    );
}
