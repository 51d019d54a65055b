//! The front end over real sockets with a small service: connection refusal at the limit,
//! node-only operations, handshake outcomes, and admission in arrival order.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use prost::Message;
use tinymq_protocol::frame::{FrameDecoder, FrameHeader};
use tinymq_protocol::{messages as m, ErrorCode, Frame, OpCode, Request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::{
    encode_response, ready, Identity, ListenerLimits, NodeRole, Peer, ResponseFuture, Service,
};

/// Events in the order the service saw them.
#[derive(Default)]
struct Log(std::sync::Mutex<Vec<String>>);

impl Log {
    fn push(&self, event: impl Into<String>) {
        self.0.lock().expect("log lock").push(event.into());
    }

    fn events(&self) -> Vec<String> {
        self.0.lock().expect("log lock").clone()
    }
}

/// Answers ListTopics with the peer's role and anything else with success; CreateTopic is admitted only after `gate` opens,
/// so a second request behind it shows whether admission waits.
struct TestService {
    log: Arc<Log>,
    gate: tokio::sync::Semaphore,
}

impl Service for TestService {
    fn identity(&self) -> Identity {
        Identity {
            cluster_id: "c1".into(),
            node_id: 7,
        }
    }

    async fn admit(&self, frame: Frame, peer: &Peer) -> ResponseFuture {
        let (op, id) = (frame.header.op_code(), frame.header.message_id);
        self.log.push(format!("admit {id}"));
        if op == OpCode::CreateTopic.code() {
            let _ = self.gate.acquire().await.map(|p| p.forget());
        }
        self.log.push(format!("admitted {id}"));
        if op != OpCode::ListTopics.code() {
            // An empty body: success, as any response type.
            return ready(Some(encode_response(
                op,
                id,
                &m::ErrorResponse { error: None },
            )));
        }
        let names = vec![format!("{:?}", peer.role)];
        ready(Some(encode_response(
            op,
            id,
            &m::ListTopicsResponse { error: None, names },
        )))
    }
}

async fn start(limits: ListenerLimits) -> (String, Arc<TestService>, CancellationToken) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let service = Arc::new(TestService {
        log: Arc::default(),
        gate: tokio::sync::Semaphore::new(0),
    });
    let shutdown = CancellationToken::new();
    let tasks = TaskTracker::new();
    tokio::spawn(crate::serve(
        listener,
        service.clone(),
        limits,
        shutdown.clone(),
        tasks,
    ));
    (addr, service, shutdown)
}

struct Raw {
    stream: TcpStream,
    buf: BytesMut,
    next_id: u32,
}

impl Raw {
    async fn connect(addr: &str) -> Raw {
        Raw {
            stream: TcpStream::connect(addr).await.unwrap(),
            buf: BytesMut::new(),
            next_id: 1,
        }
    }

    async fn send<R: Request>(&mut self, request: &R) -> u32 {
        let id = self.next_id;
        self.next_id += 1;
        let body = request.encode_to_vec();
        let mut out = BytesMut::new();
        FrameHeader::request(R::OP.code(), id, body.len() as u32).encode(&mut out);
        out.extend_from_slice(&body);
        self.stream.write_all(&out).await.unwrap();
        id
    }

