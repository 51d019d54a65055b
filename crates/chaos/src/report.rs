//! The summary printed at the end of a run, plain text meant to be pasted into a note:
//! the run's parameters, faults by kind, unavailability per fault (from the fault to the next
//! acknowledged write on a partition it affected, the slowest such partition; for the `txn`
//! workload, the next committed transaction touching it) as p50/p99/max, and the checker's
//! verdict with examples of each violation. The fault and crash sections are shared by both
//! workloads; `txn::report` prints the transactional verdict.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::{Duration, Instant};

use crate::check::Verdict;
use crate::schedule::{Applied, Kind};
use crate::workload::{Ledger, Outcome};

pub const EXAMPLES_MAX: usize = 10;

/// When each partition had a write acknowledged, from the idempotent workload's ledger.
pub fn ack_times(ledger: &Ledger) -> BTreeMap<u32, Vec<Instant>> {
    let mut acks: BTreeMap<u32, Vec<Instant>> = BTreeMap::new();
    for o in ledger.values.lock().values() {
        if let Outcome::Acked { partition, at, .. } = o {
            acks.entry(*partition).or_default().push(*at);
        }
    }
    acks
}

/// For each applied fault, the time to the next acknowledged write (`acks`: when, per
/// partition) on every affected partition (the largest); `None` when some affected
/// partition never got one.
pub fn unavailability(
    faults: &[Applied],
    mut acks: BTreeMap<u32, Vec<Instant>>,
) -> Vec<Option<Duration>> {
    for list in acks.values_mut() {
        list.sort_unstable();
    }
    faults
        .iter()
        .map(|f| {
            let mut worst = Duration::ZERO;
            for p in &f.affected {
                let list = acks.get(p).map(Vec::as_slice).unwrap_or(&[]);
                let i = list.partition_point(|t| *t < f.at);
                worst = worst.max(list.get(i)?.duration_since(f.at));
            }
            Some(worst)
        })
        .collect()
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

pub fn ms(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

pub struct Header {
    pub seed: u64,
    pub command: String,
    pub elapsed: Duration,
    pub dir: String,
}

/// The run's parameters and its faults by kind, with their unavailability.
pub fn faults_section(h: &Header, faults: &[Applied], gaps: &[Option<Duration>]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "== tinymq-chaos summary ==");
    let _ = writeln!(s, "seed {}  (replay: {})", h.seed, h.command);
    let _ = writeln!(
        s,
        "run time {:.0} s, run directory {}",
        h.elapsed.as_secs_f64(),
        h.dir
    );
    let _ = writeln!(s, "faults:");
    for kind in Kind::ALL {
        let of_kind: Vec<usize> = (0..faults.len())
            .filter(|i| faults[*i].planned.kind == kind)
            .collect();
        if of_kind.is_empty() && kind.needs_transactions() {
            continue;
        }
        let applied = of_kind
            .iter()
            .filter(|i| faults[**i].target.is_some())
            .count();
        let unsettled = of_kind.iter().filter(|i| !faults[**i].settled).count();
        let mut times: Vec<Duration> = of_kind.iter().filter_map(|i| gaps[*i]).collect();
        times.sort_unstable();
        let never = of_kind
            .iter()
            .filter(|i| faults[**i].target.is_some() && gaps[**i].is_none())
            .count();
        let _ = writeln!(
            s,
            "  {:<16} {:>4} applied ({} skipped, {} not settled after)   unavailability p50 {}  p99 {}  max {}{}",
            kind.to_string(),
            applied,
            of_kind.len() - applied,
            unsettled,
            ms(percentile(&times, 0.50)),
            ms(percentile(&times, 0.99)),
            ms(times.last().copied().unwrap_or_default()),
            if never > 0 { format!("  ({never} with no write acknowledged after)") } else { String::new() },
        );
    }
    let mut all: Vec<Duration> = gaps.iter().flatten().copied().collect();
    all.sort_unstable();
    let _ = writeln!(
        s,
        "  all              {:>4} applied   unavailability p50 {}  p99 {}  max {}",
        faults.iter().filter(|f| f.target.is_some()).count(),
        ms(percentile(&all, 0.50)),
        ms(percentile(&all, 0.99)),
        ms(all.last().copied().unwrap_or_default()),
    );
    s
}

/// The processes that exited by themselves (each a violation) and the verdict line.
pub fn crashes_and_verdict(crashes: &[String], violations: usize) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "  processes that exited by themselves: {}",
        crashes.len()
    );
    for c in crashes.iter().take(EXAMPLES_MAX) {
        let _ = writeln!(s, "      {c}");
    }
    let ok = violations == 0 && crashes.is_empty();
    let _ = writeln!(s, "verdict: {}", if ok { "PASS" } else { "FAIL" });
    s
}

/// The idempotent workload's summary.
pub fn summary(
    h: &Header,
    faults: &[Applied],
    gaps: &[Option<Duration>],
    v: &Verdict,
    crashes: &[String],
) -> String {
    let mut s = faults_section(h, faults, gaps);
    let _ = writeln!(
        s,
        "values: {} sent, {} acknowledged, {} failed, {} never answered; {} read back ({} unacknowledged ones stored, allowed)",
        v.sent, v.acked, v.failed, v.unanswered, v.read, v.unacked_stored
    );
    for (n, why) in &v.failure_reasons {
        let _ = writeln!(s, "  failed {n}x: {why}");
    }
    let _ = writeln!(s, "checker:");
    for (name, list) in [
        ("acknowledged but lost", &v.lost),
        ("stored at another offset than acknowledged", &v.moved),
        ("duplicates", &v.duplicates),
        ("unexpected (never sent)", &v.unexpected),
        ("per-partition order violations", &v.order),
    ] {
        let _ = writeln!(s, "  {name}: {}", list.len());
        for e in list.iter().take(EXAMPLES_MAX) {
            let _ = writeln!(s, "      {e}");
        }
    }
    s.push_str(&crashes_and_verdict(crashes, v.violations()));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let d: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&d, 0.50), Duration::from_millis(50));
        assert_eq!(percentile(&d, 0.99), Duration::from_millis(99));
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
    }
}
