//! OffsetCommit and OffsetFetch: a group's committed offsets are the native group's, one set
//! whichever protocol its members speak. A Kafka commit refuses the partitions of unknown
//! topics first (as Kafka), then the rest is checked against the Kafka group
//! (member and generation, Kafka's rules, by the coordinator's classic mode) and then written
//! natively as an administrative commit (member "", generation 0: the group has no native
//! members, its classic ones holding its id).

use std::collections::HashMap;
use std::sync::Arc;

use kafka_protocol::error::ResponseError as K;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use tinymq_broker::group::{COMMIT_OFFSETS_MAX, OFFSET_METADATA_BYTES_MAX};
use tinymq_protocol::{messages as m, OpCode};

use super::{admit_group, group_code, group_name};
use crate::context::Ctx;
use crate::errors::{classic_code, kafka_code_for, Resource};

/// (topic, partition) → Kafka error code of one partition's commit.
type Outcomes = HashMap<(String, i32), i16>;

pub(crate) async fn offset_commit(
    ctx: Arc<Ctx>,
    _version: i16,
    r: OffsetCommitRequest,
) -> OffsetCommitResponse {
    let group_id = group_name(&r.group_id);
    let mut outcomes = Outcomes::new();
    match admit_group(&ctx, &group_id).await {
        Err(code) => refuse_rest(&r, code, &mut outcomes),
        Ok(()) => {
            // Kafka's order (KafkaApis.handleOffsetCommitRequest): a partition of an unknown
            // topic is refused before the group coordinator checks the committer, and only
            // the known partitions go on to that check.
            refuse_unknown_partitions(&ctx, &r, &mut outcomes);
            if keys(&r).any(|key| !outcomes.contains_key(&key)) {
                match check_committer(&ctx, &group_id, &r) {
                    Err(code) => refuse_rest(&r, code, &mut outcomes),
                    Ok(()) => commit(&ctx, &group_id, &r, &mut outcomes).await,
                }
            }
        }
    }
    let topics = r
        .topics
        .into_iter()
        .map(|t| {
            let name = t.name.0.to_string();
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let code = outcomes
                        .get(&(name.clone(), p.partition_index))
                        .copied()
                        .unwrap_or(0);
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                })
                .collect();
            OffsetCommitResponseTopic::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}

/// Every (topic, partition) the commit names.
fn keys(r: &OffsetCommitRequest) -> impl Iterator<Item = (String, i32)> + '_ {
    r.topics.iter().flat_map(|t| {
        let topic = t.name.0.to_string();
        t.partitions
            .iter()
            .map(move |p| (topic.clone(), p.partition_index))
    })
}

/// Gives `code` to every partition without an outcome yet.
fn refuse_rest(r: &OffsetCommitRequest, code: i16, outcomes: &mut Outcomes) {
    for key in keys(r) {
        outcomes.entry(key).or_insert(code);
    }
}

/// Refuses the partitions of topics that do not exist, or past their topic's partitions,
/// with UNKNOWN_TOPIC_OR_PARTITION.
fn refuse_unknown_partitions(ctx: &Ctx, r: &OffsetCommitRequest, outcomes: &mut Outcomes) {
    for t in &r.topics {
        let topic = t.name.0.to_string();
        let count = ctx.state().partition_count(&topic);
        for p in &t.partitions {
            let known = u32::try_from(p.partition_index)
                .is_ok_and(|partition| count.is_some_and(|n| partition < n));
            if !known {
                let key = (topic.clone(), p.partition_index);
                outcomes.insert(key, K::UnknownTopicOrPartition.code());
            }
        }
    }
}

/// Kafka's rules for who may commit, kept by the coordinator's classic mode
/// ([`tinymq_broker::group::GroupCoordinator::classic_check_commit`]; a group without
/// classic members is an empty one).
fn check_committer(ctx: &Ctx, group_id: &str, r: &OffsetCommitRequest) -> Result<(), i16> {
    let checked = ctx.state().groups.classic_check_commit(
        group_id,
        r.member_id.as_str(),
        r.group_instance_id.as_ref().map(|s| s.as_str()),
        r.generation_id_or_member_epoch,
    );
    checked.map_err(|e| classic_code(Some(e)))
}

