//! The simulated world: a clock, the MetaServer, three replicas, a lossy reordering network,
//! a producer, a seeded schedule of steps, and the invariants checked after every step.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use tinymq_replication::EpochEnd;

use crate::sim::meta::{Meta, PartitionState};
use crate::sim::replica::{Acked, Entry, Phase, Replica, Reply, Role, REPLICAS};
use crate::sim::rng::Rng;

pub const SESSION_TIMEOUT_MS: u64 = 4_000;
const IN_FLIGHT_MAX: usize = 48;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    Meta,
    Broker(u32),
}

enum Body {
    Fetch {
        leader_epoch: i32,
        fetch_offset: i64,
        durable_end: i64,
    },
    FetchReply {
        leader_epoch: i32,
        fetch_offset: i64,
        reply: Reply,
    },
    EpochQuery {
        leader_epoch: i32,
        epoch: i32,
    },
    EpochAnswer {
        leader_epoch: i32,
        asked: i32,
        answer: Option<EpochEnd>,
    },
    AlterIsr {
        id: u64,
        leader_epoch: i32,
        partition_epoch: i32,
        isr: Vec<u32>,
    },
    AlterIsrReply {
        id: u64,
        state: PartitionState,
    },
}

struct Msg {
    from: Node,
    to: Node,
    /// The sender's incarnation (a reply goes only to the incarnation that asked).
    from_incarnation: u64,
    to_incarnation: Option<u64>,
    body: Body,
}

/// What one seed did, to see that the schedule exercises something.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    pub steps: u64,
    pub acked: u64,
    pub refused: u64,
    pub leader_epochs: u64,
    pub truncations: u64,
    pub crashes: u64,
    pub pauses: u64,
    pub cuts: u64,
    pub dropped: u64,
}

impl Stats {
    pub fn add(&mut self, o: &Stats) {
        self.steps += o.steps;
        self.acked += o.acked;
        self.refused += o.refused;
        self.leader_epochs += o.leader_epochs;
        self.truncations += o.truncations;
        self.crashes += o.crashes;
        self.pauses += o.pauses;
        self.cuts += o.cuts;
        self.dropped += o.dropped;
    }
}

pub struct World {
    now: u64,
    rng: Rng,
    meta: Meta,
    reps: Vec<Replica>,
    net: Vec<Msg>,
    cut: BTreeSet<u32>,
    acked: Vec<Acked>,
    /// What consumers may have read: offset -> entry, from every leader's visible HW.
    visible: Vec<Entry>,
    /// Per leader epoch: (first, largest) visible high watermark any leader of it showed.
    epoch_hw: BTreeMap<i32, (i64, i64)>,
    next_value: u64,
    pub trace: Vec<String>,
    pub stats: Stats,
}

impl World {
    pub fn new(seed: u64) -> Self {
        let mut w = World {
            now: 0,
            rng: Rng::new(seed),
            meta: Meta::new(REPLICAS.to_vec(), SESSION_TIMEOUT_MS),
            reps: REPLICAS.iter().map(|&id| Replica::new(id)).collect(),
            net: Vec::new(),
            cut: BTreeSet::new(),
            acked: Vec::new(),
            visible: Vec::new(),
            epoch_hw: BTreeMap::new(),
            next_value: 1,
            trace: Vec::new(),
            stats: Stats::default(),
        };
        for id in REPLICAS {
            w.heartbeat(id);
        }
        w
    }

    fn log(&mut self, line: String) {
        self.trace.push(line);
    }

    fn send(&mut self, from: Node, to: Node, to_incarnation: Option<u64>, body: Body) {
        let cut = |n: Node| matches!(n, Node::Broker(id) if self.cut.contains(&id));
        if cut(from) || cut(to) || self.net.len() >= IN_FLIGHT_MAX {
            self.stats.dropped += 1;
            return;
        }
        let from_incarnation = match from {
            Node::Broker(id) => self.reps[id as usize].incarnation,
            Node::Meta => 0,
        };
        self.net.push(Msg {
            from,
            to,
            from_incarnation,
            to_incarnation,
            body,
        });
    }

