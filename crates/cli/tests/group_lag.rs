//! `tinymq group describe` shows lag per partition (issue 15): the committed offset, the high
//! watermark from the partition's leader and their difference, per partition and in total, in
//! text and JSON, against a real server.

mod common;

use common::Server;

fn records(n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| format!("r{i}\n"))
        .collect::<String>()
        .into_bytes()
}

fn describe_json(server: &Server) -> serde_json::Value {
    let out = server.run_tool(&["group", "describe", "lagging", "--json"], b"");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn lag_per_partition_and_in_total_follows_what_is_produced_and_read() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path());
    server.run_tool(&["topic", "create", "lagged", "--partitions", "2"], b"");
    let produce = |partition: &str, n| {
        server.run_tool(
            &["produce", "lagged", "--partition", partition],
            &records(n),
        );
    };
    produce("0", 20);
    produce("1", 10);
    let read = server.run_tool(
        &[
            "consume",
            "lagged",
            "--group",
            "lagging",
            "--from-beginning",
            "--count",
            "30",
        ],
        b"",
    );
    assert_eq!(String::from_utf8_lossy(&read.stdout).lines().count(), 30);
    produce("1", 7);

    let d = describe_json(&server);
    let rows = d["partitions"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{d}");
    for (row, (committed, hw)) in rows.iter().zip([(20, 20), (10, 17)]) {
        assert_eq!(row["topic"], "lagged");
        assert_eq!(row["committed_offset"], committed, "{d}");
        assert_eq!(row["high_watermark"], hw, "{d}");
        assert_eq!(row["lag"], hw - committed, "{d}");
    }
    assert_eq!(d["lag_total"], 7, "{d}");
    assert_eq!(d["lag_unknown_partitions"], 0, "{d}");

    let text = server.run_tool(&["group", "describe", "lagging"], b"");
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("high watermark"), "{text}");
    let cols = |p: &str| -> Vec<String> {
        text.lines()
            .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
            .find(|c| c.len() >= 5 && c[0] == "lagged" && c[1] == p)
            .unwrap_or_else(|| panic!("no row for partition {p}:\n{text}"))
    };
    assert_eq!(cols("1")[2..5], ["10", "17", "7"], "{text}");
    assert_eq!(cols("0")[2..5], ["20", "20", "0"], "{text}");
    assert!(text.lines().any(|l| l == "total lag 7"), "{text}");
}
