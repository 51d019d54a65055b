//! Topic administration and cluster description: CreateTopics, DeleteTopics,
//! CreatePartitions, DescribeConfigs, DescribeCluster (and in `alter_configs`, AlterConfigs and
//! IncrementalAlterConfigs; in `acls`, CreateAcls, DescribeAcls and DeleteAcls; in
//! `delete_records`, DeleteRecords; in `scram`, the SCRAM credential APIs; in `quotas`, the
//! client quota APIs; in `log_dirs`, DescribeLogDirs; in `reassign`, ElectLeaders and the
//! partition reassignment APIs). Each topic is one native request
//! (CreateTopic, DeleteTopic, AlterPartitions, DescribeTopic), so the native authorization and
//! validation apply; Kafka-only features (manual replica assignments, topic ids) are refused
//! with an error naming them.

mod acls;
mod alter_configs;
mod configs;
mod delete_records;
mod log_dirs;
mod quotas;
mod reassign;
mod scram;

use std::collections::HashSet;
use std::sync::Arc;

use kafka_protocol::error::ResponseError as K;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use tinymq_protocol::{messages as m, OpCode};

use crate::context::Ctx;
use crate::errors::{kafka_code_for, message_of, Resource};
use crate::metadata::broker_id;
use configs::Entry;

pub(crate) use acls::{create_acls, delete_acls, describe_acls};
pub(crate) use alter_configs::{alter_configs, incremental_alter_configs};
pub(crate) use delete_records::delete_records;
pub(crate) use log_dirs::describe_log_dirs;
pub(crate) use quotas::{alter_client_quotas, describe_client_quotas};
pub(crate) use reassign::{
    alter_partition_reassignments, elect_leaders, list_partition_reassignments,
};
pub(crate) use scram::{alter_user_scram_credentials, describe_user_scram_credentials};

/// Most entries (ACL creations or filters, config resources) one administrative request may
/// carry: each is a MetaServer write or a pass over the ACL list. Past it every entry is
/// answered INVALID_REQUEST and nothing is changed.
pub(crate) const ADMIN_ENTRIES_MAX: usize = 1_000;

/// The refusal of a request with `count` entries, when over [`ADMIN_ENTRIES_MAX`].
fn too_many_entries(count: usize) -> Option<(i16, String)> {
    (count > ADMIN_ENTRIES_MAX).then(|| {
        (
            K::InvalidRequest.code(),
            format!("{count} entries in one request; at most {ADMIN_ENTRIES_MAX}"),
        )
    })
}

/// DescribeConfigs resource types (Kafka's `ConfigResource.Type`).
const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
/// DescribeConfigs config sources.
const SOURCE_TOPIC: i8 = 1;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;

fn text(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

/// A Kafka error code and message from a native error, for a topic.
fn topic_error(error: Option<&m::Error>) -> (i16, Option<StrBytes>) {
    (
        kafka_code_for(error, Resource::Topic),
        message_of(error).map(text),
    )
}

/// The error of a native call: its refusal, or the call's own failure.
fn refusal<T>(
    result: Result<T, m::Error>,
    error_of: impl Fn(&T) -> Option<m::Error>,
) -> Option<m::Error> {
    match result {
        Ok(response) => error_of(&response),
        Err(e) => Some(e),
    }
}

pub(crate) async fn create_topics(
    ctx: Arc<Ctx>,
    version: i16,
    request: CreateTopicsRequest,
) -> CreateTopicsResponse {
    let mut seen = HashSet::new();
    let mut results = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        let result = if !seen.insert(topic.name.0.to_string()) {
            let why = format!("topic {} is named more than once", topic.name.0);
            failed_topic(topic.name, K::InvalidRequest.code(), why)
        } else {
            create_topic(&ctx, version, topic, request.validate_only).await
        };
        results.push(result);
    }
    CreateTopicsResponse::default().with_topics(results)
}

fn failed_topic(name: TopicName, code: i16, message: String) -> CreatableTopicResult {
    CreatableTopicResult::default()
        .with_name(name)
        .with_error_code(code)
        .with_error_message(Some(text(message)))
        .with_configs(None)
}

