//! Static membership (KIP-345, `group.instance.id`), simply: an instance id names one member
//! at a time. A static member joins without the MEMBER_ID_REQUIRED round trip; when the same
//! instance joins again without a member id (a restarted consumer), it takes over its old
//! member's place under a new id, keeping its assignment, and the old id is fenced
//! (FENCED_INSTANCE_ID). The group rebalances only if the member was the leader or offers
//! other protocols; otherwise the restarted member gets the current generation at once.
//! A static member leaves by LeaveGroup or by its session running out, as any member.

use super::*;

impl<W> Group<W> {
    /// Whether `member_id`, claiming instance `instance` (`None`: a dynamic member), is that
    /// instance's current member.
    pub fn check_instance(
        &self,
        instance: Option<&str>,
        member_id: &str,
    ) -> Result<(), ClassicError> {
        let Some(instance) = instance else {
            return Ok(());
        };
        match self.static_members.get(instance) {
            Some(id) if id == member_id => Ok(()),
            Some(_) => Err(ClassicError::FencedInstanceId),
            None => Err(ClassicError::UnknownMemberId),
        }
    }

    /// The member id instance `instance` has now.
    pub fn member_of_instance(&self, instance: &str) -> Option<&String> {
        self.static_members.get(instance)
    }

    pub(super) fn join_static(
        &mut self,
        instance: String,
        join: Join,
        new_id: String,
        waiter: W,
        now: Instant,
    ) -> Deliveries<W> {
        let refuse = |error: ClassicError, waiter: W, member_id: &str| {
            let answer = Joined::error(error, member_id);
            vec![(waiter, Reply::Join(answer))]
        };
        let current = self.static_members.get(&instance).cloned();
        if !join.member_id.is_empty() {
            return match current {
                Some(id) if id == join.member_id => self.rejoin(join, waiter, now),
                Some(_) => refuse(ClassicError::FencedInstanceId, waiter, &join.member_id),
                None => refuse(ClassicError::UnknownMemberId, waiter, &join.member_id),
            };
        }
        let old = current.and_then(|id| self.members.remove(&id).map(|m| (id, m)));
        let Some((old_id, mut member)) = old else {
            // A new instance: its instance id names it, so no MEMBER_ID_REQUIRED.
            if self.members.len() + self.pending.len() >= GROUP_MEMBERS_MAX {
                return refuse(ClassicError::GroupMaxSizeReached, waiter, "");
            }
            return self.add_member(new_id, join, waiter, now);
        };
        let mut out = answer_waiters(&mut member, &old_id, ClassicError::FencedInstanceId);
        // Known by another id now: its bytes are counted anew.
        self.restate_bytes(member.stored_bytes(&old_id), member.stored_bytes(&new_id));
        self.members.insert(new_id.clone(), member);
        self.static_members.insert(instance, new_id.clone());
        if self.leader.as_deref() == Some(old_id.as_str()) {
            self.leader = Some(new_id.clone());
        }
        tracing::debug!(old = %old_id, new = %new_id, "static member replaced");
        let rejoin = Join {
            member_id: new_id,
            ..join
        };
        out.extend(self.rejoin(rejoin, waiter, now));
        out
    }
}
