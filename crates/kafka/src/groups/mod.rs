//! Kafka's classic consumer groups: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup, OffsetCommit and OffsetFetch, ListGroups, DescribeGroups, DeleteGroups,
//! OffsetDelete, as
//! translations: a Kafka request becomes a call on the broker's one group coordinator
//! ([`tinymq_broker::group::GroupCoordinator`]: its classic mode, `classic_join`,
//! `classic_sync`, … for membership and client-side assignment) or a native request through
//! the broker's front (the checks every group request makes, offsets, listing, deletion), and
//! its answer becomes Kafka's response ([`crate::errors::classic_code`] for the classic
//! mode's refusals). The coordinator keeps the groups, their limits, member ids and timers;
//! nothing here keeps state of its own.
//!
//! - this module: the checks every group request makes natively first ([`admit_group`]);
//! - `membership`, `offsets`, `offset_delete`, `admin`: the handlers; `consumer_protocol`: Kafka's encoding
//!   of a native group's members for DescribeGroups.

mod admin;
mod consumer_protocol;
mod membership;
mod offset_delete;
mod offsets;

use std::sync::Arc;

use kafka_protocol::error::ResponseError as K;
use tinymq_protocol::{messages as m, ErrorCode, OpCode};

use crate::context::Ctx;
use crate::errors::{kafka_code_for, Resource};

pub(crate) use admin::{delete_groups, describe_groups, find_coordinator, list_groups};
pub(crate) use membership::{heartbeat, join_group, leave_group, sync_group};
pub(crate) use offset_delete::offset_delete;
pub(crate) use offsets::{offset_commit, offset_fetch};

/// A native group error as Kafka's code for a group request.
fn group_code(error: Option<&m::Error>) -> i16 {
    if error.is_some_and(|e| e.code == u32::from(ErrorCode::LEADER_NOT_AVAILABLE.code())) {
        // The offsets partition that names the coordinator has no live leader.
        return K::CoordinatorNotAvailable.code();
    }
    kafka_code_for(error, Resource::Group)
}

/// The checks every Kafka group request makes before the coordinator's classic mode is
/// asked, through the native path: a valid group id, this broker coordinates the group (else
/// NOT_COORDINATOR), and the principal may READ it. A native Heartbeat of no member asks
/// exactly that (its UNKNOWN_MEMBER_ID is the expected answer).
async fn admit_group(ctx: &Arc<Ctx>, group_id: &str) -> Result<(), i16> {
    if let Err(e) = tinymq_protocol::names::validate_group_id(group_id) {
        tracing::debug!(group = %group_id, "kafka group request refused: {e}");
        return Err(group_code(Some(
            &e.error_code().with_message(e.to_string()),
        )));
    }
    let probe = m::HeartbeatRequest {
        group_id: group_id.to_string(),
        ..Default::default()
    };
    let answer: Result<m::HeartbeatResponse, m::Error> = ctx.call(OpCode::Heartbeat, &probe).await;
    let error = match answer {
        Ok(response) => response.error,
        Err(e) => Some(e),
    };
    match error {
        None => Ok(()),
        Some(e) if e.code == u32::from(ErrorCode::UNKNOWN_MEMBER_ID.code()) || e.code == 0 => {
            Ok(())
        }
        Some(e) => Err(group_code(Some(&e))),
    }
}

/// Kafka's group id string.
fn group_name(id: &kafka_protocol::messages::GroupId) -> String {
    id.0.to_string()
}
