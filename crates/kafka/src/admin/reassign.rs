//! Leadership and replica placement through Kafka's tools: ElectLeaders (v0..=2, what
//! `kafka-leader-election` sends), AlterPartitionReassignments (v0..=1) and
//! ListPartitionReassignments (v0) (`kafka-reassign-partitions --execute/--verify/--cancel`
//! and `--list`), onto the MetaServer's own commands: `ElectPreferredLeaders` for a topic, and
//! `ReassignPartition` per partition (the same reassignment `tinymq cluster rebalance` and
//! `broker drain` start: new replicas are added, and once they are all in sync the others
//! leave; the partition stays writable throughout).
//!
//! These have no native request; they need ALTER (DESCRIBE to list) on the cluster, checked
//! against the same ACLs as the native port. Differences from Kafka: a preferred election
//! elects the preferred replica of every partition of each topic named (the MetaServer also
//! does so on its own once a broker has settled); an unclean election is a topic setting in
//! tinymq (`unclean_leader_election`), not a request, and is refused.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError as K;
use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::*;
use tinymq_auth::AclOperation;
use tinymq_meta::authorize::Permission;
use tinymq_meta::image::PartitionRecord;
use tinymq_meta::{Command, MetadataImage};

use super::{text, too_many_entries};
use crate::context::Ctx;
use crate::errors::{kafka_code_for, Resource};

/// ElectLeaders' election types.
const ELECTION_PREFERRED: i8 = 0;
/// Longest a request waits for its elections or reassignment starts to reach this broker's
/// image (a client's own timeout shortens it).
const VISIBLE_WAIT_MAX: Duration = Duration::from_secs(30);

type Refused = (i16, String);

/// The cluster permission check, as a refusal with the cluster's Kafka code.
fn check_cluster(ctx: &Ctx, operation: AclOperation) -> Result<(), Refused> {
    let permission = Permission::cluster(operation);
    ctx.state()
        .check_permission(&ctx.peer.principal, permission)
        .map_err(|e| (kafka_code_for(Some(&e), Resource::Cluster), e.message))
}

fn visible_wait(timeout_ms: i32) -> Duration {
    let asked = Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0));
    if asked.is_zero() {
        VISIBLE_WAIT_MAX
    } else {
        asked.min(VISIBLE_WAIT_MAX)
    }
}

fn partition_of<'i>(
    image: &'i MetadataImage,
    topic: &str,
    index: i32,
) -> Option<&'i PartitionRecord> {
    let index = usize::try_from(index).ok()?;
    image.topics.get(topic)?.partitions.get(index)
}

/// The partitions an election names (`None`: every partition of every user topic).
fn named_partitions(image: &MetadataImage, request: &ElectLeadersRequest) -> Vec<(String, i32)> {
    match &request.topic_partitions {
        Some(topics) => topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.topic.as_str().to_string(), *p))
            })
            .collect(),
        None => image
            .user_topic_names()
            .into_iter()
            .flat_map(|name| {
                let count = image.topics.get(&name).map_or(0, |t| t.partitions.len());
                (0..count).map(move |i| (name.clone(), i32::try_from(i).unwrap_or(i32::MAX)))
            })
            .collect(),
    }
}

fn leads_preferred(p: &PartitionRecord) -> bool {
    p.leader.is_some() && p.leader == p.replicas.first().copied()
}

/// Whether an election can hand `p` to its first replica now: live and in sync (the rule of
/// the MetaServer's `ElectPreferredLeaders`).
fn preferred_available(p: &PartitionRecord, live: &[u32]) -> bool {
    p.replicas
        .first()
        .is_some_and(|first| p.isr.contains(first) && live.contains(first))
}

/// A whole request refused: at v1+ as the top-level error; v0 has none, so there every named
/// partition carries it.
fn election_refused(
    version: i16,
    request: &ElectLeadersRequest,
    code: i16,
) -> ElectLeadersResponse {
    if version >= 1 {
        return ElectLeadersResponse::default().with_error_code(code);
    }
    let results = request
        .topic_partitions
        .iter()
        .flatten()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    PartitionResult::default()
                        .with_partition_id(*p)
                        .with_error_code(code)
                })
                .collect();
            ReplicaElectionResult::default()
                .with_topic(t.topic.clone())
                .with_partition_result(partitions)
        })
        .collect();
    ElectLeadersResponse::default().with_replica_election_results(results)
}

