//! Topic and routing handlers: create, grow, delete, list and describe topics, and answer
//! metadata requests for the whole cluster. Changes go to the MetaServer as commands; the
//! answer waits until this broker's image (and its partitions) reflect them, so a client that
//! acts on the answer finds the topic here.

use std::sync::Arc;
use std::time::Duration;

use tinymq_meta::{Command, MetadataImage, PartitionRecord, Reply};
use tinymq_protocol::{messages as m, ErrorCode};

use crate::partition::Partition;
use crate::state::BrokerState;
use crate::topic::{validate_topic_name, ShareSettings, TopicSettings};

/// How long a topic change waits, in all, to be visible here (in the image, then its
/// partitions opened or closed) before answering anyway. With the MetaServer link's 15 s for
/// the write itself, a handler answers well within a client's 30 s request timeout.
const VISIBLE_WAIT: Duration = Duration::from_secs(5);

fn err(code: ErrorCode, message: impl Into<String>) -> Option<m::Error> {
    Some(code.with_message(message))
}

/// Waits until every partition of `topic` that the image places here is open.
async fn wait_until_open(state: &BrokerState, topic: &str, deadline: tokio::time::Instant) {
    let me = state.node_id();
    while tokio::time::Instant::now() < deadline {
        let image = state.cluster.image();
        let Some(record) = image.topics.get(topic) else {
            return;
        };
        // A partition that failed to open is offline with its reason: not worth waiting for.
        let missing = record.partitions.iter().enumerate().any(|(i, p)| {
            let i = i as u32;
            p.replicas.contains(&me)
                && state.local_partition(topic, i).is_none()
                && state.open_failure(topic, i).is_none()
        });
        if !missing {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until no partition of `topic` is open here and its directories are renamed away
/// (reconciliation does both after the image drops the topic; the files are removed later, in
/// the background), so that the answer means "gone here".
async fn wait_until_closed(
    state: &BrokerState,
    topic: &str,
    partitions: u32,
    deadline: tokio::time::Instant,
) {
    let dirs: Vec<_> = (0..partitions)
        .map(|i| Partition::dir_for(&state.config.data_dir, topic, i))
        .collect();
    let dirs = std::sync::Arc::new(dirs);
    let gone = || async {
        let dirs = dirs.clone();
        !state.partitions.read().contains_key(topic)
            && tokio::task::spawn_blocking(move || dirs.iter().all(|d| !d.exists()))
                .await
                .unwrap_or(false)
    };
    while !gone().await && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

pub async fn create_topic(
    state: Arc<BrokerState>,
    req: m::CreateTopicRequest,
) -> m::CreateTopicResponse {
    let fail = |error: m::Error| m::CreateTopicResponse {
        error: Some(error),
        config: None,
    };
    if let Err((code, msg)) = validate_topic_name(&req.name) {
        return fail(code.with_message(msg));
    }
    let mut settings =
        match TopicSettings::from_wire(req.config.as_ref(), &state.config.topic_defaults) {
            Ok(s) => s,
            Err((code, msg)) => return fail(code.with_message(msg)),
        };
    // Not given: the MetaServer picks min(3, live brokers) when it places the topic.
    let replication_factor = req.config.as_ref().map_or(0, |c| c.replication_factor);
    if replication_factor == 0 {
        settings.replication_factor = tinymq_meta::default_replication_factor(
            state.cluster.image().live_brokers().len(),
            tinymq_meta::DEFAULT_REPLICATION_FACTOR_MAX,
        );
    }
    if req.validate_only {
        if state.partition_count(&req.name).is_some() {
            return fail(
                ErrorCode::TOPIC_ALREADY_EXISTS
                    .with_message(format!("topic {} already exists", req.name)),
            );
        }
        return m::CreateTopicResponse {
            error: None,
            config: Some(settings.to_wire()),
        };
    }
    let command = Command::CreateTopic {
        name: req.name.clone(),
        partitions: settings.partitions,
        replication_factor,
        config: settings.to_config_map(),
    };
    if let Err(e) = state.cluster.write(command).await {
        return fail(e);
    }
    let deadline = tokio::time::Instant::now() + VISIBLE_WAIT;
    let name = req.name.clone();
    state
        .cluster
        .wait_until(
            deadline.saturating_duration_since(tokio::time::Instant::now()),
            |image| image.topics.contains_key(&name),
        )
        .await;
    wait_until_open(&state, &req.name, deadline).await;
    tracing::info!(topic = %req.name, partitions = settings.partitions, "topic created");
    // What the MetaServer made of it (replication factor, min_insync_replicas defaults).
    let image = state.cluster.image();
    let created = match image.topics.get(&req.name) {
        Some(record) => state.settings_of(&req.name, record),
        None => settings,
    };
    m::CreateTopicResponse {
        error: None,
        config: Some(created.to_wire()),
    }
}

pub async fn alter_partitions(
    state: Arc<BrokerState>,
    req: m::AlterPartitionsRequest,
) -> m::AlterPartitionsResponse {
    let command = Command::AlterPartitions {
        name: req.name.clone(),
        partitions: req.partitions,
    };
    if let Err(e) = state.cluster.write(command).await {
        return m::AlterPartitionsResponse { error: Some(e) };
    }
    let deadline = tokio::time::Instant::now() + VISIBLE_WAIT;
    let (name, count) = (req.name.clone(), req.partitions as usize);
    state
        .cluster
        .wait_until(
            deadline.saturating_duration_since(tokio::time::Instant::now()),
            |image| {
                image
                    .topics
                    .get(&name)
                    .is_some_and(|t| t.partitions.len() >= count)
            },
        )
        .await;
    wait_until_open(&state, &req.name, deadline).await;
    tracing::info!(topic = %req.name, partitions = req.partitions, "topic grown");
    m::AlterPartitionsResponse { error: None }
}

pub async fn delete_topic(
    state: Arc<BrokerState>,
    req: m::DeleteTopicRequest,
) -> m::DeleteTopicResponse {
    let partitions = state.partition_count(&req.name).unwrap_or(0);
    let command = Command::DeleteTopic {
        name: req.name.clone(),
    };
    if let Err(e) = state.cluster.write(command).await {
        return m::DeleteTopicResponse { error: Some(e) };
    }
    let deadline = tokio::time::Instant::now() + VISIBLE_WAIT;
    let name = req.name.clone();
    state
        .cluster
        .wait_until(
            deadline.saturating_duration_since(tokio::time::Instant::now()),
            |image| !image.topics.contains_key(&name),
        )
        .await;
    wait_until_closed(&state, &req.name, partitions, deadline).await;
    tracing::info!(topic = %req.name, "topic deleted");
    m::DeleteTopicResponse { error: None }
}

/// Removes a stopped broker from the cluster for good (the MetaServer decides; see
/// [`Command::DecommissionBroker`]); answers once this broker's image has it removed, so its
/// partitions' new placement is what the next request here finds.
pub async fn decommission_broker(
    state: Arc<BrokerState>,
    req: m::DecommissionBrokerRequest,
) -> m::DecommissionBrokerResponse {
    let command = Command::DecommissionBroker {
        id: req.broker_id,
        move_partitions: req.move_partitions,
    };
    if let Err(e) = state.cluster.write(command).await {
        return m::DecommissionBrokerResponse { error: Some(e) };
    }
    let id = req.broker_id;
    state
        .cluster
        .wait_until(VISIBLE_WAIT, |image| {
            image.decommissioned_brokers.contains(&id)
        })
        .await;
    tracing::info!(broker = id, "broker decommissioned");
    m::DecommissionBrokerResponse { error: None }
}

/// Starts the reassignments of a plan (`Rebalance` or `DrainBroker`; the MetaServer computes
/// it) and answers with the plan once this broker's image has every move started, so a tool
/// polling this broker for their completion does not see the partitions before they move.
async fn run_plan(
    state: &BrokerState,
    command: Command,
) -> (Option<m::Error>, Vec<m::PartitionMove>) {
    let plan = match state.cluster.write(command).await {
        Ok(Reply::Plan(plan)) => plan,
        Ok(other) => {
            let why = format!("unexpected reply to a plan: {other:?}");
            return (err(ErrorCode::UNKNOWN_SERVER_ERROR, why), vec![]);
        }
        Err(e) => return (Some(e), vec![]),
    };
    state
        .cluster
        .wait_until(VISIBLE_WAIT, |image| {
            plan.iter().all(|m| {
                image
                    .topics
                    .get(&m.topic)
                    .and_then(|t| t.partitions.get(m.partition as usize))
                    .is_none_or(|p| p.target_replicas() == m.replicas)
            })
        })
        .await;
    (None, plan.iter().map(|m| m.to_wire()).collect())
}

/// `tinymq cluster rebalance`: spreads replicas and preferred leaders over the live brokers.
pub async fn rebalance(state: Arc<BrokerState>, req: m::RebalanceRequest) -> m::RebalanceResponse {
    let dry_run = req.dry_run;
    let (error, moves) = run_plan(&state, Command::Rebalance { dry_run }).await;
    if error.is_none() && !dry_run {
        tracing::info!(moves = moves.len(), "rebalance started");
    }
    m::RebalanceResponse { error, moves }
}

/// `tinymq broker drain ID`: moves every replica off a broker.
pub async fn drain_broker(
    state: Arc<BrokerState>,
    req: m::DrainBrokerRequest,
) -> m::DrainBrokerResponse {
    let command = Command::DrainBroker {
        id: req.broker_id,
        dry_run: req.dry_run,
    };
    let (error, moves) = run_plan(&state, command).await;
    if error.is_none() && !req.dry_run {
        tracing::info!(broker = req.broker_id, moves = moves.len(), "drain started");
    }
    m::DrainBrokerResponse { error, moves }
}

pub fn list_topics(state: &BrokerState) -> m::ListTopicsResponse {
    m::ListTopicsResponse {
        error: None,
        names: state.cluster.image().user_topic_names(),
    }
}

/// A partition as the image has it, with the offsets filled in when it is led here.
fn partition_state(
    state: &BrokerState,
    topic: &str,
    index: u32,
    p: &PartitionRecord,
) -> m::PartitionState {
    let mut out = m::PartitionState {
        partition: index,
        leader: p.leader.unwrap_or(0),
        leader_epoch: p.leader_epoch,
        replicas: p.replicas.clone(),
        isr: p.isr.clone(),
        log_start_offset: -1,
        log_end_offset: -1,
        high_watermark: -1,
        size_bytes: 0,
        adding_replicas: p.adding_replicas.clone(),
        removing_replicas: p.removing_replicas.clone(),
        last_stable_offset: -1,
    };
    if let Ok((local, _)) = state.led_partition(topic, index) {
        out.log_start_offset = local.log.log_start_offset();
        out.log_end_offset = local.log.log_end_offset();
        let high_watermark = local.high_watermark();
        out.high_watermark = high_watermark;
        out.last_stable_offset = local.last_stable_offset_at(high_watermark);
        out.size_bytes = local.log.size_bytes();
    }
    out
}

pub fn describe_topic(
    state: &BrokerState,
    req: m::DescribeTopicRequest,
) -> m::DescribeTopicResponse {
    let image = state.cluster.image();
    let Some(topic) = image.topics.get(&req.name) else {
        return m::DescribeTopicResponse {
            error: err(
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                format!("unknown topic {}", req.name),
            ),
            ..Default::default()
        };
    };
    let settings = state.settings_of(&req.name, topic);
    let share = ShareSettings::of(&req.name, topic);
    m::DescribeTopicResponse {
        error: None,
        config: Some(settings.to_wire()),
        share: Some(m::TopicShareSettings {
            max_delivery_attempts: share.max_delivery_attempts,
            dead_letter_topic: share.dead_letter_topic,
        }),
        partitions: topic
            .partitions
            .iter()
            .enumerate()
            .map(|(i, p)| partition_state(state, &req.name, i as u32, p))
            .collect(),
        name: req.name,
    }
}

fn route(topic: &str, index: u32, p: &PartitionRecord) -> m::PartitionRoute {
    m::PartitionRoute {
        partition: index,
        error: match p.leader {
            Some(_) => None,
            None => err(
                ErrorCode::LEADER_NOT_AVAILABLE,
                format!(
                    "{topic}/{index} is offline until one of {:?} is live",
                    p.isr
                ),
            ),
        },
        leader: p.leader.unwrap_or(0),
        leader_epoch: p.leader_epoch,
        replicas: p.replicas.clone(),
        isr: p.isr.clone(),
    }
}

fn topic_routes(image: &MetadataImage, name: String) -> m::TopicRoutes {
    match image.topics.get(&name) {
        None => m::TopicRoutes {
            error: err(
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                format!("unknown topic {name}"),
            ),
            name,
            partitions: vec![],
        },
        Some(topic) => m::TopicRoutes {
            error: None,
            partitions: topic
                .partitions
                .iter()
                .enumerate()
                .map(|(i, p)| route(&name, i as u32, p))
                .collect(),
            name,
        },
    }
}

/// Routes for the whole cluster, from this broker's image: every live broker's address and
/// each partition's leader.
pub fn metadata(state: &BrokerState, req: m::MetadataRequest) -> m::MetadataResponse {
    let image = state.cluster.image();
    let names = if req.topics.is_empty() {
        image.user_topic_names()
    } else {
        req.topics
    };
    m::MetadataResponse {
        error: None,
        cluster_id: image.cluster_id.clone(),
        brokers: image
            .brokers
            .values()
            .filter(|b| !b.fenced)
            .map(|b| m::BrokerAddress {
                node_id: b.id,
                host: b.host.clone(),
                port: u32::from(b.port),
            })
            .collect(),
        topics: names.into_iter().map(|n| topic_routes(&image, n)).collect(),
    }
}

/// `MetaRead` sent to a cluster broker (`tinymq cluster status` pointed at a broker): the
/// answer of a MetaServer node, asked through the broker's link (the standalone server answers
/// from its embedded MetaServer instead). When no node answers, the image as this broker last
/// saw it, with the error saying so (leader 0, no voters).
pub async fn meta_read(state: &BrokerState) -> m::MetaReadResponse {
    match state.cluster.link.status().await {
        Ok(response) => response,
        Err(e) => {
            let view = state.cluster.versioned();
            m::MetaReadResponse {
                error: Some(ErrorCode::LEADER_NOT_AVAILABLE.with_message(format!(
                    "no MetaServer node answered this broker ({e}); the image is as it last saw it"
                ))),
                image: serde_json::to_vec(&*view.image)
                    .expect("the image serializes")
                    .into(),
                version: view.version,
                ..Default::default()
            }
        }
    }
}
