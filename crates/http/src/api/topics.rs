//! `/api/v1/topics`: list, create, describe, alter (grow partitions, change settings) and
//! delete topics,
//! through `tinymq_client::Admin`. The share-group settings (`max_delivery_attempts`,
//! `dead_letter_topic`) are not in the native TopicConfig: they are read from the metadata
//! image, by the same rules the brokers apply.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use tinymq_client::{ErrorCode, TopicConfig};
use tinymq_protocol::messages as m;
use tinymq_protocol::names::{
    DEAD_LETTER_TOPIC_KEY as DEAD_LETTER_TOPIC, MAX_DELIVERY_ATTEMPTS_KEY as MAX_DELIVERY_ATTEMPTS,
};
use tokio::sync::OnceCell;
use utoipa::{IntoParams, ToSchema};

use super::cluster::ImageTopic;
use super::problem::{check_topic_name, ApiJson, ApiPath};
use super::{ApiState, Problem, META_NODE_ANSWER_WAIT};

#[derive(Debug, Serialize, ToSchema)]
pub struct TopicList {
    pub topics: Vec<TopicSummary>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TopicSummary {
    pub name: String,
    pub partitions: u32,
    pub replication_factor: u32,
    /// Where share groups send this topic's rejected and exhausted records; null when the
    /// caller may not read the cluster metadata (DESCRIBE on the cluster).
    pub dead_letter_topic: Option<String>,
    /// The listed topics whose dead-letter topic this one is (empty: not a dead-letter topic,
    /// or the metadata could not be read).
    pub dead_letter_of: Vec<String>,
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
    /// `delete`, `compact` or `compact,delete`. Null, as the other compaction settings, when
    /// the broker answering does not report them.
    pub cleanup_policy: Option<String>,
    /// Compacted topics: tombstones are kept at least this long after they are cleaned.
    pub delete_retention_ms: Option<i64>,
    /// Compacted topics: records are not compacted before they are this old.
    pub min_compaction_lag_ms: Option<i64>,
    /// Compacted topics: a log is cleaned once its oldest uncleaned record is older than this,
    /// whatever its dirty ratio; -1: no bound.
    pub max_compaction_lag_ms: Option<i64>,
    /// Compacted topics: a log is cleaned once at least this share of it is uncleaned (0 to 1).
    pub min_cleanable_dirty_ratio: Option<f64>,
    /// Share groups: deliveries of a record before it goes to the dead-letter topic (1 to
    /// 100, default 5). Null when the caller may not read the cluster metadata (DESCRIBE on
    /// the cluster).
    pub max_delivery_attempts: Option<u32>,
    /// Share groups: where rejected and exhausted records go (default `<topic>.dlq`). Null
    /// as `max_delivery_attempts`.
    pub dead_letter_topic: Option<String>,
}

impl From<TopicConfig> for TopicSettings {
    fn from(c: TopicConfig) -> TopicSettings {
        // An older broker reports no cleanup policy, and so none of the compaction settings.
        let known = !c.cleanup_policy.is_empty();
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
            delete_retention_ms: c.delete_retention_ms.filter(|_| known),
            min_compaction_lag_ms: known.then_some(c.min_compaction_lag_ms),
            max_compaction_lag_ms: known.then_some(c.max_compaction_lag_ms),
            min_cleanable_dirty_ratio: c.min_cleanable_dirty_ratio.filter(|_| known),
            cleanup_policy: known.then_some(c.cleanup_policy),
            max_delivery_attempts: None,
            dead_letter_topic: None,
        }
    }
}

/// A topic's share-group settings from its stored config, as the brokers read them
/// (`ShareSettings::of`): a value out of range, or a dead-letter topic that is not a valid
/// name or is the topic itself, gives the default.
fn share_settings(name: &str, config: &BTreeMap<String, String>) -> (u32, String) {
    let stored = |key: &str| config.get(key).map(String::as_str);
    (
        tinymq_protocol::names::max_delivery_attempts(stored(MAX_DELIVERY_ATTEMPTS)),
        tinymq_protocol::names::dead_letter_topic(name, stored(DEAD_LETTER_TOPIC)),
    )
}

/// The image's topics as one read found them; None when it could not be read.
type ImageTopics = Option<Arc<BTreeMap<String, ImageTopic>>>;

/// How long one caller's read of the image's topics is reused: the console's overview
/// describes up to 50 topics at once, and each description would read the whole image again.
const IMAGE_TOPICS_FRESH: Duration = Duration::from_secs(1);
/// Callers whose read is kept at once; past it a caller's read is not kept.
const IMAGE_TOPICS_CALLERS_MAX: usize = 64;

/// One read of the image's topics per caller at a time, reused for [`IMAGE_TOPICS_FRESH`]:
/// requests arriving together wait for the same read (a `OnceCell`, so no lock is held while
/// it runs).
#[derive(Default)]
pub(crate) struct ImageTopicsCache {
    reads: Mutex<HashMap<String, (Instant, SharedRead)>>,
}

