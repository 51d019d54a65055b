//! `POST /api/v1/auth/token`: a bearer token for the caller, who proves itself with HTTP
//! Basic. The token names the principal and its expiry, signed with the cluster secret's
//! token key, so every node of the cluster accepts it until it expires.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use super::{ApiState, Problem};
use crate::auth::{Caller, CALLER};

#[derive(Debug, Serialize, ToSchema)]
pub struct Token {
    /// Send it as `Authorization: Bearer TOKEN`.
    pub token: String,
    /// The principal it authenticates, e.g. `User:alice`.
    pub principal: String,
    /// When it stops being accepted, in milliseconds since the Unix epoch
    /// (`http_token_lifetime_ms` after it was issued).
    pub expires_at: u64,
}

/// Issues a bearer token for the Basic-authenticated caller.
#[utoipa::path(
    post,
    path = "/auth/token",
    tag = "auth",
    responses(
        (status = 200, description = "A token for the caller", body = Token),
        (status = 401, description = "No valid Basic credentials (a token cannot get another \
         token)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Authentication is off on this node (`--auth none`): \
         there are no tokens", body = Problem, content_type = "application/problem+json"),
    ),
    // Basic only (a token gets no token); optional in the document because a node running
    // with --auth none answers without it (404).
    security((), ("basic" = []))
)]
pub async fn issue_token(State(state): State<ApiState>) -> Result<Json<Token>, Problem> {
    let caller = CALLER.try_with(Caller::clone).ok();
    let (Some(auth), Some(caller)) = (state.auth.as_ref(), caller) else {
        return Err(Problem::new(
            StatusCode::NOT_FOUND,
            "INVALID_REQUEST",
            "this node runs with --auth none: it issues no tokens".into(),
        ));
    };
    let principal = match (&caller.principal, caller.by_token) {
        (Some(p), false) => p.clone(),
        _ => {
            return Err(Problem::new(
                StatusCode::UNAUTHORIZED,
                "AUTHENTICATION_FAILED",
                "a token is issued only for HTTP Basic credentials, not for another token".into(),
            ))
        }
    };
    let (token, expires_at) = auth.issue(&principal);
    Ok(Json(Token {
        token,
        principal: principal.to_string(),
        expires_at,
    }))
}
