//! The transactional checker: compares what a read_committed and a read_uncommitted consumer
//! read (every partition, from the beginning to its end) and each group's committed offset on
//! `chaos-in`/0 with the ledger. Violations: a committed transaction not whole (a record
//! missing or seen twice); a record of an aborted or abandoned transaction visible; an
//! uncertain transaction partly visible, or visible though commit was never asked for; a
//! record no producer sent; a committed record missing from the read_uncommitted read; an
//! abandoned transaction not aborted within its timeout and the slack; a group offset that is
//! not that of the producer's last committed (or visible uncertain) transaction; a partition
//! whose last stable offset stays below its high watermark (a hanging transaction).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::check::Stored;
use crate::txn::workload::{parse_value, value_of, Ledger, Outcome, Txn};

/// Where each record of a transaction was read: index → (partition, offset) for each time.
type Seen = BTreeMap<(u32, u64), BTreeMap<u32, Vec<(u32, i64)>>>;

#[derive(Default, Debug)]
pub struct Counts {
    pub committed: usize,
    pub aborted: usize,
    pub uncertain: usize,
    /// Uncertain ones found whole (so committed after all).
    pub uncertain_visible: usize,
    pub abandoned: usize,
    /// Begun and never ended (the workload stopped inside them): uncertain.
    pub open_at_stop: usize,
    pub records: usize,
}

/// What the checker found.
#[derive(Default, Debug)]
pub struct Verdict {
    pub counts: Counts,
    pub read_committed: usize,
    pub read_uncommitted: usize,
    /// Records of transactions not visible to read_committed that read_uncommitted saw.
    pub uncommitted_only: usize,
    /// The slowest abort of an abandoned transaction seen, from its abandonment.
    pub abandon_worst: Option<Duration>,
    pub not_whole: Vec<String>,
    pub aborted_visible: Vec<String>,
    pub uncertain_partial: Vec<String>,
    pub unexpected: Vec<String>,
    pub uncommitted_missing: Vec<String>,
    pub abandoned_not_aborted: Vec<String>,
    pub group_offsets: Vec<String>,
    pub hanging: Vec<String>,
}

impl Verdict {
    pub fn lists(&self) -> [(&'static str, &Vec<String>); 8] {
        [
            ("committed transactions not whole", &self.not_whole),
            (
                "aborted or abandoned records visible",
                &self.aborted_visible,
            ),
            (
                "uncertain transactions partly visible",
                &self.uncertain_partial,
            ),
            ("unexpected (never sent)", &self.unexpected),
            (
                "committed records missing from read_uncommitted",
                &self.uncommitted_missing,
            ),
            (
                "abandoned transactions not aborted in time",
                &self.abandoned_not_aborted,
            ),
            (
                "group offsets not of the last committed transaction",
                &self.group_offsets,
            ),
            (
                "hanging transactions (LSO below HW after healing)",
                &self.hanging,
            ),
        ]
    }

    pub fn violations(&self) -> usize {
        self.lists().iter().map(|(_, l)| l.len()).sum()
    }
}

/// What the checker is given besides the ledger.
pub struct Observed<'a> {
    pub committed_read: &'a [Stored],
    pub uncommitted_read: &'a [Stored],
    /// Each producer's group's committed offset on `chaos-in`/0, if any.
    pub group_offsets: &'a [(u32, Option<i64>)],
    /// Partitions whose LSO stayed below the HW, described.
    pub hanging: Vec<String>,
    pub abandon_limit: Duration,
}

pub fn check(ledger: &Ledger, o: Observed<'_>) -> Verdict {
    let txns = ledger.txns.lock();
    let mut v = Verdict {
        read_committed: o.committed_read.len(),
        read_uncommitted: o.uncommitted_read.len(),
        hanging: o.hanging,
        ..Verdict::default()
    };
    let committed = seen(&txns, o.committed_read, &mut v.unexpected);
    let uncommitted = seen(&txns, o.uncommitted_read, &mut v.unexpected);
    // Committed, or uncertain and visible: what read_uncommitted and the group offsets must
    // show.
    let mut visible: BTreeSet<(u32, u64)> = BTreeSet::new();
    for (key, t) in txns.iter() {
        let found = committed.get(key);
        if judge(*key, t, found, &mut v) {
            visible.insert(*key);
        }
        let read = uncommitted.get(key);
        if visible.contains(key) {
            for i in (0..t.k).filter(|i| read.is_none_or(|r| !r.contains_key(i))) {
                let value = value_of(key.0, key.1, i, t.k);
                v.uncommitted_missing
                    .push(format!("{value} (visible to read_committed)"));
            }
        } else {
            v.uncommitted_only += read.map_or(0, |r| r.values().map(Vec::len).sum());
        }
    }
    for (producer, offset) in o.group_offsets {
        group_offset(&txns, &visible, *producer, *offset, &mut v);
    }
    abandoned(&txns, o.abandon_limit, &mut v);
    v
}

