//! The MetaServer process's TCP front: a listener speaking the native protocol in front of a
//! [`MetaService`]. It answers Raft RPCs from its peers, metadata commands (a follower forwards
//! them to the leader), image reads, broker heartbeats, and the topic operations of the tools
//! (`CreateTopic`, `AlterPartitions`, `ListTopics`, `DeleteTopic`), which it turns into
//! commands.
//!
//! Requests of one connection are served one at a time: peers and tools send few, Raft keeps
//! its own pipelining inside each RPC, and a broker watches the image (a long poll) on a
//! connection of its own.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use prost::Message;
use tinymq_protocol::frame::{FrameDecoder, FrameHeader, FRAME_BODY_BYTES_MAX_DEFAULT};
use tinymq_protocol::{messages as m, ErrorCode, Frame, OpCode, PROTOCOL_VERSION_MAX};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::raft::network::{RPC_APPEND, RPC_SNAPSHOT, RPC_VOTE};
use crate::raft::{MetaNode, MetaNodeError};
use crate::service::MetaService;
use crate::Command;

pub use crate::service::BROKER_SESSION_TIMEOUT;

/// Pause after a failed accept.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// Connections a MetaServer node accepts at once.
const CONNECTIONS_MAX: usize = 1024;

pub struct MetaServer {
    pub local_addr: SocketAddr,
    pub service: Arc<MetaService>,
}

#[derive(Debug, thiserror::Error)]
pub enum MetaServerError {
    #[error("cannot listen: {0}")]
    Listen(std::io::Error),
    #[error(transparent)]
    Node(#[from] MetaNodeError),
}

impl MetaServer {
    /// Starts node `id` of the group `peers` (id → address, including this node), storing in
    /// `dir`, and serves it on `listen`.
    pub async fn start(
        id: u64,
        listen: SocketAddr,
        peers: BTreeMap<u64, String>,
        dir: &Path,
    ) -> Result<MetaServer, MetaServerError> {
        let listener = TcpListener::bind(listen)
            .await
            .map_err(MetaServerError::Listen)?;
        let local_addr = listener.local_addr().map_err(MetaServerError::Listen)?;
        let service = MetaService::start(id, peers, dir, None).await?;
        tokio::spawn(accept_loop(listener, Arc::downgrade(&service)));
        Ok(MetaServer {
            local_addr,
            service,
        })
    }

    pub fn node(&self) -> &Arc<MetaNode> {
        &self.service.node
    }
}

async fn accept_loop(listener: TcpListener, service: std::sync::Weak<MetaService>) {
    let limit = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS_MAX));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of file descriptors and the like: back off instead of spinning.
            tokio::time::sleep(ACCEPT_BACKOFF).await;
            continue;
        };
        let Some(service) = service.upgrade() else {
            return;
        };
        let Ok(permit) = limit.clone().try_acquire_owned() else {
            continue;
        };
        tokio::spawn(async move {
            serve(stream, service).await;
            drop(permit);
        });
    }
}

fn encode(op: u8, id: u32, body: &impl Message) -> Bytes {
    let mut out = BytesMut::new();
    FrameHeader::response(op, id, body.encoded_len() as u32).encode(&mut out);
    body.encode(&mut out).expect("BytesMut grows");
    out.freeze()
}

async fn serve(mut stream: TcpStream, service: Arc<MetaService>) {
    let _ = stream.set_nodelay(true);
    // Like the broker: the small limit and only a handshake until the handshake succeeded.
    let mut decoder = FrameDecoder::pre_handshake();
    let mut buf = BytesMut::new();
    loop {
        let frame = loop {
            match decoder.decode(&mut buf) {
                Ok(Some(frame)) => break frame,
                Ok(None) => {}
                Err(_) => return,
            }
            match stream.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        };
        let is_handshake = frame.header.op_code() == OpCode::Handshake.code();
        if decoder.body_bytes_max() < FRAME_BODY_BYTES_MAX_DEFAULT && !is_handshake {
            let (op, id) = (frame.header.op_code(), frame.header.message_id);
            let refusal = error_response(
                op,
                id,
                ErrorCode::HANDSHAKE_REQUIRED,
                "send a Handshake request first".into(),
            );
            if stream.write_all(&refusal).await.is_err() {
                return;
            }
            continue;
        }
        if is_handshake {
            decoder.set_body_bytes_max(FRAME_BODY_BYTES_MAX_DEFAULT);
        }
        let response = handle(&service, frame).await;
        if stream.write_all(&response).await.is_err() {
            return;
        }
    }
}

fn error_response(op: u8, id: u32, code: ErrorCode, message: String) -> Bytes {
    encode(
        op,
        id,
        &m::ErrorResponse {
            error: Some(code.with_message(message)),
        },
    )
}

