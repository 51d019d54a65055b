//! SASL on the Kafka listener: SaslHandshake and SaslAuthenticate, with the same credentials,
//! principals and failure limits as the native Authenticate operation. Until a connection has
//! authenticated (when `--auth scram` is on) it may send only ApiVersions, SaslHandshake and
//! SaslAuthenticate, in requests of at most `KAFKA_PRE_AUTH_FRAME_BYTES_MAX` bytes.
//!
//! Mechanisms: SCRAM-SHA-256 and SCRAM-SHA-512 (tinymq-auth's `ScramServer` against the
//! broker's credentials). PLAIN is not offered: tinymq stores only SCRAM verifiers, never a
//! password. After a SaslHandshake v0 the client sends the SCRAM messages as raw tokens (each
//! with Kafka's 4-byte size, no request header) instead of SaslAuthenticate requests, and gets
//! raw tokens back; a failure closes the connection, as the raw form has no error field.
//! Clients that know SaslAuthenticate send v1.
//!
//! What a failure costs mirrors the native port (`tinymq_net`'s auth): it is logged, answered
//! after a delay that doubles with each failure of the connection (up to
//! `AUTH_FAILURE_DELAY_MAX`), the connection is closed after `auth_failures_max` of them, and
//! failures are counted per source address ([`LoginLimiter`]): an address over its budget is
//! refused without its credential being checked until its window passes.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use kafka_protocol::error::ResponseError as K;
use kafka_protocol::messages::{
    ApiKey, RequestKind, ResponseKind, SaslAuthenticateRequest, SaslAuthenticateResponse,
    SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use tinymq_auth::{
    parse_node_user, Admission, CredentialLookup, Principal, ScramMechanism, ScramServer,
    StoredCredential,
};
use tinymq_net::{claimed_user, failure_delay, log_safe, AuthMode, ListenerSecurity, Service};

use crate::config::KAFKA_PRE_AUTH_FRAME_BYTES_MAX;
use crate::context::Ctx;
use crate::dispatch::Close;

/// A connection's authentication state.
pub(crate) struct Session {
    principal: Principal,
    authenticated: bool,
    /// Whether the listener takes SCRAM logins at all (`--auth scram`).
    scram: bool,
    /// The mechanism SaslHandshake chose; SaslAuthenticate comes after it.
    mechanism: Option<ScramMechanism>,
    /// The exchange in progress (after its client-first) and the user it claimed.
    exchange: Option<(ScramServer, String)>,
    failures: u32,
    /// A SaslHandshake v0 chose the mechanism: the exchange comes as raw tokens.
    raw_tokens: bool,
}

impl Session {
    pub fn new(security: &ListenerSecurity, tls_principal: Option<&str>) -> Session {
        let (principal, authenticated) = match security.auth {
            AuthMode::None => (Principal::anonymous(), true),
            AuthMode::Mtls => match tls_principal {
                Some(name) => (Principal::user(name), true),
                None => (Principal::anonymous(), false),
            },
            AuthMode::Scram => (Principal::anonymous(), false),
        };
        Session {
            principal,
            authenticated,
            scram: security.auth == AuthMode::Scram,
            mechanism: None,
            exchange: None,
            failures: 0,
            raw_tokens: false,
        }
    }

    /// Whom the connection acts as before any SASL exchange.
    pub fn initial_principal(&self) -> Principal {
        self.principal.clone()
    }

    pub fn authenticated(&self) -> bool {
        self.authenticated
    }

    /// Whether a request of `api_key` may be served now.
    pub fn admits(&self, api_key: ApiKey) -> bool {
        self.authenticated
            || matches!(
                api_key,
                ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate
            )
    }

    /// The largest request accepted now.
    pub fn frame_bytes_max(&self, authenticated_max: u32) -> u32 {
        if self.authenticated {
            authenticated_max
        } else {
            KAFKA_PRE_AUTH_FRAME_BYTES_MAX.min(authenticated_max)
        }
    }

    /// One SaslHandshake or SaslAuthenticate request: its response, and the principal the
    /// connection acts as from now on when this completed a login.
    pub async fn step(
        &mut self,
        ctx: &Arc<Ctx>,
        version: i16,
        request: RequestKind,
    ) -> Result<(ResponseKind, Option<Principal>), Close> {
        match request {
            RequestKind::SaslHandshake(r) => Ok((
                ResponseKind::SaslHandshake(self.handshake(ctx, version, r)),
                None,
            )),
            RequestKind::SaslAuthenticate(r) => {
                let (response, principal) = self.authenticate(ctx, r).await?;
                Ok((ResponseKind::SaslAuthenticate(response), principal))
            }
            _ => Err("not a SASL request".into()),
        }
    }

    /// Whether the connection's next input is a raw SASL token (after SaslHandshake v0).
    pub fn expects_raw_token(&self) -> bool {
        self.raw_tokens && !self.authenticated
    }

    /// One raw SASL token (after SaslHandshake v0): the raw token to answer with, and the
    /// principal once the login completes; a refused login closes the connection.
    pub async fn raw_step(
        &mut self,
        ctx: &Arc<Ctx>,
        token: Bytes,
    ) -> Result<(Bytes, Option<Principal>), Close> {
        let request = SaslAuthenticateRequest::default().with_auth_bytes(token);
        let (response, principal) = self.authenticate(ctx, request).await?;
        if response.error_code != 0 {
            return Err(format!(
                "SASL login (raw tokens after SaslHandshake v0) refused: {}",
                response
                    .error_message
                    .as_deref()
                    .unwrap_or("authentication failed")
            ));
        }
        if principal.is_some() {
            self.raw_tokens = false;
        }
        Ok((response.auth_bytes, principal))
    }

    fn offered(&self) -> Vec<StrBytes> {
        if !self.scram {
            return vec![];
        }
        [ScramMechanism::Sha256, ScramMechanism::Sha512]
            .iter()
            .map(|m| StrBytes::from_static_str(m.name()))
            .collect()
    }

    fn handshake(
        &mut self,
        ctx: &Ctx,
        version: i16,
        r: SaslHandshakeRequest,
    ) -> SaslHandshakeResponse {
        let response = SaslHandshakeResponse::default().with_mechanisms(self.offered());
        let peer = ctx.peer.addr;
        if !self.scram || self.authenticated {
            tracing::info!(%peer, "Kafka SaslHandshake refused: no SASL login on this listener or connection");
            return response.with_error_code(K::IllegalSaslState.code());
        }
        match ScramMechanism::from_name(r.mechanism.as_str()) {
            Some(mechanism) if self.exchange.is_none() => {
                self.mechanism = Some(mechanism);
                self.raw_tokens = version == 0;
                response
            }
            Some(_) => response.with_error_code(K::IllegalSaslState.code()),
            None => {
                // PLAIN among them: tinymq keeps no passwords, only SCRAM verifiers.
                tracing::info!(%peer, mechanism = %log_safe(r.mechanism.as_str()), "Kafka SASL mechanism not offered (SCRAM-SHA-256 and SCRAM-SHA-512 are; PLAIN is not)");
                response.with_error_code(K::UnsupportedSaslMechanism.code())
            }
        }
    }

    async fn authenticate(
        &mut self,
        ctx: &Ctx,
        r: SaslAuthenticateRequest,
    ) -> Result<(SaslAuthenticateResponse, Option<Principal>), Close> {
        let Some(mechanism) = self.mechanism.filter(|_| !self.authenticated) else {
            let why = "SaslAuthenticate without a SaslHandshake choosing a mechanism first";
            let response = SaslAuthenticateResponse::default()
                .with_error_code(K::IllegalSaslState.code())
                .with_error_message(Some(StrBytes::from_static_str(why)));
            return Ok((response, None));
        };
        let mut user = self.exchange.as_ref().map(|(_, u)| u.clone());
        match self.advance(ctx, mechanism, r.auth_bytes, &mut user) {
            Ok(Advanced::Continue(bytes)) => Ok((ok(bytes), None)),
            Ok(Advanced::Done(bytes, principal)) => {
                tracing::info!(peer = %ctx.peer.addr, %principal, "Kafka client authenticated");
                self.authenticated = true;
                self.principal = principal.clone();
                self.exchange = None;
                Ok((ok(bytes), Some(principal)))
            }
            Err(failure) => self.failed(ctx, user.unwrap_or_default(), failure).await,
        }
    }

    fn advance(
        &mut self,
        ctx: &Ctx,
        mechanism: ScramMechanism,
        payload: Bytes,
        user: &mut Option<String>,
    ) -> Result<Advanced, Failure> {
        let lookup = Lookup(ctx);
        let Some((mut server, claimed)) = self.exchange.take() else {
            let claimed = claimed_user(&payload);
            *user = Some(claimed.clone());
            limited(ctx)?;
            let mut server = ScramServer::new(mechanism).accepting_repeated_client_nonce();
            let first = server
                .first(&payload, &lookup)
                .map_err(|e| Failure::new(e.to_string()))?;
            self.exchange = Some((server, claimed));
            return Ok(Advanced::Continue(first));
        };
        *user = Some(claimed);
        let (last, done) = server
            .finish(&payload)
            .map_err(|e| Failure::new(e.to_string()))?;
        if let Some(authzid) = done
            .authzid
            .as_deref()
            .filter(|a| !a.is_empty() && *a != done.user)
        {
            return Err(Failure::new(format!(
                "User:{} may not act as {:?}: only nodes may act for another principal",
                done.user,
                log_safe(authzid)
            )));
        }
        Ok(Advanced::Done(last, Principal::user(&done.user)))
    }

    /// Answers a failed exchange after its delay, or closes the connection at
    /// `auth_failures_max`.
    async fn failed(
        &mut self,
        ctx: &Ctx,
        user: String,
        failure: Failure,
    ) -> Result<(SaslAuthenticateResponse, Option<Principal>), Close> {
        self.exchange = None;
        self.failures = self.failures.saturating_add(1);
        let peer = ctx.peer.addr;
        let failures_max = ctx.state().config.security.auth_failures_max;
        let close = self.failures >= failures_max;
        match failure.limited {
            None => {
                ctx.state()
                    .config
                    .security
                    .login_limiter
                    .failed(peer.ip(), Instant::now());
                tracing::warn!(%peer, user = %user, reason = %failure.reason, failures = self.failures, close, "Kafka authentication failed");
            }
            Some(true) => {
                tracing::warn!(%peer, user = %user, reason = %failure.reason, "Kafka authentication refused: too many failed logins from this address (logged once a window)");
            }
            Some(false) => {}
        }
        tokio::time::sleep(failure_delay(self.failures)).await;
        if close {
            return Err(format!(
                "{} failed SASL authentications (auth_failures_max)",
                self.failures
            ));
        }
        let response = SaslAuthenticateResponse::default()
            .with_error_code(K::SaslAuthenticationFailed.code())
            .with_error_message(Some(StrBytes::from_string(format!(
                "authentication failed for user {user}: {}",
                failure.reason
            ))));
        Ok((response, None))
    }
}

fn ok(bytes: Vec<u8>) -> SaslAuthenticateResponse {
    SaslAuthenticateResponse::default()
        .with_error_message(None)
        .with_auth_bytes(Bytes::from(bytes))
}

enum Advanced {
    Continue(Vec<u8>),
    Done(Vec<u8>, Principal),
}

/// Why an exchange failed, for the peer and the log (the same words).
struct Failure {
    reason: String,
    /// Refused by the per-address limiter: not counted again, and logged only when
    /// `Some(true)` (the first refusal of the address's window).
    limited: Option<bool>,
}

impl Failure {
    fn new(reason: String) -> Failure {
        Failure {
            reason,
            limited: None,
        }
    }
}

/// Refuses an exchange, before its credential is looked at, from an address over its budget.
fn limited(ctx: &Ctx) -> Result<(), Failure> {
    let ip = ctx.peer.addr.ip();
    match ctx.state().config.security.login_limiter.admit(ip, Instant::now()) {
        Admission::Allowed => Ok(()),
        Admission::Refused { first } => Err(Failure {
            reason: format!(
                "too many failed logins from {ip} (login_failures_per_ip_max {} within {} s): try again later",
                tinymq_auth::LOGIN_FAILURES_PER_IP_MAX,
                tinymq_auth::LOGIN_FAILURE_WINDOW.as_secs()
            ),
            limited: Some(first),
        }),
    }
}

/// Users' verifiers from the broker's metadata. Node users (`node:…`, proven with the cluster
/// secret) do not log in on the Kafka port: they are unknown here.
struct Lookup<'a>(&'a Ctx);

impl CredentialLookup for Lookup<'_> {
    fn credential(&self, user: &str, mechanism: ScramMechanism) -> Option<StoredCredential> {
        if parse_node_user(user).is_some() {
            return None;
        }
        self.0.shared.front.credential(user, mechanism)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_scram_is_offered_and_only_with_scram_on() {
        let scram = ListenerSecurity {
            auth: AuthMode::Scram,
            ..ListenerSecurity::default()
        };
        let session = Session::new(&scram, None);
        assert!(!session.authenticated());
        assert!(!session.admits(ApiKey::Metadata));
        assert!(session.admits(ApiKey::SaslAuthenticate));
        let offered: Vec<String> = session.offered().iter().map(|m| m.to_string()).collect();
        assert_eq!(offered, ["SCRAM-SHA-256", "SCRAM-SHA-512"]);
        let open = Session::new(&ListenerSecurity::default(), None);
        assert!(open.authenticated() && open.offered().is_empty());
    }
}
