//! The route operations: CreateRoute and DeleteRoute go to the MetaServer as commands (it
//! checks them; see `tinymq_meta::command::routes`) and are answered once this broker's image
//! shows them; ListRoutes answers from the image with each source partition's progress (the
//! runner's here, else the committed one) and high watermark, asked of the cluster through
//! the broker's internal admin client.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tinymq_meta::image::RouteRecord;
use tinymq_meta::Command;
use tinymq_protocol::messages as m;

use crate::route::progress::progress_group;
use crate::state::BrokerState;

/// How long a route change waits to be visible here before answering anyway.
const VISIBLE_WAIT: Duration = Duration::from_secs(5);
/// How long ListRoutes waits for one route's progress or high watermarks; what does not come
/// in time is unknown (-1) in the answer.
const LIST_WAIT: Duration = Duration::from_secs(5);
/// How long after a route is deleted its progress group is deleted: its runners, which learn
/// of the deletion from their brokers' images, have stopped committing by then.
const GROUP_DELETE_DELAY: Duration = Duration::from_secs(3);

pub async fn create_route(
    state: Arc<BrokerState>,
    request: m::CreateRouteRequest,
) -> m::CreateRouteResponse {
    let command = Command::CreateRoute {
        name: request.name.clone(),
        from: request.from_topic.clone(),
        to: request.to_topic.clone(),
        filter: request.filter.clone(),
    };
    if let Err(error) = state.cluster.write(command).await {
        return m::CreateRouteResponse { error: Some(error) };
    }
    let name = request.name.clone();
    state
        .cluster
        .wait_until(VISIBLE_WAIT, |image| image.routes.contains_key(&name))
        .await;
    tracing::info!(route = %request.name, from = %request.from_topic, to = %request.to_topic,
        filter = %request.filter, "route created");
    m::CreateRouteResponse { error: None }
}

pub async fn delete_route(
    state: Arc<BrokerState>,
    request: m::DeleteRouteRequest,
) -> m::DeleteRouteResponse {
    let existing = state.cluster.image().routes.get(&request.name).cloned();
    let command = Command::DeleteRoute {
        name: request.name.clone(),
    };
    if let Err(error) = state.cluster.write(command).await {
        return m::DeleteRouteResponse { error: Some(error) };
    }
    let name = request.name.clone();
    state
        .cluster
        .wait_until(VISIBLE_WAIT, |image| !image.routes.contains_key(&name))
        .await;
    tracing::info!(route = %request.name, "route deleted");
    if let Some(route) = existing {
        let group = progress_group(route.id, &request.name);
        tokio::spawn(delete_progress(state, group));
    }
    m::DeleteRouteResponse { error: None }
}

/// Deletes a deleted route's progress group (best effort: a group left behind holds a few
/// committed offsets and expires like any group without members).
async fn delete_progress(state: Arc<BrokerState>, group: String) {
    tokio::time::sleep(GROUP_DELETE_DELAY).await;
    let deleted = match state.internal.admin() {
        Ok(admin) => admin.delete_group(&group).await,
        Err(e) => Err(e),
    };
    if let Err(e) = deleted {
        tracing::debug!(%group, error = %e, "the progress group of a deleted route stays");
    }
}

pub async fn list_routes(
    state: Arc<BrokerState>,
    _request: m::ListRoutesRequest,
) -> m::ListRoutesResponse {
    // All routes at once, under one deadline: an unreachable coordinator or leader costs
    // one LIST_WAIT, not one per route and question.
    let deadline = tokio::time::Instant::now() + LIST_WAIT;
    let routes = state.cluster.image().routes.clone();
    let mut asked = tokio::task::JoinSet::new();
    for (index, (name, route)) in routes.into_iter().enumerate() {
        let state = state.clone();
        asked.spawn(async move { (index, describe(&state, name, &route, deadline).await) });
    }
    let mut out = Vec::with_capacity(asked.len());
    while let Some(joined) = asked.join_next().await {
        match joined {
            Ok(described) => out.push(described),
            Err(e) => tracing::warn!(error = %e, "describing a route failed"),
        }
    }
    // In name order, as the image holds them.
    out.sort_unstable_by_key(|(index, _)| *index);
    let out = out.into_iter().map(|(_, route)| route).collect();
    m::ListRoutesResponse {
        error: None,
        routes: out,
    }
}

/// A route with its progress per source partition and its lag (-1 if any part is unknown).
async fn describe(
    state: &BrokerState,
    name: String,
    route: &RouteRecord,
    deadline: tokio::time::Instant,
) -> m::Route {
    let partitions = state.partition_count(&route.from).unwrap_or(0);
    let admin = state.internal.admin().ok();
    let group = progress_group(route.id, &name);
    let (committed, described) = match &admin {
        Some(admin) => tokio::join!(
            within(deadline, admin.committed_offsets(&group)),
            within(deadline, admin.describe_topic(&route.from)),
        ),
        None => (None, None),
    };
    let committed: HashMap<u32, i64> = committed
        .unwrap_or_default()
        .into_iter()
        .filter(|o| o.topic == route.from)
        .map(|o| (o.partition, o.offset))
        .collect();
    let mut lag = 0i64;
    let mut progress = Vec::with_capacity(partitions as usize);
    for partition in 0..partitions {
        let offsets = described
            .as_ref()
            .and_then(|d| d.partitions.get(partition as usize));
        let high_watermark = offsets.map_or(-1, |p| p.high_watermark);
        let (next_offset, copied) = match state.routes.progress(&name, route.id, partition) {
            Some(here) => here,
            // Nothing committed yet: the route starts at the partition's first offset.
            None => match committed.get(&partition) {
                Some(offset) => (*offset, 0),
                None => (offsets.map_or(-1, |p| p.log_start_offset), 0),
            },
        };
        lag = match (lag, next_offset, high_watermark) {
            (l, n, h) if l >= 0 && n >= 0 && h >= 0 => l.saturating_add((h - n).max(0)),
            _ => -1,
        };
        progress.push(m::RoutePartitionProgress {
            partition,
            next_offset,
            high_watermark,
            copied,
        });
    }
    m::Route {
        name,
        from_topic: route.from.clone(),
        to_topic: route.to.clone(),
        filter: route.filter.clone(),
        lag,
        partitions: progress,
    }
}

/// `Some` with the answer if it comes before `deadline` and is not an error.
async fn within<T>(
    deadline: tokio::time::Instant,
    asked: impl std::future::Future<Output = Result<T, tinymq_client::ClientError>>,
) -> Option<T> {
    match tokio::time::timeout_at(deadline, asked).await {
        Ok(Ok(answer)) => Some(answer),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "route progress unknown");
            None
        }
        Err(_) => None,
    }
}
