//! The HTTP listener of real `tinymq` processes (issue 15): `/metrics` moves with a produce
//! and parses as Prometheus text (the node's totals are the process's), a MetaServer node and a
//! cluster broker serve it, and replication health follows a follower killed and restarted.
//! The listener's limits, health and 4xx answers run in process (`in_process/http_endpoints.rs`).

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use common::http::Node;
use common::prometheus::{scrape_at, value};
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
        scrape_at(&self.http)
    }
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
