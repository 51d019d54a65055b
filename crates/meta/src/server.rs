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
/// A broker not heard from for this long is fenced by the leader.
pub const BROKER_SESSION_TIMEOUT: Duration = Duration::from_secs(9);
/// How often the leader looks for expired broker sessions.
const FENCE_CHECK_INTERVAL: Duration = Duration::from_millis(500);

/// When each broker was last heard from, kept in memory by whichever node leads (a new leader
/// starts every session afresh, so it never fences a broker it has not had time to hear).
#[derive(Default)]
struct Sessions {
    last_seen: std::sync::Mutex<std::collections::HashMap<u32, (u64, std::time::Instant)>>,
}

impl Sessions {
    fn seen(&self, id: u32, epoch: u64) {
        self.last_seen
            .lock()
            .expect("sessions lock")
            .insert(id, (epoch, std::time::Instant::now()));
    }
}
/// Pause after a failed accept.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
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
        let sessions = Arc::new(Sessions::default());
        tokio::spawn(fence_expired_brokers(node.clone(), sessions.clone()));
        let limit = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS_MAX));
        let serving = node.clone();
        let serving_sessions = sessions.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                };
                let Ok(permit) = limit.clone().try_acquire_owned() else {
                    continue;
                };
                let (node, sessions) = (serving.clone(), serving_sessions.clone());
                tokio::spawn(async move {
                    serve(stream, node, sessions).await;
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

async fn serve(mut stream: TcpStream, node: Arc<MetaNode>, sessions: Arc<Sessions>) {
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
        let response = handle(&node, &sessions, frame).await;
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

async fn handle(node: &MetaNode, sessions: &Sessions, frame: Frame) -> Bytes {
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
            let response = write(node, command.clone()).await;
            if let (
                Command::RegisterBroker { id: broker, .. },
                Ok(Reply::BrokerRegistered { epoch }),
            ) = (&command, serde_json::from_slice::<Reply>(&response.reply))
            {
                sessions.seen(*broker, epoch);
            }
            encode(op, id, &response)
        }
        OpCode::BrokerHeartbeat => {
            let request = decode!(m::BrokerHeartbeatRequest);
            encode(op, id, &heartbeat(node, sessions, request).await)
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
    let request = m::MetaWriteRequest {
        command: Bytes::from(serde_json::to_vec(&command).expect("command serializes")),
    };
    forward_request(node, leader, &request)
        .await
        .unwrap_or_else(|e| m::MetaWriteResponse {
            error: Some(e),
            leader,
            ..Default::default()
        })
}

/// Records a broker's heartbeat on the leader (a follower forwards it there).
async fn heartbeat(
    node: &MetaNode,
    sessions: &Sessions,
    request: m::BrokerHeartbeatRequest,
) -> m::BrokerHeartbeatResponse {
    match node.current_leader() {
        Some(leader) if leader == node.id => {
            let image = node.image();
            let current = image
                .brokers
                .get(&request.broker_id)
                .filter(|b| b.epoch == request.epoch && !b.fenced);
            if current.is_some() {
                sessions.seen(request.broker_id, request.epoch);
            }
            m::BrokerHeartbeatResponse {
                error: None,
                fenced: current.is_none(),
            }
        }
        Some(leader) => match forward_request(node, leader, &request).await {
            Ok(response) => response,
            Err(e) => m::BrokerHeartbeatResponse {
                error: Some(e),
                fenced: false,
            },
        },
        None => m::BrokerHeartbeatResponse {
            error: Some(
                ErrorCode::NOT_LEADER.with_message("no MetaServer leader is elected yet; retry"),
            ),
            fenced: false,
        },
    }
}

/// Sends `request` to the leader's address from the membership.
async fn forward_request<R: tinymq_protocol::Request>(
    node: &MetaNode,
    leader: u64,
    request: &R,
) -> Result<R::Response, m::Error> {
    let not_leader = |why: String| ErrorCode::NOT_LEADER.with_message(why);
    let addr = node
        .member_addr(leader)
        .ok_or_else(|| not_leader(format!("leader {leader} has no known address")))?;
    let connection = tinymq_client::Connection::connect(&addr, "meta-forward", "")
        .await
        .map_err(|e| not_leader(format!("cannot reach leader {leader}: {e}")))?;
    connection
        .request(request, FORWARD_TIMEOUT)
        .await
        .map_err(|e| match e {
            tinymq_client::ClientError::Server { code, message } => code.with_message(message),
            e => not_leader(format!("forwarding to leader {leader} failed: {e}")),
        })
}

/// On the leader: fences every registered, unfenced broker not heard from for the session
/// timeout. A node that just became leader gives every broker a full timeout first.
async fn fence_expired_brokers(node: Arc<MetaNode>, sessions: Arc<Sessions>) {
    let mut leading_since: Option<std::time::Instant> = None;
    loop {
        tokio::time::sleep(FENCE_CHECK_INTERVAL).await;
        if node.current_leader() != Some(node.id) {
            leading_since = None;
            continue;
        }
        let since = *leading_since.get_or_insert_with(std::time::Instant::now);
        let image = node.image();
        for broker in image.brokers.values().filter(|b| !b.fenced) {
            let last = sessions
                .last_seen
                .lock()
                .expect("sessions lock")
                .get(&broker.id)
                .filter(|(epoch, _)| *epoch == broker.epoch)
                .map_or(since, |(_, at)| (*at).max(since));
            if last.elapsed() > BROKER_SESSION_TIMEOUT {
                tracing::warn!(
                    broker = broker.id,
                    epoch = broker.epoch,
                    "broker session expired; fencing it"
                );
                if let Err(e) = node
                    .write(Command::FenceBroker {
                        id: broker.id,
                        epoch: broker.epoch,
                    })
                    .await
                {
                    tracing::warn!(broker = broker.id, error = %e, "fencing failed");
                }
            }
        }
    }
}
