//! The server side of authentication: the Authenticate exchange (SCRAM, with helper
//! `tinymq_auth::ScramServer`), who the connection acts as once it succeeds (a user, a node
//! proven with the cluster secret, or whom a node acts for), and what a failure costs: it is
//! logged, answered only after a delay that grows with each failure of the connection, and the
//! connection is closed after `auth_failures_max` of them. Failures are also counted per
//! source address across the listener's connections ([`LoginLimiter`]): an address over
//! `login_failures_per_ip_max` is refused further exchanges, without their credential
//! check, until its window passes. Node logins (`node:` users, proven with the 256-bit cluster
//! secret, which no one guesses) are neither counted nor refused, so failing logins from a
//! shared address cannot cut a cluster's nodes off each other.

use std::time::{Duration, Instant};

use bytes::Bytes;
use prost::Message;
use tinymq_auth::{
    parse_node_user, Admission, ClusterSecret, CredentialLookup, LoginLimiter, NodeKind, Principal,
    ScramMechanism, ScramServer, StoredCredential,
};
use tinymq_protocol::{messages as m, ErrorCode, Frame};

use crate::{encode_response, ListenerSecurity, NodeRole, Peer, Service};

/// The delay before the answer to a connection's first failed exchange; it doubles with each
/// further failure, up to [`AUTH_FAILURE_DELAY_MAX`].
pub const AUTH_FAILURE_DELAY: Duration = Duration::from_millis(250);
pub const AUTH_FAILURE_DELAY_MAX: Duration = Duration::from_secs(2);
/// Bytes of a claimed user name kept for the log at most.
const LOGGED_USER_BYTES_MAX: usize = 64;

/// One connection's authentication: the exchange in progress and the failures so far.
#[derive(Default)]
pub(crate) struct Login {
    exchange: Option<Exchange>,
    failures: u32,
    /// Set once an exchange succeeded; a connection authenticates once.
    pub(crate) done: bool,
}

struct Exchange {
    mechanism: ScramMechanism,
    server: ScramServer,
    /// The name the client-first message claimed, for the log.
    user: String,
}

/// What to do with the answer to one Authenticate request.
pub(crate) enum Outcome {
    /// Send it and wait for the next step.
    Continue(Bytes),
    /// Send it: the connection now acts as the principal, with this role and node id.
    Done {
        reply: Bytes,
        principal: Principal,
        role: NodeRole,
        node_id: u64,
    },
    /// Wait `delay`, then send it; close the connection afterwards when `close`.
    Failed {
        reply: Bytes,
        delay: Duration,
        close: bool,
    },
}

/// Credentials as the listener knows them: node users from the cluster secret, everyone else
/// from the service (its current metadata).
struct Lookup<'a, S> {
    service: &'a S,
    secret: Option<&'a ClusterSecret>,
}

impl<S: Service> CredentialLookup for Lookup<'_, S> {
    fn credential(&self, user: &str, mechanism: ScramMechanism) -> Option<StoredCredential> {
        if parse_node_user(user).is_some() {
            return self.secret.map(|s| s.node_credential(user, mechanism));
        }
        self.service.credential(user, mechanism)
    }
}

/// Why an exchange failed: the code for the peer, and the reason for the log (the same words).
struct Failure {
    code: ErrorCode,
    reason: String,
    /// Refused by the per-address limiter: not counted again, and logged only as `Some(true)`
    /// says (the first refusal of the address's window).
    limited: Option<bool>,
}

impl Failure {
    fn new(code: ErrorCode, reason: impl Into<String>) -> Failure {
        Failure {
            code,
            reason: reason.into(),
            limited: None,
        }
    }
}

