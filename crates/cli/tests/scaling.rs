//! Scaling, draining and controlled shutdown across real broker processes (issue 13, items 5
//! and 6), each while an idempotent `acks=all` producer keeps sending unique values: a broker
//! that joins gets replicas through `cluster rebalance`, `broker drain` empties a broker, and
//! SIGTERM of a leading broker moves its leaderships before it exits. Afterwards every
//! acknowledged value is stored exactly once and the producer exited 0 (no record failed).

mod common;

use std::process::Command;

use common::cluster::{describe, stored, tool_ok, wait_all_in_sync, wait_for, Cluster, Producer};
use common::consume::Consume;
use common::{RawClient, BIN};
use tinymq_protocol::messages as m;

/// Values the producer sends before and after each step, at least.
const VALUES_PER_PHASE: usize = 300;

/// The moves of a `--json` plan: (topic, partition, from, to).
fn moves(plan: &str) -> Vec<(String, u64, Vec<u64>, Vec<u64>)> {
    let v: serde_json::Value = serde_json::from_str(plan).expect("plan JSON");
    let ids = |v: &serde_json::Value| -> Vec<u64> {
        v.as_array()
            .expect("replica list")
            .iter()
            .map(|i| i.as_u64().expect("id"))
            .collect()
    };
    v["moves"]
        .as_array()
        .expect("moves")
        .iter()
        .map(|m| {
            (
                m["topic"].as_str().expect("topic").to_string(),
                m["partition"].as_u64().expect("partition"),
                ids(&m["from"]),
                ids(&m["to"]),
            )
        })
        .collect()
}

fn create(topic: &str, partitions: &str, bootstrap: &str) -> String {
    tool_ok(&[
        "topic",
        "create",
        topic,
        "--partitions",
        partitions,
        "--bootstrap",
        bootstrap,
    ])
}

/// Checks what the producer sent against what the topic holds: each value exactly once.
fn assert_stored_once(topic: &str, bootstrap: &str, acknowledged: &[String]) {
    let stored = stored(topic, bootstrap);
    assert_eq!(
        stored.len(),
        acknowledged.len(),
        "as many stored as acknowledged"
    );
    assert_eq!(stored, acknowledged, "every acknowledged value, once");
}

#[test]
fn a_broker_that_joins_gets_replicas_through_rebalance_while_clients_keep_running() {
    let mut cluster = Cluster::start(3);
    let b1 = cluster.addr(1).to_string();
    // No --replicas in a three-broker cluster: three copies, and two must be in sync.
    let created = create("s", "6", &b1);
    assert!(
        created.contains("3 replicas (min_insync_replicas 2"),
        "{created}"
    );
    wait_all_in_sync("s", &b1);
    let bootstrap = cluster.bootstrap();
    let producer = Producer::start("s", &bootstrap, "s");
    let mut group = Command::new(BIN);
    group.args([
        "consume",
        "s",
        "--group",
        "g",
        "--from-beginning",
        "--bootstrap",
        &bootstrap,
    ]);
    let consumer = Consume::start(group);
    producer.wait_written(VALUES_PER_PHASE);

    cluster.start_broker(4);
    // A dry run prints the plan and moves nothing.
    let dry = moves(&tool_ok(&[
        "cluster",
        "rebalance",
        "--dry-run",
        "--json",
        "--bootstrap",
        &b1,
    ]));
    assert!(
        dry.iter().any(|(_, _, _, to)| to.contains(&4)),
        "the plan puts replicas on broker 4: {dry:?}"
    );
    assert!(describe("s", &b1)
        .iter()
        .all(|p| !p.replicas.contains(&4) && !p.reassigning));

    let plan = tool_ok(&[
        "cluster",
        "rebalance",
        "--json",
        "--wait",
        "--wait-timeout-ms",
        "120000",
        "--bootstrap",
        &b1,
    ]);
    let done = moves(&plan);
    assert!(!done.is_empty(), "{plan}");
    for (topic, partition, from, to) in &done {
        assert_eq!(from.len(), to.len(), "{topic}/{partition} keeps its copies");
    }
    let after = describe("s", &b1);
    let on_4: Vec<_> = after.iter().filter(|p| p.replicas.contains(&4)).collect();
    assert!(!on_4.is_empty(), "broker 4 holds replicas: {after:?}");
    assert!(
        on_4.iter().all(|p| p.isr.contains(&4)),
        "and is in their ISR: {after:?}"
    );
    assert!(
        after
            .iter()
            .all(|p| p.replicas.len() == 3 && !p.reassigning),
        "{after:?}"
    );
    let held = |b: u64| after.iter().filter(|p| p.replicas.contains(&b)).count();
    assert!(
        (1..=4).all(|b| (4..=5).contains(&held(b))),
        "18 replicas spread over 4 brokers: {after:?}"
    );

    // Writes go on after the moves too, and nothing is lost or doubled.
    producer.wait_written(producer.written() + VALUES_PER_PHASE);
    let acknowledged = producer.finish();
    assert_stored_once("s", &b1, &acknowledged);
    // The group read every value (at least once: a rebalance of the group may repeat some).
    wait_for("the group to read every value", || {
        let read: std::collections::BTreeSet<String> = consumer.printed().into_iter().collect();
        acknowledged.iter().all(|v| read.contains(v))
    });
    let read: std::collections::BTreeSet<String> = consumer.printed().into_iter().collect();
    let sent: std::collections::BTreeSet<String> = acknowledged.iter().cloned().collect();
    assert_eq!(read, sent, "the group read only what was sent");
}

