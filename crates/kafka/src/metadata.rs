//! Metadata: brokers (with their Kafka addresses), topics and partition leaders.
//!
//! Topics and routes come from the native Metadata operation (so its authorization applies);
//! brokers from the cluster image, where each broker registered its Kafka listener address
//! (`BrokerRecord::kafka`). Only brokers with a Kafka listener are listed, and a partition led
//! by one without is answered `LEADER_NOT_AVAILABLE`: a Kafka client cannot reach its leader.
//! So is a partition whose leader this broker's follower fetches just found closed or refused
//! (`BrokerState::leader_unreachable`): a leader that has died, before its session ends.

use std::sync::Arc;

use kafka_protocol::error::ResponseError as K;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use tinymq_meta::MetadataImage;
use tinymq_protocol::{messages as m, ErrorCode, OpCode};

use crate::context::Ctx;
use crate::errors::{kafka_code_for, Resource};
use crate::topic_id;

/// Kafka's "leader unknown" broker id.
const NO_LEADER: i32 = -1;

pub(crate) async fn handle(
    ctx: Arc<Ctx>,
    _version: i16,
    request: MetadataRequest,
) -> MetadataResponse {
    let (routes, by_id) = match request.topics {
        // Null: every topic. (Version 0's empty list meaning "all" is not served.)
        None => (all_topics(&ctx).await, vec![]),
        Some(wanted) if wanted.is_empty() => (vec![], vec![]),
        Some(wanted) => {
            let auto_create = request.allow_auto_topic_creation && ctx.config().auto_create_topics;
            named_topics(&ctx, wanted, auto_create).await
        }
    };
    // Read after the routes: topics created just now are in it.
    let image = ctx.state().cluster.image();
    let mut topics: Vec<MetadataResponseTopic> =
        routes.into_iter().map(|t| topic(&ctx, &image, t)).collect();
    // Ids no topic has (a deleted topic's, another cluster's).
    topics.extend(by_id.into_iter().map(|t| {
        MetadataResponseTopic::default()
            .with_name(None)
            .with_topic_id(t.topic_id)
            .with_error_code(K::UnknownTopicId.code())
    }));
    MetadataResponse::default()
        .with_brokers(brokers(&ctx, &image))
        .with_cluster_id(Some(StrBytes::from_string(image.cluster_id.clone())))
        .with_controller_id(broker_id(ctx.state().node_id()))
        .with_topics(topics)
}

/// Every live broker with a Kafka listener, as the image has it: (node id, host, port). This
/// broker is among them even before its registration shows in its image.
pub(crate) fn kafka_brokers(ctx: &Ctx, image: &MetadataImage) -> Vec<(u32, String, u16)> {
    let mut out: Vec<(u32, String, u16)> = image
        .brokers
        .values()
        .filter(|b| !b.fenced)
        .filter_map(|b| {
            let (host, port) = kafka_address(ctx, image, b.id)?;
            Some((b.id, host, port))
        })
        .collect();
    let me = ctx.state().node_id();
    if !out.iter().any(|(id, _, _)| *id == me) {
        let (host, port) = ctx.config().advertised.clone();
        out.push((me, host, port));
    }
    out
}

fn brokers(ctx: &Ctx, image: &MetadataImage) -> Vec<MetadataResponseBroker> {
    kafka_brokers(ctx, image)
        .into_iter()
        .map(|(id, host, port)| {
            MetadataResponseBroker::default()
                .with_node_id(broker_id(id))
                .with_host(StrBytes::from_string(host))
                .with_port(i32::from(port))
        })
        .collect()
}

/// The native answer for every topic (the native Metadata lists only those the principal may
/// describe).
async fn all_topics(ctx: &Ctx) -> Vec<m::TopicRoutes> {
    let request = m::MetadataRequest { topics: vec![] };
    match ctx
        .call::<_, m::MetadataResponse>(OpCode::Metadata, &request)
        .await
    {
        Ok(response) if response.error.is_none() => response.topics,
        Ok(response) => {
            log_refusal(response.error.as_ref());
            vec![]
        }
        Err(e) => {
            log_refusal(Some(&e));
            vec![]
        }
    }
}

