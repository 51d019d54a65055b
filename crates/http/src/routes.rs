//! The router: which path answers what, and the request limits every route shares (body
//! size, time). Unknown paths get a JSON 404; a wrong method gets 405.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::api::ApiSlot;
use crate::auth::Authenticator;
use crate::listener::ConnectionCounters;
use crate::metrics::Metrics;
use crate::{HttpLimits, NodeSlot};

#[derive(Clone)]
pub(crate) struct AppState {
    pub node: Arc<NodeSlot>,
    pub metrics: Arc<Metrics>,
    /// Asked whether a `/metrics` caller may describe the cluster.
    api: Arc<ApiSlot>,
}

/// What the router serves from.
pub(crate) struct Parts {
    pub node: Arc<NodeSlot>,
    pub counters: Arc<ConnectionCounters>,
    pub api: Arc<ApiSlot>,
    /// Set when requests must authenticate.
    pub auth: Option<Arc<Authenticator>>,
    /// The listener is bound to loopback.
    pub loopback: bool,
}

#[derive(Clone, Copy)]
struct RequestLimits {
    body_bytes_max: usize,
    timeout: Duration,
}

pub(crate) fn router(parts: Parts, limits: &HttpLimits, api: Router) -> Router {
    let Parts {
        node,
        counters,
        api: slot,
        auth,
        loopback,
    } = parts;
    let metrics = Arc::new(Metrics::new(
        node.clone(),
        counters,
        limits.partition_series_max,
    ));
    let request_limits = RequestLimits {
        body_bytes_max: limits.body_bytes_max,
        timeout: limits.request_timeout,
    };
    Router::new()
        .route("/metrics", get(metrics_page))
        .route("/health/live", get(crate::health::live))
        .route("/health/ready", get(crate::health::ready))
        .merge(crate::console::router())
        .fallback(not_found)
        .with_state(AppState {
            node,
            metrics,
            api: slot,
        })
        .merge(api)
        .layer(middleware::from_fn_with_state(loopback, loopback_host))
        // Before anything else is looked at (a wrong method or path included), the caller.
        .layer(middleware::from_fn_with_state(
            auth,
            crate::auth::authenticate,
        ))
        // axum answers a wrong method with an empty 405: give it the JSON body every other
        // error has (a problem document under /api/v1).
        .layer(middleware::from_fn(method_not_allowed_body))
        // For routes that will read bodies: a chunked body past the limit fails to extract.
        .layer(DefaultBodyLimit::max(limits.body_bytes_max))
        .layer(middleware::from_fn_with_state(
            request_limits,
            limit_request,
        ))
}

/// Refuses a declared body over the limit before reading it (a chunked body is cut at the same
/// limit by `DefaultBodyLimit` when a route reads it), and answers 408 past the request
/// timeout.
async fn limit_request(
    State(limits): State<RequestLimits>,
    request: Request,
    next: Next,
) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let max = u64::try_from(limits.body_bytes_max).unwrap_or(u64::MAX);
    if declared.is_some_and(|n| n > max) {
        return problem(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body is over http_body_bytes_max ({max} bytes)"),
        );
    }
    match tokio::time::timeout(limits.timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => problem(
            StatusCode::REQUEST_TIMEOUT,
            "the request took longer than http_request_timeout_ms".to_string(),
        ),
    }
}

/// On a listener bound to loopback, refuses `/api/` requests whose `Host` is a dotted DNS name
/// (other than `*.localhost`): a web page whose DNS name was rebound to 127.0.0.1 is the
/// listener's own origin to the browser, and would otherwise read messages and delete topics
/// through the operator's browser. A listener on other addresses is reached by names it
/// cannot know, so it has no such check (see docs/operate.md).
async fn loopback_host(State(loopback): State<bool>, request: Request, next: Next) -> Response {
    let checked = loopback && request.uri().path().starts_with("/api/");
    let host = request
        .headers()
        .get(header::HOST)
        .map(|v| v.to_str().unwrap_or("?"));
    match host {
        Some(host) if checked && !local_host_name(host) => crate::api::Problem::new(
            StatusCode::FORBIDDEN,
            "CLUSTER_AUTHORIZATION_FAILED",
            format!(
                "this listener is bound to loopback: ask it as 127.0.0.1, [::1] or localhost, \
                 not as {host:?}"
            ),
        )
        .into_response(),
        _ => next.run(request).await,
    }
}

