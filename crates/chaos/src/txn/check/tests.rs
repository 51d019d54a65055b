use std::time::Instant;

use super::*;
use crate::txn::workload::Txn;

fn txn(k: u32, outcome: Outcome) -> Txn {
    Txn {
        k,
        partitions: (0..k).map(|i| i % 2).collect(),
        outcome,
    }
}

fn read(values: &[&str]) -> Vec<Stored> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| Stored {
            partition: 0,
            offset: i as i64,
            value: v.as_bytes().to_vec(),
        })
        .collect()
}

fn ledger() -> Ledger {
    let l = Ledger::default();
    let now = Instant::now();
    let mut t = l.txns.lock();
    t.insert((0, 0), txn(2, Outcome::Committed { at: now }));
    t.insert((0, 1), txn(1, Outcome::Aborted));
    let unsure = Outcome::Uncertain {
        commit_sent: true,
        why: "timed out".into(),
    };
    t.insert((0, 2), txn(2, unsure));
    let abandoned = Outcome::Abandoned {
        at: now,
        aborted_after: Some(Duration::from_millis(5500)),
    };
    t.insert((1, 0), txn(1, abandoned));
    drop(t);
    l
}

fn observe<'a>(c: &'a [Stored], u: &'a [Stored], g: &'a [(u32, Option<i64>)]) -> Observed<'a> {
    Observed {
        committed_read: c,
        uncommitted_read: u,
        group_offsets: g,
        hanging: vec![],
        abandon_limit: Duration::from_secs(10),
    }
}

#[test]
fn whole_commits_and_invisible_aborts_pass() {
    let l = ledger();
    let c = read(&["p0-t0-0/2", "p0-t0-1/2", "p0-t2-1/2", "p0-t2-0/2"]);
    let u = read(&[
        "p0-t0-0/2",
        "p0-t0-1/2",
        "p0-t1-0/1",
        "p0-t2-1/2",
        "p0-t2-0/2",
    ]);
    let groups = [(0, Some(3)), (1, None)];
    let v = check(&l, observe(&c, &u, &groups));
    assert_eq!(v.violations(), 0, "{v:?}");
    assert_eq!((v.counts.committed, v.counts.aborted), (1, 1));
    assert_eq!((v.counts.uncertain, v.counts.uncertain_visible), (1, 1));
    assert_eq!((v.counts.abandoned, v.uncommitted_only), (1, 1));
    assert_eq!(v.abandon_worst, Some(Duration::from_millis(5500)));
}

#[test]
fn each_kind_of_violation_is_named_with_its_transaction() {
    let l = ledger();
    // t0 half visible, t1 (aborted) visible, t2 (uncertain) half visible, p1-t0 (abandoned)
    // visible, one record nobody sent, one committed record twice.
    let c = read(&[
        "p0-t0-0/2",
        "p0-t0-0/2",
        "p0-t1-0/1",
        "p0-t2-0/2",
        "p1-t0-0/1",
        "p7-t0-0/1",
    ]);
    let u = read(&[]);
    let groups = [(0, Some(2)), (1, Some(1))];
    let v = check(&l, observe(&c, &u, &groups));
    assert_eq!(v.not_whole.len(), 1, "{v:?}");
    assert!(v.not_whole[0].starts_with("committed p0-t0 (K=2): 1 of 2 visible, missing [1]"));
    assert_eq!(v.aborted_visible.len(), 2, "{v:?}");
    assert_eq!(v.uncertain_partial.len(), 1);
    assert_eq!(v.unexpected, vec!["p7-t0-0/1 at 0/5"]);
    // The committed p0-t0 is not whole but still committed: both its records are missing
    // from the read_uncommitted read.
    assert_eq!(v.uncommitted_missing.len(), 2);
    // p0's offset names the aborted t1; p1's the abandoned t0.
    assert_eq!(v.group_offsets.len(), 2, "{v:?}");
    assert!(v.group_offsets[0].contains("names p0-t1 (aborted)"));
}

#[test]
fn an_abandoned_transaction_never_aborted_and_a_never_committed_one_visible_are_caught() {
    let l = Ledger::default();
    {
        let mut t = l.txns.lock();
        let stuck = Outcome::Abandoned {
            at: Instant::now(),
            aborted_after: None,
        };
        t.insert((0, 0), txn(1, stuck));
        let abort_failed = Outcome::Uncertain {
            commit_sent: false,
            why: "fenced".into(),
        };
        t.insert((0, 1), txn(1, abort_failed));
    }
    let c = read(&["p0-t1-0/1"]);
    let v = check(&l, observe(&c, &c, &[]));
    assert_eq!(v.abandoned_not_aborted.len(), 1);
    assert_eq!(v.aborted_visible.len(), 1);
    assert!(v.aborted_visible[0].starts_with("never committed p0-t1"));
}