fn log_refusal(error: Option<&m::Error>) {
    if let Some(e) = error {
        tracing::debug!(code = e.code, error = %e.message, "kafka metadata: native metadata refused");
    }
}

/// The native answer for the topics named (unknown ones created first when `auto_create`),
/// and the topics asked for by id only.
async fn named_topics(
    ctx: &Ctx,
    wanted: Vec<MetadataRequestTopic>,
    auto_create: bool,
) -> (Vec<m::TopicRoutes>, Vec<MetadataRequestTopic>) {
    let mut by_id = Vec::new();
    let mut names = Vec::new();
    // Topics asked for by id, by the name the id had: never auto-created, and answered
    // UNKNOWN_TOPIC_ID if deleted meanwhile.
    let mut resolved = Vec::new();
    let image = ctx.state().cluster.image();
    let mut ids = None;
    for t in wanted {
        match &t.name {
            Some(name) if !name.is_empty() => names.push(name.to_string()),
            _ => {
                let ids = ids.get_or_insert_with(|| topic_id::Names::of(&image));
                match ids.name(&image.cluster_id, t.topic_id) {
                    Some(name) => {
                        names.push(name.to_owned());
                        resolved.push((name.to_owned(), t));
                    }
                    None => by_id.push(t),
                }
            }
        }
    }
    let mut routes = native_routes(ctx, &names).await;
    for (name, asked) in resolved {
        let gone = |r: &m::TopicRoutes| r.name == name && is_unknown_topic(r.error.as_ref());
        if routes.iter().any(gone) {
            routes.retain(|r| !gone(r));
            by_id.push(asked);
        }
    }
    if auto_create {
        let unknown: Vec<String> = routes
            .iter()
            .filter(|t| is_unknown_topic(t.error.as_ref()))
            .map(|t| t.name.clone())
            .collect();
        if !unknown.is_empty() {
            let created = create_all(ctx, &unknown).await;
            let again = native_routes(ctx, &unknown).await;
            for route in &mut routes {
                if let Some(refusal) = created.iter().find(|(n, _)| *n == route.name) {
                    route.error = Some(refusal.1.clone());
                } else if let Some(fresh) = again.iter().find(|t| t.name == route.name) {
                    *route = fresh.clone();
                    if is_unknown_topic(route.error.as_ref()) {
                        // Created, but this broker's image does not show it yet: retriable,
                        // as Kafka answers a topic it is auto-creating (a client told
                        // UNKNOWN_TOPIC_OR_PARTITION may fail its messages at once).
                        route.error = Some(ErrorCode::LEADER_NOT_AVAILABLE.with_message(format!(
                            "topic {} was just created; its partitions are being placed",
                            route.name
                        )));
                    }
                }
            }
        }
    }
    (routes, by_id)
}