async fn create_topic(
    ctx: &Ctx,
    version: i16,
    topic: CreatableTopic,
    validate_only: bool,
) -> CreatableTopicResult {
    let name = topic.name.clone();
    if !topic.assignments.is_empty() {
        let why = "manual replica assignments are not supported: give num_partitions and replication_factor (or -1 for the defaults)";
        return failed_topic(name, K::InvalidReplicaAssignment.code(), why.into());
    }
    let (Ok(partitions), Ok(replication_factor)) = (
        count(topic.num_partitions),
        count(topic.replication_factor.into()),
    ) else {
        let why = format!(
            "num_partitions {} and replication_factor {} must be positive, or -1 for the defaults",
            topic.num_partitions, topic.replication_factor
        );
        let code = if topic.num_partitions == 0 || topic.num_partitions < -1 {
            K::InvalidPartitions.code()
        } else {
            K::InvalidReplicationFactor.code()
        };
        return failed_topic(name, code, why);
    };
    let settings = topic
        .configs
        .iter()
        .map(|c| (c.name.as_str(), c.value.as_ref().map(|v| v.as_str())));
    let mut config = match configs::topic_config_from_kafka(settings) {
        Ok(config) => config,
        Err(why) => return failed_topic(name, K::InvalidConfig.code(), why),
    };
    config.partitions = partitions;
    config.replication_factor = replication_factor;
    let request = m::CreateTopicRequest {
        name: name.0.to_string(),
        config: Some(config),
        validate_only,
    };
    let created = ctx
        .call::<_, m::CreateTopicResponse>(OpCode::CreateTopic, &request)
        .await;
    let (error, config) = match created {
        Ok(response) => (response.error, response.config),
        Err(e) => (Some(e), None),
    };
    let (code, message) = topic_error(error.as_ref());
    let mut result = CreatableTopicResult::default()
        .with_name(name)
        .with_error_code(code)
        .with_error_message(message)
        .with_configs(None);
    if !validate_only && code == 0 {
        // Zero (no id) if this broker's image does not show the topic yet.
        let image = ctx.state().cluster.image();
        result = result.with_topic_id(crate::topic_id::of_topic(&image, &request.name));
    }
    if let (Some(config), true, 0) = (config, version >= 5, code) {
        result = result
            .with_num_partitions(i32::try_from(config.partitions).unwrap_or(i32::MAX))
            .with_replication_factor(i16::try_from(config.replication_factor).unwrap_or(i16::MAX))
            .with_configs(Some(
                configs::topic_entries(&config)
                    .into_iter()
                    .map(|e| {
                        CreatableTopicConfigs::default()
                            .with_name(text(e.name))
                            .with_value(Some(text(e.value)))
                            .with_read_only(e.read_only)
                            .with_config_source(SOURCE_TOPIC)
                    })
                    .collect(),
            ));
    }
    result
}

/// A Kafka count: -1 is "the broker's default" (0 natively).
fn count(value: i32) -> Result<u32, ()> {
    match value {
        -1 => Ok(0),
        v if v > 0 => u32::try_from(v).map_err(|_| ()),
        _ => Err(()),
    }
}

pub(crate) async fn delete_topics(
    ctx: Arc<Ctx>,
    version: i16,
    request: DeleteTopicsRequest,
) -> DeleteTopicsResponse {
    // Version 6 names topics in `topics` (by name or by id); before, in `topic_names`.
    let wanted: Vec<(Option<TopicName>, _)> = if version >= 6 {
        request
            .topics
            .into_iter()
            .map(|t| (t.name.filter(|n| !n.0.is_empty()), t.topic_id))
            .collect()
    } else {
        request
            .topic_names
            .into_iter()
            .map(|n| (Some(n), Default::default()))
            .collect()
    };
    let mut responses = Vec::with_capacity(wanted.len());
    let image = ctx.state().cluster.image();
    let ids = crate::topic_id::Names::of(&image);
    for (name, topic_id) in wanted {
        let by_id = || ids.name(&image.cluster_id, topic_id);
        let name = name.or_else(|| by_id().map(|n| TopicName(text(n.to_owned()))));
        let Some(name) = name else {
            responses.push(
                DeletableTopicResult::default()
                    .with_name(None)
                    .with_topic_id(topic_id)
                    .with_error_code(K::UnknownTopicId.code())
                    .with_error_message(Some(text("no topic has this id"))),
            );
            continue;
        };
        let request = m::DeleteTopicRequest {
            name: name.0.to_string(),
        };
        let deleted = ctx
            .call::<_, m::DeleteTopicResponse>(OpCode::DeleteTopic, &request)
            .await;
        let (code, message) = topic_error(refusal(deleted, |r| r.error.clone()).as_ref());
        responses.push(
            DeletableTopicResult::default()
                .with_name(Some(name))
                .with_topic_id(topic_id)
                .with_error_code(code)
                .with_error_message(message),
        );
    }
    DeleteTopicsResponse::default().with_responses(responses)
}

