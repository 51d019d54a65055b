//! Apache Kafka's own command-line tools (the released `kafka-tools` and `kafka_2.13` jars
//! from Maven Central, installed by `scripts/install-kafka-tools.sh` into
//! `.tools/apache-kafka/libs`), unchanged, against a real `tinymq server --kafka-listen`: a
//! test per tool, each checking what the tool printed and, where it changed something, what
//! tinymq's own CLI sees.

mod common;
mod kafka_clients;

use std::collections::BTreeMap;
use std::process::Command;

use common::kafka::{KafkaServer, Launch};
use kafka_clients::{
    kafka_tool_at, keyed_console_producer, keyed_lines, native_records, run, run_ok, ACLS, CONFIGS,
    CONSUMER, DELETE_RECORDS, GET_OFFSETS, GROUPS, TOPICS,
};

/// Apache Kafka's tool `class` bootstrapped at `server`'s Kafka listener.
fn kafka_tool(server: &KafkaServer, class: &str, args: &[&str]) -> Command {
    kafka_tool_at(&server.kafka, class, args)
}

fn tool_ok(server: &KafkaServer, class: &str, args: &[&str]) -> String {
    run_ok(kafka_tool(server, class, args), b"")
}

/// `key:value` lines `k{i}:v{i}` for `range`, produced with the console producer.
fn produce_lines(server: &KafkaServer, topic: &str, range: std::ops::Range<u32>) {
    run_ok(
        keyed_console_producer(&server.kafka, topic),
        &keyed_lines(range),
    );
}

/// The records of `topic`, read natively: (key, value).
fn native_values(server: &KafkaServer, topic: &str) -> Vec<(String, String)> {
    native_records(server, topic)
        .iter()
        .map(|record| {
            let field = |name: &str| record[name].as_str().unwrap_or_default().to_string();
            (field("key"), field("value"))
        })
        .collect()
}

/// kafka-topics: create with configs, describe, list, grow, delete.
#[test]
fn kafka_topics_creates_describes_grows_and_deletes() {
    let server = KafkaServer::start();
    let created = tool_ok(
        &server,
        TOPICS,
        &[
            "--create",
            "--topic",
            "orders",
            "--partitions",
            "3",
            "--config",
            "retention.ms=600000",
            "--config",
            "max.message.bytes=65536",
        ],
    );
    assert!(created.contains("Created topic orders"), "{created}");
    let described = tool_ok(&server, TOPICS, &["--describe", "--topic", "orders"]);
    assert!(described.contains("PartitionCount: 3"), "{described}");
    assert!(described.contains("retention.ms=600000"), "{described}");
    assert!(described.contains("max.message.bytes=65536"), "{described}");
    assert!(
        !described.contains("min.insync.replicas"),
        "a setting at its default is not an override: {described}"
    );
    tool_ok(
        &server,
        TOPICS,
        &["--alter", "--topic", "orders", "--partitions", "5"],
    );
    let described = tool_ok(&server, TOPICS, &["--describe", "--topic", "orders"]);
    assert!(described.contains("PartitionCount: 5"), "{described}");
    let native = server.run_tool(&["topic", "describe", "orders"], b"");
    assert!(native.contains("retention_ms"), "{native}");
    assert!(native.contains("600000"), "{native}");

    let refused = run(
        kafka_tool(
            &server,
            TOPICS,
            &["--alter", "--topic", "orders", "--partitions", "2"],
        ),
        b"",
    );
    assert!(!refused.status.success(), "{}", refused.printed());
    assert!(
        refused.printed().contains("InvalidPartitionsException"),
        "{}",
        refused.printed()
    );

    let listed = tool_ok(&server, TOPICS, &["--list"]);
    assert!(listed.lines().any(|l| l == "orders"), "{listed}");
    tool_ok(&server, TOPICS, &["--delete", "--topic", "orders"]);
    let listed = tool_ok(&server, TOPICS, &["--list"]);
    assert!(!listed.lines().any(|l| l == "orders"), "{listed}");
}

