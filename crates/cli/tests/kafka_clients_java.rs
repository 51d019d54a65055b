//! The Java client (org.apache.kafka:kafka-clients from Maven Central; tests/kafka-java,
//! built by `scripts/install-kafka-tools.sh`) against tinymq's Kafka listener: an idempotent
//! acks=all producer, a group member that reads each acknowledged record exactly once and
//! commits, a plain (group-less) consumer, the records as `tinymq consume` sees them, a
//! consume-transform-produce loop in transactions, and a Kafka Streams `exactly_once_v2`
//! application (kafka-streams from Maven Central) through a `kill -9` of its instance.

mod common;
mod kafka_clients;

use common::kafka::KafkaServer;
use kafka_clients::{committed_values, java, json_lines, native_records, run_ok};
use serde_json::Value;

#[test]
fn java_client_round_trip_through_a_group() {
    let server = KafkaServer::start();
    server.create_topic("jlog", 3);
    let lines = json_lines(&run_ok(
        java(&["roundtrip", &server.kafka, "jlog", "jreaders", "200"]),
        b"",
    ));
    let summary = lines.last().expect("summary");
    assert_eq!(summary["done"], "roundtrip", "{summary}");
    assert_eq!(summary["produced"], 200, "{summary}");
    assert_eq!(summary["consumed"], 200, "{summary}");
    let committed = lines.iter().find(|l| l.get("committed").is_some());
    assert!(committed.is_some(), "no commit reported: {lines:?}");

    // The same records, natively: keys, values and the header, at the offsets acknowledged.
    let native = native_records(&server, "jlog");
    assert_eq!(native.len(), 200);
    for ack in lines
        .iter()
        .filter(|l| l.get("produced").is_some_and(Value::is_string))
    {
        let stored = native
            .iter()
            .find(|r| r["partition"] == ack["partition"] && r["offset"] == ack["offset"])
            .unwrap_or_else(|| panic!("{ack} not stored"));
        let key = ack["produced"].as_str().expect("key");
        assert_eq!(stored["key"], key, "{stored}");
        assert_eq!(stored["value"], format!("v{}", &key[1..]), "{stored}");
        assert_eq!(stored["headers"][0]["key"], "n", "{stored}");
        assert_eq!(stored["headers"][0]["value"], &key[1..], "{stored}");
    }
}

#[test]
fn java_consumer_reads_what_tinymq_produce_wrote() {
    let server = KafkaServer::start();
    server.create_topic("native-made", 2);
    let input: String = (0..20).map(|i| format!("key{i}=value{i}\n")).collect();
    let mut produce = server.tool(&["produce", "native-made", "--key-separator", "="]);
    produce.args(["--header", "via=tinymq"]);
    run_ok(produce, input.as_bytes());

    let lines = json_lines(&run_ok(
        java(&["consume", &server.kafka, "native-made", "20"]),
        b"",
    ));
    let records: Vec<&Value> = lines.iter().filter(|l| l.get("offset").is_some()).collect();
    assert_eq!(records.len(), 20, "{lines:?}");
    for record in records {
        let key = record["key"].as_str().expect("key");
        assert_eq!(record["value"], format!("value{}", &key[3..]), "{record}");
        assert_eq!(
            record["headers"],
            serde_json::json!([["via", "tinymq"]]),
            "{record}"
        );
    }
}

/// KIP-98/447 with the Java client, unchanged: a consume-transform-produce loop in
/// transactions (offsets sent with the consumer's group metadata), one in three aborted; a
/// read_committed reader sees every copied record exactly once and no aborted one, a
/// read_uncommitted one sees the aborted records, and the group's offsets are at the ends.
#[test]
fn java_consume_transform_produce_in_transactions() {
    let server = KafkaServer::start();
    server.create_topic("txin", 3);
    server.create_topic("txout", 2);
    let lines = json_lines(&run_ok(
        java(&[
            "txn-ctp",
            &server.kafka,
            "txin",
            "txout",
            "txg",
            "tx-java",
            "300",
        ]),
        b"",
    ));
    let summary = lines.last().expect("summary");
    assert_eq!(summary["done"], "txn-ctp", "{lines:?}");
    assert_eq!(summary["read_committed"], 300, "{summary}");
    assert!(
        summary["aborted_seen_uncommitted"].as_u64().unwrap_or(0) > 0,
        "no aborted transaction was written: {lines:?}"
    );
    assert_eq!(summary["group_committed"], 300, "{summary}");
    let stats = lines.iter().find(|l| l.get("transactions").is_some());
    let aborted = stats.and_then(|s| s["aborted"].as_u64()).unwrap_or(0);
    assert!(aborted > 0, "{stats:?}");
}

/// Polls `committed_values` until `done` holds of it, at most `limit`.
fn wait_for_output(
    server: &KafkaServer,
    topic: &str,
    limit: std::time::Duration,
    done: impl Fn(&std::collections::BTreeMap<String, u32>) -> bool,
) -> std::collections::BTreeMap<String, u32> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let values = committed_values(server, topic);
        if done(&values) || std::time::Instant::now() > deadline {
            return values;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// A Kafka Streams application with `processing.guarantee=exactly_once_v2` (kafka-streams
/// 4.1.2 from Maven Central, unchanged) copies a topic through a `kill -9` of its instance and
/// a restart: read_committed output holds every input exactly once.
#[test]
fn kafka_streams_exactly_once_v2_survives_a_kill_9_of_its_instance() {
    let server = KafkaServer::start();
    server.create_topic("streams-in", 2);
    server.create_topic("streams-out", 2);
    let state = tempfile::tempdir().unwrap();
    let state_dir = state.path().to_str().unwrap().to_string();
    let produce = |from: usize, to: usize| {
        let input: String = (from..to).map(|i| format!("k{i}:{i}\n")).collect();
        let args = ["produce", "streams-in", "--key-separator", ":"];
        server.run_tool(&args, input.as_bytes());
    };
    let start = || {
        let args = [
            "streams-eos",
            &server.kafka,
            "streams-in",
            "streams-out",
            "eos-app",
            &state_dir,
        ];
        java(&args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the Streams application")
    };
    let limit = std::time::Duration::from_secs(120);
    produce(0, 300);
    let mut first = start();
    let some = wait_for_output(&server, "streams-out", limit, |v| !v.is_empty());
    assert!(!some.is_empty(), "the first instance copied nothing");
    // kill -9, mid-stream: its open transaction is aborted by its timeout or fenced.
    first.kill().unwrap();
    first.wait().unwrap();
    produce(300, 600);
    let mut second = start();
    let out = wait_for_output(&server, "streams-out", limit, |v| v.len() >= 600);
    second.kill().unwrap();
    second.wait().unwrap();
    let expected: std::collections::BTreeMap<String, u32> =
        (0..600).map(|i| (format!("s{i}"), 1)).collect();
    assert_eq!(out.len(), 600, "values seen: {}", out.len());
    let repeated: Vec<_> = out.iter().filter(|(_, n)| **n != 1).collect();
    assert!(repeated.is_empty(), "repeated: {repeated:?}");
    assert_eq!(out, expected);
}
