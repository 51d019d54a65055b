//! Issue 27 defect 3: one interrupt delivered twice in the same instant — GNU `timeout -s INT`
//! signals the consumer and then its process group — is one Ctrl-C, not two: a group consumer
//! still commits what it printed and leaves, so the next run prints none of it again and the
//! group has no ghost member holding the partitions.

mod common;

use std::collections::BTreeSet;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use common::consume::Consume;
use common::{Server, BIN};

const RECORDS: usize = 20;

/// A server with topic `t` (2 partitions) holding `RECORDS` records `r0`…
fn server_with_records(data: &std::path::Path) -> Server {
    let server = Server::start(data);
    server.run_tool(&["topic", "create", "t", "--partitions", "2"], b"");
    let input: String = (0..RECORDS).map(|i| format!("r{i}\n")).collect();
    server.run_tool(&["produce", "t"], input.as_bytes());
    server
}

/// What a second member of the group prints: the records the first did not commit.
fn rerun(server: &Server, group: &str) -> Vec<String> {
    let out = server.run_tool(
        &[
            "consume",
            "t",
            "--group",
            group,
            "--from-beginning",
            "--timeout-ms",
            "0",
        ],
        b"",
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect()
}

/// The group's members, from `group describe --json`.
fn members(server: &Server, group: &str) -> Vec<serde_json::Value> {
    let out = server.run_tool(&["group", "describe", group, "--json"], b"");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    json["members"].as_array().cloned().unwrap_or_default()
}

/// Whether a SIGINT sent to process `pid` waits to be taken (`ShdPnd` in /proc, bit 2).
fn sigint_pending(pid: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("ShdPnd:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (libc::SIGINT - 1)) != 0)
}

/// Every record printed exactly once across the two runs.
fn each_once(first: &[String], second: &[String]) {
    let again: Vec<_> = second.iter().filter(|r| first.contains(r)).collect();
    assert!(again.is_empty(), "printed again by the next run: {again:?}");
    let all: BTreeSet<_> = first.iter().chain(second).cloned().collect();
    assert_eq!(all.len(), RECORDS, "first {first:?}, second {second:?}");
}

#[test]
fn sigint_to_the_process_then_its_group_still_commits_and_leaves() {
    let tmp = tempfile::tempdir().unwrap();
    let server = server_with_records(tmp.path());
    let mut cmd = server.tool(&["consume", "t", "--group", "g", "--from-beginning"]);
    // Its own process group, as `timeout` makes one, so the group can be signalled.
    cmd.process_group(0);
    let mut c = Consume::start(cmd);
    c.wait_printed(RECORDS);
    // As `timeout -s INT` does: the process, then its process group, back to back. Sent
    // before the first is taken, the kernel would merge the two; so the second goes once the
    // first is no longer pending (a condition polled, microseconds at most).
    let pid = c.child.id() as i32;
    // SAFETY: signalling our own child and its process group.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0, "kill -INT");
    let taken = common::retry(10_000, Duration::from_micros(100), || {
        (!sigint_pending(pid)).then_some(())
    });
    assert!(taken.is_some(), "the first SIGINT is never taken");
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(-pid, libc::SIGINT) }, 0, "kill -INT");
    let status = c.wait();
    assert_eq!(status.code(), Some(130), "{status:?}; {}", c.stderr());
    let first = c.printed();
    assert!(members(&server, "g").is_empty(), "a ghost member is left");
    each_once(&first, &rerun(&server, "g"));
}

#[test]
fn timeout_s_int_stops_a_group_consumer_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    let server = server_with_records(tmp.path());
    // GNU `timeout` passes a SIGINT it receives on as it passes its own timer's: to the
    // command, then to the command's process group. Signalled once the records are printed
    // (not after a fixed time, which a slow machine may spend starting up), so the run
    // surely has something to commit.
    let mut cmd = Command::new("timeout");
    cmd.args(["--preserve-status", "-s", "INT", "600", BIN])
        .args(["consume", "t", "--group", "g", "--from-beginning"])
        .env("TINYMQ_BOOTSTRAP", &server.addr);
    let mut c = Consume::start(cmd);
    c.wait_printed(RECORDS);
    let timeout_pid = c.child.id() as i32;
    // SAFETY: signalling our own child (`timeout`).
    assert_eq!(
        unsafe { libc::kill(timeout_pid, libc::SIGINT) },
        0,
        "kill -INT"
    );
    let status = c.wait();
    assert_eq!(status.code(), Some(130), "{status:?}; {}", c.stderr());
    let first = c.printed();
    assert_eq!(first.len(), RECORDS, "{first:?}");
    assert!(members(&server, "g").is_empty(), "a ghost member is left");
    each_once(&first, &rerun(&server, "g"));
}
