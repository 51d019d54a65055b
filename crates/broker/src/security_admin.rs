//! Users, ACLs and quotas (operations 26..33) on a broker: changes are forwarded to the
//! MetaServer as commands, like topic creation, and answered once this broker's image shows
//! them; lists are answered from this broker's image. The handlers themselves live in
//! [`tinymq_meta::security_ops`], shared with MetaServer nodes.

use std::future::Future;
use std::sync::Arc;

use tinymq_meta::security_ops::{self as ops, SecurityStore};
use tinymq_meta::{Command, MetadataImage, Reply};
use tinymq_protocol::messages as m;

use crate::state::BrokerState;

struct Store<'a>(&'a BrokerState);

impl SecurityStore for Store<'_> {
    fn write(&self, command: Command) -> impl Future<Output = Result<Reply, m::Error>> + Send {
        self.0.cluster.write(command)
    }

    async fn settle(&self, applied: impl Fn(&MetadataImage) -> bool + Send + Sync) {
        self.0.cluster.wait_until(ops::SETTLE_WAIT, applied).await;
    }
}

pub async fn put_user(state: Arc<BrokerState>, r: m::PutUserRequest) -> m::PutUserResponse {
    ops::put_user(&Store(&state), r).await
}

pub async fn delete_user(
    state: Arc<BrokerState>,
    r: m::DeleteUserRequest,
) -> m::DeleteUserResponse {
    ops::delete_user(&Store(&state), r).await
}

/// Asked of the MetaServer: this broker's image carries the users only where nodes
/// authenticate (a broker of a cluster with `--auth none` is sent the image without them).
pub async fn list_users(state: Arc<BrokerState>, _r: m::ListUsersRequest) -> m::ListUsersResponse {
    match state.cluster.link.list_users().await {
        Ok(response) => response,
        Err(e) => m::ListUsersResponse {
            error: Some(e.to_wire()),
            users: vec![],
        },
    }
}

pub async fn create_acls(
    state: Arc<BrokerState>,
    r: m::CreateAclsRequest,
) -> m::CreateAclsResponse {
    ops::create_acls(&Store(&state), r).await
}

pub async fn delete_acls(
    state: Arc<BrokerState>,
    r: m::DeleteAclsRequest,
) -> m::DeleteAclsResponse {
    ops::delete_acls(&Store(&state), r).await
}

pub fn list_acls(state: &BrokerState, r: m::ListAclsRequest) -> m::ListAclsResponse {
    ops::list_acls(&state.cluster.image(), r)
}

pub async fn set_quota(state: Arc<BrokerState>, r: m::SetQuotaRequest) -> m::SetQuotaResponse {
    ops::set_quota(&Store(&state), r).await
}

pub fn list_quotas(state: &BrokerState, _r: m::ListQuotasRequest) -> m::ListQuotasResponse {
    ops::list_quotas(&state.cluster.image())
}