/// The dynamic configs kafka-configs prints: name → value.
fn described_configs(server: &KafkaServer, topic: &str) -> BTreeMap<String, String> {
    let out = tool_ok(
        server,
        CONFIGS,
        &[
            "--entity-type",
            "topics",
            "--entity-name",
            topic,
            "--describe",
        ],
    );
    out.lines()
        .filter_map(|l| l.trim().split(' ').next()?.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// kafka-configs: describe, alter (add and delete), and a value tinymq refuses.
#[test]
fn kafka_configs_describes_and_alters_topic_configs() {
    let server = KafkaServer::start();
    server.create_topic("settings", 2);
    assert_eq!(described_configs(&server, "settings"), BTreeMap::new());
    let alter = |args: &[&str]| {
        let mut all = vec![
            "--entity-type",
            "topics",
            "--entity-name",
            "settings",
            "--alter",
        ];
        all.extend_from_slice(args);
        run(kafka_tool(&server, CONFIGS, &all), b"")
    };
    let added = alter(&[
        "--add-config",
        "retention.ms=120000,max.message.bytes=65536",
    ]);
    assert!(added.status.success(), "{}", added.printed());
    let configs = described_configs(&server, "settings");
    assert_eq!(
        configs.get("retention.ms").map(String::as_str),
        Some("120000")
    );
    assert_eq!(
        configs.get("max.message.bytes").map(String::as_str),
        Some("65536")
    );
    let native = server.run_tool(&["topic", "describe", "settings"], b"");
    assert!(native.contains("120000"), "{native}");

    let deleted = alter(&["--delete-config", "max.message.bytes"]);
    assert!(deleted.status.success(), "{}", deleted.printed());
    let configs = described_configs(&server, "settings");
    assert!(!configs.contains_key("max.message.bytes"), "{configs:?}");
    assert_eq!(
        configs.get("retention.ms").map(String::as_str),
        Some("120000")
    );

    // Compaction's settings are real ones: set, described back, shown natively.
    let compacted = alter(&["--add-config", "cleanup.policy=compact"]);
    assert!(compacted.status.success(), "{}", compacted.printed());
    let configs = described_configs(&server, "settings");
    assert_eq!(
        configs.get("cleanup.policy").map(String::as_str),
        Some("compact")
    );
    let native = server.run_tool(&["topic", "describe", "settings"], b"");
    assert!(native.contains("cleanup_policy compact,"), "{native}");
    // Kafka's list form, in either order, and the cleaner's timing.
    let both = alter(&[
        "--add-config",
        "cleanup.policy=[delete,compact],min.cleanable.dirty.ratio=0.25,delete.retention.ms=0",
    ]);
    assert!(both.status.success(), "{}", both.printed());
    let configs = described_configs(&server, "settings");
    for (name, value) in [
        ("cleanup.policy", "compact,delete"),
        ("min.cleanable.dirty.ratio", "0.25"),
        ("delete.retention.ms", "0"),
    ] {
        assert_eq!(
            configs.get(name).map(String::as_str),
            Some(value),
            "{configs:?}"
        );
    }

    for (bad, named) in [
        ("cleanup.policy=shred", "cleanup.policy"),
        ("min.cleanable.dirty.ratio=2", "min.cleanable.dirty.ratio"),
        ("retention.ms=soon", "retention.ms"),
        ("flux.capacitor=1", "flux.capacitor"),
    ] {
        let refused = alter(&["--add-config", bad]);
        assert!(!refused.status.success(), "{bad}: {}", refused.printed());
        assert!(
            refused.printed().contains(named),
            "{bad}: {}",
            refused.printed()
        );
    }
    assert_eq!(
        described_configs(&server, "settings")
            .get("retention.ms")
            .map(String::as_str),
        Some("120000"),
        "a refused alter changes nothing"
    );
    assert_eq!(
        described_configs(&server, "settings")
            .get("cleanup.policy")
            .map(String::as_str),
        Some("compact,delete")
    );
}

/// kafka-console-producer and kafka-console-consumer: keyed lines in and out, and the same
/// records through tinymq's own consumer.
#[test]
fn kafka_console_producer_and_consumer_move_keyed_lines() {
    let server = KafkaServer::start();
    server.create_topic("lines", 3);
    produce_lines(&server, "lines", 0..200);
    let consumed = tool_ok(
        &server,
        CONSUMER,
        &[
            "--topic",
            "lines",
            "--from-beginning",
            "--max-messages",
            "200",
            "--timeout-ms",
            "60000",
            "--property",
            "print.key=true",
            "--property",
            "key.separator=:",
        ],
    );
    let mut got: Vec<&str> = consumed.lines().filter(|l| l.starts_with('k')).collect();
    got.sort();
    let mut want: Vec<String> = (0..200).map(|i| format!("k{i}:v{i}")).collect();
    want.sort();
    assert_eq!(got, want);
    let mut native = native_values(&server, "lines");
    native.sort();
    let mut want: Vec<(String, String)> = (0..200)
        .map(|i| (format!("k{i}"), format!("v{i}")))
        .collect();
    want.sort();
    assert_eq!(native, want);
}

/// One row of `kafka-consumer-groups --describe`: (topic, partition) → current offset.
fn group_offsets(server: &KafkaServer, group: &str) -> BTreeMap<(String, u32), String> {
    let out = tool_ok(server, GROUPS, &["--describe", "--group", group]);
    out.lines()
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.len() < 6 || cols[0] != group {
                return None;
            }
            let partition = cols[2].parse().ok()?;
            Some(((cols[1].to_string(), partition), cols[3].to_string()))
        })
        .collect()
}

