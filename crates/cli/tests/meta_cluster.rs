//! Three `tinymq meta` processes form a Raft group: a leader is elected, commands sent to any
//! node (followers forward them) are replicated, killing the leader with SIGKILL elects another
//! and metadata changes keep working, and a node restarted from its data directory catches up.

mod common;

use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use common::{free_port, leader, start, MetaProc, RawClient, BIN};
use tinymq_protocol::messages as m;

fn meta_write(addr: &str, command: serde_json::Value) -> Option<m::Error> {
    let mut c = RawClient::handshaken_as(addr, m::NodeRole::Broker);
    let request = m::MetaWriteRequest {
        command: Bytes::from(serde_json::to_vec(&command).unwrap()),
    };
    c.call(&request).error
}

fn topics(addr: &str) -> Vec<String> {
    let out = Command::new(BIN)
        .args(["topic", "list", "--bootstrap", addr])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect()
}

fn create_topic(addr: &str, name: &str) {
    let out = Command::new(BIN)
        .args([
            "topic",
            "create",
            name,
            "--partitions",
            "3",
            "--bootstrap",
            addr,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "create {name} via {addr}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn wait_for_topics(addr: &str, want: &[&str]) {
    for _ in 0..200 {
        if topics(addr) == want {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{addr} never listed {want:?}: {:?}", topics(addr));
}

#[test]
fn a_raft_group_of_three_survives_its_leader_and_restarted_nodes_catch_up() {
    let tmp = tempfile::tempdir().unwrap();
    let addrs: Vec<String> = (0..3)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let mut nodes: Vec<Option<MetaProc>> = (1..=3)
        .map(|id| Some(start(id, &addrs, tmp.path())))
        .collect();
    let first = leader(&addrs[0], None);
    // Like a broker, a MetaServer node answers nothing but a handshake first.
    let mut raw = RawClient::connect(&addrs[0]);
    raw.send_frame(tinymq_protocol::OpCode::MetaRead.code(), &[]);
    let refused = common::error_code(&raw.read_frame().unwrap());
    assert_eq!(
        refused,
        u32::from(tinymq_protocol::ErrorCode::HANDSHAKE_REQUIRED.code())
    );
    let follower = (1..=3).find(|id| *id != first).unwrap();
    let follower_addr = &addrs[follower as usize - 1];
    // The follower learns of the leader a moment later than the leader itself.
    leader(follower_addr, None);

    // Commands sent to a follower are forwarded to the leader.
    for id in 1..=2u32 {
        let register = serde_json::json!({"RegisterBroker": {"id": id, "host": "127.0.0.1", "port": 9000 + id}});
        assert_eq!(meta_write(follower_addr, register), None);
    }
    create_topic(follower_addr, "before");
    for addr in &addrs {
        wait_for_topics(addr, &["before"]);
    }

    // SIGKILL the leader: the others elect a new one and accept changes.
    nodes[first as usize - 1].take();
    let survivor = &addrs[follower as usize - 1];
    let second = leader(survivor, Some(first));
    assert_ne!(second, first);
    create_topic(survivor, "after");

    // The old leader restarts from its data directory and catches up.
    nodes[first as usize - 1] = Some(start(first, &addrs, tmp.path()));
    wait_for_topics(&addrs[first as usize - 1], &["after", "before"]);
}

fn register(addr: &str, id: u32) -> u64 {
    let mut c = RawClient::handshaken_as(addr, m::NodeRole::Broker);
    let command =
        serde_json::json!({"RegisterBroker": {"id": id, "host": "127.0.0.1", "port": 9000 + id}});
    let response = c.call(&m::MetaWriteRequest {
        command: Bytes::from(serde_json::to_vec(&command).unwrap()),
    });
    assert!(response.error.is_none(), "{:?}", response.error);
    let reply: serde_json::Value = serde_json::from_slice(&response.reply).unwrap();
    reply["BrokerRegistered"]["epoch"].as_u64().unwrap()
}

fn broker_live(addr: &str, id: u64) -> Option<bool> {
    let out = Command::new(BIN)
        .args(["cluster", "status", "--json", "--bootstrap", addr])
        .output()
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    v["brokers"]
        .as_array()?
        .iter()
        .find(|b| b["id"].as_u64() == Some(id))?["live"]
        .as_bool()
}

#[test]
fn a_silent_broker_is_fenced_and_registers_again_with_a_new_epoch() {
    let tmp = tempfile::tempdir().unwrap();
    let addrs: Vec<String> = (0..3)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let _nodes: Vec<MetaProc> = (1..=3).map(|id| start(id, &addrs, tmp.path())).collect();
    let leader_id = leader(&addrs[0], None);
    let follower = &addrs[(leader_id as usize) % 3];
    leader(follower, None); // the follower knows the leader too, so it can forward
    let epoch = register(follower, 7);

    // Heartbeats through a follower (forwarded to the leader) keep the broker live past the
    // session timeout.
    let mut c = RawClient::handshaken_as(follower, m::NodeRole::Broker);
    for _ in 0..24 {
        let beat = c.call(&m::BrokerHeartbeatRequest {
            broker_id: 7,
            epoch,
        });
        assert!(beat.error.is_none(), "{:?}", beat.error);
        assert!(!beat.fenced);
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(broker_live(follower, 7), Some(true));

    // Silence: the leader fences it after the session timeout (waits are bounded).
    let mut fenced = false;
    for _ in 0..300 {
        if broker_live(follower, 7) == Some(false) {
            fenced = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(fenced, "a silent broker is fenced");
    let beat = c.call(&m::BrokerHeartbeatRequest {
        broker_id: 7,
        epoch,
    });
    assert!(beat.fenced, "a fenced broker is told to register again");
    let new_epoch = register(follower, 7);
    assert!(new_epoch > epoch);
    for _ in 0..100 {
        if broker_live(follower, 7) == Some(true) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the re-registered broker is not live");
}
