//! The REST admin API under `/api/v1` and its OpenAPI 3.1 document at
//! `/api/v1/openapi.json`, generated from the handlers (utoipa).
//!
//! The API is a client of the cluster over the native protocol (`tinymq_client`), not a view
//! of the node, so it answers the same on a `server`, a `broker` or a `meta` node: a broker's
//! API bootstraps from the node's own native address; a MetaServer node's (whose port serves
//! only metadata operations) from the live brokers its metadata image names. Until the node
//! hands over its address ([`crate::HttpServer::attach_api`]) every route answers 503.
//!
//! Layout: `problem` (errors as RFC 9457 documents, input extractors that refuse bad input
//! with them), then one module per resource: `cluster`, `topics`, `messages`, `groups`, `routes`.

mod cluster;
mod groups;
pub use groups::{ShareInFlightView, SharePartitionView};
mod messages;
mod problem;
mod routes;
mod token;
mod topics;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::auth::Authenticator;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Router;
use tinymq_auth::Principal;
use tinymq_client::{Admin, ClientConfig, Cluster, Security};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub(crate) use problem::Problem;

/// Most records one page of `GET .../messages` returns (`limit` above it is refused).
pub const HTTP_MESSAGES_PAGE_MAX: u32 = 1000;
/// Bytes of record batches one page of `GET .../messages` reads from the partition's leader,
/// and bytes of keys, values and headers (before rendering) it returns: a page stops before
/// the record that would pass it, unless that record is the page's first.
pub const HTTP_MESSAGES_PAGE_BYTES_MAX: u32 = 1 << 20;
/// Most groups `GET /api/v1/groups` describes (each costs a request to its coordinator).
pub const HTTP_GROUPS_LIST_MAX: usize = 1000;

/// How long a MetaServer node's API keeps its list of live brokers before reading it again.
const META_BOOTSTRAP_AGE: Duration = Duration::from_secs(30);

/// What the REST API reaches the cluster through, set once the node knows its native address,
/// and the clients built from it: one per principal when authentication is on (each
/// impersonates its principal, so the brokers' ACLs decide what it may do), bounded by
/// `http_principal_clients_max`, the least recently used dropped first.
pub(crate) struct ApiSlot {
    target: OnceLock<Target>,
    clients: Mutex<HashMap<String, Cached>>,
    clients_max: usize,
}

impl ApiSlot {
    pub fn new(clients_max: usize) -> ApiSlot {
        ApiSlot {
            target: OnceLock::new(),
            clients: Mutex::new(HashMap::new()),
            clients_max: clients_max.max(1),
        }
    }