pub(crate) async fn create_partitions(
    ctx: Arc<Ctx>,
    _version: i16,
    request: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let mut results = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        let (code, message) = if topic.assignments.as_ref().is_some_and(|a| !a.is_empty()) {
            let why = "manual replica assignments are not supported: give only the count";
            (K::InvalidReplicaAssignment.code(), Some(text(why)))
        } else {
            grow(&ctx, &topic.name, topic.count, request.validate_only).await
        };
        results.push(
            CreatePartitionsTopicResult::default()
                .with_name(topic.name)
                .with_error_code(code)
                .with_error_message(message),
        );
    }
    CreatePartitionsResponse::default().with_results(results)
}

/// Grows `name` to `count` partitions (or, `validate_only`, checks that it could).
async fn grow(
    ctx: &Ctx,
    name: &TopicName,
    count: i32,
    validate_only: bool,
) -> (i16, Option<StrBytes>) {
    let Ok(partitions) = u32::try_from(count) else {
        return (
            K::InvalidPartitions.code(),
            Some(text(format!("{count} partitions"))),
        );
    };
    if !validate_only {
        let request = m::AlterPartitionsRequest {
            name: name.0.to_string(),
            partitions,
        };
        let grown = ctx
            .call::<_, m::AlterPartitionsResponse>(OpCode::AlterPartitions, &request)
            .await;
        return topic_error(refusal(grown, |r| r.error.clone()).as_ref());
    }
    // Validation only: the topic must exist (as its principal may see it) and be smaller.
    let request = m::DescribeTopicRequest {
        name: name.0.to_string(),
    };
    let described = ctx
        .call::<_, m::DescribeTopicResponse>(OpCode::DescribeTopic, &request)
        .await;
    let current = match described {
        Ok(r) if r.error.is_none() => r.partitions.len(),
        other => return topic_error(refusal(other, |r| r.error.clone()).as_ref()),
    };
    if (partitions as usize) <= current {
        let why = format!(
            "topic {} has {current} partitions already; asked for {partitions}",
            name.0
        );
        return (K::InvalidPartitions.code(), Some(text(why)));
    }
    (0, None)
}

pub(crate) async fn describe_configs(
    ctx: Arc<Ctx>,
    version: i16,
    request: DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let mut results = Vec::with_capacity(request.resources.len());
    for resource in request.resources {
        results.push(describe_resource(&ctx, version, resource).await);
    }
    DescribeConfigsResponse::default().with_results(results)
}

async fn describe_resource(
    ctx: &Ctx,
    version: i16,
    resource: DescribeConfigsResource,
) -> DescribeConfigsResult {
    let result = DescribeConfigsResult::default()
        .with_resource_type(resource.resource_type)
        .with_resource_name(resource.resource_name.clone())
        .with_error_message(None);
    let described = match resource.resource_type {
        RESOURCE_TOPIC => topic_configs(ctx, resource.resource_name.as_str()).await,
        RESOURCE_BROKER => broker_configs(ctx, resource.resource_name.as_str()),
        other => Err((
            K::InvalidRequest.code(),
            format!("config resource type {other} is not served (topics 2 and brokers 4 are)"),
        )),
    };
    let (entries, source, defaults) = match described {
        Ok(found) => found,
        Err((code, message)) => {
            return result
                .with_error_code(code)
                .with_error_message(Some(text(message)))
        }
    };
    let keys = resource.configuration_keys;
    let configs = entries
        .into_iter()
        .filter(|e| {
            keys.as_ref()
                .is_none_or(|keys| keys.iter().any(|k| k.as_str() == e.name))
        })
        .map(|e| {
            // A topic's value equal to the broker's default reads as the default, not as an
            // override (tools that copy overrides, MirrorMaker's among them, copy only those).
            let source = if defaults
                .iter()
                .any(|d| d.name == e.name && d.value == e.value)
            {
                SOURCE_DEFAULT
            } else {
                source
            };
            config_result(version, e, source)
        })
        .collect();
    result.with_configs(configs)
}

fn config_result(version: i16, e: Entry, source: i8) -> DescribeConfigsResourceResult {
    let source = if e.read_only { SOURCE_DEFAULT } else { source };
    let mut out = DescribeConfigsResourceResult::default()
        .with_name(text(e.name))
        .with_value(Some(text(e.value)))
        .with_read_only(e.read_only)
        .with_config_source(source)
        .with_documentation(None);
    if version >= 3 {
        out = out.with_config_type(e.config_type as i8);
    }
    out
}

