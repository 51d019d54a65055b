//! The producing side of a run: one `Producer` (own connection) per sender, a collector task
//! per producer that times each acknowledgement the moment it arrives.
//!
//! With `--api record` a sender calls `Producer::send` per message; with `--api batch` it calls
//! `Producer::send_batch` with `--batch-records` messages, and latency is per batch. With
//! `--in-flight N` a sender waits once N sends (records or batches) await acknowledgement: a
//! closed loop. Unpaced record sends are handed to the collector in chunks and their send time
//! is read once per chunk ([`UNPACED_CHUNK`] messages, a few microseconds of sending), so that
//! the bench's own per-message work stays small next to the client's.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use futures::stream::{FuturesUnordered, StreamExt};
use hdrhistogram::Histogram;
use tinymq_client::{
    BatchDelivery, ClientError, DeliveryFuture, Producer, ProducerConfig, ProducerRecord,
};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use crate::{micros, new_histogram, now_ns, Api, BenchConfig, BenchError, Limit, Progress};

/// Sends handed to a collector before the sender waits for it.
const PENDING_SENDS_MAX: usize = 4096;
/// Unpaced record sends per hand-off to the collector (and per clock read).
const UNPACED_CHUNK: usize = 64;

pub(crate) struct ProduceOutcome {
    pub messages: u64,
    pub failed: u64,
    pub elapsed: Duration,
    /// Per message (or per batch with the batch API).
    pub latency: Histogram<u64>,
    /// Transactional runs: transactions committed and their latency.
    pub txn: Option<TxnFigures>,
}

pub(crate) struct TxnFigures {
    pub transactions: u64,
    pub latency: Histogram<u64>,
}

struct CollectorOutcome {
    acked: u64,
    failed: u64,
    last_ack: Option<Instant>,
    latency: Histogram<u64>,
}

/// Sends awaiting acknowledgement, as handed to the collector.
enum Sent {
    /// Records sent at one time (one record when paced or in a closed loop).
    Records(Instant, Vec<DeliveryFuture>, Option<OwnedSemaphorePermit>),
    Batch(Instant, BatchDelivery, u64, Option<OwnedSemaphorePermit>),
}

/// What one send came to: messages acknowledged and failed, and latencies to record.
struct Settled {
    acked: u64,
    failed: u64,
    first_error: Option<ClientError>,
    latencies_us: Vec<u64>,
}

async fn settle(sent: Sent) -> Settled {
    let mut out = Settled {
        acked: 0,
        failed: 0,
        first_error: None,
        latencies_us: Vec::new(),
    };
    match sent {
        Sent::Records(sent_at, deliveries, _permit) => {
            out.latencies_us.reserve(deliveries.len());
            // A chunk's records share batches, so they are acknowledged together.
            for delivery in deliveries {
                match delivery.await {
                    Ok(_) => {
                        out.acked += 1;
                        out.latencies_us.push(micros(sent_at, Instant::now()));
                    }
                    Err(e) => {
                        out.failed += 1;
                        out.first_error.get_or_insert(e);
                    }
                }
            }
        }
        Sent::Batch(sent_at, delivery, count, _permit) => match delivery.await {
            Ok(_) => {
                out.acked = count;
                out.latencies_us.push(micros(sent_at, Instant::now()));
            }
            Err(e) => {
                out.failed = count;
                out.first_error = Some(e);
            }
        },
    }
    out
}

/// Awaits sends as they complete and records send-to-ack latency.
async fn collect(mut rx: mpsc::Receiver<Sent>, progress: Arc<Progress>) -> CollectorOutcome {
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
                Some(sent) => pending.push(settle(sent)),
                None => open = false,
            },
            Some(settled) = pending.next(), if !pending.is_empty() => {
                if let Some(e) = &settled.first_error {
                    if out.failed == 0 {
                        tracing::warn!(error = %e, "message failed");
                    }
                }
                if settled.acked > 0 {
                    out.last_ack = Some(Instant::now());
                }
                for us in settled.latencies_us {
                    out.latency.saturating_record(us);
                }
                out.acked += settled.acked;
                out.failed += settled.failed;
                progress.acked.fetch_add(settled.acked, Ordering::Relaxed);
                progress.failed.fetch_add(settled.failed, Ordering::Relaxed);
            }
        }
    }
    out
}

