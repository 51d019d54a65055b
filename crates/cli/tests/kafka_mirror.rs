//! Migration from Kafka (issue 30, docs/migrate.md): Apache Kafka's MirrorMaker 2, unchanged
//! (connect-mirror 4.1.2 in `.tools/apache-kafka/libs`), copies a live Apache Kafka 4.1.2 —
//! one KRaft node on loopback started by this test from the same jars — into a real `tinymq
//! server --kafka-listen`, with the mm2.properties docs/migrate.md recommends
//! (IdentityReplicationPolicy, group offset sync). It proves:
//!
//! - all 100,000 keyed records arrive (key and value), per partition in Kafka's order: once
//!   duplicates are dropped (MirrorMaker 2 is at-least-once; they are counted and printed),
//!   each tinymq partition is exactly the Kafka partition, though records are produced on
//!   Kafka while MirrorMaker 2 runs, while it is down after a `kill -9` mid-copy, and it is
//!   restarted;
//! - the restart resumes from the progress MirrorMaker 2 committed before the kill (fewer
//!   duplicates than records copied by then), not from the beginning;
//! - the topic keeps its name, partition count and its non-default configs;
//! - the consumer group's offsets committed on Kafka arrive translated (the offset-syncs topic
//!   on Kafka, the checkpoints topic and the group's committed offsets on tinymq);
//! - cut-over: a consumer of the same group started on tinymq resumes from the translated
//!   offsets (no reset: `auto.offset.reset=none`) and reads every record the group had not
//!   consumed on Kafka; the records it reads again, from before Kafka's committed offsets, are
//!   counted and printed.

mod common;
mod kafka_clients;

