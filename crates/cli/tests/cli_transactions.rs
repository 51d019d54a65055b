//! The CLI's transactions against a real server: `tinymq produce --transactional-id` (the
//! input committed as one transaction, or aborted with `--abort`), `tinymq consume
//! --isolation`, `tinymq transaction list|describe|producers`, and `tinymq group describe
//! --read-committed`.

mod common;

use common::Server;

fn lines(out: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_committed_and_an_aborted_transaction_as_the_cli_shows_them() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path());
    server.run_tool(&["topic", "create", "txo", "--partitions", "1"], b"");
    server.run_tool(
        &["produce", "txo", "--transactional-id", "cli-tx"],
        b"a\nb\n",
    );
    let aborted = server.run_tool(
        &[
            "produce",
            "txo",
            "--transactional-id",
            "cli-gone",
            "--abort",
        ],
        b"c\n",
    );
    let said = String::from_utf8_lossy(&aborted.stderr);
    assert!(said.contains("transaction aborted"), "{said}");

    let consume = |isolation: &str| {
        lines(&server.run_tool(
            &[
                "consume",
                "txo",
                "--from-beginning",
                "--timeout-ms",
                "0",
                "--isolation",
                isolation,
            ],
            b"",
        ))
    };
    assert_eq!(consume("read-committed"), ["a", "b"]);
    assert_eq!(consume("read-uncommitted"), ["a", "b", "c"]);

    let listed = lines(&server.run_tool(&["transaction", "list"], b""));
    assert!(
        listed
            .iter()
            .any(|l| l.starts_with("cli-tx\tCompleteCommit")),
        "{listed:?}"
    );
    assert!(
        listed
            .iter()
            .any(|l| l.starts_with("cli-gone\tCompleteAbort")),
        "{listed:?}"
    );
    let described = server.run_tool(&["transaction", "describe", "cli-tx", "--json"], b"");
    let described: serde_json::Value = serde_json::from_slice(&described.stdout).unwrap();
    assert_eq!(described["state"], "CompleteCommit", "{described}");
    assert_eq!(described["producer_epoch"], 0, "{described}");
    let producers = lines(&server.run_tool(
        &[
            "transaction",
            "producers",
            "--topic",
            "txo",
            "--partition",
            "0",
        ],
        b"",
    ));
    assert_eq!(
        producers.len(),
        3,
        "a header and both producers: {producers:?}"
    );
    assert!(
        producers[1..].iter().all(|l| l.ends_with("\t-")),
        "none open: {producers:?}"
    );

    // A group's lag against the last stable offset (equal to the high watermark here: no
    // transaction is open).
    server.run_tool(
        &[
            "group",
            "reset-offsets",
            "readers",
            "--topic",
            "txo",
            "--to-offset",
            "1",
            "--execute",
        ],
        b"",
    );
    let out = server.run_tool(
        &["group", "describe", "readers", "--json", "--read-committed"],
        b"",
    );
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(d["lag_to"], "last_stable_offset", "{d}");
    let row = &d["partitions"][0];
    // a, b, COMMIT, c, ABORT: the partition ends at 5.
    assert_eq!(row["high_watermark"], 5, "{d}");
    assert_eq!(row["lag"], 4, "{d}");
}
