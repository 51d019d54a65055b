//! The group coordinator's state machine: members, generations, target assignment, and the
//! hand-over rule. Time is passed in, so it is tested without sleeping.
//!
//! - A member joins with its topics and gets an id; any change of membership, subscriptions or
//!   partition counts recomputes the target assignment and bumps the generation.
//! - A member heartbeats with the partitions it owns; the answer is its target assignment
//!   minus partitions another member still owns. So a partition changes hands only after the
//!   old owner released it (its next heartbeat, sent after committing what it delivered) or
//!   its session expired. What a member is granted counts as owned from the moment it is
//!   granted, before the member reports it: otherwise a member joining right after another
//!   would be granted the same partitions and both would deliver them.
//! - While partitions move to or from a member it is told to heartbeat again soon
//!   ([`Grant::moving`]), so a rebalance takes about one normal heartbeat interval.
//! - Each member remembers the generation it was last told; a commit from an older generation,
//!   or from a member no longer in the group, is refused.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use tinymq_protocol::ErrorCode;

use super::assignment::{assign, Assignment, Strategy, Tp};

/// Session timeout bounds a member may ask for, in either group protocol (native, and Kafka's
/// classic one on the Kafka port: Kafka's `group.min/max.session.timeout.ms` defaults).
pub const SESSION_TIMEOUT_MIN: Duration = Duration::from_millis(1000);
pub const SESSION_TIMEOUT_MAX: Duration = Duration::from_secs(30 * 60);
/// Most members in one group, in either group protocol.
pub const GROUP_MEMBERS_MAX: usize = 1000;

pub type GroupError = (ErrorCode, String);

/// A member's answer to a join or heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub generation: u32,
    /// What the member may own now: keep these, release the others.
    pub partitions: BTreeSet<Tp>,
    /// Whether partitions are moving to or from this member (it owns other than its grant,
    /// or its grant is short of its target): it should heartbeat again soon.
    pub moving: bool,
}

#[derive(Debug, Clone)]
pub struct Member {
    pub client_id: String,
    pub topics: BTreeSet<String>,
    session_timeout: Duration,
    deadline: Instant,
    /// Partitions the member reported owning in its last heartbeat.
    pub owned: BTreeSet<Tp>,
    /// The generation last handed to this member.
    pub generation: u32,
}

#[derive(Debug, Clone)]
pub struct Group {
    pub strategy: Strategy,
    pub generation: u32,
    pub members: BTreeMap<String, Member>,
    pub target: Assignment,
    /// Partition counts the target was computed with.
    partitions: BTreeMap<String, u32>,
    next_member: u64,
    /// Nothing is granted before this: members of the group from before this coordinator
    /// started may still be reading (see [`Group::hold_until`]).
    hold_until: Option<Instant>,
}

impl Group {
    pub fn new(strategy: Strategy) -> Group {
        Group {
            strategy,
            generation: 0,
            members: BTreeMap::new(),
            target: Assignment::new(),
            partitions: BTreeMap::new(),
            next_member: 1,
            hold_until: None,
        }
    }

    /// Grants nothing before `until`. A coordinator that starts (or restarts) knows nothing
    /// of the members the group had: they keep reading what they own until their heartbeat
    /// is refused or, if the coordinator was unreachable, until their own session runs out.
    /// Granting their partitions before then would let two members read them.
    pub fn hold_until(&mut self, until: Instant) {
        self.hold_until = Some(until);
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// "empty", "rebalancing" (some member does not yet own its target) or "stable".
    pub fn state(&self) -> &'static str {
        if self.members.is_empty() {
            "empty"
        } else if self
            .members
            .iter()
            .any(|(id, m)| self.target.get(id).is_some_and(|t| *t != m.owned))
        {
            "rebalancing"
        } else {
            "stable"
        }
    }

    fn subscribed_topics(&self) -> BTreeSet<String> {
        self.members
            .values()
            .flat_map(|m| m.topics.iter().cloned())
            .collect()
    }

