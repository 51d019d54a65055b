//! The short chaos schedule CI runs: the real `tinymq-chaos` binary drives three MetaServer
//! nodes and three brokers (the `tinymq` binary next to it) through a few faults of every
//! kind, and the checker must find nothing: no acknowledged value lost, no duplicate, nothing
//! unexpected, order kept per partition; and the same with the transactional workload.
//! Durations are reported, never asserted.

use std::path::PathBuf;
use std::process::Command;

/// Builds `tinymq` (this crate's tests do not build other packages' binaries) and returns
/// where it is: next to `tinymq-chaos`, where the tool looks by default.
fn tinymq_binary() -> PathBuf {
    let chaos = PathBuf::from(env!("CARGO_BIN_EXE_tinymq-chaos"));
    let status = Command::new(env!("CARGO"))
        .args(["build", "-q", "-p", "tinymq-cli", "--bin", "tinymq"])
        .status()
        .expect("run cargo build");
    assert!(status.success(), "cargo build -p tinymq-cli failed");
    let bin = chaos.with_file_name("tinymq");
    assert!(bin.exists(), "no tinymq binary at {}", bin.display());
    bin
}

#[test]
fn a_short_fault_schedule_loses_duplicates_and_reorders_nothing() {
    let tinymq = tinymq_binary();
    let out = Command::new(env!("CARGO_BIN_EXE_tinymq-chaos"))
        .arg("--tinymq")
        .arg(&tinymq)
        .args(["--seed", "13", "--faults", "7"])
        .args(["--kinds", "leader-kill:2,zombie:2,cut:2,meta-kill:1"])
        .args(["--partitions", "3", "--producers", "2", "--rate", "50"])
        .args(["--down-min-ms", "500", "--down-max-ms", "2000"])
        // One side of the MetaServer's 1.5 s session timeout and the other: a zombie that is
        // deposed and one that is not.
        .args(["--zombie-min-ms", "500", "--zombie-max-ms", "4000"])
        .args(["--cut-min-ms", "500", "--cut-max-ms", "4000"])
        .args(["--gap-min-ms", "200", "--gap-max-ms", "500"])
        .args(["--replica-lag-time-max-ms", "2000"])
        .output()
        .expect("run tinymq-chaos");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        out.status.success(),
        "tinymq-chaos failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    for line in [
        "acknowledged but lost: 0",
        "stored at another offset than acknowledged: 0",
        "duplicates: 0",
        "unexpected (never sent): 0",
        "per-partition order violations: 0",
        "processes that exited by themselves: 0",
        "verdict: PASS",
    ] {
        assert!(stdout.contains(line), "summary lacks {line:?}:\n{stdout}");
    }
    // The schedule really ran: every fault of the plan hit a process.
    for (kind, n) in [
        ("leader-kill", 2),
        ("zombie", 2),
        ("cut", 2),
        ("meta-kill", 1),
    ] {
        assert_eq!(
            applied(&stdout, kind),
            Some(n),
            "{kind} faults applied:\n{stdout}"
        );
    }
    let acknowledged = stdout
        .lines()
        .find_map(|l| l.strip_prefix("values: "))
        .and_then(|l| l.split(", ").nth(1))
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok());
    assert!(
        acknowledged.is_some_and(|n| n > 0),
        "no value was acknowledged:\n{stdout}"
    );
}

/// The `txn` workload through a few faults of every kind, coordinator kills and producer kills
/// included: committed transactions whole, nothing aborted or abandoned visible, abandoned
/// transactions aborted by their coordinator's timer, group offsets of committed
/// transactions, no hanging transaction.
#[test]
fn a_short_transactional_fault_schedule_commits_whole_and_aborts_nothing_visible() {
    let tinymq = tinymq_binary();
    let kinds = "leader-kill:2,coordinator-kill:2,producer-kill:2,zombie,cut,meta-kill";
    let out = Command::new(env!("CARGO_BIN_EXE_tinymq-chaos"))
        .arg("--tinymq")
        .arg(&tinymq)
        .args(["--workload", "txn", "--seed", "29", "--faults", "9"])
        .args(["--kinds", kinds])
        .args(["--partitions", "3", "--producers", "3"])
        .args([
            "--transaction-timeout-ms",
            "3000",
            "--abandon-slack-ms",
            "5000",
        ])
        .args(["--down-min-ms", "500", "--down-max-ms", "2000"])
        .args(["--zombie-min-ms", "3000", "--zombie-max-ms", "11000"])
        .args(["--cut-min-ms", "3000", "--cut-max-ms", "6000"])
        .args(["--gap-min-ms", "200", "--gap-max-ms", "500"])
        .args(["--replica-lag-time-max-ms", "2000"])
        .output()
        .expect("run tinymq-chaos");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        out.status.success(),
        "tinymq-chaos failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    for line in [
        "committed transactions not whole: 0",
        "aborted or abandoned records visible: 0",
        "uncertain transactions partly visible: 0",
        "unexpected (never sent): 0",
        "committed records missing from read_uncommitted: 0",
        "abandoned transactions not aborted in time: 0",
        "group offsets not of the last committed transaction: 0",
        "hanging transactions (LSO below HW after healing): 0",
        "processes that exited by themselves: 0",
        "verdict: PASS",
    ] {
        assert!(stdout.contains(line), "summary lacks {line:?}:\n{stdout}");
    }
    for (kind, n) in [
        ("leader-kill", 2),
        ("coordinator-kill", 2),
        ("producer-kill", 2),
        ("zombie", 1),
        ("cut", 1),
        ("meta-kill", 1),
    ] {
        assert_eq!(
            applied(&stdout, kind),
            Some(n),
            "{kind} faults applied:\n{stdout}"
        );
    }
    let count = |what: &str| {
        let line = stdout
            .lines()
            .find_map(|l| l.strip_prefix("transactions: "));
        line.and_then(|l| l.split(", ").find(|part| part.ends_with(what)))
            .and_then(|part| part.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
    };
    assert!(
        count("committed").is_some_and(|n| n > 0),
        "none committed:\n{stdout}"
    );
    assert!(
        count("aborted").is_some_and(|n| n > 0),
        "none aborted:\n{stdout}"
    );
    assert_eq!(
        count("abandoned"),
        Some(2),
        "abandoned transactions:\n{stdout}"
    );
}

/// How many faults of `kind` the summary says were applied.
fn applied(stdout: &str, kind: &str) -> Option<u32> {
    stdout
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{kind} ")) && l.contains("applied"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse::<u32>().ok())
}
