//! The group side of `poll`: join, heartbeat when due, follow the assignment (committing what
//! was consumed from a partition before releasing it), auto-commit, and ride out an
//! unreachable coordinator.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use tinymq_protocol::ErrorCode;

use super::partitions::{PartitionKey, Partitions};
use super::{Consumer, ConsumerConfig};
use crate::cluster::Cluster;
use crate::error::ClientError;
use crate::group::{GroupEvent, Membership};
use crate::retry::{RETRY_BACKOFF, RETRY_BACKOFF_MAX};

impl Consumer {
    /// Joins, heartbeats when due, follows the assignment, and auto-commits when due.
    ///
    /// Cancel-safe: the membership stays in place across every await, so a dropped `poll`
    /// leaves at worst a heartbeat unanswered (the next one repairs it) — never a consumer
    /// that forgot its group.
    pub(super) async fn group_tick(&mut self) -> Result<(), ClientError> {
        let Consumer {
            config,
            cluster,
            parts,
            membership,
            events,
            last_auto_commit,
            ..
        } = self;
        let Some(membership) = membership.as_mut() else {
            return Ok(());
        };
        let mut side = GroupSide {
            config,
            cluster,
            parts,
            events,
        };
        side.tick(membership).await?;
        if let Some(interval) = config.auto_commit_interval {
            if membership.joined() && last_auto_commit.elapsed() >= interval {
                *last_auto_commit = Instant::now();
                let keys = side.parts.keys();
                if let Err(e) = commit_positions(membership, cluster, side.parts, &keys).await {
                    tracing::warn!(group = %membership.group, error = %e, "auto-commit failed");
                }
            }
        }
        Ok(())
    }
}

/// The parts of a consumer the group protocol changes, borrowed apart from its membership.
struct GroupSide<'a> {
    config: &'a ConsumerConfig,
    cluster: &'a Cluster,
    parts: &'a mut Partitions,
    events: &'a mut Vec<GroupEvent>,
}

