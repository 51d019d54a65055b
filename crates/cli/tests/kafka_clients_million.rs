//! Issue 17's volume check across two client families: 1,000,000 records from an idempotent
//! confluent-kafka producer (lz4 batches, 1000 keys over 3 partitions) read by the Java
//! client as a group member, which checks that none is lost or repeated and that each
//! partition's offsets have no gap and its values rise in the order sent. Clients from
//! `scripts/install-kafka-tools.sh`.

mod common;
mod kafka_clients;

use common::kafka::KafkaServer;
use kafka_clients::{java, json_lines, python_script, run_ok};

const RECORDS: u32 = 1_000_000;

#[test]
fn a_million_records_from_confluent_kafka_reach_the_java_client_once_and_in_order() {
    let server = KafkaServer::start();
    server.create_topic("million", 3);
    let count = RECORDS.to_string();
    let mut produce = python_script("confluent_clients.py", "confluent_kafka");
    produce.args(["produce-many", &server.kafka, "million", &count]);
    let produced = json_lines(&run_ok(produce, b""));
    assert_eq!(produced.last().expect("summary")["produced"], RECORDS);

    let checked = json_lines(&run_ok(
        java(&[
            "check-sequence",
            &server.kafka,
            "million",
            "millions",
            &count,
        ]),
        b"",
    ));
    let summary = checked.last().expect("summary");
    assert_eq!(summary["count"], RECORDS, "{summary}");
    assert_eq!(summary["distinct"], RECORDS, "{summary}");
    let per_partition = summary["partitions"].as_object().expect("partitions");
    assert_eq!(per_partition.len(), 3, "{summary}");
}
