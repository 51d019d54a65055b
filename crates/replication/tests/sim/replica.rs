//! A simulated replica: a log of `(epoch, value)` entries with a durable prefix, a leader-epoch
//! cache, a high watermark, and a role (leader with its follower states, follower truncating
//! or fetching). Handlers here change only the replica and return what to send; the world
//! routes messages and checks invariants.

use tinymq_replication::{
    acks_all_ready, high_watermark, isr_expand_candidates, isr_shrink, min_insync_check,
    truncation_point, visible_high_watermark, EpochEnd, FollowerState, Followers, LeaderEpochCache,
};

use crate::sim::meta::PartitionState;

pub const REPLICAS: [u32; 3] = [0, 1, 2];
pub const MIN_INSYNC_REPLICAS: usize = 2;
pub const REPLICA_LAG_TIME_MAX_MS: u64 = 3_000;
pub const ALTER_ISR_RETRY_MS: u64 = 2_000;
pub const FETCH_ENTRIES_MAX: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub epoch: i32,
    pub value: u64,
}

/// A record the leader acknowledged to its producer (`acks=all`).
#[derive(Debug, Clone, Copy)]
pub struct Acked {
    pub offset: i64,
    pub entry: Entry,
}

/// An ISR change sent to the MetaServer and not settled yet. It is kept (and resent) until an
/// answer to it or a newer partition epoch settles it: the MetaServer may have applied it even
/// if no answer came back, so its additions must keep counting for the high watermark.
pub struct Pending {
    pub id: u64,
    pub isr: Vec<u32>,
    pub sent_ms: u64,
}

pub struct LeaderRole {
    pub leader_epoch: i32,
    pub epoch_start: i64,
    /// The ISR as the MetaServer last confirmed it to this leader.
    pub isr: Vec<u32>,
    pub partition_epoch: i32,
    pub pending: Option<Pending>,
    pub followers: Followers,
    /// Offsets of `acks=all` produces not answered yet.
    pub unacked: Vec<i64>,
    pub next_proposal: u64,
}

impl LeaderRole {
    /// The maximal ISR: confirmed members plus proposed additions.
    pub fn maximal_isr(&self) -> Vec<u32> {
        let mut isr = self.isr.clone();
        if let Some(p) = &self.pending {
            for id in &p.isr {
                if !isr.contains(id) {
                    isr.push(*id);
                }
            }
        }
        isr
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Truncating,
    Fetching,
}

pub enum Role {
    /// Just restarted: waits for its registration to learn the partition state.
    Unregistered,
    Follower {
        leader: Option<u32>,
        leader_epoch: i32,
        phase: Phase,
    },
    Leader(LeaderRole),
}

pub struct Replica {
    pub id: u32,
    pub incarnation: u64,
    pub up: bool,
    pub paused: bool,
    pub log: Vec<Entry>,
    pub durable: usize,
    pub cache: LeaderEpochCache,
    pub hw: i64,
    pub known_epoch: i32,
    pub role: Role,
}

pub enum Reply {
    FetchOk { entries: Vec<Entry>, hw: i64 },
    FetchErr,
}

fn off(len: usize) -> i64 {
    i64::try_from(len).expect("simulated logs are short")
}

fn idx(offset: i64) -> usize {
    usize::try_from(offset).expect("offsets handled here are checked non-negative")
}

impl Replica {
    pub fn new(id: u32) -> Self {
        Replica {
            id,
            incarnation: 0,
            up: true,
            paused: false,
            log: Vec::new(),
            durable: 0,
            cache: LeaderEpochCache::new(),
            hw: 0,
            known_epoch: -1,
            role: Role::Unregistered,
        }
    }

    pub fn active(&self) -> bool {
        self.up && !self.paused
    }

    pub fn log_end(&self) -> i64 {
        off(self.log.len())
    }

    pub fn durable_end(&self) -> i64 {
        off(self.durable)
    }

    pub fn truncate(&mut self, end: i64) {
        let end = idx(end.clamp(0, self.log_end()));
        self.log.truncate(end);
        self.durable = self.durable.min(end);
        self.cache.truncate_from_end(off(end));
        self.hw = self.hw.min(off(end));
    }

    /// Power loss: the unfsynced tail is gone, and so is every in-memory role.
    pub fn crash(&mut self) {
        self.up = false;
        self.paused = false;
        let durable = self.durable_end();
        self.truncate(durable);
        self.role = Role::Unregistered;
        self.known_epoch = -1;
    }

    pub fn restart(&mut self) {
        self.up = true;
        self.incarnation += 1;
    }

