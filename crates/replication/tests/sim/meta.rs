//! The simulated MetaServer for one partition: replicas, leader, leader epoch, ISR and
//! partition epoch; broker sessions (heartbeats, fencing, incarnations); ISR changes only by
//! compare-and-set on the leader epoch and partition epoch; elections by `choose_leader`.
//! Its own replication (Raft) is out of scope: it is one always-available state machine.

use std::collections::BTreeMap;

use tinymq_replication::{choose_leader, preferred_leader};

/// What the MetaServer tells brokers about the partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionState {
    pub leader: Option<u32>,
    pub leader_epoch: i32,
    pub isr: Vec<u32>,
    pub partition_epoch: i32,
}

/// A broker's session: the incarnation it registered with and its last heartbeat.
#[derive(Debug, Clone)]
pub struct Session {
    pub incarnation: u64,
    pub last_heartbeat_ms: u64,
    pub fenced: bool,
}

pub struct Meta {
    pub replicas: Vec<u32>,
    pub part: PartitionState,
    pub sessions: BTreeMap<u32, Session>,
    pub session_timeout_ms: u64,
}

impl Meta {
    pub fn new(replicas: Vec<u32>, session_timeout_ms: u64) -> Self {
        let sessions = replicas
            .iter()
            .map(|&id| {
                let s = Session {
                    incarnation: 0,
                    last_heartbeat_ms: 0,
                    fenced: false,
                };
                (id, s)
            })
            .collect();
        Meta {
            part: PartitionState {
                leader: replicas.first().copied(),
                leader_epoch: 0,
                isr: replicas.clone(),
                partition_epoch: 0,
            },
            replicas,
            sessions,
            session_timeout_ms,
        }
    }

    pub fn live(&self, id: u32) -> bool {
        self.sessions.get(&id).is_some_and(|s| !s.fenced)
    }

    /// Elects with `choose_leader` (clean only). The leader epoch moves when the leader
    /// changes, or always when `force` (the leader re-registered: it lost its unfsynced tail,
    /// so its old epoch must not grow again).
    fn elect(&mut self, force: bool, log: &mut Vec<String>) {
        let leader = choose_leader(
            &self.replicas,
            &self.part.isr,
            |id| self.live(id),
            false,
            |_| true,
        );
        if leader != self.part.leader || force {
            self.part.leader = leader;
            self.part.leader_epoch += 1;
            self.part.partition_epoch += 1;
            log.push(format!(
                "  meta: leader {:?} epoch {} isr {:?}",
                leader, self.part.leader_epoch, self.part.isr
            ));
        }
    }

    /// A heartbeat (or registration, when the incarnation is new) from a reachable broker.
    pub fn heartbeat(
        &mut self,
        id: u32,
        incarnation: u64,
        now_ms: u64,
        log: &mut Vec<String>,
    ) -> PartitionState {
        let s = self
            .sessions
            .get_mut(&id)
            .expect("a replica of the partition");
        let new_incarnation = s.incarnation != incarnation;
        let was_fenced = s.fenced;
        s.incarnation = incarnation;
        s.last_heartbeat_ms = now_ms;
        s.fenced = false;
        if new_incarnation && self.part.leader == Some(id) {
            self.elect(true, log);
        } else if was_fenced && self.part.leader.is_none() {
            self.elect(false, log);
        }
        self.part.clone()
    }

    /// Fences brokers whose session expired: out of the ISR (unless the last member, as in
    /// KIP-841, so it can lead again when it returns), and a new leader if it led.
    pub fn tick(&mut self, now_ms: u64, log: &mut Vec<String>) {
        let expired: Vec<u32> = self
            .sessions
            .iter()
            .filter(|(_, s)| {
                !s.fenced && now_ms.saturating_sub(s.last_heartbeat_ms) > self.session_timeout_ms
            })
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            log.push(format!("  meta: fence {id}"));
            if let Some(s) = self.sessions.get_mut(&id) {
                s.fenced = true;
            }
            if self.part.isr.contains(&id) && self.part.isr.len() > 1 {
                self.part.isr.retain(|&m| m != id);
                self.part.partition_epoch += 1;
            }
            if self.part.leader == Some(id) {
                self.elect(false, log);
            }
        }
    }

    /// The leader's ISR change: accepted only from the current leader with the current leader
    /// epoch and partition epoch (compare-and-set), never adding a fenced broker. Refusing the
    /// current leader's proposal at the current epochs still moves the partition epoch, so no
    /// delayed copy of it can apply later: the leader settles a proposal only on a newer
    /// partition epoch (seed 32925 found the late copy).
    pub fn alter_isr(
        &mut self,
        from: u32,
        leader_epoch: i32,
        partition_epoch: i32,
        isr: &[u32],
    ) -> Result<PartitionState, PartitionState> {
        let p = &self.part;
        let ok = p.leader == Some(from)
            && p.leader_epoch == leader_epoch
            && p.partition_epoch == partition_epoch
            && isr.contains(&from)
            && isr.iter().all(|id| self.replicas.contains(id))
            && isr.iter().all(|&id| p.isr.contains(&id) || self.live(id));
        if !ok {
            let current = p.leader == Some(from)
                && p.leader_epoch == leader_epoch
                && p.partition_epoch == partition_epoch;
            if current {
                self.part.partition_epoch += 1;
            }
            return Err(self.part.clone());
        }
        self.part.isr = isr.to_vec();
        self.part.partition_epoch += 1;
        Ok(self.part.clone())
    }

    /// Moves leadership back to the preferred replica when it is live and in sync.
    pub fn preferred_election(&mut self, log: &mut Vec<String>) {
        let preferred = preferred_leader(&self.replicas, &self.part.isr, |id| self.live(id));
        if preferred.is_some() && preferred != self.part.leader {
            self.part.leader = preferred;
            self.part.leader_epoch += 1;
            self.part.partition_epoch += 1;
            log.push(format!(
                "  meta: preferred leader {:?} epoch {}",
                preferred, self.part.leader_epoch
            ));
        }
    }
}
