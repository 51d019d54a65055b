//! `tinymq bench`: load through the real client over real sockets, reporting throughput and
//! latency percentiles from HDR histograms.
//!
//! - `produce`: producers send `count` messages (or for `duration`); latency is from send (or,
//!   with a fixed rate, from the *intended* send time) to acknowledgement, per message with
//!   the record API (`Producer::send`) and per batch with the batch API
//!   (`Producer::send_batch`). `in_flight` bounds the sends awaiting acknowledgement per
//!   producer (a closed loop).
//! - `consume`: consumers read `count` messages from the start of the topic, after filling it
//!   if it holds fewer; throughput only. With `filter`, the broker returns only matching
//!   messages: the run ends when the consumers' positions have moved past `count` source
//!   messages, and reports both the messages received and the source messages scanned.
//! - `produce --transactional`: each producer has its own transactional id and sends
//!   `records_per_txn` records per transaction (begin, `Producer::send` each, commit); latency
//!   per record is from send to the commit's return, and is also reported per transaction.
//!   Consumers read with `isolation` (read-uncommitted by default).
//! - `e2e`: producers and consumers at once; latency is from the producer's send time (written
//!   into the first 8 bytes of each message) to the consumer's receipt.
//!
//! Fixed-rate mode measures from the intended send time, so a stall shows up in the latency
//! of every message that should have been sent during it (no coordinated omission).

mod consume;
mod half;
mod produce;
mod report;
mod share;
mod txn;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tinymq_client::{Acks, Admin, ClientConfig, ClientError, Compression, Isolation, TopicConfig};

pub use report::{BenchResult, Latency};

/// The producer API a run sends through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `Producer::send`, one call per message.
    Record,
    /// `Producer::send_batch`, one call per `batch_records` messages.
    Batch,
}

impl Api {
    pub fn name(self) -> &'static str {
        match self {
            Api::Record => "record",
            Api::Batch => "batch",
        }
    }

    pub fn parse(s: &str) -> Option<Api> {
        match s {
            "record" => Some(Api::Record),
            "batch" => Some(Api::Batch),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Produce,
    Consume,
    E2e,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Produce => "produce",
            Mode::Consume => "consume",
            Mode::E2e => "e2e",
        }
    }
}

/// `read-committed` or `read-uncommitted` (Kafka's `isolation.level`, with dashes).
pub fn isolation_name(isolation: Isolation) -> &'static str {
    match isolation {
        Isolation::ReadCommitted => "read-committed",
        Isolation::ReadUncommitted => "read-uncommitted",
    }
}

/// The isolation named by [`isolation_name`] (Kafka's underscores are taken too).
pub fn parse_isolation(s: &str) -> Option<Isolation> {
    match s.replace('_', "-").as_str() {
        "read-committed" => Some(Isolation::ReadCommitted),
        "read-uncommitted" => Some(Isolation::ReadUncommitted),
        _ => None,
    }
}

/// When a run ends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Limit {
    Count(u64),
    Duration(Duration),
}

#[derive(Debug, Clone)]
pub struct BenchConfig {
    pub bootstrap: String,
    /// TLS (and login) of every connection the bench opens.
    pub security: tinymq_client::Security,
    pub topic: String,
    /// Partitions of the topic if the bench creates it.
    pub partitions: u32,
    /// Flush policy of the topic if the bench creates it (empty: the server's default).
    pub flush: String,
    pub producers: usize,
    pub consumers: usize,
    pub message_bytes: usize,
    pub batch_bytes: usize,
    pub linger: Duration,
    pub acks: Acks,
    pub compression: Compression,
    pub limit: Limit,
    pub api: Api,
    /// Messages per `send_batch` call (batch API only).
    pub batch_records: usize,
    /// Sends (records or batches) awaiting acknowledgement per producer, at most; `None`:
    /// bounded only by the producer's queue.
    pub in_flight: Option<usize>,
    /// Messages per second over all producers; `None` sends as fast as possible.
    pub rate: Option<f64>,
    /// Report progress on stderr: a live line on a terminal, else a plain line every
    /// [`PLAIN_PROGRESS_EVERY`].
    pub progress: bool,
    /// Keep the topic if the bench created it (by default it is deleted after the run).
    pub keep_topic: bool,
    /// Consumers fetch with this filter expression (docs/queues.md, "Filters").
    pub filter: Option<String>,
    /// Producers give every Nth message the tag `match` (header `tag`) and the others the tag
    /// `other`, so that `tag = 'match'` selects 1 in N.
    pub tag_every: Option<u64>,
    /// Consumers are members of this share group, accepting every record, instead of
    /// readers of assigned partitions.
    pub share_group: Option<String>,
    /// Producers send in transactions of this many records, each producer with its own
    /// transactional id (`None`: plain idempotent sends).
    pub records_per_txn: Option<usize>,
    /// With `records_per_txn`: half messages of that many records (`send_half`, then commit),
    /// each producer with its own producer group, instead of Kafka transactions.
    pub half: bool,
    /// What the consumers read (consume and e2e).
    pub isolation: Isolation,
}