/// Whether a `Host` value cannot be a name an attacker rebinds to this machine: an IP literal,
/// a name without a dot (`localhost`, an intranet name) or one under `.localhost`, with or
/// without a port.
fn local_host_name(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => {
            return rest
                .split_once(']')
                .is_some_and(|(ip, _)| ip.parse::<std::net::Ipv6Addr>().is_ok())
        }
        None => match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host,
        },
    };
    let name = name.to_ascii_lowercase();
    // A name without a dot cannot be an attacker's public DNS name (an intranet or test name).
    name.parse::<std::net::IpAddr>().is_ok() || !name.contains('.') || name.ends_with(".localhost")
}

/// Fills axum's empty 405 answers with a JSON body, keeping their `Allow` header.
async fn method_not_allowed_body(request: Request, next: Next) -> Response {
    let api = request.uri().path().starts_with("/api/");
    let method = request.method().clone();
    let response = next.run(request).await;
    if response.status() != StatusCode::METHOD_NOT_ALLOWED
        || response.headers().contains_key(header::CONTENT_TYPE)
    {
        return response;
    }
    let allow = response.headers().get(header::ALLOW).cloned();
    let allowed = allow
        .as_ref()
        .and_then(|v| v.to_str().ok())
        .unwrap_or("none")
        .to_string();
    let detail = format!("{method} is not allowed on this path (allowed: {allowed})");
    let mut fresh = if api {
        crate::api::Problem::new(StatusCode::METHOD_NOT_ALLOWED, "INVALID_REQUEST", detail)
            .into_response()
    } else {
        problem(StatusCode::METHOD_NOT_ALLOWED, detail)
    };
    if let Some(allow) = allow {
        fresh.headers_mut().insert(header::ALLOW, allow);
    }
    fresh
}

async fn metrics_page(State(state): State<AppState>) -> Response {
    // An authenticated caller (the listener is not loopback) needs DESCRIBE on the cluster.
    if crate::auth::current_principal().is_some() {
        if let Err(p) = crate::api::check_describe_cluster(&state.api).await {
            return p.into_response();
        }
    }
    let metrics = state.metrics.clone();
    // The view takes the node's locks and reads /proc: off the async threads.
    match tokio::task::spawn_blocking(move || metrics.encode()).await {
        Ok(Ok(text)) => Response::builder()
            .header(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )
            .body(Body::from(text))
            .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response()),
        Ok(Err(e)) => problem(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding the metrics failed: {e}"),
        ),
        Err(e) => problem(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the metrics task failed: {e}"),
        ),
    }
}

async fn not_found() -> Response {
    problem(StatusCode::NOT_FOUND, "no such route".to_string())
}

/// An RFC 9457 problem document (as the REST API answers): the status, a sentence saying what
/// went wrong, and a native error code name.
pub(crate) fn problem(status: StatusCode, detail: String) -> Response {
    let code = match status {
        StatusCode::PAYLOAD_TOO_LARGE => "LIMIT_EXCEEDED",
        StatusCode::REQUEST_TIMEOUT => "REQUEST_TIMED_OUT",
        s if s.is_client_error() => "INVALID_REQUEST",
        _ => "UNKNOWN_SERVER_ERROR",
    };
    crate::api::Problem::new(status, code, detail).into_response()
}

#[cfg(test)]
mod tests {
    use super::local_host_name;

    #[test]
    fn only_ip_literals_and_localhost_are_local_host_names() {
        for local in [
            "127.0.0.1",
            "127.0.0.1:21582",
            "[::1]",
            "[::1]:21582",
            "localhost",
            "LocalHost:80",
            "console.localhost:1",
            "10.0.0.7:21582",
            "t",
            "broker1:21582",
        ] {
            assert!(local_host_name(local), "{local}");
        }
        for other in [
            "evil.example",
            "evil.example:21582",
            "localhost.evil.example",
            "[evil]:1",
            "127.0.0.1.nip.io",
            "evil.example.",
        ] {
            assert!(!local_host_name(other), "{other}");
        }
    }
}
