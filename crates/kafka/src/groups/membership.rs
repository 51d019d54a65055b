//! JoinGroup, SyncGroup, Heartbeat and LeaveGroup: Kafka requests in and out of the group
//! state machine ([`super::state`]); a JoinGroup or SyncGroup that must wait parks a oneshot
//! sender there and awaits it (no lock is held while waiting).

use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::error::ResponseError as K;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use tokio::sync::oneshot;

use super::state::{Join, Joined, Protocol, Reply, Synced};
use super::{admit_group, deliver, group_name};
use crate::context::Ctx;

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
    let fail = |code: i16| join_response(version, Joined::error(code, &member_id));
    if let Err(code) = admit_group(&ctx, &group_id).await {
        return fail(code);
    }
    let session_timeout = millis(r.session_timeout_ms);
    let coordinator = &ctx.shared.groups;
    let join = Join {
        member_id: member_id.clone(),
        fresh_member_id: coordinator.fresh_member_id(&ctx.peer.client_id),
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
                metadata: p.metadata,
            })
            .collect(),
        group_instance_id: r.group_instance_id.map(|i| i.to_string()),
    };
    let (waiter, answer) = oneshot::channel();
    let native = &ctx.state().groups;
    deliver(coordinator.join(native, &group_id, join, waiter, Instant::now()));
    match answer.await {
        Ok(Reply::Join(joined)) => join_response(version, joined),
        // Replaced by a newer join of the same member: that one gets the answer.
        _ => fail(K::RebalanceInProgress.code()),
    }
}

fn join_response(version: i16, j: Joined) -> JoinGroupResponse {
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
    JoinGroupResponse::default()
        .with_error_code(j.error)
        .with_generation_id(j.generation)
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
    let fail = |code: i16| {
        sync_response(Synced {
            error: code,
            ..Synced::default()
        })
    };
    if let Err(code) = admit_group(&ctx, &group_id).await {
        return fail(code);
    }
    let assignments = r
        .assignments
        .into_iter()
        .map(|a| (a.member_id.to_string(), a.assignment))
        .collect();
    let (waiter, answer) = oneshot::channel();
    let member_id = r.member_id.to_string();
    let protocol_type = r.protocol_type.as_ref().map(|s| s.as_str());
    let protocol_name = r.protocol_name.as_ref().map(|s| s.as_str());
    let instance = r.group_instance_id.as_ref().map(|s| s.as_str());
    let out = ctx
        .shared
        .groups
        .with_group(&ctx.state().groups, &group_id, |g| {
            g.check_instance(instance, &member_id)?;
            Ok(g.sync(
                &member_id,
                r.generation_id,
                protocol_type,
                protocol_name,
                assignments,
                waiter,
                Instant::now(),
            ))
        });
    let out = match out {
        None => return fail(K::UnknownMemberId.code()),
        Some(Err(code)) => return fail(code),
        Some(Ok(out)) => out,
    };
    deliver(out);
    match answer.await {
        Ok(Reply::Sync(synced)) => sync_response(synced),
        _ => fail(K::RebalanceInProgress.code()),
    }
}

fn sync_response(s: Synced) -> SyncGroupResponse {
    SyncGroupResponse::default()
        .with_error_code(s.error)
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
        Ok(()) => ctx
            .shared
            .groups
            .with_group(&ctx.state().groups, &group_id, |g| {
                let instance = r.group_instance_id.as_ref().map(|s| s.as_str());
                match g.check_instance(instance, r.member_id.as_str()) {
                    Err(code) => code,
                    Ok(()) => g.heartbeat(r.member_id.as_str(), r.generation_id, Instant::now()),
                }
            })
            .unwrap_or(K::UnknownMemberId.code()),
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
    let leave = |member_id: &str, instance: Option<&str>| {
        let outcome = ctx
            .shared
            .groups
            .with_group(&ctx.state().groups, &group_id, |g| {
                let member_id = match (member_id, instance) {
                    ("", Some(instance)) => g.member_of_instance(instance).cloned(),
                    _ => Some(member_id.to_string()),
                };
                let Some(member_id) = member_id else {
                    return (K::UnknownMemberId.code(), Vec::new());
                };
                if let Err(code) = g.check_instance(instance, &member_id) {
                    return (code, Vec::new());
                }
                g.leave(&member_id, Instant::now())
            });
        let (code, out) = outcome.unwrap_or((K::UnknownMemberId.code(), Vec::new()));
        deliver(out);
        if code == 0 {
            tracing::info!(group = %group_id, member = %member_id, "kafka group member left");
        }
        code
    };
    if version < 3 {
        return LeaveGroupResponse::default().with_error_code(leave(r.member_id.as_str(), None));
    }
    let members = r
        .members
        .into_iter()
        .map(|m| {
            let instance = m.group_instance_id.as_ref().map(|s| s.as_str());
            let code = leave(m.member_id.as_str(), instance);
            MemberResponse::default()
                .with_member_id(m.member_id)
                .with_group_instance_id(m.group_instance_id)
                .with_error_code(code)
        })
        .collect();
    LeaveGroupResponse::default().with_members(members)
}
