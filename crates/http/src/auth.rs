//! Who is asking: the authentication of HTTP requests when the node runs with
//! `--auth scram|mtls`. A request carries HTTP Basic credentials (checked against the user's
//! stored SCRAM verifier, the same credential the native port checks) or a Bearer token
//! issued by `POST /api/v1/auth/token`; the principal found is what the REST API acts as
//! (`api`: its native connections impersonate it, so the brokers' ACLs decide).
//! A token is bound to a digest of its user's stored credential and checked against the
//! current one on every use, so deleting the user or changing the password voids it.
//!
//! Open without credentials: `/health/live`, `/health/ready` (orchestrators probe them), and
//! `/metrics` on a loopback listener. Elsewhere `/metrics` needs a principal allowed DESCRIBE
//! on the cluster: it names every topic and group with their rates, which a tenant that may
//! not describe them must not read, while a loopback listener is reached only from the host
//! itself (a local agent), as before security existed.
//!
//! PBKDF2 is slow on purpose, so a verified user+password pair is remembered (keyed by a hash
//! of both, never the password itself) for [`BASIC_VERIFIED_FOR`], at most
//! [`HTTP_AUTH_CACHE_ENTRIES_MAX`] pairs, and only while the user's stored credential is the
//! one it was verified against (a password change or a deleted user takes effect at once).
//! Failed attempts are logged and answered only after [`FAILED_ATTEMPT_DELAY`]; at most
//! [`VERIFICATIONS_AT_ONCE`] PBKDF2 verifications run at a time, off the async threads.
//! Failures are also counted per source address (`login_failures_per_ip_max` within a
//! minute, the native listener's limit): Basic credentials from an address over it are
//! answered 401 at once, without the PBKDF2 work, so a flood of guesses (unknown users
//! included) from one address cannot hold the verifications good logins wait for.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use sha2::{Digest, Sha256};
use tinymq_auth::{
    Admission, LoginLimiter, Principal, PrincipalKind, ScramMechanism, StoredCredential,
};
use tokio::sync::Semaphore;

use crate::api::Problem;
use crate::listener::{ConnectionCounters, PeerAddr};
use crate::NodeSlot;
use std::sync::atomic::Ordering;

/// Default lifetime of a token from `POST /api/v1/auth/token` (`http_token_lifetime_ms`).
pub const HTTP_TOKEN_LIFETIME_MS_DEFAULT: u64 = 3_600_000;
/// Longest `http_token_lifetime_ms` accepted: a day.
pub const HTTP_TOKEN_LIFETIME_MS_MAX: u64 = 86_400_000;
/// Most verified Basic user+password pairs remembered.
pub const HTTP_AUTH_CACHE_ENTRIES_MAX: usize = 1024;
/// Longest `Authorization` header read; a longer one is refused before it is decoded.
pub const HTTP_AUTHORIZATION_BYTES_MAX: usize = 4096;
/// How long a verified Basic pair is trusted without running PBKDF2 again.
pub const BASIC_VERIFIED_FOR: Duration = Duration::from_secs(60);
/// How long a failed attempt waits before its 401: guessing passwords costs the guesser time.
pub const FAILED_ATTEMPT_DELAY: Duration = Duration::from_secs(1);
/// PBKDF2 verifications running at once (each takes a core for milliseconds).
pub const VERIFICATIONS_AT_ONCE: usize = 2;

/// Authentication settings of one HTTP listener (absent: `--auth none`, no credentials asked).
#[derive(Clone)]
pub struct HttpAuth {
    /// Signs and checks bearer tokens: the cluster secret's `token_key()`, the same on every
    /// node, so a token issued by one node is good at every other.
    pub token_key: [u8; 32],
    /// `http_token_lifetime_ms`.
    pub token_lifetime: Duration,
}

impl HttpAuth {
    pub fn new(token_key: [u8; 32]) -> HttpAuth {
        HttpAuth {
            token_key,
            token_lifetime: Duration::from_millis(HTTP_TOKEN_LIFETIME_MS_DEFAULT),
        }
    }
}

/// The principal a request was authenticated as (the task-local [`CALLER`] the REST API
/// reads), or none with authentication off or on an open path.
#[derive(Clone, Debug)]
pub struct Caller {
    pub principal: Option<Principal>,
    /// How it proved it: Basic may get a token, a token may not get another one (a stolen
    /// token would otherwise live forever).
    pub by_token: bool,
}

