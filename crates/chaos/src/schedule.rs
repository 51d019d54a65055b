//! The fault schedule: planned from the seed (kinds in a shuffled order with exact counts,
//! the partition each fault aims at, how long it lasts, the gap after it), then applied to the
//! running cluster. Which broker a fault hits is the leader of its partition at that moment,
//! so a replay repeats the plan exactly and the targets as far as leadership repeats.

use std::fmt;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use crate::procs::Procs;
use crate::proxy::Net;
use crate::rng::Rng;
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
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::LeaderKill, Kind::Zombie, Kind::Cut, Kind::MetaKill];

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
            bail!("unknown fault kind {name:?} (leader-kill, zombie, cut, meta-kill)");
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
                Kind::LeaderKill | Kind::MetaKill => d.down,
                Kind::Zombie => d.zombie,
                Kind::Cut => d.cut,
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
    /// The broker (or MetaServer node, for meta-kill) hit; `None`: skipped (no leader found).
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
}

impl Runner<'_> {
    pub async fn apply(&mut self, index: usize, p: &Planned) -> Result<Applied> {
        let fronts = self.procs.layout.broker_front.clone();
        let hold = Duration::from_millis(p.hold_ms);
        let target = match p.kind {
            Kind::MetaKill => view::meta_leader(&self.procs.layout.meta).await,
            _ => view::leader_of(&fronts, self.topic, p.partition).await,
        };
        let affected = match (p.kind, target) {
            (_, None) => vec![],
            (Kind::MetaKill, _) => (0..self.partitions).collect(),
            (_, Some(b)) => view::led_by(&fronts, self.topic, b).await,
        };
        let at = Instant::now();
        let run_ms = at.duration_since(self.started).as_millis() as u64;
        if let Some(t) = target {
            println!(
                "[{:>7.1}s] fault {:>3}: {} of {} {t} (leads {:?}) for {} ms",
                run_ms as f64 / 1000.0,
                index + 1,
                p.kind,
                if p.kind == Kind::MetaKill {
                    "meta"
                } else {
                    "broker"
                },
                affected,
                p.hold_ms
            );
            self.inject(p.kind, t, hold).await?;
        } else {
            println!(
                "fault {:>3}: {} skipped: no leader found",
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
            target,
            at,
            affected,
            settled,
        })
    }

    async fn inject(&mut self, kind: Kind, target: u32, hold: Duration) -> Result<()> {
        match kind {
            Kind::LeaderKill => {
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
        }
        Ok(())
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