/// A read that every request of one caller in the same moment waits for.
type SharedRead = Arc<OnceCell<ImageTopics>>;

impl ImageTopicsCache {
    /// The read shared by `caller`'s requests of this moment (a new one when none is fresh).
    fn read_for(&self, caller: &str) -> SharedRead {
        let Ok(mut reads) = self.reads.lock() else {
            return Arc::new(OnceCell::new());
        };
        reads.retain(|_, (started, _)| started.elapsed() < IMAGE_TOPICS_FRESH);
        if let Some((_, read)) = reads.get(caller) {
            return read.clone();
        }
        let read = Arc::new(OnceCell::new());
        if reads.len() < IMAGE_TOPICS_CALLERS_MAX {
            reads.insert(caller.to_string(), (Instant::now(), read.clone()));
        }
        read
    }

    /// Forgets every read: a setting changed, the next description reads the image again.
    fn forget(&self) {
        if let Ok(mut reads) = self.reads.lock() {
            reads.clear();
        }
    }
}

/// The topics of the metadata image, asked of this node as the caller; None when it cannot
/// be read (the caller may not DESCRIBE the cluster, or the node did not answer): the
/// share-group settings are then shown as null rather than failing the whole answer.
async fn image_topics(state: &ApiState) -> ImageTopics {
    let caller = crate::auth::current_principal()
        .map(|p| p.to_string())
        .unwrap_or_default();
    let read = state.image_topics.read_for(&caller);
    read.get_or_init(|| async {
        let native = state.native().ok()?;
        let read =
            super::cluster::read_image(native, META_NODE_ANSWER_WAIT, &state.security()).await;
        match read {
            Ok((_, image)) => Some(Arc::new(image.topics)),
            Err(problem) => {
                tracing::debug!(detail = %problem.detail, "share-group settings not shown");
                None
            }
        }
    })
    .await
    .clone()
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
    pub cleanup_policy: Option<String>,
    pub delete_retention_ms: Option<i64>,
    pub min_compaction_lag_ms: Option<i64>,
    pub max_compaction_lag_ms: Option<i64>,
    pub min_cleanable_dirty_ratio: Option<f64>,
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
    /// `max_delivery_attempts`, `dead_letter_topic`, …): a value sets one, `null` removes it so the brokers' default applies again. They take
    /// effect without a restart. An unknown name, a bad value, or a `flush` change is refused
    /// with 400 `INVALID_CONFIG`.
    pub config: Option<std::collections::BTreeMap<String, SettingValue>>,
}

/// One setting's new value: a number, a boolean or text; `null` removes the setting.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum SettingValue {
    Integer(i64),
    /// After `Integer`, so a whole number stays one: `min_cleanable_dirty_ratio`'s.
    Decimal(f64),
    Boolean(bool),
    Text(String),
    Remove(()),
}

/// Written by hand: the derived schema of the `null` variant would match any value.
impl utoipa::PartialSchema for SettingValue {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Type};
        let of = |kind: Type| ObjectBuilder::new().schema_type(kind);
        OneOfBuilder::new()
            // One `number` for whole and decimal values alike: an `integer` item beside it
            // would match whole numbers twice, which `oneOf` forbids.
            .item(of(Type::Number))
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
            SettingValue::Decimal(x) => Some(x.to_string()),
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
            dead_letter_topic: None,
            dead_letter_of: Vec::new(),
        })
        .collect();
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(image) = image_topics(&state).await {
        mark_dead_letter_topics(&mut topics, &image);
    }
    Ok(Json(TopicList { topics }))
}

/// Sets each listed topic's dead-letter topic, and on each dead-letter topic the listed
/// topics that send to it.
fn mark_dead_letter_topics(topics: &mut [TopicSummary], image: &BTreeMap<String, ImageTopic>) {
    let no_config = BTreeMap::new();
    for t in topics.iter_mut() {
        let config = image.get(&t.name).map_or(&no_config, |i| &i.config);
        t.dead_letter_topic = Some(share_settings(&t.name, config).1);
    }
    let sources: Vec<(String, String)> = topics
        .iter()
        .filter_map(|t| Some((t.name.clone(), t.dead_letter_topic.clone()?)))
        .collect();
    for t in topics.iter_mut() {
        t.dead_letter_of = sources
            .iter()
            .filter(|(_, to)| *to == t.name)
            .map(|(from, _)| from.clone())
            .collect();
    }
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
    check_topic_name(&body.name)?;
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
        cleanup_policy: settings.cleanup_policy.unwrap_or_default(),
        // Optional on the wire (0 is a value of its own): absent stays absent.
        delete_retention_ms: settings.delete_retention_ms,
        min_compaction_lag_ms: settings.min_compaction_lag_ms.unwrap_or(0),
        max_compaction_lag_ms: settings.max_compaction_lag_ms.unwrap_or(0),
        min_cleanable_dirty_ratio: settings.min_cleanable_dirty_ratio,
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
    let mut config: TopicSettings = d.config.unwrap_or_default().into();
    if let Some(image) = image_topics(state).await {
        let stored = image.get(&d.name).map(|t| &t.config);
        let (attempts, dead_letters) = share_settings(&d.name, stored.unwrap_or(&BTreeMap::new()));
        config.max_delivery_attempts = Some(attempts);
        config.dead_letter_topic = Some(dead_letters);
    }
    Ok(TopicDescription {
        name: d.name,
        config,
        partitions: d.partitions.into_iter().map(PartitionInfo::from).collect(),
    })
}

