//! The coordinator's classic mode: Kafka's classic group protocol (JoinGroup, SyncGroup,
//! Heartbeat, LeaveGroup, the committer check of OffsetCommit, describe and list) over the
//! coordinator's one map of groups, for the Kafka listener to translate to and from Kafka's
//! messages. One group's rules are in [`super::classic`]; here are the rules between groups:
//!
//! - one namespace: a classic join of a group with native members is refused
//!   (INCONSISTENT_GROUP_PROTOCOL), as a native join of a group with classic members is
//!   (in `super`); an empty native entry, or a vacant classic one, gives way;
//! - one bound on groups ([`super::GROUPS_MAX`]), and one on the bytes of all classic
//!   groups ([`super::classic::CLASSIC_GROUPS_BYTES_MAX`], a running total in
//!   `super::table`);
//! - member ids are made here (`super::member_ids`);
//! - time passes by [`GroupCoordinator::classic_tick`], which the broker's group timer
//!   calls every 100 ms (the precision of classic sessions and join phases).
//!
//! A JoinGroup or SyncGroup that must wait parks a oneshot sender in its group and awaits
//! it; every answer due is sent after the coordinator's lock is dropped, and no lock is
//! held while waiting.

use std::time::Instant;

use tokio::sync::oneshot;

use super::classic::{
    ClassicDescription, ClassicError, ClassicSummary, Deliveries, Join, Joined, Joining, Reply,
    SyncRequest, Synced, VACANT_GROUP_FORGET_AFTER,
};
use super::table::{deliver, ClassicGroup, Entry, Groups, Waiter};
use super::{GroupCoordinator, GROUPS_MAX};

impl GroupCoordinator {
    /// A JoinGroup of classic group `group_id`, answered when its join phase ends (or at
    /// once if refused). The group is created by its first join, within [`GROUPS_MAX`].
    pub async fn classic_join(&self, group_id: &str, join: Join, now: Instant) -> Joined {
        let member_id = join.member_id.clone();
        let (waiter, answer) = oneshot::channel();
        deliver(self.park_join(group_id, join, waiter, now));
        match answer.await {
            Ok(Reply::Join(joined)) => joined,
            // Replaced by a newer join of the same member: that one gets the answer.
            _ => Joined::error(ClassicError::RebalanceInProgress, &member_id),
        }
    }

    /// Runs a join through `group_id`'s state machine, creating the group for it (a join
    /// refused leaves no new group behind); returns the replies due.
    pub(super) fn park_join(
        &self,
        group_id: &str,
        join: Join,
        waiter: Waiter,
        now: Instant,
    ) -> Deliveries<Waiter> {
        let refuse = |error: ClassicError, why: &str, waiter: Waiter| {
            tracing::info!(group = %group_id, "kafka join refused: {why}");
            vec![(waiter, Reply::Join(Joined::error(error, &join.member_id)))]
        };
        if let Err((_, why)) = super::validate_group_id(group_id) {
            return refuse(ClassicError::InvalidGroupId, &why, waiter);
        }
        // Before the group exists: a join refused for itself creates nothing.
        if let Err((error, why)) = join.check() {
            return refuse(error, &why, waiter);
        }
        let fresh_member_id = self.member_ids.fresh(&join.client_id);
        let mut groups = self.groups.lock();
        let created = match classic_entry(&mut groups, group_id, now) {
            Ok(created) => created,
            Err((error, why)) => return refuse(error, &why, waiter),
        };
        let joining = Joining {
            join,
            fresh_member_id,
        };
        let joined =
            groups.with_classic(group_id, |g| (g.join(joining, waiter, now), g.is_vacant()));
        // `classic_entry` left a classic entry, so the join ran.
        let (out, vacant) = joined.unwrap_or_default();
        if created && vacant {
            // Refused (or left nothing behind): it counts against no bound.
            groups.remove(group_id);
        }
        out
    }

    /// A SyncGroup: the leader's assignments, or a follower's wait for its own; answered
    /// once the leader's arrive (or at once).
    pub async fn classic_sync(&self, group_id: &str, sync: SyncRequest, now: Instant) -> Synced {
        let (waiter, answer) = oneshot::channel();
        deliver(self.park_sync(group_id, sync, waiter, now));
        match answer.await {
            Ok(Reply::Sync(synced)) => synced,
            _ => Synced::error(ClassicError::RebalanceInProgress),
        }
    }

    pub(super) fn park_sync(
        &self,
        group_id: &str,
        sync: SyncRequest,
        waiter: Waiter,
        now: Instant,
    ) -> Deliveries<Waiter> {
        let refuse = |error, waiter| vec![(waiter, Reply::Sync(Synced::error(error)))];
        let mut groups = self.groups.lock();
        if groups.classic(group_id).is_none() {
            return refuse(ClassicError::UnknownMemberId, waiter);
        }
        let out = groups.with_classic(group_id, |g| {
            let instance = sync.group_instance_id.as_deref();
            if let Err(error) = g.check_instance(instance, &sync.member_id) {
                return refuse(error, waiter);
            }
            g.sync(
                &sync.member_id,
                sync.generation,
                sync.protocol_type.as_deref(),
                sync.protocol_name.as_deref(),
                sync.assignments,
                waiter,
                now,
            )
        });
        // The group is there (checked above, under the same lock), so the sync ran.
        out.unwrap_or_default()
    }

