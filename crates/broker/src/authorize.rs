//! The broker's side of authorization (issue 16): the [`Access`] of the broker's current image,
//! and the per-topic parts of requests that name several topics. The dispatcher
//! (`connection.rs`) checks every request up front with
//! [`tinymq_meta::authorize::Access::require_request`], then, for the operations listed here,
//! takes the topics the principal may not use out of the request (refused in the answer's
//! per-partition errors) or out of the answer (list and metadata answers show only what the
//! principal may DESCRIBE).

use bytes::Bytes;
use tinymq_auth::{AclOperation, Principal};
use tinymq_meta::authorize::{Access, Permission};
use tinymq_protocol::messages as m;

use crate::fetch_frame::Records;
use crate::service::read::PartitionRead;
use crate::state::BrokerState;

/// The access rules of the broker's current metadata image (rebuilt when it changes).
pub(crate) fn access(state: &BrokerState) -> Access {
    state
        .authorization
        .current(|| state.cluster.version(), || state.cluster.image())
}

/// Takes out of `entries` those whose topic `p` may not `operation`, each turned into its
/// refusal by `refuse`. The common case (every topic allowed) moves nothing.
fn split<T, R>(
    access: &Access,
    p: &Principal,
    operation: AclOperation,
    entries: &mut Vec<T>,
    topic: impl Fn(&T) -> &str,
    refuse: impl Fn(T, m::Error) -> R,
) -> Vec<R> {
    if !access.is_enforced() {
        return Vec::new();
    }
    // No allocation on this path: a request's partitions come grouped by topic, so the last
    // topic's answer is reused.
    let mut last: Option<(&str, bool)> = None;
    let all_allowed = entries.iter().all(|e| {
        let name = topic(e);
        match last {
            Some((previous, allowed)) if previous == name => allowed,
            _ => {
                let allowed = access.allows(p, Permission::topic(name, operation));
                last = Some((name, allowed));
                allowed
            }
        }
    });
    if all_allowed {
        return Vec::new();
    }
    let mut last = None;
    let mut refused = Vec::new();
    for entry in std::mem::take(entries) {
        match access.check_topic_cached(p, topic(&entry), operation, &mut last) {
            Ok(()) => entries.push(entry),
            Err(error) => refused.push(refuse(entry, error)),
        }
    }
    refused
}

/// Produce: the partitions of topics `p` may not WRITE, refused.
pub(crate) fn produce(
    access: &Access,
    p: &Principal,
    request: &mut m::ProduceRequest,
) -> Vec<m::ProducePartitionResult> {
    split(
        access,
        p,
        AclOperation::Write,
        &mut request.partitions,
        |pp| &pp.topic,
        |pp, error| m::ProducePartitionResult {
            topic: pp.topic,
            partition: pp.partition,
            error: Some(error),
            base_offset: -1,
            log_append_time_ms: -1,
            log_start_offset: -1,
            current_leader: 0,
        },
    )
}

/// DeleteRecords: the partitions of topics `p` may not DELETE, refused before anything is
/// deleted.
pub(crate) fn delete_records(
    access: &Access,
    p: &Principal,
    request: &mut m::DeleteRecordsRequest,
) -> Vec<m::DeleteRecordsPartitionResult> {
    split(
        access,
        p,
        AclOperation::Delete,
        &mut request.partitions,
        |dp| &dp.topic,
        |dp, error| m::DeleteRecordsPartitionResult {
            topic: dp.topic,
            partition: dp.partition,
            error: Some(error),
            low_watermark: -1,
            current_leader: 0,
        },
    )
}

