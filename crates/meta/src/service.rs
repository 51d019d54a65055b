//! The MetaServer's operations, independent of how requests arrive: metadata writes (applied
//! through Raft here, or forwarded to the leader), long-polling image reads, broker heartbeats
//! with the sessions they keep alive, and the leader's background duties (naming the cluster,
//! fencing brokers whose session expired). The TCP front ([`crate::server`]) and a broker
//! embedding a single-node MetaServer ([`crate::link::MetaLink::Local`]) both call these.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tinymq_protocol::{messages as m, ErrorCode};

pub use crate::command::BROKER_SESSION_TIMEOUT;
use crate::raft::network::TcpNetwork;
use crate::raft::{MetaNode, MetaNodeError};
use crate::session::{Ended, Sessions};
use crate::{Command, Reply};

/// Time allowed for a request forwarded to the leader.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a write waits for a leader it can reach (an election takes 1 to 2 s) before it
/// fails with `NOT_LEADER`; below the broker link's per-request timeout.
pub const LEADER_WAIT_MAX: Duration = Duration::from_secs(10);
/// Pause between attempts to find a reachable leader (doubling up to 500 ms).
const LEADER_RETRY_BACKOFF: Duration = Duration::from_millis(50);
const LEADER_RETRY_BACKOFF_MAX: Duration = Duration::from_millis(500);
/// How long a heartbeat waits for the leader to confirm it still leads a majority: less than
/// the broker's heartbeat timeout, so the broker hears `NOT_LEADER` instead of giving up on
/// the connection.
const LEADERSHIP_CONFIRM_WAIT: Duration = Duration::from_millis(500);
/// How often the leader looks for ended broker sessions.
const FENCE_CHECK_INTERVAL: Duration = Duration::from_millis(50);
/// The leader's timer firing this late means this process stalled: sessions restart.
const STALL_MIN: Duration = Duration::from_millis(400);
/// How often the leader moves leadership back to preferred replicas.
const PREFERRED_LEADER_INTERVAL: Duration = Duration::from_secs(10);
/// A broker gets preferred leaderships back only once it has been registered this long (as
/// seen by the current leader), so a broker that flaps is not handed leadership each time.
const PREFERRED_LEADER_SETTLE: Duration = Duration::from_secs(10);
/// Longest a `MetaRead` waits for a change.
pub const READ_WAIT_MAX: Duration = Duration::from_secs(30);

/// One MetaServer node and the operations it serves.
pub struct MetaService {
    pub node: Arc<MetaNode>,
    /// Broker sessions, kept by whichever node leads (a new leader starts every session
    /// afresh, so it never fences a broker it has not had time to hear).
    sessions: Sessions,
    /// TLS and login of this node's connections to its peers (forwarding to the leader).
    links: tinymq_client::Security,
    /// The connection forwards to the leader go over, kept open: a follower forwards every
    /// heartbeat of the brokers connected to it, several a second each.
    leader_connection: parking_lot::Mutex<Option<(u64, Arc<tinymq_client::Connection>)>>,
}

impl MetaService {
    /// Opens node `id` of the group `peers` (id → address, this node included) with its data in
    /// `dir`, and starts its background duties. The node with the smallest id initializes the
    /// group the first time. A new cluster is named `cluster_id` if given (an imported
    /// standalone server keeps its id), else a fresh id.
    pub async fn start(
        id: u64,
        peers: BTreeMap<u64, String>,
        dir: &Path,
        cluster_id: Option<String>,
    ) -> Result<Arc<MetaService>, MetaNodeError> {
        let links = tinymq_client::Security::default();
        MetaService::start_secure(id, peers, dir, cluster_id, links).await
    }

    /// [`MetaService::start`] whose connections to peers (Raft, forwarding) use `links`.
    pub async fn start_secure(
        id: u64,
        peers: BTreeMap<u64, String>,
        dir: &Path,
        cluster_id: Option<String>,
        links: tinymq_client::Security,
    ) -> Result<Arc<MetaService>, MetaNodeError> {
        let network = TcpNetwork {
            from: id,
            security: links.clone(),
            ..Default::default()
        };
        let node = Arc::new(MetaNode::start(id, dir, network).await?);
        let initialized = node.raft.is_initialized().await.unwrap_or(true);
        if peers.keys().next() == Some(&id) && !initialized {
            // Initializing an already initialized group is refused by openraft: harmless.
            if let Err(e) = node.initialize(peers).await {
                tracing::info!(error = %e, "raft group not initialized by this node");
            }
        }
        let service = Arc::new(MetaService {
            node,
            sessions: Sessions::default(),
            links,
            leader_connection: parking_lot::Mutex::new(None),
        });
        tokio::spawn(fence_expired_brokers(Arc::downgrade(&service)));
        tokio::spawn(elect_preferred_leaders(Arc::downgrade(&service)));
        tokio::spawn(name_the_cluster(Arc::downgrade(&service), cluster_id));
        Ok(service)
    }

