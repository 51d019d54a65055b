//! A node's HTTP listener: started before the rest of the node (so `/health/ready` answers
//! "starting" meanwhile), then given the node's view and the REST API's way into the cluster.

use std::net::SocketAddr;
use std::sync::Arc;

use tinymq_http::{HttpLimits, HttpSecurity, HttpServer, NodeView};

use crate::NodeError;

/// Where and how a node serves HTTP.
pub struct HttpListenerConfig {
    pub addr: SocketAddr,
    /// Whether the node may run without it when `addr` cannot be bound (a default address
    /// that another server on this machine holds): it logs a WARN and goes on. An address
    /// the operator gave is not optional.
    pub optional: bool,
    pub limits: HttpLimits,
    /// HTTPS and the authentication asked of every request.
    pub security: HttpSecurity,
    /// How the REST API reaches the cluster: the node's links' TLS and the node's own login.
    pub api_links: tinymq_client::Security,
}

/// Binds the listener, counting its failed logins in `login_limiter` (the node's native
/// listener's, so the node has one budget per address); `None` when it is optional and its
/// address is taken.
pub(crate) async fn bind(
    config: Option<&HttpListenerConfig>,
    login_limiter: &Arc<tinymq_auth::LoginLimiter>,
) -> Result<Option<HttpServer>, NodeError> {
    let Some(c) = config else {
        return Ok(None);
    };
    let security = tinymq_http::HttpSecurity {
        login_limiter: login_limiter.clone(),
        ..c.security.clone()
    };
    match HttpServer::start_secure(c.addr, c.limits.clone(), security).await {
        Ok(server) => Ok(Some(server)),
        // Only a taken optional address is forgiven; bad limits are the config's mistake.
        Err(e @ tinymq_http::HttpError::Listen { .. }) if c.optional => {
            tracing::warn!(error = %e, "running without the HTTP listener (give --http ADDR or --http off)");
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// Gives the started listener the node's view and the REST API's native address
/// (`serves_data`: a broker's own port; else the brokers a MetaServer node knows of).
pub(crate) fn attach(
    http: Option<&HttpServer>,
    config: Option<HttpListenerConfig>,
    view: Arc<dyn NodeView>,
    native_addr: SocketAddr,
    serves_data: bool,
) {
    if let (Some(http), Some(config)) = (http, config) {
        http.attach(view);
        http.attach_api(native_addr, serves_data, config.api_links);
    }
}
