//! A record too large for its topic fails alone: the producer refuses it with
//! `MESSAGE_TOO_LARGE` before batching, and the records around it are acknowledged. Batches
//! of many small records are split before the topic's limit, never refused whole.

mod common;

use std::io::Write;
use std::process::{Output, Stdio};

use common::Server;

/// Runs `tinymq ARGS` against `server` with `stdin`, whatever its exit status.
fn run(server: &Server, args: &[&str], stdin: Vec<u8>) -> Output {
    let mut child = server
        .tool(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tool");
    let mut input = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&stdin);
    });
    let out = child.wait_with_output().expect("tool output");
    writer.join().expect("stdin writer");
    out
}

/// Every value stored in `topic` (read until nothing new arrives for a while).
fn stored(server: &Server, topic: &str) -> Vec<String> {
    let out = server.run_tool(
        &["consume", topic, "--from-beginning", "--timeout-ms", "3000"],
        b"",
    );
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn an_oversize_record_fails_alone_and_its_neighbours_are_stored() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(&tmp.path().join("data"));
    server.run_tool(&["topic", "create", "big1"], b"");

    // (echo small1; cat 2MiB-line; echo small2) | tinymq produce big1
    let mut input = b"small1\n".to_vec();
    input.extend(std::iter::repeat_n(b'x', 2 << 20));
    input.extend(b"\nsmall2\n");
    let out = run(&server, &["produce", "big1"], input);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a refused line makes produce fail");
    assert!(stderr.contains("line 2"), "names the failed line: {stderr}");
    assert!(stderr.contains("MESSAGE_TOO_LARGE"), "{stderr}");
    assert!(stderr.contains("1 of 3"), "counts the failures: {stderr}");
    assert!(!stderr.contains("line 1:"), "{stderr}");
    assert!(!stderr.contains("line 3:"), "{stderr}");

    assert_eq!(stored(&server, "big1"), ["small1", "small2"]);
}

#[test]
fn batches_of_small_records_are_split_below_the_topic_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(&tmp.path().join("data"));
    server.run_tool(
        &["topic", "create", "many", "--message-bytes-max", "65536"],
        b"",
    );
    // 6 MB of 100-byte lines, gathered for a second into batches of up to 8 MiB (far over the
    // topic's 64 KiB): the producer must cut them at the topic's limit.
    let lines: Vec<String> = (0..60_000).map(|i| format!("{i:0>100}")).collect();
    let input = lines.join("\n") + "\n";
    let out = run(
        &server,
        &[
            "produce",
            "many",
            "--batch-bytes",
            "8388608",
            "--linger-ms",
            "1000",
        ],
        input.into_bytes(),
    );
    assert!(
        out.status.success(),
        "every record acknowledged: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stored(&server, "many"), lines);
}