/// Commits the partitions without an outcome yet that pass the checks, natively, in
/// requests of at most the native limit; records every partition's outcome.
async fn commit(ctx: &Arc<Ctx>, group_id: &str, r: &OffsetCommitRequest, outcomes: &mut Outcomes) {
    let mut offsets = Vec::new();
    for t in &r.topics {
        let topic = t.name.0.to_string();
        for p in &t.partitions {
            let key = (topic.clone(), p.partition_index);
            if outcomes.contains_key(&key) {
                continue;
            }
            // Known partitions only are left: their index is a u32.
            let Ok(partition) = u32::try_from(p.partition_index) else {
                continue;
            };
            let metadata = p.committed_metadata.as_ref().map_or("", |s| s.as_str());
            let refusal = (metadata.len() > OFFSET_METADATA_BYTES_MAX)
                .then_some(K::OffsetMetadataTooLarge.code())
                .or((p.committed_offset < -1).then_some(K::InvalidRequest.code()));
            if let Some(code) = refusal {
                outcomes.insert(key, code);
                continue;
            }
            offsets.push(m::CommittedOffset {
                topic: topic.clone(),
                partition,
                offset: p.committed_offset,
                metadata: metadata.to_string(),
                error: None,
            });
        }
    }
    for chunk in offsets.chunks(COMMIT_OFFSETS_MAX) {
        let request = m::OffsetCommitRequest {
            group_id: group_id.to_string(),
            member_id: String::new(),
            generation: 0,
            offsets: chunk.to_vec(),
        };
        let answer: Result<m::OffsetCommitResponse, m::Error> =
            ctx.call(OpCode::OffsetCommit, &request).await;
        let (whole, each) = match answer {
            Ok(response) => (response.error, response.offsets),
            Err(e) => (Some(e), Vec::new()),
        };
        let whole = group_code(whole.as_ref());
        for o in chunk {
            outcomes.insert(key_of(o), whole);
        }
        for o in &each {
            if o.error.as_ref().is_some_and(|e| e.code != 0) {
                let code = kafka_code_for(o.error.as_ref(), Resource::Topic);
                outcomes.insert(key_of(o), code);
            }
        }
    }
}

fn key_of(o: &m::CommittedOffset) -> (String, i32) {
    (o.topic.clone(), i32::try_from(o.partition).unwrap_or(-1))
}

/// One topic's partitions asked for (`None`: every committed offset of the group).
type Asked = Option<Vec<(String, Vec<i32>)>>;
/// One topic's answer: (partition, offset, metadata, error code).
type Fetched = Vec<(String, Vec<(i32, i64, String, i16)>)>;

pub(crate) async fn offset_fetch(
    ctx: Arc<Ctx>,
    version: i16,
    r: OffsetFetchRequest,
) -> OffsetFetchResponse {
    if version >= 8 {
        let mut groups = Vec::new();
        for g in r.groups {
            let asked = g.topics.map(|ts| {
                ts.into_iter()
                    .map(|t| (t.name.0.to_string(), t.partition_indexes))
                    .collect()
            });
            let group = group_name(&g.group_id);
            let (code, fetched) = match fetch_group(&ctx, &group, asked, r.require_stable).await {
                Ok(fetched) => (0, fetched),
                Err(code) => (code, Vec::new()),
            };
            let topics = fetched
                .into_iter()
                .map(|(topic, parts)| {
                    let partitions = parts
                        .into_iter()
                        .map(|(p, offset, metadata, error)| {
                            OffsetFetchResponsePartitions::default()
                                .with_partition_index(p)
                                .with_committed_offset(offset)
                                .with_committed_leader_epoch(-1)
                                .with_metadata(Some(StrBytes::from_string(metadata)))
                                .with_error_code(error)
                        })
                        .collect();
                    OffsetFetchResponseTopics::default()
                        .with_name(TopicName(StrBytes::from_string(topic)))
                        .with_partitions(partitions)
                })
                .collect();
            groups.push(
                OffsetFetchResponseGroup::default()
                    .with_group_id(g.group_id)
                    .with_topics(topics)
                    .with_error_code(code),
            );
        }
        return OffsetFetchResponse::default().with_groups(groups);
    }
    let asked: Asked = r.topics.map(|ts| {
        ts.into_iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes))
            .collect()
    });
    let group = group_name(&r.group_id);
    let (code, fetched) = match fetch_group(&ctx, &group, asked.clone(), r.require_stable).await {
        Ok(fetched) => (0, fetched),
        // v1 has no top-level error: each partition asked for carries it.
        Err(code) if version < 2 => (code, refused_each(asked, code)),
        Err(code) => (code, Vec::new()),
    };
    let topics = fetched
        .into_iter()
        .map(|(topic, parts)| {
            let partitions = parts
                .into_iter()
                .map(|(p, offset, metadata, error)| {
                    OffsetFetchResponsePartition::default()
                        .with_partition_index(p)
                        .with_committed_offset(offset)
                        .with_committed_leader_epoch(-1)
                        .with_metadata(Some(StrBytes::from_string(metadata)))
                        .with_error_code(error)
                })
                .collect();
            OffsetFetchResponseTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic)))
                .with_partitions(partitions)
        })
        .collect();
    OffsetFetchResponse::default()
        .with_topics(topics)
        .with_error_code(code)
}