/// A resource's entries, their source, and the defaults they are compared with (an entry equal
/// to its default reads as the default).
type Described = Result<(Vec<Entry>, i8, Vec<Entry>), (i16, String)>;

async fn topic_configs(ctx: &Ctx, name: &str) -> Described {
    let request = m::DescribeTopicRequest { name: name.into() };
    let described = ctx
        .call::<_, m::DescribeTopicResponse>(OpCode::DescribeTopic, &request)
        .await;
    match described {
        Ok(r) if r.error.is_none() => {
            let config = r.config.unwrap_or_default();
            // min.insync.replicas' default depends on the topic's replication factor.
            let replication_factor = r.partitions.first().map_or(1, |p| p.replicas.len());
            let mut defaults = ctx.state().config.topic_defaults.to_wire();
            defaults.min_insync_replicas = tinymq_meta::default_min_insync_replicas(
                u32::try_from(replication_factor).unwrap_or(u32::MAX),
            );
            Ok((
                configs::topic_entries(&config),
                SOURCE_TOPIC,
                configs::topic_entries(&defaults),
            ))
        }
        other => {
            let error = refusal(other, |r| r.error.clone());
            let (code, message) = topic_error(error.as_ref());
            Err((code, message.map(|m| m.to_string()).unwrap_or_default()))
        }
    }
}

/// A few of this broker's settings under Kafka's names. Only this broker's own: a Kafka
/// client asks each broker for its own configs.
fn broker_configs(ctx: &Ctx, name: &str) -> Described {
    let me = ctx.state().node_id();
    if !name.is_empty() && name != me.to_string() {
        return Err((
            K::InvalidRequest.code(),
            format!("this is broker {me}: ask broker {name} for its own configs"),
        ));
    }
    use configs::ConfigType as T;
    let config = &ctx.state().config;
    let defaults = &config.topic_defaults;
    let entry = |name, value: std::string::String, config_type| Entry {
        name,
        value,
        config_type,
        read_only: true,
    };
    let entries = vec![
        entry("broker.id", me.to_string(), T::Int),
        entry(
            "auto.create.topics.enable",
            ctx.config().auto_create_topics.to_string(),
            T::Boolean,
        ),
        entry("num.partitions", defaults.partitions.to_string(), T::Int),
        entry(
            "log.retention.ms",
            defaults.retention_ms.to_string(),
            T::Long,
        ),
        entry(
            "log.retention.bytes",
            defaults.retention_bytes.to_string(),
            T::Long,
        ),
        entry(
            "log.segment.bytes",
            defaults.segment_bytes.to_string(),
            T::Long,
        ),
        entry(
            "message.max.bytes",
            defaults.message_bytes_max.to_string(),
            T::Int,
        ),
        entry(
            "socket.request.max.bytes",
            ctx.config().limits.frame_bytes_max.to_string(),
            T::Int,
        ),
        entry(
            "max.connections",
            ctx.config().limits.connections_max.to_string(),
            T::Int,
        ),
        entry("tinymq.flush", defaults.flush.clone(), T::String),
    ];
    Ok((entries, SOURCE_STATIC_BROKER, Vec::new()))
}

pub(crate) async fn describe_cluster(
    ctx: Arc<Ctx>,
    _version: i16,
    request: DescribeClusterRequest,
) -> DescribeClusterResponse {
    let image = ctx.state().cluster.image();
    let response = DescribeClusterResponse::default()
        .with_cluster_id(text(image.cluster_id.clone()))
        .with_controller_id(broker_id(ctx.state().node_id()))
        .with_error_message(None);
    // 1 = brokers; 2 = controllers (tinymq's MetaServer nodes do not speak Kafka).
    if request.endpoint_type != 1 {
        let why = format!(
            "endpoint type {} is not served: only brokers (1)",
            request.endpoint_type
        );
        return response
            .with_error_code(K::UnsupportedEndpointType.code())
            .with_error_message(Some(text(why)));
    }
    let brokers = crate::metadata::kafka_brokers(&ctx, &image)
        .into_iter()
        .map(|(id, host, port)| {
            DescribeClusterBroker::default()
                .with_broker_id(broker_id(id))
                .with_host(text(host))
                .with_port(i32::from(port))
        })
        .collect();
    response.with_brokers(brokers)
}
