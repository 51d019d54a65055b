//! Consumers ride out a broker's death (issue 11, item 6): running `consume` and
//! `consume --group` keep reading the partitions of the live broker while another is killed,
//! a consumer started while it is fenced reads the live partitions, each says on stderr which
//! partitions it cannot read, and all of them read the dead broker's partitions once it is
//! back. A broker that hangs (SIGSTOP) stalls no consumer either. Nothing is skipped and,
//! with no rebalance, nothing is read twice.

mod common;

use std::process::Command;
use std::time::Duration;

use common::consume::Consume;
use common::{free_port, start, Frozen, RawClient, Server, BIN};
use tinymq_protocol::messages as m;

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

/// The leader id of each partition of `topic`, `None` while offline.
fn leaders(topic: &str, bootstrap: &str) -> Vec<Option<u64>> {
    let out = tool_ok(
        &[
            "topic",
            "describe",
            topic,
            "--json",
            "--bootstrap",
            bootstrap,
        ],
        b"",
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["leader"].as_u64().filter(|l| *l != 0))
        .collect()
}

fn broker_live(meta: &str, id: u64) -> Option<bool> {
    let out = Command::new(BIN)
        .args(["cluster", "status", "--json", "--bootstrap", meta])
        .output()
        .ok()?;
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    status["brokers"]
        .as_array()?
        .iter()
        .find(|b| b["id"].as_u64() == Some(id))
        .and_then(|b| b["live"].as_bool())
}

/// Produces `count` records `p{partition}-{phase}-{i}` to one partition.
fn produce(bootstrap: &str, partition: u32, phase: &str, count: usize) -> Vec<String> {
    let values: Vec<String> = (0..count)
        .map(|i| format!("p{partition}-{phase}-{i}"))
        .collect();
    let p = partition.to_string();
    tool_ok(
        &["produce", "t", "--partition", &p, "--bootstrap", bootstrap],
        (values.join("\n") + "\n").as_bytes(),
    );
    values
}

fn consume(bootstrap: &str, extra: &[&str]) -> Consume {
    let mut command = Command::new(BIN);
    command
        .args(["consume", "t", "--from-beginning", "--format", "json"])
        .args(extra)
        .args(["--bootstrap", bootstrap]);
    Consume::start(command)
}

/// The values a consumer printed, sorted.
fn values(c: &Consume) -> Vec<String> {
    let mut v: Vec<String> = c
        .printed()
        .iter()
        .map(|l| {
            let j: serde_json::Value = serde_json::from_str(l).unwrap();
            j["value"].as_str().unwrap().to_string()
        })
        .collect();
    v.sort();
    v
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// The values a consumer printed once it has stopped printing for a second, sorted: a late
/// duplicate shows up before they are compared.
fn settled_values(c: &Consume) -> Vec<String> {
    c.settled();
    values(c)
}

/// Asserts that `got` holds each of `want` exactly once, naming a few missing, repeated and
/// unexpected values otherwise (rather than printing hundreds).
fn assert_once(what: &str, got: &[String], want: &[String]) {
    use std::collections::BTreeMap;
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for v in got {
        *count.entry(v).or_default() += 1;
    }
    let missing: Vec<&String> = want
        .iter()
        .filter(|v| !count.contains_key(v.as_str()))
        .collect();
    let repeated: Vec<&&str> = count
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(v, _)| v)
        .collect();
    let unexpected: Vec<&&str> = count
        .keys()
        .filter(|v| !want.iter().any(|w| w == **v))
        .collect();
    assert!(
        missing.is_empty() && repeated.is_empty() && unexpected.is_empty(),
        "{what}: {} of {} printed; missing {} (e.g. {:?}), repeated {} (e.g. {:?}), unexpected {} \
         (e.g. {:?})",
        got.len(),
        want.len(),
        missing.len(),
        &missing[..missing.len().min(5)],
        repeated.len(),
        &repeated[..repeated.len().min(5)],
        unexpected.len(),
        &unexpected[..unexpected.len().min(5)],
    );
}

/// A MetaServer, two brokers and a 4-partition topic `t` with partitions on both, and a group
/// coordinated by broker 1 (the one that stays up).
struct Cluster {
    tmp: tempfile::TempDir,
    meta_addr: String,
    addrs: Vec<String>,
    _meta: common::MetaProc,
    b1: Server,
    b2: Server,
    placed: Vec<Option<u64>>,
    /// Partitions led by broker 1 and by broker 2.
    live: Vec<u32>,
    dead: Vec<u32>,
    group: String,
}

impl Cluster {
    fn start() -> Cluster {
        let tmp = tempfile::tempdir().unwrap();
        let meta_addr = format!("127.0.0.1:{}", free_port());
        let meta = start(1, std::slice::from_ref(&meta_addr), tmp.path());
        let addrs: Vec<String> = (0..2)
            .map(|_| format!("127.0.0.1:{}", free_port()))
            .collect();
        let b1 = Server::start_broker(1, &addrs[0], &meta_addr, &tmp.path().join("broker-1"));
        let b2 = Server::start_broker(2, &addrs[1], &meta_addr, &tmp.path().join("broker-2"));
        let bootstrap = addrs[0].as_str();
        tool_ok(
            &[
                "topic",
                "create",
                "t",
                "--partitions",
                "4",
                // One copy each: a killed broker's partitions go offline (not over).
                "--replicas",
                "1",
                "--bootstrap",
                bootstrap,
            ],
            b"",
        );
        let placed = leaders("t", bootstrap);
        let on = |broker: u64| -> Vec<u32> {
            (0..4u32)
                .filter(|p| placed[*p as usize] == Some(broker))
                .collect()
        };
        let (live, dead) = (on(1), on(2));
        assert!(!live.is_empty() && !dead.is_empty(), "spread: {placed:?}");
        let mut raw = RawClient::handshaken(bootstrap);
        let group = (0..100)
            .map(|i| format!("g{i}"))
            .find(|g| {
                let found = raw.call(&m::FindCoordinatorRequest {
                    group_id: g.clone(),
                    key_type: 0,
                });
                found.error.is_none() && found.node_id == 1
            })
            .expect("a group coordinated by broker 1");
        Cluster {
            tmp,
            meta_addr,
            addrs,
            _meta: meta,
            b1,
            b2,
            placed,
            live,
            dead,
            group,
        }
    }

