//! Consumer groups with real processes: members share partitions, rebalance when one joins or
//! is killed, every group sees every message, committed offsets survive a server restart, and
//! a stale member cannot commit.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Server;

/// A `tinymq consume --group` process whose JSON lines are collected as (partition, value).
struct Member {
    child: Child,
    seen: Arc<Mutex<Vec<(u64, String)>>>,
}

impl Member {
    fn start(server: &Server, topic: &str, group: &str) -> Member {
        let mut child = server
            .tool(&[
                "consume",
                topic,
                "--group",
                group,
                "--from-beginning",
                "--format",
                "json",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (out, sink) = (child.stdout.take().unwrap(), seen.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let v: serde_json::Value = serde_json::from_str(&line).unwrap();
                let value = v["value"].as_str().unwrap().to_string();
                sink.lock()
                    .unwrap()
                    .push((v["partition"].as_u64().unwrap(), value));
            }
        });
        Member { child, seen }
    }

    fn values(&self) -> BTreeSet<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|(_, v)| v.clone())
            .collect()
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn produce(server: &Server, topic: &str, from: usize, to: usize) {
    let lines: String = (from..to).map(|i| format!("k{}:m{i}\n", i % 13)).collect();
    server.run_tool(
        &["produce", topic, "--key-separator", ":"],
        lines.as_bytes(),
    );
}

fn describe(server: &Server, group: &str) -> serde_json::Value {
    let out = server
        .tool(&["group", "describe", group, "--json"])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
}

/// Partitions per member once the group is stable with `members` members (waits, bounded).
fn wait_stable(server: &Server, group: &str, members: usize) -> Vec<usize> {
    for _ in 0..300 {
        let d = describe(server, group);
        let counts: Vec<usize> = d["members"]
            .as_array()
            .map(|ms| {
                ms.iter()
                    .map(|m| {
                        m["partitions"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|t| t["partitions"].as_array().unwrap().len())
                            .sum()
                    })
                    .collect()
            })
            .unwrap_or_default();
        if d["state"] == "stable" && counts.len() == members {
            return counts;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!(
        "group {group} never became stable with {members} members: {}",
        describe(server, group)
    );
}

/// Waits (bounded) until the members together have seen every value in `want`.
fn wait_all_seen(members: &[&Member], want: &BTreeSet<String>) {
    for _ in 0..300 {
        let seen: BTreeSet<String> = members.iter().flat_map(|m| m.values()).collect();
        if want.is_subset(&seen) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let seen: BTreeSet<String> = members.iter().flat_map(|m| m.values()).collect();
    panic!(
        "{} of {} messages never arrived",
        want.difference(&seen).count(),
        want.len()
    );
}

fn values(from: usize, to: usize) -> BTreeSet<String> {
    (from..to).map(|i| format!("m{i}")).collect()
}

#[test]
fn members_share_partitions_rebalance_on_join_and_on_sigkill() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    server.run_tool(&["topic", "create", "orders", "--partitions", "6"], b"");
    let a = Member::start(&server, "orders", "g");
    let b = Member::start(&server, "orders", "g");
    let c = Member::start(&server, "orders", "g");
    assert_eq!(
        wait_stable(&server, "g", 3),
        vec![2, 2, 2],
        "three members own two partitions each"
    );
    produce(&server, "orders", 0, 600);
    wait_all_seen(&[&a, &b, &c], &values(0, 600));
    for m in [&a, &b, &c] {
        let partitions: BTreeSet<u64> = m.seen.lock().unwrap().iter().map(|(p, _)| *p).collect();
        assert!(
            partitions.len() <= 2,
            "a member reads only its own partitions: {partitions:?}"
        );
    }

    let d = Member::start(&server, "orders", "g");
    let mut counts = wait_stable(&server, "g", 4);
    counts.sort();
    assert_eq!(counts, vec![1, 1, 2, 2], "a fourth member takes its share");

    // SIGKILL one member: after its session timeout the others take over its partitions.
    let mut a = a;
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let mut counts = wait_stable(&server, "g", 3);
    counts.sort();
    assert_eq!(counts, vec![2, 2, 2]);
    produce(&server, "orders", 600, 1200);
    // At-least-once: every message arrives (records after the last commit may come twice).
    wait_all_seen(&[&b, &c, &d], &values(600, 1200));
}

#[test]
fn groups_see_everything_and_resume_at_committed_offsets_after_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let mut server = Server::start(tmp.path());
    server.run_tool(&["topic", "create", "events", "--partitions", "3"], b"");
    produce(&server, "events", 0, 300);
    for group in ["one", "two"] {
        let out = server.run_tool(
            &[
                "consume",
                "events",
                "--group",
                group,
                "--from-beginning",
                "--count",
                "300",
                "--timeout-ms",
                "20000",
            ],
            b"",
        );
        let got: BTreeSet<String> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(String::from)
            .collect();
        assert_eq!(got, values(0, 300), "group {group} receives every message");
    }
    assert!(server.terminate().success());

    let server = Server::start(tmp.path());
    produce(&server, "events", 300, 400);
    for group in ["one", "two"] {
        let out = server.run_tool(
            &[
                "consume",
                "events",
                "--group",
                group,
                "--timeout-ms",
                "2000",
            ],
            b"",
        );
        let got: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(String::from)
            .collect();
        let unique: BTreeSet<String> = got.iter().cloned().collect();
        assert_eq!(
            unique,
            values(300, 400),
            "group {group} resumes where it committed"
        );
        assert_eq!(
            got.len(),
            100,
            "nothing before the committed offsets is read again"
        );
    }
    let list = server.run_tool(&["group", "list", "--json"], b"");
    let list: serde_json::Value = serde_json::from_slice(&list.stdout).expect("JSON");
    let listed: Vec<(&str, &str)> = list["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .map(|g| (g["group_id"].as_str().unwrap(), g["type"].as_str().unwrap()))
        .collect();
    assert_eq!(listed, [("one", "consumer"), ("two", "consumer")], "{list}");
}