pub(crate) async fn elect_leaders(
    ctx: Arc<Ctx>,
    version: i16,
    request: ElectLeadersRequest,
) -> ElectLeadersResponse {
    // Counted before anything is copied out of the request.
    let count: usize = request
        .topic_partitions
        .iter()
        .flatten()
        .map(|t| t.partitions.len())
        .sum();
    let up_front = too_many_entries(count)
        .map(Err)
        .unwrap_or_else(|| check_cluster(&ctx, AclOperation::Alter));
    if let Err((code, _)) = up_front {
        return election_refused(version, &request, code);
    }
    let cluster = &ctx.state().cluster;
    let before = cluster.image();
    let live = before.live_brokers();
    let every_partition = request.topic_partitions.is_none();
    let named = named_partitions(&before, &request);
    // Answered before any election: all but the partitions an election can move now.
    let mut refused: Vec<Option<Refused>> = Vec::with_capacity(named.len());
    let mut topics: BTreeSet<&str> = BTreeSet::new();
    for (topic, index) in &named {
        refused.push(match partition_of(&before, topic, *index) {
            None => Some((
                K::UnknownTopicOrPartition.code(),
                "no such partition".into(),
            )),
            Some(_) if request.election_type != ELECTION_PREFERRED => Some((
                K::InvalidRequest.code(),
                "only preferred elections: an unclean election is the topic setting \
                 unclean_leader_election in tinymq"
                    .into(),
            )),
            Some(p) if leads_preferred(p) => Some((
                K::ElectionNotNeeded.code(),
                "the preferred replica already leads".into(),
            )),
            Some(p) if !preferred_available(p, &live) => Some((
                K::PreferredLeaderNotAvailable.code(),
                "the preferred replica is not live and in sync".into(),
            )),
            Some(_) => {
                topics.insert(topic);
                None
            }
        });
    }
    let mut failed: Option<Refused> = None;
    for topic in &topics {
        let command = Command::ElectPreferredLeaders {
            topic: Some(topic.to_string()),
            except_brokers: Vec::new(),
        };
        if let Err(e) = cluster.write(command).await {
            failed = Some((kafka_code_for(Some(&e), Resource::Cluster), e.message));
        }
    }
    let all_elected = |image: &MetadataImage| {
        named.iter().zip(&refused).all(|((t, i), r)| {
            r.is_some() || partition_of(image, t, *i).is_none_or(leads_preferred)
        })
    };
    if !topics.is_empty() && failed.is_none() {
        // Within half the client's timeout, so the answer reaches it before it gives up.
        let wait = visible_wait(request.timeout_ms) / 2;
        cluster.wait_until(wait, all_elected).await;
    }
    let after = cluster.image();
    let mut results: Vec<ReplicaElectionResult> = Vec::new();
    for ((topic, index), refused) in named.iter().zip(refused) {
        // Asked for every partition, Kafka leaves out those that needed no election.
        let not_needed = refused
            .as_ref()
            .is_some_and(|(code, _)| *code == K::ElectionNotNeeded.code());
        if every_partition && not_needed {
            continue;
        }
        let outcome = refused.or_else(|| match partition_of(&after, topic, *index) {
            Some(p) if leads_preferred(p) => None,
            _ => Some(failed.clone().unwrap_or_else(|| {
                (
                    K::PreferredLeaderNotAvailable.code(),
                    "the preferred replica did not take over in time".into(),
                )
            })),
        });
        let result = PartitionResult::default().with_partition_id(*index);
        let result = match outcome {
            None => result,
            Some((code, why)) => result
                .with_error_code(code)
                .with_error_message(Some(text(why))),
        };
        match results.last_mut() {
            Some(last) if last.topic.as_str() == topic => last.partition_result.push(result),
            _ => results.push(
                ReplicaElectionResult::default()
                    .with_topic(TopicName(text(topic.clone())))
                    .with_partition_result(vec![result]),
            ),
        }
    }
    ElectLeadersResponse::default().with_replica_election_results(results)
}

