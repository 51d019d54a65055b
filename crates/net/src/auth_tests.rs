//! The front end's authentication over real sockets: the gate before logging in, SCRAM logins
//! against the service's credentials, node logins with the cluster secret (and the roles they
//! prove), acting for another principal, and what failures cost.

use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use prost::Message;
use tinymq_auth::{
    node_user, ClusterSecret, NodeKind, ScramClient, ScramMechanism, StoredCredential,
};
use tinymq_protocol::frame::{FrameDecoder, FrameHeader};
use tinymq_protocol::{messages as m, ErrorCode, Frame, Request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::{
    encode_response, ready, AuthMode, ConnectionStats, Identity, ListenerLimits, ListenerSecurity,
    NodeRole, Peer, ResponseFuture, Service,
};

const MECH: ScramMechanism = ScramMechanism::Sha256;

/// Knows `alice` (password `pw`); answers ListTopics with the peer's role, node id and
/// principal, and anything else with success.
struct Users {
    alice: StoredCredential,
    /// Credential lookups so far: a refused exchange must not reach one.
    lookups: AtomicUsize,
}

impl Service for Users {
    fn identity(&self) -> Identity {
        Identity {
            cluster_id: "c1".into(),
            node_id: 7,
        }
    }

    async fn admit(&self, frame: Frame, peer: &Peer) -> ResponseFuture {
        let (op, id) = (frame.header.op_code(), frame.header.message_id);
        let names = vec![
            format!("{:?}", peer.role),
            peer.node_id.to_string(),
            peer.principal.to_string(),
        ];
        ready(Some(encode_response(
            op,
            id,
            &m::ListTopicsResponse { error: None, names },
        )))
    }

    fn credential(&self, user: &str, mechanism: ScramMechanism) -> Option<StoredCredential> {
        self.lookups.fetch_add(1, AtomicOrdering::Relaxed);
        (user == "alice" && mechanism == self.alice.mechanism).then(|| self.alice.clone())
    }
}

fn secret() -> Arc<ClusterSecret> {
    Arc::new(ClusterSecret::from_bytes(&[7u8; 32]).expect("32 bytes"))
}

async fn start(
    auth: AuthMode,
    with_secret: bool,
) -> (String, Arc<ConnectionStats>, CancellationToken) {
    let (addr, stats, stop, _) = start_counted(auth, with_secret).await;
    (addr, stats, stop)
}

async fn start_counted(
    auth: AuthMode,
    with_secret: bool,
) -> (String, Arc<ConnectionStats>, CancellationToken, Arc<Users>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let service = Arc::new(Users {
        alice: StoredCredential::derive(MECH, "pw", tinymq_auth::SCRAM_ITERATIONS_MIN),
        lookups: AtomicUsize::new(0),
    });
    let security = ListenerSecurity {
        auth,
        cluster_secret: with_secret.then(secret),
        ..ListenerSecurity::default()
    };
    let limits = ListenerLimits {
        handshake_timeout: Duration::from_secs(20),
        ..ListenerLimits::default()
    };
    let stats = Arc::new(ConnectionStats::default());
    let shutdown = CancellationToken::new();
    tokio::spawn(crate::serve_secure(
        listener,
        service.clone(),
        limits,
        security,
        shutdown.clone(),
        TaskTracker::new(),
        stats.clone(),
    ));
    (addr, stats, shutdown, service)
}

struct Raw {
    stream: TcpStream,
    buf: BytesMut,
    next_id: u32,
}

impl Raw {
    async fn handshaken(addr: &str, role: NodeRole) -> (Raw, m::HandshakeResponse) {
        let mut raw = Raw {
            stream: TcpStream::connect(addr).await.unwrap(),
            buf: BytesMut::new(),
            next_id: 1,
        };
        let hello = raw
            .call(&m::HandshakeRequest {
                min_version: 1,
                max_version: 1,
                client_id: "test".into(),
                role: role.into(),
                node_id: 3,
                ..Default::default()
            })
            .await
            .expect("handshake answered");
        assert!(hello.error.is_none(), "{:?}", hello.error);
        (raw, hello)
    }

    /// The response, or `None` once the server closed the connection.
    async fn call<R: Request>(&mut self, request: &R) -> Option<R::Response> {
        let id = self.next_id;
        self.next_id += 1;
        let body = request.encode_to_vec();
        let mut out = BytesMut::new();
        FrameHeader::request(R::OP.code(), id, body.len() as u32).encode(&mut out);
        out.extend_from_slice(&body);
        self.stream.write_all(&out).await.ok()?;
        let decoder = FrameDecoder::new(1 << 20);
        loop {
            if let Some(frame) = decoder.decode(&mut self.buf).unwrap() {
                assert_eq!(frame.header.message_id, id);
                return Some(R::Response::decode(frame.body).unwrap());
            }
            let read = self.stream.read_buf(&mut self.buf);
            match tokio::time::timeout(Duration::from_secs(10), read).await {
                Ok(Ok(0)) | Ok(Err(_)) => return None,
                Ok(Ok(_)) => {}
                Err(_) => panic!("no answer"),
            }
        }
    }

    async fn step(&mut self, payload: Vec<u8>) -> Option<m::AuthenticateResponse> {
        let request = m::AuthenticateRequest {
            mechanism: MECH.name().into(),
            payload: payload.into(),
        };
        self.call(&request).await
    }

    /// A whole SCRAM login; the last answer.
    async fn login(
        &mut self,
        user: &str,
        password: &str,
        authzid: Option<&str>,
    ) -> m::AuthenticateResponse {
        let mut scram = ScramClient::new(MECH, user, password, authzid);
        let first = self.step(scram.first()).await.expect("server-first");
        if first.error.is_some() {
            return first;
        }
        let last = scram.second(&first.payload).expect("server-first parses");
        let done = self.step(last).await.expect("server-final");
        if done.complete {
            scram
                .finish(&done.payload)
                .expect("the server proves itself");
        }
        done
    }

    async fn who(&mut self) -> Result<Vec<String>, ErrorCode> {
        let r = self.call(&m::ListTopicsRequest {}).await.expect("answered");
        match r.error {
            Some(e) if e.code != 0 => Err(e.error_code()),
            _ => Ok(r.names),
        }
    }
}

fn code(r: &m::AuthenticateResponse) -> ErrorCode {
    r.error
        .as_ref()
        .map_or(ErrorCode::NONE, m::Error::error_code)
}

#[tokio::test]
async fn only_authenticate_is_served_until_a_login_succeeds() {
    let (addr, stats, _stop) = start(AuthMode::Scram, true).await;
    let (mut c, hello) = Raw::handshaken(&addr, NodeRole::Client).await;
    assert!(hello.auth_required);
    assert_eq!(hello.auth_mechanisms, ["SCRAM-SHA-256", "SCRAM-SHA-512"]);
    assert_eq!(c.who().await, Err(ErrorCode::AUTHENTICATION_REQUIRED));
    let done = c.login("alice", "pw", None).await;
    assert!(done.complete, "{:?}", done.error);
    assert_eq!(done.principal, "User:alice");
    assert_eq!(c.who().await.unwrap(), ["Client", "0", "User:alice"]);
    let again = c.login("alice", "pw", None).await;
    assert_eq!(
        code(&again),
        ErrorCode::INVALID_REQUEST,
        "a connection logs in once"
    );
    assert_eq!((stats.auth_succeeded(), stats.auth_failed()), (1, 0));
}

#[tokio::test]
async fn wrong_passwords_and_unknown_users_fail_alike_and_three_close() {
    let (addr, stats, _stop) = start(AuthMode::Scram, false).await;
    let (mut c, _) = Raw::handshaken(&addr, NodeRole::Client).await;
    let wrong = c.login("alice", "nope", None).await;
    let unknown = c.login("mallory", "nope", None).await;
    assert_eq!(code(&wrong), ErrorCode::AUTHENTICATION_FAILED);
    assert_eq!(code(&unknown), ErrorCode::AUTHENTICATION_FAILED);
    assert_eq!(wrong.error.unwrap().message, unknown.error.unwrap().message);
    let third = c.login("alice", "nope", None).await;
    assert_eq!(code(&third), ErrorCode::AUTHENTICATION_FAILED);
    assert!(
        c.call(&m::ListTopicsRequest {}).await.is_none(),
        "closed after 3 failures"
    );
    assert_eq!(stats.auth_failed(), 3);
    let unsupported = m::AuthenticateRequest {
        mechanism: "PLAIN".into(),
        payload: b"\0alice\0pw".to_vec().into(),
    };
    let (mut c, _) = Raw::handshaken(&addr, NodeRole::Client).await;
    let r = c.call(&unsupported).await.unwrap();
    assert_eq!(code(&r), ErrorCode::UNSUPPORTED_SASL_MECHANISM);
}

#[tokio::test]
async fn node_roles_count_only_after_a_node_login() {
    let (addr, _stats, _stop) = start(AuthMode::Scram, true).await;
    let (mut user, _) = Raw::handshaken(&addr, NodeRole::Broker).await;
    assert!(user.login("alice", "pw", None).await.complete);
    assert_eq!(user.who().await.unwrap(), ["Client", "0", "User:alice"]);
    let write = user.call(&m::MetaWriteRequest::default()).await.unwrap();
    assert_eq!(
        write.error.map(|e| e.error_code()),
        Some(ErrorCode::CLUSTER_AUTHORIZATION_FAILED)
    );

    let password = secret().password();
    let (mut node, _) = Raw::handshaken(&addr, NodeRole::Client).await;
    let me = node_user(NodeKind::Broker, 4);
    assert!(node.login(&me, &password, None).await.complete);
    assert_eq!(node.who().await.unwrap()[..2], ["Broker", "4"]);

    // A node may act for a user (and is then that user); a user may not.
    let (mut proxy, _) = Raw::handshaken(&addr, NodeRole::Meta).await;
    let done = proxy.login(&me, &password, Some("User:bob")).await;
    assert_eq!(done.principal, "User:bob");
    assert_eq!(proxy.who().await.unwrap(), ["Client", "0", "User:bob"]);
    let (mut c, _) = Raw::handshaken(&addr, NodeRole::Client).await;
    let refused = c.login("alice", "pw", Some("User:bob")).await;
    assert_eq!(code(&refused), ErrorCode::AUTHENTICATION_FAILED);
}

#[tokio::test]
async fn without_auth_clients_need_no_login_but_nodes_prove_themselves() {
    let (addr, _stats, _stop) = start(AuthMode::None, true).await;
    let (mut c, hello) = Raw::handshaken(&addr, NodeRole::Broker).await;
    assert!(!hello.auth_required);
    assert_eq!(c.who().await.unwrap(), ["Client", "0", "User:ANONYMOUS"]);
    let done = c
        .login(&node_user(NodeKind::Meta, 2), &secret().password(), None)
        .await;
    assert!(done.complete, "{:?}", done.error);
    assert_eq!(c.who().await.unwrap()[..2], ["Meta", "2"]);

    // With neither authentication nor a secret, the claim stands, as before.
    let (addr, _stats, _stop) = start(AuthMode::None, false).await;
    let (mut c, hello) = Raw::handshaken(&addr, NodeRole::Broker).await;
    assert!(hello.auth_mechanisms.is_empty());
    assert_eq!(c.who().await.unwrap(), ["Broker", "3", "User:ANONYMOUS"]);
}

#[tokio::test]
async fn an_address_over_its_failure_budget_is_locked_out_without_a_credential_check() {
    let (addr, stats, _stop, service) = start_counted(AuthMode::Scram, true).await;
    let budget = tinymq_auth::LOGIN_FAILURES_PER_IP_MAX;
    // The budget spent on connections of their own (each within its own close limit).
    let failing = (0..budget).map(|_| {
        let addr = addr.clone();
        tokio::spawn(async move {
            let (mut c, _) = Raw::handshaken(&addr, NodeRole::Client).await;
            code(&c.login("alice", "nope", None).await)
        })
    });
    for failed in failing {
        assert_eq!(failed.await.unwrap(), ErrorCode::AUTHENTICATION_FAILED);
    }
    assert_eq!(stats.auth_failed(), u64::from(budget));
    let lookups = service.lookups.load(AtomicOrdering::Relaxed);

    // The next attempt from this address, even with the right password, is refused before
    // its credential is looked up, on a fresh connection too.
    let (mut c, _) = Raw::handshaken(&addr, NodeRole::Client).await;
    let refused = c.login("alice", "pw", None).await;
    assert_eq!(code(&refused), ErrorCode::AUTHENTICATION_FAILED);
    let why = refused.error.unwrap().message;
    assert!(why.contains("too many failed logins"), "{why}");
    assert_eq!(service.lookups.load(AtomicOrdering::Relaxed), lookups);
    assert_eq!(c.who().await, Err(ErrorCode::AUTHENTICATION_REQUIRED));

    // Nodes, proven with the cluster secret, are not locked out by users' failures.
    let (mut node, _) = Raw::handshaken(&addr, NodeRole::Client).await;
    let me = node_user(NodeKind::Broker, 4);
    let done = node.login(&me, &secret().password(), None).await;
    assert!(done.complete, "{:?}", done.error);
}