    fn record_acks(&mut self, acked: Vec<Acked>) {
        for a in acked {
            self.log(format!("  ack offset {} {:?}", a.offset, a.entry));
            self.stats.acked += 1;
            self.acked.push(a);
        }
    }

    fn pick(&mut self, ids: Vec<u32>) -> Option<u32> {
        (!ids.is_empty()).then(|| ids[self.rng.index(ids.len())])
    }

    fn ids(&self, f: impl Fn(&Replica) -> bool) -> Vec<u32> {
        self.reps.iter().filter(|r| f(r)).map(|r| r.id).collect()
    }

    /// One seeded step of the schedule.
    pub fn step(&mut self) {
        self.stats.steps += 1;
        let roll = self.rng.below(1_000);
        let t = self.now;
        match roll {
            0..=169 => self.produce(),
            170..=479 => self.deliver(),
            480..=484 => {
                if !self.net.is_empty() {
                    let i = self.rng.index(self.net.len());
                    self.net.remove(i);
                    self.stats.dropped += 1;
                    self.log(format!("t={t} lose message {i}"));
                }
            }
            485..=644 => {
                if let Some(id) = self.pick(self.ids(|r| r.active())) {
                    self.poll(id);
                }
            }
            645..=734 => {
                if let Some(id) = self.pick(self.ids(|r| r.active())) {
                    let r = &mut self.reps[id as usize];
                    r.durable = r.log.len();
                    let line = format!("t={t} r{id} fsync to {}", r.durable);
                    let acked = r.recompute_hw();
                    self.log(line);
                    self.record_acks(acked);
                }
            }
            735..=854 => {
                if let Some(id) = self.pick(self.ids(|r| r.active())) {
                    self.heartbeat(id);
                }
            }
            855..=879 => {
                self.log(format!("t={t} meta tick"));
                self.meta.tick(self.now, &mut self.trace);
            }
            880..=934 => {
                if let Some(id) = self.pick(self.ids(|r| r.active())) {
                    self.leader_tick(id);
                }
            }
            935..=979 => {
                self.now += 1 + self.rng.below(1_000);
                self.log(format!("t={} time passes", self.now));
            }
            980..=981 => {
                if let Some(id) = self.pick(self.ids(|r| r.up)) {
                    self.stats.crashes += 1;
                    self.reps[id as usize].crash();
                    let durable = self.reps[id as usize].durable;
                    self.log(format!("t={t} r{id} crashes, keeps {durable}"));
                }
            }
            982..=987 => {
                if let Some(id) = self.pick(self.ids(|r| !r.up)) {
                    self.reps[id as usize].restart();
                    self.log(format!("t={t} r{id} restarts"));
                }
            }
            988..=989 => {
                if let Some(id) = self.pick(self.ids(|r| r.active())) {
                    self.stats.pauses += 1;
                    self.reps[id as usize].paused = true;
                    self.log(format!("t={t} r{id} pauses"));
                }
            }
            990..=993 => {
                if let Some(id) = self.pick(self.ids(|r| r.paused)) {
                    self.reps[id as usize].paused = false;
                    self.log(format!("t={t} r{id} resumes"));
                }
            }
            994 => {
                if let Some(id) = self.pick(self.ids(|r| !self.cut.contains(&r.id))) {
                    self.stats.cuts += 1;
                    self.cut.insert(id);
                    self.log(format!("t={t} r{id} cut off"));
                }
            }
            995..=997 => {
                if let Some(id) = self.pick(self.cut.iter().copied().collect()) {
                    self.cut.remove(&id);
                    self.log(format!("t={t} r{id} reconnected"));
                }
            }
            _ => {
                self.log(format!("t={t} preferred election"));
                self.meta.preferred_election(&mut self.trace);
            }
        }
        self.stats.leader_epochs = u64::try_from(self.meta.part.leader_epoch).unwrap_or(0);
    }