tokio::task_local! {
    /// The caller of the request being served. A task-local rather than a handler argument:
    /// every REST handler reaches the cluster through `ApiState::client`, which must act as
    /// the caller, and cannot forget to.
    pub static CALLER: Caller;
}

/// The caller of the request this task serves (`None`: authentication is off).
pub fn current_principal() -> Option<Principal> {
    CALLER.try_with(|c| c.principal.clone()).ok().flatten()
}

/// What the middleware needs: the settings, the node (for stored credentials), the cache.
pub(crate) struct Authenticator {
    auth: HttpAuth,
    node: Arc<NodeSlot>,
    /// Basic over plain HTTP is refused unless the listener is loopback or TLS.
    basic_allowed: bool,
    loopback: bool,
    verified: Mutex<HashMap<[u8; 32], Verified>>,
    verifying: Semaphore,
    /// Where failed attempts are counted for `/metrics`.
    counters: Option<Arc<ConnectionCounters>>,
    /// Failed attempts per source address (the node's, shared with its other listeners).
    limiter: Arc<LoginLimiter>,
}

struct Verified {
    principal: Principal,
    /// The stored credential it was checked against: the entry is void once it changes.
    stored_key: Vec<u8>,
    at: Instant,
}

impl Authenticator {
    pub fn new(auth: HttpAuth, node: Arc<NodeSlot>, tls: bool, loopback: bool) -> Authenticator {
        Authenticator {
            auth,
            node,
            basic_allowed: tls || loopback,
            loopback,
            verified: Mutex::new(HashMap::new()),
            verifying: Semaphore::new(VERIFICATIONS_AT_ONCE),
            counters: None,
            limiter: Arc::new(LoginLimiter::default()),
        }
    }

    /// Counts failed attempts per address in `limiter` (the node's) instead of its own.
    pub fn limited_by(mut self, limiter: Arc<LoginLimiter>) -> Authenticator {
        self.limiter = limiter;
        self
    }

    /// Counts failed attempts in the listener's counters.
    pub fn counting(mut self, counters: Arc<ConnectionCounters>) -> Authenticator {
        self.counters = Some(counters);
        self
    }

    /// A token for `principal`, and when it expires (ms since the Unix epoch). It is bound to
    /// the user's current credential: deleting the user or changing the password voids it.
    pub fn issue(&self, principal: &Principal) -> (String, u64) {
        let lifetime = u64::try_from(self.auth.token_lifetime.as_millis()).unwrap_or(u64::MAX);
        let expires = now_unix_ms().saturating_add(lifetime);
        let binding = self
            .credential(&principal.name)
            .map(|c| binding(&c))
            .unwrap_or_default();
        let token =
            tinymq_auth::issue_bound_token(&self.auth.token_key, principal, &binding, expires);
        (token, expires)
    }

    /// The principal a bearer token names, if it is good now: signed, unexpired, and its user
    /// still has the credential it was issued under.
    fn verify_bearer(&self, token: &str) -> Result<Principal, Refusal> {
        let failed = |user: Option<String>, why: String| Refusal::BadToken { user, why };
        let (principal, bound) =
            tinymq_auth::verify_bound_token(&self.auth.token_key, token, now_unix_ms())
                .map_err(|e| failed(None, format!("the bearer token is not valid: {e}")))?;
        let current = (principal.kind == PrincipalKind::User)
            .then(|| self.credential(&principal.name))
            .flatten();
        match current {
            Some(c) if binding(&c) == bound => Ok(principal),
            Some(_) => Err(failed(
                Some(principal.name),
                "the bearer token was issued before the user's password changed".into(),
            )),
            None => Err(failed(
                Some(principal.name),
                "the bearer token's user no longer exists".into(),
            )),
        }
    }

    /// Whether `headers` carry Basic credentials from an address over its failure budget:
    /// those are refused before any verification. `Some(first)`: refused, and whether this is
    /// the first refusal of the address's window (the one logged).
    fn over_budget(&self, headers: &HeaderMap, ip: IpAddr) -> Option<bool> {
        let value = headers.get(header::AUTHORIZATION)?.as_bytes();
        let basic = value.len() >= 6 && value[..6].eq_ignore_ascii_case(b"basic ");
        match basic.then(|| self.limiter.admit(ip, Instant::now()))? {
            Admission::Allowed => None,
            Admission::Refused { first } => Some(first),
        }
    }

