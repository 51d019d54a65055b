//! Replication across real broker processes (issue 13): a topic with three replicas keeps
//! every acknowledged record and stays writable when any one broker is killed with SIGKILL;
//! with `min_insync_replicas` 2 and two brokers down, `acks=all` writes are refused with
//! NOT_ENOUGH_REPLICAS and succeed again once one returns.

mod common;

use std::time::Duration;

use common::cluster::{describe, stored, tool_ok, tool_ok_with_input, wait_for, wait_isr, Cluster};
use common::{Frozen, RawClient};
use tinymq_protocol::batch::craft::CraftedBatch;
use tinymq_protocol::{messages as m, ErrorCode};

/// Produces `values` (one line each, acknowledged by every in-sync replica: the producer's
/// default `acks=all`) and fails the test unless every one was acknowledged.
fn produce(topic: &str, bootstrap: &str, values: &[String]) {
    tool_ok_with_input(
        &["produce", topic, "--bootstrap", bootstrap],
        values.join("\n").as_bytes(),
    );
}

/// The leader of partition 0 of `topic`.
fn leader_of(topic: &str, bootstrap: &str) -> u32 {
    describe(topic, bootstrap)[0].leader as u32
}

#[test]
fn a_three_replica_topic_keeps_every_acknowledged_record_when_any_broker_is_killed() {
    let mut cluster = Cluster::start(3);
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
            let ps = describe("r", &survivor);
            !ps.is_empty()
                && ps
                    .iter()
                    .all(|p| p.leader != 0 && p.leader != u64::from(victim))
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
        cluster.start_broker(victim);
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
        transactional_id: String::new(),
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
    let mut cluster = Cluster::start(3);
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
    let leader = leader_of("m", &cluster.addrs[0]);
    let leader_addr = cluster.addr(leader).to_string();
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

    cluster.start_broker(followers[0]);
    wait_isr("m", &leader_addr, 2);
    assert_eq!(produce_raw(&mut c, "m", b"two-in-sync", -1), None);
    let stored = stored("m", &leader_addr);
    assert_eq!(stored, ["all-in-sync", "leader-only", "two-in-sync"]);
}

/// A leader that cannot confirm its MetaServer session (here: the MetaServer is paused) stops
/// taking and acknowledging writes before the MetaServer could fence it and elect another
/// leader, and takes them again once its session is confirmed.
#[test]
fn a_leader_cut_off_from_the_metaserver_stops_acknowledging_writes() {
    let cluster = Cluster::start(3);
    tool_ok(&[
        "topic",
        "create",
        "z",
        "--replicas",
        "1",
        "--bootstrap",
        &cluster.addrs[0],
    ]);
    let leader = leader_of("z", &cluster.addrs[0]);
    let mut c = RawClient::handshaken(cluster.addr(leader));
    assert_eq!(produce_raw(&mut c, "z", b"before", 1), None);

    let paused = Frozen::pid(cluster.meta_pid());
    let not_leader = u32::from(ErrorCode::NOT_LEADER.code());
    let mut refused = false;
    for _ in 0..100 {
        if produce_raw(&mut c, "z", b"during", 1) == Some(not_leader) {
            refused = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(paused);
    assert!(
        refused,
        "the leader kept acknowledging without a MetaServer session"
    );
    wait_for("writes to be taken again", || {
        produce_raw(&mut c, "z", b"after", 1).is_none()
    });
    let stored = stored("z", cluster.addr(leader));
    assert!(stored.contains(&"before".to_string()), "{stored:?}");
    assert!(stored.contains(&"after".to_string()), "{stored:?}");
}