    /// The high watermark a consumer may read up to here, if this replica leads.
    pub fn visible_hw(&self) -> Option<(i32, i64)> {
        match &self.role {
            Role::Leader(l) => {
                visible_high_watermark(self.hw, l.epoch_start).map(|hw| (l.leader_epoch, hw))
            }
            _ => None,
        }
    }

    /// Applies the partition state from a heartbeat answer or an ISR-change answer.
    /// Returns the produces a changed ISR lets the leader acknowledge.
    pub fn apply_state(
        &mut self,
        st: &PartitionState,
        now_ms: u64,
        trace: &mut Vec<String>,
    ) -> Vec<Acked> {
        let fresh = matches!(self.role, Role::Unregistered);
        if st.leader_epoch < self.known_epoch {
            return Vec::new();
        }
        if st.leader_epoch == self.known_epoch && !fresh {
            if let Role::Leader(l) = &mut self.role {
                if st.partition_epoch > l.partition_epoch {
                    l.isr = st.isr.clone();
                    l.partition_epoch = st.partition_epoch;
                    l.pending = None;
                }
            }
            return self.recompute_hw();
        }
        self.known_epoch = st.leader_epoch;
        if st.leader == Some(self.id) {
            let start = self.log_end();
            if let Err(e) = self.cache.assign(st.leader_epoch, start) {
                panic!(
                    "replica {}: epoch cache refused its own leader epoch: {e}",
                    self.id
                );
            }
            let followers = REPLICAS
                .iter()
                .filter(|&&id| id != self.id)
                .map(|&id| (id, FollowerState::new(now_ms)))
                .collect();
            trace.push(format!(
                "  r{} leads epoch {} from {start} (hw {})",
                self.id, st.leader_epoch, self.hw
            ));
            self.role = Role::Leader(LeaderRole {
                leader_epoch: st.leader_epoch,
                epoch_start: start,
                isr: st.isr.clone(),
                partition_epoch: st.partition_epoch,
                pending: None,
                followers,
                unacked: Vec::new(),
                next_proposal: 0,
            });
        } else {
            trace.push(format!(
                "  r{} follows {:?} in epoch {}",
                self.id, st.leader, st.leader_epoch
            ));
            self.role = Role::Follower {
                leader: st.leader,
                leader_epoch: st.leader_epoch,
                phase: Phase::Truncating,
            };
        }
        Vec::new()
    }

    /// Recomputes the leader's high watermark and answers the `acks=all` produces it covers.
    pub fn recompute_hw(&mut self) -> Vec<Acked> {
        let durable_end = self.durable_end();
        let Role::Leader(l) = &mut self.role else {
            return Vec::new();
        };
        self.hw = high_watermark(
            self.hw,
            self.id,
            durable_end,
            &l.maximal_isr(),
            &l.followers,
        );
        let (hw, log) = (self.hw, &self.log);
        let mut acked = Vec::new();
        l.unacked.retain(|&o| {
            if !acks_all_ready(o + 1, hw) {
                return true;
            }
            if min_insync_check(l.isr.len(), MIN_INSYNC_REPLICAS).is_ok() {
                acked.push(Acked {
                    offset: o,
                    entry: log[idx(o)],
                });
            }
            false
        });
        acked
    }

    /// An `acks=all` produce. `Err` when refused.
    pub fn produce(&mut self, value: u64) -> Result<i64, String> {
        let Role::Leader(l) = &mut self.role else {
            return Err("not leader".into());
        };
        min_insync_check(l.isr.len(), MIN_INSYNC_REPLICAS).map_err(|e| e.to_string())?;
        let offset = off(self.log.len());
        self.log.push(Entry {
            epoch: l.leader_epoch,
            value,
        });
        l.unacked.push(offset);
        Ok(offset)
    }

    /// The leader's side of a follower fetch.
    pub fn on_fetch(
        &mut self,
        from: u32,
        leader_epoch: i32,
        fetch_offset: i64,
        durable_end: i64,
        now_ms: u64,
    ) -> (Reply, Vec<Acked>) {
        let log_end = self.log_end();
        let Role::Leader(l) = &mut self.role else {
            return (Reply::FetchErr, Vec::new());
        };
        if l.leader_epoch != leader_epoch || fetch_offset < 0 || fetch_offset > log_end {
            return (Reply::FetchErr, Vec::new());
        }
        let Some(f) = l.followers.get_mut(&from) else {
            return (Reply::FetchErr, Vec::new());
        };
        if f.on_fetch(durable_end, now_ms, log_end).is_err() {
            return (Reply::FetchErr, Vec::new());
        }
        let acked = self.recompute_hw();
        let from_idx = idx(fetch_offset);
        let to_idx = (from_idx + FETCH_ENTRIES_MAX).min(self.log.len());
        let reply = Reply::FetchOk {
            entries: self.log[from_idx..to_idx].to_vec(),
            hw: self.hw,
        };
        (reply, acked)
    }