    /// Sets the node's native address and how to reach it (`security`: the node's TLS and,
    /// with authentication, its own login); false if it was set already.
    pub fn attach(
        &self,
        native: SocketAddr,
        serves_data: bool,
        request_timeout: Duration,
        security: Security,
    ) -> bool {
        // A node listening on every address is reached through loopback.
        let mut native = native;
        if native.ip().is_unspecified() {
            native.set_ip(match native {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        self.target
            .set(Target {
                native,
                serves_data,
                request_timeout,
                security,
            })
            .is_ok()
    }

    /// The security of a native connection made for `principal`: the node's login with the
    /// principal as SCRAM authzid (the broker then checks ACLs as that principal).
    pub fn security_for(&self, principal: Option<&Principal>) -> Security {
        let Some(target) = self.target.get() else {
            return Security::default();
        };
        let mut security = target.security.clone();
        if let (Some(p), Some(login)) = (principal, security.login.as_mut()) {
            login.authzid = Some(p.to_string());
        }
        security
    }

    fn cached(&self, key: &str, fresh: impl Fn(&Cached) -> bool) -> Option<Arc<ApiClient>> {
        let mut clients = self.clients.lock().ok()?;
        let cached = clients.get_mut(key).filter(|c| fresh(c))?;
        cached.used = Instant::now();
        Some(cached.client.clone())
    }

    fn keep(&self, key: String, client: Arc<ApiClient>) {
        let Ok(mut clients) = self.clients.lock() else {
            return;
        };
        clients.retain(|_, c| c.used.elapsed() < PRINCIPAL_CLIENT_IDLE_MAX);
        while clients.len() >= self.clients_max {
            let idlest = clients
                .iter()
                .min_by_key(|(_, c)| c.used)
                .map(|(k, _)| k.clone());
            match idlest {
                Some(k) => clients.remove(&k),
                None => break,
            };
        }
        let now = Instant::now();
        clients.insert(
            key,
            Cached {
                client,
                built: now,
                used: now,
            },
        );
    }
}

/// A principal's client unused this long is dropped (with its connections).
const PRINCIPAL_CLIENT_IDLE_MAX: Duration = Duration::from_secs(300);

#[derive(Debug, Clone)]
struct Target {
    native: SocketAddr,
    /// A broker (or `server`) serves every operation; a MetaServer node only the metadata
    /// ones, so its API goes through the live brokers.
    serves_data: bool,
    request_timeout: Duration,
    /// TLS and the node's own login (cluster secret) for the native connections.
    security: Security,
}

struct Cached {
    client: Arc<ApiClient>,
    built: Instant,
    used: Instant,
}

pub(crate) struct ApiClient {
    pub admin: Admin,
    pub cluster: Arc<Cluster>,
    pub config: ClientConfig,
}

impl ApiClient {
    /// A client of the nodes at `bootstrap`. Its retries end well before the HTTP request
    /// timeout, so that a cluster that does not answer gets a 503 problem document rather
    /// than the listener's 408.
    fn new(
        bootstrap: &[String],
        request_timeout: Duration,
        security: Security,
    ) -> Result<ApiClient, Problem> {
        let mut config = ClientConfig::new(&bootstrap.join(","));
        config.client_id = format!("tinymq-http/{}", env!("CARGO_PKG_VERSION"));
        let budget = request_timeout
            .mul_f64(CLIENT_TIMEOUT_SHARE)
            .max(Duration::from_millis(100));
        config.api_timeout = budget;
        config.request_timeout = budget;
        config.security = security;
        let admin = Admin::new(config.clone())?;
        let cluster = Cluster::new(config.clone())?;
        Ok(ApiClient {
            admin,
            cluster,
            config,
        })
    }
}

#[derive(Clone)]
pub(crate) struct ApiState {
    slot: Arc<ApiSlot>,
    doc: Arc<OnceLock<String>>,
    /// Set when the node runs with authentication (`POST /auth/token` issues tokens).
    auth: Option<Arc<Authenticator>>,
    /// The metadata image's topic settings, per caller, for a moment (the share-group
    /// settings of every topic description come from there).
    image_topics: Arc<topics::ImageTopicsCache>,
}

impl ApiState {
    /// The node's own native address, or 503 while the node is still starting.
    fn target(&self) -> Result<Target, Problem> {
        self.slot.target.get().cloned().ok_or_else(|| {
            Problem::unavailable("the node is still starting: the REST API is not ready yet")
        })
    }

    /// The node's own native address (every node answers `MetaRead` there).
    pub fn native(&self) -> Result<SocketAddr, Problem> {
        Ok(self.target()?.native)
    }

    /// The security of a native connection made for this request's caller.
    pub fn security(&self) -> Security {
        self.slot
            .security_for(crate::auth::current_principal().as_ref())
    }

    /// The cluster client acting as this request's caller, or 503 while the node is still
    /// starting (or, on a MetaServer node, while no broker is live).
    pub async fn client(&self) -> Result<Arc<ApiClient>, Problem> {
        let target = self.target()?;
        let principal = crate::auth::current_principal();
        let key = principal
            .as_ref()
            .map(|p| p.to_string())
            .unwrap_or_default();
        let fresh = |c: &Cached| target.serves_data || c.built.elapsed() < META_BOOTSTRAP_AGE;
        if let Some(client) = self.slot.cached(&key, fresh) {
            return Ok(client);
        }
        let security = self.slot.security_for(principal.as_ref());
        let bootstrap = if target.serves_data {
            vec![target.native.to_string()]
        } else {
            live_brokers(target.native, &security).await?
        };
        let client = Arc::new(ApiClient::new(
            &bootstrap,
            target.request_timeout,
            security,
        )?);
        self.slot.keep(key, client.clone());
        Ok(client)
    }
}

/// Whether this request's caller may DESCRIBE the cluster: asked of the node as the caller
/// (reading the metadata image needs that permission), so the same ACLs decide.
pub(crate) async fn check_describe_cluster(slot: &ApiSlot) -> Result<(), Problem> {
    let native = slot.target.get().map(|t| t.native).ok_or_else(|| {
        Problem::unavailable("the node is still starting: permissions cannot be checked yet")
    })?;
    let security = slot.security_for(crate::auth::current_principal().as_ref());
    cluster::read_image(native, META_NODE_ANSWER_WAIT, &security)
        .await
        .map(|_| ())
}

/// The addresses of the live brokers, from the metadata image of the MetaServer node at
/// `native`.
async fn live_brokers(native: SocketAddr, security: &Security) -> Result<Vec<String>, Problem> {
    let image = cluster::read_image(native, META_NODE_ANSWER_WAIT, security)
        .await?
        .1;
    let brokers: Vec<String> = image
        .brokers
        .values()
        .filter(|b| !b.fenced)
        .map(|b| format!("{}:{}", b.host, b.port))
        .collect();
    if brokers.is_empty() {
        return Err(Problem::unavailable(
            "no broker is live: on a MetaServer node the REST API reads through the brokers",
        ));
    }
    Ok(brokers)
}

/// How long a node asked directly gets to answer.
const META_NODE_ANSWER_WAIT: Duration = Duration::from_secs(2);

#[derive(OpenApi)]
#[openapi(
    info(
        title = "tinymq REST admin API",
        description = "Cluster, topics, messages and consumer groups of a tinymq cluster, \
                       served by every node's HTTP listener. Errors are RFC 9457 problem \
                       documents whose `code` is the native protocol's error code name.",
        license(name = "MIT OR Apache-2.0")
    ),
    // With `--auth none` no credentials are asked (the empty requirement); otherwise either.
    security((), ("basic" = []), ("bearer" = [])),
    tags(
        (name = "auth", description = "Bearer tokens for HTTP Basic credentials"),
        (name = "cluster", description = "MetaServer nodes and brokers"),
        (name = "topics", description = "Create, describe, alter and delete topics"),
        (name = "messages", description = "Read and produce records"),
        (name = "groups", description = "Consumer groups: members, offsets, lag"),
        (name = "routes", description = "Content-based routes and their progress")
    )
)]
struct ApiDoc;

/// Declares the two ways to authenticate, and the 401 and 403 answers every operation may
/// give once the node runs with authentication.
struct SecuritySchemes;

impl utoipa::Modify for SecuritySchemes {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
        use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "basic",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Basic)),
        );
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
        let answer = |description: &str| {
            ResponseBuilder::new()
                .description(description)
                .content(
                    problem::PROBLEM_CONTENT_TYPE,
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("Problem")))
                        .build(),
                )
                .build()
        };
        let unauthorized = answer(
            "No valid credentials (with `WWW-Authenticate: Basic realm=\"tinymq\"`); only when \
             the node runs with --auth scram or mtls",
        );
        let forbidden = answer(
            "The caller is authenticated but an ACL does not allow the operation; the detail \
             names the missing permission",
        );
        for item in doc.paths.paths.values_mut() {
            for op in [
                &mut item.get,
                &mut item.post,
                &mut item.put,
                &mut item.patch,
                &mut item.delete,
            ]
            .into_iter()
            .flatten()
            {
                let responses = &mut op.responses.responses;
                responses
                    .entry("401".into())
                    .or_insert_with(|| unauthorized.clone().into());
                responses
                    .entry("403".into())
                    .or_insert_with(|| forbidden.clone().into());
            }
        }
    }
}

