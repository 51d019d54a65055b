//! The MetaServer port has the broker's front end: bad input gets the same clear errors, the
//! handshake checks version and cluster id, connections over `--connections-max` are refused
//! with LIMIT_EXCEEDED, and node-to-node operations are refused to plain clients — on a
//! MetaServer node and on the standalone server — while the Raft group and brokers, which
//! identify as nodes, keep working.

mod common;

use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use common::{error_code, free_port, leader, op, start, start_with, RawClient, Server, BIN};
use prost::Message;
use tinymq_protocol::frame::FrameHeader;
use tinymq_protocol::{messages as m, ErrorCode, OpCode};

fn code(c: ErrorCode) -> u32 {
    u32::from(c.code())
}

/// A single-node MetaServer group with `extra` flags, once it leads and has named its cluster;
/// returns its address and cluster id.
fn single_meta(dir: &std::path::Path, extra: &[&str]) -> (common::MetaProc, String, String) {
    let addrs = vec![format!("127.0.0.1:{}", free_port())];
    let node = start_with(1, &addrs, dir, extra);
    leader(&addrs[0], None);
    for _ in 0..200 {
        let mut c = RawClient::connect(&addrs[0]);
        let answer = c.call(&hello("", 1, 1));
        if !answer.cluster_id.is_empty() {
            return (node, addrs[0].clone(), answer.cluster_id);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the cluster was never named");
}

fn hello(cluster_id: &str, min_version: u32, max_version: u32) -> m::HandshakeRequest {
    m::HandshakeRequest {
        min_version,
        max_version,
        cluster_id: cluster_id.into(),
        client_id: "front-end-test".into(),
        ..Default::default()
    }
}

fn error_of(e: Option<m::Error>) -> (u32, String) {
    e.map_or((0, String::new()), |e| (e.code, e.message))
}

#[test]
fn the_metaserver_port_answers_bad_input_like_a_broker() {
    let tmp = tempfile::tempdir().unwrap();
    let (_node, addr, cluster_id) = single_meta(tmp.path(), &["--handshake-timeout-ms", "1000"]);

    // Garbage: an INVALID_FRAME error frame, then close.
    let mut c = RawClient::connect(&addr);
    c.send_raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let frame = c.read_frame().expect("error frame before close");
    assert_eq!(error_code(&frame), code(ErrorCode::INVALID_FRAME));
    assert!(c.closed_by_server());

    // Before the handshake the limit is 64 KiB.
    let mut c = RawClient::connect(&addr);
    c.send_raw(&FrameHeader::request(op(OpCode::Handshake), 1, 100_000).to_bytes())
        .unwrap();
    assert_eq!(
        error_code(&c.read_frame().unwrap()),
        code(ErrorCode::INVALID_FRAME)
    );
    assert!(c.closed_by_server());

    // A request before the handshake: HANDSHAKE_REQUIRED, and the connection stays open for
    // the handshake checks: wrong cluster, no common version, then success.
    let mut c = RawClient::connect(&addr);
    c.send_frame(op(OpCode::ListTopics), &[]);
    assert_eq!(
        error_code(&c.read_frame().unwrap()),
        code(ErrorCode::HANDSHAKE_REQUIRED)
    );
    let (refused, why) = error_of(c.call(&hello("another-cluster", 1, 1)).error);
    assert_eq!(refused, code(ErrorCode::CLUSTER_ID_MISMATCH), "{why}");
    assert!(why.contains(&cluster_id), "{why}");
    let (refused, why) = error_of(c.call(&hello("", 2, 5)).error);
    assert_eq!(refused, code(ErrorCode::UNSUPPORTED_VERSION), "{why}");
    let accepted = c.call(&hello(&cluster_id, 1, 1));
    assert!(accepted.error.is_none(), "{:?}", accepted.error);
    assert_eq!(accepted.frame_bytes_max, 16 << 20);
    assert!(c.call(&m::ListTopicsRequest {}).error.is_none());

    // A silent connection is closed at the handshake deadline.
    let mut silent = TcpStream::connect(&addr).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    assert!(
        common::closed_by_server(&mut silent),
        "closed after the handshake timeout"
    );
    // The handshaken connection is still served after all that.
    assert!(c.call(&m::ListTopicsRequest {}).error.is_none());
}

#[test]
fn a_metaserver_refuses_connections_over_its_limit_with_a_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let (_node, addr, _) = single_meta(tmp.path(), &["--connections-max", "3"]);
    let mut held: Vec<RawClient> = (0..3).map(|_| handshaken_when_room(&addr)).collect();
    let mut extra = RawClient::connect(&addr);
    let frame = extra.read_frame().expect("a refusal before the close");
    assert_eq!(frame.header.message_id, 0);
    assert_eq!(error_code(&frame), code(ErrorCode::LIMIT_EXCEEDED));
    let message = m::ErrorResponse::decode(frame.body)
        .unwrap()
        .error
        .unwrap()
        .message;
    assert!(message.contains("connections_max (3)"), "{message}");
    assert!(extra.closed_by_server());
    assert!(held[0].call(&m::ListTopicsRequest {}).error.is_none());
    // The tools say why too.
    let out = Command::new(BIN)
        .args(["cluster", "status", "--bootstrap", &addr])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("LIMIT_EXCEEDED"), "{stderr}");
    held.clear();
}