    /// Applies `command` (on the leader, or forwarded to it) and encodes the reply.
    pub async fn write(&self, command: Command) -> m::MetaWriteResponse {
        let response = self.write_here_or_forward(command.clone()).await;
        if let (Command::RegisterBroker { id, .. }, Ok(Reply::BrokerRegistered { epoch })) =
            (&command, serde_json::from_slice::<Reply>(&response.reply))
        {
            // The session starts at registration, not at the first heartbeat.
            self.sessions.seen(*id, epoch, 0, Instant::now());
        }
        response
    }

    /// Applies `command` here when this node leads, or forwards it to the leader. While there
    /// is no leader (an election) or the leader named cannot be reached (it just died), waits
    /// and tries again, for up to [`LEADER_WAIT_MAX`]: only attempts that certainly did not
    /// reach a leader are repeated, so a command is never applied twice by this loop.
    async fn write_here_or_forward(&self, command: Command) -> m::MetaWriteResponse {
        let deadline = tokio::time::Instant::now() + LEADER_WAIT_MAX;
        let mut backoff = LEADER_RETRY_BACKOFF;
        loop {
            // A leader without its majority never answers: bound the wait (the entry may
            // still be committed later, so this is REQUEST_TIMED_OUT, not NOT_LEADER).
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let Ok(written) = tokio::time::timeout(left, self.node.write(command.clone())).await
            else {
                return m::MetaWriteResponse {
                    error: Some(ErrorCode::REQUEST_TIMED_OUT.with_message(format!(
                        "not committed within {} s (no majority?); it may or may not be applied",
                        LEADER_WAIT_MAX.as_secs()
                    ))),
                    ..Default::default()
                };
            };
            let why_not = match written {
                Ok(reply) => {
                    return m::MetaWriteResponse {
                        error: None,
                        reply: Bytes::from(serde_json::to_vec(&reply).expect("reply serializes")),
                        leader: self.node.id,
                    }
                }
                Err(MetaNodeError::Command(e)) => {
                    return m::MetaWriteResponse {
                        error: Some(e.error_code().with_message(e.to_string())),
                        ..Default::default()
                    }
                }
                Err(MetaNodeError::NotLeader {
                    leader: Some(leader),
                }) if leader != self.node.id => {
                    let request = m::MetaWriteRequest {
                        command: Bytes::from(
                            serde_json::to_vec(&command).expect("command serializes"),
                        ),
                    };
                    match self.forward(leader, &request).await {
                        Ok(response) if !is_not_leader(response.error.as_ref()) => return response,
                        Ok(response) => response.error.map_or_else(String::new, |e| e.message),
                        Err(Forward::NotSent(why)) => why,
                        Err(Forward::Failed(e)) => {
                            return m::MetaWriteResponse {
                                error: Some(e),
                                leader,
                                ..Default::default()
                            }
                        }
                    }
                }
                Err(MetaNodeError::NotLeader { .. }) => "no leader is elected yet".to_string(),
                Err(e) => {
                    return m::MetaWriteResponse {
                        error: Some(ErrorCode::UNKNOWN_SERVER_ERROR.with_message(e.to_string())),
                        ..Default::default()
                    }
                }
            };
            if tokio::time::Instant::now() + backoff > deadline {
                return m::MetaWriteResponse {
                    error: Some(ErrorCode::NOT_LEADER.with_message(format!(
                        "no reachable MetaServer leader within {} s ({why_not}); retry",
                        LEADER_WAIT_MAX.as_secs()
                    ))),
                    ..Default::default()
                };
            }
            tracing::debug!(reason = %why_not, "waiting for a reachable MetaServer leader");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(LEADER_RETRY_BACKOFF_MAX);
        }
    }

    /// The image as applied here, once it is newer than `since_version` or the wait is over.
    pub async fn read(&self, request: m::MetaReadRequest) -> m::MetaReadResponse {
        self.read_as(request, true).await
    }

