//! `GET /api/v1/routes`: every content-based route (docs/queues.md, "Routes") with its
//! progress per source partition and its lag, through `tinymq_client::Admin::list_routes`,
//! as `tinymq route list` shows them.

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use tinymq_protocol::messages as m;
use utoipa::ToSchema;

use super::{ApiState, Problem};

#[derive(Debug, Serialize, ToSchema)]
pub struct RouteList {
    pub routes: Vec<RouteInfo>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RouteInfo {
    pub name: String,
    /// The topic whose records are matched.
    pub from_topic: String,
    /// Where matching records are copied, exactly once.
    pub to_topic: String,
    /// The filter expression; empty: every record.
    pub filter: String,
    /// Records of the source not yet routed, summed over its partitions; null when unknown.
    pub lag: Option<i64>,
    pub partitions: Vec<RouteProgress>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RouteProgress {
    pub partition: u32,
    /// The next source offset the route will read.
    pub next_offset: i64,
    pub high_watermark: i64,
    /// Records copied into the target since the route started on this partition's leader.
    pub copied: u64,
}

impl From<m::Route> for RouteInfo {
    fn from(r: m::Route) -> RouteInfo {
        RouteInfo {
            name: r.name,
            from_topic: r.from_topic,
            to_topic: r.to_topic,
            filter: r.filter,
            lag: (r.lag >= 0).then_some(r.lag),
            partitions: r
                .partitions
                .into_iter()
                .map(|p| RouteProgress {
                    partition: p.partition,
                    next_offset: p.next_offset,
                    high_watermark: p.high_watermark,
                    copied: p.copied,
                })
                .collect(),
        }
    }
}

/// Every route, sorted by name, with its progress and lag.
#[utoipa::path(
    get,
    path = "/routes",
    tag = "routes",
    responses(
        (status = 200, description = "The routes", body = RouteList),
        (status = "5XX", description = "The cluster did not answer", body = Problem,
         content_type = "application/problem+json"),
    )
)]
pub async fn list_routes(State(state): State<ApiState>) -> Result<Json<RouteList>, Problem> {
    let api = state.client().await?;
    let mut routes: Vec<RouteInfo> = api
        .admin
        .list_routes()
        .await?
        .into_iter()
        .map(RouteInfo::from)
        .collect();
    routes.sort_by(|a, b| a.name.cmp(&b.name));
    for r in &mut routes {
        r.partitions.sort_by_key(|p| p.partition);
    }
    Ok(Json(RouteList { routes }))
}
