//! `tinymq top` against real servers (issue 15): while records are produced its per-topic
//! rate moves, and its totals add up to exactly what was produced and consumed; several nodes
//! are summed, and a node that does not answer is reported without stopping the others.

mod common;

use std::io::Read;
use std::process::{Command, Stdio};

use common::{Server, BIN};

/// `n` records of one line each.
fn records(n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| format!("record {i}\n"))
        .collect::<String>()
        .into_bytes()
}

/// A server with its HTTP listener on a free port; returns it and the HTTP address.
fn server(data: &std::path::Path) -> (Server, String) {
    let http = format!("127.0.0.1:{}", common::free_port());
    (Server::start_with(data, &["--http", &http]), http)
}

/// `tinymq top ARGS --json`, run to its end: one JSON object per refresh.
fn top(args: &[&str]) -> Vec<serde_json::Value> {
    let out = Command::new(BIN)
        .arg("top")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The row of `topic` in one refresh.
fn row<'a>(refresh: &'a serde_json::Value, topic: &str) -> &'a serde_json::Value {
    refresh["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["topic"] == topic)
        .unwrap_or_else(|| panic!("no {topic} in {refresh}"))
}

#[test]
fn rates_move_while_producing_and_totals_add_up() {
    let data = tempfile::tempdir().unwrap();
    let (server, http) = server(data.path());
    server.run_tool(&["topic", "create", "watched", "--partitions", "2"], b"");

    let mut child = Command::new(BIN)
        .args(["top", "--http", &http, "--count", "3", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Produce until top has printed its three refreshes (bounded, whatever the machine's pace).
    let mut produced = 0;
    for _ in 0..500 {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        server.run_tool(&["produce", "watched"], &records(100));
        produced += 100;
    }
    let status = child.wait().unwrap();
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(status.success(), "{stderr}");
    let refreshes: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(refreshes.len(), 3, "--count 3:\n{stdout}");

    let mut last_total = 0;
    for r in &refreshes {
        assert_eq!(r["nodes"][0]["up"], true, "{r}");
        let t = row(r, "watched");
        let total = t["records_in_total"].as_u64().unwrap();
        assert!(total >= last_total, "totals never go down: {stdout}");
        assert!(total <= produced, "{total} of {produced} produced");
        last_total = total;
        assert!(
            r["topics"]
                .as_array()
                .unwrap()
                .iter()
                .all(|t| t["topic"] != "__consumer_offsets"),
            "internal topics only with --internal: {r}"
        );
    }
    assert!(
        refreshes.iter().any(
            |r| row(r, "watched")["records_in_per_sec"].as_f64().unwrap() > 0.0
                && row(r, "watched")["bytes_in_per_sec"].as_f64().unwrap() > 0.0
        ),
        "the rate moved while producing: {stdout}"
    );

    // Now quiet: read everything once, then the totals are exactly what went in and out.
    let read = server.run_tool(
        &[
            "consume",
            "watched",
            "--from-beginning",
            "--count",
            &produced.to_string(),
        ],
        b"",
    );
    assert_eq!(
        String::from_utf8_lossy(&read.stdout).lines().count() as u64,
        produced
    );
    let quiet = top(&["--http", &http, "--count", "2", "--interval", "0.2"]);
    let last = quiet.last().unwrap();
    let t = row(last, "watched");
    assert_eq!(t["records_in_total"].as_u64(), Some(produced), "{last}");
    assert_eq!(t["records_out_total"].as_u64(), Some(produced), "{last}");
    assert_eq!(t["records_in_per_sec"].as_f64(), Some(0.0), "{last}");
    assert_eq!(
        last["all"]["records_in_total"].as_u64(),
        Some(produced),
        "{last}"
    );
    assert_eq!(
        t["bytes_in_total"], last["all"]["bytes_in_total"],
        "one topic holds all the bytes: {last}"
    );
}

#[test]
fn several_nodes_are_summed_and_one_that_does_not_answer_is_reported() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, http_a) = server(d1.path());
    let (b, http_b) = server(d2.path());
    for (s, n) in [(&a, 30), (&b, 12)] {
        s.run_tool(&["topic", "create", "summed"], b"");
        s.run_tool(&["produce", "summed"], &records(n));
    }
    let dead = format!("127.0.0.1:{}", common::free_port());
    let nodes = format!("{http_a},{http_b},{dead}");
    let out = top(&["--http", &nodes, "--count", "1", "--interval", "0.2"]);
    assert_eq!(out.len(), 1);
    assert_eq!(
        row(&out[0], "summed")["records_in_total"].as_u64(),
        Some(42)
    );
    let up: Vec<bool> = out[0]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["up"].as_bool().unwrap())
        .collect();
    assert_eq!(up, [true, true, false], "{}", out[0]);
    assert!(out[0]["nodes"][2]["error"].is_string());

    // No node at all: an error at once, not an empty table.
    let none = Command::new(BIN)
        .args(["top", "--http", &dead, "--count", "1"])
        .output()
        .unwrap();
    assert!(!none.status.success());
    assert!(
        String::from_utf8_lossy(&none.stderr).contains("no node answered"),
        "{}",
        String::from_utf8_lossy(&none.stderr)
    );
}
