//! Half messages (`--half --records-per-txn N`): each producer has its own producer group and
//! loops `Producer::send_half` of N records, then `HalfMessage::commit`. A half is committed
//! before the next is sent, so one producer has one half in flight at a time.
//!
//! Two latencies: per record, from the `send_half` call to the return of its commit (when
//! consumers may see it); per half, the same span.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tinymq_client::{Producer, ProducerRecord};

use crate::produce::{payload, producer_config, ProduceOutcome};
use crate::txn::{gather, next_txn_len, share_of, TxnOutcome};
use crate::{micros, now_ns, BenchConfig, BenchError, Progress};

/// Long enough that no half of a run is checked: the producer commits each itself.
const CHECK_AFTER: Duration = Duration::from_secs(3600);

struct HalfSender {
    producer: Producer,
    group: String,
    topic: String,
    template: Bytes,
    per_half: usize,
    stamp_time: bool,
    progress: Arc<Progress>,
}

impl HalfSender {
    async fn run(self, share: Option<u64>, deadline: Option<Instant>) -> TxnOutcome {
        let mut out = TxnOutcome::new();
        let mut sent = 0u64;
        loop {
            let n = next_txn_len(share.map(|s| s - sent), self.per_half);
            if n == 0 || deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
            sent += n;
            self.progress.sent.fetch_add(n, Ordering::Relaxed);
            let begun = Instant::now();
            let batch: Vec<ProducerRecord> = (0..n)
                .map(|_| {
                    ProducerRecord::value(payload(&self.template, self.stamp_time.then(now_ns)))
                })
                .collect();
            let committed = match self
                .producer
                .send_half(&self.group, &self.topic, batch, CHECK_AFTER)
                .await
            {
                Ok(half) => half.commit().await.map(drop),
                Err(e) => Err(e),
            };
            let now = Instant::now();
            match committed {
                Ok(()) => {
                    let us = micros(begun, now);
                    for _ in 0..n {
                        out.records.saturating_record(us);
                    }
                    out.txns.saturating_record(us);
                    out.committed += n;
                    out.transactions += 1;
                    out.last_commit = Some(now);
                    self.progress.acked.fetch_add(n, Ordering::Relaxed);
                }
                Err(e) => {
                    if out.failed == 0 {
                        tracing::warn!(error = %e, "a half failed");
                    }
                    out.failed += n;
                    self.progress.failed.fetch_add(n, Ordering::Relaxed);
                }
            }
        }
        self.producer.close().await;
        out
    }
}

/// Runs `config.producers` half-message producers until the limit. The outcome's `latency`
/// is per record; its `txn` figures count halves.
pub(crate) async fn run_half_producers(
    config: &BenchConfig,
    per_half: usize,
    progress: Arc<Progress>,
    stamp_time: bool,
) -> Result<ProduceOutcome, BenchError> {
    let run_id = now_ns();
    let template = Bytes::from(vec![b'x'; config.message_bytes]);
    let n = config.producers as u64;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for p in 0..n {
        let sender = HalfSender {
            producer: Producer::new(producer_config(config))?,
            group: format!("tinymq-bench-{}-{run_id}-{p}", std::process::id()),
            topic: config.topic.clone(),
            template: template.clone(),
            per_half,
            stamp_time,
            progress: progress.clone(),
        };
        let (share, deadline) = share_of(config, p, n, start);
        tasks.push(tokio::spawn(sender.run(share, deadline)));
    }
    gather(tasks, start).await
}
