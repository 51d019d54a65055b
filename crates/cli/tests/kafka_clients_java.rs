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
