//! What the client knows of the cluster: connections per broker address and the route cache
//! (topic → partition leaders), fetched from any node and refreshed when stale or when a broker
//! says it is not the leader.
//!
//! A node that is stalled (a stopped process, a hung host) keeps its TCP connections open and
//! answers nothing, so metadata requests ask one node at a time, each for at most
//! [`failover::METADATA_NODE_TIMEOUT`], and ask last the nodes that recently let one time out
//! (`failover.rs`). Requests to a partition's leader can watch the route meanwhile and give
//! up once another node names a new leader (`Cluster::leader_moved`).

mod failover;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tinymq_protocol::{messages as m, ErrorCode};

use crate::connection::Connection;
use crate::error::{check, ClientError};
use crate::security::Security;
pub use failover::LEADER_CHECK_INTERVAL;
use tinymq_auth::AclOperation;
use tinymq_protocol::messages::NodeRole;

/// `error` reworded when it refuses a DESCRIBE made on the way to an operation needing
/// `needed` (a producer's metadata lookup before its WRITE, a member's coordinator lookup
/// before its READ): the refusal then names `needed`, the grant that is missing
/// ([`tinymq_auth::describe_refusal_as`]). Any other error is returned as it is.
pub fn refused_as(error: ClientError, needed: AclOperation) -> ClientError {
    match error {
        ClientError::Server {
            code: ErrorCode::AUTHORIZATION_FAILED,
            message,
        } => ClientError::Server {
            code: ErrorCode::AUTHORIZATION_FAILED,
            message: tinymq_auth::describe_refusal_as(&message, needed).unwrap_or(message),
        },
        other => other,
    }
}

/// Routes older than this are fetched again before use.
pub const METADATA_AGE_MAX: Duration = Duration::from_secs(300);

/// Client-wide settings shared by producer, consumer and admin.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// `host:port` addresses to bootstrap from; any one of them is enough.
    pub bootstrap: Vec<String>,
    pub client_id: String,
    /// Refuse nodes of another cluster; empty accepts any.
    pub cluster_id: String,
    pub request_timeout: Duration,
    /// How long an administrative operation keeps retrying retriable errors (a leader
    /// change, an unreachable node) before it fails; like Kafka's `default.api.timeout.ms`.
    pub api_timeout: Duration,
    /// TLS and login for every connection (default: plain, no login).
    pub security: Security,
}

impl ClientConfig {
    /// Settings for a comma-separated bootstrap list, e.g. `"127.0.0.1:21581"`.
    pub fn new(bootstrap: &str) -> ClientConfig {
        ClientConfig {
            bootstrap: bootstrap
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            client_id: format!("tinymq-client/{}", env!("CARGO_PKG_VERSION")),
            cluster_id: String::new(),
            request_timeout: Duration::from_secs(30),
            api_timeout: Duration::from_secs(60),
            security: Security::default(),
        }
    }
}

/// The leader of each partition of a topic.
#[derive(Debug, Clone)]
pub struct TopicRoute {
    pub name: String,
    /// Leader address per partition index; `None` while the partition is offline.
    pub leaders: Vec<Option<String>>,
    fetched: Instant,
}

impl TopicRoute {
    pub fn partition_count(&self) -> u32 {
        self.leaders.len() as u32
    }

    /// The address of the partition's leader, or why there is none.
    pub fn leader(&self, partition: u32) -> Result<&str, ClientError> {
        match self.leaders.get(partition as usize) {
            Some(Some(addr)) => Ok(addr),
            Some(None) => Err(ClientError::Server {
                code: ErrorCode::LEADER_NOT_AVAILABLE,
                message: format!("{}/{partition} has no live leader", self.name),
            }),
            None => Err(ClientError::Server {
                code: ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                message: format!("{} has no partition {partition}", self.name),
            }),
        }
    }
}

#[derive(Debug)]
pub struct Cluster {
    pub config: ClientConfig,
    connections: Mutex<HashMap<String, Arc<Connection>>>,
    /// Serializes connection attempts per address, so that concurrent callers share one
    /// connection and a node that hangs in the handshake holds up only callers of that node.
    connecting: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    routes: Mutex<HashMap<String, Arc<TopicRoute>>>,
    /// Nodes that let a metadata request time out, and when: asked last until
    /// [`failover::SUSPECT_FOR`] has passed or they answer.
    suspects: Mutex<HashMap<String, Instant>>,
    /// What the routes are looked up for (WRITE for a producer, READ for a consumer): a
    /// refused lookup (a DESCRIBE) names it, since that is the grant the operator must add.
    needed: Option<AclOperation>,
}