/// Where each known record was read; records nobody sent go to `unexpected`.
fn seen(txns: &BTreeMap<(u32, u64), Txn>, read: &[Stored], unexpected: &mut Vec<String>) -> Seen {
    let mut out = Seen::new();
    for s in read {
        let parsed = parse_value(&s.value);
        let known =
            parsed.filter(|(p, t, i, k)| txns.get(&(*p, *t)).is_some_and(|x| x.k == *k && *i < *k));
        let Some((p, t, i, _)) = known else {
            let text = String::from_utf8_lossy(&s.value);
            unexpected.push(format!("{text} at {}/{}", s.partition, s.offset));
            continue;
        };
        let at = out.entry((p, t)).or_default().entry(i).or_default();
        at.push((s.partition, s.offset));
    }
    out
}

/// Checks one transaction against the read_committed read; whether it counts as committed
/// (committed, or uncertain and visible whole).
fn judge(
    key: (u32, u64),
    t: &Txn,
    found: Option<&BTreeMap<u32, Vec<(u32, i64)>>>,
    v: &mut Verdict,
) -> bool {
    let name = format!("p{}-t{} (K={})", key.0, key.1, t.k);
    let empty = BTreeMap::new();
    let found = found.unwrap_or(&empty);
    let once = found.values().filter(|at| at.len() == 1).count();
    let twice = found.values().any(|at| at.len() > 1);
    let whole = once == t.k as usize && !twice;
    let describe = || {
        let missing: Vec<u32> = (0..t.k).filter(|i| !found.contains_key(i)).collect();
        let at: Vec<String> = found
            .iter()
            .flat_map(|(i, at)| at.iter().map(move |(p, o)| format!("{i}@{p}/{o}")))
            .collect();
        format!(
            "{name}: {} of {} visible, missing {missing:?}, seen {}",
            found.len(),
            t.k,
            at.join(" ")
        )
    };
    v.counts.records += t.k as usize;
    match &t.outcome {
        Outcome::Committed { .. } => {
            v.counts.committed += 1;
            if !whole {
                v.not_whole.push(format!("committed {}", describe()));
            }
            true
        }
        Outcome::Aborted | Outcome::Abandoned { .. } => {
            if matches!(t.outcome, Outcome::Aborted) {
                v.counts.aborted += 1;
            } else {
                v.counts.abandoned += 1;
            }
            if !found.is_empty() {
                v.aborted_visible
                    .push(format!("{} {}", t.outcome.name(), describe()));
            }
            false
        }
        Outcome::Uncertain { .. } | Outcome::Open => {
            let commit_sent = match &t.outcome {
                Outcome::Uncertain { commit_sent, .. } => *commit_sent,
                _ => true,
            };
            if t.outcome == Outcome::Open {
                v.counts.open_at_stop += 1;
            } else {
                v.counts.uncertain += 1;
            }
            v.counts.uncertain_visible += usize::from(whole);
            if !found.is_empty() && !whole {
                v.uncertain_partial
                    .push(format!("uncertain {}", describe()));
            } else if whole && !commit_sent {
                v.aborted_visible
                    .push(format!("never committed {}", describe()));
            }
            whole
        }
    }
}

/// A producer's group offset must be that of its last committed (or uncertain and visible)
/// transaction.
fn group_offset(
    txns: &BTreeMap<(u32, u64), Txn>,
    visible: &BTreeSet<(u32, u64)>,
    producer: u32,
    offset: Option<i64>,
    v: &mut Verdict,
) {
    let last = visible
        .range((producer, 0)..=(producer, u64::MAX))
        .next_back();
    let expected = last.map(|(_, t)| *t as i64 + 1);
    if offset == expected {
        return;
    }
    let named =
        offset
            .and_then(|o| u64::try_from(o - 1).ok())
            .map(|t| match txns.get(&(producer, t)) {
                Some(x) => format!("p{producer}-t{t} ({})", x.outcome.name()),
                None => format!("p{producer}-t{t} (never begun)"),
            });
    v.group_offsets.push(format!(
        "group of p{producer}: committed offset {offset:?} names {}, the last visible transaction is {}",
        named.unwrap_or_else(|| "nothing".into()),
        last.map_or("none".into(), |(p, t)| format!("p{p}-t{t}")),
    ));
}

fn abandoned(txns: &BTreeMap<(u32, u64), Txn>, limit: Duration, v: &mut Verdict) {
    for ((p, t), x) in txns.iter() {
        if let Outcome::Abandoned { aborted_after, .. } = x.outcome {
            match aborted_after {
                Some(d) => v.abandon_worst = v.abandon_worst.max(Some(d)),
                None => v.abandoned_not_aborted.push(format!(
                    "p{p}-t{t} (K={}): not seen CompleteAbort within {limit:?} of its abandonment",
                    x.k
                )),
            }
        }
    }
}

#[cfg(test)]
mod tests;
