//! The result of a run: throughput and latency percentiles, printable as text or JSON.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::{Api, BenchConfig, Limit, Mode};

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub samples: u64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    pub mean_us: f64,
}

impl Latency {
    fn from(h: &Histogram<u64>) -> Option<Latency> {
        (!h.is_empty()).then(|| Latency {
            samples: h.len(),
            p50_us: h.value_at_quantile(0.50),
            p90_us: h.value_at_quantile(0.90),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
            mean_us: h.mean(),
        })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchResult {
    pub mode: &'static str,
    pub topic: String,
    pub partitions: u32,
    pub producers: usize,
    pub consumers: usize,
    pub message_bytes: usize,
    pub batch_bytes: usize,
    pub linger_ms: u64,
    pub acks: String,
    pub compression: &'static str,
    /// `record` (`Producer::send`) or `batch` (`Producer::send_batch`).
    pub api: &'static str,
    /// Messages per `send_batch` call (batch API).
    pub batch_records: Option<usize>,
    /// Sends awaiting acknowledgement per producer, at most (None: no bound but the queue's).
    pub in_flight: Option<usize>,
    pub rate_msg_per_s: Option<f64>,
    pub messages: u64,
    pub failed: u64,
    pub elapsed_s: f64,
    pub msg_per_s: f64,
    pub mb_per_s: f64,
    /// Produce: send (or intended send) to acknowledgement. E2e: send to receipt. Consume: none.
    pub latency: Option<Latency>,
    /// What one latency sample is: `message`, or `batch` (produce through the batch API).
    pub latency_per: &'static str,
    pub limit: String,
    /// With a filter: the expression, and the source messages the consumers moved past
    /// (`messages` counts only those received).
    pub filter: Option<String>,
    pub scanned: Option<u64>,
    pub scanned_msg_per_s: Option<f64>,
    pub scanned_mb_per_s: Option<f64>,
    /// Consume and e2e: the consumers' isolation (`read-committed` or `read-uncommitted`).
    pub isolation: Option<&'static str>,
    /// Transactional produce: records per transaction, transactions committed, and their
    /// rate; `latency` is then per record from send to the commit's return, `txn_latency`
    /// per transaction from begin to the commit's return.
    pub records_per_txn: Option<usize>,
    /// `records_per_txn` counts records per half message, and the transaction figures halves.
    pub half: bool,
    pub transactions: Option<u64>,
    pub txn_per_s: Option<f64>,
    pub txn_latency: Option<Latency>,
}

impl BenchResult {
    pub(crate) fn new(
        mode: Mode,
        config: &BenchConfig,
        partitions: u32,
        messages: u64,
        failed: u64,
        elapsed: Duration,
        latency: Histogram<u64>,
    ) -> BenchResult {
        let secs = elapsed.as_secs_f64().max(1e-9);
        BenchResult {
            mode: mode.name(),
            topic: config.topic.clone(),
            partitions,
            producers: config.producers,
            consumers: config.consumers,
            message_bytes: config.message_bytes,
            batch_bytes: config.batch_bytes,
            linger_ms: config.linger.as_millis() as u64,
            acks: match config.acks.wire() {
                0 => "0".into(),
                1 => "1".into(),
                _ => "all".into(),
            },
            compression: config.compression.name(),
            api: config.api.name(),
            batch_records: (config.api == Api::Batch).then_some(config.batch_records),
            in_flight: config.in_flight,
            rate_msg_per_s: config.rate,
            messages,
            failed,
            elapsed_s: secs,
            msg_per_s: messages as f64 / secs,
            mb_per_s: (messages * config.message_bytes as u64) as f64 / secs / 1e6,
            latency: Latency::from(&latency),
            latency_per: if mode == Mode::Produce && config.api == Api::Batch {
                "batch"
            } else {
                "message"
            },
            limit: match config.limit {
                Limit::Count(c) => format!("{c} messages"),
                Limit::Duration(d) => format!("{} s", d.as_secs_f64()),
            },
            filter: None,
            scanned: None,
            scanned_msg_per_s: None,
            scanned_mb_per_s: None,
            isolation: (mode != Mode::Produce).then(|| crate::isolation_name(config.isolation)),
            records_per_txn: config.records_per_txn,
            half: config.half,
            transactions: None,
            txn_per_s: None,
            txn_latency: None,
        }
    }

    /// Adds a transactional run's figures: `transactions` committed, their latencies.
    pub(crate) fn with_txn(mut self, transactions: u64, latency: &Histogram<u64>) -> BenchResult {
        self.transactions = Some(transactions);
        self.txn_per_s = Some(transactions as f64 / self.elapsed_s.max(1e-9));
        self.txn_latency = Latency::from(latency);
        self
    }

    /// Adds a filtered run's scan: `scanned` source messages of `message_bytes` each.
    pub(crate) fn with_scan(mut self, filter: &str, scanned: u64) -> BenchResult {
        let secs = self.elapsed_s.max(1e-9);
        self.filter = Some(filter.to_string());
        self.scanned = Some(scanned);
        self.scanned_msg_per_s = Some(scanned as f64 / secs);
        self.scanned_mb_per_s = Some((scanned * self.message_bytes as u64) as f64 / secs / 1e6);
        self
    }

    /// A few human-readable lines.
    pub fn text(&self) -> String {
        let mut s = format!(
            "{} {}: {} messages of {} B in {:.2} s: {:.0} msg/s, {:.1} MB/s ({} failed)\n  partitions {}, producers {}, consumers {}, batch {} B, linger {} ms, acks {}, compression {}",
            self.mode, self.topic, self.messages, self.message_bytes, self.elapsed_s, self.msg_per_s, self.mb_per_s,
            self.failed, self.partitions, self.producers, self.consumers, self.batch_bytes, self.linger_ms, self.acks,
            self.compression
        );
        s.push_str(&format!(", api {}", self.api));
        if let Some(n) = self.batch_records {
            s.push_str(&format!(", {n} records per batch"));
        }
        if let Some(k) = self.in_flight {
            s.push_str(&format!(", {k} in flight"));
        }
        if let Some(rate) = self.rate_msg_per_s {
            s.push_str(&format!(", rate {rate:.0} msg/s"));
        }
        if let Some(isolation) = self.isolation {
            s.push_str(&format!(", {isolation}"));
        }
        match (self.records_per_txn, self.half) {
            (Some(n), false) => {
                s.push_str(&format!(", transactional: {n} records per transaction"))
            }
            (Some(n), true) => s.push_str(&format!(", half messages: {n} records per half")),
            (None, _) => {}
        }
        if let (Some(filter), Some(scanned)) = (&self.filter, self.scanned) {
            s.push_str(&format!(
                "\n  filter {filter}: received {} of {scanned} source messages scanned: {:.0} msg/s, {:.1} MB/s scanned",
                self.messages,
                self.scanned_msg_per_s.unwrap_or_default(),
                self.scanned_mb_per_s.unwrap_or_default(),
            ));
        }
        if let Some(l) = &self.latency {
            s.push_str(&format!(
                "\n  latency µs per {}: p50 {} p90 {} p99 {} p99.9 {} max {} (mean {:.0}, {} samples)",
                self.latency_per, l.p50_us, l.p90_us, l.p99_us, l.p999_us, l.max_us, l.mean_us, l.samples
            ));
        }
        let (unit, span) = match self.half {
            true => ("halves", "half (send_half to commit)"),
            false => ("transactions", "transaction (begin to commit)"),
        };
        if let (Some(t), Some(rate)) = (self.transactions, self.txn_per_s) {
            s.push_str(&format!("\n  {t} {unit} committed: {rate:.0} {unit}/s"));
        }
        if let Some(l) = &self.txn_latency {
            s.push_str(&format!(
                "\n  latency µs per {span}: p50 {} p90 {} p99 {} p99.9 {} max {} (mean {:.0})",
                l.p50_us, l.p90_us, l.p99_us, l.p999_us, l.max_us, l.mean_us
            ));
        }
        s
    }
}
