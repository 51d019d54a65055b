//! One tinymq node, assembled: the standalone server (a broker with its own single-node
//! MetaServer), a cluster broker, or a MetaServer node, each with its optional HTTP listener
//! (metrics, health, REST, console) and — for brokers — its optional Kafka listener.
//! [`Node::start`] brings the parts up in the order their clients need (HTTP first, so
//! `/health/ready` answers "starting"; the broker; then the Kafka listener, whose advertised
//! address the broker registers), and [`Node::shutdown`] stops them in reverse.
//!
//! The binary (`tinymq server|broker|meta`) is argument parsing plus [`Node::start`]; tests
//! start several nodes in one process the same way. What a config holds is already resolved:
//! reading files (certificates, secrets, passwords) is the caller's job, so a node starts from
//! values alone.
//!
//! The process's allocator is the caller's too: a binary that serves Kafka clients installs
//! [`alloc_guard::GuardedAllocator`] (see there why the Kafka decoder needs it).

pub mod alloc_guard;
// The unit tests of `alloc_guard` allocate past its threshold: they run under it, as the
// binary does (cfg(test) only — a library must not choose its users' allocator).
#[cfg(test)]
#[global_allocator]
static TEST_ALLOCATOR: alloc_guard::GuardedAllocator = alloc_guard::GuardedAllocator;
mod broker_node;
mod http_listener;
mod meta_node;
pub mod views;

use std::net::SocketAddr;

pub use broker_node::{BrokerNodeConfig, KafkaListenerConfig};
pub use http_listener::HttpListenerConfig;
pub use meta_node::MetaNodeConfig;

/// [`Node::shutdown_deadline`]'s margin over the graces: the broker's unregister call (5 s at
/// most) and step-down (2 s at most), the Raft core's stop and the partitions' close.
const SHUTDOWN_MARGIN: std::time::Duration = std::time::Duration::from_secs(30);

/// What a node runs.
pub enum NodeConfig {
    /// `tinymq server`: a broker with its own single-node MetaServer (`broker.meta` empty).
    Standalone(BrokerNodeConfig),
    /// `tinymq broker`: a broker of the cluster whose MetaServer nodes `broker.meta` lists.
    Broker(BrokerNodeConfig),
    /// `tinymq meta`: one node of the MetaServer group.
    Meta(MetaNodeConfig),
}

/// Why a node did not start. Each names the part that failed.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("{0}")]
    Config(String),
    #[error("cannot listen for Kafka clients on {addr}: {source}")]
    KafkaListen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Http(#[from] tinymq_http::HttpError),
    #[error(transparent)]
    Broker(#[from] tinymq_broker::StartError),
    #[error(transparent)]
    Meta(#[from] tinymq_meta::server::MetaServerError),
}

/// A running node; [`Node::shutdown`] stops it.
pub enum Node {
    Broker(broker_node::BrokerNode),
    Meta(meta_node::MetaServerNode),
}

impl Node {
    /// Starts the node `config` describes; it accepts connections once this returns.
    pub async fn start(config: NodeConfig) -> Result<Node, NodeError> {
        Ok(match config {
            NodeConfig::Standalone(c) => Node::Broker(broker_node::start(c, true).await?),
            NodeConfig::Broker(c) => Node::Broker(broker_node::start(c, false).await?),
            NodeConfig::Meta(c) => Node::Meta(meta_node::start(c).await?),
        })
    }

    /// The native protocol's address (the broker's, or the MetaServer node's).
    pub fn local_addr(&self) -> SocketAddr {
        match self {
            Node::Broker(b) => b.broker.local_addr,
            Node::Meta(m) => m.server.local_addr,
        }
    }

    /// The Kafka listener's address, when it runs one.
    pub fn kafka_addr(&self) -> Option<SocketAddr> {
        match self {
            Node::Broker(b) => b.kafka.as_ref().map(|k| k.local_addr),
            Node::Meta(_) => None,
        }
    }

    /// The HTTP listener's address, when it runs one.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        let http = match self {
            Node::Broker(b) => &b.http,
            Node::Meta(m) => &m.http,
        };
        http.as_ref().map(|h| h.local_addr)
    }

    /// The broker, for a broker or standalone node.
    pub fn broker(&self) -> Option<&tinymq_broker::Broker> {
        match self {
            Node::Broker(b) => Some(&b.broker),
            Node::Meta(_) => None,
        }
    }

    /// The MetaServer, for a MetaServer node.
    pub fn meta_server(&self) -> Option<&tinymq_meta::server::MetaServer> {
        match self {
            Node::Broker(_) => None,
            Node::Meta(m) => Some(&m.server),
        }
    }

    /// Resolves (with the reason) when the node's Raft core stopped — a standalone server's
    /// embedded MetaServer or a MetaServer node: its metadata can no longer change, and a
    /// restart recovers from the data directory. Never resolves for a cluster broker.
    pub async fn fatal(&self) -> String {
        match self {
            Node::Broker(b) => b.broker.embedded_meta_failed().await,
            Node::Meta(m) => m.server.node().fatal().await,
        }
    }

    /// How long a whole [`Node::shutdown`] may take before the caller should give up on it and
    /// exit: every wait inside is bounded by the shutdown grace (the Kafka listener's, the
    /// broker's or MetaServer's twice, the HTTP listener's), so four graces plus a margin for
    /// the MetaServer's answers, the Raft core's stop and the partitions' last flush. A
    /// shutdown past it is a defect (something waited without a bound), and the binary says so.
    pub fn shutdown_deadline(&self) -> std::time::Duration {
        let grace = match self {
            Node::Broker(b) => b.broker.shutdown_grace(),
            Node::Meta(m) => m.server.shutdown_grace(),
        };
        grace.saturating_mul(4) + SHUTDOWN_MARGIN
    }

    /// Stops accepting, lets requests in flight finish (within the listeners' grace), and
    /// closes every part.
    pub async fn shutdown(self) {
        match self {
            Node::Broker(b) => b.shutdown().await,
            Node::Meta(m) => m.shutdown().await,
        }
    }
}
