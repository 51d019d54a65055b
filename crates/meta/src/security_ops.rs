//! Operations 26..33 (users, ACLs, quotas) from decoded request to response, for whichever
//! node answers them: a MetaServer node writes through its own Raft service, a broker forwards
//! the command to the MetaServer. Each handler is a plain function of the decoded request, so
//! authorization can sit in front of it. No answer ever carries a SCRAM verifier: `ListUsers`
//! gives names, mechanisms and iteration counts only.

use std::future::Future;
use std::sync::Arc;

use tinymq_auth::{AclEntry, AclFilter, QuotaConfig, StoredCredential};
use tinymq_protocol::{messages as m, ErrorCode};

use crate::command::{Command, Reply};
use crate::image::MetadataImage;
use crate::security::{matching_acls, PutUserMode, ACLS_MAX, USER_CREDENTIALS_MAX};

/// Where the handlers write commands, and how they wait for them to show.
pub trait SecurityStore: Sync {
    /// Applies `command` through the MetaServer's Raft log.
    fn write(&self, command: Command) -> impl Future<Output = Result<Reply, m::Error>> + Send;
    /// Waits (bounded) until this node's image satisfies `applied`, so a list request right
    /// after a change sees it. Returns at once where writes are applied before they answer.
    fn settle(
        &self,
        applied: impl Fn(&MetadataImage) -> bool + Send + Sync,
    ) -> impl Future<Output = ()> + Send;
}

fn invalid(why: impl std::fmt::Display) -> m::Error {
    ErrorCode::INVALID_REQUEST.with_message(why.to_string())
}

/// The request's verifiers, each checked; their count first, before any is converted.
fn credentials_of(r: &m::PutUserRequest) -> Result<Vec<StoredCredential>, m::Error> {
    if r.credentials.len() > USER_CREDENTIALS_MAX {
        let n = r.credentials.len();
        return Err(invalid(format!(
            "{n} credentials; at most {USER_CREDENTIALS_MAX}, one per mechanism"
        )));
    }
    r.credentials
        .iter()
        .map(|c| StoredCredential::from_wire(c).map_err(|e| invalid(format!("credential: {e}"))))
        .collect()
}

pub async fn put_user(store: &impl SecurityStore, r: m::PutUserRequest) -> m::PutUserResponse {
    let fail = |e| m::PutUserResponse { error: Some(e) };
    let credentials = match credentials_of(&r) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let mode = match PutUserMode::from_wire(r.mode) {
        Ok(mode) => mode,
        Err(e) => return fail(invalid(e)),
    };
    let command = Command::PutUser {
        name: r.name.clone(),
        credentials: credentials.clone(),
        mode,
    };
    if let Err(e) = store.write(command).await {
        return fail(e);
    }
    let name = r.name;
    // An image without any user is one sent without the verifiers (to a node that did not
    // authenticate): nothing to wait for there.
    store
        .settle(move |i| i.users.is_empty() || i.users.get(&name) == Some(&credentials))
        .await;
    m::PutUserResponse { error: None }
}

pub async fn delete_user(
    store: &impl SecurityStore,
    r: m::DeleteUserRequest,
) -> m::DeleteUserResponse {
    let name = r.name;
    if let Err(e) = store
        .write(Command::DeleteUser { name: name.clone() })
        .await
    {
        return m::DeleteUserResponse { error: Some(e) };
    }
    store.settle(move |i| !i.users.contains_key(&name)).await;
    m::DeleteUserResponse { error: None }
}

/// Names, mechanisms and iteration counts: never salts or keys.
pub fn list_users(image: &MetadataImage) -> m::ListUsersResponse {
    let users = image
        .users
        .iter()
        .map(|(name, credentials)| m::UserInfo {
            name: name.clone(),
            mechanisms: credentials
                .iter()
                .map(|c| c.mechanism.name().to_string())
                .collect(),
            iterations: credentials.iter().map(|c| c.iterations).collect(),
        })
        .collect();
    m::ListUsersResponse { error: None, users }
}