/// The share-group settings a PATCH just changed, over what the node's image showed: the
/// MetaServer accepted them, and this node's copy of the image may not have them yet.
fn overlay_share_settings(
    answer: &mut TopicDescription,
    set: &[(String, String)],
    unset: &[String],
) {
    if answer.config.dead_letter_topic.is_none() {
        return;
    }
    let changed: BTreeMap<String, String> = set.iter().cloned().collect();
    let touched = |key: &str| changed.contains_key(key) || unset.iter().any(|k| k == key);
    if !touched(MAX_DELIVERY_ATTEMPTS) && !touched(DEAD_LETTER_TOPIC) {
        return;
    }
    let (attempts, dead_letters) = share_settings(&answer.name, &changed);
    if touched(MAX_DELIVERY_ATTEMPTS) {
        answer.config.max_delivery_attempts = Some(attempts);
    }
    if touched(DEAD_LETTER_TOPIC) {
        answer.config.dead_letter_topic = Some(dead_letters);
    }
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
    check_topic_name(&path.name)?;
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
    check_topic_name(&path.name)?;
    let now = describe(&state, &path.name).await?;
    let grow = body
        .partitions
        .filter(|p| *p as usize != now.partitions.len());
    let settings = body.config.unwrap_or_default();
    if grow.is_none() && settings.is_empty() {
        return Ok(Json(now));
    }
    let client = state.client().await?;
    let (mut set, mut unset) = (Vec::new(), Vec::new());
    for (key, value) in settings {
        match value.to_text() {
            Some(value) => set.push((key, value)),
            None => unset.push(key),
        }
    }
    if !set.is_empty() || !unset.is_empty() {
        // Before growing: a refused setting leaves the topic as it was.
        client
            .admin
            .alter_topic_config(&path.name, &set, &unset)
            .await?;
        state.image_topics.forget();
    }
    if let Some(partitions) = grow {
        client
            .admin
            .alter_partitions(&path.name, partitions)
            .await
            .map_err(refused_placement)?;
    }
    let mut answer = describe(&state, &path.name).await?;
    overlay_share_settings(&mut answer, &set, &unset);
    Ok(Json(answer))
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
    check_topic_name(&path.name)?;
    state.client().await?.admin.delete_topic(&path.name).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn share_settings_fall_back_to_the_defaults_as_the_brokers_do() {
        assert_eq!(
            share_settings("jobs", &BTreeMap::new()),
            (5, "jobs.dlq".to_string())
        );
        let set = config(&[(MAX_DELIVERY_ATTEMPTS, "9"), (DEAD_LETTER_TOPIC, "failed")]);
        assert_eq!(share_settings("jobs", &set), (9, "failed".to_string()));
        // Out of range, not a name, the topic itself: the defaults.
        for bad in [
            config(&[(MAX_DELIVERY_ATTEMPTS, "0"), (DEAD_LETTER_TOPIC, "jobs")]),
            config(&[(MAX_DELIVERY_ATTEMPTS, "101"), (DEAD_LETTER_TOPIC, "a b")]),
        ] {
            assert_eq!(share_settings("jobs", &bad), (5, "jobs.dlq".to_string()));
        }
    }

    #[test]
    fn a_callers_requests_of_one_moment_share_one_image_read() {
        let cache = ImageTopicsCache::default();
        let first = cache.read_for("User:alice");
        assert!(Arc::ptr_eq(&first, &cache.read_for("User:alice")));
        assert!(!Arc::ptr_eq(&first, &cache.read_for("User:bob")));
        cache.forget();
        assert!(!Arc::ptr_eq(&first, &cache.read_for("User:alice")));
    }

    #[test]
    fn dead_letter_topics_name_their_sources() {
        let summary = |name: &str| TopicSummary {
            name: name.into(),
            partitions: 1,
            replication_factor: 1,
            dead_letter_topic: None,
            dead_letter_of: Vec::new(),
        };
        let mut topics = vec![summary("a"), summary("b"), summary("a.dlq")];
        let image: BTreeMap<String, ImageTopic> = [(
            "b".to_string(),
            ImageTopic {
                config: config(&[(DEAD_LETTER_TOPIC, "a.dlq")]),
            },
        )]
        .into_iter()
        .collect();
        mark_dead_letter_topics(&mut topics, &image);
        assert_eq!(topics[0].dead_letter_topic.as_deref(), Some("a.dlq"));
        assert_eq!(topics[2].dead_letter_of, ["a", "b"]);
        assert!(topics[0].dead_letter_of.is_empty());
    }
}