    /// The principal the request's `Authorization` header proves, or why not.
    async fn authenticate(&self, headers: &HeaderMap) -> Result<Caller, Refusal> {
        let Some(value) = headers.get(header::AUTHORIZATION) else {
            return Err(Refusal::Missing);
        };
        if value.len() > HTTP_AUTHORIZATION_BYTES_MAX {
            return Err(Refusal::Bad(format!(
                "the Authorization header is over {HTTP_AUTHORIZATION_BYTES_MAX} bytes"
            )));
        }
        let value = value
            .to_str()
            .map_err(|_| Refusal::Bad("the Authorization header is not ASCII".into()))?;
        let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
        let rest = rest.trim();
        if scheme.eq_ignore_ascii_case("basic") {
            if !self.basic_allowed {
                return Err(Refusal::Bad(
                    "Basic credentials over plain HTTP are refused on a listener that is not \
                     loopback: use HTTPS (--tls-cert/--tls-key)"
                        .into(),
                ));
            }
            let (user, password) = decode_basic(rest)?;
            let principal = self.verify_basic(&user, &password).await?;
            Ok(Caller {
                principal: Some(principal),
                by_token: false,
            })
        } else if scheme.eq_ignore_ascii_case("bearer") {
            let principal = self.verify_bearer(rest)?;
            Ok(Caller {
                principal: Some(principal),
                by_token: true,
            })
        } else {
            Err(Refusal::Bad(format!(
                "unsupported Authorization scheme {scheme:?}: use Basic or Bearer"
            )))
        }
    }

    async fn verify_basic(&self, user: &str, password: &str) -> Result<Principal, Refusal> {
        let failed = |why: &str| Refusal::Failed {
            user: Some(user.to_string()),
            why: why.to_string(),
        };
        tinymq_auth::validate_user_name(user).map_err(|_| failed("not a valid user name"))?;
        let key = pair_key(user, password);
        let current = self.credential(user);
        if let Some(principal) = self.remembered(&key, current.as_ref()) {
            return Ok(principal);
        }
        // An unknown user costs the same PBKDF2 as a wrong password, so timing does not tell
        // which users exist.
        let (checked, known) = match current {
            Some(c) => (c, true),
            None => (decoy().clone(), false),
        };
        let _permit = self
            .verifying
            .acquire()
            .await
            .map_err(|_| failed("the listener is stopping"))?;
        let stored_key = checked.stored_key.clone();
        let password = password.to_string();
        let good = tokio::task::spawn_blocking(move || checked.verify_password(&password))
            .await
            .unwrap_or(false);
        if !(good && known) {
            return Err(failed("wrong user name or password"));
        }
        let principal = Principal::user(user);
        self.remember(key, principal.clone(), stored_key);
        Ok(principal)
    }

    /// `user`'s stored credential (SCRAM-SHA-256 preferred).
    fn credential(&self, user: &str) -> Option<StoredCredential> {
        let node = self.node.get()?;
        node.credential(user, ScramMechanism::Sha256)
            .or_else(|| node.credential(user, ScramMechanism::Sha512))
    }

    fn remembered(&self, key: &[u8; 32], current: Option<&StoredCredential>) -> Option<Principal> {
        let current = current?;
        let verified = self.verified.lock().ok()?;
        let v = verified.get(key)?;
        (v.at.elapsed() < BASIC_VERIFIED_FOR && v.stored_key == current.stored_key)
            .then(|| v.principal.clone())
    }

    fn remember(&self, key: [u8; 32], principal: Principal, stored_key: Vec<u8>) {
        let Ok(mut verified) = self.verified.lock() else {
            return;
        };
        if verified.len() >= HTTP_AUTH_CACHE_ENTRIES_MAX {
            verified.retain(|_, v| v.at.elapsed() < BASIC_VERIFIED_FOR);
        }
        if verified.len() >= HTTP_AUTH_CACHE_ENTRIES_MAX {
            let oldest = verified.iter().min_by_key(|(_, v)| v.at).map(|(k, _)| *k);
            if let Some(oldest) = oldest {
                verified.remove(&oldest);
            }
        }
        verified.insert(
            key,
            Verified {
                principal,
                stored_key,
                at: Instant::now(),
            },
        );
    }
}