fn refused_each(asked: Asked, code: i16) -> Fetched {
    asked
        .unwrap_or_default()
        .into_iter()
        .map(|(t, ps)| {
            (
                t,
                ps.into_iter()
                    .map(|p| (p, -1, String::new(), code))
                    .collect(),
            )
        })
        .collect()
}

/// A group's committed offsets, natively (which checks the coordinator and the
/// principal's access); -1 where nothing is committed.
/// The group's committed offsets (`require_stable`, KIP-447: those an open transaction holds
/// are answered UNSTABLE_OFFSET_COMMIT, per partition).
async fn fetch_group(
    ctx: &Arc<Ctx>,
    group_id: &str,
    asked: Asked,
    require_stable: bool,
) -> Result<Fetched, i16> {
    let partitions = asked
        .iter()
        .flatten()
        .map(|(topic, ps)| m::TopicPartitions {
            topic: topic.clone(),
            partitions: ps.iter().filter_map(|p| u32::try_from(*p).ok()).collect(),
        })
        .filter(|t| !t.partitions.is_empty())
        .collect::<Vec<_>>();
    if asked.as_ref().is_some_and(|a| a.is_empty()) {
        return Ok(Vec::new());
    }
    let request = m::OffsetFetchRequest {
        group_id: group_id.to_string(),
        partitions,
        require_stable,
    };
    let response: m::OffsetFetchResponse = ctx
        .call(OpCode::OffsetFetch, &request)
        .await
        .map_err(|e| group_code(Some(&e)))?;
    if response.error.as_ref().is_some_and(|e| e.code != 0) {
        return Err(group_code(response.error.as_ref()));
    }
    let mut found: HashMap<(String, i32), (i64, String, i16)> = HashMap::new();
    let mut order: Vec<(String, i32)> = Vec::new();
    for o in response.offsets {
        let key = key_of(&o);
        let error = kafka_code_for(o.error.as_ref(), Resource::Topic);
        order.push(key.clone());
        found.insert(key, (o.offset, o.metadata, error));
    }
    let wanted: Vec<(String, i32)> = match asked {
        None => order,
        Some(asked) => asked
            .into_iter()
            .flat_map(|(t, ps)| ps.into_iter().map(move |p| (t.clone(), p)))
            .collect(),
    };
    let mut by_topic: Fetched = Vec::new();
    for (topic, p) in wanted {
        let (offset, metadata, error) =
            found
                .remove(&(topic.clone(), p))
                .unwrap_or((-1, String::new(), 0));
        match by_topic.last_mut() {
            Some((t, parts)) if *t == topic => parts.push((p, offset, metadata, error)),
            _ => by_topic.push((topic, vec![(p, offset, metadata, error)])),
        }
    }
    Ok(by_topic)
}
