//! FindCoordinator, ListGroups, DescribeGroups and DeleteGroups: native groups and Kafka
//! groups, one namespace. The coordinator is the broker native FindCoordinator names, told
//! by its Kafka address.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use kafka_protocol::error::ResponseError as K;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use tinymq_broker::group::classic::ClassicSummary;
use tinymq_broker::group::GROUP_TYPE_KAFKA;
use tinymq_protocol::{messages as m, ErrorCode, OpCode};

use super::{consumer_protocol, group_code, group_name};
use crate::context::Ctx;
use crate::errors::message_of;
use crate::metadata::kafka_broker;

fn text(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

/// FindCoordinator's key types.
const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;

pub(crate) async fn find_coordinator(
    ctx: Arc<Ctx>,
    version: i16,
    r: FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    if version >= 4 {
        let mut coordinators = Vec::with_capacity(r.coordinator_keys.len());
        for key in r.coordinator_keys {
            coordinators.push(find_one(&ctx, r.key_type, key).await);
        }
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    let c = find_one(&ctx, r.key_type, r.key).await;
    FindCoordinatorResponse::default()
        .with_error_code(c.error_code)
        .with_error_message(c.error_message)
        .with_node_id(c.node_id)
        .with_host(c.host)
        .with_port(c.port)
}

async fn find_one(ctx: &Arc<Ctx>, key_type: i8, key: StrBytes) -> Coordinator {
    let refuse = |code: i16, why: String| {
        Coordinator::default()
            .with_key(key.clone())
            .with_node_id(BrokerId(-1))
            .with_port(-1)
            .with_error_code(code)
            .with_error_message(Some(text(why)))
    };
    let key_type = match key_type {
        KEY_TYPE_GROUP => 0,
        KEY_TYPE_TRANSACTION => 1,
        other => {
            return refuse(
                K::InvalidRequest.code(),
                format!("unknown key type {other}"),
            )
        }
    };
    let code_of = |e: Option<&m::Error>| match key_type {
        0 => group_code(e),
        _ => crate::txn::txn_code(e),
    };
    let request = m::FindCoordinatorRequest {
        group_id: key.to_string(),
        key_type,
    };
    let found: m::FindCoordinatorResponse = match ctx.call(OpCode::FindCoordinator, &request).await
    {
        Ok(found) => found,
        Err(e) => return refuse(code_of(Some(&e)), e.message),
    };
    if found.error.as_ref().is_some_and(|e| e.code != 0) {
        let why = message_of(found.error.as_ref()).unwrap_or_default();
        return refuse(code_of(found.error.as_ref()), why);
    }
    let Some((host, port)) = kafka_broker(ctx, found.node_id) else {
        return refuse(
            K::CoordinatorNotAvailable.code(),
            format!(
                "the coordinator, broker {}, has no Kafka listener",
                found.node_id
            ),
        );
    };
    Coordinator::default()
        .with_key(key)
        .with_node_id(crate::metadata::broker_id(found.node_id))
        .with_host(text(host))
        .with_port(i32::from(port))
}

/// A native group state as Kafka names it. Native members rebalance by heartbeats, never
/// waiting in a join phase.
fn native_state(state: &str) -> &'static str {
    match state {
        "stable" => "Stable",
        "rebalancing" => "PreparingRebalance",
        _ => "Empty",
    }
}

pub(crate) async fn list_groups(
    ctx: Arc<Ctx>,
    version: i16,
    r: ListGroupsRequest,
) -> ListGroupsResponse {
    let native: m::ListGroupsResponse =
        match ctx.call(OpCode::ListGroups, &m::ListGroupsRequest {}).await {
            Ok(native) => native,
            Err(e) => return ListGroupsResponse::default().with_error_code(group_code(Some(&e))),
        };
    if native.error.as_ref().is_some_and(|e| e.code != 0) {
        return ListGroupsResponse::default().with_error_code(group_code(native.error.as_ref()));
    }
    // (state, protocol type) by group; Kafka groups with members take precedence.
    let mut listed: BTreeMap<String, (&'static str, String)> = BTreeMap::new();
    for group_id in native.group_ids {
        let state = if version >= 4 {
            describe_native(&ctx, &group_id)
                .await
                .map_or("Empty", |d| native_state(&d.state))
        } else {
            "Empty"
        };
        let protocol_type = if state == "Empty" { "" } else { "consumer" };
        listed.insert(group_id, (state, protocol_type.to_string()));
    }
    // The native answer lists only the groups the principal may DESCRIBE (its `groups`
    // include the classic ones, type "kafka"): those are the classic groups shown, with
    // Kafka's names for their states.
    let classic = ctx.state().groups.classic_groups();
    for (group_id, state, protocol_type) in visible_classic(&native.groups, classic) {
        if state != "Empty" || !listed.contains_key(&group_id) {
            listed.insert(group_id, (state, protocol_type));
        }
    }
    let wanted = |state: &str| {
        r.states_filter.is_empty()
            || r.states_filter
                .iter()
                .any(|s| s.eq_ignore_ascii_case(state))
    };
    let groups = listed
        .into_iter()
        .filter(|(_, (state, _))| wanted(state))
        .map(|(group_id, (state, protocol_type))| {
            ListedGroup::default()
                .with_group_id(GroupId(text(group_id)))
                .with_protocol_type(text(protocol_type))
                .with_group_state(text(state))
        })
        .collect();
    ListGroupsResponse::default().with_groups(groups)
}

/// The classic groups `listing` (the native ListGroups' answer, filtered for the principal)
/// shows as Kafka groups: (id, Kafka state, protocol type).
fn visible_classic(
    listing: &[m::GroupListing],
    classic: Vec<ClassicSummary>,
) -> Vec<(String, &'static str, String)> {
    let shown: HashSet<&str> = listing
        .iter()
        .filter(|g| g.group_type == GROUP_TYPE_KAFKA)
        .map(|g| g.group_id.as_str())
        .collect();
    classic
        .into_iter()
        .filter(|g| shown.contains(g.group_id.as_str()))
        .map(|g| (g.group_id, g.phase.kafka_name(), g.protocol_type))
        .collect()
}

/// The native description of a group; `None` if it is unknown natively.
async fn describe_native(ctx: &Arc<Ctx>, group_id: &str) -> Option<m::DescribeGroupResponse> {
    describe_native_checked(ctx, group_id).await.ok().flatten()
}

/// The native description (`Ok(None)`: no such native group), or the Kafka error that
/// refused it (not coordinator, not authorized).
async fn describe_native_checked(
    ctx: &Arc<Ctx>,
    group_id: &str,
) -> Result<Option<m::DescribeGroupResponse>, i16> {
    let request = m::DescribeGroupRequest {
        group_id: group_id.to_string(),
    };
    let described: m::DescribeGroupResponse = ctx
        .call(OpCode::DescribeGroup, &request)
        .await
        .map_err(|e| group_code(Some(&e)))?;
    match &described.error {
        None => Ok(Some(described)),
        Some(e) if e.code == 0 => Ok(Some(described)),
        Some(e) if e.code == u32::from(ErrorCode::GROUP_ID_NOT_FOUND.code()) => Ok(None),
        Some(e) => Err(group_code(Some(e))),
    }
}

/// Most bytes of members' metadata and assignments one DescribeGroups answer carries: a
/// request naming a group (at up to `GROUP_BYTES_MAX`, 16 MiB) many times must not make an
/// answer of gigabytes. Four groups at their own limit fit; the first group always does.
pub const DESCRIBE_GROUPS_RESPONSE_BYTES_MAX: usize = 64 << 20;

pub(crate) async fn describe_groups(
    ctx: Arc<Ctx>,
    _version: i16,
    r: DescribeGroupsRequest,
) -> DescribeGroupsResponse {
    let mut groups = Vec::with_capacity(r.groups.len());
    let mut bytes_left = DESCRIBE_GROUPS_RESPONSE_BYTES_MAX;
    for group in r.groups {
        let described = describe_one(&ctx, group).await;
        groups.push(within_answer_budget(
            described,
            &mut bytes_left,
            groups.is_empty(),
        ));
    }
    DescribeGroupsResponse::default().with_groups(groups)
}

/// `described`, if its members' bytes fit in what is left of the answer's budget (or it is
/// the answer's `first` group); else COORDINATOR_LOAD_IN_PROGRESS, which clients retry
/// (in a later request, with the groups already answered left out).
fn within_answer_budget(
    described: DescribedGroup,
    bytes_left: &mut usize,
    first: bool,
) -> DescribedGroup {
    let bytes = described
        .members
        .iter()
        .map(|m| {
            m.member_metadata
                .len()
                .saturating_add(m.member_assignment.len())
        })
        .fold(0, usize::saturating_add);
    if bytes > *bytes_left && !first {
        tracing::info!(
            group = %described.group_id.0,
            "kafka DescribeGroups: group left out of the answer, over \
             DESCRIBE_GROUPS_RESPONSE_BYTES_MAX ({DESCRIBE_GROUPS_RESPONSE_BYTES_MAX})"
        );
        return DescribedGroup::default()
            .with_group_id(described.group_id)
            .with_error_code(K::CoordinatorLoadInProgress.code());
    }
    *bytes_left = bytes_left.saturating_sub(bytes);
    described
}

async fn describe_one(ctx: &Arc<Ctx>, group: GroupId) -> DescribedGroup {
    let group_id = group_name(&group);
    let described = DescribedGroup::default().with_group_id(group);
    let native = match describe_native_checked(ctx, &group_id).await {
        Ok(native) => native,
        Err(code) => return described.with_error_code(code),
    };
    let kafka = ctx.state().groups.classic_describe(&group_id).map(|g| {
        let members: Vec<DescribedGroupMember> = g
            .members
            .into_iter()
            .map(|m| {
                DescribedGroupMember::default()
                    .with_member_id(text(m.member_id))
                    .with_group_instance_id(m.instance_id.map(text))
                    .with_client_id(text(m.client_id))
                    .with_client_host(text(m.client_host))
                    .with_member_metadata(m.metadata)
                    .with_member_assignment(m.assignment)
            })
            .collect();
        let state = g.phase.kafka_name();
        (state, g.protocol_type, g.protocol_name, members)
    });
    match (kafka, native) {
        (Some((state, protocol_type, protocol, members)), native)
            if !members.is_empty() || native.is_none() =>
        {
            described
                .with_group_state(text(state))
                .with_protocol_type(text(protocol_type))
                .with_protocol_data(text(protocol))
                .with_members(members)
        }
        (_, Some(native)) => {
            let members: Vec<DescribedGroupMember> = native
                .members
                .iter()
                .map(|m| {
                    DescribedGroupMember::default()
                        .with_member_id(text(m.member_id.clone()))
                        .with_client_id(text(m.client_id.clone()))
                        .with_member_metadata(consumer_protocol::subscription(&m.topics))
                        .with_member_assignment(consumer_protocol::assignment(&m.assignment))
                })
                .collect();
            let protocol_type = if members.is_empty() { "" } else { "consumer" };
            described
                .with_group_state(text(native_state(&native.state)))
                .with_protocol_type(text(protocol_type))
                .with_protocol_data(text(native.strategy))
                .with_members(members)
        }
        // Kafka's answer for a group nobody knows.
        _ => described.with_group_state(text("Dead")),
    }
}

pub(crate) async fn delete_groups(
    ctx: Arc<Ctx>,
    _version: i16,
    r: DeleteGroupsRequest,
) -> DeleteGroupsResponse {
    let mut results = Vec::with_capacity(r.groups_names.len());
    for group in r.groups_names {
        let group_id = group_name(&group);
        let code = delete_one(&ctx, &group_id).await;
        results.push(
            DeletableGroupResult::default()
                .with_group_id(group)
                .with_error_code(code),
        );
    }
    DeleteGroupsResponse::default().with_results(results)
}

/// Deletes a group natively: the coordinator checks the principal's access, refuses a group
/// with members of either protocol (NON_EMPTY_GROUP), and deletes its offsets and a vacant
/// classic group.
async fn delete_one(ctx: &Arc<Ctx>, group_id: &str) -> i16 {
    let request = m::DeleteGroupRequest {
        group_id: group_id.to_string(),
        offsets: Vec::new(),
    };
    let answer: Result<m::DeleteGroupResponse, m::Error> =
        ctx.call(OpCode::DeleteGroup, &request).await;
    match answer {
        Ok(response) => group_code(response.error.as_ref()),
        Err(e) => group_code(Some(&e)),
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn group_of(name: &str, metadata_bytes: usize) -> DescribedGroup {
        let member = DescribedGroupMember::default()
            .with_member_metadata(Bytes::from(vec![0u8; metadata_bytes]))
            .with_member_assignment(Bytes::from_static(b"a"));
        DescribedGroup::default()
            .with_group_id(GroupId(text(name)))
            .with_members(vec![member])
    }

    #[test]
    fn only_the_classic_groups_the_native_listing_shows_are_listed() {
        use tinymq_broker::group::classic::Phase;
        // The native ListGroups answer, already filtered for the principal (it may
        // DESCRIBE "visible" and a native group of the same name as a hidden one's).
        let listing = |id: &str, group_type: &str| m::GroupListing {
            group_id: id.into(),
            group_type: group_type.into(),
            state: "stable".into(),
            members: 1,
            member_ids: vec![],
        };
        let native = [listing("visible", "kafka"), listing("hidden", "consumer")];
        let summary = |id: &str, phase| ClassicSummary {
            group_id: id.into(),
            phase,
            protocol_type: "consumer".into(),
            members: 1,
        };
        let classic = vec![
            summary("visible", Phase::CompletingRebalance),
            summary("hidden", Phase::Stable),
        ];
        assert_eq!(
            visible_classic(&native, classic),
            [(
                "visible".to_string(),
                "CompletingRebalance",
                "consumer".to_string()
            )]
        );
    }

    #[test]
    fn a_describe_answer_carries_members_bytes_up_to_its_budget() {
        let mut left = 100;
        // The first group is answered whatever its size.
        let first = within_answer_budget(group_of("big", 150), &mut left, true);
        assert_eq!((first.error_code, first.members.len()), (0, 1));
        assert_eq!(left, 0);
        let refused = within_answer_budget(group_of("more", 10), &mut left, false);
        assert_eq!(refused.error_code, K::CoordinatorLoadInProgress.code());
        assert_eq!(refused.group_id.0.as_str(), "more");
        assert!(refused.members.is_empty());
        // A group without members costs nothing.
        let empty = DescribedGroup::default().with_group_id(GroupId(text("empty")));
        assert_eq!(within_answer_budget(empty, &mut left, false).error_code, 0);

        let mut left = 100;
        let fits = within_answer_budget(group_of("small", 49), &mut left, false);
        assert_eq!(fits.error_code, 0);
        assert_eq!(left, 50);
    }
}