/// Why a request is not authenticated.
enum Refusal {
    /// No `Authorization` header.
    Missing,
    /// A header that cannot be credentials (or Basic where it is refused): answered at once.
    Bad(String),
    /// Credentials that did not verify: logged, and answered after the delay.
    Failed { user: Option<String>, why: String },
    /// A bearer token that is forged, expired or outlived its credential: logged and counted,
    /// but answered at once and not charged to the address's failure budget (a signed token
    /// cannot be guessed, and a stale one in a dashboard must not lock out Basic logins).
    BadToken { user: Option<String>, why: String },
}

/// A 401 problem document with the challenge that makes a browser prompt.
pub(crate) fn unauthorized(detail: String) -> Response {
    let code = tinymq_protocol::ErrorCode::AUTHENTICATION_FAILED;
    let mut response = Problem::new(StatusCode::UNAUTHORIZED, code.name(), detail).into_response();
    challenge(&mut response);
    response
}

/// Adds `WWW-Authenticate: Basic realm="tinymq"` to a 401 that has none.
pub(crate) fn challenge(response: &mut Response) {
    if response.status() == StatusCode::UNAUTHORIZED
        && !response.headers().contains_key(header::WWW_AUTHENTICATE)
    {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Basic realm=\"tinymq\", charset=\"UTF-8\""),
        );
    }
}

fn decode_basic(text: &str) -> Result<(String, String), Refusal> {
    let bad = || Refusal::Bad("Basic credentials must be base64 of user:password".into());
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|_| bad())?;
    let text = String::from_utf8(bytes).map_err(|_| bad())?;
    let (user, password) = text.split_once(':').ok_or_else(bad)?;
    Ok((user.to_string(), password.to_string()))
}

/// The cache key of a user+password pair: a hash, so the cache holds no password.
fn pair_key(user: &str, password: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update((user.len() as u64).to_be_bytes());
    h.update(user.as_bytes());
    h.update(password.as_bytes());
    h.finalize().into()
}

/// What a token is bound to: a digest of the user's stored keys, which a new password or a
/// deleted user changes. Short: it only has to tell one credential from the next.
fn binding(c: &StoredCredential) -> Vec<u8> {
    let mut h = Sha256::new();
    h.update(b"tinymq token binding\0");
    h.update((c.stored_key.len() as u64).to_be_bytes());
    h.update(&c.stored_key);
    h.update(&c.server_key);
    h.finalize()[..16].to_vec()
}

/// A credential no password matches, checked for unknown users.
fn decoy() -> &'static StoredCredential {
    static DECOY: OnceLock<StoredCredential> = OnceLock::new();
    DECOY.get_or_init(|| {
        StoredCredential::derive(
            ScramMechanism::Sha256,
            "decoy: no user has this password",
            tinymq_auth::SCRAM_ITERATIONS_DEFAULT,
        )
    })
}

pub(crate) fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Paths answered without credentials whatever the listener.
fn open_path(path: &str) -> bool {
    matches!(path, "/health/live" | "/health/ready")
}

