//! The Java client (org.apache.kafka:kafka-clients from Maven Central; tests/kafka-java,
//! built by `scripts/install-kafka-tools.sh`) against tinymq's Kafka listener: an idempotent
//! acks=all producer, a group member that reads each acknowledged record exactly once and
//! commits, a plain (group-less) consumer, the records as `tinymq consume` sees them, a
//! consume-transform-produce loop in transactions, and Kafka Streams `exactly_once_v2`
//! applications (kafka-streams from Maven Central) through a `kill -9` of their instance: a
//! copy, and a word count (a repartition topic, a state store restored from its compacted
//! changelog) whose counts stay exact.

mod common;
mod kafka_clients;

use std::collections::BTreeMap;

use common::kafka::{topic_configs, KafkaServer};
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

/// Line `i` of the word-count text: one to nine words of a small vocabulary, in mixed case,
/// between spaces and punctuation (the application splits on non-word characters and counts
/// words lower-cased).
fn text_line(i: usize) -> String {
    const WORDS: [&str; 24] = [
        "the",
        "Quick",
        "brown",
        "fox",
        "jumps",
        "over",
        "lazy",
        "dog",
        "Kafka",
        "kafka",
        "streams",
        "tinymq",
        "queue",
        "log",
        "offset",
        "partition",
        "commit",
        "abort",
        "fence",
        "epoch",
        "leader",
        "replica",
        "changelog",
        "store",
    ];
    const BETWEEN: [&str; 5] = [" ", ", ", ". ", "! ", " -- "];
    (0..1 + i % 9)
        .map(|j| WORDS[(i * 7 + j * 13 + i * j) % WORDS.len()])
        .enumerate()
        .map(|(j, word)| format!("{word}{}", BETWEEN[(i + j) % BETWEEN.len()]))
        .collect()
}

/// The true count of every word of lines `0..lines`, split and lower-cased as the application
/// does (Java's `\W+`: anything but ASCII letters, digits and `_`).
fn true_counts(lines: usize) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for i in 0..lines {
        let line = text_line(i).to_lowercase();
        let words = line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
        for word in words.filter(|w| !w.is_empty()) {
            *counts.entry(word.to_string()).or_default() += 1;
        }
    }
    counts
}

/// The latest value of every key of `topic` as a read_committed reader sees it (a key's
/// records are all in one partition, which `tinymq consume` prints in offset order).
fn latest_counts(server: &KafkaServer, topic: &str) -> BTreeMap<String, u64> {
    let args = ["consume", topic, "--from-beginning", "--timeout-ms", "0"];
    let mut command = server.tool(&args);
    command.args(["--isolation", "read-committed", "--format", "json"]);
    let mut latest = BTreeMap::new();
    for record in json_lines(&run_ok(command, b"")) {
        let key = record["key"].as_str().expect("a word as key").to_string();
        let value = record["value"].as_str().expect("a count as value");
        let count = value.parse().unwrap_or_else(|e| panic!("{value:?}: {e}"));
        latest.insert(key, count);
    }
    latest
}

