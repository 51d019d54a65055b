//! The MetaServer process's TCP front: the shared connection front end ([`tinymq_net`]) in
//! front of a [`MetaService`]. It answers Raft RPCs from its peers, metadata commands (a
//! follower forwards them to the leader), image reads, broker heartbeats, and the topic
//! operations of the tools (`CreateTopic`, `AlterPartitions`, `ListTopics`, `DeleteTopic`,
//! `DecommissionBroker`, and users, ACLs and quotas through [`crate::security_ops`]), which it
//! turns into commands. The front end keeps Raft RPCs to
//! MetaServer peers and metadata writes and heartbeats to brokers and peers.
//!
//! Requests of one connection run concurrently (up to `requests_in_flight_max`), so a
//! long-polling `MetaRead` does not hold up the others. Every request is authorized in
//! [`handle`] ([`crate::authorize`]) before it is served.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use prost::Message;
use tinymq_net::{
    encode_response as encode, error_frame as error_response, Identity, ListenerLimits, Peer,
    ResponseFuture,
};
use tinymq_protocol::{messages as m, ErrorCode, Frame, OpCode};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::authorize::{AuthorizationConfig, AuthorizerCache};
use crate::raft::network::{RPC_APPEND, RPC_SNAPSHOT, RPC_VOTE};
use crate::raft::{MetaNode, MetaNodeError};
use crate::security_ops;
use crate::service::MetaService;
use crate::Command;

pub use crate::service::BROKER_SESSION_TIMEOUT;

/// Connections a MetaServer node accepts at once by default: its peers, its brokers (two
/// each) and the tools.
pub const CONNECTIONS_MAX_DEFAULT: usize = 1024;

/// A MetaServer node's listener limits by default: the broker's, with fewer connections.
pub fn default_limits() -> ListenerLimits {
    ListenerLimits {
        connections_max: CONNECTIONS_MAX_DEFAULT,
        ..ListenerLimits::default()
    }
}

pub struct MetaServer {
    pub local_addr: SocketAddr,
    pub service: Arc<MetaService>,
    /// The native port's connection counts, for metrics.
    pub connections: Arc<tinymq_net::ConnectionStats>,
    limits: ListenerLimits,
    shutdown: CancellationToken,
    tasks: TaskTracker,
}

#[derive(Debug, thiserror::Error)]
pub enum MetaServerError {
    #[error("cannot listen: {0}")]
    Listen(std::io::Error),
    #[error("invalid limits: {0}")]
    Limits(String),
    #[error(transparent)]
    Node(#[from] MetaNodeError),
}

/// The front end's view of a MetaServer node, and the ACLs of its image.
struct MetaFront(Arc<MetaService>, Arc<AuthorizerCache>);

impl tinymq_net::Service for MetaFront {
    fn identity(&self) -> Identity {
        let node = &self.0.node;
        Identity {
            cluster_id: node.cluster_id(),
            node_id: u32::try_from(node.id).unwrap_or(u32::MAX),
        }
    }

    fn credential(
        &self,
        user: &str,
        mechanism: tinymq_auth::ScramMechanism,
    ) -> Option<tinymq_auth::StoredCredential> {
        use tinymq_auth::CredentialLookup;
        self.0
            .node
            .with_image(|image| image.credential(user, mechanism))
    }

    fn peer_left(&self, peer: &Peer, served: tinymq_net::OpsServed) {
        broker_left(&self.0, peer, &served);
    }

    async fn admit(&self, frame: Frame, peer: &Peer) -> ResponseFuture {
        let (service, authorization) = (self.0.clone(), self.1.clone());
        let peer = peer.clone();
        Box::pin(async move { Some(handle(&service, frame, &peer, &authorization).await.into()) })
    }
}

/// A MetaServer node's security: what its listener asks of connections, and how it connects
/// to its peers.
#[derive(Debug, Clone, Default)]
pub struct NodeSecurity {
    pub listener: tinymq_net::ListenerSecurity,
    pub links: tinymq_client::Security,
    /// Whether requests are authorized against the image's ACLs, and the super users.
    pub authorization: AuthorizationConfig,
}

impl MetaServer {
    /// Starts node `id` of the group `peers` (id → address, including this node), storing in
    /// `dir`, and serves it on `listen` within `limits`.
    pub async fn start(
        id: u64,
        listen: SocketAddr,
        peers: BTreeMap<u64, String>,
        dir: &Path,
        limits: ListenerLimits,
    ) -> Result<MetaServer, MetaServerError> {
        let security = NodeSecurity::default();
        MetaServer::start_secure(id, listen, peers, dir, limits, security).await
    }

