//! The MetaServer process: a Raft node ([`MetaNode`]) behind a TCP listener speaking the native
//! protocol. It answers Raft RPCs from its peers, metadata commands (a follower forwards them to
//! the leader), image reads, and the topic operations of the tools (`CreateTopic`,
//! `ListTopics`, `DeleteTopic`), which it turns into commands.
//!
//! Requests of one connection are served one at a time: peers and tools send few, and Raft
//! keeps its own pipelining inside each RPC.

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

use crate::raft::network::{TcpNetwork, RPC_APPEND, RPC_SNAPSHOT, RPC_VOTE};
use crate::raft::{MetaNode, MetaNodeError};
use crate::{Command, Reply};

/// Time allowed for a command forwarded to the leader.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections a MetaServer node accepts at once.
const CONNECTIONS_MAX: usize = 1024;

pub struct MetaServer {
    pub local_addr: SocketAddr,
    pub node: Arc<MetaNode>,
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
    /// `dir`. The node with the smallest id initializes the group the first time.
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
        let node = Arc::new(MetaNode::start(id, dir, TcpNetwork).await?);
        let limit = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS_MAX));
        let serving = node.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let Ok(permit) = limit.clone().try_acquire_owned() else {
                    continue;
                };
                let node = serving.clone();
                tokio::spawn(async move {
                    serve(stream, node).await;
                    drop(permit);
                });
            }
        });
        if peers.keys().next() == Some(&id) && node.voters().is_empty() {
            // Initializing an already initialized group is refused by openraft: harmless.
            if let Err(e) = node.initialize(peers).await {
                tracing::info!(error = %e, "raft group not initialized by this node");
            }
        }
        Ok(MetaServer { local_addr, node })
    }
}

fn encode(op: u8, id: u32, body: &impl Message) -> Bytes {
    let mut out = BytesMut::new();
    FrameHeader::response(op, id, body.encoded_len() as u32).encode(&mut out);
    body.encode(&mut out).expect("BytesMut grows");
    out.freeze()
}

async fn serve(mut stream: TcpStream, node: Arc<MetaNode>) {
    let _ = stream.set_nodelay(true);
    let decoder = FrameDecoder::new(FRAME_BODY_BYTES_MAX_DEFAULT);
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
        let response = handle(&node, frame).await;
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

async fn handle(node: &MetaNode, frame: Frame) -> Bytes {
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
            encode(op, id, &write(node, command).await)
        }
        OpCode::MetaRead => {
            let image = node.image();
            encode(
                op,
                id,
                &m::MetaReadResponse {
                    error: None,
                    image: Bytes::from(serde_json::to_vec(&image).expect("image serializes")),
                    leader: node.current_leader().unwrap_or(0),
                    voters: node.voters().into_iter().collect(),
                    node_id: node.id,
                },
            )
        }
        OpCode::CreateTopic => {
            let r = decode!(m::CreateTopicRequest);
            let config = r.config.unwrap_or_default();
            let command = Command::CreateTopic {
                name: r.name,
                partitions: config.partitions.max(1),
                replication_factor: config.replication_factor.max(1),
                config: BTreeMap::new(),
            };
            let w = write(node, command).await;
            encode(
                op,
                id,
                &m::CreateTopicResponse {
                    error: w.error,
                    config: Some(config),
                },
            )
        }
        OpCode::DeleteTopic => {
            let r = decode!(m::DeleteTopicRequest);
            let w = write(node, Command::DeleteTopic { name: r.name }).await;
            encode(op, id, &m::DeleteTopicResponse { error: w.error })
        }
        OpCode::ListTopics => encode(
            op,
            id,
            &m::ListTopicsResponse {
                error: None,
                names: node.image().topics.keys().cloned().collect(),
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

/// Applies a command here if this node leads, else forwards it to the leader.
async fn write(node: &MetaNode, command: Command) -> m::MetaWriteResponse {
    let reply = |r: Reply| m::MetaWriteResponse {
        error: None,
        reply: Bytes::from(serde_json::to_vec(&r).expect("reply serializes")),
        leader: 0,
    };
    match node.write(command.clone()).await {
        Ok(r) => reply(r),
        Err(MetaNodeError::Command(e)) => m::MetaWriteResponse {
            error: Some(e.error_code().with_message(e.to_string())),
            ..Default::default()
        },
        Err(MetaNodeError::NotLeader {
            leader: Some(leader),
        }) => forward(node, leader, command).await,
        Err(MetaNodeError::NotLeader { leader: None }) => m::MetaWriteResponse {
            error: Some(
                ErrorCode::NOT_LEADER.with_message("no MetaServer leader is elected yet; retry"),
            ),
            ..Default::default()
        },
        Err(e) => m::MetaWriteResponse {
            error: Some(ErrorCode::UNKNOWN_SERVER_ERROR.with_message(e.to_string())),
            ..Default::default()
        },
    }
}

async fn forward(node: &MetaNode, leader: u64, command: Command) -> m::MetaWriteResponse {
    let not_leader = |why: String| m::MetaWriteResponse {
        error: Some(ErrorCode::NOT_LEADER.with_message(why)),
        leader,
        ..Default::default()
    };
    let Some(addr) = node.member_addr(leader) else {
        return not_leader(format!("leader {leader} has no known address"));
    };
    let connection = match tinymq_client::Connection::connect(&addr, "meta-forward", "").await {
        Ok(c) => c,
        Err(e) => return not_leader(format!("cannot reach leader {leader}: {e}")),
    };
    let request = m::MetaWriteRequest {
        command: Bytes::from(serde_json::to_vec(&command).expect("command serializes")),
    };
    match connection.request(&request, FORWARD_TIMEOUT).await {
        Ok(response) => response,
        Err(tinymq_client::ClientError::Server { code, message }) => m::MetaWriteResponse {
            error: Some(code.with_message(message)),
            leader,
            ..Default::default()
        },
        Err(e) => not_leader(format!("forwarding to leader {leader} failed: {e}")),
    }
}