    /// Recomputes the target with the current members and partition counts; bumps the
    /// generation if it changed anything.
    fn rebalance(&mut self, partitions: &BTreeMap<String, u32>) {
        let subscriptions = self
            .members
            .iter()
            .map(|(id, m)| (id.clone(), m.topics.clone()))
            .collect();
        let target = assign(self.strategy, &subscriptions, partitions, &self.target);
        self.partitions = partitions.clone();
        if target != self.target || self.generation == 0 {
            self.target = target;
            self.generation += 1;
        }
    }

    /// Partition counts of the subscribed topics, looked up with `count`.
    fn counts(&self, count: &dyn Fn(&str) -> Option<u32>) -> BTreeMap<String, u32> {
        self.subscribed_topics()
            .into_iter()
            .filter_map(|t| count(&t).map(|n| (t, n)))
            .collect()
    }

    /// Removes members whose session expired; returns their ids.
    pub fn expire(&mut self, now: Instant, count: &dyn Fn(&str) -> Option<u32>) -> Vec<String> {
        let dead: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| m.deadline <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &dead {
            self.members.remove(id);
        }
        if !dead.is_empty() {
            let counts = self.counts(count);
            self.rebalance(&counts);
        }
        dead
    }

    /// What `member` may own now: its target minus what others still hold.
    fn grant(&self, member: &str) -> BTreeSet<Tp> {
        let Some(target) = self.target.get(member) else {
            return BTreeSet::new();
        };
        target
            .iter()
            .filter(|tp| {
                !self
                    .members
                    .iter()
                    .any(|(id, m)| id != member && m.owned.contains(*tp))
            })
            .cloned()
            .collect()
    }

    pub fn join(
        &mut self,
        member_id: &str,
        client_id: &str,
        topics: BTreeSet<String>,
        session_timeout: Duration,
        now: Instant,
        count: &dyn Fn(&str) -> Option<u32>,
    ) -> Result<(String, Grant), GroupError> {
        if !(SESSION_TIMEOUT_MIN..=SESSION_TIMEOUT_MAX).contains(&session_timeout) {
            return Err((
                ErrorCode::INVALID_REQUEST,
                format!(
                    "session timeout must be {SESSION_TIMEOUT_MIN:?} to {SESSION_TIMEOUT_MAX:?}"
                ),
            ));
        }
        let id = if member_id.is_empty() {
            if self.members.len() >= GROUP_MEMBERS_MAX {
                return Err((
                    ErrorCode::LIMIT_EXCEEDED,
                    format!("the group has {GROUP_MEMBERS_MAX} members"),
                ));
            }
            let id = format!("{client_id}-{}", self.next_member);
            self.next_member += 1;
            id
        } else if self.members.contains_key(member_id) {
            member_id.to_string()
        } else {
            return Err((
                ErrorCode::UNKNOWN_MEMBER_ID,
                format!("{member_id} is not in the group; join without a member id"),
            ));
        };
        let owned = self
            .members
            .get(&id)
            .map(|m| m.owned.clone())
            .unwrap_or_default();
        self.members.insert(
            id.clone(),
            Member {
                client_id: client_id.into(),
                topics,
                session_timeout,
                deadline: now + session_timeout,
                owned,
                generation: 0,
            },
        );
        let counts = self.counts(count);
        self.rebalance(&counts);
        let grant = self.hand_out(&id, now);
        Ok((id, grant))
    }

    /// Answers `member` (present) with its grant, which counts as owned from now on, and
    /// records the generation it was told.
    fn hand_out(&mut self, member_id: &str, now: Instant) -> Grant {
        let held = self.hold_until.is_some_and(|until| now < until);
        let partitions = if held {
            BTreeSet::new()
        } else {
            self.grant(member_id)
        };
        let target_len = self.target.get(member_id).map_or(0, BTreeSet::len);
        let generation = self.generation;
        let member = self.members.get_mut(member_id).expect("present");
        let moving = member.owned != partitions || partitions.len() < target_len;
        member.owned.extend(partitions.iter().cloned());
        member.generation = generation;
        Grant {
            generation,
            partitions,
            moving,
        }
    }