impl BenchConfig {
    /// Client settings for the cluster under test.
    pub fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new(&self.bootstrap);
        config.security = self.security.clone();
        config
    }
}

/// How often progress is printed when stderr is not a terminal.
const PLAIN_PROGRESS_EVERY: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{0}")]
    Client(#[from] ClientError),
    #[error("invalid bench settings: {0}")]
    Config(String),
    #[error("consumers received {got} of {want} messages before giving up")]
    Incomplete { got: u64, want: u64 },
}

/// Counters shared by the tasks of one run, for the progress line.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    pub sent: AtomicU64,
    pub acked: AtomicU64,
    pub received: AtomicU64,
    /// With a filter: source records the consumers' positions moved past (matching or not).
    pub scanned: AtomicU64,
    pub failed: AtomicU64,
}

pub(crate) fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Microseconds between two instants, at least 1 (a histogram records whole microseconds).
pub(crate) fn micros(from: Instant, to: Instant) -> u64 {
    (to.saturating_duration_since(from).as_micros() as u64).max(1)
}

pub(crate) fn new_histogram() -> hdrhistogram::Histogram<u64> {
    // 1 µs to 10 minutes at 3 significant digits.
    hdrhistogram::Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid bounds")
}

impl BenchConfig {
    fn validate(&self, mode: Mode) -> Result<(), BenchError> {
        let bad = |m: &str| Err(BenchError::Config(m.into()));
        if mode != Mode::Consume && self.producers == 0 {
            return bad("--producers must be at least 1");
        }
        if mode != Mode::Produce && self.consumers == 0 {
            return bad("--consumers must be at least 1");
        }
        if mode == Mode::E2e && self.message_bytes < 8 {
            return bad("e2e needs --message-bytes ≥ 8 (the send time travels in the message)");
        }
        if mode == Mode::Consume && !matches!(self.limit, Limit::Count(_)) {
            return bad("consume needs --count");
        }
        if self.rate.is_some_and(|r| r <= 0.0) {
            return bad("--rate must be positive");
        }
        if self.batch_records == 0 || self.in_flight == Some(0) {
            return bad("--batch-records and --in-flight must be at least 1");
        }
        if i32::try_from(self.batch_records).is_err() {
            return bad("--batch-records is too large for one batch");
        }
        if self.half && self.records_per_txn.is_none() {
            return bad("--half needs --records-per-txn (records per half)");
        }
        if let Some(per_txn) = self.records_per_txn {
            if per_txn == 0 {
                return bad("--records-per-txn must be at least 1");
            }
            if self.api != Api::Record || self.in_flight.is_some() || self.rate.is_some() {
                return bad("--transactional sends with --api record, without --in-flight or --rate (one transaction at a time per producer)");
            }
            if self.tag_every.is_some() {
                return bad("--transactional does not tag messages (--tag-every)");
            }
        }
        if self.share_group.is_some() && self.isolation == Isolation::ReadCommitted {
            return bad("--isolation read-committed is for regular consumers, not --share-group");
        }
        Ok(())
    }

    /// The topic's partition count, and whether this run created it.
    async fn ensure_topic(&self) -> Result<(u32, bool), BenchError> {
        let admin = Admin::new(self.client_config())?;
        match admin.describe_topic(&self.topic).await {
            Ok(d) => Ok((d.partitions.len() as u32, false)),
            Err(ClientError::Server {
                code: tinymq_client::ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                ..
            }) => {
                let config = TopicConfig {
                    partitions: self.partitions,
                    flush: self.flush.clone(),
                    message_bytes_max: (self.batch_bytes * 2).clamp(1 << 20, 16 << 20) as u32,
                    ..TopicConfig::default()
                };
                Ok((
                    admin.create_topic(&self.topic, config).await?.partitions,
                    true,
                ))
            }
            Err(e) => Err(e.into()),
        }
    }
}

fn progress_line(
    config: &BenchConfig,
    progress: Arc<Progress>,
    mode: Mode,
) -> Option<tokio::task::JoinHandle<()>> {
    if !config.progress {
        return None;
    }
    use std::io::IsTerminal;
    let live = std::io::stderr().is_terminal();
    let bar = indicatif::ProgressBar::new_spinner();
    let of = match config.limit {
        Limit::Count(n) => format!("/{n}"),
        Limit::Duration(d) => format!(" in {:.0} s", d.as_secs_f64()),
    };
    Some(tokio::spawn(async move {
        let start = Instant::now();
        let mut printed = Instant::now();
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let (acked, received) = (
                progress.acked.load(Ordering::Relaxed),
                progress.received.load(Ordering::Relaxed),
            );
            let done = if mode == Mode::Produce {
                acked
            } else {
                received
            };
            let secs = start.elapsed().as_secs_f64().max(1e-3);
            let line = format!(
                "{} {done}{of} messages, {:.0} msg/s, sent {} acked {acked} received {received} failed {}",
                mode.name(),
                done as f64 / secs,
                progress.sent.load(Ordering::Relaxed),
                progress.failed.load(Ordering::Relaxed),
            );
            if live {
                bar.set_message(line);
                bar.tick();
            } else if printed.elapsed() >= PLAIN_PROGRESS_EVERY {
                printed = Instant::now();
                eprintln!("{line}");
            }
        }
    }))
}