impl GroupSide<'_> {
    async fn tick(&mut self, membership: &mut Membership) -> Result<(), ClientError> {
        if membership.session_lost(self.config.session_timeout) {
            tracing::warn!(group = %membership.group,
                "no answer from the coordinator for a whole session: dropping the partitions and joining again");
            self.lose_everything(membership);
        }
        if !membership.heartbeat_due() {
            return Ok(());
        }
        let answer = if membership.joined() {
            let owned = self.parts.keys();
            membership.heartbeat(self.cluster, &owned).await
        } else {
            let session = self.config.session_timeout;
            membership
                .join(self.cluster, session, &self.config.strategy)
                .await
        };
        match answer {
            Ok(granted) => {
                if self.apply_assignment(membership, granted).await? {
                    membership.heartbeat_now();
                }
            }
            Err(e) if is_membership_gone(&e) => self.lose_everything(membership),
            Err(e) if e.is_retriable() => {
                // A coordinator still loading its offsets partition (it just took it over)
                // is routine and answers within moments: not worth a warning.
                let loading = e.code() == Some(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS);
                let first = membership.retry_later();
                if first && !loading {
                    tracing::warn!(group = %membership.group, error = %e,
                        "cannot reach the group coordinator; reading owned partitions and retrying");
                } else if loading {
                    tracing::debug!(group = %membership.group, error = %e,
                        "the group coordinator is loading its offsets; retrying");
                }
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// The coordinator no longer counts this member: everything it owned may be another's.
    fn lose_everything(&mut self, membership: &mut Membership) {
        let lost = self.parts.clear();
        if !lost.is_empty() {
            self.events.push(GroupEvent::Revoked(lost));
        }
        membership.reset();
    }

    /// Releases revoked partitions once their positions are committed (with auto-commit on)
    /// and takes new ones at their committed offsets. Returns whether anything was released,
    /// so that the release is reported at once.
    ///
    /// A partition whose commit fails for a reason a retry may cure is kept — nothing more is
    /// fetched or returned from it — and the commit is tried again at the next heartbeat: it
    /// moves to another member only after what this one delivered is committed.
    async fn apply_assignment(
        &mut self,
        membership: &mut Membership,
        assignment: BTreeSet<PartitionKey>,
    ) -> Result<bool, ClientError> {
        let owned = self.parts.keys();
        self.parts
            .stop_revoking(&owned.intersection(&assignment).cloned().collect());
        let revoked: BTreeSet<_> = owned.difference(&assignment).cloned().collect();
        let mut released = false;
        if !revoked.is_empty() {
            self.parts.start_revoking(&revoked);
            let committed = if self.config.auto_commit_interval.is_some() {
                commit_positions(membership, self.cluster, self.parts, &revoked).await
            } else {
                Ok(())
            };
            match committed {
                Err(e) if is_membership_gone(&e) => {
                    self.lose_everything(membership);
                    return Ok(false);
                }
                Err(e) if e.is_retriable() => {
                    tracing::warn!(group = %membership.group, error = %e,
                        "commit on revoke failed; keeping the partitions until it succeeds");
                    membership.retry_later();
                }
                result => {
                    if let Err(e) = result {
                        tracing::warn!(group = %membership.group, error = %e,
                            "commit on revoke refused; releasing the partitions uncommitted");
                    }
                    for key in &revoked {
                        self.parts.remove(key);
                    }
                    self.events
                        .push(GroupEvent::Revoked(revoked.iter().cloned().collect()));
                    released = true;
                }
            }
        }
        let added: BTreeSet<_> = assignment.difference(&owned).cloned().collect();
        if !added.is_empty() {
            let committed = match membership.committed(self.cluster, &added).await {
                Ok(committed) => committed,
                // Not taken: the next heartbeat reports them unowned and gets them again.
                Err(e) if e.is_retriable() => {
                    tracing::warn!(group = %membership.group, error = %e,
                        "cannot read committed offsets; taking the new partitions later");
                    membership.retry_later();
                    return Ok(released);
                }
                Err(e) => return Err(e),
            };
            for (key, offset) in committed {
                if added.contains(&key) {
                    self.parts.add(key, (offset >= 0).then_some(offset));
                }
            }
            for key in &added {
                self.parts.add(key.clone(), None);
            }
            self.events
                .push(GroupEvent::Assigned(added.into_iter().collect()));
        }
        Ok(released)
    }
}

/// Commits the positions of `keys`. A commit refused with `ILLEGAL_GENERATION` (the answer to
/// a heartbeat was lost, e.g. in a cancelled `poll`, so the member holds an old generation)
/// is sent again after one heartbeat has fetched the current generation; that heartbeat's
/// assignment is followed at the next one, which is due at once.
pub(super) async fn commit_positions(
    membership: &mut Membership,
    cluster: &Cluster,
    parts: &Partitions,
    keys: &BTreeSet<PartitionKey>,
) -> Result<(), ClientError> {
    let offsets = parts.commit_offsets(keys);
    match membership.commit(cluster, offsets.clone()).await {
        Err(e) if e.code() == Some(ErrorCode::ILLEGAL_GENERATION) => {
            membership.heartbeat(cluster, &parts.keys()).await?;
            membership.heartbeat_now();
            membership.commit(cluster, offsets).await
        }
        result => result,
    }
}

/// Commits like [`commit_positions`], sending the commit again after a retriable failure (the
/// coordinator moved or died, is still loading the group's offsets, or its offsets partition
/// is short of in-sync replicas) until `timeout` has passed. For the commits a caller waits
/// on (an explicit `commit`, and on `close`), which would otherwise be lost: the periodic and
/// the revoking commits are retried by the next tick.
pub(super) async fn commit_positions_retrying(
    membership: &mut Membership,
    cluster: &Cluster,
    parts: &Partitions,
    keys: &BTreeSet<PartitionKey>,
    timeout: Duration,
) -> Result<(), ClientError> {
    let deadline = Instant::now() + timeout;
    let mut backoff = RETRY_BACKOFF;
    loop {
        match commit_positions(membership, cluster, parts, keys).await {
            Err(e) if e.is_retriable() && Instant::now() + backoff < deadline => {
                tracing::debug!(group = %membership.group, error = %e, "commit failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(RETRY_BACKOFF_MAX);
            }
            result => return result,
        }
    }
}

/// Whether the coordinator says this member is not (or no longer) in the group.
fn is_membership_gone(error: &ClientError) -> bool {
    matches!(
        error.code(),
        Some(ErrorCode::UNKNOWN_MEMBER_ID | ErrorCode::ILLEGAL_GENERATION)
    )
}
