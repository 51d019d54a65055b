//! Three `tinymq meta` processes form a Raft group: a leader is elected, commands sent to any
//! node (followers forward them) are replicated, killing the leader with SIGKILL elects another
//! and metadata changes keep working, and a node restarted from its data directory catches up.
//! (A broker's session through a follower runs in process: `in_process/meta_cluster.rs`.)

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
