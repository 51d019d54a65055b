//! `tinymq bench` runs as documented and reports what it measured (no timing is asserted).

mod common;

use std::process::Command;

use common::{Server, BIN};

fn bench(args: &[&str]) -> serde_json::Value {
    let out = Command::new(BIN)
        .arg("bench")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "bench {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn produce_consume_and_e2e_report_counts_and_latency() {
    let tmp = tempfile::tempdir().unwrap();
    let embedded = tmp.path().join("embedded");
    let r = bench(&[
        "produce",
        "--embedded",
        embedded.to_str().unwrap(),
        "--count",
        "5000",
        "--message-bytes",
        "200",
        "--partitions",
        "2",
        "--producers",
        "2",
    ]);
    assert_eq!(r["mode"], "produce");
    assert_eq!(r["messages"], 5000);
    assert_eq!(r["failed"], 0);
    assert_eq!(r["latency"]["samples"], 5000);
    assert!(r["msg_per_s"].as_f64().unwrap() > 0.0);

    let server = Server::start(&tmp.path().join("server"));
    let bootstrap = ["--bootstrap", server.addr.as_str()];
    let r = bench(
        &[
            &[
                "consume",
                "--count",
                "3000",
                "--topic",
                "c",
                "--partitions",
                "3",
                "--consumers",
                "2",
            ][..],
            &bootstrap,
        ]
        .concat(),
    );
    assert_eq!(r["messages"], 3000, "the topic is filled, then read");
    let r = bench(
        &[
            &[
                "e2e",
                "--count",
                "2000",
                "--rate",
                "4000",
                "--topic",
                "e",
                "--linger-ms",
                "0",
            ][..],
            &bootstrap,
        ]
        .concat(),
    );
    assert_eq!(r["messages"], 2000);
    assert_eq!(
        r["latency"]["samples"], 2000,
        "every message timed from send to receipt"
    );
    assert!(r["latency"]["p99_us"].as_u64().unwrap() >= r["latency"]["p50_us"].as_u64().unwrap());
}

#[test]
fn bad_settings_are_refused_with_a_clear_message() {
    let out = Command::new(BIN)
        .args([
            "bench",
            "e2e",
            "--message-bytes",
            "4",
            "--bootstrap",
            "127.0.0.1:1",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--message-bytes"));
}

#[test]
fn the_batch_api_and_closed_loops_report_per_batch_latency() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(&tmp.path().join("server"));
    let bootstrap = ["--bootstrap", server.addr.as_str()];
    // One 1,000-message batch in flight at a time, 7 batches and a short last one.
    let r = bench(
        &[
            &[
                "produce",
                "--api",
                "batch",
                "--batch-records",
                "1000",
                "--in-flight",
                "1",
                "--count",
                "7500",
                "--message-bytes",
                "100",
            ][..],
            &bootstrap,
        ]
        .concat(),
    );
    assert_eq!(r["api"], "batch");
    assert_eq!(r["messages"], 7500);
    assert_eq!(r["in_flight"], 1);
    assert_eq!(r["latency_per"], "batch");
    assert_eq!(r["latency"]["samples"], 8, "one sample per batch");

    // One message per request, one request in flight.
    let r = bench(
        &[
            &[
                "produce",
                "--api",
                "batch",
                "--batch-records",
                "1",
                "--in-flight",
                "1",
                "--count",
                "300",
                "--topic",
                "single",
            ][..],
            &bootstrap,
        ]
        .concat(),
    );
    assert_eq!(r["messages"], 300);
    assert_eq!(r["latency"]["samples"], 300);

    // The record API stays the default, with one latency sample per message.
    let r = bench(
        &[
            &["produce", "--count", "1000", "--topic", "rec"][..],
            &bootstrap,
        ]
        .concat(),
    );
    assert_eq!(r["api"], "record");
    assert_eq!(r["latency_per"], "message");
    assert_eq!(r["latency"]["samples"], 1000);

    let out = Command::new(BIN)
        .args([
            "bench",
            "produce",
            "--api",
            "bulk",
            "--bootstrap",
            "127.0.0.1:1",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--api bulk"));
}

#[test]
fn half_messages_are_sent_and_committed_in_groups_of_records() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let r = bench(&[
        "produce",
        "--bootstrap",
        server.addr.as_str(),
        "--topic",
        "h",
        "--half",
        "--records-per-txn",
        "5",
        "--count",
        "203",
        "--producers",
        "2",
    ]);
    assert_eq!(r["messages"], 203);
    assert_eq!(r["failed"], 0);
    assert_eq!(r["half"], true);
    // 102 and 101 records: 21 halves each (the last ones of 2 and 1 records).
    assert_eq!(r["transactions"], 42);
    assert_eq!(r["txn_latency"]["samples"], 42);
    assert_eq!(r["latency"]["samples"], 203);
}
