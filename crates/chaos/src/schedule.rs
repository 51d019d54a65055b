//! The fault schedule: planned from the seed (kinds in a shuffled order with exact counts,
//! the partition each fault aims at, how long it lasts, the gap after it), then applied to the
//! running cluster. Which broker a fault hits is the leader of its partition at that moment
//! (for `coordinator-kill`, the transaction coordinator of one producer's transactional id),
//! so a replay repeats the plan exactly and the targets as far as leadership repeats. The two
//! transactional kinds need the `txn` workload's [`Hooks`].

use std::fmt;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use crate::procs::Procs;
use crate::proxy::Net;
use crate::rng::Rng;
use crate::txn::Hooks;
use crate::view;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// SIGKILL of a partition leader's broker, restarted after the hold.
    LeaderKill,
    /// SIGSTOP of a partition leader's broker, SIGCONT after the hold.
    Zombie,
    /// A partition leader's broker cut off from the other brokers, the clients and the
    /// MetaServer nodes for the hold.
    Cut,
    /// SIGKILL of the MetaServer Raft leader, restarted after the hold.
    MetaKill,
    /// SIGKILL of the broker coordinating one producer's transactional id, restarted after
    /// the hold (`txn` workload).
    CoordinatorKill,
    /// One transactional producer dropped mid-transaction, started again only after its
    /// transaction timeout and a slack (`txn` workload): the coordinator's timer must abort it.
    ProducerKill,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::LeaderKill,
        Kind::Zombie,
        Kind::Cut,
        Kind::MetaKill,
        Kind::CoordinatorKill,
        Kind::ProducerKill,
    ];

    /// Kinds that only the `txn` workload can apply.
    pub fn needs_transactions(self) -> bool {
        matches!(self, Kind::CoordinatorKill | Kind::ProducerKill)
    }

    fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.to_string() == s)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::LeaderKill => "leader-kill",
            Kind::Zombie => "zombie",
            Kind::Cut => "cut",
            Kind::MetaKill => "meta-kill",
            Kind::CoordinatorKill => "coordinator-kill",
            Kind::ProducerKill => "producer-kill",
        })
    }
}

/// `leader-kill,zombie:2,cut` → each kind with its weight (1 when not given).
pub fn parse_kinds(s: &str) -> Result<Vec<(Kind, u32)>> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, weight) = match part.split_once(':') {
            Some((n, w)) => (n, w.parse::<u32>()?),
            None => (part, 1),
        };
        let Some(kind) = Kind::parse(name) else {
            bail!("unknown fault kind {name:?} (leader-kill, zombie, cut, meta-kill, coordinator-kill, producer-kill)");
        };
        out.push((kind, weight));
    }
    if out.iter().all(|(_, w)| *w == 0) {
        bail!("--kinds names no fault with a weight above 0");
    }
    Ok(out)
}

/// Inclusive bounds, milliseconds.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub min_ms: u64,
    pub max_ms: u64,
}

pub struct Durations {
    pub down: Bounds,
    pub zombie: Bounds,
    pub cut: Bounds,
    pub gap: Bounds,
}

#[derive(Debug, Clone)]
pub struct Planned {
    pub kind: Kind,
    /// The partition whose leader it hits; for the transactional kinds, the producer is this
    /// modulo the number of producers.
    pub partition: u32,
    pub hold_ms: u64,
    pub gap_ms: u64,
}