pub async fn create_acls(
    store: &impl SecurityStore,
    r: m::CreateAclsRequest,
) -> m::CreateAclsResponse {
    let fail = |e| m::CreateAclsResponse { error: Some(e) };
    if r.acls.len() > ACLS_MAX {
        return fail(invalid(format!(
            "{} ACLs in one request; at most {ACLS_MAX} (acls_max)",
            r.acls.len()
        )));
    }
    let acls: Result<Vec<AclEntry>, m::Error> = r
        .acls
        .iter()
        .map(|a| AclEntry::from_wire(a).map_err(|e| invalid(format!("ACL: {e}"))))
        .collect();
    let acls = match acls {
        Ok(acls) => acls,
        Err(e) => return fail(e),
    };
    if let Err(e) = store
        .write(Command::CreateAcls { acls: acls.clone() })
        .await
    {
        return fail(e);
    }
    store
        .settle(move |i| acls.iter().all(|a| i.acls.contains(a)))
        .await;
    m::CreateAclsResponse { error: None }
}

pub async fn delete_acls(
    store: &impl SecurityStore,
    r: m::DeleteAclsRequest,
) -> m::DeleteAclsResponse {
    let fail = |e| m::DeleteAclsResponse {
        error: Some(e),
        removed: vec![],
    };
    let filter = match AclFilter::from_wire(&r.filter.unwrap_or_default()) {
        Ok(f) => f,
        Err(e) => return fail(invalid(format!("ACL filter: {e}"))),
    };
    let removed = match store.write(Command::DeleteAcls { filter }).await {
        Ok(Reply::AclsRemoved(removed)) => removed,
        Ok(other) => {
            let why = format!("unexpected reply to DeleteAcls: {other:?}");
            return fail(ErrorCode::UNKNOWN_SERVER_ERROR.with_message(why));
        }
        Err(e) => return fail(e),
    };
    let wire = removed.iter().map(AclEntry::to_wire).collect();
    store
        .settle(move |i| removed.iter().all(|a| !i.acls.contains(a)))
        .await;
    m::DeleteAclsResponse {
        error: None,
        removed: wire,
    }
}

pub fn list_acls(image: &MetadataImage, r: m::ListAclsRequest) -> m::ListAclsResponse {
    let filter = match AclFilter::from_wire(&r.filter.unwrap_or_default()) {
        Ok(f) => f,
        Err(e) => {
            return m::ListAclsResponse {
                error: Some(invalid(format!("ACL filter: {e}"))),
                acls: vec![],
            }
        }
    };
    m::ListAclsResponse {
        error: None,
        acls: matching_acls(image, &filter)
            .iter()
            .map(AclEntry::to_wire)
            .collect(),
    }
}

pub async fn set_quota(store: &impl SecurityStore, r: m::SetQuotaRequest) -> m::SetQuotaResponse {
    let q = r.quota.unwrap_or_default();
    let principal = q.principal.clone();
    let command = if r.remove {
        Command::RemoveQuota {
            principal: principal.clone(),
        }
    } else {
        Command::SetQuota {
            principal: principal.clone(),
            quota: QuotaConfig {
                produce_bytes_per_sec: q.produce_bytes_per_sec,
                fetch_bytes_per_sec: q.fetch_bytes_per_sec,
                requests_per_sec: q.requests_per_sec,
            },
        }
    };
    let wanted = match &command {
        Command::SetQuota { quota, .. } => Some(*quota),
        _ => None,
    };
    if let Err(e) = store.write(command).await {
        return m::SetQuotaResponse { error: Some(e) };
    }
    store
        .settle(move |i| i.quotas.get(&principal) == wanted.as_ref())
        .await;
    m::SetQuotaResponse { error: None }
}

pub fn list_quotas(image: &MetadataImage) -> m::ListQuotasResponse {
    let quotas = image
        .quotas
        .iter()
        .map(|(principal, q)| m::Quota {
            principal: principal.clone(),
            produce_bytes_per_sec: q.produce_bytes_per_sec,
            fetch_bytes_per_sec: q.fetch_bytes_per_sec,
            requests_per_sec: q.requests_per_sec,
        })
        .collect();
    m::ListQuotasResponse {
        error: None,
        quotas,
    }
}

