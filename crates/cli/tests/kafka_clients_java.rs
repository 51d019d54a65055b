//! The Java client (org.apache.kafka:kafka-clients from Maven Central; tests/kafka-java,
//! built by `scripts/install-kafka-tools.sh`) against tinymq's Kafka listener: an idempotent
//! acks=all producer, a group member that reads each acknowledged record exactly once and
//! commits, a plain (group-less) consumer, and the records as `tinymq consume` sees them.

mod common;
mod kafka_clients;

use common::kafka::KafkaServer;
use kafka_clients::{java, json_lines, native_records, run_ok};
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