pub(crate) fn producer_config(config: &BenchConfig) -> ProducerConfig {
    let mut p = ProducerConfig::new(&config.bootstrap);
    p.client = config.client_config();
    p.acks = config.acks;
    p.compression = config.compression;
    p.batch_bytes = config.batch_bytes;
    p.linger = config.linger;
    p
}

/// The tags of `--tag-every`: `tag = 'match'` selects one message in N.
const MATCH_TAG: &[u8] = b"match";
const OTHER_TAG: &[u8] = b"other";

/// The value of one message: for end-to-end runs the first 8 bytes carry the (intended) send
/// time in ns since the Unix epoch.
pub(crate) fn payload(template: &Bytes, stamp_ns: Option<u64>) -> Bytes {
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

/// One sender's loop, driven by one `block_on` on its own OS thread: with a fixed rate it paces
/// sends with the OS's sleep, which is far finer than tokio's 1 ms timer (and blocks only this
/// thread); unpaced it just loops.
struct Sender {
    config: BenchConfig,
    producer: Producer,
    progress: Arc<Progress>,
    template: Bytes,
    tx: mpsc::Sender<Sent>,
    in_flight: Option<Arc<Semaphore>>,
    start: Instant,
    start_ns: u64,
    stamp_time: bool,
}

impl Sender {
    /// Sends `share` messages (or until `deadline`) at `rate` messages/s; returns the
    /// messages that failed to send.
    async fn run(self, share: Option<u64>, deadline: Option<Instant>, rate: Option<f64>) -> u64 {
        let per_send = match self.config.api {
            Api::Record => 1,
            Api::Batch => self.config.batch_records as u64,
        };
        // Unpaced, open-loop record sends are gathered into chunks.
        let chunk = if rate.is_none() && self.in_flight.is_none() && per_send == 1 {
            UNPACED_CHUNK
        } else {
            1
        };
        let mut failed = 0u64;
        let mut sent = 0u64;
        let mut records: Vec<DeliveryFuture> = Vec::with_capacity(chunk);
        let mut chunk_sent_at = Instant::now();
        loop {
            let want = share.map_or(per_send, |s| s.saturating_sub(sent).min(per_send));
            if want == 0 || deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
            let intended = rate.map(|r| self.start + Duration::from_secs_f64(sent as f64 / r));
            if let Some(wait) = intended.and_then(|t| t.checked_duration_since(Instant::now())) {
                std::thread::sleep(wait);
            }
            let permit = match &self.in_flight {
                Some(s) => match s.clone().acquire_owned().await {
                    Ok(p) => Some(p),
                    Err(_) => break,
                },
                None => None,
            };
            if records.is_empty() {
                chunk_sent_at = intended.unwrap_or_else(Instant::now);
            }
            let sent_at = intended.unwrap_or(chunk_sent_at);
            let stamp = self
                .stamp_time
                .then(|| self.start_ns + (sent_at - self.start).as_nanos() as u64);
            let first_index = sent;
            sent += want;
            self.progress.sent.fetch_add(want, Ordering::Relaxed);
            let handed = match self.config.api {
                Api::Record => {
                    let record = self.record(first_index, stamp);
                    match self.producer.send(&self.config.topic, record).await {
                        Ok(delivery) => {
                            records.push(delivery);
                            if records.len() < chunk && share.is_none_or(|s| sent < s) {
                                continue;
                            }
                            let chunk = std::mem::replace(&mut records, Vec::with_capacity(chunk));
                            Some(Sent::Records(chunk_sent_at, chunk, permit))
                        }
                        Err(e) => self.send_failed(&mut failed, want, e),
                    }
                }
                Api::Batch => {
                    let batch = (first_index..first_index + want)
                        .map(|index| self.record(index, stamp))
                        .collect();
                    let topic = &self.config.topic;
                    match self.producer.send_batch(topic, batch).await {
                        Ok(delivery) => Some(Sent::Batch(sent_at, delivery, want, permit)),
                        Err(e) => self.send_failed(&mut failed, want, e),
                    }
                }
            };
            if let Some(handed) = handed {
                if self.tx.send(handed).await.is_err() {
                    break;
                }
            }
        }
        if !records.is_empty() {
            let _ = self
                .tx
                .send(Sent::Records(chunk_sent_at, records, None))
                .await;
        }
        drop(self.tx);
        self.producer.close().await;
        failed
    }

    /// This sender's message number `index`: tagged `match` (every `tag_every`th, from the
    /// first) or `other` when the run tags messages.
    fn record(&self, index: u64, stamp: Option<u64>) -> ProducerRecord {
        let mut record = ProducerRecord::value(payload(&self.template, stamp));
        if let Some(every) = self.config.tag_every {
            let tag = if index.is_multiple_of(every) {
                MATCH_TAG
            } else {
                OTHER_TAG
            };
            record.headers = vec![("tag".to_string(), Some(Bytes::from_static(tag)))];
        }
        record
    }

    fn send_failed(&self, failed: &mut u64, count: u64, e: ClientError) -> Option<Sent> {
        tracing::warn!(error = %e, "send failed");
        *failed += count;
        self.progress.failed.fetch_add(count, Ordering::Relaxed);
        None
    }
}

/// Runs the producers until the limit; `stamp_time` writes send times for e2e. With
/// `records_per_txn` they send in transactions ([`crate::txn`]).
pub(crate) async fn run_producers(
    config: &BenchConfig,
    progress: Arc<Progress>,
    stamp_time: bool,
) -> Result<ProduceOutcome, BenchError> {
    if let (Some(per_half), true) = (config.records_per_txn, config.half) {
        return crate::half::run_half_producers(config, per_half, progress, stamp_time).await;
    }
    if let Some(per_txn) = config.records_per_txn {
        return crate::txn::run_txn_producers(config, per_txn, progress, stamp_time).await;
    }
    let start = Instant::now();
    let start_ns = now_ns();
    let template = Bytes::from(vec![b'x'; config.message_bytes]);
    let n = config.producers as u64;
    let mut tasks = Vec::new();
    for p in 0..n {
        let (tx, rx) = mpsc::channel(PENDING_SENDS_MAX);
        let collector = tokio::spawn(collect(rx, progress.clone()));
        let sender = Sender {
            config: config.clone(),
            producer: Producer::new(producer_config(config))?,
            progress: progress.clone(),
            template: template.clone(),
            tx,
            in_flight: config.in_flight.map(|k| Arc::new(Semaphore::new(k))),
            start,
            start_ns,
            stamp_time,
        };
        let share = match config.limit {
            Limit::Count(c) => Some(c / n + u64::from(p < c % n)),
            Limit::Duration(_) => None,
        };
        let deadline = match config.limit {
            Limit::Duration(d) => Some(start + d),
            Limit::Count(_) => None,
        };
        let rate = config.rate.map(|r| r / n as f64);
        let runtime = tokio::runtime::Handle::current();
        let sender = tokio::task::spawn_blocking(move || {
            runtime.block_on(sender.run(share, deadline, rate))
        });
        tasks.push((sender, collector));
    }
    let mut outcome = ProduceOutcome {
        messages: 0,
        failed: 0,
        elapsed: Duration::ZERO,
        latency: new_histogram(),
        txn: None,
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