    /// [`MetaServer::start`] with TLS (and authentication) on its listener and its links.
    pub async fn start_secure(
        id: u64,
        listen: SocketAddr,
        peers: BTreeMap<u64, String>,
        dir: &Path,
        limits: ListenerLimits,
        security: NodeSecurity,
    ) -> Result<MetaServer, MetaServerError> {
        limits.check().map_err(MetaServerError::Limits)?;
        let listener = TcpListener::bind(listen)
            .await
            .map_err(MetaServerError::Listen)?;
        let local_addr = listener.local_addr().map_err(MetaServerError::Listen)?;
        let service = MetaService::start_secure(id, peers, dir, None, security.links).await?;
        let (shutdown, tasks) = (CancellationToken::new(), TaskTracker::new());
        let connections = Arc::new(tinymq_net::ConnectionStats::default());
        tasks.spawn(tinymq_net::serve_secure(
            listener,
            Arc::new(MetaFront(
                service.clone(),
                Arc::new(AuthorizerCache::new(security.authorization)),
            )),
            limits.clone(),
            security.listener,
            shutdown.clone(),
            tasks.clone(),
            connections.clone(),
        ));
        Ok(MetaServer {
            local_addr,
            service,
            connections,
            limits,
            shutdown,
            tasks,
        })
    }

    pub fn node(&self) -> &Arc<MetaNode> {
        &self.service.node
    }

    /// How long each of [`MetaServer::shutdown`]'s waits for requests in flight may last.
    pub fn shutdown_grace(&self) -> std::time::Duration {
        self.limits.shutdown_grace
    }

    /// Stops accepting, lets requests in flight finish (within the shutdown grace), then stops
    /// the Raft node.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        self.tasks.close();
        let grace = self.limits.shutdown_grace.saturating_mul(2);
        let _ = tokio::time::timeout(grace, self.tasks.wait()).await;
        self.service.shutdown().await;
    }
}

impl Drop for MetaServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Tells `service` that a broker's heartbeat connection was closed from the broker's side
/// (a connection that carried no heartbeat, or not from a broker, tells nothing).
pub fn broker_left(service: &Arc<MetaService>, peer: &Peer, served: &tinymq_net::OpsServed) {
    if peer.role != m::NodeRole::Broker || !served.contains(OpCode::BrokerHeartbeat) {
        return;
    }
    let Ok(broker_id) = u32::try_from(peer.node_id) else {
        return;
    };
    // The broker's token for this connection, from its heartbeats; without one, the report
    // could not be told from one about a connection already replaced, so it is not made.
    let connection = peer.connection_tag.get();
    if connection == 0 {
        return;
    }
    let service = service.clone();
    tokio::spawn(async move { service.broker_left(broker_id, connection).await });
}

