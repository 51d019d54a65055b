//! Broker-side filters (docs/queues.md, "Filters") against a real server: for random records
//! (tags, keys and headers from small alphabets, some numeric) and random expressions, the
//! records a filtered fetch returns (through the client and through `consume --filter`) are
//! exactly those a client-side evaluation of the same expression selects over everything in
//! the topic; positions and a group's committed offset move past the skipped records; a
//! refused expression reaches the user with its column; compressed batches are filtered too.
//!
//! Random but reproducible: the seed is printed, and `FILTER_TEST_SEED=N` replays one.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use common::{RawClient, Server};
use tinymq_client::{
    Compression, Consumer, ConsumerConfig, ConsumerRecord, Producer, ProducerConfig,
    ProducerRecord, StartFrom,
};
use tinymq_filter::{Filter, RecordFields};
use tinymq_protocol::messages as m;
use tinymq_protocol::ErrorCode;

/// Records per topic: enough for several batches per partition, small for a debug build.
const RECORDS: usize = 2_000;
/// Random expressions checked through the client; a few of them also through the CLI.
const EXPRESSIONS: usize = 40;
const CLI_EXPRESSIONS: usize = 4;

/// xorshift64*: a tiny deterministic generator (the seed is printed for replay).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

fn seed() -> u64 {
    let seed = std::env::var("FILTER_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            now.map_or(1, |d| d.as_nanos() as u64) | 1
        });
    eprintln!("FILTER_TEST_SEED={seed}");
    seed
}

const TAGS: [&str; 4] = ["red", "blue", "green", "eu-red"];
const REGIONS: [&str; 4] = ["eu", "us", "eu-west", "ap"];
const PRIORITIES: [&str; 6] = ["1", "3", "5", "10", "-2.5", "high"];
const KEYS: [&str; 3] = ["k1", "k2", "eu-k"];

/// A random record: each field present or missing at random.
fn random_record(rng: &mut Rng) -> ProducerRecord {
    let mut record = ProducerRecord::value(Bytes::from(format!("v{}", rng.next())));
    if rng.below(4) > 0 {
        record.key = Some(Bytes::from(rng.pick(&KEYS)));
    }
    let mut headers = Vec::new();
    for (name, values) in [
        ("tag", &TAGS[..]),
        ("region", &REGIONS[..]),
        ("priority", &PRIORITIES[..]),
    ] {
        if rng.below(5) > 0 {
            headers.push((name.to_string(), Some(Bytes::from(rng.pick(values)))));
        }
    }
    record.headers = headers;
    record
}

fn literal(rng: &mut Rng) -> String {
    match rng.below(3) {
        0 => format!(
            "'{}'",
            rng.pick(&[&TAGS[..], &REGIONS[..], &KEYS[..]].concat())
        ),
        1 => rng.pick(&PRIORITIES[..5]).to_string(),
        _ => format!("'{}'", rng.pick(&PRIORITIES)),
    }
}

fn predicate(rng: &mut Rng) -> String {
    let field = rng.pick(&["tag", "key", "header.region", "header.priority", "TAG"]);
    match rng.below(7) {
        0..=2 => {
            let op = rng.pick(&["=", "!=", "<>", "<", "<=", ">", ">="]);
            format!("{field} {op} {}", literal(rng))
        }
        3 => {
            let items: Vec<String> = (0..1 + rng.below(3)).map(|_| literal(rng)).collect();
            let not = if rng.below(2) == 0 { "NOT " } else { "" };
            format!("{field} {not}IN ({})", items.join(", "))
        }
        4 => format!("{field} like '{}%'", rng.pick(&["eu", "r", "k", ""])),
        5 => format!("{field} IS NULL"),
        _ => format!("{field} is not null"),
    }
}

fn expression(rng: &mut Rng, depth: usize) -> String {
    match if depth >= 3 { 0 } else { rng.below(5) } {
        0 | 1 => predicate(rng),
        2 => format!("NOT ({})", expression(rng, depth + 1)),
        3 => format!(
            "({}) AND ({})",
            expression(rng, depth + 1),
            expression(rng, depth + 1)
        ),
        _ => format!(
            "{} or {}",
            expression(rng, depth + 1),
            expression(rng, depth + 1)
        ),
    }
}

