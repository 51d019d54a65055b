//! Replication across real broker processes (issue 13): a topic with three replicas keeps
//! every acknowledged record and stays writable when any one broker is killed with SIGKILL;
//! with `min_insync_replicas` 2 and two brokers down, `acks=all` writes are refused with
//! NOT_ENOUGH_REPLICAS and succeed again once one returns.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{free_port, start, MetaProc, RawClient, Server, BIN};
use tinymq_protocol::batch::craft::CraftedBatch;
use tinymq_protocol::{messages as m, ErrorCode};

/// Followers leave the ISR after this long without catching up (the default is 10 s).
const LAG_MAX_MS: &str = "2000";

/// One MetaServer node and three brokers.
struct Cluster {
    _tmp: tempfile::TempDir,
    _meta: MetaProc,
    meta: String,
    addrs: Vec<String>,
    brokers: Vec<Option<Server>>,
}

impl Cluster {
    fn start() -> Cluster {
        let tmp = tempfile::tempdir().unwrap();
        let meta_addrs = vec![format!("127.0.0.1:{}", free_port())];
        let meta_proc = start(1, &meta_addrs, tmp.path());
        let addrs: Vec<String> = (0..3)
            .map(|_| format!("127.0.0.1:{}", free_port()))
            .collect();
        let mut cluster = Cluster {
            meta: meta_addrs[0].clone(),
            _meta: meta_proc,
            addrs,
            brokers: vec![None, None, None],
            _tmp: tmp,
        };
        for id in 1..=3 {
            cluster.restart(id);
        }
        cluster
    }

    fn restart(&mut self, id: u32) {
        let i = id as usize - 1;
        let dir = self._tmp.path().join(format!("broker-{id}"));
        let extra = ["--replica-lag-time-max-ms", LAG_MAX_MS];
        self.brokers[i] = Some(Server::start_broker_with(
            id,
            &self.addrs[i],
            &self.meta,
            &dir,
            &extra,
        ));
    }

    fn kill9(&mut self, id: u32) {
        if let Some(mut b) = self.brokers[id as usize - 1].take() {
            b.kill9();
        }
    }

    /// The address of a live broker other than `not`.
    fn live_other_than(&self, not: u32) -> &str {
        (1..=3)
            .find(|&id| id != not && self.brokers[id as usize - 1].is_some())
            .map(|id| self.addrs[id as usize - 1].as_str())
            .expect("a live broker")
    }
}

fn tool(args: &[&str]) -> std::process::Output {
    Command::new(BIN).args(args).output().expect("run tinymq")
}