/// A Kafka Streams word count (kafka-streams 4.1.2, exactly_once_v2): words regrouped through a
/// repartition topic and counted in a state store whose changelog is a compacted tinymq topic.
/// The instance is killed with SIGKILL mid-stream and its local state deleted, so the restarted
/// instance must restore its store from the changelog (and the killed one's open transaction
/// must be aborted, by its timeout: the new instance has a new transactional id); after more
/// text, every word's latest count in the output topic is its true count, never more.
#[test]
fn kafka_streams_word_count_restores_its_store_from_the_changelog_after_a_kill_9() {
    const APP: &str = "wc-app";
    const FIRST: usize = 3_000;
    const ALL: usize = 6_000;
    let server = KafkaServer::start();
    server.create_topic("wc-in", 2);
    server.create_topic("wc-out", 2);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let produce = |lines: std::ops::Range<usize>| {
        let input: String = lines.map(|i| text_line(i) + "\n").collect();
        server.run_tool(&["produce", "wc-in"], input.as_bytes());
    };
    let start = |name: &str| {
        let out = std::fs::File::create(dir.path().join(name)).unwrap();
        let args = [
            "streams-wordcount",
            &server.kafka,
            "wc-in",
            "wc-out",
            APP,
            state.to_str().unwrap(),
        ];
        java(&args)
            .stdout(std::process::Stdio::from(out))
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the Streams application")
    };
    // A wait for the application: generous for a loaded machine, only there to end a stuck
    // test; it includes a killed instance's session (6 s) and transaction (10 s) timeouts.
    let limit = std::time::Duration::from_secs(300);
    let wait_counts = |done: &dyn Fn(&BTreeMap<String, u64>) -> bool| {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let counts = latest_counts(&server, "wc-out");
            if done(&counts) || std::time::Instant::now() > deadline {
                return counts;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    };

    produce(0..FIRST);
    let mut first = start("first.out");
    // Killed once it has counted a good part of the first text (so that its store has much
    // to restore), most likely in the middle of a transaction.
    let half: u64 = true_counts(FIRST).values().sum::<u64>() / 2;
    let some = wait_counts(&|c| c.values().sum::<u64>() >= half);
    assert!(
        some.values().sum::<u64>() >= half,
        "the first instance counted too little: {some:?}"
    );
    first.kill().unwrap();
    first.wait().unwrap();
    let partial: u64 = some.values().sum();
    std::fs::remove_dir_all(&state).unwrap();
    produce(FIRST..ALL);
    let mut second = start("second.out");
    let expected = true_counts(ALL);
    // Done when right, or as soon as a count is past its true value (it can only grow).
    let counts = wait_counts(&|c| {
        *c == expected || c.iter().any(|(w, n)| expected.get(w).is_none_or(|e| n > e))
    });
    second.kill().unwrap();
    second.wait().unwrap();
    let printed = std::fs::read_to_string(dir.path().join("second.out")).unwrap();
    let wrong: Vec<_> = expected
        .iter()
        .filter(|(w, n)| counts.get(*w) != Some(n))
        .map(|(w, n)| format!("{w}: {:?}, truly {n}", counts.get(w)))
        .collect();
    assert_eq!(
        counts, expected,
        "latest counts (the first instance's output summed to {partial} when killed); \
         wrong: {wrong:?}; the second instance printed:\n{printed}"
    );

    // The second instance started without local state: its store came from the changelog.
    let restored: u64 = json_lines(&printed)
        .iter()
        .filter(|l| l["restored"] == "counts")
        .filter_map(|l| l["records"].as_u64())
        .sum();
    assert!(
        restored > 0,
        "nothing restored from the changelog:\n{printed}"
    );
    println!(
        "killed with output counts summing to {partial} (of {} words in all); the restart \
         restored {restored} changelog records",
        expected.values().sum::<u64>()
    );

    // The topics Streams made for itself, as tinymq describes them to Kafka clients.
    let mut k = server.connect();
    let (error, changelog) = topic_configs(&mut k, 4, &format!("{APP}-counts-changelog"));
    assert_eq!(error, 0, "{changelog:?}");
    let policy = changelog.iter().find(|(name, _)| name == "cleanup.policy");
    assert_eq!(
        policy.map(|(_, v)| v.as_str()),
        Some("compact"),
        "{changelog:?}"
    );
    let (error, repartition) = topic_configs(&mut k, 4, &format!("{APP}-words-repartition"));
    assert_eq!(error, 0, "the repartition topic: {repartition:?}");
    // Streams makes it a plain (deleting) topic: it purges what it has read with DeleteRecords.
    let policy = repartition
        .iter()
        .find(|(name, _)| name == "cleanup.policy");
    assert_eq!(
        policy.map(|(_, v)| v.as_str()),
        Some("delete"),
        "{repartition:?}"
    );
}
