//! Issue 15's "must show" for metrics: a real `tinymq server` takes records of a known size
//! through the CLI and a consumer group reads them back; `/metrics`, parsed by the Python
//! `prometheus_client` OpenMetrics parser (a parser that is not ours), then counts exactly
//! what went in and out, the requests that carried it, and the group's lag going to 0.
//!
//! Needs `.tools/venv` (run `scripts/install-python-tools.sh`); fails saying so without it.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::Server;

const TOPIC: &str = "scraped";
const GROUP: &str = "readers";
/// Bytes of each record's value.
const VALUE_BYTES: usize = 100;

/// Reads OpenMetrics text on stdin with prometheus_client's strict parser and prints every
/// sample as one JSON line: `[name, {labels}, value]`.
const PARSER: &str = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        print(json.dumps([s.name, s.labels, s.value]))
"#;

fn python() -> PathBuf {
    common::http::venv_tool("python", "creates .tools/venv with prometheus_client")
}

/// Samples keyed `name{k="v",...}` with labels sorted by name.
struct Samples(BTreeMap<String, f64>);

impl Samples {
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.0.get(&key(name, labels)).copied()
    }

    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels)
            .unwrap_or_else(|| panic!("no {} in {:#?}", key(name, labels), self.0))
    }
}

fn key(name: &str, labels: &[(&str, &str)]) -> String {
    let mut labels = labels.to_vec();
    labels.sort();
    let inner: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{name}{{{}}}", inner.join(","))
}

fn parse(text: &str) -> Samples {
    let mut child = Command::new(python())
        .args(["-c", PARSER])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "prometheus_client refused the text: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut samples = BTreeMap::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let (name, labels, value): (String, BTreeMap<String, String>, f64) =
            serde_json::from_str(line).unwrap();
        let labels: Vec<(&str, &str)> = labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let previous = samples.insert(key(&name, &labels), value);
        assert!(previous.is_none(), "{name} {labels:?} twice");
    }
    Samples(samples)
}

fn scrape(http: &str) -> Samples {
    let response = common::http::request(http, "GET", "/metrics", None);
    assert_eq!(response.status, 200, "{}", response.body);
    assert!(
        response
            .content_type
            .contains("application/openmetrics-text"),
        "content type: {}",
        response.content_type
    );
    parse(&response.body)
}

/// Scrapes until `done` holds (bounded): commits and lag are read from the coordinator's state,
/// which the consumer's last commit reaches just before it exits.
fn scrape_until(http: &str, what: &str, done: impl Fn(&Samples) -> bool) -> Samples {
    common::retry(200, Duration::from_millis(100), || {
        Some(scrape(http)).filter(|samples| done(samples))
    })
    .unwrap_or_else(|| panic!("{what}: never seen in {:#?}", scrape(http).0))
}

/// `count` records of exactly [`VALUE_BYTES`] bytes, one per line.
fn records(first: usize, count: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for i in first..first + count {
        writeln!(out, "{i:0width$}", width = VALUE_BYTES).unwrap();
    }
    out
}

fn consume(server: &Server, count: usize) -> Vec<String> {
    let count = count.to_string();
    let args = [
        "consume",
        TOPIC,
        "--group",
        GROUP,
        "--from-beginning",
        "--count",
        &count,
    ];
    let out = server.run_tool(&args, b"");
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines().map(str::to_string).collect()
}