/// The middleware: finds the caller (or answers 401), and serves the request as it.
pub(crate) async fn authenticate(
    State(auth): State<Option<Arc<Authenticator>>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(auth) = auth else {
        let caller = Caller {
            principal: None,
            by_token: false,
        };
        return CALLER.scope(caller, next.run(request)).await;
    };
    let path = request.uri().path();
    if open_path(path) || (path == "/metrics" && auth.loopback) {
        let caller = Caller {
            principal: None,
            by_token: false,
        };
        return CALLER.scope(caller, next.run(request)).await;
    }
    let ip = request
        .extensions()
        .get::<ConnectInfo<PeerAddr>>()
        .map(|c| c.0 .0.ip());
    let peer = ip.map_or_else(|| "?".into(), |ip| ip.to_string());
    if let Some(first) = ip.and_then(|ip| auth.over_budget(request.headers(), ip)) {
        if first {
            tracing::warn!(
                %peer,
                "HTTP authentication refused: too many failed logins from this address \
                 (logged once a window)"
            );
        }
        return unauthorized(format!(
            "too many failed logins from {peer} (login_failures_per_ip_max {} within {} s): \
             try again later",
            tinymq_auth::LOGIN_FAILURES_PER_IP_MAX,
            tinymq_auth::LOGIN_FAILURE_WINDOW.as_secs()
        ));
    }
    match auth.authenticate(request.headers()).await {
        Ok(caller) => {
            let mut response = CALLER.scope(caller, next.run(request)).await;
            challenge(&mut response);
            response
        }
        Err(Refusal::Missing) => unauthorized(
            "this node requires authentication: HTTP Basic (a tinymq user) or a bearer token \
             from POST /api/v1/auth/token"
                .into(),
        ),
        Err(Refusal::Bad(why)) => unauthorized(why),
        Err(Refusal::Failed { user, why }) => {
            refused(&auth, &peer, user, &why);
            if let Some(ip) = ip {
                auth.limiter.failed(ip, Instant::now());
            }
            tokio::time::sleep(FAILED_ATTEMPT_DELAY).await;
            unauthorized(why)
        }
        Err(Refusal::BadToken { user, why }) => {
            refused(&auth, &peer, user, &why);
            unauthorized(why)
        }
    }
}

