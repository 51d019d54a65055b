//! The HTTP listener of `tinymq server`, `broker` and `meta`: its flags, turned into the
//! node's [`HttpListenerConfig`] (the node starts it; its views live in `tinymq_node::views`).

use std::net::SocketAddr;
use std::time::Duration;

use tinymq_http::{
    HttpAuth, HttpLimits, HttpSecurity, DEFAULT_HTTP_ADDR, HTTP_TOKEN_LIFETIME_MS_MAX,
};
use tinymq_node::HttpListenerConfig;

/// The HTTP settings, as flags (with their `TINYMQ_HTTP_*` variables) or as keys of a role's
/// TOML file (the same names, e.g. `http = "127.0.0.1:21582"`, `http_idle_timeout_ms = 30000`).
#[derive(clap::Args, Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpArgs {
    /// HTTP listener for /metrics and /health, HOST:PORT, or `off` [default: 127.0.0.1:21582
    /// for server, off for broker and meta].
    #[arg(long, env = "TINYMQ_HTTP")]
    http: Option<String>,
    /// Most open HTTP connections; one more is closed at once [default: 64].
    #[arg(long, env = "TINYMQ_HTTP_CONNECTIONS_MAX", value_parser = crate::args::positive_usize)]
    http_connections_max: Option<usize>,
    /// Largest HTTP request body in bytes; a larger one is answered 413 [default: 1048576].
    #[arg(long, env = "TINYMQ_HTTP_BODY_BYTES_MAX")]
    http_body_bytes_max: Option<usize>,
    /// An HTTP request not answered in this time (ms) is answered 408 [default: 10000].
    #[arg(long, env = "TINYMQ_HTTP_REQUEST_TIMEOUT_MS", value_parser = crate::args::positive_u64)]
    http_request_timeout_ms: Option<u64>,
    /// Close an HTTP connection on which no byte moved for this long (ms): idle keep-alive,
    /// slow or missing request headers, an unread response; at least the request timeout
    /// [default: 30000, or the request timeout if longer].
    #[arg(long, env = "TINYMQ_HTTP_IDLE_TIMEOUT_MS", value_parser = crate::args::positive_u64)]
    http_idle_timeout_ms: Option<u64>,
    /// Partitions with their own series in /metrics (and consumer groups, and group lag
    /// series); past it only node totals [default: 1000].
    #[arg(long, env = "TINYMQ_HTTP_PARTITION_SERIES_MAX")]
    http_partition_series_max: Option<usize>,
    /// With --auth scram|mtls: how long (ms) a bearer token from POST /api/v1/auth/token is
    /// accepted, at most a day [default: 3600000].
    #[arg(long, env = "TINYMQ_HTTP_TOKEN_LIFETIME_MS", value_parser = crate::args::positive_u64)]
    http_token_lifetime_ms: Option<u64>,
    /// Most principals the REST API keeps a cluster client (and its connections) for at once;
    /// past it the least recently used is dropped [default: 64].
    #[arg(long, env = "TINYMQ_HTTP_PRINCIPAL_CLIENTS_MAX", value_parser = crate::args::positive_usize)]
    http_principal_clients_max: Option<usize>,
}

/// The TOML keys of [`HttpArgs`].
pub const HTTP_KEYS: [&str; 8] = [
    "http",
    "http_connections_max",
    "http_body_bytes_max",
    "http_request_timeout_ms",
    "http_idle_timeout_ms",
    "http_partition_series_max",
    "http_token_lifetime_ms",
    "http_principal_clients_max",
];

impl HttpArgs {
    /// These settings (flags and variables) over `file`'s.
    pub fn over(self, file: HttpArgs) -> HttpArgs {
        HttpArgs {
            http: self.http.or(file.http),
            http_connections_max: self.http_connections_max.or(file.http_connections_max),
            http_body_bytes_max: self.http_body_bytes_max.or(file.http_body_bytes_max),
            http_request_timeout_ms: self
                .http_request_timeout_ms
                .or(file.http_request_timeout_ms),
            http_idle_timeout_ms: self.http_idle_timeout_ms.or(file.http_idle_timeout_ms),
            http_partition_series_max: self
                .http_partition_series_max
                .or(file.http_partition_series_max),
            http_token_lifetime_ms: self.http_token_lifetime_ms.or(file.http_token_lifetime_ms),
            http_principal_clients_max: self
                .http_principal_clients_max
                .or(file.http_principal_clients_max),
        }
    }

