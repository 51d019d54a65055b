//! `/api/v1/topics`: list, create, describe, alter (grow partitions, change settings) and
//! delete topics,
//! through `tinymq_client::Admin`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use tinymq_client::{ErrorCode, TopicConfig};
use tinymq_protocol::messages as m;
use utoipa::{IntoParams, ToSchema};

use super::problem::{check_name, ApiJson, ApiPath};
use super::{ApiState, Problem};

#[derive(Debug, Serialize, ToSchema)]
pub struct TopicList {
    pub topics: Vec<TopicSummary>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TopicSummary {
    pub name: String,
    pub partitions: u32,
    pub replication_factor: u32,
}

/// A topic's settings as the cluster holds them.
#[derive(Debug, Serialize, ToSchema)]
pub struct TopicSettings {
    pub partitions: u32,
    pub replication_factor: u32,
    /// -1: kept forever.
    pub retention_ms: i64,
    /// Per partition; -1: no size limit.
    pub retention_bytes: i64,
    pub segment_bytes: u64,
    /// `always`, `interval:<ms>` or `os`; empty: the server's default.
    pub flush: String,
    pub message_bytes_max: u32,
    /// 0: segments never roll by age.
    pub segment_ms: i64,
    pub message_timestamp_after_max_ms: i64,
    pub message_timestamp_before_max_ms: i64,
    pub min_insync_replicas: u32,
    pub unclean_leader_election: bool,
}

impl From<TopicConfig> for TopicSettings {
    fn from(c: TopicConfig) -> TopicSettings {
        TopicSettings {
            partitions: c.partitions,
            replication_factor: c.replication_factor,
            retention_ms: c.retention_ms,
            retention_bytes: c.retention_bytes,
            segment_bytes: c.segment_bytes,
            flush: c.flush,
            message_bytes_max: c.message_bytes_max,
            segment_ms: c.segment_ms,
            message_timestamp_after_max_ms: c.message_timestamp_after_max_ms,
            message_timestamp_before_max_ms: c.message_timestamp_before_max_ms,
            min_insync_replicas: c.min_insync_replicas,
            unclean_leader_election: c.unclean_leader_election,
        }
    }
}

/// Settings given at creation; an absent one takes the server's default.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TopicSettingsInput {
    pub retention_ms: Option<i64>,
    pub retention_bytes: Option<i64>,
    pub segment_bytes: Option<u64>,
    pub flush: Option<String>,
    pub message_bytes_max: Option<u32>,
    pub segment_ms: Option<i64>,
    pub message_timestamp_after_max_ms: Option<i64>,
    pub message_timestamp_before_max_ms: Option<i64>,
    pub min_insync_replicas: Option<u32>,
    pub unclean_leader_election: Option<bool>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTopic {
    #[schema(pattern = "^[A-Za-z0-9._-]{1,249}$")]
    pub name: String,
    /// Absent: the server's default.
    #[schema(minimum = 1)]
    pub partitions: Option<u32>,
    /// Absent: the server's default.
    #[schema(minimum = 1)]
    pub replication_factor: Option<u32>,
    pub config: Option<TopicSettingsInput>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AlterTopic {
    /// The new partition count: more than the topic has (or as many: nothing changes).
    #[schema(minimum = 1)]
    pub partitions: Option<u32>,
    /// Settings to change, by the names `config` shows (`retention_ms`, `message_bytes_max`,
    /// …): a value sets one, `null` removes it so the brokers' default applies again. They take
    /// effect without a restart. An unknown name, a bad value, or a `flush` change is refused
    /// with 400 `INVALID_CONFIG`.
    pub config: Option<std::collections::BTreeMap<String, SettingValue>>,
}

/// One setting's new value: a number, a boolean or text; `null` removes the setting.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum SettingValue {
    Integer(i64),
    Boolean(bool),
    Text(String),
    Remove(()),
}

/// Written by hand: the derived schema of the `null` variant would match any value.
impl utoipa::PartialSchema for SettingValue {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{
            KnownFormat, ObjectBuilder, OneOfBuilder, SchemaFormat, Type,
        };
        let of = |kind: Type| ObjectBuilder::new().schema_type(kind);
        OneOfBuilder::new()
            .item(of(Type::Integer).format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64))))
            .item(of(Type::Boolean))
            .item(of(Type::String))
            .item(of(Type::Null))
            .description(Some(
                "One setting's new value: a number, a boolean or text; `null` removes the setting.",
            ))
            .into()
    }
}

impl ToSchema for SettingValue {}