/// DeleteGroup with `offsets`: the partitions of topics `p` may not READ, refused (and left
/// out of the request) before anything is deleted.
pub(crate) fn delete_offsets(
    access: &Access,
    p: &Principal,
    request: &mut m::DeleteGroupRequest,
) -> Vec<m::CommittedOffset> {
    let mut last = None;
    let mut refused = Vec::new();
    for topic in &mut request.offsets {
        if let Err(error) =
            access.check_topic_cached(p, &topic.topic, AclOperation::Read, &mut last)
        {
            refused.extend(
                topic
                    .partitions
                    .drain(..)
                    .map(|partition| m::CommittedOffset {
                        topic: topic.topic.clone(),
                        partition,
                        offset: -1,
                        metadata: String::new(),
                        error: Some(error.clone()),
                    }),
            );
        }
    }
    request.offsets.retain(|t| !t.partitions.is_empty());
    refused
}

/// A consumer's fetch: the partitions of topics `p` may not READ, refused.
pub(crate) fn fetch(
    access: &Access,
    p: &Principal,
    request: &mut m::FetchRequest,
) -> Vec<PartitionRead> {
    split(
        access,
        p,
        AclOperation::Read,
        &mut request.partitions,
        |fp| &fp.topic,
        |fp, error| {
            let result = m::FetchPartitionResult {
                topic: fp.topic,
                partition: fp.partition,
                error: Some(error),
                high_watermark: -1,
                log_start_offset: -1,
                ..Default::default()
            };
            (result, Records::Bytes(Bytes::new()))
        },
    )
}

/// Groups holding route progress (`route/progress.rs`): only nodes (the route runners) and
/// principals with ALTER on the cluster (an administrator resetting a route) commit to them,
/// since an offset there moves a route (skips or repeats copies).
const ROUTE_GROUP_PREFIX: &str = "__route.";

/// DeleteGroup (the group's DELETE is checked up front): a route's progress group also needs
/// a node or ALTER on the cluster, like a commit to it (deleting it restarts the route's
/// recovery from a full scan of its target).
pub(crate) fn delete_group(access: &Access, p: &Principal, group_id: &str) -> Result<(), m::Error> {
    if group_id.starts_with(ROUTE_GROUP_PREFIX) && !p.is_node() {
        access.check(p, Permission::cluster(AclOperation::Alter))?;
    }
    Ok(())
}

/// OffsetCommit (the group's READ is checked up front): the offsets of topics `p` may not READ,
/// refused; all of them for a route's progress group unless `p` may ALTER the cluster.
pub(crate) fn offset_commit(
    access: &Access,
    p: &Principal,
    request: &mut m::OffsetCommitRequest,
) -> Vec<m::CommittedOffset> {
    if request.group_id.starts_with(ROUTE_GROUP_PREFIX) && !p.is_node() {
        if let Err(error) = access.check(p, Permission::cluster(AclOperation::Alter)) {
            return std::mem::take(&mut request.offsets)
                .into_iter()
                .map(|c| m::CommittedOffset {
                    error: Some(error.clone()),
                    ..c
                })
                .collect();
        }
    }
    split(
        access,
        p,
        AclOperation::Read,
        &mut request.offsets,
        |c| &c.topic,
        |c, error| m::CommittedOffset {
            error: Some(error),
            ..c
        },
    )
}

/// TxnOffsetCommit (the transactional id's WRITE and the group's READ are checked up front):
/// the offsets of topics `p` may not READ, refused.
pub(crate) fn txn_offset_commit(
    access: &Access,
    p: &Principal,
    request: &mut m::TxnOffsetCommitRequest,
) -> Vec<m::CommittedOffset> {
    split(
        access,
        p,
        AclOperation::Read,
        &mut request.offsets,
        |c| &c.topic,
        |c, error| m::CommittedOffset {
            error: Some(error),
            ..c
        },
    )
}

/// DescribeProducers: the answers for topics `p` may not READ, replaced by refusals.
pub(crate) fn describe_producers(
    access: &Access,
    p: &Principal,
    mut response: m::DescribeProducersResponse,
) -> m::DescribeProducersResponse {
    let mut last = None;
    for result in &mut response.partitions {
        if let Err(error) =
            access.check_topic_cached(p, &result.topic, AclOperation::Read, &mut last)
        {
            result.error = Some(error);
            result.producers.clear();
        }
    }
    response
}