/// Answers one request frame from `peer`, once `authorization` allows it.
pub async fn handle(
    service: &MetaService,
    frame: Frame,
    peer: &Peer,
    authorization: &AuthorizerCache,
) -> Bytes {
    let node = &service.node;
    let peer_node_id = peer.node_id;
    let (op, id) = (frame.header.op_code(), frame.header.message_id);
    let Some(code) = OpCode::from_code(op) else {
        return error_response(
            op,
            id,
            ErrorCode::UNKNOWN_OPERATION,
            format!("unknown operation {op}"),
        );
    };
    // Every request is checked as it is decoded, before it is served.
    macro_rules! decode {
        ($t:ty) => {
            match <$t>::decode(frame.body) {
                Ok(r) => {
                    let version = || node.version();
                    let image = || node.image();
                    if let Err(e) =
                        authorization.require_request(&peer.principal, &r, version, image)
                    {
                        return encode(op, id, &m::ErrorResponse { error: Some(e) });
                    }
                    r
                }
                Err(e) => return error_response(op, id, ErrorCode::MALFORMED_BODY, e.to_string()),
            }
        };
    }
    match code {
        OpCode::RaftRpc => {
            let request = decode!(m::RaftRpcRequest);
            let response = match raft_rpc(node, request, peer_node_id).await {
                Ok(payload) => m::RaftRpcResponse {
                    error: None,
                    payload: Bytes::from(payload),
                },
                Err(error) => m::RaftRpcResponse {
                    error: Some(error),
                    payload: Bytes::new(),
                },
            };
            encode(op, id, &response)
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
            if request.disconnected && peer.role != m::NodeRole::Meta {
                let why = "only a MetaServer node reports a broker's closed connection";
                return error_response(op, id, ErrorCode::INVALID_REQUEST, why.into());
            }
            if peer.role == m::NodeRole::Broker && u64::from(request.broker_id) == peer.node_id {
                peer.connection_tag.set(request.connection);
            }
            encode(op, id, &service.heartbeat(request).await)
        }
        OpCode::MetaRead => {
            let request = decode!(m::MetaReadRequest);
            // A node's role is proven wherever nodes authenticate; elsewhere anyone may claim
            // one (and send Raft traffic too), so the claim is what counts.
            let to_node = peer.role != m::NodeRole::Client;
            encode(op, id, &service.read_as(request, to_node).await)
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
            let name = r.name.clone();
            let command = Command::CreateTopic {
                name: r.name,
                partitions: config.partitions.max(1),
                // 0: the cluster default, min(3, live brokers).
                replication_factor: config.replication_factor,
                config: replication_settings(&config),
            };
            let w = service.write(command).await;
            let config = created_config(node, &name, config);
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
        OpCode::AlterTopicConfig => {
            let r = decode!(m::AlterTopicConfigRequest);
            let name = r.name.clone();
            let command = alter_topic_config_command(r.name, r.set, r.unset);
            let error = if r.validate_only {
                crate::command::execute(&node.image(), &command)
                    .err()
                    .map(|e| e.error_code().with_message(e.to_string()))
            } else {
                service.write(command).await.error
            };
            let config = node
                .image()
                .topics
                .get(&name)
                .map(|t| created_config(node, &name, stored_config(&t.config)));
            encode(op, id, &m::AlterTopicConfigResponse { error, config })
        }
        OpCode::DecommissionBroker => {
            let r = decode!(m::DecommissionBrokerRequest);
            let command = Command::DecommissionBroker {
                id: r.broker_id,
                move_partitions: r.move_partitions,
            };
            let w = service.write(command).await;
            encode(op, id, &m::DecommissionBrokerResponse { error: w.error })
        }
        OpCode::Rebalance => {
            let r = decode!(m::RebalanceRequest);
            let w = service
                .write(Command::Rebalance { dry_run: r.dry_run })
                .await;
            let (error, moves) = plan_of(w);
            encode(op, id, &m::RebalanceResponse { error, moves })
        }
        OpCode::DrainBroker => {
            let r = decode!(m::DrainBrokerRequest);
            let command = Command::DrainBroker {
                id: r.broker_id,
                dry_run: r.dry_run,
            };
            let (error, moves) = plan_of(service.write(command).await);
            encode(op, id, &m::DrainBrokerResponse { error, moves })
        }
        OpCode::DeleteTopic => {
            let r = decode!(m::DeleteTopicRequest);
            let w = service.write(Command::DeleteTopic { name: r.name }).await;
            encode(op, id, &m::DeleteTopicResponse { error: w.error })
        }
        OpCode::ListTopics => {
            let _ = decode!(m::ListTopicsRequest);
            let access = authorization.current(|| node.version(), || node.image());
            let mut names = node.image().user_topic_names();
            names.retain(|t| access.describes_topic(&peer.principal, t));
            encode(op, id, &m::ListTopicsResponse { error: None, names })
        }
        OpCode::PutUser => {
            let r = decode!(m::PutUserRequest);
            encode(op, id, &security_ops::put_user(service, r).await)
        }
        OpCode::DeleteUser => {
            let r = decode!(m::DeleteUserRequest);
            encode(op, id, &security_ops::delete_user(service, r).await)
        }
        OpCode::ListUsers => {
            let _ = decode!(m::ListUsersRequest);
            encode(op, id, &security_ops::list_users(&node.image()))
        }
        OpCode::CreateAcls => {
            let r = decode!(m::CreateAclsRequest);
            encode(op, id, &security_ops::create_acls(service, r).await)
        }
        OpCode::DeleteAcls => {
            let r = decode!(m::DeleteAclsRequest);
            encode(op, id, &security_ops::delete_acls(service, r).await)
        }
        OpCode::ListAcls => {
            let r = decode!(m::ListAclsRequest);
            encode(op, id, &security_ops::list_acls(&node.image(), r))
        }
        OpCode::SetQuota => {
            let r = decode!(m::SetQuotaRequest);
            encode(op, id, &security_ops::set_quota(service, r).await)
        }
        OpCode::ListQuotas => {
            let _ = decode!(m::ListQuotasRequest);
            encode(op, id, &security_ops::list_quotas(&node.image()))
        }
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

/// Runs a Raft RPC from node `sender` on the local node and serializes its result; an RPC
/// that does not parse, or that [`crate::raft::inbound`] refuses, is an error.
async fn raft_rpc(
    node: &MetaNode,
    request: m::RaftRpcRequest,
    sender: u64,
) -> Result<Vec<u8>, m::Error> {
    use crate::raft::inbound::{check_append, check_snapshot, check_vote_request, Parties};
    let raft = &node.raft;
    let members: Vec<u64> = node.members();
    let parties = Parties {
        sender,
        me: node.id,
        members: &members,
    };
    let malformed = |e: serde_json::Error| ErrorCode::MALFORMED_BODY.with_message(e.to_string());
    let refused = |why: String| {
        tracing::warn!(sender, %why, "Raft RPC refused");
        ErrorCode::INVALID_REQUEST.with_message(why)
    };
    let reply = match request.kind {
        RPC_APPEND => {
            let rpc = serde_json::from_slice(&request.payload).map_err(malformed)?;
            check_append(&rpc, parties).map_err(refused)?;
            serde_json::to_vec(&raft.append_entries(rpc).await)
        }
        RPC_VOTE => {
            let rpc = serde_json::from_slice(&request.payload).map_err(malformed)?;
            check_vote_request(&rpc, parties).map_err(refused)?;
            serde_json::to_vec(&raft.vote(rpc).await)
        }
        RPC_SNAPSHOT => {
            let rpc = serde_json::from_slice(&request.payload).map_err(malformed)?;
            check_snapshot(&rpc, parties).map_err(refused)?;
            node.snapshot_intake
                .take(&rpc, sender, crate::raft::check_snapshot_data)
                .map_err(refused)?;
            serde_json::to_vec(&raft.install_snapshot(rpc).await)
        }
        other => {
            return Err(
                ErrorCode::INVALID_REQUEST.with_message(format!("unknown Raft RPC kind {other}"))
            )
        }
    };
    reply.map_err(|e| ErrorCode::UNKNOWN_SERVER_ERROR.with_message(e.to_string()))
}

/// The placement and replication settings a created topic got, as far as this node's image
/// has it yet (a follower may lag a moment: then the request's own values). The storage
/// settings stay unset: brokers apply their defaults to them.
fn created_config(node: &MetaNode, name: &str, asked: m::TopicConfig) -> m::TopicConfig {
    let image = node.image();
    let Some(topic) = image.topics.get(name) else {
        return asked;
    };
    m::TopicConfig {
        partitions: topic.partitions.len() as u32,
        replication_factor: topic.replication_factor(),
        min_insync_replicas: topic.min_insync_replicas(),
        unclean_leader_election: topic.unclean_leader_election(),
        ..asked
    }
}

/// The error and plan of a `Rebalance` or `DrainBroker` write.
fn plan_of(w: m::MetaWriteResponse) -> (Option<m::Error>, Vec<m::PartitionMove>) {
    if w.error.is_some() {
        return (w.error, vec![]);
    }
    match serde_json::from_slice::<crate::command::Reply>(&w.reply) {
        Ok(crate::command::Reply::Plan(plan)) => (None, plan.iter().map(|m| m.to_wire()).collect()),
        other => (
            Some(
                ErrorCode::UNKNOWN_SERVER_ERROR
                    .with_message(format!("unexpected reply to a plan: {other:?}")),
            ),
            vec![],
        ),
    }
}

/// The `AlterTopicConfig` command of a request (a key given twice: the last value).
pub fn alter_topic_config_command(
    name: String,
    set: Vec<m::TopicSetting>,
    unset: Vec<String>,
) -> Command {
    Command::AlterTopicConfig {
        name,
        set: set.into_iter().map(|s| (s.key, s.value)).collect(),
        unset,
    }
}

/// The stored settings a MetaServer node can show without a broker's defaults: those the
/// topic record holds (unreadable values shown as the default, 0).
fn stored_config(config: &BTreeMap<String, String>) -> m::TopicConfig {
    let int = |key: &str| config.get(key).and_then(|v| v.parse().ok()).unwrap_or(0);
    m::TopicConfig {
        retention_ms: int("retention_ms"),
        retention_bytes: int("retention_bytes"),
        segment_bytes: u64::try_from(int("segment_bytes")).unwrap_or(0),
        segment_ms: int("segment_ms"),
        flush: config.get(crate::image::FLUSH).cloned().unwrap_or_default(),
        message_bytes_max: u32::try_from(int("message_bytes_max")).unwrap_or(0),
        message_timestamp_after_max_ms: int("message_timestamp_after_max_ms"),
        message_timestamp_before_max_ms: int("message_timestamp_before_max_ms"),
        cleanup_policy: config
            .get(crate::CLEANUP_POLICY)
            .cloned()
            .unwrap_or_default(),
        // Optional on the wire: absent when not stored (0 is a value of its own).
        delete_retention_ms: config
            .get(crate::DELETE_RETENTION_MS)
            .and_then(|v| v.parse().ok()),
        min_compaction_lag_ms: int(crate::MIN_COMPACTION_LAG_MS),
        max_compaction_lag_ms: int(crate::MAX_COMPACTION_LAG_MS),
        min_cleanable_dirty_ratio: config
            .get(crate::MIN_CLEANABLE_DIRTY_RATIO)
            .and_then(|v| v.parse().ok()),
        ..Default::default()
    }
}

/// The replication settings of a create request, which the MetaServer checks and stores
/// itself (0 and false: the defaults).
fn replication_settings(config: &m::TopicConfig) -> BTreeMap<String, String> {
    let mut settings = BTreeMap::new();
    if config.min_insync_replicas != 0 {
        settings.insert(
            crate::image::MIN_INSYNC_REPLICAS.to_string(),
            config.min_insync_replicas.to_string(),
        );
    }
    if config.unclean_leader_election {
        settings.insert(
            crate::image::UNCLEAN_LEADER_ELECTION.to_string(),
            "true".to_string(),
        );
    }
    settings
}

/// Topic settings are validated against the storage limits by brokers; a MetaServer node takes
/// only the partition count, replication factor and replication settings (brokers apply their
/// defaults to the rest).
fn settings_need_a_broker(config: &m::TopicConfig) -> Option<m::Error> {
    let only_placement = m::TopicConfig {
        partitions: config.partitions,
        replication_factor: config.replication_factor,
        min_insync_replicas: config.min_insync_replicas,
        unclean_leader_election: config.unclean_leader_election,
        ..Default::default()
    };
    (*config != only_placement).then(|| {
        ErrorCode::INVALID_CONFIG.with_message(
            "a MetaServer node takes only --partitions, --replicas, --min-insync-replicas and --unclean-leader-election; create the topic through a broker to set other settings",
        )
    })
}
