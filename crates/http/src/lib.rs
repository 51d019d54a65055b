//! The HTTP listener every tinymq node may run beside its native port: Prometheus metrics at
//! `/metrics` and health checks at `/health/live` and `/health/ready`.
//!
//! This crate knows nothing of brokers or MetaServers: the binary hands it a [`NodeView`], a
//! narrow read-only view of what the node holds, once the node has started. Until then the
//! listener answers: alive, not ready.
//!
//! Layering: `listener` (accepting, with a connection limit) → `routes` (axum router, body
//! and time limits) → `metrics` (prometheus-client collectors run at scrape time) and
//! `health`; `console` serves the embedded web console at `/`.

mod api;
mod auth;
mod console;
mod health;
mod limits;
mod listener;
mod metrics;
mod node_metrics;
mod process;
mod routes;
mod view;

pub use api::{
    ShareInFlightView, SharePartitionView, HTTP_GROUPS_LIST_MAX, HTTP_MESSAGES_PAGE_BYTES_MAX,
    HTTP_MESSAGES_PAGE_MAX,
};
pub use auth::{
    HttpAuth, HTTP_AUTH_CACHE_ENTRIES_MAX, HTTP_TOKEN_LIFETIME_MS_DEFAULT,
    HTTP_TOKEN_LIFETIME_MS_MAX,
};
pub use limits::HttpLimits;
pub use view::{
    BrokerStats, CleanerFigures, ConnectionCounts, GroupStats, HistogramData, NodeView, OpStats,
    PartitionStats, QuotaThrottle, RaftStats, ReadinessCheck, Traffic,
};

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The default address of `tinymq server`'s HTTP listener: loopback only.
pub const DEFAULT_HTTP_ADDR: &str = "127.0.0.1:21582";

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("cannot listen for HTTP on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("invalid HTTP limits: {0}")]
    Limits(String),
}

/// TLS and authentication of one HTTP listener; the default is neither (`--auth none`, plain
/// HTTP), as before security existed.
#[derive(Clone, Default)]
pub struct HttpSecurity {
    /// Serve HTTPS with this certificate (reloaded in place on SIGHUP by its owner).
    pub tls: Option<tinymq_tls::ServerTls>,
    /// Ask every request for credentials (`--auth scram|mtls`). The REST API then needs the
    /// node's own login (cluster secret) in the security given to
    /// [`HttpServer::attach_api`]: it names each request's principal as SCRAM authzid.
    pub auth: Option<HttpAuth>,
    /// Failed logins per source address: the node gives its native listener's
    /// (`tinymq_net::ListenerSecurity::login_limiter`), so HTTP shares that budget.
    pub login_limiter: Arc<tinymq_auth::LoginLimiter>,
}

/// Where the node's view goes once the node has started.
pub(crate) type NodeSlot = OnceLock<Arc<dyn NodeView>>;

/// A running HTTP listener.
pub struct HttpServer {
    pub local_addr: SocketAddr,
    node: Arc<NodeSlot>,
    api: Arc<api::ApiSlot>,
    request_timeout: std::time::Duration,
    /// Requests must authenticate.
    auth: bool,
    shutdown: CancellationToken,
    task: JoinHandle<()>,
}

impl HttpServer {
    /// Binds `addr` and serves plain HTTP without authentication at once; readiness says
    /// "starting" until [`HttpServer::attach`].
    pub async fn start(addr: SocketAddr, limits: HttpLimits) -> Result<HttpServer, HttpError> {
        HttpServer::start_secure(addr, limits, HttpSecurity::default()).await
    }

    /// [`HttpServer::start`] with TLS and authentication as `security` says.
    pub async fn start_secure(
        addr: SocketAddr,
        limits: HttpLimits,
        security: HttpSecurity,
    ) -> Result<HttpServer, HttpError> {
        limits.check().map_err(HttpError::Limits)?;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| HttpError::Listen { addr, source })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| HttpError::Listen { addr, source })?;
        let node: Arc<NodeSlot> = Arc::new(OnceLock::new());
        let shutdown = CancellationToken::new();
        let counters = Arc::new(listener::ConnectionCounters::default());
        let api = Arc::new(api::ApiSlot::new(limits.principal_clients_max));
        let loopback = local_addr.ip().is_loopback();
        let authenticator = security.auth.clone().map(|a| {
            Arc::new(
                auth::Authenticator::new(a, node.clone(), security.tls.is_some(), loopback)
                    .counting(counters.clone())
                    .limited_by(security.login_limiter.clone()),
            )
        });
        let app = routes::router(
            routes::Parts {
                node: node.clone(),
                counters: counters.clone(),
                api: api.clone(),
                auth: authenticator.clone(),
                loopback,
            },
            &limits,
            api::router(api.clone(), authenticator),
        );
        let limited =
            listener::LimitedListener::new(listener, &limits, security.tls.clone(), counters);
        let stop = shutdown.clone();
        let app = app.into_make_service_with_connect_info::<listener::PeerAddr>();
        let task = tokio::spawn(async move {
            let served = axum::serve(limited, app)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await;
            if let Err(e) = served {
                tracing::warn!(error = %e, "the HTTP listener stopped");
            }
        });
        tracing::info!(%local_addr, "HTTP listener started");
        Ok(HttpServer {
            local_addr,
            node,
            api,
            request_timeout: limits.request_timeout,
            auth: security.auth.is_some(),
            shutdown,
            task,
        })
    }

    /// Hands the listener the started node's view. A second call is ignored.
    pub fn attach(&self, view: Arc<dyn NodeView>) {
        if self.node.set(view).is_err() {
            tracing::warn!("the HTTP listener already has a node view; the new one is ignored");
        }
    }

    /// Starts the REST API (`/api/v1`): it becomes a client of the cluster through the node's
    /// own native address (`serves_data`: a broker or `server`), or through the live brokers
    /// a MetaServer node knows of. Until then its routes answer 503. A second call is ignored.
    /// Its connections to the cluster use `security` (the node's own links' TLS and login).
    pub fn attach_api(
        &self,
        native_addr: SocketAddr,
        serves_data: bool,
        security: tinymq_client::Security,
    ) {
        let timeout = self.request_timeout;
        if self.auth && security.login.is_none() {
            tracing::error!("the REST API has no node login (cluster secret): with authentication on, its requests will be refused");
        }
        if !self.api.attach(native_addr, serves_data, timeout, security) {
            tracing::warn!("the REST API already has its native address; ignored");
        }
    }

    /// Stops accepting and waits for open requests to finish (each is bounded by the
    /// request timeout); idle keep-alive connections are closed. A client still sending its
    /// request (which may take up to the idle timeout, or forever a byte at a time) does not
    /// hold the shutdown past the request timeout: the listener is dropped then.
    pub async fn shutdown(mut self) {
        self.shutdown.cancel();
        if tokio::time::timeout(self.request_timeout, &mut self.task)
            .await
            .is_err()
        {
            tracing::info!("HTTP connections still open at shutdown are dropped");
            self.task.abort();
        }
    }
}
