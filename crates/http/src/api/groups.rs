//! `/api/v1/groups`: list every group (consumer, Kafka-protocol and share groups, with state,
//! members and total lag), describe one (a consumer group's members, assignments, committed
//! offsets and lag; a share group's share-partition state), reset offsets (only while the
//! group has no members) and delete consumer groups, through `tinymq_client::Admin`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use tinymq_client::share::{describe_share_group, SharePartitionState};
use tinymq_client::{ClientError, ErrorCode, GroupType};
use utoipa::{IntoParams, ToSchema};

use super::problem::{check_group_id, check_topic_name, ApiJson, ApiPath};
use super::{ApiState, Problem, HTTP_GROUPS_LIST_MAX};

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct GroupPath {
    /// The group's id.
    #[param(pattern = "^[A-Za-z0-9._-]{1,249}$", example = "readers")]
    pub id: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct GroupList {
    pub groups: Vec<GroupSummary>,
    /// True when there were more than `http_groups_list_max` (1000) groups: only that many
    /// are listed.
    pub truncated: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct GroupSummary {
    pub group_id: String,
    /// Which protocol its members speak: `consumer` (tinymq's own, or a group that has only
    /// committed offsets), `kafka` (Kafka's group protocol, on a Kafka listener) or `share`
    /// (a share group: queue semantics).
    #[serde(rename = "type")]
    #[schema(pattern = "^(consumer|kafka|share)$")]
    pub group_type: String,
    /// `empty`, `stable`, `rebalancing`, or `unknown` when a broker too old to say listed it.
    /// A share group is `stable` while members hold records.
    pub state: String,
    pub members: u32,
    /// The group's total lag: over the partitions it has committed offsets in, high
    /// watermark − committed offset; for a share group, the records below the high
    /// watermark not yet accepted or dead-lettered. Null when any of those partitions' lag
    /// is not known.
    pub lag: Option<i64>,
}

/// `GET /api/v1/groups/{id}`: a consumer (or Kafka-protocol) group, or a share group.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum GroupDetails {
    Consumer(GroupDescription),
    Share(ShareGroupDescription),
}

#[derive(Debug, Serialize, ToSchema)]
pub struct GroupDescription {
    pub group_id: String,
    /// `consumer` or `kafka`.
    #[serde(rename = "type")]
    #[schema(pattern = "^(consumer|kafka)$")]
    pub group_type: String,
    pub state: String,
    pub generation: u32,
    pub strategy: String,
    pub members: Vec<GroupMember>,
    pub offsets: Vec<GroupOffset>,
}

/// A share group's state, from the leaders of its partitions (as `tinymq group describe
/// G --json` prints it).
#[derive(Debug, Serialize, ToSchema)]
pub struct ShareGroupDescription {
    pub group_id: String,
    /// Always `share`.
    #[serde(rename = "type")]
    #[schema(pattern = "^share$")]
    pub group_type: String,
    /// `stable` while members hold records, else `empty`.
    pub state: String,
    /// The members holding records now.
    pub members: Vec<String>,
    pub partitions: Vec<SharePartitionView>,
}

/// One partition of a share group (the JSON of `tinymq group describe G --json` too).
#[derive(Debug, Serialize, ToSchema)]
pub struct SharePartitionView {
    pub topic: String,
    pub partition: u32,
    /// Below it every record is done (accepted or dead-lettered).
    pub start_offset: i64,
    /// The first offset never handed out.
    pub end_offset: i64,
    pub high_watermark: i64,
    /// Records held under a member's acquisition lock.
    pub acquired: u64,
    /// Released or expired records waiting to be handed out again.
    pub available: u64,
    /// Records at or above the start offset already accepted.
    pub accepted: u64,
    /// Records dead-lettered so far.
    pub dead_lettered: u64,
    /// Records not handed out yet: from the end offset to the high watermark.
    pub not_yet_delivered: i64,
    /// The lowest in-flight records (at most 100).
    pub in_flight: Vec<ShareInFlightView>,
}

/// One in-flight record of a share partition.
#[derive(Debug, Serialize, ToSchema)]
pub struct ShareInFlightView {
    pub offset: i64,
    /// `acquired`, `available` or `dead-letter`.
    pub state: String,
    pub delivery_count: u32,
    /// The member holding it; null when none does.
    pub member_id: Option<String>,
    /// When its acquisition lock ends (ms since the Unix epoch); null when not acquired.
    pub lock_deadline_ms: Option<i64>,
}

impl From<&SharePartitionState> for SharePartitionView {
    fn from(p: &SharePartitionState) -> SharePartitionView {
        SharePartitionView {
            topic: p.topic.clone(),
            partition: p.partition,
            start_offset: p.start_offset,
            end_offset: p.end_offset,
            high_watermark: p.high_watermark,
            acquired: p.acquired,
            available: p.available,
            accepted: p.accepted,
            dead_lettered: p.dead_lettered_total,
            not_yet_delivered: p.high_watermark.saturating_sub(p.end_offset).max(0),
            in_flight: p
                .in_flight
                .iter()
                .map(|r| ShareInFlightView {
                    offset: r.offset,
                    state: r.state.clone(),
                    delivery_count: r.delivery_count,
                    member_id: (!r.member_id.is_empty()).then(|| r.member_id.clone()),
                    lock_deadline_ms: (r.lock_deadline_ms > 0).then_some(r.lock_deadline_ms),
                })
                .collect(),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct GroupMember {
    pub member_id: String,
    pub client_id: String,
    pub assignment: Vec<TopicPartitions>,
    /// The topics it subscribed to.
    pub topics: Vec<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TopicPartitions {
    pub topic: String,
    pub partitions: Vec<u32>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct GroupOffset {
    pub topic: String,
    pub partition: u32,
    /// The next offset the group will consume.
    pub committed_offset: i64,
    /// Null when the partition's leader could not be asked (or the topic is gone).
    pub high_watermark: Option<i64>,
    /// High watermark − committed offset (never below 0); null with `high_watermark`.
    pub lag: Option<i64>,
}

/// Where to move a group's offsets.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ResetTo {
    Position(ResetPosition),
    Offset(OffsetTarget),
    Timestamp(TimestampTarget),
}

#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ResetPosition {
    Earliest,
    Latest,
}

/// An offset; one outside the log is moved to its nearest end.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OffsetTarget {
    #[schema(minimum = 0)]
    pub offset: i64,
}

/// The first record at or after this time (ms since the Unix epoch); none: the log's end.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TimestampTarget {
    #[schema(minimum = 0)]
    pub timestamp_ms: i64,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResetOffsets {
    #[schema(pattern = "^[A-Za-z0-9._-]{1,249}$", example = "orders")]
    pub topic: String,
    pub to: ResetTo,
    /// Absent: every partition of the topic.
    #[schema(min_items = 1)]
    pub partitions: Option<Vec<u32>>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ResetResult {
    pub group_id: String,
    pub topic: String,
    pub offsets: Vec<PartitionOffset>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PartitionOffset {
    pub partition: u32,
    pub offset: i64,
}

/// Groups `GET /api/v1/groups` describes at once (each is a request to its coordinator).
const GROUPS_DESCRIBED_AT_ONCE: usize = 16;

/// Every group with its type, state, member count and total lag.
#[utoipa::path(
    get,
    path = "/groups",
    tag = "groups",
    responses(
        (status = 200, description = "The groups", body = GroupList),
        (status = "5XX", description = "The cluster did not answer", body = Problem,
         content_type = "application/problem+json"),
    )
)]
pub async fn list_groups(State(state): State<ApiState>) -> Result<Json<GroupList>, Problem> {
    let api = state.client().await?;
    let mut listed = api.admin.list_groups_detailed().await?;
    let truncated = listed.len() > HTTP_GROUPS_LIST_MAX;
    listed.truncate(HTTP_GROUPS_LIST_MAX);
    // The lag of each: requests to its coordinator or partition leaders, at most
    // GROUPS_DESCRIBED_AT_ONCE groups at a time. A lag that cannot be had is null.
    let permits = Arc::new(tokio::sync::Semaphore::new(GROUPS_DESCRIBED_AT_ONCE));
    let mut asks = tokio::task::JoinSet::new();
    for g in listed {
        let admin = api.admin.clone();
        let permits = permits.clone();
        asks.spawn(async move {
            let _permit = permits.acquire_owned().await;
            let lag = admin
                .group_lag(&g.group_id, g.group_type)
                .await
                .ok()
                .flatten();
            GroupSummary {
                group_id: g.group_id,
                group_type: g.group_type.name().to_string(),
                state: g.state,
                members: g.members,
                lag,
            }
        });
    }
    let mut groups = Vec::new();
    while let Some(joined) = asks.join_next().await {
        if let Ok(summary) = joined {
            groups.push(summary);
        }
    }
    groups.sort_by(|a, b| (&a.group_id, &a.group_type).cmp(&(&b.group_id, &b.group_type)));
    Ok(Json(GroupList { groups, truncated }))
}

/// A consumer group's members and assignments, committed offsets and lag per partition; or
/// a share group's share-partition state (a share group is looked for first).
#[utoipa::path(
    get,
    path = "/groups/{id}",
    tag = "groups",
    params(GroupPath),
    responses(
        (status = 200, description = "The group", body = GroupDetails),
        (status = 400, description = "Invalid group id", body = Problem,
         content_type = "application/problem+json"),
        (status = 404, description = "No such group (GROUP_ID_NOT_FOUND)", body = Problem,
         content_type = "application/problem+json"),
        (status = "5XX", description = "The cluster did not answer", body = Problem,
         content_type = "application/problem+json"),
    )
)]
pub async fn describe_group(
    State(state): State<ApiState>,
    ApiPath(path): ApiPath<GroupPath>,
) -> Result<Json<GroupDetails>, Problem> {
    check_group_id(&path.id)?;
    let api = state.client().await?;
    let shared = describe_share_group(api.config.clone(), &path.id).await?;
    if shared.exists() {
        return Ok(Json(GroupDetails::Share(ShareGroupDescription {
            group_id: shared.group_id,
            group_type: GroupType::Share.name().to_string(),
            state: if shared.member_ids.is_empty() {
                "empty"
            } else {
                "stable"
            }
            .to_string(),
            members: shared.member_ids,
            partitions: shared
                .partitions
                .iter()
                .map(SharePartitionView::from)
                .collect(),
        })));
    }
    let d = api.admin.describe_group(&path.id).await?;
    // Kafka-protocol groups are told apart by the listing (a failed listing: "consumer").
    let is_kafka = api.admin.list_groups_detailed().await.is_ok_and(|listed| {
        listed
            .iter()
            .any(|g| g.group_id == path.id && g.group_type == GroupType::Kafka)
    });
    let group_type = if is_kafka {
        GroupType::Kafka
    } else {
        GroupType::Consumer
    };
    // One description per topic gives every partition's high watermark from its leader.
    let topics: BTreeSet<&str> = d.offsets.iter().map(|o| o.topic.as_str()).collect();
    let mut watermarks: BTreeMap<(String, u32), i64> = BTreeMap::new();
    for topic in topics {
        if let Ok(t) = api.admin.describe_topic(topic).await {
            for p in t.partitions.iter().filter(|p| p.high_watermark >= 0) {
                watermarks.insert((topic.to_string(), p.partition), p.high_watermark);
            }
        }
    }
    let offsets = d
        .offsets
        .iter()
        .map(|o| {
            let hw = watermarks.get(&(o.topic.clone(), o.partition)).copied();
            GroupOffset {
                topic: o.topic.clone(),
                partition: o.partition,
                committed_offset: o.offset,
                high_watermark: hw,
                lag: hw.map(|hw| hw.saturating_sub(o.offset).max(0)),
            }
        })
        .collect();
    let members = d
        .members
        .into_iter()
        .map(|m| GroupMember {
            member_id: m.member_id,
            client_id: m.client_id,
            assignment: m
                .assignment
                .into_iter()
                .map(|a| TopicPartitions {
                    topic: a.topic,
                    partitions: a.partitions,
                })
                .collect(),
            topics: m.topics,
        })
        .collect();
    Ok(Json(GroupDetails::Consumer(GroupDescription {
        group_id: d.group_id,
        group_type: group_type.name().to_string(),
        state: d.state,
        generation: d.generation,
        strategy: d.strategy,
        members,
        offsets,
    })))
}

/// Moves a group's committed offsets of one topic; refused while the group has members.
#[utoipa::path(
    post,
    path = "/groups/{id}/offsets",
    tag = "groups",
    params(GroupPath),
    request_body = ResetOffsets,
    responses(
        (status = 200, description = "The offsets now committed", body = ResetResult),
        (status = 400, description = "Bad body", body = Problem,
         content_type = "application/problem+json"),
        (status = 404, description = "No such topic or partition", body = Problem,
         content_type = "application/problem+json"),
        (status = 409, description = "The group has members (GROUP_NOT_EMPTY)", body = Problem,
         content_type = "application/problem+json"),
        (status = "4XX", description = "Other bad input", body = Problem,
         content_type = "application/problem+json"),
        (status = "5XX", description = "The cluster did not answer", body = Problem,
         content_type = "application/problem+json"),
    )
)]
pub async fn reset_offsets(
    State(state): State<ApiState>,
    ApiPath(path): ApiPath<GroupPath>,
    ApiJson(body): ApiJson<ResetOffsets>,
) -> Result<Json<ResetResult>, Problem> {
    check_group_id(&path.id)?;
    check_topic_name(&body.topic)?;
    check_reset_target(&body.to)?;
    let api = state.client().await?;
    match api.admin.describe_group(&path.id).await {
        Ok(d) if !d.members.is_empty() => {
            return Err(Problem::from_code(
                ErrorCode::GROUP_NOT_EMPTY,
                format!(
                    "group {} has {} member(s): stop its consumers before resetting offsets",
                    path.id,
                    d.members.len()
                ),
            ));
        }
        Ok(_) => {}
        // A group never seen gets its first offsets.
        Err(e) if e.code() == Some(ErrorCode::GROUP_ID_NOT_FOUND) => {}
        Err(e) => return Err(e.into()),
    }
    let count = api.cluster.refresh(&body.topic).await?.partition_count();
    let partitions: BTreeSet<u32> = match body.partitions {
        Some(list) if list.is_empty() => {
            return Err(Problem::invalid(
                "partitions, when given, must name at least one",
            ));
        }
        Some(list) => list.into_iter().collect(),
        None => (0..count).collect(),
    };
    if let Some(p) = partitions.iter().find(|p| **p >= count) {
        return Err(Problem::from_code(
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            format!("topic {} has no partition {p}", body.topic),
        ));
    }
    let mut offsets = Vec::with_capacity(partitions.len());
    for p in partitions {
        offsets.push(PartitionOffset {
            partition: p,
            offset: target(&api, &body.topic, p, &body.to).await?,
        });
    }
    let commit = offsets
        .iter()
        .map(|o| (body.topic.clone(), o.partition, o.offset))
        .collect();
    api.admin.commit_group_offsets(&path.id, commit).await?;
    Ok(Json(ResetResult {
        group_id: path.id,
        topic: body.topic,
        offsets,
    }))
}

