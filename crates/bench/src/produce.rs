//! The producing side of a run: one `Producer` (own connection) per task, a collector task per
//! producer that times each acknowledgement the moment it arrives.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use futures::stream::{FuturesUnordered, StreamExt};
use hdrhistogram::Histogram;
use tinymq_client::{DeliveryFuture, Producer, ProducerConfig, ProducerRecord};
use tokio::sync::mpsc;

use crate::{micros, new_histogram, now_ns, BenchConfig, BenchError, Limit, Progress};

/// Deliveries handed to a collector before the sender waits for it.
const PENDING_DELIVERIES_MAX: usize = 65_536;

pub(crate) struct ProduceOutcome {
    pub messages: u64,
    pub failed: u64,
    pub elapsed: Duration,
    pub latency: Histogram<u64>,
}

struct CollectorOutcome {
    acked: u64,
    failed: u64,
    last_ack: Option<Instant>,
    latency: Histogram<u64>,
}

/// Awaits deliveries as they complete and records send-to-ack latency.
async fn collect(
    mut rx: mpsc::Receiver<(Instant, DeliveryFuture)>,
    progress: Arc<Progress>,
) -> CollectorOutcome {
    let mut pending = FuturesUnordered::new();
    let mut out = CollectorOutcome {
        acked: 0,
        failed: 0,
        last_ack: None,
        latency: new_histogram(),
    };
    let mut open = true;
    while open || !pending.is_empty() {
        tokio::select! {
            next = rx.recv(), if open => match next {
                Some((sent_at, delivery)) => pending.push(async move { (sent_at, delivery.await) }),
                None => open = false,
            },
            Some((sent_at, result)) = pending.next(), if !pending.is_empty() => {
                let now = Instant::now();
                match result {
                    Ok(_) => {
                        out.acked += 1;
                        out.last_ack = Some(now);
                        out.latency.saturating_record(micros(sent_at, now));
                        progress.acked.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        if out.failed == 0 {
                            tracing::warn!(error = %e, "message failed");
                        }
                        out.failed += 1;
                        progress.failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }
    out
}

fn producer_config(config: &BenchConfig) -> ProducerConfig {
    let mut p = ProducerConfig::new(&config.bootstrap);
    p.acks = config.acks;
    p.compression = config.compression;
    p.batch_bytes = config.batch_bytes;
    p.linger = config.linger;
    p
}

/// The value of one message: for end-to-end runs the first 8 bytes carry the (intended) send
/// time in ns since the Unix epoch.
fn payload(template: &Bytes, stamp_ns: Option<u64>) -> Bytes {
    match stamp_ns {
        None => template.clone(),
        Some(ns) => {
            let mut b = BytesMut::with_capacity(template.len());
            b.put_u64(ns);
            b.extend_from_slice(&template[8..]);
            b.freeze()
        }
    }
}

/// Runs the producers until the limit; `stamp_time` writes send times for e2e.
pub(crate) async fn run_producers(
    config: &BenchConfig,
    progress: Arc<Progress>,
    stamp_time: bool,
) -> Result<ProduceOutcome, BenchError> {
    let start = Instant::now();
    let start_ns = now_ns();
    let template = Bytes::from(vec![b'x'; config.message_bytes]);
    let n = config.producers as u64;
    let mut tasks = Vec::new();
    for p in 0..n {
        let producer = Producer::new(producer_config(config))?;
        let (tx, rx) = mpsc::channel(PENDING_DELIVERIES_MAX);
        let collector = tokio::spawn(collect(rx, progress.clone()));
        let (config, progress, template) = (config.clone(), progress.clone(), template.clone());
        let runtime = tokio::runtime::Handle::current();
        // One OS thread per producer: with a fixed rate it paces sends with the OS's sleep,
        // which is far finer than tokio's 1 ms timer; unpaced it just loops.
        let sender = tokio::task::spawn_blocking(move || {
            let share = match config.limit {
                Limit::Count(c) => Some(c / n + u64::from(p < c % n)),
                Limit::Duration(_) => None,
            };
            let deadline = match config.limit {
                Limit::Duration(d) => Some(start + d),
                Limit::Count(_) => None,
            };
            let rate = config.rate.map(|r| r / n as f64);
            let mut failed = 0u64;
            for i in 0u64.. {
                if share.is_some_and(|s| i >= s) || deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
                let intended = rate.map(|r| start + Duration::from_secs_f64(i as f64 / r));
                if let Some(wait) = intended.and_then(|t| t.checked_duration_since(Instant::now()))
                {
                    std::thread::sleep(wait);
                }
                let sent_at = intended.unwrap_or_else(Instant::now);
                let stamp = stamp_time.then(|| start_ns + (sent_at - start).as_nanos() as u64);
                let record = ProducerRecord::value(payload(&template, stamp));
                progress.sent.fetch_add(1, Ordering::Relaxed);
                match runtime.block_on(producer.send(&config.topic, record)) {
                    Ok(delivery) => {
                        if tx.blocking_send((sent_at, delivery)).is_err() {
                            break;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "send failed");
                        failed += 1;
                        progress.failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            drop(tx);
            runtime.block_on(producer.close());
            failed
        });
        tasks.push((sender, collector));
    }
    let mut outcome = ProduceOutcome {
        messages: 0,
        failed: 0,
        elapsed: Duration::ZERO,
        latency: new_histogram(),
    };
    let mut last = start;
    for (sender, collector) in tasks {
        outcome.failed += sender
            .await
            .map_err(|e| BenchError::Config(e.to_string()))?;
        let c = collector
            .await
            .map_err(|e| BenchError::Config(e.to_string()))?;
        outcome.messages += c.acked;
        outcome.failed += c.failed;
        last = last.max(c.last_ack.unwrap_or(start));
        outcome.latency.add(&c.latency).expect("same bounds");
    }
    outcome.elapsed = last - start;
    Ok(outcome)
}