/// The API's routes (full paths under `/api/v1`) and the OpenAPI document served beside them.
pub(crate) fn router(slot: Arc<ApiSlot>, auth: Option<Arc<Authenticator>>) -> Router {
    let state = ApiState {
        slot,
        doc: Arc::new(OnceLock::new()),
        auth,
        image_topics: Arc::new(topics::ImageTopicsCache::default()),
    };
    let api = OpenApiRouter::new()
        .routes(routes!(token::issue_token))
        .routes(routes!(cluster::get_cluster))
        .routes(routes!(topics::list_topics, topics::create_topic))
        .routes(routes!(
            topics::describe_topic,
            topics::alter_topic,
            topics::delete_topic
        ))
        .routes(routes!(messages::read_messages))
        .routes(routes!(messages::produce_message))
        .routes(routes!(groups::list_groups))
        .routes(routes!(groups::describe_group, groups::delete_group))
        .routes(routes!(groups::reset_offsets))
        .routes(routes!(routes::list_routes))
        .route("/openapi.json", axum::routing::get(openapi_json))
        .fallback(unknown_route);
    let (api, mut doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .nest("/api/v1", api)
        .split_for_parts();
    doc.info.version = env!("CARGO_PKG_VERSION").to_string();
    // After the routes are in: it adds the 401 and 403 answers to each.
    utoipa::Modify::modify(&SecuritySchemes, &mut doc);
    // Serializing a document built from our own types cannot fail; an empty slot would
    // answer 503 all the same.
    if let Ok(text) = doc.to_json() {
        let _ = state.doc.set(text);
    }
    api.method_not_allowed_fallback(wrong_method)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            within_deadline,
        ))
        .with_state(state)
}