impl SettingValue {
    /// The text the cluster metadata stores.
    fn to_text(&self) -> Option<String> {
        match self {
            SettingValue::Integer(n) => Some(n.to_string()),
            SettingValue::Boolean(b) => Some(b.to_string()),
            SettingValue::Text(t) => Some(t.clone()),
            SettingValue::Remove(()) => None,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TopicDescription {
    pub name: String,
    pub config: TopicSettings,
    pub partitions: Vec<PartitionInfo>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PartitionInfo {
    pub partition: u32,
    /// Broker id of the leader; null while the partition is offline.
    pub leader: Option<u32>,
    pub leader_epoch: u32,
    pub replicas: Vec<u32>,
    pub isr: Vec<u32>,
    /// -1 when the leader could not be asked.
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    pub high_watermark: i64,
    pub size_bytes: u64,
    /// Replicas joining and leaving while the partition is being reassigned.
    pub adding_replicas: Vec<u32>,
    pub removing_replicas: Vec<u32>,
}

impl From<m::PartitionState> for PartitionInfo {
    fn from(p: m::PartitionState) -> PartitionInfo {
        PartitionInfo {
            partition: p.partition,
            leader: (p.leader != 0).then_some(p.leader),
            leader_epoch: p.leader_epoch,
            replicas: p.replicas,
            isr: p.isr,
            log_start_offset: p.log_start_offset,
            log_end_offset: p.log_end_offset,
            high_watermark: p.high_watermark,
            size_bytes: p.size_bytes,
            adding_replicas: p.adding_replicas,
            removing_replicas: p.removing_replicas,
        }
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct TopicPath {
    /// The topic's name.
    #[param(pattern = "^[A-Za-z0-9._-]{1,249}$", example = "orders")]
    pub name: String,
}

/// Every topic with its partition count and replication factor.
#[utoipa::path(
    get,
    path = "/topics",
    tag = "topics",
    responses(
        (status = 200, description = "The topics", body = TopicList),
        (status = "5XX", description = "The cluster did not answer", body = Problem,
         content_type = "application/problem+json"),
    )
)]
pub async fn list_topics(State(state): State<ApiState>) -> Result<Json<TopicList>, Problem> {
    let api = state.client().await?;
    let names = api.admin.list_topics().await?;
    if names.is_empty() {
        return Ok(Json(TopicList { topics: Vec::new() }));
    }
    let routes = api
        .cluster
        .request(&m::MetadataRequest {
            topics: names.clone(),
        })
        .await?;
    let mut topics: Vec<TopicSummary> = routes
        .topics
        .into_iter()
        .filter(|t| t.error.as_ref().is_none_or(|e| e.code == 0))
        .map(|t| TopicSummary {
            replication_factor: t.partitions.first().map_or(0, |p| p.replicas.len() as u32),
            partitions: t.partitions.len() as u32,
            name: t.name,
        })
        .collect();
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Json(TopicList { topics }))
}

/// Creates a topic; answers its description.
#[utoipa::path(
    post,
    path = "/topics",
    tag = "topics",
    request_body = CreateTopic,
    responses(
        (status = 201, description = "Created; `partitions` is empty when the caller may \
         create the topic but not DESCRIBE it", body = TopicDescription),
        (status = 400, description = "Invalid name, partition count or settings", body = Problem,
         content_type = "application/problem+json"),
        (status = 409, description = "The topic exists (TOPIC_ALREADY_EXISTS)", body = Problem,
         content_type = "application/problem+json"),
        (status = "4XX", description = "Other bad input", body = Problem,
         content_type = "application/problem+json"),
        (status = "5XX", description = "The cluster did not answer", body = Problem,
         content_type = "application/problem+json"),
    )
)]
pub async fn create_topic(
    State(state): State<ApiState>,
    ApiJson(body): ApiJson<CreateTopic>,
) -> Result<(StatusCode, Json<TopicDescription>), Problem> {
    check_name("topic name", &body.name)?;
    let api = state.client().await?;
    let settings = body.config.unwrap_or_default();
    let config = TopicConfig {
        partitions: nonzero(body.partitions, "partitions")?,
        replication_factor: nonzero(body.replication_factor, "replication_factor")?,
        retention_ms: settings.retention_ms.unwrap_or(0),
        retention_bytes: settings.retention_bytes.unwrap_or(0),
        segment_bytes: settings.segment_bytes.unwrap_or(0),
        flush: settings.flush.unwrap_or_default(),
        message_bytes_max: settings.message_bytes_max.unwrap_or(0),
        segment_ms: settings.segment_ms.unwrap_or(0),
        message_timestamp_after_max_ms: settings.message_timestamp_after_max_ms.unwrap_or(0),
        message_timestamp_before_max_ms: settings.message_timestamp_before_max_ms.unwrap_or(0),
        min_insync_replicas: settings.min_insync_replicas.unwrap_or(0),
        unclean_leader_election: settings.unclean_leader_election.unwrap_or(false),
    };
    let created = api
        .admin
        .create_topic(&body.name, config)
        .await
        .map_err(refused_placement)?;
    let described = match describe(&state, &body.name).await {
        // CREATE without DESCRIBE: the topic exists, say so with the settings it got.
        Err(p) if p.code == ErrorCode::AUTHORIZATION_FAILED.name() => TopicDescription {
            name: body.name,
            config: created.into(),
            partitions: Vec::new(),
        },
        other => other?,
    };
    Ok((StatusCode::CREATED, Json(described)))
}

/// Zero would silently mean "the server's default": an explicit 0 is refused instead.
fn nonzero(value: Option<u32>, field: &str) -> Result<u32, Problem> {
    match value {
        Some(0) => Err(Problem::from_code(
            ErrorCode::INVALID_PARTITIONS,
            format!("{field} must be at least 1 (or absent for the server's default)"),
        )),
        Some(n) => Ok(n),
        None => Ok(0),
    }
}

/// More replicas than live brokers is the request's fault when creating or growing a topic,
/// not the cluster's state: 400 rather than 503.
fn refused_placement(e: tinymq_client::ClientError) -> Problem {
    let mut problem = Problem::from(e);
    if problem.code == ErrorCode::NOT_ENOUGH_REPLICAS.name() {
        problem.status = StatusCode::BAD_REQUEST.as_u16();
        problem.title = "Bad Request".into();
    }
    problem
}

async fn describe(state: &ApiState, name: &str) -> Result<TopicDescription, Problem> {
    let d = state.client().await?.admin.describe_topic(name).await?;
    Ok(TopicDescription {
        name: d.name,
        config: d.config.unwrap_or_default().into(),
        partitions: d.partitions.into_iter().map(PartitionInfo::from).collect(),
    })
}

/// A topic's settings and, per partition, its leader, replicas, ISR, offsets and size.
#[utoipa::path(
    get,
    path = "/topics/{name}",
    tag = "topics",
    params(TopicPath),
    responses(
        (status = 200, description = "The topic", body = TopicDescription),
        (status = 400, description = "Invalid topic name", body = Problem,
         content_type = "application/problem+json"),
        (status = 404, description = "No such topic (UNKNOWN_TOPIC_OR_PARTITION)", body = Problem,
         content_type = "application/problem+json"),
        (status = "5XX", description = "The cluster did not answer", body = Problem,
         content_type = "application/problem+json"),
    )
)]
pub async fn describe_topic(
    State(state): State<ApiState>,
    ApiPath(path): ApiPath<TopicPath>,
) -> Result<Json<TopicDescription>, Problem> {
    check_name("topic name", &path.name)?;
    Ok(Json(describe(&state, &path.name).await?))
}