#[test]
fn draining_a_broker_moves_every_replica_off_it_while_writes_go_on() {
    let mut cluster = Cluster::start(4);
    let b1 = cluster.addr(1).to_string();
    tool_ok(&[
        "topic",
        "create",
        "d",
        "--partitions",
        "4",
        "--replicas",
        "3",
        "--bootstrap",
        &b1,
    ]);
    wait_all_in_sync("d", &b1);
    let before = describe("d", &b1);
    assert!(before.iter().any(|p| p.replicas.contains(&2)), "{before:?}");
    let producer = Producer::start("d", &cluster.bootstrap(), "d");
    producer.wait_written(VALUES_PER_PHASE);

    let dry = tool_ok(&["broker", "drain", "2", "--dry-run", "--bootstrap", &b1]);
    assert!(dry.contains("would move"), "{dry}");
    let plan = tool_ok(&[
        "broker",
        "drain",
        "2",
        "--json",
        "--wait",
        "--wait-timeout-ms",
        "120000",
        "--bootstrap",
        &b1,
    ]);
    let done = moves(&plan);
    let held_by_2 = before.iter().filter(|p| p.replicas.contains(&2)).count();
    assert_eq!(done.len(), held_by_2, "one move per replica on 2: {plan}");
    assert!(done
        .iter()
        .all(|(_, _, from, to)| from.contains(&2) && !to.contains(&2)));
    let after = describe("d", &b1);
    assert!(
        after
            .iter()
            .all(|p| !p.replicas.contains(&2) && !p.isr.contains(&2) && p.leader != 2),
        "broker 2 holds nothing: {after:?}"
    );
    assert!(after.iter().all(|p| p.replicas.len() == 3), "{after:?}");
    // Nothing left to drain (asked of the MetaServer node itself, which answers too).
    let again = moves(&tool_ok(&[
        "broker",
        "drain",
        "2",
        "--json",
        "--bootstrap",
        &cluster.meta,
    ]));
    assert!(again.is_empty(), "{again:?}");

    producer.wait_written(producer.written() + VALUES_PER_PHASE);
    let acknowledged = producer.finish();
    // Broker 2 can now stop without touching any partition.
    assert!(cluster.terminate(2).success());
    assert_stored_once("d", &b1, &acknowledged);
}

/// Each partition's leader as the MetaServer has it (0: none), read from the MetaServer node
/// itself so that no broker's view can lag behind.
fn leaders_at_meta(meta: &str, topic: &str) -> Vec<u64> {
    let read = RawClient::handshaken(meta).call(&m::MetaReadRequest {
        since_version: 0,
        wait_ms: 0,
    });
    assert!(read.error.is_none(), "{:?}", read.error);
    let image: serde_json::Value = serde_json::from_slice(&read.image).expect("image JSON");
    image["topics"][topic]["partitions"]
        .as_array()
        .expect("the topic's partitions")
        .iter()
        .map(|p| p["leader"].as_u64().unwrap_or(0))
        .collect()
}

#[test]
fn sigterm_moves_a_brokers_leaderships_before_it_exits_and_producers_see_no_error() {
    let mut cluster = Cluster::start(3);
    let b1 = cluster.addr(1).to_string();
    tool_ok(&[
        "topic",
        "create",
        "c",
        "--partitions",
        "6",
        "--replicas",
        "3",
        "--bootstrap",
        &b1,
    ]);
    wait_all_in_sync("c", &b1);
    let victim = 2u64;
    assert!(
        leaders_at_meta(&cluster.meta, "c").contains(&victim),
        "broker {victim} leads partitions"
    );
    let producer = Producer::start("c", &cluster.bootstrap(), "c");
    producer.wait_written(VALUES_PER_PHASE);

    let stopped = cluster.terminate(victim as u32);
    assert!(stopped.success(), "broker {victim} exited with {stopped}");
    // The moment it has exited, the MetaServer has every leadership elsewhere: a controlled
    // shutdown does not wait for the session to expire.
    let leaders = leaders_at_meta(&cluster.meta, "c");
    assert!(
        leaders.iter().all(|l| *l != 0 && *l != victim),
        "partitions led by live brokers: {leaders:?}"
    );

    producer.wait_written(producer.written() + VALUES_PER_PHASE);
    let acknowledged = producer.finish();
    let survivor = cluster.live_other_than(victim as u32).to_string();
    assert_stored_once("c", &survivor, &acknowledged);
    // Fenced, it left every ISR.
    let isr_members: Vec<u64> = describe("c", &survivor)
        .iter()
        .flat_map(|p| p.isr.clone())
        .collect();
    assert!(!isr_members.contains(&victim), "{isr_members:?}");
}
