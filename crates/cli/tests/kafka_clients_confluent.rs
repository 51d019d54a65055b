//! confluent-kafka (PyPI; librdkafka inside; `scripts/install-kafka-tools.sh`) against tinymq's
//! Kafka listener, through tests/kafka-python/confluent_clients.py: an idempotent producer with
//! lz4, zstd, snappy and gzip batches read back in order (and by `tinymq consume`), a consumer
//! group of three members rebalancing on join and leave (range and cooperative-sticky), commit
//! and resume, the AdminClient creating, describing and deleting topics and groups, and a
//! consume-transform-produce loop in transactions (read_committed checks the output).

mod common;
mod kafka_clients;

use common::kafka::KafkaServer;
use kafka_clients::{json_lines, native_records, python_script, run};
use serde_json::Value;

/// Runs `confluent_clients.py MODE KAFKA ARGS`; every JSON line it printed, the summary last.
fn confluent(server: &KafkaServer, mode: &str, args: &[&str]) -> Vec<Value> {
    let mut command = python_script("confluent_clients.py", "confluent_kafka");
    command.args([mode, &server.kafka]).args(args);
    let ran = run(command, b"");
    assert!(
        ran.status.success(),
        "confluent_clients.py {mode} {args:?} failed ({}); {}",
        ran.status,
        ran.printed()
    );
    let lines = json_lines(&ran.stdout);
    assert!(!lines.is_empty(), "no summary; {}", ran.printed());
    lines
}

fn idempotent_producer_round_trip(codec: &str) {
    let server = KafkaServer::start();
    let topic = format!("idempotent-{codec}");
    server.create_topic(&topic, 3);
    let lines = confluent(&server, "idempotent", &[&topic, codec, "300"]);
    let summary = lines.last().expect("summary");
    assert_eq!(summary["produced"], 300, "{summary}");
    assert_eq!(summary["consumed"], 300, "{summary}");
    // Stored as the producer sent them, compressed: 300 values of over 200 bytes each take
    // far less than 60,000 bytes on disk.
    let stored = server.stored_log_bytes(&topic);
    assert!(
        0 < stored && stored < 30_000,
        "{stored} bytes stored for {topic}"
    );

    // The native consumer decodes the same compressed batches: per partition, offsets from 0
    // without a gap, in the order the producer sent them (the value carries the send index).
    let native = native_records(&server, &topic);
    assert_eq!(native.len(), 300);
    for partition in 0..3 {
        let held: Vec<&Value> = native
            .iter()
            .filter(|r| r["partition"] == partition)
            .collect();
        assert_eq!(summary["partitions"][partition.to_string()], held.len());
        let mut sent_index = None;
        for (offset, record) in held.iter().enumerate() {
            assert_eq!(record["offset"], offset, "{record}");
            let value = record["value"].as_str().expect("value");
            let index: u32 = value
                .strip_prefix(&format!("{codec}-"))
                .and_then(|rest| rest.get(..6))
                .and_then(|digits| digits.parse().ok())
                .unwrap_or_else(|| panic!("unexpected value {value:?}"));
            assert!(sent_index < Some(index), "reordered at {record}");
            sent_index = Some(index);
        }
    }
}

#[test]
fn idempotent_producer_with_lz4_batches() {
    idempotent_producer_round_trip("lz4");
}

#[test]
fn idempotent_producer_with_zstd_batches() {
    idempotent_producer_round_trip("zstd");
}

#[test]
fn idempotent_producer_with_snappy_batches() {
    idempotent_producer_round_trip("snappy");
}

#[test]
fn idempotent_producer_with_gzip_batches() {
    idempotent_producer_round_trip("gzip");
}

fn group_of_three_rebalances(assignor: &str) {
    let server = KafkaServer::start();
    server.create_topic("shared", 6);
    let lines = confluent(&server, "group-rebalance", &["shared", "sharers", assignor]);
    let summary = lines.last().expect("summary");
    // The script checked after each change that the 6 partitions were spread over the
    // members, none twice, and that records produced then were consumed.
    assert_eq!(summary["phases"], 4, "{summary}");
    assert_eq!(
        summary["members"],
        serde_json::json!([1, 2, 3, 2]),
        "{summary}"
    );
    assert_eq!(summary["records"], 4 * 4 * 6, "{summary}");
}

#[test]
fn group_of_three_rebalances_on_join_and_leave_with_range() {
    group_of_three_rebalances("range");
}

#[test]
fn group_of_three_rebalances_on_join_and_leave_with_cooperative_sticky() {
    group_of_three_rebalances("cooperative-sticky");
}

#[test]
fn group_commits_and_the_next_member_resumes_after_the_commit() {
    let server = KafkaServer::start();
    server.create_topic("ledger", 1);
    let lines = confluent(&server, "commit-resume", &["ledger", "bookkeepers"]);
    let summary = lines.last().expect("summary");
    assert_eq!(summary["committed"], 10, "{summary}");
    assert_eq!(summary["resumed_at"], 10, "{summary}");
    assert_eq!(
        summary["deleted"],
        serde_json::json!(["bookkeepers"]),
        "{summary}"
    );

    // The committed offsets are the group's one set, visible natively: none left after the
    // AdminClient deleted the group.
    let listed = kafka_clients::run_ok(server.tool(&["group", "list"]), b"");
    assert!(!listed.contains("bookkeepers"), "{listed}");
}

#[test]
fn admin_client_creates_describes_and_deletes_topics() {
    let server = KafkaServer::start();
    let lines = confluent(&server, "admin", &["admin-made"]);
    let summary = lines.last().expect("summary");
    assert_eq!(summary["partitions"], 5, "{summary}");
    assert!(
        summary["configs"]
            .as_object()
            .is_some_and(|c| !c.is_empty()),
        "{summary}"
    );
    assert_eq!(
        summary["cluster_nodes"],
        serde_json::json!([server.kafka]),
        "{summary}"
    );
    let topics = kafka_clients::run_ok(server.tool(&["topic", "list"]), b"");
    assert!(!topics.contains("admin-made"), "{topics}");
}

/// KIP-98/447 with confluent-kafka (librdkafka): consume-transform-produce in transactions
/// with the consumer's group metadata, one in three aborted after its records were written;
/// read_committed sees every copy exactly once and no aborted record.
#[test]
fn confluent_consume_transform_produce_in_transactions() {
    let server = KafkaServer::start();
    server.create_topic("ctp-in", 2);
    server.create_topic("ctp-out", 2);
    let lines = confluent(
        &server,
        "txn-ctp",
        &["ctp-in", "ctp-out", "ctp-group", "tx-confluent", "200"],
    );
    let summary = lines.last().expect("summary");
    assert_eq!(summary["done"], "txn-ctp", "{lines:?}");
    assert_eq!(summary["read_committed"], 200, "{summary}");
    assert!(
        summary["aborted_seen_uncommitted"].as_u64().unwrap_or(0) > 0,
        "{lines:?}"
    );
}