    /// [`MetaService::read`] for a reader that is a node (`with_credentials`) or not: the users'
    /// SCRAM verifiers go to nodes only.
    pub async fn read_as(
        &self,
        request: m::MetaReadRequest,
        with_credentials: bool,
    ) -> m::MetaReadResponse {
        let wait = Duration::from_millis(u64::from(request.wait_ms)).min(READ_WAIT_MAX);
        if wait > Duration::ZERO {
            self.node.wait_for_change(request.since_version, wait).await;
        }
        let (version, image) = self.node.versioned_image();
        let image = if with_credentials || image.users.is_empty() {
            serde_json::to_vec(&image)
        } else {
            serde_json::to_vec(&image.without_credentials())
        };
        m::MetaReadResponse {
            error: None,
            image: Bytes::from(image.expect("image serializes")),
            leader: self.node.current_leader().unwrap_or(0),
            voters: self.node.voters().into_iter().collect(),
            node_id: self.node.id,
            version,
            nodes: self
                .node
                .members()
                .into_iter()
                .filter_map(|id| {
                    let addr = self.node.member_addr(id)?;
                    Some(m::MetaNodeAddress { id, addr })
                })
                .collect(),
        }
    }

    /// Called when broker `broker_id`'s heartbeat connection to this node was closed from the
    /// broker's side: the leader hears of it (a follower forwards it, once) and fences the
    /// broker unless a heartbeat follows within the grace.
    pub async fn broker_left(&self, broker_id: u32, connection: u64) {
        tracing::info!(broker = broker_id, "a broker's heartbeat connection closed");
        let request = m::BrokerHeartbeatRequest {
            broker_id,
            epoch: 0,
            disconnected: true,
            connection,
        };
        let response = self.heartbeat(request).await;
        if let Some(e) = response.error {
            tracing::debug!(broker = broker_id, error = %e.message, "the leader did not hear of a broker's disconnect");
        }
    }

    /// Records a broker's heartbeat on the leader (a follower forwards it there), or a node's
    /// word that the broker's heartbeat connection closed (`disconnected`).
    pub async fn heartbeat(
        &self,
        request: m::BrokerHeartbeatRequest,
    ) -> m::BrokerHeartbeatResponse {
        match self.node.current_leader() {
            Some(leader) if leader == self.node.id && request.disconnected => {
                let image = self.node.image();
                if let Some(b) = image.brokers.get(&request.broker_id).filter(|b| !b.fenced) {
                    let connection = request.connection;
                    self.sessions
                        .left(b.id, b.epoch, connection, Instant::now());
                }
                m::BrokerHeartbeatResponse::default()
            }
            Some(leader) if leader == self.node.id => {
                // A leader cut off from its majority still believes it leads (openraft has no
                // check-quorum); the majority may have fenced this broker meanwhile. Answering
                // "not fenced" renews the broker's trust in its leaderships, so confirm this
                // node still leads a majority first.
                let confirmed = tokio::time::timeout(
                    LEADERSHIP_CONFIRM_WAIT,
                    self.node.raft.ensure_linearizable(),
                )
                .await;
                if !matches!(confirmed, Ok(Ok(_))) {
                    return m::BrokerHeartbeatResponse {
                        error: Some(ErrorCode::NOT_LEADER.with_message(
                            "this MetaServer node cannot confirm that it still leads a majority; retry",
                        )),
                        fenced: false,
                    };
                }
                let image = self.node.image();
                let current = image
                    .brokers
                    .get(&request.broker_id)
                    .filter(|b| b.epoch == request.epoch && !b.fenced);
                // Not renewed when the leader decided to fence this incarnation meanwhile.
                let renewed = current.is_some() && {
                    let (id, epoch, connection) =
                        (request.broker_id, request.epoch, request.connection);
                    (self.sessions).seen(id, epoch, connection, Instant::now())
                };
                m::BrokerHeartbeatResponse {
                    error: None,
                    fenced: !renewed,
                }
            }
            Some(leader) => self.forward(leader, &request).await.unwrap_or_else(|e| {
                m::BrokerHeartbeatResponse {
                    error: Some(e.into_wire()),
                    fenced: false,
                }
            }),
            None => m::BrokerHeartbeatResponse {
                error: Some(no_leader()),
                fenced: false,
            },
        }
    }

