//! A MetaServer node with its HTTP listener.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tinymq_auth::StoredCredential;
use tinymq_http::HttpServer;
use tinymq_meta::server::{MetaServer, NodeSecurity};
use tinymq_net::ListenerLimits;

use crate::http_listener::{self, HttpListenerConfig};
use crate::views::MetaView;
use crate::NodeError;

/// How long a node that leads alone waits for the first super user before it listens (it
/// listens all the same after, and keeps trying).
pub const ADMIN_BOOTSTRAP_WAIT_MAX: Duration = Duration::from_secs(30);

/// A MetaServer node's settings.
pub struct MetaNodeConfig {
    /// This node's id (never the id of a removed node).
    pub id: u64,
    pub listen: SocketAddr,
    /// Every node of the group, this one included.
    pub peers: BTreeMap<u64, String>,
    /// The Raft log, vote and snapshot.
    pub data: PathBuf,
    pub limits: ListenerLimits,
    pub security: NodeSecurity,
    /// User `admin`'s credentials, created at the cluster's first start.
    pub admin: Option<Vec<StoredCredential>>,
    pub http: Option<HttpListenerConfig>,
}

/// A running MetaServer node.
pub struct MetaServerNode {
    pub(crate) server: MetaServer,
    pub(crate) http: Option<HttpServer>,
}

pub(crate) async fn start(config: MetaNodeConfig) -> Result<MetaServerNode, NodeError> {
    if !config.peers.contains_key(&config.id) {
        return Err(NodeError::Config(format!(
            "--peers must include this node's id {}",
            config.id
        )));
    }
    let http = http_listener::bind(
        config.http.as_ref(),
        &config.security.listener.login_limiter,
    )
    .await?;
    let alone = config.peers.len() == 1;
    let started = MetaServer::start_secure(
        config.id,
        config.listen,
        config.peers,
        &config.data,
        config.limits,
        config.security,
    )
    .await;
    let server = match started {
        Ok(server) => server,
        Err(e) => {
            // Nothing the node started may keep listening after it failed.
            if let Some(http) = http {
                http.shutdown().await;
            }
            return Err(e.into());
        }
    };
    match config.admin {
        // A node that leads alone creates the admin before it says it listens, so a login
        // right after that line succeeds. A node of a larger group must announce itself
        // first (its peers need it to elect a leader); the leader creates the admin then.
        Some(admin) if alone => {
            tinymq_meta::security_ops::bootstrap_admin_now(
                &server.service,
                admin,
                ADMIN_BOOTSTRAP_WAIT_MAX,
            )
            .await;
        }
        Some(admin) => tinymq_meta::security_ops::bootstrap_admin(&server.service, admin),
        None => {}
    }
    let view = Arc::new(MetaView {
        node: server.node().clone(),
        connections: server.connections.clone(),
    });
    http_listener::attach(http.as_ref(), config.http, view, server.local_addr, false);
    Ok(MetaServerNode { server, http })
}

impl MetaServerNode {
    pub(crate) async fn shutdown(self) {
        self.server.shutdown().await;
        if let Some(http) = self.http {
            http.shutdown().await;
        }
    }
}