impl Login {
    /// Takes one Authenticate request of the connection of `peer`.
    pub(crate) fn step<S: Service>(
        &mut self,
        frame: Frame,
        service: &S,
        security: &ListenerSecurity,
        limiter: &LoginLimiter,
        peer: &Peer,
    ) -> Outcome {
        let (op, id) = (frame.header.op_code(), frame.header.message_id);
        let mut user = self.exchange.as_ref().map(|e| e.user.clone());
        let source = (limiter, peer);
        match self.advance(frame.body, service, security, source, &mut user) {
            Ok(Advanced::Continue(payload)) => {
                let body = m::AuthenticateResponse {
                    payload: payload.into(),
                    ..Default::default()
                };
                Outcome::Continue(encode_response(op, id, &body))
            }
            Ok(Advanced::Done(payload, principal, (role, node_id))) => {
                self.done = true;
                tracing::info!(peer = %peer.addr, %principal, "authenticated");
                let body = m::AuthenticateResponse {
                    payload: payload.into(),
                    complete: true,
                    principal: principal.to_string(),
                    ..Default::default()
                };
                Outcome::Done {
                    reply: encode_response(op, id, &body),
                    principal,
                    role,
                    node_id,
                }
            }
            Err(failure) => {
                self.exchange = None;
                self.failures = self.failures.saturating_add(1);
                let close = self.failures >= security.auth_failures_max;
                let user = user.unwrap_or_default();
                match failure.limited {
                    None => {
                        if parse_node_user(&user).is_none() {
                            limiter.failed(peer.addr.ip(), Instant::now());
                        }
                        tracing::warn!(peer = %peer.addr, user = %user, reason = %failure.reason, failures = self.failures, close, "authentication failed");
                    }
                    Some(true) => {
                        tracing::warn!(peer = %peer.addr, user = %user, reason = %failure.reason, "authentication refused: too many failed logins from this address (logged once a window)");
                    }
                    Some(false) => {}
                }
                let body = m::AuthenticateResponse {
                    error: Some(failure.code.with_message(failure.reason)),
                    ..Default::default()
                };
                Outcome::Failed {
                    reply: encode_response(op, id, &body),
                    delay: failure_delay(self.failures),
                    close,
                }
            }
        }
    }

    fn advance<S: Service>(
        &mut self,
        body: Bytes,
        service: &S,
        security: &ListenerSecurity,
        (limiter, peer): (&LoginLimiter, &Peer),
        user: &mut Option<String>,
    ) -> Result<Advanced, Failure> {
        let request = m::AuthenticateRequest::decode(body).map_err(|e| {
            Failure::new(
                ErrorCode::AUTHENTICATION_FAILED,
                format!("authenticate body: {e}"),
            )
        })?;
        let mechanism = ScramMechanism::from_name(&request.mechanism)
            .filter(|m| security.mechanisms().contains(m))
            .ok_or_else(|| {
                let offered: Vec<_> = security.mechanisms().iter().map(|m| m.name()).collect();
                Failure::new(
                    ErrorCode::UNSUPPORTED_SASL_MECHANISM,
                    format!(
                        "mechanism {:?} is not accepted here (accepted: {:?})",
                        log_safe(&request.mechanism),
                        offered
                    ),
                )
            })?;
        let lookup = Lookup {
            service,
            secret: security.cluster_secret.as_deref(),
        };
        let Some(mut exchange) = self.exchange.take() else {
            let claimed = claimed_user(&request.payload);
            *user = Some(claimed.clone());
            if parse_node_user(&claimed).is_none() {
                limited(limiter, peer)?;
            }
            let mut server = ScramServer::new(mechanism);
            let first = server
                .first(&request.payload, &lookup)
                .map_err(|e| Failure::new(ErrorCode::AUTHENTICATION_FAILED, e.to_string()))?;
            self.exchange = Some(Exchange {
                mechanism,
                server,
                user: user.clone().unwrap_or_default(),
            });
            return Ok(Advanced::Continue(first));
        };
        if exchange.mechanism != mechanism {
            return Err(Failure::new(
                ErrorCode::AUTHENTICATION_FAILED,
                "the mechanism changed in the middle of an exchange",
            ));
        }
        let (last, done) = exchange
            .server
            .finish(&request.payload)
            .map_err(|e| Failure::new(ErrorCode::AUTHENTICATION_FAILED, e.to_string()))?;
        let (principal, node) = acting_principal(&done.user, done.authzid.as_deref())?;
        Ok(Advanced::Done(last, principal, node))
    }
}