    /// The follower's side of a fetch answer.
    pub fn on_fetch_reply(&mut self, leader_epoch: i32, fetch_offset: i64, reply: &Reply) {
        let Role::Follower {
            leader_epoch: mine,
            phase,
            ..
        } = &mut self.role
        else {
            return;
        };
        if *mine != leader_epoch || *phase != Phase::Fetching || fetch_offset != off(self.log.len())
        {
            return;
        }
        match reply {
            Reply::FetchErr => *phase = Phase::Truncating,
            Reply::FetchOk { entries, hw } => {
                for e in entries {
                    let at = off(self.log.len());
                    if let Err(err) = self.cache.assign(e.epoch, at) {
                        panic!(
                            "replica {}: fetched entry breaks its epoch cache: {err}",
                            self.id
                        );
                    }
                    self.log.push(*e);
                }
                self.hw = (*hw).min(self.log_end());
            }
        }
    }

    /// The leader's answer to `OffsetsForLeaderEpoch`.
    pub fn on_epoch_query(&self, leader_epoch: i32, epoch: i32) -> Option<Option<EpochEnd>> {
        match &self.role {
            Role::Leader(l) if l.leader_epoch == leader_epoch => {
                Some(self.cache.end_offset_for(epoch, self.log_end()))
            }
            _ => None,
        }
    }

    /// The follower's side of the epoch answer: one truncation round.
    pub fn on_epoch_answer(
        &mut self,
        leader_epoch: i32,
        asked: i32,
        answer: Option<EpochEnd>,
        trace: &mut Vec<String>,
    ) {
        let Role::Follower {
            leader_epoch: mine,
            phase: Phase::Truncating,
            ..
        } = self.role
        else {
            return;
        };
        if mine != leader_epoch || self.cache.latest_epoch() != Some(asked) {
            return;
        }
        let Ok(t) = truncation_point(&self.cache, 0, self.log_end(), answer) else {
            return;
        };
        trace.push(format!(
            "  r{} truncates {} -> {} (done {})",
            self.id,
            self.log_end(),
            t.offset,
            t.done
        ));
        self.truncate(t.offset);
        if t.done {
            self.set_phase(Phase::Fetching);
        }
    }

    pub fn set_phase(&mut self, to: Phase) {
        if let Role::Follower { phase, .. } = &mut self.role {
            *phase = to;
        }
    }

    /// The MetaServer's answer to an ISR proposal: settles it only by a newer partition epoch
    /// (a refusal moves the partition epoch too), never by the proposal id alone, since a
    /// delayed copy of a refused proposal could otherwise still apply.
    pub fn on_isr_reply(
        &mut self,
        st: &PartitionState,
        now_ms: u64,
        trace: &mut Vec<String>,
    ) -> Vec<Acked> {
        self.apply_state(st, now_ms, trace)
    }

    /// The leader's periodic ISR check: a proposal (id, leader epoch, partition epoch, ISR) to
    /// send to the MetaServer, if any; an unsettled one is resent after a while.
    pub fn isr_proposal(&mut self, now_ms: u64) -> Option<(u64, i32, i32, Vec<u32>)> {
        let log_end = self.log_end();
        let hw = self.hw;
        let Role::Leader(l) = &mut self.role else {
            return None;
        };
        if let Some(p) = &mut l.pending {
            if now_ms.saturating_sub(p.sent_ms) < ALTER_ISR_RETRY_MS {
                return None;
            }
            p.sent_ms = now_ms;
            return Some((p.id, l.leader_epoch, l.partition_epoch, p.isr.clone()));
        }
        let out = isr_shrink(
            now_ms,
            self.id,
            log_end,
            &l.isr,
            &l.followers,
            REPLICA_LAG_TIME_MAX_MS,
        );
        let add = isr_expand_candidates(self.id, &l.isr, &l.followers, hw, l.epoch_start);
        if out.is_empty() && add.is_empty() {
            return None;
        }
        let mut isr: Vec<u32> = l
            .isr
            .iter()
            .copied()
            .filter(|id| !out.contains(id))
            .collect();
        isr.extend(add);
        isr.sort_unstable();
        let id = l.next_proposal;
        l.next_proposal += 1;
        l.pending = Some(Pending {
            id,
            isr: isr.clone(),
            sent_ms: now_ms,
        });
        Some((id, l.leader_epoch, l.partition_epoch, isr))
    }
}
