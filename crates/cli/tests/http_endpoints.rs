//! The HTTP listener of a real `tinymq server` (issue 15): `/metrics` moves with a produce and
//! parses as Prometheus text, the health endpoints answer JSON, and bad requests get 4xx.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use common::http::Node;
use common::BIN;

/// A server started with `--http 127.0.0.1:0` and `extra` flags.
struct HttpServer {
    addr: String,
    http: String,
    _node: Node,
}

impl HttpServer {
    fn start(extra: &[&str]) -> HttpServer {
        HttpServer::from(Node::start(extra))
    }

    fn from(node: Node) -> HttpServer {
        HttpServer {
            addr: node.native.clone(),
            http: node.http.clone(),
            _node: node,
        }
    }

    /// `/health/ready` once it answers 200 (bounded wait), as JSON.
    fn ready(&self) -> serde_json::Value {
        let ready = common::retry(200, Duration::from_millis(100), || {
            let (status, body) = self.get("/health/ready");
            if status == 200 {
                return Some(serde_json::from_str(&body).unwrap());
            }
            assert_eq!(status, 503, "{body}");
            None
        });
        ready.unwrap_or_else(|| panic!("{} never ready", self.addr))
    }

    fn tool(&self, args: &[&str], stdin: &[u8]) {
        let mut cmd = Command::new(BIN);
        cmd.args(args).env("TINYMQ_BOOTSTRAP", &self.addr);
        let out = common::run_with_input(&mut cmd, stdin);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// One request on its own connection: the status and the body.
    fn request(&self, raw: &str) -> (u16, String) {
        let response = common::http::raw(&self.http, raw);
        (response.status, response.body)
    }

    /// A tool run that must fail (the server answers it with an error).
    fn tool_fails(&self, args: &[&str]) {
        let out = Command::new(BIN)
            .args(args)
            .env("TINYMQ_BOOTSTRAP", &self.addr)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} succeeded");
    }

    fn get(&self, path: &str) -> (u16, String) {
        self.request(&format!(
            "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        ))
    }

    fn scrape(&self) -> BTreeMap<String, f64> {
        let (status, body) = self.get("/metrics");
        assert_eq!(status, 200, "{body}");
        parse_prometheus_text(&body)
    }
}

/// A strict reader of the Prometheus / OpenMetrics text format: every line is a `# HELP`,
/// `# TYPE`, `# UNIT` or a sample of a family declared by `# TYPE` before it, and the text ends
/// with `# EOF`. Returns every sample as `name{labels}` → value; panics on anything else.
fn parse_prometheus_text(text: &str) -> BTreeMap<String, f64> {
    fn is_name(s: &str) -> bool {
        let mut chars = s.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    }
    fn check_labels(labels: &str) {
        // `k="v",k="v"`: values here never hold quotes or backslashes.
        for pair in labels.split(',').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').expect("label key=value");
            assert!(is_name(key), "label name {key:?}");
            assert!(
                value.len() >= 2 && value.starts_with('"') && value.ends_with('"'),
                "label value {value:?}"
            );
        }
    }
    let mut families: BTreeMap<String, String> = BTreeMap::new();
    let mut samples = BTreeMap::new();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.last(), Some(&"# EOF"), "the text ends with # EOF");
    for line in &lines[..lines.len() - 1] {
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (kind, name) = (parts.next().unwrap(), parts.next().expect("a name"));
            assert!(is_name(name), "metric name {name:?}");
            match kind {
                "TYPE" => {
                    let t = parts.next().expect("a type");
                    let known = [
                        "gauge",
                        "counter",
                        "histogram",
                        "summary",
                        "unknown",
                        "info",
                    ];
                    assert!(known.contains(&t), "type {t:?}");
                    families.insert(name.to_string(), t.to_string());
                }
                "HELP" | "UNIT" => {}
                other => panic!("unknown comment {other:?} in {line:?}"),
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("a sample: series value");
        let name = match series.split_once('{') {
            Some((name, labels)) => {
                check_labels(labels.strip_suffix('}').expect("closing brace"));
                name
            }
            None => series,
        };
        assert!(is_name(name), "sample name {name:?}");
        let family = families
            .keys()
            .find(|f| {
                name == f.as_str()
                    || name.strip_prefix(f.as_str()).is_some_and(|s| {
                        ["_total", "_bucket", "_sum", "_count", "_created"].contains(&s)
                    })
            })
            .unwrap_or_else(|| panic!("sample {name:?} of no declared family"));
        assert!(!family.is_empty());
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("value {value:?}"));
        samples.insert(series.to_string(), value);
    }
    samples
}