    async fn read(&mut self) -> Option<Frame> {
        let decoder = FrameDecoder::new(1 << 20);
        loop {
            if let Some(frame) = decoder.decode(&mut self.buf).unwrap() {
                return Some(frame);
            }
            let read =
                tokio::time::timeout(Duration::from_secs(10), self.stream.read_buf(&mut self.buf));
            match read.await.expect("the server answers") {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    }

    async fn call<R: Request>(&mut self, request: &R) -> Result<R::Response, m::Error> {
        let id = self.send(request).await;
        let frame = self.read().await.expect("a response");
        assert_eq!(frame.header.message_id, id);
        let top = m::ErrorResponse::decode(frame.body.clone()).unwrap();
        match top.error.filter(|e| e.code != 0) {
            Some(e) => Err(e),
            None => Ok(R::Response::decode(frame.body).unwrap()),
        }
    }

    async fn handshake(
        &mut self,
        role: NodeRole,
        cluster_id: &str,
    ) -> Result<m::HandshakeResponse, m::Error> {
        self.call(&m::HandshakeRequest {
            min_version: 1,
            max_version: 1,
            cluster_id: cluster_id.into(),
            client_id: "test".into(),
            role: role.into(),
            node_id: 3,
        })
        .await
    }
}

fn code_of(e: &m::Error) -> ErrorCode {
    e.error_code()
}

#[tokio::test]
async fn a_connection_over_the_limit_is_told_why_and_closed() {
    let limits = ListenerLimits {
        connections_max: 1,
        ..ListenerLimits::default()
    };
    let (addr, _service, _shutdown) = start(limits).await;
    let mut first = Raw::connect(&addr).await;
    first.handshake(NodeRole::Client, "").await.unwrap();
    let mut second = Raw::connect(&addr).await;
    let frame = second.read().await.expect("a refusal frame");
    assert_eq!(frame.header.message_id, 0);
    let error = m::ErrorResponse::decode(frame.body).unwrap().error.unwrap();
    assert_eq!(code_of(&error), ErrorCode::LIMIT_EXCEEDED);
    assert!(
        error.message.contains("connections_max (1)"),
        "{}",
        error.message
    );
    assert!(second.read().await.is_none(), "then closed");
    let served = first.call(&m::ListTopicsRequest {}).await.unwrap();
    assert_eq!(served.names, vec!["Client"]);
}

#[tokio::test]
async fn node_only_operations_need_the_right_role() {
    let (addr, _service, _shutdown) = start(ListenerLimits::default()).await;
    let raft = m::RaftRpcRequest::default();
    let write = m::MetaWriteRequest::default();
    let beat = m::BrokerHeartbeatRequest::default();
    let mut client = Raw::connect(&addr).await;
    client.handshake(NodeRole::Client, "").await.unwrap();
    for refused in [
        client.call(&raft).await.map(|_| ()),
        client.call(&write).await.map(|_| ()),
        client.call(&beat).await.map(|_| ()),
    ] {
        let error = refused.unwrap_err();
        assert_eq!(code_of(&error), ErrorCode::CLUSTER_AUTHORIZATION_FAILED);
        assert!(error.message.contains("CLIENT"), "{}", error.message);
    }
    assert!(
        client.call(&m::ListTopicsRequest {}).await.is_ok(),
        "still open"
    );

    let mut broker = Raw::connect(&addr).await;
    broker.handshake(NodeRole::Broker, "c1").await.unwrap();
    let error = broker.call(&raft).await.unwrap_err();
    assert_eq!(code_of(&error), ErrorCode::CLUSTER_AUTHORIZATION_FAILED);
    assert!(broker.call(&write).await.is_ok());
    assert!(broker.call(&beat).await.is_ok());

    let mut meta = Raw::connect(&addr).await;
    meta.handshake(NodeRole::Meta, "").await.unwrap();
    assert!(meta.call(&raft).await.is_ok());
    assert!(meta.call(&write).await.is_ok());
}

#[tokio::test]
async fn handshakes_check_version_cluster_and_role() {
    let (addr, _service, _shutdown) = start(ListenerLimits::default()).await;
    let mut c = Raw::connect(&addr).await;
    let error = c.call(&m::ListTopicsRequest {}).await.unwrap_err();
    assert_eq!(code_of(&error), ErrorCode::HANDSHAKE_REQUIRED);
    let error = c.handshake(NodeRole::Client, "other").await.unwrap_err();
    assert_eq!(code_of(&error), ErrorCode::CLUSTER_ID_MISMATCH);
    let error = c
        .call(&m::HandshakeRequest {
            min_version: 2,
            max_version: 9,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(code_of(&error), ErrorCode::UNSUPPORTED_VERSION);
    let error = c
        .call(&m::HandshakeRequest {
            min_version: 1,
            max_version: 1,
            role: 99,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(code_of(&error), ErrorCode::INVALID_REQUEST);
    let ok = c.handshake(NodeRole::Client, "c1").await.unwrap();
    assert_eq!(
        (
            ok.cluster_id.as_str(),
            ok.node_id,
            ok.requests_in_flight_max
        ),
        ("c1", 7, 32)
    );
    let error = c.handshake(NodeRole::Client, "").await.unwrap_err();
    assert_eq!(
        code_of(&error),
        ErrorCode::INVALID_REQUEST,
        "only one handshake"
    );
}

#[tokio::test]
async fn a_request_is_admitted_only_after_the_one_before_it() {
    let (addr, service, _shutdown) = start(ListenerLimits::default()).await;
    let mut c = Raw::connect(&addr).await;
    c.handshake(NodeRole::Client, "").await.unwrap();
    let first = c.send(&m::CreateTopicRequest::default()).await;
    let second = c.send(&m::ListTopicsRequest {}).await;
    // Give a front end that does not wait every chance to admit the second request early.
    tokio::time::sleep(Duration::from_millis(100)).await;
    service.gate.add_permits(1);
    let mut answered = vec![c.read().await.unwrap().header.message_id];
    answered.push(c.read().await.unwrap().header.message_id);
    answered.sort();
    assert_eq!(answered, vec![first, second]);
    assert_eq!(
        service.log.events(),
        vec![
            format!("admit {first}"),
            format!("admitted {first}"),
            format!("admit {second}"),
            format!("admitted {second}")
        ]
    );
}