/// kafka-consumer-groups: list, describe, reset offsets, delete offsets, delete the group.
#[test]
fn kafka_consumer_groups_describes_resets_and_deletes_offsets() {
    let server = KafkaServer::start();
    server.create_topic("events", 2);
    produce_lines(&server, "events", 0..100);
    let consumed = tool_ok(
        &server,
        CONSUMER,
        &[
            "--topic",
            "events",
            "--group",
            "readers",
            "--from-beginning",
            "--max-messages",
            "100",
            "--timeout-ms",
            "60000",
        ],
    );
    assert_eq!(consumed.lines().filter(|l| l.starts_with('v')).count(), 100);
    let listed = tool_ok(&server, GROUPS, &["--list"]);
    assert!(listed.lines().any(|l| l == "readers"), "{listed}");

    let offsets = group_offsets(&server, "readers");
    let ends: u64 = offsets
        .values()
        .map(|o| o.parse::<u64>().expect("offset"))
        .sum();
    assert_eq!(ends, 100, "the group committed every record: {offsets:?}");

    tool_ok(
        &server,
        GROUPS,
        &[
            "--reset-offsets",
            "--group",
            "readers",
            "--topic",
            "events:0",
            "--to-offset",
            "1",
            "--execute",
        ],
    );
    let offsets = group_offsets(&server, "readers");
    assert_eq!(
        offsets.get(&("events".into(), 0)).map(String::as_str),
        Some("1"),
        "{offsets:?}"
    );
    let native = server.run_tool(&["group", "describe", "readers"], b"");
    assert!(native.contains("events"), "{native}");

    let deleted = tool_ok(
        &server,
        GROUPS,
        &[
            "--delete-offsets",
            "--group",
            "readers",
            "--topic",
            "events:1",
        ],
    );
    assert!(deleted.contains("Successful"), "{deleted}");
    let offsets = group_offsets(&server, "readers");
    assert!(
        !offsets.contains_key(&("events".into(), 1)),
        "its offset is gone: {offsets:?}"
    );
    assert_eq!(
        offsets.get(&("events".into(), 0)).map(String::as_str),
        Some("1")
    );

    let deleted = tool_ok(&server, GROUPS, &["--delete", "--group", "readers"]);
    assert!(deleted.contains("successful"), "{deleted}");
    let listed = tool_ok(&server, GROUPS, &["--list"]);
    assert!(!listed.lines().any(|l| l == "readers"), "{listed}");
}

/// `topic:partition:offset` lines of kafka-get-offsets.
fn offsets_at(server: &KafkaServer, topic: &str, time: &str) -> BTreeMap<u32, i64> {
    let out = tool_ok(server, GET_OFFSETS, &["--topic", topic, "--time", time]);
    out.lines()
        .filter_map(|line| {
            let mut parts = line.rsplitn(3, ':');
            let offset = parts.next()?.parse().ok()?;
            let partition = parts.next()?.parse().ok()?;
            Some((partition, offset))
        })
        .collect()
}

/// kafka-get-offsets: latest, earliest, the record with the largest timestamp (-3), and a
/// search by time.
#[test]
fn kafka_get_offsets_finds_latest_earliest_max_timestamp_and_times() {
    let server = KafkaServer::start();
    server.create_topic("clock", 1);
    // Four records timestamped by the producer, the largest second: now - 4 s, now - 1 s,
    // now - 2 s, now - 3 s.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    let at = |seconds_ago: i64| now_ms - seconds_ago * 1000;
    let input: String = [("a", 4), ("b", 1), ("c", 2), ("d", 3)]
        .iter()
        .map(|(key, ago)| {
            format!(
                "{{\"key\":\"{key}\",\"value\":\"x\",\"timestamp\":{}}}\n",
                at(*ago)
            )
        })
        .collect();
    server.run_tool(
        &["produce", "clock", "--input-format", "json"],
        input.as_bytes(),
    );
    let stored: Vec<i64> = native_records(&server, "clock")
        .iter()
        .map(|r| r["timestamp"].as_i64().expect("timestamp"))
        .collect();
    assert_eq!(stored, vec![at(4), at(1), at(2), at(3)]);
    let partition_0 = |offset| BTreeMap::from([(0, offset)]);
    assert_eq!(offsets_at(&server, "clock", "-1"), partition_0(4));
    assert_eq!(offsets_at(&server, "clock", "-2"), partition_0(0));
    assert_eq!(
        offsets_at(&server, "clock", "-3"),
        partition_0(1),
        "the largest timestamp"
    );
    // By time: the first record at or after it, in offset order.
    assert_eq!(
        offsets_at(&server, "clock", &(at(3) + 500).to_string()),
        partition_0(1)
    );
    assert_eq!(
        offsets_at(&server, "clock", &at(10).to_string()),
        partition_0(0)
    );
    assert_eq!(
        offsets_at(&server, "clock", &(now_ms + 60_000).to_string()),
        BTreeMap::new(),
        "no record so late: no offset printed"
    );
}