/// Share of `http_request_timeout_ms` one API request may take in all (each client call
/// inside it retries for at most [`CLIENT_TIMEOUT_SHARE`]), so that a cluster that does not
/// answer gets a 503 problem document before the listener's 408, however many calls the
/// handler chains.
const REQUEST_DEADLINE_SHARE: f64 = 0.9;
/// Share of `http_request_timeout_ms` one client call (with its retries) may take.
const CLIENT_TIMEOUT_SHARE: f64 = 0.6;

/// Ends a request that runs past its share of the request timeout with a 503.
async fn within_deadline(
    State(state): State<ApiState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let Ok(target) = state.target() else {
        return next.run(request).await;
    };
    let deadline = target.request_timeout.mul_f64(REQUEST_DEADLINE_SHARE);
    match tokio::time::timeout(deadline, next.run(request)).await {
        Ok(response) => response,
        Err(_) => Problem::unavailable(format!(
            "the cluster did not answer within {} ms",
            deadline.as_millis()
        ))
        .into_response(),
    }
}

async fn wrong_method(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    Problem::new(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        "INVALID_REQUEST",
        format!("{} has no method {method}", uri.path()),
    )
    .into_response()
}

async fn openapi_json(State(state): State<ApiState>) -> Response {
    match state.doc.get() {
        Some(text) => (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            text.clone(),
        )
            .into_response(),
        None => Problem::unavailable("the OpenAPI document could not be built").into_response(),
    }
}

async fn unknown_route(State(_): State<ApiState>) -> Response {
    Problem::new(
        axum::http::StatusCode::NOT_FOUND,
        "INVALID_REQUEST",
        "no such route under /api/v1 (see /api/v1/openapi.json)".to_string(),
    )
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// One request's raw answer from the API router with no cluster behind it: handlers that
    /// check their input first answer before they need one.
    async fn answer(method: &str, path: &str, body: &str) -> String {
        let router = router(Arc::new(ApiSlot::new(1)), None);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        let server = tokio::spawn(async move { axum::serve(listener, router).await });
        let mut stream = tokio::net::TcpStream::connect(address)
            .await
            .expect("connect");
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.expect("write");
        let mut out = String::new();
        stream.read_to_string(&mut out).await.expect("read");
        server.abort();
        out
    }

    #[tokio::test]
    async fn dot_topic_names_are_refused_like_everywhere_else() {
        for name in [".", "..", "%2E", "%2E%2E", "%2e."] {
            for (method, path, body) in [
                ("GET", format!("/api/v1/topics/{name}"), String::new()),
                ("DELETE", format!("/api/v1/topics/{name}"), String::new()),
                (
                    "GET",
                    format!("/api/v1/topics/{name}/partitions/0/messages"),
                    String::new(),
                ),
            ] {
                let got = answer(method, &path, &body).await;
                assert!(
                    got.starts_with("HTTP/1.1 400") && got.contains("INVALID_TOPIC"),
                    "{method} {path}: {got}"
                );
            }
        }
        for name in [".", ".."] {
            let body = format!("{{\"name\": \"{name}\"}}");
            let got = answer("POST", "/api/v1/topics", &body).await;
            assert!(
                got.starts_with("HTTP/1.1 400") && got.contains("INVALID_TOPIC"),
                "create {name}: {got}"
            );
        }
    }
}
