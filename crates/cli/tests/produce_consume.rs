//! The CLI end to end against a real server: topics, 100,000 lines through `produce` and
//! `consume`, per-partition order, JSON output, keys and headers.

mod common;

use std::collections::BTreeMap;

use common::Server;

#[test]
fn topics_can_be_created_listed_described_and_deleted() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    server.run_tool(
        &[
            "topic",
            "create",
            "alpha",
            "--partitions",
            "3",
            "--flush",
            "interval:50",
        ],
        b"",
    );
    server.run_tool(&["topic", "create", "beta"], b"");
    let list = server.run_tool(&["topic", "list"], b"");
    assert_eq!(String::from_utf8_lossy(&list.stdout), "alpha\nbeta\n");

    let describe = server.run_tool(&["topic", "describe", "alpha", "--json"], b"");
    let json: serde_json::Value = serde_json::from_slice(&describe.stdout).unwrap();
    assert_eq!(json["config"]["flush"], "interval:50");
    assert_eq!(json["partitions"].as_array().unwrap().len(), 3);
    assert_eq!(json["partitions"][2]["partition"], 2);

    // A duplicate or invalid topic is a clear error and a non-zero exit.
    let dup = server.tool(&["topic", "create", "alpha"]).output().unwrap();
    assert!(!dup.status.success());
    assert!(String::from_utf8_lossy(&dup.stderr).contains("TOPIC_ALREADY_EXISTS"));
    let bad = server
        .tool(&["topic", "create", "no/slash"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&bad.stderr).contains("INVALID_TOPIC"));

    server.run_tool(&["topic", "delete", "alpha"], b"");
    let list = server.run_tool(&["topic", "list"], b"");
    assert_eq!(String::from_utf8_lossy(&list.stdout), "beta\n");
    assert!(
        !tmp.path().join("alpha-0").exists(),
        "data removed with the topic"
    );
    let missing = server
        .tool(&["topic", "describe", "alpha"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&missing.stderr).contains("UNKNOWN_TOPIC_OR_PARTITION"));
}

#[test]
fn a_hundred_thousand_lines_come_back_identical_and_in_order_per_partition() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    server.run_tool(&["topic", "create", "lines", "--partitions", "4"], b"");
    let lines: Vec<String> = (0..100_000)
        .map(|i| format!("k{}:line-{i}", i % 64))
        .collect();
    let input = lines.join("\n") + "\n";
    server.run_tool(
        &["produce", "lines", "--key-separator", ":"],
        input.as_bytes(),
    );

    let out = server.run_tool(
        &[
            "consume",
            "lines",
            "--from-beginning",
            "--count",
            "100000",
            "--format",
            "json",
            "--timeout-ms",
            "20000",
        ],
        b"",
    );
    let mut per_partition: BTreeMap<u64, Vec<(i64, String, String)>> = BTreeMap::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        per_partition
            .entry(v["partition"].as_u64().unwrap())
            .or_default()
            .push((
                v["offset"].as_i64().unwrap(),
                v["key"].as_str().unwrap().to_string(),
                v["value"].as_str().unwrap().to_string(),
            ));
    }
    let mut got: Vec<(String, String)> = Vec::new();
    for (partition, records) in &per_partition {
        // Offsets within a partition are contiguous from 0, and each key's lines keep their order.
        for (i, (offset, _, _)) in records.iter().enumerate() {
            assert_eq!(*offset, i as i64, "partition {partition}");
        }
        got.extend(records.iter().map(|(_, k, v)| (k.clone(), v.clone())));
    }
    assert_eq!(got.len(), 100_000);
    let mut by_key: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (key, value) in &got {
        let n: usize = value.strip_prefix("line-").unwrap().parse().unwrap();
        by_key.entry(key.clone()).or_default().push(n);
    }
    for (key, numbers) in &by_key {
        assert!(
            numbers.windows(2).all(|w| w[0] < w[1]),
            "key {key} out of order"
        );
    }
    let mut want: Vec<(String, String)> = lines
        .iter()
        .map(|l| {
            let (k, v) = l.split_once(':').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect();
    want.sort();
    got.sort();
    assert_eq!(got, want, "every line exactly once");
    assert!(
        per_partition.len() > 1,
        "64 keys spread over the 4 partitions"
    );
}

#[test]
fn text_output_headers_offsets_and_timeouts() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    server.run_tool(&["topic", "create", "t"], b"");
    server.run_tool(
        &["produce", "t", "--header", "trace=abc", "--acks", "1"],
        b"one\ntwo\nthree\n",
    );
    let out = server.run_tool(&["consume", "t", "--from-beginning", "--count", "3"], b"");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "one\ntwo\nthree\n");
    let out = server.run_tool(
        &[
            "consume",
            "t",
            "--offset",
            "1",
            "--partition",
            "0",
            "--timeout-ms",
            "300",
            "--format",
            "json",
        ],
        b"",
    );
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["value"], "two");
    assert_eq!(
        lines[0]["headers"],
        serde_json::json!([{"key": "trace", "value": "abc", "value_encoding": "utf8"}])
    );
    // Without --from-beginning only new messages are shown: none arrive, so it times out empty.
    let out = server.run_tool(&["consume", "t", "--timeout-ms", "300"], b"");
    assert!(out.stdout.is_empty());
    // Producing to a missing topic fails with a clear message.
    let out = server
        .tool(&["produce", "missing"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "no lines, nothing to send");
    let mut child = server
        .tool(&["produce", "missing"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"x\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("UNKNOWN_TOPIC_OR_PARTITION"));
}

#[test]
fn settings_come_from_file_then_environment_then_flags() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("tinymq.toml");
    std::fs::write(
        &file,
        "partitions = 2\nflush = \"os\"\nretention_ms = 1000\n",
    )
    .unwrap();
    let data = tmp.path().join("data");
    let server = Server::start_with_env(
        &data,
        &["--config", file.to_str().unwrap(), "--retention-ms", "5000"],
        &[("TINYMQ_PARTITIONS", "5"), ("TINYMQ_RETENTION_MS", "3000")],
    );
    server.run_tool(&["topic", "create", "defaults"], b"");
    let out = server.run_tool(&["topic", "describe", "defaults", "--json"], b"");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["config"]["flush"], "os", "from the file");
    assert_eq!(
        json["config"]["partitions"], 5,
        "the environment beats the file"
    );
    assert_eq!(
        json["config"]["retention_ms"], 5000,
        "a flag beats the environment"
    );
}