/// `faults` faults shared among the kinds by weight (exact counts, the remainder to the
/// first kinds listed), in a seeded order.
pub fn plan(
    seed: u64,
    faults: u32,
    kinds: &[(Kind, u32)],
    partitions: u32,
    d: &Durations,
) -> Vec<Planned> {
    let total: u64 = kinds.iter().map(|(_, w)| u64::from(*w)).sum();
    let mut counts: Vec<u64> = kinds
        .iter()
        .map(|(_, w)| u64::from(faults) * u64::from(*w) / total.max(1))
        .collect();
    let mut left = u64::from(faults) - counts.iter().sum::<u64>();
    for (c, (_, w)) in counts.iter_mut().zip(kinds) {
        if left > 0 && *w > 0 {
            *c += 1;
            left -= 1;
        }
    }
    let mut order: Vec<Kind> = Vec::new();
    for (c, (k, _)) in counts.iter().zip(kinds) {
        order.extend(std::iter::repeat_n(*k, *c as usize));
    }
    let mut rng = Rng::new(seed);
    rng.shuffle(&mut order);
    order
        .into_iter()
        .map(|kind| {
            let hold = match kind {
                Kind::LeaderKill | Kind::MetaKill | Kind::CoordinatorKill => d.down,
                Kind::Zombie => d.zombie,
                Kind::Cut => d.cut,
                // Held for the transaction timeout and its slack, decided at run time.
                Kind::ProducerKill => Bounds {
                    min_ms: 0,
                    max_ms: 0,
                },
            };
            Planned {
                kind,
                partition: rng.below(u64::from(partitions)) as u32,
                hold_ms: rng.between(hold.min_ms, hold.max_ms),
                gap_ms: rng.between(d.gap.min_ms, d.gap.max_ms),
            }
        })
        .collect()
}

/// A fault as it happened.
#[derive(Debug, Clone)]
pub struct Applied {
    pub planned: Planned,
    /// The broker (MetaServer node for meta-kill, producer for producer-kill) hit; `None`:
    /// skipped (no leader or coordinator found, or the producer never took the kill).
    pub target: Option<u32>,
    /// When the fault began.
    pub at: Instant,
    /// Partitions whose writes it can interrupt.
    pub affected: Vec<u32>,
    /// Whether the cluster settled (every partition led, full ISR) after the fault.
    pub settled: bool,
}

pub struct Runner<'a> {
    pub procs: &'a mut Procs,
    pub net: &'a Net,
    pub topic: &'a str,
    pub partitions: u32,
    pub settle_limit: Duration,
    pub started: Instant,
    /// The transactional producers, for `coordinator-kill` and `producer-kill`.
    pub txn: Option<&'a Hooks>,
}

