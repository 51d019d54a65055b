//! Hostile peers against authentication, on real processes with `--auth scram` and the
//! first super user `admin` made from `TINYMQ_ADMIN_PASSWORD`: wrong passwords and unknown
//! users (refused alike), a replayed SCRAM client-final, requests before logging in, users
//! sending node-to-node operations or claiming a node role, a user asking to act for someone
//! else, a flood of unauthenticated requests (memory bounded, good clients unaffected), and a
//! cluster whose nodes log in to each other with the cluster secret (a broker with the wrong
//! secret cannot join, and says why).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{error_code, op, RawClient, Server, BIN};
use prost::Message;
use tinymq_auth::{ScramClient, ScramMechanism};
use tinymq_protocol::{messages as m, ErrorCode, OpCode};

const ADMIN_PASSWORD: &str = "admin-secret-1";
const MECH: ScramMechanism = ScramMechanism::Sha256;

/// A standalone server with `--auth scram`, once its first super user can log in (the
/// bootstrap writes `admin` shortly after the server listens).
fn start_server(dir: &std::path::Path) -> Server {
    let server = Server::start_with_env(
        dir,
        &["--auth", "scram", "--http", "off"],
        &[("TINYMQ_ADMIN_PASSWORD", ADMIN_PASSWORD)],
    );
    let admin_ready = common::retry(100, Duration::from_millis(100), || {
        tool(&server, "admin", ADMIN_PASSWORD, &["topic", "list"])
            .0
            .then_some(())
    });
    assert!(admin_ready.is_some(), "admin never logged in");
    server
}

/// A raw connection handshaken as `role`, with the handshake's answer.
fn handshake(addr: &str, role: m::NodeRole) -> (RawClient, m::HandshakeResponse) {
    let mut c = RawClient::connect(addr);
    let r = c.call(&m::HandshakeRequest {
        min_version: 1,
        max_version: 1,
        cluster_id: String::new(),
        client_id: "auth-hostile".into(),
        role: role.into(),
        node_id: 1,
    });
    assert!(r.error.is_none(), "{:?}", r.error);
    (c, r)
}

fn authenticate_step(c: &mut RawClient, payload: &[u8]) -> m::AuthenticateResponse {
    c.call(&m::AuthenticateRequest {
        mechanism: MECH.name().into(),
        payload: payload.to_vec().into(),
    })
}

/// Runs a whole exchange on `c`; the last answer (success or the failure).
fn login(
    c: &mut RawClient,
    user: &str,
    password: &str,
    authzid: Option<&str>,
) -> m::AuthenticateResponse {
    let mut scram = ScramClient::new(MECH, user, password, authzid);
    let first = authenticate_step(c, &scram.first());
    if first.error.is_some() {
        return first;
    }
    let last = scram.second(&first.payload).expect("server-first parses");
    authenticate_step(c, &last)
}

fn code(error: &Option<m::Error>) -> ErrorCode {
    error.as_ref().map_or(ErrorCode::NONE, |e| e.error_code())
}

/// `tinymq ARGS` against `server` with a login; (success, stderr).
fn tool(server: &Server, user: &str, password: &str, args: &[&str]) -> (bool, String) {
    let out = server
        .tool(args)
        .env("TINYMQ_USER", user)
        .env("TINYMQ_PASSWORD", password)
        .output()
        .expect("run tinymq");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn wrong_passwords_and_unknown_users_are_refused_alike() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path());
    let (ok, err) = tool(&server, "admin", ADMIN_PASSWORD, &["topic", "create", "t1"]);
    assert!(ok, "the admin logs in: {err}");

    let (ok, wrong) = tool(&server, "admin", "not-it", &["topic", "list"]);
    assert!(!ok);
    assert!(
        wrong.contains("authentication failed for user admin"),
        "{wrong}"
    );
    let (ok, unknown) = tool(&server, "nobody", "not-it", &["topic", "list"]);
    assert!(!ok);
    assert!(
        unknown.contains("authentication failed for user nobody"),
        "{unknown}"
    );
    // The same words after the user's name: nothing tells an unknown user apart.
    let after = |s: &str| {
        s.split_once("for user ")
            .map(|(_, r)| r.split_once(':').map(|(_, x)| x.to_string()))
    };
    assert_eq!(after(&wrong), after(&unknown));

    let (mut c, _) = handshake(&server.addr, m::NodeRole::Client);
    let r = login(&mut c, "nobody", "x", None);
    assert_eq!(code(&r.error), ErrorCode::AUTHENTICATION_FAILED);
    let (mut c, _) = handshake(&server.addr, m::NodeRole::Client);
    let r2 = login(&mut c, "admin", "x", None);
    assert_eq!(code(&r2.error), ErrorCode::AUTHENTICATION_FAILED);
    assert_eq!(r.error.unwrap().message, r2.error.unwrap().message);
}

