//! Committed offsets survive losing the group coordinator's broker (issue 13): the offsets
//! topic is replicated, so after the coordinator is killed with SIGKILL, a consumer of the same
//! group (bootstrapped from a surviving broker) reads exactly the records after the committed
//! offsets: none of those the group consumed before, none skipped.

mod common;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use common::{free_port, start, MetaProc, RawClient, Server, BIN};
use tinymq_protocol::messages as m;

/// One MetaServer node and three brokers.
struct Cluster {
    tmp: tempfile::TempDir,
    _meta: MetaProc,
    addrs: Vec<String>,
    brokers: Vec<Option<Server>>,
}

impl Cluster {
    fn start() -> Cluster {
        let tmp = tempfile::tempdir().unwrap();
        let meta = format!("127.0.0.1:{}", free_port());
        let meta_proc = start(1, std::slice::from_ref(&meta), tmp.path());
        let addrs: Vec<String> = (0..3)
            .map(|_| format!("127.0.0.1:{}", free_port()))
            .collect();
        let brokers = (1..=3u32)
            .map(|id| {
                let dir = tmp.path().join(format!("broker-{id}"));
                let extra = ["--replica-lag-time-max-ms", "2000"];
                let addr = &addrs[id as usize - 1];
                Some(Server::start_broker_with(id, addr, &meta, &dir, &extra))
            })
            .collect();
        Cluster {
            tmp,
            _meta: meta_proc,
            addrs,
            brokers,
        }
    }

    fn kill9(&mut self, id: u64) {
        if let Some(mut b) = self.brokers[id as usize - 1].take() {
            b.kill9();
        }
    }

    fn live_other_than(&self, not: u64) -> &str {
        (1..=3u64)
            .find(|&id| id != not && self.brokers[id as usize - 1].is_some())
            .map(|id| self.addrs[id as usize - 1].as_str())
            .expect("a live broker")
    }
}

fn tool_ok(args: &[&str], stdin: &[u8]) -> String {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn tinymq");
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), stdin).unwrap();
    let out = child.wait_with_output().expect("tinymq");
    assert!(
        out.status.success(),
        "tinymq {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..300 {
        if done() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("timed out waiting for {what}");
}

/// Whether every partition of `topic` has a leader and `size` in-sync replicas.
fn isr_complete(topic: &str, bootstrap: &str, size: usize) -> bool {
    let out = Command::new(BIN)
        .args([
            "topic",
            "describe",
            topic,
            "--json",
            "--bootstrap",
            bootstrap,
        ])
        .output()
        .expect("run tinymq");
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout) else {
        return false;
    };
    v["partitions"].as_array().is_some_and(|ps| {
        ps.iter().all(|p| {
            p["leader"].as_u64().is_some_and(|l| l != 0)
                && p["isr"].as_array().is_some_and(|isr| isr.len() == size)
        })
    })
}

/// The broker `bootstrap` names as the coordinator of `group`, if it names one.
fn coordinator(bootstrap: &str, group: &str) -> Option<u64> {
    let mut client = RawClient::handshaken(bootstrap);
    let found = client.call(&m::FindCoordinatorRequest {
        group_id: group.into(),
    });
    found.error.is_none().then_some(u64::from(found.node_id))
}

/// The values a `consume --group` process printed; it must exit successfully, which it does
/// only after its final commit was acknowledged.
fn consume_group(bootstrap: &str, group: &str, count: usize) -> Vec<String> {
    let count = count.to_string();
    let out = tool_ok(
        &[
            "consume",
            "events",
            "--group",
            group,
            "--from-beginning",
            "--count",
            &count,
            "--timeout-ms",
            "30000",
            "--bootstrap",
            bootstrap,
        ],
        b"",
    );
    out.lines().map(String::from).collect()
}

#[test]
fn a_group_resumes_at_its_committed_offsets_after_its_coordinator_is_killed() {
    let mut cluster = Cluster::start();
    let first_broker = cluster.addrs[0].clone();
    let create = [
        "topic",
        "create",
        "events",
        "--partitions",
        "3",
        "--replicas",
        "3",
        "--bootstrap",
        &first_broker,
    ];
    tool_ok(&create, b"");
    wait_for("every replica of events in sync", || {
        isr_complete("events", &first_broker, 3)
    });
    let all: Vec<String> = (0..300).map(|i| format!("v{i:03}")).collect();
    tool_ok(
        &["produce", "events", "--bootstrap", &first_broker],
        (all.join("\n") + "\n").as_bytes(),
    );

    // The first member consumes a third, commits it (acknowledged by the in-sync replicas of
    // the group's offsets partition) and leaves.
    let first = consume_group(&first_broker, "g", 100);
    assert_eq!(first.len(), 100);
    let dead = coordinator(&first_broker, "g").expect("the group has a coordinator");
    cluster.kill9(dead);

    // The MetaServer fences the dead broker and a surviving in-sync replica of the offsets
    // partition becomes the group's coordinator.
    let survivor = cluster.live_other_than(dead).to_string();
    wait_for("a surviving broker to coordinate the group", || {
        coordinator(&survivor, "g").is_some_and(|id| id != dead)
    });
    let second = consume_group(&survivor, "g", 200);

    let first: BTreeSet<String> = first.into_iter().collect();
    let unique: BTreeSet<String> = second.iter().cloned().collect();
    assert_eq!(unique.len(), second.len(), "no record is read twice");
    let again: Vec<&String> = unique.intersection(&first).take(5).collect();
    assert!(
        again.is_empty(),
        "records consumed and committed before the kill were read again, e.g. {again:?}"
    );
    let everything: BTreeSet<String> = first.union(&unique).cloned().collect();
    assert_eq!(
        everything,
        all.into_iter().collect::<BTreeSet<_>>(),
        "the group read every record"
    );
    drop(cluster.tmp);
}