    fn produce(&mut self) {
        let t = self.now;
        let leaders = self.ids(|r| r.active() && matches!(r.role, Role::Leader(_)));
        let Some(id) = self.pick(leaders) else {
            return;
        };
        let value = self.next_value;
        self.next_value += 1;
        match self.reps[id as usize].produce(value) {
            Ok(offset) => self.log(format!("t={t} produce {value} -> r{id} at {offset}")),
            Err(e) => {
                self.stats.refused += 1;
                self.log(format!("t={t} produce {value} -> r{id} refused: {e}"));
            }
        }
    }

    fn heartbeat(&mut self, id: u32) {
        let t = self.now;
        if self.cut.contains(&id) {
            self.log(format!("t={t} r{id} heartbeat lost (cut)"));
            return;
        }
        let inc = self.reps[id as usize].incarnation;
        self.log(format!("t={t} r{id} heartbeat (incarnation {inc})"));
        let st = self.meta.heartbeat(id, inc, self.now, &mut self.trace);
        let acked = self.reps[id as usize].apply_state(&st, self.now, &mut self.trace);
        self.record_acks(acked);
    }

    fn poll(&mut self, id: u32) {
        let t = self.now;
        let r = &self.reps[id as usize];
        let Role::Follower {
            leader: Some(leader),
            leader_epoch,
            phase,
        } = r.role
        else {
            return;
        };
        let to = Node::Broker(leader);
        match (phase, r.cache.latest_epoch()) {
            (Phase::Truncating, None) => {
                self.reps[id as usize].set_phase(Phase::Fetching);
                self.log(format!("t={t} r{id} has no epoch: fetches"));
            }
            (Phase::Truncating, Some(epoch)) => {
                self.log(format!("t={t} r{id} asks r{leader} end of epoch {epoch}"));
                let body = Body::EpochQuery {
                    leader_epoch,
                    epoch,
                };
                self.send(Node::Broker(id), to, None, body);
            }
            (Phase::Fetching, _) => {
                let (fetch_offset, durable_end) = (r.log_end(), r.durable_end());
                self.log(format!(
                    "t={t} r{id} fetches from r{leader} at {fetch_offset} (durable {durable_end})"
                ));
                let body = Body::Fetch {
                    leader_epoch,
                    fetch_offset,
                    durable_end,
                };
                self.send(Node::Broker(id), to, None, body);
            }
        }
    }

    fn leader_tick(&mut self, id: u32) {
        let t = self.now;
        if let Some((proposal, leader_epoch, partition_epoch, isr)) =
            self.reps[id as usize].isr_proposal(self.now)
        {
            self.log(format!("t={t} r{id} proposes isr {isr:?} (#{proposal})"));
            let body = Body::AlterIsr {
                id: proposal,
                leader_epoch,
                partition_epoch,
                isr,
            };
            self.send(Node::Broker(id), Node::Meta, None, body);
        }
    }

    fn deliver(&mut self) {
        let deliverable: Vec<usize> = (0..self.net.len())
            .filter(|&i| match self.net[i].to {
                Node::Meta => true,
                Node::Broker(id) => !self.reps[id as usize].paused,
            })
            .collect();
        if deliverable.is_empty() {
            return;
        }
        let msg = self
            .net
            .remove(deliverable[self.rng.index(deliverable.len())]);
        let t = self.now;
        let cut = |n: Node| matches!(n, Node::Broker(id) if self.cut.contains(&id));
        let gone = match msg.to {
            Node::Broker(id) => {
                let r = &self.reps[id as usize];
                !r.up || msg.to_incarnation.is_some_and(|i| i != r.incarnation)
            }
            Node::Meta => false,
        };
        if cut(msg.from) || cut(msg.to) || gone {
            self.stats.dropped += 1;
            self.log(format!("t={t} message {:?} -> {:?} lost", msg.from, msg.to));
            return;
        }
        self.handle(msg);
    }

