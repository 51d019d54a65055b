//! Transactional produce (`--transactional --records-per-txn N`): each producer has its own
//! transactional id, calls `init_transactions` once before the clock starts, then loops
//! begin, N × `Producer::send`, `commit_transaction`. A transaction is not committed before
//! its records are acknowledged, so one producer has one transaction open at a time: the
//! loop is closed by the protocol, not by `--in-flight`.
//!
//! Two latencies: per record, from its `send` call to the return of its transaction's
//! commit (when a read-committed consumer may see it); per transaction, from
//! `begin_transaction` to the commit's return.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use tinymq_client::{DeliveryFuture, Producer, ProducerRecord};

use crate::produce::{payload, producer_config, ProduceOutcome, TxnFigures};
use crate::{micros, new_histogram, now_ns, BenchConfig, BenchError, Limit, Progress};

/// Records in the next transaction of a sender that has `left` records still to send (`None`:
/// no count, a timed run), `per_txn` at most; `0` when it is done.
pub(crate) fn next_txn_len(left: Option<u64>, per_txn: usize) -> u64 {
    left.map_or(per_txn as u64, |l| l.min(per_txn as u64))
}

/// The transactional id of producer `index` of a run: unique per run and producer (`run` is
/// the run's start in ns), so no producer fences another, nor one of an earlier run.
pub(crate) fn transactional_id(run: u64, index: u64) -> String {
    format!("tinymq-bench-{}-{run}-{index}", std::process::id())
}

struct TxnSender {
    producer: Producer,
    topic: String,
    template: Bytes,
    per_txn: usize,
    stamp_time: bool,
    progress: Arc<Progress>,
}

/// What one sender of transactions (or half messages) did.
pub(crate) struct TxnOutcome {
    pub(crate) committed: u64,
    pub(crate) failed: u64,
    pub(crate) transactions: u64,
    pub(crate) last_commit: Option<Instant>,
    pub(crate) records: Histogram<u64>,
    pub(crate) txns: Histogram<u64>,
}

impl TxnOutcome {
    pub(crate) fn new() -> TxnOutcome {
        TxnOutcome {
            committed: 0,
            failed: 0,
            transactions: 0,
            last_commit: None,
            records: new_histogram(),
            txns: new_histogram(),
        }
    }
}

/// Sender `p`'s share of a count-limited run of `n` senders, and a timed run's deadline.
pub(crate) fn share_of(
    config: &BenchConfig,
    p: u64,
    n: u64,
    start: Instant,
) -> (Option<u64>, Option<Instant>) {
    match config.limit {
        Limit::Count(c) => (Some(c / n + u64::from(p < c % n)), None),
        Limit::Duration(d) => (None, Some(start + d)),
    }
}

/// The senders' outcomes together: records and latencies summed, elapsed to the last commit.
pub(crate) async fn gather(
    tasks: Vec<tokio::task::JoinHandle<TxnOutcome>>,
    start: Instant,
) -> Result<ProduceOutcome, BenchError> {
    let mut outcome = ProduceOutcome {
        messages: 0,
        failed: 0,
        elapsed: Duration::ZERO,
        latency: new_histogram(),
        txn: Some(TxnFigures {
            transactions: 0,
            latency: new_histogram(),
        }),
    };
    let mut last = start;
    for task in tasks {
        let o = task.await.map_err(|e| BenchError::Config(e.to_string()))?;
        outcome.messages += o.committed;
        outcome.failed += o.failed;
        last = last.max(o.last_commit.unwrap_or(start));
        outcome.latency.add(&o.records).expect("same bounds");
        if let Some(t) = outcome.txn.as_mut() {
            t.transactions += o.transactions;
            t.latency.add(&o.txns).expect("same bounds");
        }
    }
    outcome.elapsed = last - start;
    Ok(outcome)
}