fn tool_ok(args: &[&str]) -> String {
    let out = tool(args);
    assert!(
        out.status.success(),
        "tinymq {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Each partition's (leader or 0, ISR).
fn partitions(topic: &str, bootstrap: &str) -> Vec<(u64, Vec<u64>)> {
    let out = tool(&[
        "topic",
        "describe",
        topic,
        "--json",
        "--bootstrap",
        bootstrap,
    ]);
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout) else {
        return vec![];
    };
    v["partitions"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .map(|p| {
                    let leader = p["leader"].as_u64().unwrap_or(0);
                    let isr = p["isr"]
                        .as_array()
                        .map(|a| a.iter().filter_map(|i| i.as_u64()).collect())
                        .unwrap_or_default();
                    (leader, isr)
                })
                .collect()
        })
        .unwrap_or_default()
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

fn wait_isr(topic: &str, bootstrap: &str, size: usize) {
    wait_for(&format!("{topic}'s ISR to have {size} replicas"), || {
        let ps = partitions(topic, bootstrap);
        !ps.is_empty() && ps.iter().all(|(l, isr)| *l != 0 && isr.len() == size)
    });
}

/// Produces `values` (one line each, acknowledged by every in-sync replica: the producer's
/// default `acks=all`) and fails the test unless every one was acknowledged.
fn produce(topic: &str, bootstrap: &str, values: &[String]) {
    let mut child = Command::new(BIN)
        .args(["produce", topic, "--bootstrap", bootstrap])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn produce");
    let mut stdin = child.stdin.take().expect("stdin");
    std::io::Write::write_all(&mut stdin, values.join("\n").as_bytes()).expect("write");
    drop(stdin);
    let out = child.wait_with_output().expect("produce");
    assert!(
        out.status.success(),
        "produce: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every value stored in `topic`, sorted: read until nothing new comes for a while.
fn stored(topic: &str, bootstrap: &str) -> Vec<String> {
    let out = tool_ok(&[
        "consume",
        topic,
        "--from-beginning",
        "--timeout-ms",
        "3000",
        "--bootstrap",
        bootstrap,
    ]);
    let mut values: Vec<String> = out.lines().map(String::from).collect();
    values.sort();
    values
}

#[test]
fn a_three_replica_topic_keeps_every_acknowledged_record_when_any_broker_is_killed() {
    let mut cluster = Cluster::start();
    tool_ok(&[
        "topic",
        "create",
        "r",
        "--partitions",
        "3",
        "--replicas",
        "3",
        "--bootstrap",
        &cluster.addrs[0],
    ]);
    wait_isr("r", &cluster.addrs[0], 3);
    let mut expected: Vec<String> = Vec::new();
    for victim in 1..=3u32 {
        let before: Vec<String> = (0..200)
            .map(|i| format!("before-{victim}-{i:03}"))
            .collect();
        produce("r", cluster.live_other_than(victim), &before);
        expected.extend(before);
        cluster.kill9(victim);
        let survivor = cluster.live_other_than(victim).to_string();
        // Failover: the MetaServer fences the dead broker when its session ends and moves
        // each of its leaderships to an in-sync survivor.
        wait_for("every partition to have a live leader", || {
            let ps = partitions("r", &survivor);
            !ps.is_empty() && ps.iter().all(|(l, _)| *l != 0 && *l != u64::from(victim))
        });
        // Writes go on: the producer follows the partitions to their new leaders.
        let after: Vec<String> = (0..100).map(|i| format!("after-{victim}-{i:03}")).collect();
        produce("r", &survivor, &after);
        expected.extend(after);
        expected.sort();
        assert_eq!(
            stored("r", &survivor),
            expected,
            "every acknowledged record once, after broker {victim} was killed"
        );
        cluster.restart(victim);
        wait_isr("r", &survivor, 3);
    }
}

fn produce_raw(c: &mut RawClient, topic: &str, value: &[u8], acks: i32) -> Option<u32> {
    let records = CraftedBatch::honest(common_now_ms(), &[value]).encode();
    let r = c.call(&m::ProduceRequest {
        acks,
        timeout_ms: 10_000,
        partitions: vec![m::ProducePartition {
            topic: topic.into(),
            partition: 0,
            records,
        }],
    });
    assert!(r.error.is_none(), "{:?}", r.error);
    r.partitions[0].error.as_ref().map(|e| e.code)
}

fn common_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[test]
fn acks_all_writes_are_refused_below_min_insync_replicas_and_resume_when_a_replica_returns() {
    let mut cluster = Cluster::start();
    tool_ok(&[
        "topic",
        "create",
        "m",
        "--replicas",
        "3",
        "--bootstrap",
        &cluster.addrs[0],
    ]);
    wait_isr("m", &cluster.addrs[0], 3);
    let leader = partitions("m", &cluster.addrs[0])[0].0 as u32;
    let leader_addr = cluster.addrs[leader as usize - 1].clone();
    let followers: Vec<u32> = (1..=3).filter(|&id| id != leader).collect();
    let mut c = RawClient::handshaken(&leader_addr);
    assert_eq!(produce_raw(&mut c, "m", b"all-in-sync", -1), None);

    for &f in &followers {
        cluster.kill9(f);
    }
    wait_isr("m", &leader_addr, 1);
    let not_enough = u32::from(ErrorCode::NOT_ENOUGH_REPLICAS.code());
    assert_eq!(produce_raw(&mut c, "m", b"refused", -1), Some(not_enough));
    // acks=1 asks only for the leader's own write.
    assert_eq!(produce_raw(&mut c, "m", b"leader-only", 1), None);

    cluster.restart(followers[0]);
    wait_isr("m", &leader_addr, 2);
    assert_eq!(produce_raw(&mut c, "m", b"two-in-sync", -1), None);
    let stored = stored("m", &leader_addr);
    assert_eq!(stored, ["all-in-sync", "leader-only", "two-in-sync"]);
}

fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill {sig} {pid}");
}

/// A leader that cannot confirm its MetaServer session (here: the MetaServer is paused) stops
/// taking and acknowledging writes before the MetaServer could fence it and elect another
/// leader, and takes them again once its session is confirmed.
#[test]
fn a_leader_cut_off_from_the_metaserver_stops_acknowledging_writes() {
    let cluster = Cluster::start();
    tool_ok(&[
        "topic",
        "create",
        "z",
        "--replicas",
        "1",
        "--bootstrap",
        &cluster.addrs[0],
    ]);
    let leader = partitions("z", &cluster.addrs[0])[0].0 as usize;
    let mut c = RawClient::handshaken(&cluster.addrs[leader - 1]);
    assert_eq!(produce_raw(&mut c, "z", b"before", 1), None);

    let meta_pid = cluster._meta.pid();
    signal(meta_pid, "-STOP");
    let not_leader = u32::from(ErrorCode::NOT_LEADER.code());
    let mut refused = false;
    for _ in 0..100 {
        if produce_raw(&mut c, "z", b"during", 1) == Some(not_leader) {
            refused = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    signal(meta_pid, "-CONT");
    assert!(
        refused,
        "the leader kept acknowledging without a MetaServer session"
    );
    wait_for("writes to be taken again", || {
        produce_raw(&mut c, "z", b"after", 1).is_none()
    });
    let stored = stored("z", &cluster.addrs[leader - 1]);
    assert!(stored.contains(&"before".to_string()), "{stored:?}");
    assert!(stored.contains(&"after".to_string()), "{stored:?}");
}