/// Counts and logs a refused login (never the password).
fn refused(auth: &Authenticator, peer: &str, user: Option<String>, why: &str) {
    if let Some(c) = &auth.counters {
        c.auth_failed.fetch_add(1, Ordering::Relaxed);
    }
    tracing::warn!(
        %peer,
        user = user.as_deref().unwrap_or("-"),
        reason = %why,
        "HTTP authentication failed"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_decode_and_bad_ones_are_refused() {
        let text = base64::engine::general_purpose::STANDARD.encode("alice:pa:ss");
        let (user, password) = decode_basic(&text).ok().expect("decodes");
        assert_eq!((user.as_str(), password.as_str()), ("alice", "pa:ss"));
        for bad in ["!!!", "YWxpY2U=" /* "alice", no colon */] {
            assert!(matches!(decode_basic(bad), Err(Refusal::Bad(_))), "{bad}");
        }
    }

    /// A node holding one user, alice, whose password `password` sets.
    struct OneUser(Mutex<StoredCredential>);

    impl crate::NodeView for OneUser {
        fn role(&self) -> &'static str {
            "server"
        }
        fn partitions(&self) -> Vec<crate::PartitionStats> {
            Vec::new()
        }
        fn raft(&self) -> Option<crate::RaftStats> {
            None
        }
        fn connections(&self) -> crate::ConnectionCounts {
            crate::ConnectionCounts {
                open: 0,
                accepted: 0,
                refused: 0,
                idle_closed: 0,
            }
        }
        fn readiness(&self) -> Vec<crate::ReadinessCheck> {
            Vec::new()
        }
        fn credential(&self, user: &str, m: ScramMechanism) -> Option<StoredCredential> {
            let c = self.0.lock().ok()?.clone();
            (user == "alice" && m == c.mechanism).then_some(c)
        }
    }

    fn alice(password: &str) -> StoredCredential {
        StoredCredential::derive(
            ScramMechanism::Sha256,
            password,
            tinymq_auth::SCRAM_ITERATIONS_MIN,
        )
    }

    fn authenticator(tls: bool, loopback: bool) -> (Authenticator, Arc<OneUser>) {
        let node = Arc::new(OneUser(Mutex::new(alice("right"))));
        let slot: Arc<NodeSlot> = Arc::new(OnceLock::new());
        let _ = slot.set(node.clone());
        let auth = Authenticator::new(HttpAuth::new([7; 32]), slot, tls, loopback);
        (auth, node)
    }

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, value.parse().unwrap());
        h
    }

    fn basic(user: &str, password: &str) -> HeaderMap {
        let pair = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        headers(&format!("Basic {pair}"))
    }

    #[tokio::test]
    async fn basic_is_checked_against_the_stored_verifier_and_a_new_password_voids_the_cache() {
        let (auth, node) = authenticator(false, true);
        let caller = auth.authenticate(&basic("alice", "right")).await.ok();
        let principal = caller.and_then(|c| c.principal).map(|p| p.to_string());
        assert_eq!(principal.as_deref(), Some("User:alice"));
        for (user, password) in [("alice", "wrong"), ("bob", "right"), ("node:broker:1", "x")] {
            let refused = auth.authenticate(&basic(user, password)).await;
            assert!(matches!(refused, Err(Refusal::Failed { .. })), "{user}");
        }
        assert!(matches!(
            auth.authenticate(&HeaderMap::new()).await,
            Err(Refusal::Missing)
        ));
        // Remembered now; a new password makes the old one fail at once.
        assert!(auth
            .remembered(
                &pair_key("alice", "right"),
                auth.credential("alice").as_ref()
            )
            .is_some());
        *node.0.lock().unwrap() = alice("changed");
        let refused = auth.authenticate(&basic("alice", "right")).await;
        assert!(matches!(refused, Err(Refusal::Failed { .. })));
        assert!(auth.authenticate(&basic("alice", "changed")).await.is_ok());
    }

    #[tokio::test]
    async fn basic_over_plain_http_off_loopback_is_refused_but_tokens_work() {
        let (auth, node) = authenticator(false, false);
        let refused = auth.authenticate(&basic("alice", "right")).await;
        assert!(matches!(refused, Err(Refusal::Bad(_))));
        let (token, expires) = auth.issue(&Principal::user("alice"));
        assert!(expires > now_unix_ms());
        let caller = auth
            .authenticate(&headers(&format!("Bearer {token}")))
            .await
            .ok()
            .expect("a good token");
        assert!(caller.by_token);
        assert_eq!(
            caller.principal.map(|p| p.to_string()).as_deref(),
            Some("User:alice")
        );
        let other = Authenticator::new(
            HttpAuth::new([8; 32]),
            Arc::new(OnceLock::new()),
            true,
            false,
        );
        let forged = other
            .authenticate(&headers(&format!("Bearer {token}")))
            .await;
        assert!(matches!(forged, Err(Refusal::BadToken { .. })));
        // A new password voids the token; so does a deleted user.
        *node.0.lock().unwrap() = alice("changed");
        let stale = auth
            .authenticate(&headers(&format!("Bearer {token}")))
            .await;
        assert!(matches!(stale, Err(Refusal::BadToken { .. })));
        let (token, _) = auth.issue(&Principal::user("alice"));
        let bob = auth.issue(&Principal::user("bob")).0;
        assert!(auth
            .authenticate(&headers(&format!("Bearer {token}")))
            .await
            .is_ok());
        let gone = auth.authenticate(&headers(&format!("Bearer {bob}"))).await;
        assert!(matches!(gone, Err(Refusal::BadToken { .. })));
        // Over TLS, Basic is taken.
        let (tls, _) = authenticator(true, false);
        assert!(tls.authenticate(&basic("alice", "right")).await.is_ok());
    }

    #[tokio::test]
    async fn basic_from_an_address_over_its_budget_is_refused_before_verification() {
        let (auth, _) = authenticator(true, true);
        let (ip, other): (IpAddr, IpAddr) =
            ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let good = basic("alice", "right");
        assert_eq!(auth.over_budget(&good, ip), None);
        for _ in 0..tinymq_auth::LOGIN_FAILURES_PER_IP_MAX {
            auth.limiter.failed(ip, Instant::now());
        }
        // Good credentials too (a lockout), logged once; another address and tokens pass.
        assert_eq!(auth.over_budget(&good, ip), Some(true));
        assert_eq!(auth.over_budget(&good, ip), Some(false));
        assert_eq!(auth.over_budget(&good, other), None);
        let (token, _) = auth.issue(&Principal::user("alice"));
        assert_eq!(
            auth.over_budget(&headers(&format!("Bearer {token}")), ip),
            None
        );
    }

    #[test]
    fn the_cache_stays_bounded() {
        let (auth, _) = authenticator(true, true);
        for i in 0..HTTP_AUTH_CACHE_ENTRIES_MAX + 10 {
            auth.remember(
                pair_key("alice", &i.to_string()),
                Principal::user("alice"),
                vec![1],
            );
        }
        assert_eq!(
            auth.verified.lock().unwrap().len(),
            HTTP_AUTH_CACHE_ENTRIES_MAX
        );
    }

    #[test]
    fn pair_keys_separate_user_from_password() {
        assert_ne!(pair_key("ab", "c"), pair_key("a", "bc"));
        assert_eq!(pair_key("a", "b"), pair_key("a", "b"));
    }
}