/// Runs one benchmark against the cluster at `config.bootstrap`.
pub async fn run(mode: Mode, config: BenchConfig) -> Result<BenchResult, BenchError> {
    config.validate(mode)?;
    let (partitions, created) = config.ensure_topic().await?;
    let progress = Arc::new(Progress::default());
    let ticker = progress_line(&config, progress.clone(), mode);
    let result = match mode {
        Mode::Produce => produce::run_producers(&config, progress.clone(), false)
            .await
            .map(|p| {
                let result = BenchResult::new(
                    mode, &config, partitions, p.messages, p.failed, p.elapsed, p.latency,
                );
                match p.txn {
                    Some(t) => result.with_txn(t.transactions, &t.latency),
                    None => result,
                }
            }),
        Mode::Consume if config.share_group.is_some() => {
            share::run_share_consume(&config, partitions, progress.clone()).await
        }
        Mode::Consume => consume::run_consume(&config, partitions, progress.clone()).await,
        Mode::E2e => consume::run_e2e(&config, partitions, progress.clone()).await,
    };
    if let Some(t) = ticker {
        t.abort();
    }
    if created && !config.keep_topic {
        // The run's data is not wanted afterwards; a failure to delete is not the run's.
        let deleted = match Admin::new(config.client_config()) {
            Ok(admin) => admin.delete_topic(&config.topic).await,
            Err(e) => Err(e),
        };
        if let Err(e) = deleted {
            tracing::warn!(topic = %config.topic, error = %e, "could not delete the bench topic");
        }
    }
    result
}

/// Opens `count` connections, handshakes each, and keeps them idle for `hold`: for measuring
/// what an idle connection costs the server. Returns how many were opened.
pub async fn hold_idle_connections(
    bootstrap: &str,
    security: &tinymq_client::Security,
    count: usize,
    hold: Duration,
) -> Result<usize, BenchError> {
    let mut connections = Vec::with_capacity(count);
    let role = tinymq_client::NodeRole::Client;
    for _ in 0..count {
        let connecting = tinymq_client::Connection::connect_secure(
            bootstrap,
            "tinymq-bench-idle",
            "",
            role,
            0,
            security,
        );
        connections.push(connecting.await?);
    }
    println!(
        "holding {} idle connections for {} s",
        connections.len(),
        hold.as_secs_f64()
    );
    tokio::time::sleep(hold).await;
    Ok(connections.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> BenchConfig {
        BenchConfig {
            bootstrap: "127.0.0.1:1".into(),
            security: tinymq_client::Security::default(),
            topic: "t".into(),
            partitions: 1,
            flush: String::new(),
            producers: 1,
            consumers: 1,
            message_bytes: 16,
            batch_bytes: 1 << 20,
            linger: Duration::from_millis(5),
            acks: Acks::All,
            compression: Compression::None,
            limit: Limit::Count(10),
            api: Api::Record,
            batch_records: 1,
            in_flight: None,
            rate: None,
            progress: false,
            keep_topic: false,
            filter: None,
            tag_every: None,
            share_group: None,
            records_per_txn: None,
            half: false,
            isolation: Isolation::ReadUncommitted,
        }
    }

    #[test]
    fn isolation_names_round_trip_and_kafka_spellings_are_taken() {
        for i in [Isolation::ReadCommitted, Isolation::ReadUncommitted] {
            assert_eq!(parse_isolation(isolation_name(i)), Some(i));
        }
        assert_eq!(
            parse_isolation("read_committed"),
            Some(Isolation::ReadCommitted)
        );
        assert_eq!(parse_isolation("committed"), None);
    }

    #[test]
    fn transactional_runs_refuse_what_they_cannot_honour() {
        let mut c = config();
        c.records_per_txn = Some(10);
        assert!(c.validate(Mode::Produce).is_ok());
        assert!(c.validate(Mode::E2e).is_ok());
        for change in [
            (|c: &mut BenchConfig| c.records_per_txn = Some(0)) as fn(&mut BenchConfig),
            |c| c.api = Api::Batch,
            |c| c.in_flight = Some(1),
            |c| c.rate = Some(100.0),
            |c| c.tag_every = Some(2),
        ] {
            let mut bad = c.clone();
            change(&mut bad);
            assert!(
                matches!(bad.validate(Mode::Produce), Err(BenchError::Config(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn share_groups_do_not_read_committed() {
        let mut c = config();
        c.share_group = Some("g".into());
        assert!(c.validate(Mode::Consume).is_ok());
        c.isolation = Isolation::ReadCommitted;
        assert!(c.validate(Mode::Consume).is_err());
    }
}