/// How long a change waits to show in the answering node's image.
pub const SETTLE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl SecurityStore for crate::service::MetaService {
    async fn write(&self, command: Command) -> Result<Reply, m::Error> {
        let response = crate::service::MetaService::write(self, command).await;
        if let Some(error) = response.error {
            return Err(error);
        }
        serde_json::from_slice(&response.reply).map_err(|e| {
            ErrorCode::UNKNOWN_SERVER_ERROR.with_message(format!("unreadable reply: {e}"))
        })
    }

    /// A follower applies the leader's entry a moment after the leader answered.
    async fn settle(&self, applied: impl Fn(&MetadataImage) -> bool + Send + Sync) {
        let deadline = tokio::time::Instant::now() + SETTLE_WAIT;
        loop {
            let (version, image) = self.node.versioned_image();
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if applied(&image) || left.is_zero() {
                return;
            }
            self.node.wait_for_change(version, left).await;
        }
    }
}

/// At a cluster's first start: whichever node leads creates user `admin` with `credentials`
/// if the cluster has no user yet ([`Command::BootstrapAdmin`]). A cluster that has users
/// keeps them as they are, whatever password this start was given; that is logged. Runs in
/// the background (a node of a group announces itself before the group has a leader).
pub fn bootstrap_admin(
    service: &Arc<crate::service::MetaService>,
    credentials: Vec<StoredCredential>,
) {
    let service = Arc::downgrade(service);
    tokio::spawn(async move {
        while let Some(service) = service.upgrade() {
            if bootstrap_step(&service, &credentials).await {
                return;
            }
            drop(service);
            tokio::time::sleep(BOOTSTRAP_RETRY).await;
        }
    });
}

/// How often [`bootstrap_admin`] and [`bootstrap_admin_now`] look again while the node does
/// not lead or the write failed.
const BOOTSTRAP_RETRY: std::time::Duration = std::time::Duration::from_millis(20);

/// [`bootstrap_admin`], returning once user `admin` is in this node's image (or the cluster
/// already had users), or after `wait_max` (then it goes on in the background; `false`).
/// For a node that leads alone (the standalone server, a one-node MetaServer group), so it
/// can accept logins only once the first super user can log in.
pub async fn bootstrap_admin_now(
    service: &Arc<crate::service::MetaService>,
    credentials: Vec<StoredCredential>,
    wait_max: std::time::Duration,
) -> bool {
    let deadline = tokio::time::Instant::now() + wait_max;
    while tokio::time::Instant::now() < deadline {
        // One attempt may not outlast the wait (a write to a group that lost its quorum
        // would otherwise hold the start up indefinitely).
        let attempt = tokio::time::timeout_at(deadline, bootstrap_step(service, &credentials));
        if let Ok(true) = attempt.await {
            return true;
        }
        tokio::time::sleep(BOOTSTRAP_RETRY).await;
    }
    tracing::warn!(
        waited_ms = wait_max.as_millis() as u64,
        "user admin is not created yet; accepting connections meanwhile (logins as admin fail until it is)"
    );
    bootstrap_admin(service, credentials);
    false
}

/// One attempt: `true` once the image has users (created now or before).
async fn bootstrap_step(
    service: &crate::service::MetaService,
    credentials: &[StoredCredential],
) -> bool {
    let node = &service.node;
    let image = node.image();
    if !image.users.is_empty() {
        tracing::info!(
            "the cluster already has users: the admin password given at this start is ignored (change it with `tinymq user passwd admin`)"
        );
        return true;
    }
    if node.current_leader() != Some(node.id) || image.cluster_id.is_empty() {
        return false;
    }
    let command = Command::BootstrapAdmin {
        credentials: credentials.to_vec(),
    };
    match node.write(command).await {
        Ok(Reply::UserCreated(true)) => {
            tracing::info!(
                user = crate::security::ADMIN_USER,
                "created the first super user"
            );
            // Committed; the next look sees it applied to this node's image.
            !node.image().users.is_empty()
        }
        Ok(_) => false,
        Err(e) => {
            tracing::warn!(error = %e, "creating user admin failed; will retry");
            false
        }
    }
}
