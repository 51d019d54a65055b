//! A MetaServer group of three nodes in this process: a broker whose heartbeats go through a
//! follower (forwarded to the leader) stays live past the session timeout; silent, it is
//! fenced, told so, and registers again with a new epoch.

use std::time::Duration;

use crate::common::RawClient;
use crate::node::{meta_leader, meta_read, Cluster};
use bytes::Bytes;
use tinymq_protocol::messages as m;

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

/// Whether broker `id` is live (not fenced) in the image of the node at `addr`; `None` while
/// it is not registered there.
fn broker_live(addr: &str, id: u64) -> Option<bool> {
    let image: serde_json::Value = serde_json::from_slice(&meta_read(addr).image).ok()?;
    image["brokers"]
        .as_object()?
        .values()
        .find(|b| b["id"].as_u64() == Some(id))?["fenced"]
        .as_bool()
        .map(|fenced| !fenced)
}

/// One heartbeat of broker 7, sent again (as a broker's heartbeat loop would, at once) while
/// the answer is a retriable error: a leader that cannot confirm its majority for a moment on a
/// loaded machine answers NOT_LEADER. A session kept by these beats must still hold.
fn heartbeat(c: &mut RawClient, epoch: u64) -> m::BrokerHeartbeatResponse {
    let request = m::BrokerHeartbeatRequest {
        broker_id: 7,
        epoch,
        ..Default::default()
    };
    for _ in 0..20 {
        let beat = c.call(&request);
        match &beat.error {
            None => return beat,
            Some(e)
                if tinymq_protocol::ErrorCode::from_code(e.code)
                    .is_some_and(|c| c.is_retriable()) =>
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            Some(e) => panic!("heartbeat refused: {e:?}"),
        }
    }
    panic!("heartbeats kept failing for a second");
}

#[test]
fn a_silent_broker_is_fenced_and_registers_again_with_a_new_epoch() {
    let tmp = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(tmp.path(), 3, 0);
    let leader_id = meta_leader(&cluster.meta(1));
    let follower = &cluster.meta(leader_id % 3 + 1);
    meta_leader(follower); // the follower knows the leader too, so it can forward
    let epoch = register(follower, 7);

    // Heartbeats through a follower (forwarded to the leader) keep the broker live past the
    // session timeout.
    let mut c = RawClient::handshaken_as(follower, m::NodeRole::Broker);
    for _ in 0..24 {
        let beat = heartbeat(&mut c, epoch);
        assert!(!beat.fenced);
        // Not a wait: the heartbeat interval; 24 beats outlast the session timeout.
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
        ..Default::default()
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