impl Runner<'_> {
    pub async fn apply(&mut self, index: usize, p: &Planned) -> Result<Applied> {
        let fronts = self.procs.layout.broker_front.clone();
        let hold = Duration::from_millis(p.hold_ms);
        let target = self.target(p).await?;
        let affected = match (p.kind, target) {
            (_, None) | (Kind::ProducerKill, _) => vec![],
            (Kind::MetaKill, _) => (0..self.partitions).collect(),
            (_, Some(b)) => view::led_by(&fronts, self.topic, b).await,
        };
        let at = Instant::now();
        let run_s = at.duration_since(self.started).as_secs_f64();
        let mut hit = target;
        if let Some(t) = target {
            let what = match p.kind {
                Kind::MetaKill => "meta",
                Kind::ProducerKill => "producer",
                Kind::CoordinatorKill => "coordinator broker",
                _ => "broker",
            };
            let hold_ms = match (p.kind, self.txn) {
                (Kind::ProducerKill, Some(h)) => h.restart_after().as_millis() as u64,
                _ => p.hold_ms,
            };
            println!(
                "[{run_s:>7.1}s] fault {:>3}: {} of {what} {t} (leads {affected:?}) for {hold_ms} ms",
                index + 1,
                p.kind,
            );
            if !self.inject(p.kind, t, hold).await? {
                println!("  {} skipped: producer {t} never took it", p.kind);
                hit = None;
            }
        } else {
            println!(
                "fault {:>3}: {} skipped: no target found",
                index + 1,
                p.kind
            );
        }
        let (settled, took) = view::settle(
            &fronts,
            self.topic,
            self.partitions,
            crate::procs::NODES as usize,
            self.settle_limit,
        )
        .await;
        if !settled {
            println!(
                "  not settled {} ms after the fault healed",
                took.as_millis()
            );
        }
        tokio::time::sleep(Duration::from_millis(p.gap_ms)).await;
        Ok(Applied {
            planned: p.clone(),
            target: hit,
            at,
            affected,
            settled,
        })
    }

    /// Whom the fault hits now: a broker, MetaServer node or producer.
    async fn target(&self, p: &Planned) -> Result<Option<u32>> {
        let fronts = &self.procs.layout.broker_front;
        Ok(match p.kind {
            Kind::MetaKill => view::meta_leader(&self.procs.layout.meta).await,
            Kind::CoordinatorKill => self.hooks()?.coordinator_of(p.partition).await,
            Kind::ProducerKill => Some(self.hooks()?.producer_of(p.partition)),
            _ => view::leader_of(fronts, self.topic, p.partition).await,
        })
    }

    fn hooks(&self) -> Result<&Hooks> {
        match self.txn {
            Some(h) => Ok(h),
            None => bail!("coordinator-kill and producer-kill need --workload txn"),
        }
    }

    /// Applies the fault and heals it; false when it could not be applied.
    async fn inject(&mut self, kind: Kind, target: u32, hold: Duration) -> Result<bool> {
        match kind {
            Kind::LeaderKill | Kind::CoordinatorKill => {
                self.procs.kill_broker(target).await;
                tokio::time::sleep(hold).await;
                self.procs.start_broker(target).await?;
            }
            Kind::Zombie => {
                self.procs.pause_broker(target, true)?;
                tokio::time::sleep(hold).await;
                self.procs.pause_broker(target, false)?;
            }
            Kind::Cut => {
                let before = self.net.outbound_blocked();
                self.net.cut(target);
                tokio::time::sleep(hold).await;
                self.net.heal_all();
                let blocked = self.net.outbound_blocked() - before;
                println!("  cut closed or refused {blocked} connections from broker {target} to other brokers");
            }
            Kind::MetaKill => {
                self.procs.kill_meta(target).await;
                tokio::time::sleep(hold).await;
                self.procs.start_meta(target).await?;
            }
            Kind::ProducerKill => return Ok(self.hooks()?.kill_producer(target).await),
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn durations() -> Durations {
        let b = Bounds {
            min_ms: 1,
            max_ms: 9,
        };
        Durations {
            down: b,
            zombie: b,
            cut: b,
            gap: b,
        }
    }

    #[test]
    fn a_plan_has_exact_counts_per_weight_and_replays_from_its_seed() {
        let kinds = parse_kinds("leader-kill:100,zombie:30,cut:30,meta-kill:10").unwrap();
        let a = plan(7, 170, &kinds, 4, &durations());
        let count = |k| a.iter().filter(|p| p.kind == k).count();
        assert_eq!(count(Kind::LeaderKill), 100);
        assert_eq!(count(Kind::Zombie), 30);
        assert_eq!(count(Kind::Cut), 30);
        assert_eq!(count(Kind::MetaKill), 10);
        let b = plan(7, 170, &kinds, 4, &durations());
        let same = a.iter().zip(&b).all(|(x, y)| {
            (x.kind, x.partition, x.hold_ms, x.gap_ms) == (y.kind, y.partition, y.hold_ms, y.gap_ms)
        });
        assert!(same, "one seed, one plan");
        assert!(a
            .iter()
            .all(|p| p.partition < 4 && (1..=9).contains(&p.hold_ms)));
    }

    #[test]
    fn remainders_go_to_the_first_kinds_and_bad_kinds_are_refused() {
        let kinds = parse_kinds("leader-kill,zombie,cut,meta-kill").unwrap();
        let a = plan(1, 6, &kinds, 3, &durations());
        assert_eq!(a.iter().filter(|p| p.kind == Kind::LeaderKill).count(), 2);
        assert_eq!(a.iter().filter(|p| p.kind == Kind::MetaKill).count(), 1);
        assert!(parse_kinds("leader-kill,reboot").is_err());
        assert!(parse_kinds("cut:0").is_err());
    }
}
