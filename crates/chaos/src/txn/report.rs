//! The transactional part of the summary: transactions by outcome, what the two reads saw,
//! the slowest abort of an abandoned transaction, and each kind of violation with examples
//! (the transaction and its records).

use std::fmt::Write;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::report::{ms, EXAMPLES_MAX};
use crate::txn::check::Verdict;
use crate::txn::workload::Ledger;

pub fn verdict(v: &Verdict, ledger: &Ledger, stable_after: Duration, read: Duration) -> String {
    let c = &v.counts;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "transactions: {} begun ({} records), {} committed, {} aborted, {} uncertain ({} of them visible), {} abandoned, {} open at stop; {} producer instances",
        c.committed + c.aborted + c.uncertain + c.abandoned + c.open_at_stop,
        c.records,
        c.committed,
        c.aborted,
        c.uncertain,
        c.uncertain_visible,
        c.abandoned,
        c.open_at_stop,
        ledger.instances.load(Ordering::Relaxed),
    );
    let _ = writeln!(
        s,
        "reads: read_committed {} records, read_uncommitted {} records ({} of transactions not committed), in {}; LSO = HW after healing in {}",
        v.read_committed,
        v.read_uncommitted,
        v.uncommitted_only,
        ms(read),
        ms(stable_after),
    );
    let worst = v.abandon_worst.map_or("none".to_string(), ms);
    let _ = writeln!(
        s,
        "abandoned transactions: slowest abort by the coordinator {worst} after abandonment"
    );
    let _ = writeln!(s, "checker:");
    for (name, list) in v.lists() {
        let _ = writeln!(s, "  {name}: {}", list.len());
        for e in list.iter().take(EXAMPLES_MAX) {
            let _ = writeln!(s, "      {e}");
        }
    }
    s
}