    fn bootstrap(&self) -> &str {
        &self.b1.addr
    }

    fn restart_b2(&mut self) {
        self.b2 = Server::start_broker(
            2,
            &self.addrs[1],
            &self.meta_addr,
            &self.tmp.path().join("broker-2"),
        );
    }

    /// Waits (bounded) until every partition has its original leader again.
    fn wait_placed(&self) {
        wait_for("broker 2 to lead its partitions again", || {
            leaders("t", self.bootstrap()) == self.placed
        });
    }
}

#[test]
fn consumers_keep_reading_live_partitions_while_a_broker_is_down() {
    let mut cluster = Cluster::start();
    let bootstrap = cluster.bootstrap().to_string();
    let bootstrap = bootstrap.as_str();
    let (live, dead) = (cluster.live.clone(), cluster.dead.clone());

    let mut expected = Vec::new();
    for p in 0..4 {
        expected.extend(produce(bootstrap, p, "before", 50));
    }
    let mut plain = consume(bootstrap, &[]);
    let mut member = consume(bootstrap, &["--group", &cluster.group]);
    plain.wait_printed(200);
    member.wait_printed(200);

    cluster.b2.kill9();
    for p in &live {
        expected.extend(produce(bootstrap, *p, "during", 50));
    }
    let readable = 200 + 50 * live.len();
    plain.wait_printed(readable);
    member.wait_printed(readable);
    assert!(
        plain.running() && member.running(),
        "neither consumer exited"
    );

    wait_for("broker 2 to be fenced", || {
        broker_live(&cluster.meta_addr, 2) == Some(false)
    });
    let mut late = consume(bootstrap, &[]);
    late.wait_printed(100 * live.len());
    assert!(late.running());
    for c in [&plain, &member, &late] {
        assert!(
            c.stderr().contains("\"unavailable\":[{"),
            "a status line names the unreadable partitions: {}",
            c.stderr()
        );
    }

    cluster.restart_b2();
    cluster.wait_placed();
    for p in &dead {
        expected.extend(produce(bootstrap, *p, "after", 50));
    }
    let expected = sorted(expected);
    for (name, c) in [("plain", &plain), ("member", &member), ("late", &late)] {
        c.wait_printed(expected.len());
        assert_once(
            &format!("{name} read every record once"),
            &settled_values(c),
            &expected,
        );
        assert!(
            c.stderr().contains("{\"status\":{\"unavailable\":[]}}"),
            "{name} says when everything is readable again: {}",
            c.stderr()
        );
    }
}

/// A broker that hangs (SIGSTOP: connections stay open, nothing answers) stalls no consumer:
/// the live broker's new records are printed while the hung one is still registered as live,
/// i.e. before fencing could make its partitions simply offline; once it resumes, its
/// partitions are read too, every record exactly once.
#[test]
fn consumers_keep_reading_live_partitions_while_a_broker_hangs() {
    let cluster = Cluster::start();
    let bootstrap = cluster.bootstrap();
    let (live, dead) = (&cluster.live, &cluster.dead);

    let mut expected = Vec::new();
    for p in 0..4 {
        expected.extend(produce(bootstrap, p, "before", 50));
    }
    let mut plain = consume(bootstrap, &[]);
    let mut member = consume(bootstrap, &["--group", &cluster.group]);
    plain.wait_printed(200);
    member.wait_printed(200);

    let frozen = Frozen::stop(&cluster.b2);
    for p in live {
        expected.extend(produce(bootstrap, *p, "during", 50));
    }
    let readable = 200 + 50 * live.len();
    for _ in 0..300 {
        if plain.printed().len() >= readable && member.printed().len() >= readable {
            break;
        }
        if broker_live(&cluster.meta_addr, 2) == Some(false) {
            panic!(
                "broker 2 was fenced before the consumers printed the live partitions' records \
                 (plain {}, member {} of {readable}): the hung broker stalled them",
                plain.printed().len(),
                member.printed().len()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let so_far = sorted(expected.clone());
    for (name, c) in [("plain", &plain), ("member", &member)] {
        assert_once(
            &format!("{name} read the live partitions while broker 2 hung"),
            &settled_values(c),
            &so_far,
        );
    }
    assert!(
        plain.running() && member.running(),
        "neither consumer exited"
    );

    drop(frozen);
    cluster.wait_placed();
    for p in dead {
        expected.extend(produce(bootstrap, *p, "after", 50));
    }
    let expected = sorted(expected);
    for (name, c) in [("plain", &plain), ("member", &member)] {
        c.wait_printed(expected.len());
        assert_once(
            &format!("{name} read every record once"),
            &settled_values(c),
            &expected,
        );
    }
}
