//! kafka-python (PyPI, pure Python; `scripts/install-kafka-tools.sh`) against tinymq's Kafka
//! listener, through tests/kafka-python/kafka_python_clients.py: produce with keys and headers,
//! a group member reads every acknowledged record once and commits, and the next member of the
//! group resumes after the commit.

mod common;
mod kafka_clients;

use common::kafka::KafkaServer;
use kafka_clients::{json_lines, native_records, python_script, run};

#[test]
fn kafka_python_produces_consumes_as_a_group_and_resumes() {
    let server = KafkaServer::start();
    server.create_topic("pylog", 3);
    let mut command = python_script("kafka_python_clients.py", "kafka");
    command.args(["roundtrip", &server.kafka, "pylog", "pyreaders", "50"]);
    let ran = run(command, b"");
    assert!(
        ran.status.success(),
        "kafka-python round trip failed; {}",
        ran.printed()
    );
    let lines = json_lines(&ran.stdout);
    let summary = lines.last().expect("summary");
    assert_eq!(summary["produced"], 50, "{summary}");
    assert_eq!(summary["consumed"], 50, "{summary}");
    assert_eq!(summary["resumed"], 2, "{summary}");
    // Keys k0..k49 hash over more than one partition.
    assert!(
        summary["partitions"]
            .as_array()
            .is_some_and(|p| p.len() > 1),
        "{summary}"
    );
    assert_eq!(native_records(&server, "pylog").len(), 52);
}
