//! Routes administration on [`crate::Admin`]: create, delete and list content-based routes
//! (docs/queues.md, "Routes"), and the committed-offset access with metadata that the
//! brokers' route runners keep their progress with.

use tinymq_protocol::messages as m;
use tinymq_protocol::ErrorCode;

use crate::admin::Admin;
use crate::error::{check, ClientError};

pub use tinymq_protocol::messages::{Route, RoutePartitionProgress};

impl Admin {
    /// Creates a route copying every record of `from` that matches `filter` (empty: every
    /// record) into `to`, exactly once. If an attempt's answer was lost and a retry finds the
    /// route, it counts as created.
    pub async fn create_route(
        &self,
        name: &str,
        from: &str,
        to: &str,
        filter: &str,
    ) -> Result<(), ClientError> {
        let request = &m::CreateRouteRequest {
            name: name.into(),
            from_topic: from.into(),
            to_topic: to.into(),
            filter: filter.into(),
        };
        self.retry_change(
            &format!("create route {name}"),
            ErrorCode::ROUTE_ALREADY_EXISTS,
            || async move { check(self.cluster.request(request).await?.error.as_ref()) },
        )
        .await
        .map(drop)
    }

    /// Deletes a route; its runners stop. Records already copied stay in the target.
    pub async fn delete_route(&self, name: &str) -> Result<(), ClientError> {
        let request = &m::DeleteRouteRequest { name: name.into() };
        self.retry_change(
            &format!("delete route {name}"),
            ErrorCode::ROUTE_NOT_FOUND,
            || async move { check(self.cluster.request(request).await?.error.as_ref()) },
        )
        .await
        .map(drop)
    }

    /// Every route with its progress per source partition and its lag (-1 where unknown).
    pub async fn list_routes(&self) -> Result<Vec<Route>, ClientError> {
        self.retry("list routes", || async move {
            let response = self.cluster.request(&m::ListRoutesRequest {}).await?;
            check(response.error.as_ref())?;
            Ok(response.routes)
        })
        .await
    }

    /// Commits offsets with their metadata strings for a group without members (an
    /// administrative commit, like [`Admin::commit_group_offsets`], which stores "reset").
    /// Route runners keep their progress this way.
    pub async fn commit_offsets_with_metadata(
        &self,
        group: &str,
        offsets: Vec<m::CommittedOffset>,
    ) -> Result<(), ClientError> {
        let request = &m::OffsetCommitRequest {
            group_id: group.into(),
            member_id: String::new(),
            generation: 0,
            offsets,
        };
        self.retry(&format!("commit offsets of group {group}"), || async move {
            let response = self.to_coordinator(group, request).await?;
            check(response.error.as_ref())?;
            match response.offsets.iter().find_map(|o| o.error.as_ref()) {
                Some(e) => check(Some(e)),
                None => Ok(()),
            }
        })
        .await
    }

    /// A group's committed offsets with their metadata (none for an unknown group).
    pub async fn committed_offsets(
        &self,
        group: &str,
    ) -> Result<Vec<m::CommittedOffset>, ClientError> {
        let request = &m::OffsetFetchRequest {
            require_stable: false,
            group_id: group.into(),
            partitions: vec![],
        };
        self.retry(&format!("fetch offsets of group {group}"), || async move {
            let response = self.to_coordinator(group, request).await?;
            check(response.error.as_ref())?;
            Ok(response
                .offsets
                .into_iter()
                .filter(|o| o.offset >= 0 && o.error.is_none())
                .collect())
        })
        .await
    }
}