#[test]
fn a_replayed_client_final_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path());
    let (mut c, _) = handshake(&server.addr, m::NodeRole::Client);
    let mut scram = ScramClient::new(MECH, "admin", ADMIN_PASSWORD, None);
    let client_first = scram.first();
    let server_first = authenticate_step(&mut c, &client_first);
    assert!(server_first.error.is_none(), "{:?}", server_first.error);
    let client_final = scram.second(&server_first.payload).unwrap();
    let done = authenticate_step(&mut c, &client_final);
    assert!(done.complete, "{:?}", done.error);
    assert_eq!(done.principal, "User:admin");

    // A listener replays both captured messages on a new connection: the server's nonce
    // differs, so the captured proof does not fit.
    let (mut replay, _) = handshake(&server.addr, m::NodeRole::Client);
    let again = authenticate_step(&mut replay, &client_first);
    assert!(again.error.is_none());
    assert_ne!(again.payload, server_first.payload, "a fresh server nonce");
    let refused = authenticate_step(&mut replay, &client_final);
    assert_eq!(code(&refused.error), ErrorCode::AUTHENTICATION_FAILED);
    assert!(!refused.complete);
    let listed = send(&mut replay, OpCode::ListTopics, &m::ListTopicsRequest {});
    assert_eq!(listed, wire(ErrorCode::AUTHENTICATION_REQUIRED));
}

/// Sends one request and returns the error code of its answer.
fn send(c: &mut RawClient, code: OpCode, body: &impl Message) -> u32 {
    let id = c.send_frame(op(code), &body.encode_to_vec());
    let frame = c.read_frame().expect("an answer");
    assert_eq!(frame.header.message_id, id);
    error_code(&frame)
}

#[test]
fn nothing_but_authenticate_before_logging_in() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path());
    let (mut c, hello) = handshake(&server.addr, m::NodeRole::Client);
    assert!(hello.auth_required);
    assert!(hello.auth_mechanisms.contains(&"SCRAM-SHA-256".to_string()));
    assert!(hello.auth_mechanisms.contains(&"SCRAM-SHA-512".to_string()));
    let refused = wire(ErrorCode::AUTHENTICATION_REQUIRED);
    assert_eq!(
        send(&mut c, OpCode::ListTopics, &m::ListTopicsRequest {}),
        refused
    );
    let create = m::CreateTopicRequest {
        name: "sneaky".into(),
        ..Default::default()
    };
    assert_eq!(send(&mut c, OpCode::CreateTopic, &create), refused);
    assert_eq!(
        send(&mut c, OpCode::MetaRead, &m::MetaReadRequest::default()),
        refused
    );
    // Still within the pre-handshake frame limit: a 100 KiB body closes the connection.
    c.send_frame(op(OpCode::ListTopics), &vec![0u8; 100 << 10]);
    assert!(c.closed_by_server());

    // A wrong login counts; the third failure closes the connection.
    let (mut c, _) = handshake(&server.addr, m::NodeRole::Client);
    for attempt in 1..=3 {
        let r = login(&mut c, "admin", "wrong", None);
        assert_eq!(
            code(&r.error),
            ErrorCode::AUTHENTICATION_FAILED,
            "attempt {attempt}"
        );
    }
    assert!(c.closed_by_server());
    let topics = tool(&server, "admin", ADMIN_PASSWORD, &["topic", "list"]);
    assert!(topics.0, "{}", topics.1);
    assert!(
        !String::from_utf8_lossy(&server.tool(&["topic", "list"]).output().unwrap().stdout)
            .contains("sneaky")
    );
}

