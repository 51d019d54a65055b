//! `tinymq group list`: every group of the cluster — consumer groups, Kafka-protocol groups
//! and share groups — with its type, state, members and total lag (`-` in text, `null` in
//! JSON, when a partition's lag is not known; see `Admin::group_lag`).

use std::sync::Arc;

use tinymq_client::{Admin, ListedGroup};

use crate::outln;

/// Groups whose lag is asked for at once (each is a few requests to coordinators and
/// partition leaders).
const GROUP_LAGS_AT_ONCE: usize = 16;

pub async fn run(admin: Admin, json: bool) -> anyhow::Result<()> {
    let listed = admin.list_groups_detailed().await?;
    let rows = with_lags(&admin, listed).await;
    if json {
        let groups: Vec<_> = rows
            .iter()
            .map(|(g, lag)| {
                serde_json::json!({
                    "group_id": g.group_id, "type": g.group_type.name(), "state": g.state,
                    "members": g.members, "lag": lag,
                })
            })
            .collect();
        let out = serde_json::json!({ "groups": groups });
        return outln!("{}", serde_json::to_string_pretty(&out)?);
    }
    outln!(
        "{:<30} {:<9} {:<12} {:>8} {:>12}",
        "group",
        "type",
        "state",
        "members",
        "lag"
    )?;
    for (g, lag) in &rows {
        outln!(
            "{:<30} {:<9} {:<12} {:>8} {:>12}",
            g.group_id,
            g.group_type.name(),
            g.state,
            g.members,
            crate::topic::or_dash(*lag)
        )?;
    }
    Ok(())
}

/// Each group with its lag (`None` when it is not known or could not be asked), in the
/// listing's order.
async fn with_lags(admin: &Admin, listed: Vec<ListedGroup>) -> Vec<(ListedGroup, Option<i64>)> {
    let permits = Arc::new(tokio::sync::Semaphore::new(GROUP_LAGS_AT_ONCE));
    let mut asks = tokio::task::JoinSet::new();
    for (index, g) in listed.into_iter().enumerate() {
        let (admin, permits) = (admin.clone(), permits.clone());
        asks.spawn(async move {
            let _permit = permits.acquire_owned().await;
            let lag = match admin.group_lag(&g.group_id, g.group_type).await {
                Ok(lag) => lag,
                Err(e) => {
                    eprintln!("group {}: lag unknown: {e}", g.group_id);
                    None
                }
            };
            (index, g, lag)
        });
    }
    let mut rows = Vec::new();
    while let Some(joined) = asks.join_next().await {
        if let Ok(row) = joined {
            rows.push(row);
        }
    }
    rows.sort_by_key(|(index, _, _)| *index);
    rows.into_iter().map(|(_, g, lag)| (g, lag)).collect()
}