/// A consumed record's fields, for client-side evaluation.
struct Fields<'a>(&'a ConsumerRecord);

impl RecordFields for Fields<'_> {
    fn key(&self) -> Option<&[u8]> {
        self.0.key.as_deref()
    }
    fn header(&self, name: &str) -> Option<&[u8]> {
        let found = self.0.headers.iter().find(|(k, _)| k == name);
        found.and_then(|(_, v)| v.as_deref())
    }
}

type Offsets = Vec<(u32, i64)>;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

async fn produce(addr: &str, topic: &str, compression: Compression, rng: &mut Rng) {
    let mut config = ProducerConfig::new(addr);
    config.compression = compression;
    config.batch_bytes = 8 << 10; // several batches per partition
    let producer = Producer::new(config).expect("producer");
    let mut deliveries = Vec::new();
    for _ in 0..RECORDS {
        let record = random_record(rng);
        deliveries.push(producer.send(topic, record).await.expect("send"));
    }
    for d in deliveries {
        d.await.expect("delivered");
    }
    producer.close().await;
}

/// Reads every partition of `topic` from the start to its end with `filter`; returns the
/// records and each partition's final position and high watermark.
async fn read_all(
    addr: &str,
    topic: &str,
    filter: Option<&str>,
    ends: &BTreeMap<u32, i64>,
) -> (Vec<ConsumerRecord>, BTreeMap<u32, i64>) {
    let mut config = ConsumerConfig::new(addr);
    config.start_from = StartFrom::Earliest;
    config.max_wait = Duration::from_millis(100);
    config.filter = filter.map(str::to_string);
    config.partition_bytes_max = 16 << 10; // many fetches, each scanning a few batches
    let mut consumer = Consumer::new(config).expect("consumer");
    consumer.assign(topic, None).await.expect("assign");
    let mut records = Vec::new();
    let done = |c: &Consumer| {
        ends.iter()
            .all(|(p, end)| c.position(topic, *p) == Some(*end))
    };
    for _ in 0..600 {
        if done(&consumer) {
            break;
        }
        records.extend(
            consumer
                .poll(Duration::from_millis(100))
                .await
                .expect("poll"),
        );
    }
    let positions = ends
        .keys()
        .map(|p| (*p, consumer.position(topic, *p).unwrap_or(-1)))
        .collect();
    (records, positions)
}

fn offsets(records: &[ConsumerRecord]) -> Offsets {
    let mut o: Offsets = records.iter().map(|r| (r.partition, r.offset)).collect();
    o.sort_unstable();
    o
}

fn selected(all: &[ConsumerRecord], filter: &Filter) -> Offsets {
    let kept: Vec<ConsumerRecord> = all
        .iter()
        .filter(|r| filter.matches(&Fields(r)))
        .cloned()
        .collect();
    offsets(&kept)
}

/// The high watermark of every partition of `topic`.
async fn ends_of(addr: &str, topic: &str) -> BTreeMap<u32, i64> {
    let admin = tinymq_client::Admin::new(tinymq_client::ClientConfig::new(addr)).expect("admin");
    let d = admin.describe_topic(topic).await.expect("describe");
    d.partitions
        .iter()
        .map(|p| (p.partition, p.high_watermark))
        .collect()
}

/// `consume --filter` from the beginning to the end: (partition, offset) of what it printed.
fn cli_consume(server: &Server, topic: &str, filter: &str, group: Option<&str>) -> Offsets {
    let mut args = vec!["consume", topic, "--from-beginning", "--timeout-ms", "0"];
    args.extend(["--format", "json", "--filter", filter]);
    if let Some(g) = group {
        args.extend(["--group", g]);
    }
    let out = server.run_tool(&args, b"");
    let mut o: Offsets = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            (
                v["partition"].as_u64().unwrap() as u32,
                v["offset"].as_i64().unwrap(),
            )
        })
        .collect();
    o.sort_unstable();
    o
}