#[test]
fn users_cannot_act_as_nodes_or_for_others() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path());
    // A user, even the super user, claiming the broker role: node operations are refused.
    let (mut c, _) = handshake(&server.addr, m::NodeRole::Broker);
    let r = login(&mut c, "admin", ADMIN_PASSWORD, None);
    assert!(r.complete, "{:?}", r.error);
    let node_only = wire(ErrorCode::CLUSTER_AUTHORIZATION_FAILED);
    let write = m::MetaWriteRequest::default();
    assert_eq!(send(&mut c, OpCode::MetaWrite, &write), node_only);
    assert_eq!(
        send(&mut c, OpCode::RaftRpc, &m::RaftRpcRequest::default()),
        node_only
    );
    let beat = m::BrokerHeartbeatRequest::default();
    assert_eq!(send(&mut c, OpCode::BrokerHeartbeat, &beat), node_only);
    let follower_fetch = m::FetchRequest {
        replica_id: 1,
        partitions: vec![m::FetchPartition {
            topic: "t".into(),
            partition: 0,
            ..Default::default()
        }],
        ..Default::default()
    };
    assert_eq!(send(&mut c, OpCode::Fetch, &follower_fetch), node_only);

    // A user may not act for another principal.
    let (mut c, _) = handshake(&server.addr, m::NodeRole::Client);
    let r = login(&mut c, "admin", ADMIN_PASSWORD, Some("User:bob"));
    assert_eq!(code(&r.error), ErrorCode::AUTHENTICATION_FAILED);
    assert!(r.error.unwrap().message.contains("only nodes"));
    // Nor claim to be a node user without the cluster secret.
    let (mut c, _) = handshake(&server.addr, m::NodeRole::Broker);
    let r = login(&mut c, "node:broker:1", "guess", None);
    assert_eq!(code(&r.error), ErrorCode::AUTHENTICATION_FAILED);
}

#[test]
fn an_unauthenticated_flood_is_refused_without_growing_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path());
    let (ok, err) = tool(
        &server,
        "admin",
        ADMIN_PASSWORD,
        &["topic", "create", "good"],
    );
    assert!(ok, "{err}");
    let before = server.rss_kib();

    let (c, _) = handshake(&server.addr, m::NodeRole::Client);
    let mut writer = c.stream.try_clone().unwrap();
    let flood = std::thread::spawn(move || {
        let body = m::ListTopicsRequest {}.encode_to_vec();
        let mut bytes = Vec::new();
        for id in 1..=10_000u32 {
            let mut frame = bytes::BytesMut::new();
            tinymq_protocol::frame::FrameHeader::request(
                op(OpCode::ListTopics),
                id,
                body.len() as u32,
            )
            .encode(&mut frame);
            bytes.extend_from_slice(&frame);
            bytes.extend_from_slice(&body);
        }
        // The server may close the connection before taking it all.
        let _ = writer.write_all(&bytes);
    });
    // Meanwhile a logged-in client produces and consumes.
    let produced = server
        .tool(&["produce", "good"])
        .env("TINYMQ_USER", "admin")
        .env("TINYMQ_PASSWORD", ADMIN_PASSWORD)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut p| {
            p.stdin.take().unwrap().write_all(b"one\ntwo\n")?;
            p.wait_with_output()
        })
        .unwrap();
    assert!(
        produced.status.success(),
        "{}",
        String::from_utf8_lossy(&produced.stderr)
    );

    let mut refusals = 0;
    let mut reader = c;
    while let Some(frame) = reader.read_frame() {
        assert_eq!(error_code(&frame), wire(ErrorCode::AUTHENTICATION_REQUIRED));
        refusals += 1;
        if refusals == 10_000 {
            break;
        }
    }
    flood.join().unwrap();
    assert!(
        refusals > 0,
        "the flood was answered with refusals before any close"
    );

    let consumed = server
        .tool(&["consume", "good", "--from-beginning", "--count", "2"])
        .env("TINYMQ_USER", "admin")
        .env("TINYMQ_PASSWORD", ADMIN_PASSWORD)
        .output()
        .unwrap();
    assert!(
        consumed.status.success(),
        "{}",
        String::from_utf8_lossy(&consumed.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&consumed.stdout), "one\ntwo\n");
    let after = server.rss_kib();
    assert!(
        after < before + 16 * 1024,
        "RSS grew from {before} KiB to {after} KiB under an unauthenticated flood"
    );
}

/// A meta node and brokers started with `--auth scram` and the cluster secret at `secret`.
struct SecureCluster {
    tmp: tempfile::TempDir,
    meta: std::process::Child,
    meta_addr: String,
    brokers: Vec<Server>,
}

impl Drop for SecureCluster {
    fn drop(&mut self) {
        let _ = self.meta.kill();
        let _ = self.meta.wait();
    }
}