fn is_unknown_topic(error: Option<&m::Error>) -> bool {
    error.is_some_and(|e| {
        ErrorCode::from_code(e.code) == Some(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
    })
}

/// Native routes for `names`; a refused request is each topic's refusal.
async fn native_routes(ctx: &Ctx, names: &[String]) -> Vec<m::TopicRoutes> {
    if names.is_empty() {
        return vec![];
    }
    let request = m::MetadataRequest {
        topics: names.to_vec(),
    };
    let refusal = match ctx
        .call::<_, m::MetadataResponse>(OpCode::Metadata, &request)
        .await
    {
        Ok(response) if response.error.is_none() => return response.topics,
        Ok(response) => response.error,
        Err(e) => Some(e),
    };
    names
        .iter()
        .map(|name| m::TopicRoutes {
            name: name.clone(),
            error: refusal.clone(),
            partitions: vec![],
        })
        .collect()
}

/// Creates each topic with the broker's defaults (`--kafka-auto-create-topics`); returns the
/// refusals other than "already exists" (another client created it first).
async fn create_all(ctx: &Ctx, names: &[String]) -> Vec<(String, m::Error)> {
    let mut refused = Vec::new();
    for name in names {
        let request = m::CreateTopicRequest {
            name: name.clone(),
            config: None,
            validate_only: false,
        };
        let error = match ctx
            .call::<_, m::CreateTopicResponse>(OpCode::CreateTopic, &request)
            .await
        {
            Ok(response) => response.error,
            Err(e) => Some(e),
        };
        match error {
            None => tracing::info!(topic = %name, "kafka metadata: topic auto-created"),
            Some(e) if ErrorCode::from_code(e.code) == Some(ErrorCode::TOPIC_ALREADY_EXISTS) => {}
            Some(e) => refused.push((name.clone(), e)),
        }
    }
    refused
}

/// One topic's Kafka answer.
fn topic(ctx: &Ctx, image: &MetadataImage, routes: m::TopicRoutes) -> MetadataResponseTopic {
    let error_code = kafka_code_for(routes.error.as_ref(), Resource::Topic);
    let name =
        (!routes.name.is_empty()).then(|| TopicName(StrBytes::from_string(routes.name.clone())));
    let partitions = routes
        .partitions
        .into_iter()
        .map(|p| partition(ctx, image, p))
        .collect();
    MetadataResponseTopic::default()
        .with_error_code(error_code)
        .with_name(name)
        .with_topic_id(topic_id::of_topic(image, &routes.name))
        .with_is_internal(false)
        .with_partitions(partitions)
}

fn partition(ctx: &Ctx, image: &MetadataImage, p: m::PartitionRoute) -> MetadataResponsePartition {
    let ids = |v: &[u32]| v.iter().map(|id| broker_id(*id)).collect::<Vec<_>>();
    let mut error_code = kafka_code_for(p.error.as_ref(), Resource::Topic);
    let mut leader = broker_id(p.leader);
    if error_code != 0 {
        leader = BrokerId(NO_LEADER);
    } else if kafka_address(ctx, image, p.leader).is_none() {
        // Led by a broker Kafka clients cannot reach.
        error_code = K::LeaderNotAvailable.code();
        leader = BrokerId(NO_LEADER);
    } else if ctx.state().leader_unreachable(p.leader) {
        // This broker's fetches found the leader's connection closed: it has most likely died
        // and its session is about to end. "No leader" makes a client ask again within
        // 100 ms or so (librdkafka, the Java client) instead of retrying a dead address and
        // waiting for its next periodic look.
        error_code = K::LeaderNotAvailable.code();
        leader = BrokerId(NO_LEADER);
    }
    MetadataResponsePartition::default()
        .with_error_code(error_code)
        .with_partition_index(i32::try_from(p.partition).unwrap_or(i32::MAX))
        .with_leader_id(leader)
        .with_leader_epoch(i32::try_from(p.leader_epoch).unwrap_or(i32::MAX))
        .with_replica_nodes(ids(&p.replicas))
        .with_isr_nodes(ids(&p.isr))
}

/// Broker `node_id`'s Kafka address in `image`.
fn kafka_address(ctx: &Ctx, image: &MetadataImage, node_id: u32) -> Option<(String, u16)> {
    if node_id == ctx.state().node_id() {
        // Our own listener is serving this request, registered or not yet.
        return Some(ctx.config().advertised.clone());
    }
    image
        .brokers
        .get(&node_id)
        .filter(|b| !b.fenced)
        .and_then(|b| b.kafka.as_ref())
        .map(|k| (k.host.clone(), k.port))
}

/// A node id as Kafka's broker id (-1, "none", for one past i32, which no registration makes).
pub(crate) fn broker_id(node_id: u32) -> BrokerId {
    BrokerId(i32::try_from(node_id).unwrap_or(-1))
}

/// The Kafka address (host, port) of broker `node_id`, as it registered it; `None` for a
/// broker without a Kafka listener or one not in the cluster. Used by FindCoordinator,
/// DescribeCluster and the current-leader fields of Produce and Fetch errors.
pub(crate) fn kafka_broker(ctx: &Ctx, node_id: u32) -> Option<(String, u16)> {
    kafka_address(ctx, &ctx.state().cluster.image(), node_id)
}