pub(crate) async fn alter_partition_reassignments(
    ctx: Arc<Ctx>,
    _version: i16,
    request: AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
    let response = AlterPartitionReassignmentsResponse::default()
        .with_allow_replication_factor_change(request.allow_replication_factor_change);
    let count: usize = request.topics.iter().map(|t| t.partitions.len()).sum();
    let up_front = too_many_entries(count)
        .map(Err)
        .unwrap_or_else(|| check_cluster(&ctx, AclOperation::Alter));
    if let Err((code, why)) = up_front {
        // Every requested partition carries the refusal too: Kafka's AdminClient expects an
        // answer for each (as Kafka's own error response gives).
        let responses = request
            .topics
            .iter()
            .map(|t| {
                let partitions = t
                    .partitions
                    .iter()
                    .map(|p| {
                        ReassignablePartitionResponse::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(code)
                            .with_error_message(Some(text(why.clone())))
                    })
                    .collect();
                ReassignableTopicResponse::default()
                    .with_name(t.name.clone())
                    .with_partitions(partitions)
            })
            .collect();
        return response
            .with_error_code(code)
            .with_error_message(Some(text(why)))
            .with_responses(responses);
    }
    let cluster = &ctx.state().cluster;
    let mut started: Vec<(String, u32, Vec<u32>)> = Vec::new();
    let mut responses = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            let outcome = reassign_one(
                &ctx,
                topic.name.as_str(),
                p.partition_index,
                p.replicas.as_deref(),
                request.allow_replication_factor_change,
            )
            .await;
            let answer =
                ReassignablePartitionResponse::default().with_partition_index(p.partition_index);
            partitions.push(match outcome {
                Ok(target) => {
                    started.push((
                        topic.name.as_str().to_string(),
                        p.partition_index as u32,
                        target,
                    ));
                    answer
                }
                Err((code, why)) => answer
                    .with_error_code(code)
                    .with_error_message(Some(text(why))),
            });
        }
        responses.push(
            ReassignableTopicResponse::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions),
        );
    }
    // Answered once this broker's image has every started move, so that a tool listing or
    // verifying through this broker next sees them.
    let visible = |image: &MetadataImage| {
        started.iter().all(|(t, i, target)| {
            image
                .topics
                .get(t)
                .and_then(|topic| topic.partitions.get(*i as usize))
                .is_none_or(|p| p.target_replicas() == *target)
        })
    };
    if !started.is_empty() {
        cluster
            .wait_until(visible_wait(request.timeout_ms), visible)
            .await;
    }
    response.with_responses(responses)
}

/// Starts (or, with no replicas, cancels) one partition's reassignment; the target replicas
/// on success.
async fn reassign_one(
    ctx: &Ctx,
    topic: &str,
    index: i32,
    replicas: Option<&[BrokerId]>,
    allow_replication_factor_change: bool,
) -> Result<Vec<u32>, Refused> {
    let image = ctx.state().cluster.image();
    let Some(p) = partition_of(&image, topic, index) else {
        return Err((
            K::UnknownTopicOrPartition.code(),
            "no such partition".into(),
        ));
    };
    let Some(ids) = replicas else {
        // A cancellation, decided on the MetaServer's image (this broker's may be behind).
        let command = Command::CancelReassignment {
            topic: topic.to_string(),
            partition: index as u32,
        };
        return match ctx.state().cluster.write(command).await {
            Ok(tinymq_meta::Reply::Partition(p)) => Ok(p.target_replicas()),
            Ok(_) => Ok(Vec::new()),
            Err(e) => {
                let code = match tinymq_protocol::ErrorCode::from_code(e.code) {
                    Some(tinymq_protocol::ErrorCode::INVALID_REQUEST) => {
                        K::NoReassignmentInProgress.code()
                    }
                    _ => kafka_code_for(Some(&e), Resource::Cluster),
                };
                Err((code, e.message))
            }
        };
    };
    let target: Vec<u32> = ids
        .iter()
        .map(|b| u32::try_from(b.0))
        .collect::<Result<_, _>>()
        .map_err(|_| {
            (
                K::InvalidReplicaAssignment.code(),
                format!("a broker id below 0 in {ids:?}"),
            )
        })?;
    if !allow_replication_factor_change && target.len() != p.target_replicas().len() {
        return Err((
            K::InvalidReplicationFactor.code(),
            format!(
                "{} replicas instead of {}, and the request does not allow a change of \
                 replication factor",
                target.len(),
                p.target_replicas().len()
            ),
        ));
    }
    let command = Command::ReassignPartition {
        topic: topic.to_string(),
        partition: index as u32,
        target_replicas: target.clone(),
    };
    match ctx.state().cluster.write(command).await {
        Ok(_) => Ok(target),
        Err(e) => {
            let code = match tinymq_protocol::ErrorCode::from_code(e.code) {
                Some(tinymq_protocol::ErrorCode::INVALID_REQUEST) => {
                    K::InvalidReplicaAssignment.code()
                }
                _ => kafka_code_for(Some(&e), Resource::Cluster),
            };
            Err((code, e.message))
        }
    }
}