    pub fn heartbeat(
        &mut self,
        member_id: &str,
        owned: BTreeSet<Tp>,
        now: Instant,
        count: &dyn Fn(&str) -> Option<u32>,
    ) -> Result<Grant, GroupError> {
        self.expire(now, count);
        let Some(member) = self.members.get_mut(member_id) else {
            return Err((
                ErrorCode::UNKNOWN_MEMBER_ID,
                format!("{member_id} is not in the group (session expired?); join again"),
            ));
        };
        member.deadline = now + member.session_timeout;
        member.owned = owned;
        let counts = self.counts(count);
        if counts != self.partitions {
            self.rebalance(&counts);
        }
        Ok(self.hand_out(member_id, now))
    }

    pub fn leave(
        &mut self,
        member_id: &str,
        count: &dyn Fn(&str) -> Option<u32>,
    ) -> Result<(), GroupError> {
        if self.members.remove(member_id).is_none() {
            return Err((
                ErrorCode::UNKNOWN_MEMBER_ID,
                format!("{member_id} is not in the group"),
            ));
        }
        let counts = self.counts(count);
        self.rebalance(&counts);
        Ok(())
    }

    /// The session timeout `member_id` asked for (zero for an unknown member).
    pub fn session_timeout(&self, member_id: &str) -> Duration {
        self.members
            .get(member_id)
            .map_or(Duration::ZERO, |m| m.session_timeout)
    }

