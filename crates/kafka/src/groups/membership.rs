//! JoinGroup, SyncGroup, Heartbeat and LeaveGroup: Kafka requests in and out of the broker
//! coordinator's classic mode. A JoinGroup or SyncGroup that must wait is awaited there
//! (no lock is held while waiting).

use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use tinymq_broker::group::classic::{ClassicError, Join, Joined, Protocol, SyncRequest, Synced};

use super::{admit_group, group_name};
use crate::context::Ctx;
use crate::errors::{classic_code, classic_result_code};

fn millis(ms: i32) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

fn text(s: String) -> StrBytes {
    StrBytes::from_string(s)
}

pub(crate) async fn join_group(
    ctx: Arc<Ctx>,
    version: i16,
    r: JoinGroupRequest,
) -> JoinGroupResponse {
    let group_id = group_name(&r.group_id);
    let member_id = r.member_id.to_string();
    if let Err(code) = admit_group(&ctx, &group_id).await {
        return join_response(version, Joined::default(), code).with_member_id(r.member_id);
    }
    let session_timeout = millis(r.session_timeout_ms);
    let join = Join {
        member_id,
        require_known_member_id: version >= 4,
        client_id: ctx.peer.client_id.clone(),
        client_host: format!("/{}", ctx.peer.addr.ip()),
        session_timeout,
        // v0 has none: the session timeout, as Kafka.
        rebalance_timeout: if version >= 1 {
            millis(r.rebalance_timeout_ms)
        } else {
            session_timeout
        },
        protocol_type: r.protocol_type.to_string(),
        protocols: r
            .protocols
            .into_iter()
            .map(|p| Protocol {
                name: p.name.to_string(),
                // Still a slice of the request's frame: the group copies what it keeps,
                // once the join passed its limits.
                metadata: p.metadata,
            })
            .collect(),
        group_instance_id: r.group_instance_id.map(|i| i.to_string()),
    };
    let groups = &ctx.state().groups;
    let joined = groups.classic_join(&group_id, join, Instant::now()).await;
    let code = classic_code(joined.error);
    join_response(version, joined, code)
}

/// Kafka's JoinGroup answer of `j`, with error `code`.
fn join_response(version: i16, j: Joined, code: i16) -> JoinGroupResponse {
    let members = j
        .members
        .into_iter()
        .map(|(id, instance, metadata)| {
            JoinGroupResponseMember::default()
                .with_member_id(text(id))
                .with_group_instance_id(instance.map(text))
                .with_metadata(metadata)
        })
        .collect();
    // Nullable from v7 only.
    let protocol_name = match j.protocol_name {
        None if version < 7 => Some(StrBytes::default()),
        other => other.map(text),
    };
    let generation = if code == 0 { j.generation } else { -1 };
    JoinGroupResponse::default()
        .with_error_code(code)
        .with_generation_id(generation)
        .with_protocol_type(j.protocol_type.map(text))
        .with_protocol_name(protocol_name)
        .with_leader(text(j.leader))
        .with_member_id(text(j.member_id))
        .with_members(members)
}

pub(crate) async fn sync_group(
    ctx: Arc<Ctx>,
    _version: i16,
    r: SyncGroupRequest,
) -> SyncGroupResponse {
    let group_id = group_name(&r.group_id);
    if let Err(code) = admit_group(&ctx, &group_id).await {
        return sync_response(Synced::default(), code);
    }
    let sync = SyncRequest {
        member_id: r.member_id.to_string(),
        group_instance_id: r.group_instance_id.map(|s| s.to_string()),
        generation: r.generation_id,
        protocol_type: r.protocol_type.map(|s| s.to_string()),
        protocol_name: r.protocol_name.map(|s| s.to_string()),
        assignments: r
            .assignments
            .into_iter()
            .map(|a| (a.member_id.to_string(), a.assignment))
            .collect(),
    };
    let groups = &ctx.state().groups;
    let synced = groups.classic_sync(&group_id, sync, Instant::now()).await;
    let code = classic_code(synced.error);
    sync_response(synced, code)
}

fn sync_response(s: Synced, code: i16) -> SyncGroupResponse {
    SyncGroupResponse::default()
        .with_error_code(code)
        .with_protocol_type(s.protocol_type.map(text))
        .with_protocol_name(s.protocol_name.map(text))
        .with_assignment(s.assignment)
}

pub(crate) async fn heartbeat(
    ctx: Arc<Ctx>,
    _version: i16,
    r: HeartbeatRequest,
) -> HeartbeatResponse {
    let group_id = group_name(&r.group_id);
    let code = match admit_group(&ctx, &group_id).await {
        Err(code) => code,
        Ok(()) => classic_result_code(ctx.state().groups.classic_heartbeat(
            &group_id,
            r.member_id.as_str(),
            r.group_instance_id.as_ref().map(|s| s.as_str()),
            r.generation_id,
            Instant::now(),
        )),
    };
    HeartbeatResponse::default().with_error_code(code)
}

pub(crate) async fn leave_group(
    ctx: Arc<Ctx>,
    version: i16,
    r: LeaveGroupRequest,
) -> LeaveGroupResponse {
    let group_id = group_name(&r.group_id);
    if let Err(code) = admit_group(&ctx, &group_id).await {
        return LeaveGroupResponse::default().with_error_code(code);
    }
    // A static member may leave by instance id alone.
    let leave = |member_id: &str, instance: Option<&str>| -> Result<(), ClassicError> {
        let groups = &ctx.state().groups;
        groups.classic_leave(&group_id, member_id, instance, Instant::now())
    };
    if version < 3 {
        let code = classic_result_code(leave(r.member_id.as_str(), None));
        return LeaveGroupResponse::default().with_error_code(code);
    }
    let members = r
        .members
        .into_iter()
        .map(|m| {
            let instance = m.group_instance_id.as_ref().map(|s| s.as_str());
            let code = classic_result_code(leave(m.member_id.as_str(), instance));
            MemberResponse::default()
                .with_member_id(m.member_id)
                .with_group_instance_id(m.group_instance_id)
                .with_error_code(code)
        })
        .collect();
    LeaveGroupResponse::default().with_members(members)
}
