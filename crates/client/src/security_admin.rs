//! Users, ACLs and quotas on the [`Admin`]: `tinymq user|acl|quota` and programs that manage a
//! cluster's security. A user's SCRAM verifiers are derived here (salted and iterated), so the
//! password never leaves this process; the cluster stores only the verifiers.

use tinymq_auth::{AclEntry, QuotaConfig, ScramMechanism, StoredCredential};
use tinymq_protocol::messages as m;
use tinymq_protocol::ErrorCode;

use crate::admin::Admin;
use crate::error::{check, ClientError};

pub use tinymq_protocol::messages::{AclFilter, PutUserMode, Quota, UserInfo};

/// Both SCRAM mechanisms: what `tinymq user create` stores unless told otherwise.
pub const SCRAM_MECHANISMS_DEFAULT: [ScramMechanism; 2] =
    [ScramMechanism::Sha256, ScramMechanism::Sha512];

impl Admin {
    /// Creates user `name` ([`PutUserMode::Create`], `USER_ALREADY_EXISTS` if it exists) or
    /// replaces its password ([`PutUserMode::Update`], `USER_NOT_FOUND` if it does not), with
    /// one verifier per mechanism derived from `password` with `iterations` rounds.
    pub async fn put_user(
        &self,
        name: &str,
        password: &str,
        mode: PutUserMode,
        mechanisms: &[ScramMechanism],
        iterations: u32,
    ) -> Result<(), ClientError> {
        let (password, mechanisms) = (password.to_string(), mechanisms.to_vec());
        // PBKDF2 with many rounds takes a while: not on an async thread.
        let credentials = tokio::task::spawn_blocking(move || {
            mechanisms
                .iter()
                .map(|m| StoredCredential::derive(*m, &password, iterations).to_wire())
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|e| ClientError::Protocol(format!("deriving the credentials failed: {e}")))?;
        let request = &m::PutUserRequest {
            name: name.into(),
            credentials,
            mode: mode.into(),
        };
        let attempt = || async move { check(self.cluster.request(request).await?.error.as_ref()) };
        match mode {
            // A lost answer, then "already exists": it was this call that created it.
            PutUserMode::Create => self
                .retry_change(
                    &format!("create user {name}"),
                    ErrorCode::USER_ALREADY_EXISTS,
                    attempt,
                )
                .await
                .map(drop),
            PutUserMode::Update => self.retry(&format!("update user {name}"), attempt).await,
        }
    }

    /// Deletes a user (`USER_NOT_FOUND` if there is none).
    pub async fn delete_user(&self, name: &str) -> Result<(), ClientError> {
        let request = &m::DeleteUserRequest { name: name.into() };
        self.retry_change(
            &format!("delete user {name}"),
            ErrorCode::USER_NOT_FOUND,
            || async move { check(self.cluster.request(request).await?.error.as_ref()) },
        )
        .await
        .map(drop)
    }

    /// Users with their mechanisms and iteration counts (never their verifiers).
    pub async fn list_users(&self) -> Result<Vec<UserInfo>, ClientError> {
        self.retry("list users", || async move {
            let response = self.cluster.request(&m::ListUsersRequest {}).await?;
            check(response.error.as_ref())?;
            Ok(response.users)
        })
        .await
    }

    /// Adds ACLs; ones that exist already are left as they are.
    pub async fn create_acls(&self, acls: &[AclEntry]) -> Result<(), ClientError> {
        let request = &m::CreateAclsRequest {
            acls: acls.iter().map(AclEntry::to_wire).collect(),
        };
        self.retry("create ACLs", || async move {
            check(self.cluster.request(request).await?.error.as_ref())
        })
        .await
    }

    /// Removes every ACL `filter` selects and returns them. After a lost answer the retry
    /// finds nothing left to remove: then the list is empty though ACLs were removed.
    pub async fn delete_acls(&self, filter: &AclFilter) -> Result<Vec<AclEntry>, ClientError> {
        let request = &m::DeleteAclsRequest {
            filter: Some(filter.clone()),
        };
        let removed = self
            .retry("delete ACLs", || async move {
                let response = self.cluster.request(request).await?;
                check(response.error.as_ref())?;
                Ok(response.removed)
            })
            .await?;
        acls_from_wire(&removed)
    }

    /// The ACLs `filter` selects (an empty filter: all).
    pub async fn list_acls(&self, filter: &AclFilter) -> Result<Vec<AclEntry>, ClientError> {
        let request = &m::ListAclsRequest {
            filter: Some(filter.clone()),
        };
        let acls = self
            .retry("list ACLs", || async move {
                let response = self.cluster.request(request).await?;
                check(response.error.as_ref())?;
                Ok(response.acls)
            })
            .await?;
        acls_from_wire(&acls)
    }

    /// Sets the rates of `principal` (`User:NAME`, or `<default>` for every user without a
    /// quota of its own); 0 is unlimited.
    pub async fn set_quota(&self, principal: &str, quota: &QuotaConfig) -> Result<(), ClientError> {
        let request = &m::SetQuotaRequest {
            quota: Some(Quota {
                principal: principal.into(),
                produce_bytes_per_sec: quota.produce_bytes_per_sec,
                fetch_bytes_per_sec: quota.fetch_bytes_per_sec,
                requests_per_sec: quota.requests_per_sec,
            }),
            remove: false,
        };
        self.retry(&format!("set the quota of {principal}"), || async move {
            check(self.cluster.request(request).await?.error.as_ref())
        })
        .await
    }

    /// Removes the quota of `principal` (none there: nothing changes).
    pub async fn remove_quota(&self, principal: &str) -> Result<(), ClientError> {
        let request = &m::SetQuotaRequest {
            quota: Some(Quota {
                principal: principal.into(),
                ..Default::default()
            }),
            remove: true,
        };
        self.retry(&format!("remove the quota of {principal}"), || async move {
            check(self.cluster.request(request).await?.error.as_ref())
        })
        .await
    }

    pub async fn list_quotas(&self) -> Result<Vec<Quota>, ClientError> {
        self.retry("list quotas", || async move {
            let response = self.cluster.request(&m::ListQuotasRequest {}).await?;
            check(response.error.as_ref())?;
            Ok(response.quotas)
        })
        .await
    }
}

fn acls_from_wire(acls: &[m::Acl]) -> Result<Vec<AclEntry>, ClientError> {
    acls.iter()
        .map(|a| {
            AclEntry::from_wire(a).map_err(|e| {
                ClientError::Protocol(format!("the server sent an unreadable ACL: {e}"))
            })
        })
        .collect()
}
