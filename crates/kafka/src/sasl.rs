//! SASL on the Kafka listener: SaslHandshake and SaslAuthenticate, with the same credentials,
//! principals and failure limits as the native Authenticate operation. Until a connection has
//! authenticated (when `--auth scram` is on) it may send only ApiVersions, SaslHandshake and
//! SaslAuthenticate, in requests of at most `KAFKA_PRE_AUTH_FRAME_BYTES_MAX` bytes.

use std::sync::Arc;

use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use tinymq_auth::Principal;
use tinymq_net::{AuthMode, ListenerSecurity};

use crate::config::KAFKA_PRE_AUTH_FRAME_BYTES_MAX;
use crate::context::Ctx;
use crate::dispatch::Close;

/// A connection's authentication state.
pub(crate) struct Session {
    principal: Principal,
    authenticated: bool,
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
        _ctx: &Arc<Ctx>,
        _version: i16,
        request: RequestKind,
    ) -> Result<(ResponseKind, Option<Principal>), Close> {
        Err(format!(
            "SASL is not served yet ({:?})",
            std::mem::discriminant(&request)
        ))
    }
}