/// A handshaken connection, retried while the server is still counting connections that
/// earlier helpers (leader polls) have just closed.
fn handshaken_when_room(addr: &str) -> RawClient {
    for _ in 0..100 {
        let mut c = RawClient::connect(addr);
        c.send_frame(op(OpCode::Handshake), &hello("", 1, 1).encode_to_vec());
        match c.read_frame() {
            Some(frame) if frame.header.message_id != 0 => return c,
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    panic!("no room at {addr}");
}

/// Sends each node-to-node operation on `c` and checks it is refused as unauthorized.
fn node_operations_are_refused(c: &mut RawClient) {
    let command =
        serde_json::json!({"RegisterBroker": {"id": 9, "host": "127.0.0.1", "port": 9009}});
    let write = c.call(&m::MetaWriteRequest {
        command: Bytes::from(serde_json::to_vec(&command).unwrap()),
    });
    let beat = c.call(&m::BrokerHeartbeatRequest {
        broker_id: 1,
        epoch: 1,
        ..Default::default()
    });
    let raft = c.call(&m::RaftRpcRequest {
        kind: 2,
        payload: Bytes::from_static(b"{}"),
    });
    for (what, error) in [
        ("MetaWrite", write.error),
        ("BrokerHeartbeat", beat.error),
        ("RaftRpc", raft.error),
    ] {
        let (refused, why) = error_of(error);
        assert_eq!(
            refused,
            code(ErrorCode::CLUSTER_AUTHORIZATION_FAILED),
            "{what}: {why}"
        );
        assert!(why.contains(what) && why.contains("CLIENT"), "{why}");
    }
    // The connection stays open and the tools' operations are served.
    assert!(c.call(&m::ListTopicsRequest {}).error.is_none());
    let read = c.call(&m::MetaReadRequest::default());
    assert!(read.error.is_none(), "{:?}", read.error);
}

fn status(addr: &str) -> serde_json::Value {
    let out = Command::new(BIN)
        .args(["cluster", "status", "--json", "--bootstrap", addr])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

#[test]
fn node_operations_are_refused_to_clients_while_the_nodes_keep_working() {
    let tmp = tempfile::tempdir().unwrap();
    let addrs: Vec<String> = (0..3)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let _nodes: Vec<_> = (1..=3).map(|id| start(id, &addrs, tmp.path())).collect();
    let first = leader(&addrs[0], None);
    let follower = &addrs[first as usize % 3];
    leader(follower, None);
    for addr in &addrs {
        node_operations_are_refused(&mut RawClient::handshaken(addr));
    }
    // A broker (which identifies as one) registers, heartbeats and changes metadata through a
    // follower, which forwards to the leader as a MetaServer node.
    let broker_addr = format!("127.0.0.1:{}", free_port());
    let broker = Server::start_broker(1, &broker_addr, follower, &tmp.path().join("b1"));
    let out = broker.run_tool(
        &["topic", "create", "refused-not", "--partitions", "2"],
        b"",
    );
    assert!(out.status.success());
    let seen = status(&addrs[first as usize - 1]);
    assert_eq!(
        seen["brokers"][0]["live"],
        serde_json::json!(true),
        "{seen}"
    );
    assert_eq!(seen["topics"], serde_json::json!(["refused-not"]), "{seen}");
    // Raft still replicates to every node.
    for addr in &addrs {
        let mut replicated = false;
        for _ in 0..100 {
            if status(addr)["topics"] == serde_json::json!(["refused-not"]) {
                replicated = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(replicated, "{addr} applied the topic");
    }
}

#[test]
fn the_standalone_server_refuses_node_operations_to_clients() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    node_operations_are_refused(&mut RawClient::handshaken(&server.addr));
    // Its own broker and the tools are unaffected.
    server.run_tool(&["topic", "create", "still-works"], b"");
    let out = server.run_tool(&["topic", "list"], b"");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "still-works");
}

/// A peer claiming to be a MetaServer node with absurd Raft fields (a term near u64::MAX, which
/// openraft would overflow, ending the node for good), a node id it did not identify as, or a
/// garbage payload: each is refused with a clear error, and the node goes on and restarts.
#[test]
fn raft_rpcs_with_absurd_or_forged_fields_are_refused_and_the_node_survives() {
    let tmp = tempfile::tempdir().unwrap();
    let addrs = vec![format!("127.0.0.1:{}", free_port())];
    let node = start_with(1, &addrs, tmp.path(), &[]);
    leader(&addrs[0], None);
    let mut peer = RawClient::connect(&addrs[0]);
    let hello_as_node_1 = m::HandshakeRequest {
        role: m::NodeRole::Meta.into(),
        node_id: 1,
        ..hello("", 1, 1)
    };
    assert!(peer.call(&hello_as_node_1).error.is_none());
    let vote = |term: u64, node: u64| {
        format!(
            r#"{{"vote":{{"leader_id":{{"term":{term},"node_id":{node}}},"committed":false}},"last_log_id":{{"leader_id":{{"term":{term},"node_id":{node}}},"index":18446744073709551615}}}}"#
        )
    };
    let rpc = |kind: u32, payload: String| m::RaftRpcRequest {
        kind,
        payload: payload.into_bytes().into(),
    };
    let invalid = ErrorCode::INVALID_REQUEST;
    let malformed = ErrorCode::MALFORMED_BODY;
    let cases = [
        (
            "a term near u64::MAX",
            rpc(2, vote(u64::MAX - 1, 1)),
            invalid,
            "is over",
        ),
        (
            "the largest term",
            rpc(2, vote(u64::MAX, 1)),
            invalid,
            "is over",
        ),
        (
            "another node's vote",
            rpc(2, vote(3, 9)),
            invalid,
            "identified as node 1",
        ),
        (
            "the node's own vote",
            rpc(2, vote(3, 1)),
            invalid,
            "to itself",
        ),
        ("garbage", rpc(2, "garbage".into()), malformed, ""),
        ("an empty append", rpc(1, String::new()), malformed, ""),
        (
            "an unknown kind",
            rpc(77, "{}".into()),
            invalid,
            "unknown Raft RPC kind",
        ),
    ];
    for (case, request, expected, why) in cases {
        let (code_got, message) = error_of(peer.call(&request).error);
        assert_eq!(code_got, code(expected), "{case}: {message}");
        assert!(message.contains(why), "{case}: {message}");
    }
    // Not a wait: outlasts an election timeout, so a node the bad RPCs had deposed shows it.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        status(&addrs[0])["leader"].as_u64().is_some(),
        "still leading"
    );
    drop(node);
    let _node = start_with(1, &addrs, tmp.path(), &[]);
    assert_eq!(
        leader(&addrs[0], None),
        1,
        "the node restarts and leads again"
    );
}
