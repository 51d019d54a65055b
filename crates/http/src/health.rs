//! `/health/live` (the process answers) and `/health/ready` (every readiness condition of the
//! node holds), both with JSON bodies; not ready is 503 with the failing conditions named.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::routes::AppState;
use crate::ReadinessCheck;

pub(crate) async fn live() -> Response {
    Json(serde_json::json!({ "status": "live" })).into_response()
}

pub(crate) async fn ready(State(state): State<AppState>) -> Response {
    let Some(node) = state.node.get().cloned() else {
        let starting = ReadinessCheck {
            name: "started",
            ok: false,
            detail: "the node is still starting (joining the cluster, opening partitions)".into(),
        };
        return answer(None, vec![starting]);
    };
    let role = node.role();
    match tokio::task::spawn_blocking(move || node.readiness()).await {
        Ok(checks) => answer(Some(role), checks),
        Err(e) => crate::routes::problem(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the readiness task failed: {e}"),
        ),
    }
}

fn answer(role: Option<&'static str>, checks: Vec<ReadinessCheck>) -> Response {
    let ready = checks.iter().all(|c| c.ok);
    let missing: Vec<&str> = checks.iter().filter(|c| !c.ok).map(|c| c.name).collect();
    let body = serde_json::json!({
        "status": if ready { "ready" } else { "not_ready" },
        "role": role,
        "missing": missing,
        "checks": checks,
    });
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}