impl Cluster {
    pub fn new(config: ClientConfig) -> Result<Arc<Cluster>, ClientError> {
        Cluster::build(config, None)
    }

    /// A cluster whose routes serve operations needing `needed` on their topics (WRITE for
    /// a producer, READ for a consumer); see [`refused_as`].
    pub fn new_for(
        config: ClientConfig,
        needed: AclOperation,
    ) -> Result<Arc<Cluster>, ClientError> {
        Cluster::build(config, Some(needed))
    }

    fn build(
        config: ClientConfig,
        needed: Option<AclOperation>,
    ) -> Result<Arc<Cluster>, ClientError> {
        if config.bootstrap.is_empty() {
            return Err(ClientError::Config("no bootstrap address".into()));
        }
        Ok(Arc::new(Cluster {
            config,
            connections: Mutex::new(HashMap::new()),
            connecting: Mutex::new(HashMap::new()),
            routes: Mutex::new(HashMap::new()),
            suspects: Mutex::new(HashMap::new()),
            needed,
        }))
    }

    /// `error` of a lookup (a DESCRIBE) made for this cluster's operations, reworded to name
    /// the permission they need when it is a refusal ([`refused_as`]).
    pub fn naming_needed(&self, error: ClientError) -> ClientError {
        match self.needed {
            Some(needed) => refused_as(error, needed),
            None => error,
        }
    }

    /// A live connection to `addr`, opened if needed.
    pub async fn connection(&self, addr: &str) -> Result<Arc<Connection>, ClientError> {
        if let Some(c) = self.connections.lock().get(addr).filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        let lock = self
            .connecting
            .lock()
            .entry(addr.to_string())
            .or_default()
            .clone();
        let _guard = lock.lock().await;
        if let Some(c) = self.connections.lock().get(addr).filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        let c = Arc::new(
            Connection::connect_secure(
                addr,
                &self.config.client_id,
                &self.config.cluster_id,
                NodeRole::Client,
                0,
                &self.config.security,
            )
            .await?,
        );
        self.connections.lock().insert(addr.to_string(), c.clone());
        Ok(c)
    }

    /// A connection to any node: known brokers first, then the bootstrap list, nodes that
    /// recently timed out last.
    pub async fn any_connection(&self) -> Result<Arc<Connection>, ClientError> {
        let mut failures = Vec::new();
        for addr in self.candidates(None) {
            match self.connection(&addr).await {
                Ok(c) => return Ok(c),
                Err(e) => failures.push(e),
            }
        }
        Err(every_address_failed(failures))
    }

    /// Sends a request to any node.
    pub async fn request<R: tinymq_protocol::Request>(
        &self,
        body: &R,
    ) -> Result<R::Response, ClientError> {
        let c = self.any_connection().await?;
        c.request(body, self.config.request_timeout).await
    }

    /// Fetches routes for `topic` now.
    pub async fn refresh(&self, topic: &str) -> Result<Arc<TopicRoute>, ClientError> {
        self.refresh_avoiding(topic, None).await
    }

    /// Fetches routes for `topic` now, asking `avoid` only if no other node answers.
    async fn refresh_avoiding(
        &self,
        topic: &str,
        avoid: Option<&str>,
    ) -> Result<Arc<TopicRoute>, ClientError> {
        let response = self
            .metadata(
                &m::MetadataRequest {
                    topics: vec![topic.to_string()],
                },
                avoid,
            )
            .await?;
        let brokers: HashMap<u32, String> = response
            .brokers
            .iter()
            .map(|b| (b.node_id, format!("{}:{}", b.host, b.port)))
            .collect();
        let t = response
            .topics
            .into_iter()
            .find(|t| t.name == topic)
            .ok_or_else(|| {
                ClientError::Protocol(format!("metadata response lacks topic {topic}"))
            })?;
        check(t.error.as_ref()).map_err(|e| self.naming_needed(e))?;
        let mut partitions = t.partitions;
        partitions.sort_by_key(|p| p.partition);
        let mut leaders = Vec::with_capacity(partitions.len());
        for (i, p) in partitions.iter().enumerate() {
            if p.partition as usize != i {
                return Err(ClientError::Protocol(format!(
                    "topic {topic} partition list has a gap at {i}"
                )));
            }
            // An offline partition (or one led by a broker missing from the list) has no
            // route until a refresh finds one; the other partitions stay usable.
            let leader = match &p.error {
                Some(e) if e.code != 0 => None,
                _ => brokers.get(&p.leader).cloned(),
            };
            leaders.push(leader);
        }
        let route = Arc::new(TopicRoute {
            name: topic.to_string(),
            leaders,
            fetched: Instant::now(),
        });
        self.routes.lock().insert(topic.to_string(), route.clone());
        Ok(route)
    }