    fn handle(&mut self, msg: Msg) {
        let t = self.now;
        let back = Some(msg.from_incarnation);
        match (msg.from, msg.to, msg.body) {
            (
                Node::Broker(f),
                Node::Broker(l),
                Body::Fetch {
                    leader_epoch,
                    fetch_offset,
                    durable_end,
                },
            ) => {
                let (reply, acked) =
                    self.reps[l as usize].on_fetch(f, leader_epoch, fetch_offset, durable_end, t);
                let what = match &reply {
                    Reply::FetchOk { entries, hw } => format!("{} entries, hw {hw}", entries.len()),
                    Reply::FetchErr => "error".to_string(),
                };
                self.log(format!(
                    "t={t} r{l} serves r{f}'s fetch at {fetch_offset} (durable {durable_end}): {what}"
                ));
                self.record_acks(acked);
                let body = Body::FetchReply {
                    leader_epoch,
                    fetch_offset,
                    reply,
                };
                self.send(msg.to, msg.from, back, body);
            }
            (
                Node::Broker(_),
                Node::Broker(f),
                Body::FetchReply {
                    leader_epoch,
                    fetch_offset,
                    reply,
                },
            ) => {
                self.log(format!("t={t} r{f} gets fetch answer for {fetch_offset}"));
                self.reps[f as usize].on_fetch_reply(leader_epoch, fetch_offset, &reply);
            }
            (
                Node::Broker(_),
                Node::Broker(l),
                Body::EpochQuery {
                    leader_epoch,
                    epoch,
                },
            ) => {
                if let Some(answer) = self.reps[l as usize].on_epoch_query(leader_epoch, epoch) {
                    self.log(format!("t={t} r{l} answers epoch {epoch}: {answer:?}"));
                    let body = Body::EpochAnswer {
                        leader_epoch,
                        asked: epoch,
                        answer,
                    };
                    self.send(msg.to, msg.from, back, body);
                } else {
                    self.log(format!(
                        "t={t} r{l} ignores an epoch query (not its leadership)"
                    ));
                }
            }
            (
                Node::Broker(_),
                Node::Broker(f),
                Body::EpochAnswer {
                    leader_epoch,
                    asked,
                    answer,
                },
            ) => {
                self.log(format!("t={t} r{f} gets epoch answer {answer:?}"));
                let before = self.trace.len();
                self.reps[f as usize].on_epoch_answer(leader_epoch, asked, answer, &mut self.trace);
                self.stats.truncations += u64::from(self.trace.len() > before);
            }
            (
                Node::Broker(l),
                Node::Meta,
                Body::AlterIsr {
                    id,
                    leader_epoch,
                    partition_epoch,
                    isr,
                },
            ) => {
                let res = self.meta.alter_isr(l, leader_epoch, partition_epoch, &isr);
                self.log(format!(
                    "t={t} meta alter isr {isr:?} from r{l}: ok {}",
                    res.is_ok()
                ));
                let state = res.unwrap_or_else(|s| s);
                self.send(
                    Node::Meta,
                    msg.from,
                    back,
                    Body::AlterIsrReply { id, state },
                );
            }
            (Node::Meta, Node::Broker(l), Body::AlterIsrReply { id, state }) => {
                self.log(format!("t={t} r{l} gets isr answer #{id} {:?}", state.isr));
                let acked = self.reps[l as usize].on_isr_reply(&state, t, &mut self.trace);
                self.record_acks(acked);
            }
            _ => unreachable!("the simulation sends no other message"),
        }
    }

    /// The invariants, checked after every step.
    pub fn check(&mut self) -> Result<(), String> {
        self.check_acked()?;
        self.check_visible()?;
        self.check_isr_agrees()
    }

    /// (a) Every acknowledged record is in the current leader's log and in every ISR member's
    /// durable log, at its offset, with its epoch and value.
    fn check_acked(&self) -> Result<(), String> {
        let isr = &self.meta.part.isr;
        for a in &self.acked {
            let at = usize::try_from(a.offset).expect("acked offsets are non-negative");
            if let Some(l) = self.meta.part.leader {
                let got = self.reps[l as usize].log.get(at);
                if got != Some(&a.entry) {
                    return Err(format!(
                        "acked offset {} {:?} is {got:?} on leader r{l}",
                        a.offset, a.entry
                    ));
                }
            }
            for &m in isr {
                let r = &self.reps[m as usize];
                let got = r.log[..r.durable].get(at);
                if got != Some(&a.entry) {
                    return Err(format!(
                        "acked offset {} {:?} is {got:?} on ISR member r{m}'s disk",
                        a.offset, a.entry
                    ));
                }
            }
        }
        Ok(())
    }