    /// Sends `request` to the leader's address from the membership.
    async fn forward<R: tinymq_protocol::Request>(
        &self,
        leader: u64,
        request: &R,
    ) -> Result<R::Response, Forward> {
        let connection = self.leader_connection(leader).await?;
        let pending = match connection.start_request(request).await {
            Ok(pending) => pending,
            Err(e) => {
                // The kept connection had closed: nothing was sent, so trying again is safe.
                self.forget_leader_connection(&connection);
                return Err(Forward::NotSent(format!(
                    "connection to leader {leader}: {e}"
                )));
            }
        };
        let answer = pending.wait(FORWARD_TIMEOUT).await;
        if answer.is_err() && connection.is_closed() {
            self.forget_leader_connection(&connection);
        }
        answer.map_err(|e| match e {
            tinymq_client::ClientError::Server { code, message } => {
                Forward::Failed(code.with_message(message))
            }
            // Sent, but no answer: whether it was applied is unknown, so this is not
            // NOT_LEADER (which promises it was not).
            e => Forward::Failed(ErrorCode::REQUEST_TIMED_OUT.with_message(format!(
                "forwarding to leader {leader} failed: {e}; it may or may not have been applied"
            ))),
        })
    }

    /// The kept connection to `leader`, opened anew when there is none, it went to another
    /// node, or it closed. Connecting happens outside the lock: a forward to a new leader never
    /// waits behind one still trying a leader whose host is gone.
    async fn leader_connection(
        &self,
        leader: u64,
    ) -> Result<Arc<tinymq_client::Connection>, Forward> {
        let open_to = |kept: &Option<(u64, Arc<tinymq_client::Connection>)>| {
            kept.as_ref()
                .filter(|(to, c)| *to == leader && !c.is_closed())
                .map(|(_, c)| c.clone())
        };
        if let Some(c) = open_to(&self.leader_connection.lock()) {
            return Ok(c);
        }
        let addr = self
            .node
            .member_addr(leader)
            .ok_or_else(|| Forward::NotSent(format!("leader {leader} has no known address")))?;
        let role = tinymq_client::NodeRole::Meta;
        let (id, security) = (self.node.id, &self.links);
        let connect = tinymq_client::Connection::connect_secure(
            &addr,
            "meta-forward",
            "",
            role,
            id,
            security,
        );
        let connection = Arc::new(
            connect
                .await
                .map_err(|e| Forward::NotSent(format!("cannot reach leader {leader}: {e}")))?,
        );
        let mut kept = self.leader_connection.lock();
        // Another forward may have connected meanwhile: keep one connection, use that.
        if let Some(c) = open_to(&kept) {
            return Ok(c);
        }
        *kept = Some((leader, connection.clone()));
        Ok(connection)
    }

    fn forget_leader_connection(&self, connection: &Arc<tinymq_client::Connection>) {
        let mut kept = self.leader_connection.lock();
        if kept
            .as_ref()
            .is_some_and(|(_, c)| Arc::ptr_eq(c, connection))
        {
            *kept = None;
        }
    }

    pub async fn shutdown(&self) {
        self.node.shutdown().await;
    }
}

/// Why a request forwarded to the leader got no answer.
enum Forward {
    /// It never left this node (no address, or no connection): safe to try again.
    NotSent(String),
    /// It was sent and failed, or its fate is unknown: not retried here.
    Failed(m::Error),
}

impl Forward {
    fn into_wire(self) -> m::Error {
        match self {
            Forward::NotSent(why) => ErrorCode::NOT_LEADER.with_message(why),
            Forward::Failed(e) => e,
        }
    }
}

fn is_not_leader(error: Option<&m::Error>) -> bool {
    error.is_some_and(|e| e.code == u32::from(ErrorCode::NOT_LEADER.code()))
}

fn no_leader() -> m::Error {
    ErrorCode::NOT_LEADER.with_message("no MetaServer leader is elected yet; retry")
}