    /// Every live broker's id and address.
    pub async fn broker_addresses(&self) -> Result<HashMap<u32, String>, ClientError> {
        let response = self
            .metadata(&m::MetadataRequest { topics: vec![] }, None)
            .await?;
        check(response.error.as_ref())?;
        Ok(response
            .brokers
            .iter()
            .map(|b| (b.node_id, format!("{}:{}", b.host, b.port)))
            .collect())
    }

    /// Cached routes for `topic`, fetched when missing or older than `METADATA_AGE_MAX` (5 minutes).
    pub async fn route(&self, topic: &str) -> Result<Arc<TopicRoute>, ClientError> {
        let cached = self.routes.lock().get(topic).cloned();
        match cached {
            Some(r) if r.fetched.elapsed() < METADATA_AGE_MAX => Ok(r),
            _ => self.refresh(topic).await,
        }
    }

    /// Forgets the cached routes of `topic`, so the next use fetches them.
    pub fn invalidate(&self, topic: &str) {
        self.routes.lock().remove(topic);
    }

    /// A connection to the leader of `topic`/`partition`.
    pub async fn leader(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<Arc<Connection>, ClientError> {
        let route = self.route(topic).await?;
        let addr = route
            .leader(partition)
            .inspect_err(|_| self.invalidate(topic))?;
        self.connection(addr).await
    }

    /// Asks a partition's leader for an offset: `-1` latest, `-2` earliest, or the first at
    /// or after a timestamp (`-1` when there is none).
    pub async fn list_offset(
        &self,
        topic: &str,
        partition: u32,
        timestamp: i64,
    ) -> Result<i64, ClientError> {
        self.list_offset_isolated(topic, partition, timestamp, 0)
            .await
    }

    /// [`Cluster::list_offset`] under `isolation_level` (1 = read committed: latest is the
    /// last stable offset).
    pub async fn list_offset_isolated(
        &self,
        topic: &str,
        partition: u32,
        timestamp: i64,
        isolation_level: u32,
    ) -> Result<i64, ClientError> {
        let connection = self.leader(topic, partition).await?;
        let request = m::ListOffsetsRequest {
            partitions: vec![m::ListOffsetsPartition {
                topic: topic.into(),
                partition,
                timestamp,
            }],
            isolation_level,
        };
        // A read: giving it up when the leader moved is always safe.
        let watched = [(topic.to_string(), partition)];
        let response = tokio::select! {
            r = connection.request(&request, self.config.request_timeout) => r?,
            moved = self.leader_moved(&watched, connection.addr(), LEADER_CHECK_INTERVAL) => {
                return Err(moved)
            }
        };
        let p = response
            .partitions
            .into_iter()
            .next()
            .ok_or_else(|| ClientError::Protocol("empty list-offsets response".into()))?;
        check(p.error.as_ref())?;
        Ok(p.offset)
    }
}

/// One error for a bootstrap list none of whose addresses answered, naming each address and
/// why it failed (a single failure is returned as it is).
fn every_address_failed(mut failures: Vec<ClientError>) -> ClientError {
    if failures.len() <= 1 {
        return failures
            .pop()
            .unwrap_or_else(|| ClientError::Config("no bootstrap address".into()));
    }
    let reasons: Vec<String> = failures
        .iter()
        .map(|e| match e {
            ClientError::Connect { addr, reason } => format!("{addr}: {reason}"),
            other => other.to_string(),
        })
        .collect();
    ClientError::Connect {
        addr: format!("any of the {} bootstrap addresses", failures.len()),
        reason: reasons.join("; "),
    }
}

#[cfg(test)]
mod bootstrap_tests {
    use super::*;

    #[test]
    fn a_failed_bootstrap_list_names_every_address_tried() {
        let e = every_address_failed(vec![
            ClientError::Connect {
                addr: "h1:1".into(),
                reason: "refused".into(),
            },
            ClientError::Connect {
                addr: "h2:2".into(),
                reason: "timed out".into(),
            },
        ]);
        assert!(e.is_retriable());
        let text = e.to_string();
        assert!(
            text.contains("h1:1: refused") && text.contains("h2:2: timed out"),
            "{text}"
        );
    }
}