#[test]
fn counters_match_what_was_sent_and_group_lag_falls_to_zero() {
    python(); // Before anything runs: without the parser this test cannot pass.
    let data = tempfile::tempdir().unwrap();
    let http = format!("127.0.0.1:{}", common::free_port());
    let server = Server::start_with(data.path(), &["--http", &http]);
    server.run_tool(&["topic", "create", TOPIC, "--partitions", "1"], b"");
    let tp = [("topic", TOPIC), ("partition", "0")];
    let lag = [("group", GROUP), ("topic", TOPIC), ("partition", "0")];

    // In: 200 records, then all 200 read by the group, which commits them.
    let (first, second) = (200, 50);
    server.run_tool(&["produce", TOPIC], &records(0, first));
    let read = consume(&server, first);
    assert_eq!(read.len(), first);
    assert!(read.iter().all(|r| r.len() == VALUE_BYTES));
    let after_first = scrape_until(&http, "the group's lag at 0", |s| {
        s.get("tinymq_group_lag", &lag) == Some(0.0)
    });
    let s = &after_first;
    assert_eq!(s.value("tinymq_records_in_total", &[]), first as f64);
    assert_eq!(
        s.value("tinymq_partition_records_in_total", &tp),
        first as f64
    );
    let bytes_in = s.value("tinymq_bytes_in_total", &[]);
    assert!(
        bytes_in >= (first * VALUE_BYTES) as f64,
        "{bytes_in} bytes in for {first} values of {VALUE_BYTES} bytes"
    );
    assert_eq!(
        s.value("tinymq_partition_bytes_in_total", &tp),
        bytes_in,
        "one partition"
    );
    assert_eq!(
        s.value("tinymq_partition_log_size_bytes", &tp),
        bytes_in,
        "the log holds exactly the batches produced"
    );
    // Out: each batch went to the consumer once.
    assert_eq!(s.value("tinymq_records_out_total", &[]), first as f64);
    assert_eq!(s.value("tinymq_bytes_out_total", &[]), bytes_in);
    assert_eq!(
        s.value("tinymq_partition_records_out_total", &tp),
        first as f64
    );
    assert_eq!(s.value("tinymq_partition_bytes_out_total", &tp), bytes_in);
    assert_eq!(
        s.value("tinymq_produce_batch_records_sum", &[]),
        first as f64
    );
    assert_eq!(s.value("tinymq_produce_batch_bytes_sum", &[]), bytes_in);

    // The requests that carried it, each timed.
    for op in ["produce", "fetch", "join_group", "offset_commit"] {
        let count = s.value("tinymq_requests_total", &[("op", op)]);
        assert!(count >= 1.0, "{op}: {count}");
        assert_eq!(
            s.value("tinymq_request_duration_seconds_count", &[("op", op)]),
            count,
            "{op}"
        );
        assert_eq!(
            s.value(
                "tinymq_request_duration_seconds_bucket",
                &[("op", op), ("le", "+Inf")]
            ),
            count,
            "{op}"
        );
    }
    assert!(s.value("tinymq_fsync_duration_seconds_count", &[]) >= 1.0);

    // More records: the group, now without members, lags by exactly that many.
    server.run_tool(&["produce", TOPIC], &records(first, second));
    let behind = scrape(&http);
    assert_eq!(behind.value("tinymq_group_lag", &lag), second as f64);
    assert_eq!(
        behind.value("tinymq_group_members", &[("group", GROUP)]),
        0.0
    );
    let produces = behind.value("tinymq_requests_total", &[("op", "produce")]);
    assert!(produces > s.value("tinymq_requests_total", &[("op", "produce")]));

    // A member that stays shows in the group while it runs.
    let mut member = server
        .tool(&["consume", TOPIC, "--group", GROUP])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let joined = scrape_until(&http, "one member", |s| {
        s.get("tinymq_group_members", &[("group", GROUP)]) == Some(1.0)
            && s.get("tinymq_group_lag", &lag) == Some(0.0)
    });
    let _ = member.kill();
    let _ = member.wait();
    assert!(joined.value("tinymq_group_generation", &[("group", GROUP)]) >= 1.0);

    // The member read the rest from the group's position: everything went out once.
    let total = (first + second) as f64;
    assert_eq!(joined.value("tinymq_records_in_total", &[]), total);
    assert_eq!(joined.value("tinymq_records_out_total", &[]), total);
    let bytes_in = joined.value("tinymq_bytes_in_total", &[]);
    assert_eq!(joined.value("tinymq_bytes_out_total", &[]), bytes_in);
    assert_eq!(
        joined.value("tinymq_partition_log_size_bytes", &tp),
        bytes_in
    );
}