/// For one topic: random expressions through the client and the CLI against client-side
/// evaluation; one through a group, whose committed offsets must reach the ends.
fn check_topic(server: &Server, rt: &tokio::runtime::Runtime, topic: &str, rng: &mut Rng) {
    let ends = rt.block_on(ends_of(&server.addr, topic));
    assert_eq!(ends.values().sum::<i64>(), RECORDS as i64, "{ends:?}");
    let (all, _) = rt.block_on(read_all(&server.addr, topic, None, &ends));
    assert_eq!(all.len(), RECORDS, "everything reads back unfiltered");
    let mut kept_total = 0;
    for i in 0..EXPRESSIONS {
        let text = expression(rng, 0);
        let filter = Filter::parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let want = selected(&all, &filter);
        kept_total += want.len();
        let (got, positions) = rt.block_on(read_all(&server.addr, topic, Some(&text), &ends));
        assert_eq!(offsets(&got), want, "{topic}: client with filter {text}");
        assert_eq!(
            positions, ends,
            "{topic}: positions past skipped records, {text}"
        );
        if i < CLI_EXPRESSIONS {
            assert_eq!(
                cli_consume(server, topic, &text, None),
                want,
                "consume --filter {text}"
            );
        }
    }
    assert!(kept_total > 0, "the expressions selected something");
    // A group: what it prints is the selection, and its committed offsets reach the ends.
    let text = "tag IN ('red', 'eu-red') AND header.priority >= 3";
    let want = selected(&all, &Filter::parse(text).unwrap());
    let group = format!("{topic}-group");
    assert_eq!(cli_consume(server, topic, text, Some(&group)), want);
    let out = server.run_tool(&["group", "describe", &group, "--json"], b"");
    let described: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    for row in described["partitions"].as_array().expect("partitions") {
        let p = row["partition"].as_u64().unwrap() as u32;
        assert_eq!(row["committed_offset"].as_i64(), Some(ends[&p]), "{row}");
        assert_eq!(row["lag"].as_i64(), Some(0), "{row}");
    }
}

#[test]
fn broker_side_filtering_returns_exactly_what_client_side_evaluation_selects() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let rt = runtime();
    let mut rng = Rng(seed());
    for (topic, compression) in [("plain", Compression::None), ("zipped", Compression::Zstd)] {
        server.run_tool(&["topic", "create", topic, "--partitions", "2"], b"");
        rt.block_on(produce(&server.addr, topic, compression, &mut rng));
        check_topic(&server, &rt, topic, &mut rng);
    }
}

#[test]
fn a_refused_filter_names_its_column_to_the_cli_user_and_on_the_wire() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    server.run_tool(&["topic", "create", "t"], b"");
    let out = server
        .tool(&[
            "consume",
            "t",
            "--filter",
            "tag = AND x",
            "--timeout-ms",
            "0",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("column 7: expected a literal"), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains("in: tag = AND x"))
        .expect("echoed");
    let caret = lines.get(at + 1).and_then(|l| l.find('^'));
    assert_eq!(
        caret,
        lines[at].find("AND x"),
        "the caret is under the column:\n{stderr}"
    );

    // The broker's own refusal (a client that does not check first).
    let mut raw = RawClient::handshaken(&server.addr);
    let fetch = |filter: String| m::FetchRequest {
        max_wait_ms: 0,
        partitions: vec![m::FetchPartition {
            topic: "t".into(),
            ..Default::default()
        }],
        filter,
        ..Default::default()
    };
    let refused = raw.call(&fetch("header.priority > 3 AND (tag = 'a'".into()));
    let error = refused.error.expect("refused");
    assert_eq!(error.code, u32::from(ErrorCode::INVALID_FILTER.code()));
    assert!(
        error.message.starts_with("column 35: expected ')'"),
        "{}",
        error.message
    );
    let too_long = format!("tag = '{}'", "x".repeat(5000));
    let error = raw.call(&fetch(too_long)).error.expect("refused");
    assert_eq!(error.code, u32::from(ErrorCode::INVALID_FILTER.code()));
    assert!(
        error.message.contains("FILTER_TEXT_BYTES_MAX"),
        "{}",
        error.message
    );
}