pub(crate) async fn list_partition_reassignments(
    ctx: Arc<Ctx>,
    _version: i16,
    request: ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    if let Err((code, why)) = check_cluster(&ctx, AclOperation::Describe) {
        return ListPartitionReassignmentsResponse::default()
            .with_error_code(code)
            .with_error_message(Some(text(why)));
    }
    let asked: usize = request
        .topics
        .iter()
        .flatten()
        .map(|t| 1 + t.partition_indexes.len())
        .sum();
    if let Some((code, why)) = too_many_entries(asked) {
        return ListPartitionReassignmentsResponse::default()
            .with_error_code(code)
            .with_error_message(Some(text(why)));
    }
    let image = ctx.state().cluster.image();
    let ongoing = |p: &PartitionRecord, index: usize| {
        let ids = |list: &[u32]| list.iter().map(|b| BrokerId(*b as i32)).collect();
        OngoingPartitionReassignment::default()
            .with_partition_index(i32::try_from(index).unwrap_or(i32::MAX))
            .with_replicas(ids(&p.replicas))
            .with_adding_replicas(ids(&p.adding_replicas))
            .with_removing_replicas(ids(&p.removing_replicas))
    };
    let mut topics = Vec::new();
    let mut listed: BTreeSet<String> = BTreeSet::new();
    let mut add = |name: &str, wanted: Option<&[i32]>| {
        let Some(topic) = image.topics.get(name) else {
            return;
        };
        if !listed.insert(name.to_string()) {
            return;
        }
        let wanted: Option<BTreeSet<usize>> =
            wanted.map(|w| w.iter().filter_map(|x| usize::try_from(*x).ok()).collect());
        let partitions: Vec<_> = topic
            .partitions
            .iter()
            .enumerate()
            .filter(|(i, p)| p.is_reassigning() && wanted.as_ref().is_none_or(|w| w.contains(i)))
            .map(|(i, p)| ongoing(p, i))
            .collect();
        if !partitions.is_empty() {
            topics.push(
                OngoingTopicReassignment::default()
                    .with_name(TopicName(text(name)))
                    .with_partitions(partitions),
            );
        }
    };
    match &request.topics {
        Some(asked) => {
            for t in asked {
                add(t.name.as_str(), Some(&t.partition_indexes));
            }
        }
        None => {
            for name in image.user_topic_names() {
                add(&name, None);
            }
        }
    }
    ListPartitionReassignmentsResponse::default().with_topics(topics)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_timeout_shortens_the_wait_and_none_means_the_longest() {
        assert_eq!(visible_wait(0), VISIBLE_WAIT_MAX);
        assert_eq!(visible_wait(-5), VISIBLE_WAIT_MAX);
        assert_eq!(visible_wait(250), Duration::from_millis(250));
        assert_eq!(visible_wait(i32::MAX), VISIBLE_WAIT_MAX);
    }

    #[test]
    fn the_preferred_replica_is_the_first_and_must_lead() {
        let p = |leader: Option<u32>| PartitionRecord {
            replicas: vec![2, 1, 3],
            leader,
            ..PartitionRecord::default()
        };
        assert!(leads_preferred(&p(Some(2))));
        assert!(!leads_preferred(&p(Some(1))));
        assert!(!leads_preferred(&p(None)));
    }
}