impl TxnSender {
    async fn run(self, share: Option<u64>, deadline: Option<Instant>) -> TxnOutcome {
        let mut out = TxnOutcome::new();
        let mut sent = 0u64;
        let mut deliveries: Vec<(Instant, DeliveryFuture)> = Vec::with_capacity(self.per_txn);
        loop {
            let n = next_txn_len(share.map(|s| s - sent), self.per_txn);
            if n == 0 || deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
            sent += n;
            self.progress.sent.fetch_add(n, Ordering::Relaxed);
            let begun = Instant::now();
            if let Err(e) = self.producer.begin_transaction() {
                tracing::warn!(error = %e, "begin_transaction failed");
                out.failed += n;
                break;
            }
            let mut send_error = None;
            for _ in 0..n {
                let sent_at = Instant::now();
                let value = payload(&self.template, self.stamp_time.then(now_ns));
                match self
                    .producer
                    .send(&self.topic, ProducerRecord::value(value))
                    .await
                {
                    Ok(d) => deliveries.push((sent_at, d)),
                    Err(e) => {
                        send_error = Some(e);
                        break;
                    }
                }
            }
            let ended = match send_error {
                None => self.producer.commit_transaction().await,
                Some(e) => Err(e),
            };
            let now = Instant::now();
            match ended {
                Ok(()) => {
                    // Committed, so every record of it was acknowledged (the futures are done).
                    for (sent_at, delivery) in deliveries.drain(..) {
                        match delivery.await {
                            Ok(_) => out.records.saturating_record(micros(sent_at, now)),
                            Err(e) => tracing::warn!(error = %e, "a committed record failed"),
                        }
                    }
                    out.txns.saturating_record(micros(begun, now));
                    out.committed += n;
                    out.transactions += 1;
                    out.last_commit = Some(now);
                    self.progress.acked.fetch_add(n, Ordering::Relaxed);
                }
                Err(e) => {
                    if out.failed == 0 {
                        tracing::warn!(error = %e, "transaction failed");
                    }
                    deliveries.clear();
                    out.failed += n;
                    self.progress.failed.fetch_add(n, Ordering::Relaxed);
                    if self.producer.abort_transaction().await.is_err() {
                        break;
                    }
                }
            }
        }
        self.producer.close().await;
        out
    }
}

/// Runs `config.producers` transactional producers until the limit; `stamp_time` writes send
/// times for e2e. The outcome's `latency` is per record; `txn_latency` per transaction.
pub(crate) async fn run_txn_producers(
    config: &BenchConfig,
    per_txn: usize,
    progress: Arc<Progress>,
    stamp_time: bool,
) -> Result<ProduceOutcome, BenchError> {
    let run_id = now_ns();
    let template = Bytes::from(vec![b'x'; config.message_bytes]);
    let n = config.producers as u64;
    let mut senders = Vec::new();
    for p in 0..n {
        let mut pc = producer_config(config);
        pc.transactional_id = Some(transactional_id(run_id, p));
        let producer = Producer::new(pc)?;
        // Not measured: the id's coordinator, producer id and epoch, once per producer life.
        producer.init_transactions().await?;
        senders.push(TxnSender {
            producer,
            topic: config.topic.clone(),
            template: template.clone(),
            per_txn,
            stamp_time,
            progress: progress.clone(),
        });
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (p, sender) in senders.into_iter().enumerate() {
        let (share, deadline) = share_of(config, p as u64, n, start);
        tasks.push(tokio::spawn(sender.run(share, deadline)));
    }
    gather(tasks, start).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_is_cut_into_transactions_of_at_most_per_txn_records() {
        let mut left = 25u64;
        let mut sizes = Vec::new();
        loop {
            let n = next_txn_len(Some(left), 10);
            if n == 0 {
                break;
            }
            sizes.push(n);
            left -= n;
        }
        assert_eq!(sizes, vec![10, 10, 5]);
        assert_eq!(next_txn_len(Some(0), 10), 0);
        assert_eq!(
            next_txn_len(None, 100),
            100,
            "a timed run sends whole transactions"
        );
        assert_eq!(next_txn_len(Some(7), 1), 1);
    }

    #[test]
    fn every_producer_of_every_run_has_its_own_transactional_id() {
        let ids = [
            transactional_id(1, 0),
            transactional_id(1, 1),
            transactional_id(2, 0),
        ];
        for (i, a) in ids.iter().enumerate() {
            for b in &ids[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }
}