use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kafka_protocol::error::ResponseError as K;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{ListOffsetsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use common::free_port;
use common::http::workspace_root;
use common::kafka::{Kafka, KafkaServer, Launch};
use kafka_clients::{
    apache_kafka_java, kafka_tool_at, keyed_console_producer, keyed_lines, native_records, run,
    run_ok, LogsOnFailure, CONFIGS, CONSUMER, GROUPS, TOPICS,
};

const TOPIC: &str = "orders";
const PARTITIONS: i32 = 4;
const GROUP: &str = "billing";
/// Produced before MirrorMaker 2 starts, of which the group consumes [`CONSUMED`].
const BEFORE: u32 = 80_000;
const CONSUMED: u32 = 60_000;
/// Produced while MirrorMaker 2 runs, and again while it is down after its kill -9.
const WHILE_RUNNING: u32 = 10_000;
const WHILE_DOWN: u32 = 10_000;
const TOTAL: u32 = BEFORE + WHILE_RUNNING + WHILE_DOWN;
/// The topic's non-default configs on Kafka, which must be carried.
const CONFIGS_SET: [(&str, &str); 2] = [
    ("retention.ms", "86400000"),
    ("max.message.bytes", "524288"),
];
/// Where MirrorMaker 2's Connect worker for kafka->tinymq keeps its source offsets (on the
/// target).
const CONNECT_OFFSETS: &str = "mm2-offsets.kafka.internal";
/// Bounds on waits for a condition polled; generous, for a loaded 2-core machine. Not
/// performance bounds.
const START_WAIT: Duration = Duration::from_secs(240);
const MIRROR_WAIT: Duration = Duration::from_secs(600);

/// A child process killed (kill -9) when dropped; its stdout and stderr go to LOG.out.
struct Process {
    name: &'static str,
    child: Child,
}

impl Process {
    fn spawn(name: &'static str, mut command: Command, log: &Path) -> Process {
        let out = File::create(log.with_extension("out")).expect("output file");
        let child = command
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("output file"))
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Process { name, child }
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Fails the test unless the process still runs.
    fn running(&mut self) {
        if let Some(status) = self.child.try_wait().expect("try_wait") {
            panic!("{} exited ({status})", self.name);
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Polls `condition` every 100 ms until it gives a value; past `limit`, fails saying
/// what it waited for.
fn wait_for<T>(what: &str, limit: Duration, mut condition: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = condition() {
            return value;
        }
        assert!(started.elapsed() < limit, "waited {limit:?} for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Apache Kafka, one KRaft node (broker and controller) on loopback, formatted fresh in `dir`
/// by scripts/install-apache-kafka.sh; returns it and its bootstrap address once it answers.
fn start_apache_kafka(dir: &Path) -> (Process, String) {
    let (port, controller) = (free_port(), free_port());
    let mut command = Command::new(workspace_root().join("scripts/install-apache-kafka.sh"));
    command
        .arg("run")
        .arg(dir.join("kafka"))
        .args([port.to_string(), controller.to_string()]);
    let mut kafka = Process::spawn("Apache Kafka", command, &dir.join("kafka-run.log"));
    let bootstrap = format!("127.0.0.1:{port}");
    wait_for("Apache Kafka to answer", START_WAIT, || {
        kafka.running();
        std::net::TcpStream::connect(&bootstrap).ok()?;
        run(kafka_tool_at(&bootstrap, TOPICS, &["--list"]), b"")
            .status
            .success()
            .then_some(())
    });
    (kafka, bootstrap)
}

/// MirrorMaker 2 in dedicated mode with `properties`, logging at INFO to `log`.
fn start_mirror_maker(dir: &Path, properties: &Path, log: &Path) -> Process {
    let log4j = dir.join(format!(
        "{}.log4j2.properties",
        log.file_stem().unwrap().to_str().unwrap()
    ));
    std::fs::write(
        &log4j,
        format!(
            "appender.file.type=File\nappender.file.name=file\nappender.file.fileName={}\n\
             appender.file.layout.type=PatternLayout\n\
             appender.file.layout.pattern=[%d] %p %m (%c)%n\n\
             rootLogger.level=INFO\nrootLogger.appenderRef.file.ref=file\n",
            log.display()
        ),
    )
    .expect("log4j2 properties");
    let command = apache_kafka_java(
        &[format!("-Dlog4j2.configurationFile={}", log4j.display())],
        "org.apache.kafka.connect.mirror.MirrorMaker",
        &[properties.to_str().expect("UTF-8 path")],
    );
    Process::spawn("MirrorMaker 2", command, log)
}

/// The mm2.properties of docs/migrate.md, for these two clusters; the intervals short so the
/// test does not wait for them.
fn mm2_properties(kafka: &str, tinymq: &str) -> String {
    format!(
        "clusters = kafka, tinymq
kafka.bootstrap.servers = {kafka}
tinymq.bootstrap.servers = {tinymq}
kafka->tinymq.enabled = true
tinymq->kafka.enabled = false
replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy
kafka->tinymq.topics = {TOPIC}
kafka->tinymq.groups = {GROUP}
sync.topic.acls.enabled = false
sync.topic.configs.enabled = true
sync.group.offsets.enabled = true
emit.checkpoints.enabled = true
replication.factor = 1
checkpoints.topic.replication.factor = 1
heartbeats.topic.replication.factor = 1
offset-syncs.topic.replication.factor = 1
offset.storage.replication.factor = 1
status.storage.replication.factor = 1
config.storage.replication.factor = 1
offset.lag.max = 10
tinymq.offset.flush.interval.ms = 1000
sync.group.offsets.interval.seconds = 1
emit.checkpoints.interval.seconds = 1
emit.heartbeats.interval.seconds = 1
refresh.topics.interval.seconds = 2
refresh.groups.interval.seconds = 2
sync.topic.configs.interval.seconds = 2
"
    )
}

/// Every partition's end offset of [`TOPIC`] through a Kafka ListOffsets (latest); `None`
/// while the topic does not exist or its partitions have no leader yet.
fn end_offsets(bootstrap: &str) -> Option<Vec<i64>> {
    let request = ListOffsetsRequest::default()
        .with_replica_id((-1).into())
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partitions(
                (0..PARTITIONS)
                    .map(|p| {
                        ListOffsetsPartition::default()
                            .with_partition_index(p)
                            .with_timestamp(-1)
                    })
                    .collect(),
            )]);
    let response = Kafka::connect(bootstrap).call(7, &request);
    let mut offsets = Vec::new();
    for p in &response.topics[0].partitions {
        // Not there yet, or its partitions still being placed (the topic was just created).
        let placing = [
            K::UnknownTopicOrPartition,
            K::LeaderNotAvailable,
            K::NotLeaderOrFollower,
        ];
        if placing.iter().any(|e| p.error_code == e.code()) {
            return None;
        }
        assert_eq!(
            p.error_code, 0,
            "ListOffsets of {TOPIC}-{}",
            p.partition_index
        );
        offsets.push((p.partition_index, p.offset));
    }
    offsets.sort();
    Some(offsets.into_iter().map(|(_, offset)| offset).collect())
}

/// A record's place and content: (partition, offset, `key:value`).
type Placed = (i32, i64, String);

/// The records a console consumer printed with partition, offset and key.
fn parse_printed(stdout: &str) -> Vec<Placed> {
    stdout
        .lines()
        .filter(|line| line.starts_with("Partition:"))
        .map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            let field = |prefix: &str| {
                fields
                    .iter()
                    .find_map(|f| f.strip_prefix(prefix))
                    .unwrap_or_else(|| panic!("no {prefix} in {line:?}"))
                    .to_string()
            };
            // The key and the value, the last two fields.
            let record = fields[fields.len().saturating_sub(2)..].join(":");
            (
                field("Partition:").parse().expect("partition"),
                field("Offset:").parse().expect("offset"),
                record,
            )
        })
        .collect()
}

/// The console consumer's flags that print each record's partition, offset, key and value.
const PRINT_PLACES: [&str; 8] = [
    "--property",
    "print.partition=true",
    "--property",
    "print.offset=true",
    "--property",
    "print.key=true",
    "--property",
    "print.timestamp=false",
];

/// Every record of Kafka's [`TOPIC`], by partition in offset order (`key:value`).
fn kafka_partitions(bootstrap: &str, count: u32) -> BTreeMap<i32, Vec<String>> {
    let max = count.to_string();
    let mut args = vec!["--topic", TOPIC, "--from-beginning", "--max-messages", &max];
    args.extend(PRINT_PLACES);
    let printed = parse_printed(&run_ok(kafka_tool_at(bootstrap, CONSUMER, &args), b""));
    assert_eq!(printed.len(), count as usize, "Kafka's records read back");
    let mut partitions: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    for (partition, offset, value) in printed {
        let values = partitions.entry(partition).or_default();
        assert_eq!(offset, values.len() as i64, "Kafka's offsets are dense");
        values.push(value);
    }
    partitions
}

/// Every record of tinymq's [`TOPIC`], read natively, by partition in offset order
/// (`key:value`).
fn tinymq_partitions(server: &KafkaServer) -> BTreeMap<i32, Vec<String>> {
    let mut partitions: BTreeMap<i32, Vec<(i64, String)>> = BTreeMap::new();
    for record in native_records(server, TOPIC) {
        let partition = record["partition"].as_i64().expect("partition") as i32;
        let offset = record["offset"].as_i64().expect("offset");
        let key = record["key"].as_str().expect("key");
        let value = record["value"].as_str().expect("value");
        partitions
            .entry(partition)
            .or_default()
            .push((offset, format!("{key}:{value}")));
    }
    partitions
        .into_iter()
        .map(|(p, mut records)| {
            records.sort();
            (p, records.into_iter().map(|(_, v)| v).collect())
        })
        .collect()
}

/// The group's committed offsets by partition, from ConsumerGroupCommand --describe; a
/// partition without one ("-") is left out.
fn committed(bootstrap: &str) -> BTreeMap<i32, i64> {
    let described = run(
        kafka_tool_at(bootstrap, GROUPS, &["--describe", "--group", GROUP]),
        b"",
    );
    described
        .stdout
        .lines()
        .filter_map(|line| {
            let columns: Vec<&str> = line.split_whitespace().collect();
            if columns.len() < 4 || columns[0] != GROUP || columns[1] != TOPIC {
                return None;
            }
            Some((columns[2].parse().ok()?, columns[3].parse().ok()?))
        })
        .collect()
}

/// The source offsets MirrorMaker 2's worker has committed for [`TOPIC`]'s partitions, the
/// latest of each: Connect's offsets topic on tinymq, read natively, holds JSON keys
/// `["MirrorSourceConnector",{"cluster":"kafka","partition":P,"topic":"orders"}]` and values
/// `{"offset":N}`.
fn committed_progress(server: &KafkaServer) -> BTreeMap<i64, i64> {
    let mut progress = BTreeMap::new();
    for record in native_records(server, CONNECT_OFFSETS) {
        let json = |field: &str| -> Option<serde_json::Value> {
            serde_json::from_str(record[field].as_str()?).ok()
        };
        let (Some(key), Some(value)) = (json("key"), json("value")) else {
            continue;
        };
        let source = &key[1];
        if source["topic"] != TOPIC {
            continue;
        }
        if let (Some(partition), Some(offset)) =
            (source["partition"].as_i64(), value["offset"].as_i64())
        {
            progress.insert(partition, offset);
        }
    }
    progress
}

/// Topic names on `bootstrap`.
fn topics(bootstrap: &str) -> Vec<String> {
    run_ok(kafka_tool_at(bootstrap, TOPICS, &["--list"]), b"")
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn mirror_maker_2_migrates_a_live_kafka_topic_and_its_group_offsets_to_tinymq() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let dir = dir.path();
    let _logs = LogsOnFailure(vec![
        dir.join("kafka/server.log"),
        dir.join("kafka-run.out"),
        dir.join("mm2-1.log"),
        dir.join("mm2-1.out"),
        dir.join("mm2-2.log"),
        dir.join("mm2-2.out"),
        dir.join("tinymq.log"),
    ]);
    let (_kafka, kafka) = start_apache_kafka(dir);
    let server = Launch::server().log_to(&dir.join("tinymq.log")).start();
    let tinymq = server.kafka.clone();

    // The source: a topic with several partitions and configs of its own, keyed records.
    let partitions = PARTITIONS.to_string();
    let mut create = vec!["--create", "--topic", TOPIC, "--partitions", &partitions];
    let settings: Vec<String> = CONFIGS_SET
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for setting in &settings {
        create.extend(["--config", setting]);
    }
    run_ok(kafka_tool_at(&kafka, TOPICS, &create), b"");
    run_ok(
        keyed_console_producer(&kafka, TOPIC),
        &keyed_lines(0..BEFORE),
    );

    // The group consumes part and commits. A small fetch per partition, so every partition
    // is part read (else the consumer drains one partition after another).
    let max = CONSUMED.to_string();
    let consumed = run_ok(
        kafka_tool_at(
            &kafka,
            CONSUMER,
            &[
                "--topic",
                TOPIC,
                "--group",
                GROUP,
                "--from-beginning",
                "--max-messages",
                &max,
                "--consumer-property",
                "max.partition.fetch.bytes=8192",
            ],
        ),
        b"",
    );
    assert_eq!(
        consumed.lines().count(),
        CONSUMED as usize,
        "consumed on Kafka"
    );
    let on_kafka = committed(&kafka);
    println!("the group's committed offsets on Kafka: {on_kafka:?}");
    assert_eq!(
        on_kafka.len(),
        PARTITIONS as usize,
        "every partition committed"
    );
    assert_eq!(
        on_kafka.values().sum::<i64>(),
        CONSUMED as i64,
        "what it consumed"
    );

    // MirrorMaker 2, while the source is live: more records are produced as it copies.
    let properties = dir.join("mm2.properties");
    std::fs::write(&properties, mm2_properties(&kafka, &tinymq)).expect("mm2.properties");
    let started = Instant::now();
    let mut mm2 = start_mirror_maker(dir, &properties, &dir.join("mm2-1.log"));
    let live = std::thread::spawn({
        let kafka = kafka.clone();
        move || {
            run_ok(
                keyed_console_producer(&kafka, TOPIC),
                &keyed_lines(BEFORE..BEFORE + WHILE_RUNNING),
            )
        }
    });
    // kill -9 mid-copy: once a quarter of the records are on tinymq and MirrorMaker 2 has
    // committed some progress on the topic, so the restart has a position to resume from.
    wait_for("a quarter of the records on tinymq", MIRROR_WAIT, || {
        mm2.running();
        let mirrored: i64 = end_offsets(&tinymq).map_or(0, |ends| ends.iter().sum());
        (mirrored >= TOTAL as i64 / 4 && !committed_progress(&server).is_empty()).then_some(())
    });
    mm2.kill9();
    // Nothing arrives once it is dead: this is what it had copied.
    let copied_at_kill: i64 = end_offsets(&tinymq)
        .expect("the topic on tinymq")
        .iter()
        .sum();
    let progress_at_kill = committed_progress(&server);
    println!(
        "MirrorMaker 2 killed (-9) with {copied_at_kill} records on tinymq, its committed \
         progress {progress_at_kill:?}"
    );
    live.join().expect("live producer");
    let down = BEFORE + WHILE_RUNNING..TOTAL;
    run_ok(keyed_console_producer(&kafka, TOPIC), &keyed_lines(down));
    let source_ends = end_offsets(&kafka).expect("the topic on Kafka");
    assert_eq!(
        source_ends.iter().sum::<i64>(),
        TOTAL as i64,
        "produced on Kafka"
    );

    let restarted = Instant::now();
    let mut mm2 = start_mirror_maker(dir, &properties, &dir.join("mm2-2.log"));
    let expected = kafka_partitions(&kafka, TOTAL);
    // Every record arrives (the count with duplicates is at least Kafka's, per partition).
    wait_for("every record on tinymq", MIRROR_WAIT, || {
        mm2.running();
        let ends = end_offsets(&tinymq).expect("the topic on tinymq");
        ends.iter()
            .zip(&source_ends)
            .all(|(t, k)| t >= k)
            .then_some(())
    });
    println!(
        "all {TOTAL} records on tinymq {:?} after MirrorMaker 2 first started, {:?} after its restart",
        started.elapsed(),
        restarted.elapsed()
    );

    // Content and order per partition: without the duplicates, exactly Kafka's partition.
    let mirrored = tinymq_partitions(&server);
    let mut duplicates = 0;
    for (partition, values) in &expected {
        let copy = mirrored.get(partition).cloned().unwrap_or_default();
        let mut seen = HashSet::new();
        let first_copies: Vec<&String> = copy.iter().filter(|v| seen.insert(*v)).collect();
        let dropped = copy.len() - first_copies.len();
        duplicates += dropped;
        assert!(
            first_copies.iter().copied().eq(values.iter()),
            "partition {partition}: tinymq's records (duplicates dropped) are not Kafka's: {} vs {}",
            first_copies.len(),
            values.len()
        );
        println!(
            "partition {partition}: {} records on Kafka, {} on tinymq ({dropped} duplicates)",
            values.len(),
            copy.len()
        );
    }
    println!("{duplicates} duplicates in all (MirrorMaker 2 is at-least-once)");
    assert!(
        (duplicates as i64) < copied_at_kill,
        "the restart copied again all {copied_at_kill} records copied before the kill \
         ({duplicates} duplicates), not resuming from its committed progress {progress_at_kill:?}"
    );

    // The topic's configs are carried.
    wait_for("the topic's configs on tinymq", MIRROR_WAIT, || {
        let described = run(
            kafka_tool_at(
                &tinymq,
                CONFIGS,
                &[
                    "--describe",
                    "--entity-type",
                    "topics",
                    "--entity-name",
                    TOPIC,
                ],
            ),
            b"",
        )
        .stdout;
        CONFIGS_SET
            .iter()
            .all(|(k, v)| described.contains(&format!("{k}={v}")))
            .then_some(())
    });
    // The periodic config sync carries a change made on Kafka after the topic was created
    // (it also DELETEs every Kafka default, Kafka-only names included: tinymq must take that
    // whole request for the new value to arrive).
    run_ok(
        kafka_tool_at(
            &kafka,
            CONFIGS,
            &[
                "--alter",
                "--entity-type",
                "topics",
                "--entity-name",
                TOPIC,
                "--add-config",
                "retention.ms=43200000",
            ],
        ),
        b"",
    );
    wait_for("a config changed on Kafka, on tinymq", MIRROR_WAIT, || {
        let args = [
            "--describe",
            "--entity-type",
            "topics",
            "--entity-name",
            TOPIC,
        ];
        let described = run(kafka_tool_at(&tinymq, CONFIGS, &args), b"").stdout;
        described.contains("retention.ms=43200000").then_some(())
    });
    // Offset syncs (on the source, MirrorMaker 2's default) and checkpoints (on the target).
    assert!(topics(&kafka).contains(&"mm2-offset-syncs.tinymq.internal".to_string()));
    assert!(topics(&tinymq).contains(&"kafka.checkpoints.internal".to_string()));

    // The group's translated offsets arrive on tinymq, every partition's.
    let translated = wait_for(
        "the group's translated offsets on tinymq",
        MIRROR_WAIT,
        || {
            mm2.running();
            let offsets = committed(&tinymq);
            (offsets.len() == PARTITIONS as usize).then_some(offsets)
        },
    );
    println!("the group's translated offsets on tinymq: {translated:?} (Kafka's: {on_kafka:?})");

    // Cut-over, as docs/migrate.md says: producers and consumers stopped on Kafka, every
    // record copied (above), MirrorMaker 2 stopped; the group's translated offsets are then
    // final. A consumer of the same group on tinymq, which must not reset anywhere.
    mm2.kill9();
    let translated = committed(&tinymq);
    let tinymq_ends = end_offsets(&tinymq).expect("the topic on tinymq");
    let remaining: i64 = (0..PARTITIONS)
        .map(|p| tinymq_ends[p as usize] - translated[&p])
        .sum();
    let max = remaining.to_string();
    let mut args = vec![
        "--topic",
        TOPIC,
        "--group",
        GROUP,
        "--max-messages",
        &max,
        "--consumer-property",
        "auto.offset.reset=none",
    ];
    args.extend(PRINT_PLACES);
    let resumed = parse_printed(&run_ok(kafka_tool_at(&tinymq, CONSUMER, &args), b""));
    assert_eq!(resumed.len() as i64, remaining, "read after cut-over");
    let mut read_again = 0;
    for (partition, values) in &expected {
        let from = on_kafka[partition] as usize;
        let read: HashSet<&str> = resumed
            .iter()
            .filter(|(p, _, _)| p == partition)
            .map(|(_, _, v)| v.as_str())
            .collect();
        let missing: Vec<&String> = values[from..]
            .iter()
            .filter(|v| !read.contains(v.as_str()))
            .collect();
        assert!(
            missing.is_empty(),
            "partition {partition}: {} records the group had not consumed on Kafka were not read on tinymq, the first {:?}",
            missing.len(),
            missing.first()
        );
        let before: HashSet<&str> = values[..from].iter().map(String::as_str).collect();
        let again = resumed
            .iter()
            .filter(|(p, _, v)| p == partition && before.contains(v.as_str()))
            .count();
        read_again += again;
        println!(
            "partition {partition}: resumed at tinymq offset {} (Kafka committed {from}); {again} records read again",
            translated[partition]
        );
    }
    println!("{read_again} records read again after cut-over, none lost");
    // Its progress is committed on tinymq: nothing left behind.
    let after = committed(&tinymq);
    for p in 0..PARTITIONS {
        assert_eq!(
            after[&p], tinymq_ends[p as usize],
            "partition {p} committed to its end"
        );
    }
}