/// Grows a topic's partitions and/or changes its settings; answers its description.
#[utoipa::path(
    patch,
    path = "/topics/{name}",
    tag = "topics",
    params(TopicPath),
    request_body = AlterTopic,
    responses(
        (status = 200, description = "The topic as it is now", body = TopicDescription),
        (status = 400, description = "Fewer partitions than it has, a bad setting, or bad input",
         body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such topic", body = Problem,
         content_type = "application/problem+json"),
        (status = "4XX", description = "Other bad input", body = Problem,
         content_type = "application/problem+json"),
        (status = "5XX", description = "The cluster did not answer", body = Problem,
         content_type = "application/problem+json"),
    )
)]
pub async fn alter_topic(
    State(state): State<ApiState>,
    ApiPath(path): ApiPath<TopicPath>,
    ApiJson(body): ApiJson<AlterTopic>,
) -> Result<Json<TopicDescription>, Problem> {
    check_name("topic name", &path.name)?;
    let now = describe(&state, &path.name).await?;
    let grow = body
        .partitions
        .filter(|p| *p as usize != now.partitions.len());
    let settings = body.config.unwrap_or_default();
    if grow.is_none() && settings.is_empty() {
        return Ok(Json(now));
    }
    let client = state.client().await?;
    if !settings.is_empty() {
        let (mut set, mut unset) = (Vec::new(), Vec::new());
        for (key, value) in settings {
            match value.to_text() {
                Some(value) => set.push((key, value)),
                None => unset.push(key),
            }
        }
        // Before growing: a refused setting leaves the topic as it was.
        client
            .admin
            .alter_topic_config(&path.name, &set, &unset)
            .await?;
    }
    if let Some(partitions) = grow {
        client
            .admin
            .alter_partitions(&path.name, partitions)
            .await
            .map_err(refused_placement)?;
    }
    Ok(Json(describe(&state, &path.name).await?))
}

/// Deletes a topic and its data.
#[utoipa::path(
    delete,
    path = "/topics/{name}",
    tag = "topics",
    params(TopicPath),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "Invalid topic name", body = Problem,
         content_type = "application/problem+json"),
        (status = 404, description = "No such topic", body = Problem,
         content_type = "application/problem+json"),
        (status = "5XX", description = "The cluster did not answer", body = Problem,
         content_type = "application/problem+json"),
    )
)]
pub async fn delete_topic(
    State(state): State<ApiState>,
    ApiPath(path): ApiPath<TopicPath>,
) -> Result<StatusCode, Problem> {
    check_name("topic name", &path.name)?;
    state.client().await?.admin.delete_topic(&path.name).await?;
    Ok(StatusCode::NO_CONTENT)
}
