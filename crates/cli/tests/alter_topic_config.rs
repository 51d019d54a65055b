//! Changing a topic's settings on a running `tinymq server` (`AlterTopicConfig`): through the
//! CLI and through `PATCH /api/v1/topics/{name}`, taking effect without a restart (the batch
//! limit on produce, retention), refused with `INVALID_CONFIG` naming the key when wrong, and
//! kept across a kill -9 (the change is in the Raft log); and in a cluster, altered through
//! the MetaServer node, applied by every broker.

mod common;

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::http::Node;
use common::BIN;
use serde_json::json;

/// Runs `tinymq ARGS` against `node`, feeding `stdin`.
fn tool(node: &Node, args: &[&str], stdin: &[u8]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env("TINYMQ_BOOTSTRAP", &node.native)
        .env("TINYMQ_LOG", "warn");
    common::run_with_input(&mut cmd, stdin)
}

fn ok(node: &Node, args: &[&str], stdin: &[u8]) -> String {
    let out = tool(node, args, stdin);
    assert!(
        out.status.success(),
        "tinymq {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn describe(node: &Node, topic: &str) -> serde_json::Value {
    let out = ok(node, &["topic", "describe", topic, "--json"], b"");
    serde_json::from_str(&out).expect("describe --json prints JSON")
}

#[test]
fn settings_change_live_through_the_cli_and_rest_and_survive_kill_9() {
    let data = tempfile::tempdir().unwrap();
    let mut node = Node::server(data.path());
    node.wait_ok("/api/v1/cluster");

    // A batch limit too small for the record: refused; raised live: the same record goes in.
    ok(
        &node,
        &["topic", "create", "small", "--message-bytes-max", "200"],
        b"",
    );
    let record = format!("{}\n", "x".repeat(1000));
    let refused = tool(&node, &["produce", "small"], record.as_bytes());
    assert!(
        !refused.status.success(),
        "a 1000-byte record over a 200-byte limit"
    );
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(
        why.contains("MESSAGE_TOO_LARGE") || why.contains("message_bytes_max"),
        "{why}"
    );
    let altered = ok(
        &node,
        &[
            "topic",
            "alter",
            "small",
            "--set",
            "message_bytes_max=100000",
        ],
        b"",
    );
    assert!(altered.contains("message_bytes_max 100000"), "{altered}");
    ok(&node, &["produce", "small"], record.as_bytes());
    let d = describe(&node, "small");
    assert_eq!(d["config"]["message_bytes_max"], 100000, "{d}");
    assert_eq!(d["partitions"][0]["high_watermark"], 1, "{d}");

    // Several segments, then a retention small enough to drop all but the active one.
    ok(
        &node,
        &["topic", "create", "history", "--segment-bytes", "1048576"],
        b"",
    );
    let lines: String = (0..2600).map(|i| format!("{i:0>1000}\n")).collect();
    ok(&node, &["produce", "history"], lines.as_bytes());
    assert_eq!(
        describe(&node, "history")["partitions"][0]["log_start_offset"],
        0
    );
    ok(
        &node,
        &["topic", "alter", "history", "--set", "retention_bytes=1"],
        b"",
    );
    // Applied when the answer comes; polled anyway, with a deadline, as the rule for tests.
    let deadline = Instant::now() + Duration::from_secs(30);
    let start = loop {
        let d = describe(&node, "history");
        let start = d["partitions"][0]["log_start_offset"].as_i64().unwrap_or(0);
        if start > 0 || Instant::now() > deadline {
            break start;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(start > 0, "old segments deleted after retention_bytes=1");
    let d = describe(&node, "history");
    assert_eq!(d["config"]["retention_bytes"], 1, "{d}");
    assert_eq!(d["partitions"][0]["log_end_offset"], 2600, "{d}");

    // A compact-only topic has no retention limits (as in Kafka); compact,delete has them
    // again. The compaction lag of a day keeps the cleaner off these records meanwhile.
    ok(
        &node,
        &[
            "topic",
            "create",
            "kept",
            "--segment-bytes",
            "1048576",
            "--config",
            "min_compaction_lag_ms=86400000",
        ],
        b"",
    );
    ok(&node, &["produce", "kept"], lines.as_bytes());
    let altered = ok(
        &node,
        &[
            "topic",
            "alter",
            "kept",
            "--set",
            "cleanup_policy=compact",
            "--set",
            "retention_bytes=1",
        ],
        b"",
    );
    assert!(altered.contains("cleanup_policy compact,"), "{altered}");
    std::thread::sleep(Duration::from_millis(500));
    let d = describe(&node, "kept");
    assert_eq!(d["config"]["cleanup_policy"], "compact", "{d}");
    assert_eq!(d["config"]["retention_bytes"], 1, "{d}");
    assert_eq!(
        d["partitions"][0]["log_start_offset"], 0,
        "retention does not apply to compact only: {d}"
    );
    ok(
        &node,
        &[
            "topic",
            "alter",
            "kept",
            "--set",
            "cleanup_policy=delete,compact",
        ],
        b"",
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let start = loop {
        let d = describe(&node, "kept");
        let start = d["partitions"][0]["log_start_offset"].as_i64().unwrap_or(0);
        if start > 0 || Instant::now() > deadline {
            break start;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(start > 0, "compact,delete deletes past retention_bytes=1");
    let d = describe(&node, "kept");
    assert_eq!(d["config"]["cleanup_policy"], "compact,delete", "{d}");
    // REST: a decimal for the ratio, and the compaction settings' checks.
    let patched = node
        .patch(
            "/api/v1/topics/kept",
            &json!({"config": {"min_cleanable_dirty_ratio": 0.3, "delete_retention_ms": 0}}),
        )
        .expect(200);
    assert_eq!(
        patched["config"]["min_cleanable_dirty_ratio"], 0.3,
        "{patched}"
    );
    assert_eq!(patched["config"]["delete_retention_ms"], 0, "{patched}");
    for (config, key) in [
        (json!({"cleanup_policy": "shred"}), "cleanup_policy"),
        (
            json!({"min_cleanable_dirty_ratio": 1.5}),
            "min_cleanable_dirty_ratio",
        ),
        (json!({"max_compaction_lag_ms": 0}), "max_compaction_lag_ms"),
    ] {
        let detail = node
            .patch("/api/v1/topics/kept", &json!({ "config": config }))
            .expect_problem(400, "INVALID_CONFIG");
        assert!(detail.contains(key), "{detail}");
    }

    // REST: a value sets, null removes (the broker's default again).
    let patched = node
        .patch(
            "/api/v1/topics/history",
            &json!({"config": {"retention_ms": 86400000, "retention_bytes": null}}),
        )
        .expect(200);
    assert_eq!(patched["config"]["retention_ms"], 86400000, "{patched}");
    assert_eq!(patched["config"]["retention_bytes"], -1, "{patched}");
    let described = node.get("/api/v1/topics/history").expect(200);
    assert_eq!(described["config"]["retention_ms"], 86400000);
    for (config, key) in [
        (json!({"retention.ms": 5}), "retention.ms"),
        (json!({"retention_ms": "soon"}), "retention_ms"),
        (json!({"flush": "os"}), "flush"),
        (json!({"min_insync_replicas": 2}), "min_insync_replicas"),
    ] {
        let detail = node
            .patch("/api/v1/topics/history", &json!({ "config": config }))
            .expect_problem(400, "INVALID_CONFIG");
        assert!(detail.contains(key), "{detail}");
    }
    node.patch(
        "/api/v1/topics/nope",
        &json!({"config": {"retention_ms": 5}}),
    )
    .expect_problem(404, "UNKNOWN_TOPIC_OR_PARTITION");
    // The CLI refuses a bad key the same way.
    let bad = tool(
        &node,
        &["topic", "alter", "small", "--set", "colour=blue"],
        b"",
    );
    assert!(!bad.status.success());
    let why = String::from_utf8_lossy(&bad.stderr);
    assert!(
        why.contains("INVALID_CONFIG") && why.contains("colour"),
        "{why}"
    );

    // The changes are in the Raft log: a kill -9 and a restart keep them.
    node.kill();
    let node = Node::server(data.path());
    let described = node.wait_ok("/api/v1/topics/history").json();
    assert_eq!(described["config"]["retention_ms"], 86400000, "{described}");
    assert_eq!(described["config"]["retention_bytes"], -1, "{described}");
    let kept = node.wait_ok("/api/v1/topics/kept").json();
    assert_eq!(kept["config"]["cleanup_policy"], "compact,delete", "{kept}");
    assert_eq!(kept["config"]["min_cleanable_dirty_ratio"], 0.3, "{kept}");
    let small = node.wait_ok("/api/v1/topics/small").json();
    assert_eq!(small["config"]["message_bytes_max"], 100000, "{small}");
    ok(&node, &["produce", "small"], record.as_bytes());
}

#[test]
fn a_change_through_the_metaserver_reaches_every_broker() {
    use common::cluster::{describe, tool, tool_ok, tool_ok_with_input, Cluster};
    let cluster = Cluster::start(2);
    let bootstrap = cluster.bootstrap();
    tool_ok(&[
        "topic",
        "create",
        "spread",
        "--partitions",
        "2",
        "--replicas",
        "2",
        "--message-bytes-max",
        "200",
        "--bootstrap",
        cluster.addr(1),
    ]);
    let leaders: Vec<u64> = describe("spread", &bootstrap)
        .iter()
        .map(|p| p.leader)
        .collect();
    assert!(
        leaders.contains(&1) && leaders.contains(&2),
        "one leader each: {leaders:?}"
    );

    let too_big = |p: u32| {
        let record = format!("{}\n", "y".repeat(1000));
        let args = [
            "produce",
            "spread",
            "--partition",
            &p.to_string(),
            "--bootstrap",
            &bootstrap,
        ];
        let mut child = Command::new(BIN)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn tinymq");
        let _ = child
            .stdin
            .take()
            .expect("stdin")
            .write_all(record.as_bytes());
        child.wait().expect("produce").success()
    };
    assert!(!too_big(0) && !too_big(1), "over message_bytes_max 200");

    // The MetaServer node checks it like a broker does, and refuses what cannot be.
    let refused = tool(&[
        "topic",
        "alter",
        "spread",
        "--set",
        "min_insync_replicas=3",
        "--bootstrap",
        &cluster.meta,
    ]);
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && why.contains("min_insync_replicas"),
        "{why}"
    );
    tool_ok(&[
        "topic",
        "alter",
        "spread",
        "--set",
        "message_bytes_max=100000",
        "--bootstrap",
        &cluster.meta,
    ]);
    // Each broker applies it when its image shows it (bounded wait, no duration asserted).
    let deadline = Instant::now() + Duration::from_secs(30);
    for p in [0, 1] {
        while !too_big(p) {
            assert!(
                Instant::now() < deadline,
                "partition {p} never took the new limit"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let out = tool_ok_with_input(
        &[
            "topic",
            "describe",
            "spread",
            "--json",
            "--bootstrap",
            cluster.addr(2),
        ],
        b"",
    );
    let d: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(d["config"]["message_bytes_max"], 100000, "{d}");
}