/// Refuses an exchange, before its credential is looked at, from an address over its budget.
fn limited(limiter: &LoginLimiter, peer: &Peer) -> Result<(), Failure> {
    match limiter.admit(peer.addr.ip(), Instant::now()) {
        Admission::Allowed => Ok(()),
        Admission::Refused { first } => Err(Failure {
            code: ErrorCode::AUTHENTICATION_FAILED,
            reason: format!(
                "too many failed logins from {} (login_failures_per_ip_max {} within {} s): \
                 try again later",
                peer.addr.ip(),
                tinymq_auth::LOGIN_FAILURES_PER_IP_MAX,
                tinymq_auth::LOGIN_FAILURE_WINDOW.as_secs()
            ),
            limited: Some(first),
        }),
    }
}

enum Advanced {
    Continue(Vec<u8>),
    /// The last message, the principal, and the connection's verified role and node id.
    Done(Vec<u8>, Principal, (NodeRole, u64)),
}

/// Whom a successful login acts as: the node its user names, the user, or (for nodes only)
/// the principal of its authorization id; and the role and node id the connection then has (a
/// node acting for a user is that user: a client).
fn acting_principal(
    user: &str,
    authzid: Option<&str>,
) -> Result<(Principal, (NodeRole, u64)), Failure> {
    let (proven, node) = match parse_node_user(user) {
        Some((NodeKind::Broker, id)) => (
            Principal::node(NodeKind::Broker, id),
            (NodeRole::Broker, id),
        ),
        Some((NodeKind::Meta, id)) => (Principal::node(NodeKind::Meta, id), (NodeRole::Meta, id)),
        None => (Principal::user(user), (NodeRole::Client, 0)),
    };
    let Some(authzid) = authzid.filter(|a| !a.is_empty() && *a != user) else {
        return Ok((proven, node));
    };
    if !proven.is_node() {
        return Err(Failure::new(
            ErrorCode::AUTHENTICATION_FAILED,
            format!(
                "{proven} may not act as {:?}: only nodes may act for another principal",
                log_safe(authzid)
            ),
        ));
    }
    let acting = Principal::parse(authzid).unwrap_or_else(|_| Principal::user(authzid));
    let node = (NodeRole::Client, 0);
    Ok((acting, node))
}

/// The delay before answering a connection's `failures`-th failure (the Kafka listener's
/// SASL logins use it too).
pub fn failure_delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(8);
    AUTH_FAILURE_DELAY
        .saturating_mul(1u32 << doublings)
        .min(AUTH_FAILURE_DELAY_MAX)
}

/// The user a SCRAM client-first message names (`n=...`), for the log only.
pub fn claimed_user(client_first: &[u8]) -> String {
    let text = String::from_utf8_lossy(client_first);
    let name = text
        .split(',')
        .find_map(|attr| attr.strip_prefix("n="))
        .unwrap_or("");
    log_safe(&name.replace("=2C", ",").replace("=3D", "="))
}

/// A peer-given string as it may appear in a log line: bounded and printable.
pub fn log_safe(s: &str) -> String {
    s.chars()
        .take(LOGGED_USER_BYTES_MAX)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_delays_grow_and_stay_bounded() {
        assert_eq!(failure_delay(1), AUTH_FAILURE_DELAY);
        assert_eq!(failure_delay(2), AUTH_FAILURE_DELAY * 2);
        assert_eq!(failure_delay(100), AUTH_FAILURE_DELAY_MAX);
    }

    #[test]
    fn claimed_user_reads_the_scram_name() {
        assert_eq!(claimed_user(b"n,,n=alice,r=abc"), "alice");
        assert_eq!(claimed_user(b"n,a=x,n=a=2Cb,r=abc"), "a,b");
        assert_eq!(claimed_user(b"\xff"), "");
    }

    #[test]
    fn only_nodes_act_for_others() {
        let node = tinymq_auth::node_user(NodeKind::Broker, 3);
        assert!(acting_principal("alice", Some("bob")).is_err());
        let (alice, role) = acting_principal("alice", Some("alice")).ok().unwrap();
        assert_eq!(
            (alice, role),
            (Principal::user("alice"), (NodeRole::Client, 0))
        );
        let (bob, role) = acting_principal(&node, Some("User:bob")).ok().unwrap();
        assert_eq!((bob, role), (Principal::user("bob"), (NodeRole::Client, 0)));
        let (me, role) = acting_principal(&node, None).ok().unwrap();
        assert_eq!(me, Principal::node(NodeKind::Broker, 3));
        assert_eq!(role, (NodeRole::Broker, 3));
    }
}