    /// (c) What a leader shows consumers never changes and never moves backwards: per leader,
    /// its visible high watermark only grows; across epochs, no older epoch ever showed more
    /// than a newer one first showed; every visible offset keeps its entry.
    fn check_visible(&mut self) -> Result<(), String> {
        for r in &self.reps {
            if !r.active() {
                continue;
            }
            let Some((epoch, hw)) = r.visible_hw() else {
                continue;
            };
            if hw > r.durable_end() {
                return Err(format!(
                    "leader r{} shows hw {hw} above its durable end {}",
                    r.id,
                    r.durable_end()
                ));
            }
            let (first, max) = self.epoch_hw.entry(epoch).or_insert((hw, hw));
            if hw < *max {
                return Err(format!(
                    "leader r{} of epoch {epoch} moved hw back to {hw}",
                    r.id
                ));
            }
            *max = (*max).max(hw);
            let (first, max) = (*first, *max);
            for (&e, &(f, m)) in &self.epoch_hw {
                if (e < epoch && m > first) || (e > epoch && max > f) {
                    return Err(format!(
                        "epoch {e} showed hw {m}/{f} against epoch {epoch} showing {max}/{first}"
                    ));
                }
            }
            for (o, entry) in r.log[..usize::try_from(hw).expect("hw >= 0")]
                .iter()
                .enumerate()
            {
                match self.visible.get(o) {
                    Some(seen) if seen != entry => {
                        return Err(format!(
                            "offset {o} was read as {seen:?}, leader r{} now shows {entry:?}",
                            r.id
                        ))
                    }
                    Some(_) => {}
                    None => self.visible.push(*entry),
                }
            }
        }
        Ok(())
    }

    /// (b) Every ISR member holds on disk everything consumers may have read, byte for byte.
    fn check_isr_agrees(&self) -> Result<(), String> {
        let shown = self.visible.len();
        for &m in &self.meta.part.isr {
            let r = &self.reps[m as usize];
            if r.durable < shown || r.log[..shown] != self.visible[..] {
                return Err(format!(
                    "ISR member r{m} (durable {}) disagrees with what consumers read below {shown}",
                    r.durable
                ));
            }
        }
        Ok(())
    }

    pub fn describe(&self) -> String {
        let mut s = String::new();
        let p = &self.meta.part;
        let _ = writeln!(
            s,
            "meta: leader {:?} epoch {} isr {:?} partition epoch {} fenced {:?}",
            p.leader,
            p.leader_epoch,
            p.isr,
            p.partition_epoch,
            self.meta
                .sessions
                .iter()
                .filter(|(_, x)| x.fenced)
                .map(|(id, _)| *id)
                .collect::<Vec<_>>()
        );
        for r in &self.reps {
            let role = match &r.role {
                Role::Unregistered => "unregistered".to_string(),
                Role::Follower {
                    leader,
                    leader_epoch,
                    phase,
                } => format!("follower of {leader:?} epoch {leader_epoch} {phase:?}"),
                Role::Leader(l) => format!(
                    "leader epoch {} start {} isr {:?} pending {:?}",
                    l.leader_epoch,
                    l.epoch_start,
                    l.isr,
                    l.pending.as_ref().map(|p| &p.isr)
                ),
            };
            let log: Vec<String> = r
                .log
                .iter()
                .map(|e| format!("{}:{}", e.epoch, e.value))
                .collect();
            let _ = writeln!(
                s,
                "r{}: up {} paused {} {role}; hw {} durable {} cache {:?}\n    log [{}]",
                r.id,
                r.up,
                r.paused,
                r.hw,
                r.durable,
                r.cache.entries(),
                log.join(" ")
            );
        }
        s
    }
}
