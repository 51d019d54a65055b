//! Kafka's classic consumer groups: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup (membership and client-side assignment, kept here), OffsetCommit and
//! OffsetFetch (the native group's committed offsets), ListGroups, DescribeGroups,
//! DeleteGroups.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::context::Ctx;

/// The classic groups this broker coordinates.
#[derive(Default)]
pub(crate) struct Coordinator {}

pub(crate) async fn find_coordinator(
    _ctx: Arc<Ctx>,
    _v: i16,
    _r: FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    FindCoordinatorResponse::default()
}

pub(crate) async fn join_group(_ctx: Arc<Ctx>, _v: i16, _r: JoinGroupRequest) -> JoinGroupResponse {
    JoinGroupResponse::default()
}

pub(crate) async fn sync_group(_ctx: Arc<Ctx>, _v: i16, _r: SyncGroupRequest) -> SyncGroupResponse {
    SyncGroupResponse::default()
}

pub(crate) async fn heartbeat(_ctx: Arc<Ctx>, _v: i16, _r: HeartbeatRequest) -> HeartbeatResponse {
    HeartbeatResponse::default()
}

pub(crate) async fn leave_group(
    _ctx: Arc<Ctx>,
    _v: i16,
    _r: LeaveGroupRequest,
) -> LeaveGroupResponse {
    LeaveGroupResponse::default()
}

pub(crate) async fn offset_commit(
    _ctx: Arc<Ctx>,
    _v: i16,
    _r: OffsetCommitRequest,
) -> OffsetCommitResponse {
    OffsetCommitResponse::default()
}

pub(crate) async fn offset_fetch(
    _ctx: Arc<Ctx>,
    _v: i16,
    _r: OffsetFetchRequest,
) -> OffsetFetchResponse {
    OffsetFetchResponse::default()
}

pub(crate) async fn list_groups(
    _ctx: Arc<Ctx>,
    _v: i16,
    _r: ListGroupsRequest,
) -> ListGroupsResponse {
    ListGroupsResponse::default()
}

pub(crate) async fn describe_groups(
    _ctx: Arc<Ctx>,
    _v: i16,
    _r: DescribeGroupsRequest,
) -> DescribeGroupsResponse {
    DescribeGroupsResponse::default()
}

pub(crate) async fn delete_groups(
    _ctx: Arc<Ctx>,
    _v: i16,
    _r: DeleteGroupsRequest,
) -> DeleteGroupsResponse {
    DeleteGroupsResponse::default()
}