/// kafka-acls: add, list, remove, with tinymq's own ACL list agreeing.
#[test]
fn kafka_acls_adds_lists_and_removes_acls() {
    let server = KafkaServer::start();
    let added = tool_ok(
        &server,
        ACLS,
        &[
            "--add",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Read",
            "--operation",
            "Describe",
            "--topic",
            "orders",
        ],
    );
    assert!(added.contains("operation=READ"), "{added}");
    tool_ok(
        &server,
        ACLS,
        &[
            "--add",
            "--deny-principal",
            "User:mallory",
            "--operation",
            "Write",
            "--topic",
            "pay",
            "--resource-pattern-type",
            "prefixed",
        ],
    );
    tool_ok(
        &server,
        ACLS,
        &[
            "--add",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Read",
            "--group",
            "readers",
        ],
    );
    let listed = tool_ok(&server, ACLS, &["--list"]);
    for expected in [
        "name=orders, patternType=LITERAL",
        "name=pay, patternType=PREFIXED",
        "principal=User:mallory, host=*, operation=WRITE, permissionType=DENY",
        "resourceType=GROUP, name=readers",
    ] {
        assert!(listed.contains(expected), "{expected} in {listed}");
    }
    let native = server.run_tool(&["acl", "list"], b"");
    assert!(native.contains("User:mallory"), "{native}");
    assert!(native.contains("pay"), "{native}");

    tool_ok(
        &server,
        ACLS,
        &[
            "--remove",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Read",
            "--topic",
            "orders",
            "--force",
        ],
    );
    let listed = tool_ok(&server, ACLS, &["--list", "--topic", "orders"]);
    assert!(listed.contains("operation=DESCRIBE"), "{listed}");
    assert!(!listed.contains("operation=READ"), "{listed}");

    let refused = run(
        kafka_tool(
            &server,
            ACLS,
            &[
                "--add",
                "--allow-principal",
                "User:alice",
                "--allow-host",
                "10.0.0.1",
                "--operation",
                "Read",
                "--topic",
                "orders",
            ],
        ),
        b"",
    );
    assert!(
        refused.printed().contains("any host"),
        "{}",
        refused.printed()
    );
}

/// kafka-delete-records: the log start moves, records below it are gone for every reader, and
/// stay gone through a `kill -9` of the server.
#[test]
fn kafka_delete_records_moves_the_log_start_durably() {
    let data = tempfile::tempdir().expect("data directory");
    let mut server = Launch::server().data(data.path()).start();
    server.create_topic("trim", 2);
    produce_lines(&server, "trim", 0..50);
    let ends = offsets_at(&server, "trim", "-1");
    let json_path = server.data_dir().join("delete-records.json");
    let partitions: Vec<String> = ends
        .iter()
        .map(|(partition, end)| {
            format!(
                "{{\"topic\":\"trim\",\"partition\":{partition},\"offset\":{}}}",
                end / 2
            )
        })
        .collect();
    std::fs::write(
        &json_path,
        format!(
            "{{\"version\":1,\"partitions\":[{}]}}",
            partitions.join(",")
        ),
    )
    .expect("write the offsets file");
    let deleted = tool_ok(
        &server,
        DELETE_RECORDS,
        &[
            "--offset-json-file",
            json_path.to_str().expect("utf-8 path"),
        ],
    );
    for (partition, end) in &ends {
        let line = format!("partition: trim-{partition}\tlow_watermark: {}", end / 2);
        assert!(deleted.contains(&line), "{line} in {deleted}");
    }
    let starts = offsets_at(&server, "trim", "-2");
    let halves: BTreeMap<u32, i64> = ends.iter().map(|(p, end)| (*p, end / 2)).collect();
    assert_eq!(starts, halves);
    let left = native_values(&server, "trim");
    let kept: i64 = ends.values().map(|end| end - end / 2).sum();
    assert_eq!(
        left.len() as i64,
        kept,
        "what is below the log start is read by no one"
    );

    server.kill9();
    let server = Launch::server().data(data.path()).start();
    assert_eq!(
        offsets_at(&server, "trim", "-2"),
        halves,
        "the deletion was durable when answered"
    );
    assert_eq!(native_values(&server, "trim"), left);
}