/// Answers one request frame.
pub async fn handle(service: &MetaService, frame: Frame) -> Bytes {
    let node = &service.node;
    let (op, id) = (frame.header.op_code(), frame.header.message_id);
    let Some(code) = OpCode::from_code(op) else {
        return error_response(
            op,
            id,
            ErrorCode::UNKNOWN_OPERATION,
            format!("unknown operation {op}"),
        );
    };
    macro_rules! decode {
        ($t:ty) => {
            match <$t>::decode(frame.body) {
                Ok(r) => r,
                Err(e) => return error_response(op, id, ErrorCode::MALFORMED_BODY, e.to_string()),
            }
        };
    }
    match code {
        OpCode::Handshake => {
            let image = node.image();
            encode(
                op,
                id,
                &m::HandshakeResponse {
                    error: None,
                    version: PROTOCOL_VERSION_MAX,
                    cluster_id: image.cluster_id,
                    node_id: node.id as u32,
                    frame_bytes_max: FRAME_BODY_BYTES_MAX_DEFAULT,
                    requests_in_flight_max: 1,
                },
            )
        }
        OpCode::RaftRpc => {
            let request = decode!(m::RaftRpcRequest);
            encode(
                op,
                id,
                &m::RaftRpcResponse {
                    error: None,
                    payload: Bytes::from(raft_rpc(node, request).await),
                },
            )
        }
        OpCode::MetaWrite => {
            let request = decode!(m::MetaWriteRequest);
            let command: Command = match serde_json::from_slice(&request.command) {
                Ok(c) => c,
                Err(e) => return error_response(op, id, ErrorCode::MALFORMED_BODY, e.to_string()),
            };
            encode(op, id, &service.write(command).await)
        }
        OpCode::BrokerHeartbeat => {
            let request = decode!(m::BrokerHeartbeatRequest);
            encode(op, id, &service.heartbeat(request).await)
        }
        OpCode::MetaRead => {
            let request = decode!(m::MetaReadRequest);
            encode(op, id, &service.read(request).await)
        }
        OpCode::CreateTopic => {
            let r = decode!(m::CreateTopicRequest);
            let config = r.config.unwrap_or_default();
            if let Some(refusal) = settings_need_a_broker(&config) {
                let response = m::CreateTopicResponse {
                    error: Some(refusal),
                    config: None,
                };
                return encode(op, id, &response);
            }
            let command = Command::CreateTopic {
                name: r.name,
                partitions: config.partitions.max(1),
                replication_factor: config.replication_factor.max(1),
                config: BTreeMap::new(),
            };
            let w = service.write(command).await;
            encode(
                op,
                id,
                &m::CreateTopicResponse {
                    error: w.error,
                    config: Some(config),
                },
            )
        }
        OpCode::AlterPartitions => {
            let r = decode!(m::AlterPartitionsRequest);
            let command = Command::AlterPartitions {
                name: r.name,
                partitions: r.partitions,
            };
            let w = service.write(command).await;
            encode(op, id, &m::AlterPartitionsResponse { error: w.error })
        }
        OpCode::DeleteTopic => {
            let r = decode!(m::DeleteTopicRequest);
            let w = service.write(Command::DeleteTopic { name: r.name }).await;
            encode(op, id, &m::DeleteTopicResponse { error: w.error })
        }
        OpCode::ListTopics => encode(
            op,
            id,
            &m::ListTopicsResponse {
                error: None,
                names: node.image().user_topic_names(),
            },
        ),
        other => error_response(
            op,
            id,
            ErrorCode::UNKNOWN_OPERATION,
            format!(
                "{} is served by brokers, not MetaServer nodes",
                other.name()
            ),
        ),
    }
}

/// Runs a Raft RPC on the local node and serializes its result.
async fn raft_rpc(node: &MetaNode, request: m::RaftRpcRequest) -> Vec<u8> {
    let raft = &node.raft;
    let json = |r: Result<Vec<u8>, serde_json::Error>| r.unwrap_or_default();
    match request.kind {
        RPC_APPEND => match serde_json::from_slice(&request.payload) {
            Ok(rpc) => json(serde_json::to_vec(&raft.append_entries(rpc).await)),
            Err(_) => Vec::new(),
        },
        RPC_VOTE => match serde_json::from_slice(&request.payload) {
            Ok(rpc) => json(serde_json::to_vec(&raft.vote(rpc).await)),
            Err(_) => Vec::new(),
        },
        RPC_SNAPSHOT => match serde_json::from_slice(&request.payload) {
            Ok(rpc) => json(serde_json::to_vec(&raft.install_snapshot(rpc).await)),
            Err(_) => Vec::new(),
        },
        _ => Vec::new(),
    }
}

/// Topic settings are validated against the storage limits by brokers; a MetaServer node takes
/// only the partition count and replication factor (brokers apply their defaults to the rest).
fn settings_need_a_broker(config: &m::TopicConfig) -> Option<m::Error> {
    let only_placement = m::TopicConfig {
        partitions: config.partitions,
        replication_factor: config.replication_factor,
        ..Default::default()
    };
    (*config != only_placement).then(|| {
        ErrorCode::INVALID_CONFIG.with_message(
            "a MetaServer node takes only --partitions and --replicas; create the topic through a broker to set other settings",
        )
    })
}
