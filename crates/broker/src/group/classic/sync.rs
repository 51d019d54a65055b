//! SyncGroup and what follows a join: heartbeats, leaving, sessions running out, and who
//! may commit.

use super::*;

impl<W> Group<W> {
    /// `UNKNOWN_MEMBER_ID` or `ILLEGAL_GENERATION` unless `member_id` is a member of
    /// `generation`.
    fn check_member(&self, member_id: &str, generation: i32) -> Result<(), ClassicError> {
        if self.phase == Phase::Empty || !self.members.contains_key(member_id) {
            return Err(ClassicError::UnknownMemberId);
        }
        if generation != self.generation {
            return Err(ClassicError::IllegalGeneration);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub fn sync(
        &mut self,
        member_id: &str,
        generation: i32,
        protocol_type: Option<&str>,
        protocol_name: Option<&str>,
        assignments: Vec<(String, Bytes)>,
        waiter: W,
        now: Instant,
    ) -> Deliveries<W> {
        let refuse =
            |error: ClassicError, waiter: W| vec![(waiter, Reply::Sync(Synced::error(error)))];
        if let Err(error) = self.check_member(member_id, generation) {
            return refuse(error, waiter);
        }
        let mismatch = |asked: Option<&str>, ours: &Option<String>| {
            asked.is_some_and(|a| ours.as_deref() != Some(a))
        };
        if mismatch(protocol_type, &self.protocol_type)
            || mismatch(protocol_name, &self.protocol_name)
        {
            return refuse(ClassicError::InconsistentGroupProtocol, waiter);
        }
        let is_leader = self.leader.as_deref() == Some(member_id);
        match self.phase {
            Phase::Empty | Phase::PreparingRebalance => {
                refuse(ClassicError::RebalanceInProgress, waiter)
            }
            Phase::Stable => {
                let answer = self.synced(member_id);
                vec![(waiter, Reply::Sync(answer))]
            }
            Phase::CompletingRebalance => {
                let assignments = if is_leader {
                    match self.check_assignments(assignments) {
                        Ok(assignments) => Some(assignments),
                        Err(error) => return refuse(error, waiter),
                    }
                } else {
                    None
                };
                if let Some(member) = self.members.get_mut(member_id) {
                    member.deadline = now + member.session_timeout;
                    member.sync_waiter = Some(waiter);
                }
                let Some(assignments) = assignments else {
                    return Vec::new();
                };
                self.assign(assignments);
                self.phase = Phase::Stable;
                let ids: Vec<String> = self.members.keys().cloned().collect();
                let mut out = Vec::new();
                for id in ids {
                    let answer = self.synced(&id);
                    if let Some(waiter) =
                        self.members.get_mut(&id).and_then(|m| m.sync_waiter.take())
                    {
                        out.push((waiter, Reply::Sync(answer)));
                    }
                }
                out
            }
        }
    }

    /// The leader's assignments of current members (an id given twice: the last), unless
    /// one is over [`ASSIGNMENT_BYTES_MAX`] (INVALID_REQUEST) or they would take the group
    /// over its budget (GROUP_MAX_SIZE_REACHED).
    fn check_assignments(
        &self,
        assignments: Vec<(String, Bytes)>,
    ) -> Result<BTreeMap<String, Bytes>, ClassicError> {
        if let Some((id, a)) = assignments
            .iter()
            .find(|(_, a)| a.len() > ASSIGNMENT_BYTES_MAX)
        {
            tracing::info!(
                member = %id,
                "kafka sync refused: an assignment of {} bytes, over ASSIGNMENT_BYTES_MAX \
                 ({ASSIGNMENT_BYTES_MAX})",
                a.len()
            );
            return Err(ClassicError::InvalidRequest);
        }
        let mut assignments: BTreeMap<String, Bytes> = assignments.into_iter().collect();
        assignments.retain(|id, _| self.members.contains_key(id));
        let sum = |lens: &mut dyn Iterator<Item = usize>| lens.fold(0, usize::saturating_add);
        let current = sum(&mut self.members.values().map(|m| m.assignment.len()));
        let incoming = sum(&mut assignments.values().map(Bytes::len));
        let bytes = self
            .stored_bytes
            .saturating_sub(current)
            .saturating_add(incoming);
        if bytes > self.budget.bytes_max {
            let Budget { bytes_max, limit } = self.budget;
            tracing::info!(
                "kafka sync refused: the group would keep {bytes} bytes, over {limit} \
                 ({bytes_max} bytes now)"
            );
            return Err(ClassicError::GroupMaxSizeReached);
        }
        Ok(assignments)
    }

    /// Gives every member its part of `assignments` (copied: the request's bytes are
    /// slices of its whole frame), nothing for a member left out.
    fn assign(&mut self, mut assignments: BTreeMap<String, Bytes>) {
        let (mut before, mut after) = (0usize, 0usize);
        for (id, member) in self.members.iter_mut() {
            let assignment = assignments.remove(id).unwrap_or_default();
            before = before.saturating_add(member.assignment.len());
            after = after.saturating_add(assignment.len());
            member.assignment = Bytes::copy_from_slice(&assignment);
        }
        self.restate_bytes(before, after);
    }

    fn synced(&self, member_id: &str) -> Synced {
        Synced {
            error: None,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            assignment: self
                .members
                .get(member_id)
                .map(|m| m.assignment.clone())
                .unwrap_or_default(),
        }
    }

    /// A heartbeat: `Ok` to carry on; REBALANCE_IN_PROGRESS tells the member to rejoin.
    pub fn heartbeat(
        &mut self,
        member_id: &str,
        generation: i32,
        now: Instant,
    ) -> Result<(), ClassicError> {
        self.check_member(member_id, generation)?;
        if let Some(member) = self.members.get_mut(member_id) {
            member.deadline = now + member.session_timeout;
        }
        if self.phase == Phase::PreparingRebalance {
            return Err(ClassicError::RebalanceInProgress);
        }
        Ok(())
    }

    /// Removes `member_id` (a LeaveGroup); the others rebalance.
    pub fn leave(
        &mut self,
        member_id: &str,
        now: Instant,
    ) -> (Result<(), ClassicError>, Deliveries<W>) {
        if self.pending.remove(member_id).is_some() {
            return (Ok(()), Vec::new());
        }
        match self.remove_member(member_id, now) {
            Some(out) => (Ok(()), out),
            None => (Err(ClassicError::UnknownMemberId), Vec::new()),
        }
    }

    /// Removes a member, answering its waiting requests with UNKNOWN_MEMBER_ID, and starts
    /// a rebalance of the others; `None` if it is not a member.
    fn remove_member(&mut self, member_id: &str, now: Instant) -> Option<Deliveries<W>> {
        let mut member = self.members.remove(member_id)?;
        self.restate_bytes(member.stored_bytes(member_id), 0);
        if let Some(instance) = &member.instance_id {
            if self
                .static_members
                .get(instance)
                .is_some_and(|id| id == member_id)
            {
                self.static_members.remove(instance);
            }
        }
        let mut out = answer_waiters(&mut member, member_id, ClassicError::UnknownMemberId);
        if self.phase != Phase::PreparingRebalance {
            out.extend(self.prepare_rebalance(now));
        }
        out.extend(self.try_complete_join(now));
        Some(out)
    }

    /// Time passes: members whose session ran out (and that wait for no answer) are
    /// removed, unused MEMBER_ID_REQUIRED ids expire, a join phase past its deadline ends.
    pub fn tick(&mut self, now: Instant) -> (Vec<String>, Deliveries<W>) {
        self.pending.retain(|_, deadline| *deadline > now);
        let expired: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| !m.waits() && m.deadline <= now)
            .map(|(id, _)| id.clone())
            .collect();
        let mut out = Vec::new();
        for id in &expired {
            out.extend(self.remove_member(id, now).unwrap_or_default());
        }
        out.extend(self.try_complete_join(now));
        (expired, out)
    }

    /// Whether an OffsetCommit from `member_id` at `generation` is accepted (Kafka's rules:
    /// a negative generation on an empty group is a consumer that assigns partitions
    /// itself; otherwise a current member of the current generation, not while the leader's
    /// assignment is awaited).
    pub fn check_commit(&self, member_id: &str, generation: i32) -> Result<(), ClassicError> {
        if generation < 0 && self.phase == Phase::Empty {
            return Ok(());
        }
        self.check_member(member_id, generation)?;
        if self.phase == Phase::CompletingRebalance {
            return Err(ClassicError::RebalanceInProgress);
        }
        Ok(())
    }

    /// The group is no longer coordinated here (its offsets partition moved): every
    /// waiting request is answered with `error`, so that its member looks for the new
    /// coordinator.
    pub fn abandon(&mut self, error: ClassicError) -> Deliveries<W> {
        let mut out = Vec::new();
        for (id, member) in self.members.iter_mut() {
            out.extend(answer_waiters(member, id, error));
        }
        out
    }
}