/// Refuses the negative offsets and times the schema excludes: the log's
/// sentinels (-1 latest, -2 earliest) are not a way in through this route.
fn check_reset_target(to: &ResetTo) -> Result<(), Problem> {
    match to {
        ResetTo::Offset(OffsetTarget { offset }) if *offset < 0 => {
            Err(Problem::invalid("to.offset must be 0 or more"))
        }
        ResetTo::Timestamp(TimestampTarget { timestamp_ms }) if *timestamp_ms < 0 => {
            Err(Problem::invalid("to.timestamp_ms must be 0 or more"))
        }
        _ => Ok(()),
    }
}

/// The offset `to` names in one partition.
async fn target(
    api: &super::ApiClient,
    topic: &str,
    partition: u32,
    to: &ResetTo,
) -> Result<i64, ClientError> {
    let earliest = || api.admin.list_offset(topic, partition, -2);
    let latest = || api.admin.list_offset(topic, partition, -1);
    Ok(match to {
        ResetTo::Position(ResetPosition::Earliest) => earliest().await?,
        ResetTo::Position(ResetPosition::Latest) => latest().await?,
        ResetTo::Offset(OffsetTarget { offset }) => {
            let (low, high) = (earliest().await?, latest().await?);
            (*offset).clamp(low, high.max(low))
        }
        ResetTo::Timestamp(TimestampTarget { timestamp_ms }) => {
            match api
                .admin
                .list_offset(topic, partition, *timestamp_ms)
                .await?
            {
                -1 => latest().await?,
                found => found,
            }
        }
    })
}

/// Deletes a group without members, with its committed offsets.
#[utoipa::path(
    delete,
    path = "/groups/{id}",
    tag = "groups",
    params(GroupPath),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "Invalid group id", body = Problem,
         content_type = "application/problem+json"),
        (status = 404, description = "No such group (GROUP_ID_NOT_FOUND)", body = Problem,
         content_type = "application/problem+json"),
        (status = 409, description = "The group has members (GROUP_NOT_EMPTY)", body = Problem,
         content_type = "application/problem+json"),
        (status = "5XX", description = "The cluster did not answer", body = Problem,
         content_type = "application/problem+json"),
    )
)]
pub async fn delete_group(
    State(state): State<ApiState>,
    ApiPath(path): ApiPath<GroupPath>,
) -> Result<StatusCode, Problem> {
    check_group_id(&path.id)?;
    state.client().await?.admin.delete_group(&path.id).await?;
    Ok(StatusCode::NO_CONTENT)
}