/// On the leader: fences every registered, unfenced broker whose session ended (see
/// [`crate::session`]). A node that just became leader gives every broker a full timeout first.
async fn fence_expired_brokers(service: std::sync::Weak<MetaService>) {
    let mut leading_since: Option<Instant> = None;
    loop {
        let slept_from = Instant::now();
        tokio::time::sleep(FENCE_CHECK_INTERVAL).await;
        let slept = slept_from.elapsed();
        let Some(service) = service.upgrade() else {
            return;
        };
        let node = &service.node;
        if node.current_leader() != Some(node.id) {
            if leading_since.take().is_some() {
                service.sessions.end_term();
            }
            continue;
        }
        // This process itself stalled (paused, starved): the heartbeats brokers sent meanwhile
        // were not read yet, so every session restarts now instead of all being fenced at once.
        if slept > STALL_MIN {
            tracing::warn!(
                stalled_ms = slept.as_millis() as u64,
                "the MetaServer was stalled; broker sessions restart"
            );
            leading_since = Some(Instant::now());
        }
        let since = *leading_since.get_or_insert_with(Instant::now);
        let image = node.image();
        let sessions = &service.sessions;
        // A mark stays while the image names that incarnation, fenced or not: a heartbeat
        // handler that read the image from before the fence must still find it refused.
        sessions
            .retain_fencing(|id, epoch| image.brokers.get(&id).is_some_and(|b| b.epoch == epoch));
        for broker in image.brokers.values().filter(|b| !b.fenced) {
            let (id, epoch) = (broker.id, broker.epoch);
            let Some(ended) = sessions.end_if_over(id, epoch, since, Instant::now()) else {
                continue;
            };
            match ended {
                Ended::Expired => {
                    tracing::warn!(broker = id, epoch, "broker session expired; fencing it")
                }
                Ended::Disconnected => tracing::warn!(
                    broker = id,
                    epoch,
                    "broker's heartbeat connection closed and no heartbeat followed; fencing it"
                ),
            }
            if let Err(e) = node.write(Command::FenceBroker { id, epoch }).await {
                tracing::warn!(broker = id, error = %e, "fencing failed");
            }
        }
    }
}

/// On the leader, every [`PREFERRED_LEADER_INTERVAL`]: hands each partition back to its first
/// replica where that one is live and in sync, skipping brokers registered (as far as this
/// leader has seen) for less than [`PREFERRED_LEADER_SETTLE`]. The command runs against the
/// local image first, so a cluster already balanced writes nothing to the log.
async fn elect_preferred_leaders(service: std::sync::Weak<MetaService>) {
    let mut first_seen: HashMap<(u32, u64), Instant> = HashMap::new();
    loop {
        tokio::time::sleep(PREFERRED_LEADER_INTERVAL).await;
        let Some(service) = service.upgrade() else {
            return;
        };
        let node = &service.node;
        if node.current_leader() != Some(node.id) {
            first_seen.clear();
            continue;
        }
        let image = node.image();
        first_seen
            .retain(|(id, epoch), _| image.brokers.get(id).is_some_and(|b| b.epoch == *epoch));
        let except_brokers = image
            .brokers
            .values()
            .filter(|b| !b.fenced)
            .filter(|b| {
                let since = *first_seen
                    .entry((b.id, b.epoch))
                    .or_insert_with(Instant::now);
                since.elapsed() < PREFERRED_LEADER_SETTLE
            })
            .map(|b| b.id)
            .collect();
        let elect = Command::ElectPreferredLeaders {
            topic: None,
            except_brokers,
        };
        if crate::execute(&image, &elect).is_ok_and(|(records, _)| records.is_empty()) {
            continue;
        }
        tracing::info!("moving leadership back to preferred replicas");
        if let Err(e) = node.write(elect).await {
            tracing::warn!(error = %e, "preferred leader election failed");
        }
    }
}

/// Whichever node leads first gives the cluster its id (a command that changes nothing once
/// an id is set, so racing leaders are harmless).
async fn name_the_cluster(service: std::sync::Weak<MetaService>, proposed: Option<String>) {
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let Some(service) = service.upgrade() else {
            return;
        };
        let node = &service.node;
        if !node.image().cluster_id.is_empty() {
            return;
        }
        if node.current_leader() == Some(node.id) {
            let cluster_id = proposed.clone().unwrap_or_else(new_cluster_id);
            if let Err(e) = node.write(Command::SetClusterId { cluster_id }).await {
                tracing::warn!(error = %e, "naming the cluster failed; will retry");
            }
        }
    }
}

fn new_cluster_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("tmq-{:016x}{:08x}", nanos as u64, std::process::id())
}

/// Strips the users' SCRAM verifiers from a MetaRead answer (one a broker relays from the
/// MetaServer to a reader that is not a node). An image that does not parse is left out whole.
pub fn strip_credentials(response: &mut m::MetaReadResponse) {
    let Ok(image) = serde_json::from_slice::<crate::MetadataImage>(&response.image) else {
        response.image = Bytes::new();
        return;
    };
    if !image.users.is_empty() {
        let stripped = serde_json::to_vec(&image.without_credentials()).expect("image serializes");
        response.image = Bytes::from(stripped);
    }
}