fn write_secret(path: &std::path::Path, byte: u8) {
    std::fs::write(path, hex(&[byte; 32])).unwrap();
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn secure_cluster(brokers: u32) -> SecureCluster {
    let tmp = tempfile::tempdir().unwrap();
    let secret = tmp.path().join("cluster.secret");
    write_secret(&secret, 7);
    let meta_addr = format!("127.0.0.1:{}", common::free_port());
    let meta = Command::new(BIN)
        .args(["meta", "--id", "1", "--listen", &meta_addr])
        .args(["--peers", &format!("1={meta_addr}")])
        .args(["--auth", "scram", "--cluster-secret-file"])
        .arg(&secret)
        .arg("--data")
        .arg(tmp.path().join("meta"))
        .env("TINYMQ_ADMIN_PASSWORD", ADMIN_PASSWORD)
        .env("TINYMQ_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let secret_arg = secret.to_string_lossy().into_owned();
    let mut cluster = SecureCluster {
        brokers: Vec::new(),
        meta,
        meta_addr,
        tmp,
    };
    for id in 1..=brokers {
        let dir = cluster.tmp.path().join(format!("broker-{id}"));
        let extra = ["--auth", "scram", "--cluster-secret-file", &secret_arg];
        let listen = format!("127.0.0.1:{}", common::free_port());
        let broker = Server::start_broker_with(id, &listen, &cluster.meta_addr, &dir, &extra);
        cluster.brokers.push(broker);
    }
    cluster
}

#[test]
fn a_cluster_with_node_authentication_replicates_and_serves() {
    let cluster = secure_cluster(2);
    let b1 = &cluster.brokers[0];
    let bootstrap = format!("{},{}", b1.addr, cluster.brokers[1].addr);
    let run = |args: &[&str], input: &[u8]| {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .env("TINYMQ_BOOTSTRAP", &bootstrap)
            .env("TINYMQ_USER", "admin")
            .env("TINYMQ_PASSWORD", ADMIN_PASSWORD);
        common::run_with_input(&mut cmd, input)
    };
    let created = common::retry(50, Duration::from_millis(200), || {
        let out = run(&["topic", "create", "orders", "--replicas", "2"], b"");
        out.status.success().then_some(())
    });
    assert!(created.is_some(), "creating a replicated topic");
    let out = run(&["produce", "orders", "--acks", "all"], b"a\nb\nc\n");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(
        &["consume", "orders", "--from-beginning", "--count", "3"],
        b"",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "a\nb\nc\n");
    // Both replicas in sync: the follower logged in to the leader as a node.
    let in_sync = common::retry(50, Duration::from_millis(200), || {
        let out = run(&["topic", "describe", "orders", "--json"], b"");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let isr = v["partitions"][0]["isr"].as_array()?.len();
        (isr == 2).then_some(())
    });
    assert!(in_sync.is_some(), "the follower joins the ISR");

    // A user cannot read the credentials through MetaRead.
    let (mut c, _) = handshake(&cluster.meta_addr, m::NodeRole::Client);
    assert!(login(&mut c, "admin", ADMIN_PASSWORD, None).complete);
    let read = c.call(&m::MetaReadRequest::default());
    let image: serde_json::Value = serde_json::from_slice(&read.image).unwrap();
    let users = &image["users"];
    assert!(
        users.is_null() || users.as_object().is_some_and(|u| u.is_empty()),
        "{users}"
    );
}

#[test]
fn a_broker_with_the_wrong_secret_cannot_join_and_says_why() {
    let cluster = secure_cluster(0);
    let wrong = cluster.tmp.path().join("wrong.secret");
    write_secret(&wrong, 9);
    let listen = format!("127.0.0.1:{}", common::free_port());
    let mut broker = Command::new(BIN)
        .args([
            "broker",
            "--id",
            "5",
            "--listen",
            &listen,
            "--meta",
            &cluster.meta_addr,
        ])
        .args(["--auth", "scram", "--cluster-secret-file"])
        .arg(&wrong)
        .arg("--data")
        .arg(cluster.tmp.path().join("broker-5"))
        .env("TINYMQ_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = broker.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut said_why = false;
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(30)) {
        if line.contains("authentication failed") {
            said_why = true;
            break;
        }
    }
    let mut out = String::new();
    let _ = broker.kill();
    let _ = broker.wait();
    if let Some(mut stdout) = broker.stdout.take() {
        let _ = stdout.read_to_string(&mut out);
    }
    assert!(said_why, "the broker's log names the failed login");
    assert!(
        !out.contains("tinymq listening on"),
        "the broker never started serving: {out}"
    );
}

/// An error code as the wire carries it.
fn wire(code: ErrorCode) -> u32 {
    u32::from(code.code())
}