/// ListOffsets: the answers for topics `p` may not DESCRIBE, replaced by refusals (finding
/// an offset has no effect, so the answer is filtered rather than the request).
pub(crate) fn list_offsets(
    access: &Access,
    p: &Principal,
    mut response: m::ListOffsetsResponse,
) -> m::ListOffsetsResponse {
    let mut last = None;
    for result in &mut response.partitions {
        if let Err(error) =
            access.check_topic_cached(p, &result.topic, AclOperation::Describe, &mut last)
        {
            *result = m::ListOffsetsPartitionResult {
                topic: std::mem::take(&mut result.topic),
                partition: result.partition,
                error: Some(error),
                offset: -1,
                timestamp: -1,
                current_leader: 0,
            };
        }
    }
    response
}

/// Metadata: every topic (`all`) → only those `p` may DESCRIBE; named topics → a refusal for
/// each `p` may not DESCRIBE, existing or not.
pub(crate) fn metadata(
    access: &Access,
    p: &Principal,
    all: bool,
    mut response: m::MetadataResponse,
) -> m::MetadataResponse {
    if !access.is_enforced() {
        return response;
    }
    if all {
        response
            .topics
            .retain(|t| access.describes_topic(p, &t.name));
        return response;
    }
    for topic in &mut response.topics {
        if let Err(error) = access.check(p, Permission::topic(&topic.name, AclOperation::Describe))
        {
            topic.error = Some(error);
            topic.partitions.clear();
        }
    }
    response
}

/// OffsetFetch (the group's DESCRIBE is checked up front): every offset of the group (`all`) →
/// only those of topics `p` may DESCRIBE; named partitions → a refusal for each such topic.
pub(crate) fn offset_fetch(
    access: &Access,
    p: &Principal,
    all: bool,
    mut response: m::OffsetFetchResponse,
) -> m::OffsetFetchResponse {
    if !access.is_enforced() {
        return response;
    }
    if all {
        response
            .offsets
            .retain(|c| access.describes_topic(p, &c.topic));
        return response;
    }
    let mut last = None;
    for c in &mut response.offsets {
        if let Err(error) =
            access.check_topic_cached(p, &c.topic, AclOperation::Describe, &mut last)
        {
            c.error = Some(error);
            c.offset = -1;
            c.metadata.clear();
        }
    }
    response
}

/// DescribeGroup (the group's DESCRIBE is checked up front): the committed offsets, and the
/// topics of the members' subscriptions and assignments, only of topics `p` may DESCRIBE (a
/// group's description must not reveal other topics' names or progress).
pub(crate) fn describe_group(
    access: &Access,
    p: &Principal,
    mut response: m::DescribeGroupResponse,
) -> m::DescribeGroupResponse {
    if !access.is_enforced() {
        return response;
    }
    response
        .offsets
        .retain(|c| access.describes_topic(p, &c.topic));
    for member in &mut response.members {
        member.topics.retain(|t| access.describes_topic(p, t));
        member
            .assignment
            .retain(|a| access.describes_topic(p, &a.topic));
    }
    response
}

/// ListTopics: only the topics `p` may DESCRIBE.
pub(crate) fn list_topics(
    access: &Access,
    p: &Principal,
    mut response: m::ListTopicsResponse,
) -> m::ListTopicsResponse {
    if access.is_enforced() {
        response.names.retain(|t| access.describes_topic(p, t));
    }
    response
}

/// ListGroups: only the groups `p` may DESCRIBE.
pub(crate) fn list_groups(
    access: &Access,
    p: &Principal,
    mut response: m::ListGroupsResponse,
) -> m::ListGroupsResponse {
    if access.is_enforced() {
        response
            .group_ids
            .retain(|g| access.allows(p, Permission::group(g, AclOperation::Describe)));
        response
            .groups
            .retain(|g| access.allows(p, Permission::group(&g.group_id, AclOperation::Describe)));
    }
    response
}

#[cfg(test)]
mod tests;
