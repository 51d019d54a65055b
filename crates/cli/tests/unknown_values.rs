//! What a tool does not know it never shows as a number: a partition whose leader is offline
//! (or cannot be reached) has no leader, log end or lag — `null` in JSON, `-` in text — in
//! `topic describe` and `group describe`; `group reset-offsets` refuses to reset from offsets it
//! does not know.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{free_port, Server, BIN};

fn tool_ok(args: &[&str], bootstrap: &str) -> String {
    let out = Command::new(BIN)
        .args(args)
        .args(["--bootstrap", bootstrap])
        .output()
        .expect("run tinymq");
    assert!(
        out.status.success(),
        "tinymq {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

fn json(args: &[&str], bootstrap: &str) -> serde_json::Value {
    serde_json::from_str(&tool_ok(args, bootstrap)).expect("JSON output")
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The whitespace-separated columns of the text row of `partition` in a table whose rows start
/// with `lead` (the topic name, or nothing).
fn row(text: &str, lead: &[&str], partition: u32) -> Vec<String> {
    text.lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .find(|cols| {
            cols.len() > lead.len()
                && cols[..lead.len()] == *lead
                && cols[lead.len()] == partition.to_string()
        })
        .unwrap_or_else(|| panic!("no row for partition {partition} in:\n{text}"))
}

/// Checks both describes while the partitions in `offline` have no reachable leader;
/// `leader_known` says whether the metadata still names one (not yet fenced).
fn check_unknowns(s: &str, offline: &[u32], leader_known: bool) {
    let topic = json(&["topic", "describe", "t9", "--json"], s);
    let text = tool_ok(&["topic", "describe", "t9"], s);
    for p in topic["partitions"].as_array().unwrap() {
        let index = p["partition"].as_u64().unwrap() as u32;
        let cols = row(&text, &[], index);
        if !offline.contains(&index) {
            assert!(p["leader"].as_u64().is_some(), "{p}");
            assert!(p["log_end_offset"].as_i64().unwrap() >= 0, "{p}");
            continue;
        }
        for field in [
            "log_start_offset",
            "log_end_offset",
            "high_watermark",
            "size_bytes",
        ] {
            assert!(p[field].is_null(), "{field} unknown, not a number: {p}");
        }
        // partition leader start end hw bytes
        assert_eq!(cols[2..6], ["-", "-", "-", "-"], "{text}");
        if leader_known {
            assert_eq!(p["leader"].as_u64(), Some(2), "{p}");
        } else {
            assert!(p["leader"].is_null(), "no leader is null, not 0: {p}");
            assert_eq!(cols[1], "-", "{text}");
        }
    }

    let group = json(&["group", "describe", "g9", "--json"], s);
    let text = tool_ok(&["group", "describe", "g9"], s);
    for r in group["partitions"].as_array().unwrap() {
        let index = r["partition"].as_u64().unwrap() as u32;
        let cols = row(&text, &["t9"], index);
        assert!(r["committed_offset"].as_i64().is_some(), "{r}");
        if offline.contains(&index) {
            assert!(r["log_end_offset"].is_null(), "{r}");
            assert!(r["lag"].is_null(), "lag unknown, not 0: {r}");
            // topic partition committed log-end lag
            assert_eq!(cols[3..5], ["-", "-"], "{text}");
        } else {
            assert!(r["log_end_offset"].as_i64().unwrap() >= 0, "{r}");
            assert!(r["lag"].as_i64().is_some(), "{r}");
        }
    }
    // A total that leaves partitions out is not shown as the total (issue 27, item 10).
    assert!(text.contains("total lag unknown: "), "{text}");
    let listed = json(&["group", "list", "--json"], s);
    let g9 = listed["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["group_id"] == "g9")
        .unwrap_or_else(|| panic!("g9 listed: {listed}"));
    assert!(g9["lag"].is_null(), "lag unknown, not a number: {listed}");
}

#[test]
fn an_offline_leader_shows_unknown_never_zero() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(&tmp.path().join("server"));
    let s = server.addr.as_str();
    let joined_addr = format!("127.0.0.1:{}", free_port());
    let mut joined = Server::start_broker(2, &joined_addr, s, &tmp.path().join("broker-2"));
    // One copy each: a dead broker's partitions have no leader once it is fenced.
    tool_ok(
        &[
            "topic",
            "create",
            "t9",
            "--partitions",
            "8",
            "--replicas",
            "1",
        ],
        s,
    );
    let placed = json(&["topic", "describe", "t9", "--json"], s);
    let offline: Vec<u32> = placed["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["leader"].as_u64() == Some(2))
        .map(|p| p["partition"].as_u64().unwrap() as u32)
        .collect();
    assert!(!offline.is_empty(), "broker 2 leads some of t9: {placed}");
    assert!(offline.len() < 8, "broker 1 leads some of t9: {placed}");

    let lines: String = (0..200).map(|i| format!("k{i}:v{i}\n")).collect();
    server.run_tool(&["produce", "t9", "--key-separator", ":"], lines.as_bytes());
    let read = tool_ok(
        &[
            "consume",
            "t9",
            "--group",
            "g9",
            "--from-beginning",
            "--count",
            "200",
            "--timeout-ms",
            "10000",
        ],
        s,
    );
    assert_eq!(read.lines().count(), 200);

    // Killed, broker 2 is still named leader until its session ends, but cannot be reached.
    joined.kill9();
    check_unknowns(s, &offline, true);

    // Fenced, its partitions have no leader at all.
    wait_for("broker 2 to be fenced", || {
        json(&["cluster", "status", "--json"], s)["brokers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["id"] == 2 && b["live"] == false)
    });
    check_unknowns(s, &offline, false);

    // Offsets that are not known are not reset to -1: nothing is committed.
    let before = json(&["group", "describe", "g9", "--json"], s)["partitions"].clone();
    let out = Command::new(BIN)
        .args([
            "group",
            "reset-offsets",
            "g9",
            "--topic",
            "t9",
            "--to-latest",
            "--execute",
        ])
        .args(["--bootstrap", s])
        .output()
        .expect("run tinymq");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "reset from unknown offsets refused");
    assert!(stderr.contains("not known"), "{stderr}");
    let after = json(&["group", "describe", "g9", "--json"], s)["partitions"].clone();
    assert_eq!(before, after);
}