    /// Whether `member_id` at `generation` may commit.
    pub fn check_commit(&self, member_id: &str, generation: u32) -> Result<(), GroupError> {
        if member_id.is_empty() {
            return if self.members.is_empty() {
                Ok(())
            } else {
                Err((
                    ErrorCode::GROUP_NOT_EMPTY,
                    "the group has members; only they may commit".into(),
                ))
            };
        }
        let Some(member) = self.members.get(member_id) else {
            return Err((
                ErrorCode::UNKNOWN_MEMBER_ID,
                format!("{member_id} is not in the group"),
            ));
        };
        if generation != member.generation {
            return Err((
                ErrorCode::ILLEGAL_GENERATION,
                format!(
                    "generation {generation} is stale; the member's generation is {}",
                    member.generation
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn six(topic: &str) -> Option<u32> {
        (topic == "t").then_some(6)
    }

    fn topics() -> BTreeSet<String> {
        ["t".to_string()].into()
    }

    const SESSION: Duration = Duration::from_secs(10);

    #[test]
    fn partitions_change_hands_only_after_release() {
        let now = Instant::now();
        let mut g = Group::new(Strategy::Sticky);
        let (a, first) = g.join("", "c", topics(), SESSION, now, &six).unwrap();
        let grant_a = first.partitions;
        assert_eq!(grant_a.len(), 6);
        assert!(first.moving, "a has yet to report what it took");
        assert!(!g.heartbeat(&a, grant_a.clone(), now, &six).unwrap().moving);
        let (b, second) = g.join("", "c", topics(), SESSION, now, &six).unwrap();
        assert!(second.generation > first.generation);
        assert!(second.partitions.is_empty(), "a still owns everything");
        assert!(second.moving, "b waits for three partitions");
        let keep_a = g.heartbeat(&a, grant_a, now, &six).unwrap();
        assert_eq!(keep_a.partitions.len(), 3, "a is told to release three");
        assert!(keep_a.moving);
        let keep_a = keep_a.partitions;
        let still_b = g.heartbeat(&b, BTreeSet::new(), now, &six).unwrap();
        assert!(still_b.partitions.is_empty(), "a has not released yet");
        assert!(!g.heartbeat(&a, keep_a.clone(), now, &six).unwrap().moving);
        let now_b = g
            .heartbeat(&b, BTreeSet::new(), now, &six)
            .unwrap()
            .partitions;
        assert_eq!(now_b.len(), 3);
        assert!(now_b.is_disjoint(&keep_a));
        assert!(!g.heartbeat(&b, now_b, now, &six).unwrap().moving);
        assert_eq!(g.state(), "stable");
    }

    #[test]
    fn a_held_group_grants_nothing_until_the_hold_ends() {
        let now = Instant::now();
        let mut g = Group::new(Strategy::Sticky);
        g.hold_until(now + SESSION / 2);
        let (a, first) = g.join("", "c", topics(), SESSION, now, &six).unwrap();
        assert!(first.partitions.is_empty() && first.moving);
        let later = now + SESSION / 2;
        assert_eq!(
            g.heartbeat(&a, BTreeSet::new(), later, &six)
                .unwrap()
                .partitions
                .len(),
            6
        );
    }

    #[test]
    fn a_grant_counts_as_owned_before_the_member_reports_it() {
        let now = Instant::now();
        let mut g = Group::new(Strategy::Sticky);
        let (_a, first) = g.join("", "c", topics(), SESSION, now, &six).unwrap();
        assert_eq!(first.partitions.len(), 6);
        // b joins before a's first heartbeat: nothing a was granted goes to b as well.
        let (b, second) = g.join("", "c", topics(), SESSION, now, &six).unwrap();
        assert!(second.partitions.is_empty());
        assert!(g
            .heartbeat(&b, BTreeSet::new(), now, &six)
            .unwrap()
            .partitions
            .is_empty());
    }

    #[test]
    fn expired_members_are_removed_and_their_partitions_move() {
        let start = Instant::now();
        let mut g = Group::new(Strategy::Range);
        let (a, ga) = g.join("", "c", topics(), SESSION, start, &six).unwrap();
        g.heartbeat(&a, ga.partitions, start, &six).unwrap();
        let (b, _) = g.join("", "c", topics(), SESSION, start, &six).unwrap();
        let ka = g
            .heartbeat(&a, g.target[&a].clone(), start, &six)
            .unwrap()
            .partitions;
        let gb = g
            .heartbeat(&b, BTreeSet::new(), start, &six)
            .unwrap()
            .partitions;
        let mid = start + SESSION / 2;
        g.heartbeat(&b, gb, mid, &six).unwrap();
        assert_eq!(ka.len(), 3);
        // a stops heartbeating; after its session b gets everything.
        let later = start + SESSION + Duration::from_millis(1);
        let all = g
            .heartbeat(&b, g.target[&b].clone(), later, &six)
            .unwrap()
            .partitions;
        assert!(!g.members.contains_key(&a));
        let all = if all.len() < 6 {
            g.heartbeat(&b, all, later, &six).unwrap().partitions
        } else {
            all
        };
        assert_eq!(all.len(), 6);
        assert_eq!(
            g.heartbeat(&a, BTreeSet::new(), later, &six).unwrap_err().0,
            ErrorCode::UNKNOWN_MEMBER_ID
        );
    }

    #[test]
    fn stale_generations_and_departed_members_cannot_commit() {
        let now = Instant::now();
        let mut g = Group::new(Strategy::Sticky);
        let (a, first) = g.join("", "c", topics(), SESSION, now, &six).unwrap();
        let gen_a = first.generation;
        assert!(g.check_commit(&a, gen_a).is_ok());
        let (_b, _) = g.join("", "c", topics(), SESSION, now, &six).unwrap();
        // a has not heard of the new generation yet: its commits still count.
        assert!(g.check_commit(&a, gen_a).is_ok());
        let gen_a2 = g
            .heartbeat(&a, BTreeSet::new(), now, &six)
            .unwrap()
            .generation;
        assert!(gen_a2 > gen_a);
        assert_eq!(
            g.check_commit(&a, gen_a).unwrap_err().0,
            ErrorCode::ILLEGAL_GENERATION
        );
        g.leave(&a, &six).unwrap();
        assert_eq!(
            g.check_commit(&a, gen_a2).unwrap_err().0,
            ErrorCode::UNKNOWN_MEMBER_ID
        );
        assert_eq!(
            g.check_commit("", 0).unwrap_err().0,
            ErrorCode::GROUP_NOT_EMPTY
        );
    }

    #[test]
    fn new_partitions_are_assigned_on_the_next_heartbeat() {
        let now = Instant::now();
        let mut g = Group::new(Strategy::Sticky);
        let (a, first) = g.join("", "c", topics(), SESSION, now, &six).unwrap();
        let eight = |t: &str| (t == "t").then_some(8);
        let second = g.heartbeat(&a, first.partitions, now, &eight).unwrap();
        assert!(second.generation > first.generation);
        assert_eq!(second.partitions.len(), 8);
    }
}