    /// A Heartbeat: `Ok` to carry on; REBALANCE_IN_PROGRESS tells the member to rejoin.
    pub fn classic_heartbeat(
        &self,
        group_id: &str,
        member_id: &str,
        instance: Option<&str>,
        generation: i32,
        now: Instant,
    ) -> Result<(), ClassicError> {
        let mut groups = self.groups.lock();
        let beat = groups.with_classic(group_id, |g| {
            g.check_instance(instance, member_id)?;
            g.heartbeat(member_id, generation, now)
        });
        beat.unwrap_or(Err(ClassicError::UnknownMemberId))
    }

    /// A LeaveGroup of one member, named by its id or (a static member) by its instance id
    /// alone; the others rebalance.
    pub fn classic_leave(
        &self,
        group_id: &str,
        member_id: &str,
        instance: Option<&str>,
        now: Instant,
    ) -> Result<(), ClassicError> {
        let (left, out) = {
            let mut groups = self.groups.lock();
            let left = groups.with_classic(group_id, |g| leave(g, member_id, instance, now));
            left.unwrap_or((Err(ClassicError::UnknownMemberId), Vec::new()))
        };
        deliver(out);
        if left.is_ok() {
            tracing::info!(group = %group_id, member = %member_id, "kafka group member left");
        }
        left
    }

    /// Whether `member_id` at `generation` may commit offsets of `group_id` (Kafka's rules;
    /// a group not known here, or native, is an empty one: only a consumer assigning
    /// partitions itself, with a negative generation, may).
    pub fn classic_check_commit(
        &self,
        group_id: &str,
        member_id: &str,
        instance: Option<&str>,
        generation: i32,
    ) -> Result<(), ClassicError> {
        let groups = self.groups.lock();
        match groups.classic(group_id) {
            Some(g) => {
                g.check_instance(instance, member_id)?;
                g.check_commit(member_id, generation)
            }
            None if generation < 0 => Ok(()),
            None => Err(ClassicError::UnknownMemberId),
        }
    }

    /// Classic group `group_id` (`None`: none here), as DescribeGroups shows it.
    pub fn classic_describe(&self, group_id: &str) -> Option<ClassicDescription> {
        let groups = self.groups.lock();
        groups.classic(group_id).map(ClassicGroup::describe)
    }

    /// The classic groups kept here, with members or vacant (until forgotten).
    pub fn classic_groups(&self) -> Vec<ClassicSummary> {
        let groups = self.groups.lock();
        groups.classics().map(|(id, g)| g.summary(id)).collect()
    }

    /// Time passes for the classic groups (called by the broker's group timer): sessions
    /// expire, join phases past their deadline end, groups vacant for
    /// [`VACANT_GROUP_FORGET_AFTER`] are forgotten. Walks the classic groups only.
    pub fn classic_tick(&self, now: Instant) {
        let out = self
            .groups
            .lock()
            .tick_classic(now, VACANT_GROUP_FORGET_AFTER);
        deliver(out);
    }
}

/// Makes sure `group_id` has a classic entry for a join: an empty native entry gives way,
/// one with native members refuses; a new one is within [`GROUPS_MAX`]. Whether it was
/// created now.
fn classic_entry(
    groups: &mut Groups,
    group_id: &str,
    now: Instant,
) -> Result<bool, (ClassicError, String)> {
    match groups.get(group_id) {
        Some(Entry::Classic(_)) => return Ok(false),
        Some(Entry::Native(g)) if !g.is_empty() => {
            let why = format!("group {group_id} has native members");
            return Err((ClassicError::InconsistentGroupProtocol, why));
        }
        Some(Entry::Native(_)) => {
            groups.remove(group_id);
        }
        None => {}
    }
    if groups.len() >= GROUPS_MAX {
        let why = format!("this broker coordinates GROUPS_MAX ({GROUPS_MAX}) groups already");
        return Err((ClassicError::GroupMaxSizeReached, why));
    }
    let group = ClassicGroup::new(now);
    groups.insert(group_id.to_string(), Entry::Classic(group));
    Ok(true)
}

/// A leave of `member_id`, or of the member instance `instance` has now when no id is given.
fn leave(
    g: &mut ClassicGroup,
    member_id: &str,
    instance: Option<&str>,
    now: Instant,
) -> (Result<(), ClassicError>, Deliveries<Waiter>) {
    let member_id = match (member_id, instance) {
        ("", Some(instance)) => g.member_of_instance(instance).cloned(),
        _ => Some(member_id.to_string()),
    };
    let Some(member_id) = member_id else {
        return (Err(ClassicError::UnknownMemberId), Vec::new());
    };
    if let Err(error) = g.check_instance(instance, &member_id) {
        return (Err(error), Vec::new());
    }
    g.leave(&member_id, now)
}

#[cfg(test)]
mod tests;