    fn limits(&self) -> HttpLimits {
        let mut l = HttpLimits::default();
        l.connections_max = self.http_connections_max.unwrap_or(l.connections_max);
        l.body_bytes_max = self.http_body_bytes_max.unwrap_or(l.body_bytes_max);
        if let Some(ms) = self.http_request_timeout_ms {
            l.request_timeout = Duration::from_millis(ms);
        }
        // Unless given, the idle timeout follows a longer request timeout (it may not be shorter).
        l.idle_timeout = match self.http_idle_timeout_ms {
            Some(ms) => Duration::from_millis(ms),
            None => l.idle_timeout.max(l.request_timeout),
        };
        l.partition_series_max = self
            .http_partition_series_max
            .unwrap_or(l.partition_series_max);
        l.principal_clients_max = self
            .http_principal_clients_max
            .unwrap_or(l.principal_clients_max);
        l
    }

    /// The listener's TLS and authentication: HTTPS with the native port's certificate (the
    /// same `ServerTls`, so SIGHUP reloads both), and with authentication on (`--auth
    /// scram|mtls`) credentials asked of every request, tokens signed with the cluster secret.
    pub fn security(
        &self,
        tls: Option<tinymq_tls::ServerTls>,
        auth_on: bool,
        secret: Option<&tinymq_auth::ClusterSecret>,
    ) -> anyhow::Result<HttpSecurity> {
        let auth = match (auth_on, secret) {
            (false, _) => None,
            (true, None) => anyhow::bail!(
                "the HTTP listener with --auth needs the cluster secret (--cluster-secret-file): \
                 its REST API logs in as this node to act for each caller"
            ),
            (true, Some(secret)) => {
                let mut auth = HttpAuth::new(secret.token_key());
                if let Some(ms) = self.http_token_lifetime_ms {
                    anyhow::ensure!(
                        ms <= HTTP_TOKEN_LIFETIME_MS_MAX,
                        "http_token_lifetime_ms may be at most {HTTP_TOKEN_LIFETIME_MS_MAX} (a day)"
                    );
                    auth.token_lifetime = Duration::from_millis(ms);
                }
                Some(auth)
            }
        };
        Ok(HttpSecurity {
            tls,
            auth,
            ..Default::default()
        })
    }

    /// The address the flags give the listener, when they name one.
    pub fn explicit_addr(&self) -> Option<SocketAddr> {
        match self.http.as_deref().map(str::trim) {
            Some("off") | None => None,
            Some(text) => crate::args::socket_addr(text).ok(),
        }
    }

    /// The listener the node runs, if asked for (or by default, when `on_by_default`). When
    /// the default address is taken (another server on this machine), the node runs without
    /// HTTP and says so; an address given explicitly that cannot be bound is an error.
    pub fn listener(
        &self,
        on_by_default: bool,
        security: HttpSecurity,
        api_links: tinymq_client::Security,
    ) -> anyhow::Result<Option<HttpListenerConfig>> {
        let (addr, explicit) = match self.http.as_deref().map(str::trim) {
            Some("off") => return Ok(None),
            Some(text) => (
                crate::args::socket_addr(text).map_err(anyhow::Error::msg)?,
                true,
            ),
            None if on_by_default => (DEFAULT_HTTP_ADDR.parse::<SocketAddr>()?, false),
            None => return Ok(None),
        };
        Ok(Some(HttpListenerConfig {
            addr,
            optional: !explicit,
            limits: self.limits(),
            security,
            api_links,
        }))
    }
}

/// A plain line for scripts and tests that start the listener on port 0. A reader that only
/// wanted the native port's line may have closed stdout already: that is no reason to stop.
pub fn announce(node: &tinymq_node::Node) {
    if let Some(addr) = node.http_addr() {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "tinymq http listening on {addr}").and_then(|()| out.flush());
    }
}