/// One scrape at `http`, or `None` when the connection is closed unanswered (no place free).
fn try_scrape(http: &str) -> Option<BTreeMap<String, f64>> {
    let mut s = TcpStream::connect(http).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let body = text.split_once("\r\n\r\n")?.1;
    (!body.is_empty()).then(|| parse_prometheus_text(body))
}

/// [`try_scrape`], retried (bounded) while the listener has no place free.
fn scrape_when_free(http: &str) -> BTreeMap<String, f64> {
    common::retry(200, Duration::from_millis(50), || try_scrape(http))
        .unwrap_or_else(|| panic!("no scrape got a place at {http}"))
}

fn value(samples: &BTreeMap<String, f64>, series: &str) -> f64 {
    *samples
        .get(series)
        .unwrap_or_else(|| panic!("no {series} in {samples:#?}"))
}

#[test]
fn metrics_move_with_a_produce_and_parse_as_prometheus_text() {
    let server = HttpServer::start(&[]);
    server.tool(&["topic", "create", "metered", "--partitions", "1"], b"");
    let end = r#"tinymq_partition_log_end_offset{topic="metered",partition="0"}"#;
    let size = r#"tinymq_partition_log_size_bytes{topic="metered",partition="0"}"#;
    let hw = r#"tinymq_partition_high_watermark{topic="metered",partition="0"}"#;
    let before = server.scrape();
    assert_eq!(value(&before, end), 0.0);
    assert_eq!(value(&before, size), 0.0);
    server.tool(&["produce", "metered"], b"one\ntwo\nthree\nfour\nfive\n");
    let after = server.scrape();
    assert_eq!(value(&after, end), 5.0);
    assert_eq!(
        value(&after, hw),
        5.0,
        "acknowledged under `always`: fsynced"
    );
    assert!(value(&after, size) > 0.0);
    assert_eq!(
        value(
            &after,
            r#"tinymq_partition_segments{topic="metered",partition="0"}"#
        ),
        1.0
    );
    // The embedded MetaServer node leads its single-node group.
    assert!(value(&after, r#"tinymq_meta_raft_term{node="1"}"#) >= 1.0);
    assert_eq!(value(&after, r#"tinymq_meta_raft_leader{node="1"}"#), 1.0);
    assert!(value(&after, r#"tinymq_meta_raft_applied_index{node="1"}"#) >= 1.0);
    // A single voter stores a majority by itself: its commit index is its last entry.
    assert_eq!(
        value(&after, r#"tinymq_meta_raft_commit_index{node="1"}"#),
        value(&after, r#"tinymq_meta_raft_last_log_index{node="1"}"#)
    );
    assert!(value(&after, "tinymq_process_resident_memory_bytes") > 0.0);
    assert!(value(&after, "tinymq_process_open_fds") > 0.0);
    assert!(value(&after, "tinymq_process_cpu_seconds_total") >= 0.0);
    assert!(value(&after, "tinymq_http_connections_accepted_total") >= 2.0);
    assert_eq!(value(&after, "tinymq_partition_series_omitted"), 0.0);
    // The two tools' connections to the native port (create, produce), none refused.
    let accepted = value(&after, "tinymq_connections_accepted_total");
    assert!(accepted >= 2.0, "{accepted}");
    assert_eq!(value(&after, "tinymq_connections_refused_total"), 0.0);

    // What went in: 5 records, in batches whose bytes are the log's.
    let tp = r#"{topic="metered",partition="0"}"#;
    assert_eq!(value(&after, "tinymq_records_in_total"), 5.0);
    assert_eq!(
        value(&after, &format!("tinymq_partition_records_in_total{tp}")),
        5.0
    );
    let bytes_in = value(&after, &format!("tinymq_partition_bytes_in_total{tp}"));
    assert_eq!(
        bytes_in,
        value(&after, size),
        "every byte appended is a batch"
    );
    assert_eq!(value(&after, "tinymq_bytes_in_total"), bytes_in);
    assert_eq!(value(&after, "tinymq_produce_batch_records_sum"), 5.0);
    assert_eq!(value(&after, "tinymq_produce_batch_bytes_sum"), bytes_in);
    let batches = value(&after, "tinymq_produce_batch_records_count");
    assert!(batches >= 1.0);
    assert_eq!(
        value(&after, r#"tinymq_produce_batch_records_bucket{le="+Inf"}"#),
        batches
    );
    // Acknowledged under `always`: at least one fsync, timed.
    assert!(value(&after, "tinymq_fsync_duration_seconds_count") >= 1.0);
    assert!(value(&after, "tinymq_fsync_duration_seconds_sum") > 0.0);
    // The requests that carried it.
    let produces = value(&after, r#"tinymq_requests_total{op="produce"}"#);
    assert!(produces >= 1.0);
    assert_eq!(
        value(
            &after,
            r#"tinymq_request_duration_seconds_count{op="produce"}"#
        ),
        produces
    );
    assert_eq!(
        value(&after, r#"tinymq_requests_total{op="create_topic"}"#),
        1.0
    );
    assert_eq!(value(&after, "tinymq_broker_registered"), 1.0);
    assert_eq!(value(&after, "tinymq_under_replicated_partitions"), 0.0);
    assert_eq!(value(&after, "tinymq_offline_partitions"), 0.0);
    // Nothing consumed yet.
    assert_eq!(value(&after, "tinymq_records_out_total"), 0.0);

    // A refused request is counted by operation and code.
    server.tool_fails(&["topic", "create", "metered", "--partitions", "1"]);
    let again = server.scrape();
    assert_eq!(
        value(
            &again,
            r#"tinymq_request_errors_total{op="create_topic",code="TOPIC_ALREADY_EXISTS"}"#
        ),
        1.0
    );
    assert_eq!(
        value(&again, r#"tinymq_requests_total{op="create_topic"}"#),
        2.0
    );
}

#[test]
fn idle_native_connections_are_closed_and_counted() {
    let server = HttpServer::start(&["--idle-timeout-ms", "200"]);
    let mut idle = common::RawClient::handshaken(&server.addr);
    assert!(idle.closed_by_server());
    // Counted before the close reaches the client; no longer open soon after.
    let samples = server.scrape();
    assert_eq!(value(&samples, "tinymq_connections_idle_closed_total"), 1.0);
    let open = (0..100).find_map(|_| {
        let open = value(&server.scrape(), "tinymq_connections_open");
        std::thread::sleep(Duration::from_millis(50));
        (open == 0.0).then_some(open)
    });
    assert_eq!(open, Some(0.0), "the idle connection still counted as open");
}

#[test]
fn an_http_client_that_sends_nothing_is_closed_and_frees_its_place() {
    let server = HttpServer::start(&[
        "--http-connections-max",
        "1",
        "--http-request-timeout-ms",
        "200",
        "--http-idle-timeout-ms",
        "300",
    ]);
    let scrape = || scrape_when_free(&server.http);
    let idle_closed = |samples: &BTreeMap<String, f64>| {
        value(samples, "tinymq_http_connections_idle_closed_total")
    };
    // Nothing at all, then half a request line: each is closed unanswered, and the scrape
    // after it gets the only place back. A silent connection that came while the previous
    // scrape still held the place was refused, not idle: it is tried again.
    let mut closed = 0.0;
    for sent in ["", "GET /metr"] {
        for attempt in 0.. {
            assert!(attempt < 50, "{sent:?}: never accepted");
            let mut silent = TcpStream::connect(&server.http).unwrap();
            silent
                .set_read_timeout(Some(Duration::from_secs(30)))
                .unwrap();
            silent.write_all(sent.as_bytes()).unwrap();
            let mut rest = Vec::new();
            let read = silent.read_to_end(&mut rest);
            assert!(
                read.is_ok()
                    || read
                        .as_ref()
                        .is_err_and(|e| e.kind() != std::io::ErrorKind::WouldBlock),
                "not closed: {read:?}"
            );
            assert!(
                rest.is_empty(),
                "answered: {:?}",
                String::from_utf8_lossy(&rest)
            );
            let now = idle_closed(&scrape());
            if now > closed {
                assert_eq!(now, closed + 1.0);
                closed = now;
                break;
            }
        }
    }
    assert_eq!(closed, 2.0);
}

#[test]
fn native_connections_past_connections_max_are_counted() {
    let server = HttpServer::start(&["--connections-max", "1"]);
    let held = TcpStream::connect(&server.addr).unwrap();
    let mut refused = TcpStream::connect(&server.addr).unwrap();
    refused
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    // The refused connection gets its LIMIT_EXCEEDED frame, then EOF.
    let mut rest = Vec::new();
    let _ = refused.read_to_end(&mut rest);
    let samples = server.scrape();
    assert_eq!(value(&samples, "tinymq_connections_refused_total"), 1.0);
    assert_eq!(value(&samples, "tinymq_connections_open"), 1.0);
    drop(held);
}

#[test]
fn per_partition_series_stop_at_the_limit() {
    let server = HttpServer::start(&["--http-partition-series-max", "2"]);
    server.tool(&["topic", "create", "wide", "--partitions", "5"], b"");
    let samples = server.scrape();
    let held = value(&samples, "tinymq_partitions");
    assert!(
        held >= 5.0,
        "5 partitions of `wide` and the offsets topic's"
    );
    assert_eq!(
        value(&samples, "tinymq_partition_series_omitted"),
        held - 2.0
    );
    let shown = samples
        .keys()
        .filter(|k| k.starts_with("tinymq_partition_log_end_offset{"))
        .count();
    assert_eq!(shown, 2);
}

#[test]
fn health_endpoints_answer_json() {
    let server = HttpServer::start(&[]);
    let (status, body) = server.get("/health/live");
    assert_eq!(status, 200);
    let live: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(live["status"], "live");
    let (status, body) = server.get("/health/ready");
    assert_eq!(status, 200, "{body}");
    let ready: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(ready["status"], "ready", "{body}");
    assert_eq!(ready["role"], "server");
    assert_eq!(ready["missing"], serde_json::json!([]));
    let names: Vec<&str> = ready["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["cluster_joined", "partitions_opened", "meta_leader_known"]
    );
}

#[test]
fn bad_requests_get_4xx() {
    let server = HttpServer::start(&["--http-body-bytes-max", "1024"]);
    let (status, body) = server.get("/no/such/route");
    assert_eq!(status, 404);
    let problem: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(problem["status"], 404);
    // Refused on the declared length, before the body is sent.
    let (status, _) = server.request(
        "POST /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: 1073741824\r\n\r\n",
    );
    assert_eq!(status, 413);
    let (status, _) =
        server.request("DELETE /health/live HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_eq!(status, 405);
    let (status, _) = server.request("NOT HTTP AT ALL\r\n\r\n");
    assert!((400..500).contains(&status), "{status}");
}

#[test]
fn connections_past_the_limit_are_closed_and_counted() {
    let server = HttpServer::start(&["--http-connections-max", "1"]);
    let mut held = TcpStream::connect(&server.http).unwrap();
    // A request answered on the held connection proves it was accepted (holds the one place).
    held.write_all(b"GET /health/live HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut first = [0u8; 12];
    held.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    let mut refused = TcpStream::connect(&server.http).unwrap();
    refused
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let _ = refused.write_all(b"GET /health/live HTTP/1.1\r\nHost: t\r\n\r\n");
    let mut rest = Vec::new();
    // Closed without an answer (EOF or reset).
    let read = refused.read_to_end(&mut rest);
    assert!(read.is_err() || rest.is_empty(), "answered: {rest:?}");
    drop(held);
    // The held connection's place comes back once the server sees it closed.
    let samples = scrape_when_free(&server.http);
    assert!(value(&samples, "tinymq_http_connections_refused_total") >= 1.0);
}

#[test]
fn a_metaserver_node_and_a_cluster_broker_serve_http_when_asked() {
    let data = tempfile::tempdir().unwrap();
    let meta = HttpServer::from(Node::meta(data.path()).keeping(data));
    let meta_addr = meta.addr.clone();
    let ready = meta.ready();
    assert_eq!(ready["role"], "meta");
    assert_eq!(ready["checks"][0]["name"], "meta_leader_known");
    let samples = meta.scrape();
    assert_eq!(value(&samples, r#"tinymq_meta_raft_leader{node="1"}"#), 1.0);
    assert!(value(&samples, r#"tinymq_meta_raft_term{node="1"}"#) >= 1.0);
    assert_eq!(value(&samples, "tinymq_partitions"), 0.0);
    assert_eq!(value(&samples, "tinymq_connections_refused_total"), 0.0);

    let data = tempfile::tempdir().unwrap();
    let broker = HttpServer::from(Node::broker(data.path(), &meta_addr).keeping(data));
    let ready = broker.ready();
    assert_eq!(ready["role"], "broker");
    assert_eq!(ready["missing"], serde_json::json!([]));
    broker.tool(&["topic", "create", "clustered", "--partitions", "2"], b"");
    broker.tool(&["produce", "clustered", "--partition", "0"], b"a\nb\n");
    let samples = broker.scrape();
    let end = r#"tinymq_partition_log_end_offset{topic="clustered",partition="0"}"#;
    assert_eq!(value(&samples, end), 2.0);
    assert!(
        !samples.keys().any(|k| k.starts_with("tinymq_meta_raft")),
        "a cluster broker runs no MetaServer node"
    );
    assert_eq!(value(&samples, "tinymq_broker_registered"), 1.0);
    assert_eq!(value(&samples, "tinymq_records_in_total"), 2.0);
    // The MetaServer node counts the requests it serves: the broker's registration and the
    // topic's creation are metadata writes.
    let at_meta = meta.scrape();
    let writes = value(&at_meta, r#"tinymq_requests_total{op="meta_write"}"#);
    assert!(writes >= 2.0, "{writes}");
    assert!(
        !at_meta.keys().any(|k| k.starts_with("tinymq_bytes_in")),
        "a MetaServer node holds no partitions: no traffic series"
    );
}

/// One scrape of the listener at `http`, parsed.
fn scrape_at(http: &str) -> BTreeMap<String, f64> {
    parse_prometheus_text(&common::http::request(http, "GET", "/metrics", None).body)
}

#[test]
fn replication_health_follows_a_follower_that_stops_and_returns() {
    use common::cluster::{describe, tool_ok, wait_all_in_sync, wait_for, LAG_MAX_MS};
    let tmp = tempfile::tempdir().unwrap();
    let port = || format!("127.0.0.1:{}", common::free_port());
    let meta = vec![port()];
    let _meta = common::start(1, &meta, tmp.path());
    let addrs = [port(), port()];
    let https = [port(), port()];
    let start = |id: u32| {
        let i = id as usize - 1;
        let dir = tmp.path().join(format!("broker-{id}"));
        let extra = ["--replica-lag-time-max-ms", LAG_MAX_MS, "--http", &https[i]];
        common::Server::start_broker_with(id, &addrs[i], &meta[0], &dir, &extra)
    };
    let mut brokers = [Some(start(1)), Some(start(2))];
    let bootstrap = addrs.join(",");
    tool_ok(&[
        "topic",
        "create",
        "mirrored",
        "--partitions",
        "1",
        "--replicas",
        "2",
        "--bootstrap",
        &bootstrap,
    ]);
    wait_all_in_sync("mirrored", &bootstrap);
    let leader = describe("mirrored", &bootstrap)[0].leader as usize;
    let follower = 3 - leader;
    let at_leader = || scrape_at(&https[leader - 1]);
    let before = at_leader();
    assert_eq!(value(&before, "tinymq_under_replicated_partitions"), 0.0);
    assert_eq!(value(&before, "tinymq_offline_partitions"), 0.0);
    assert_eq!(value(&before, "tinymq_broker_registered"), 1.0);
    let shrinks = value(&before, "tinymq_isr_shrinks_total");

    // The follower stops: the leader drops it from the ISR and says so.
    if let Some(mut b) = brokers[follower - 1].take() {
        b.kill9();
    }
    wait_for("the partition under-replicated at its leader", || {
        value(&at_leader(), "tinymq_under_replicated_partitions") == 1.0
    });
    let shrunk = at_leader();
    assert_eq!(value(&shrunk, "tinymq_isr_shrinks_total"), shrinks + 1.0);
    assert_eq!(value(&shrunk, "tinymq_offline_partitions"), 0.0);

    // It comes back and catches up: in sync again.
    let expands = value(&shrunk, "tinymq_isr_expands_total");
    brokers[follower - 1] = Some(start(follower as u32));
    wait_for("the partition fully replicated again", || {
        value(&at_leader(), "tinymq_under_replicated_partitions") == 0.0
    });
    assert!(value(&at_leader(), "tinymq_isr_expands_total") > expands);
}
