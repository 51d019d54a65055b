//! One route runner: copies the matching records of one source partition led here into the
//! target exactly once. It recovers its position (the committed progress, then a scan of the
//! target for copies made after that commit), checkpoints before its first copy, then loops:
//! poll a bounded round of records, copy the matching ones with its own idempotent producer
//! (in batches, each acknowledged before the next is sent: `batches.rs`), advance and (at
//! most every second) commit its progress; now and then, even when idle, it commits a fresh
//! checkpoint, which bounds the next recovery scan and keeps the progress from expiring.
//! Any failure closes the producer (every copy sent is acknowledged or has failed), backs off
//! and recovers again, so a failure never leaves a copy unaccounted for.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tinymq_client::{
    Admin, ClientConfig, Consumer, ConsumerConfig, ConsumerRecord, Producer, ProducerConfig,
    ProducerRecord, StartFrom,
};
use tinymq_protocol::messages as m;
use tokio_util::sync::CancellationToken;

use crate::route::batches::{send_in_order, too_large};
use crate::route::matcher::Matcher;
use crate::route::progress::{
    origin_headers, progress_group, scan_copies, Checkpoint, ScanFor, Trust,
};
use crate::route::registry::{RouteError, RunnerSpec, RunnerStats};
use crate::state::BrokerState;

/// Bytes one fetch of a runner (or of its recovery scan) brings back at most.
pub const FETCH_BYTES_MAX: u32 = 1 << 20;
/// Records one round copies at most before waiting for their acknowledgements: with
/// [`FETCH_BYTES_MAX`], what bounds a runner's memory.
pub const COPIES_PER_ROUND_MAX: usize = 500;
/// How often a runner commits its progress while it moves (and when it catches up).
pub const COMMIT_INTERVAL: Duration = Duration::from_secs(1);
/// A copy not acknowledged within this long fails the round (the runner recovers).
pub const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);
/// The runner producer's request timeout (within the delivery timeout).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a runner taking over from another broker's (or recovering after a copy failed)
/// waits before its recovery scan, so that copies still in flight have landed or failed:
/// the producer starts no resend after [`DELIVERY_TIMEOUT`], a request started just before
/// lasts up to [`REQUEST_TIMEOUT`], and the old runner learns of the move from its image
/// (checked every second) plus slack.
pub const HANDOVER_GRACE: Duration = Duration::from_secs(
    DELIVERY_TIMEOUT.as_secs() + REQUEST_TIMEOUT.as_secs() + HANDOVER_SLACK_SECS,
);
const HANDOVER_SLACK_SECS: u64 = 5;
/// How often a runner commits a fresh checkpoint (scan from the target's high watermark)
/// even when its position does not move: bounds a recovery scan to what the target received
/// in this interval, and keeps the progress group from expiring (7 days without commits).
pub const CHECKPOINT_REFRESH: Duration = Duration::from_secs(60);
/// Longest wait between recovery attempts after failures (the target unavailable, say).
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);
const BACKOFF_FIRST: Duration = Duration::from_millis(200);
/// How long a poll waits for records.
const POLL_WAIT: Duration = Duration::from_millis(500);
/// How long a recovery waits for the target partition's high watermark to reach its end.
const SETTLE_WAIT: Duration = Duration::from_secs(10);

/// Runs until `stop`, after `previous` (the runner this one replaces) has finished.
pub async fn run(
    state: Arc<BrokerState>,
    spec: RunnerSpec,
    stats: Arc<RunnerStats>,
    stop: CancellationToken,
    previous: Option<tokio::task::JoinHandle<()>>,
) {
    if let Some(previous) = previous {
        let _ = previous.await;
    }
    let mut backoff = BACKOFF_FIRST;
    let mut in_doubt = false;
    while !stop.is_cancelled() {
        let started = Instant::now();
        in_doubt = match attempt(&state, &spec, &stats, &stop, in_doubt).await {
            Ok(()) => false,
            Err(e) => {
                tracing::warn!(route = %spec.name, partition = spec.partition, error = %e,
                    "route runner failed; recovering after a pause");
                // A copy that failed may still be in a request in flight (not one refused
                // as too large: that is never written).
                in_doubt || matches!(&e, RouteError::Delivery(e) if !too_large(e))
            }
        };
        if started.elapsed() > BACKOFF_MAX * 4 {
            backoff = BACKOFF_FIRST;
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.cancelled() => {}
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// One life of the runner's producer: recover, copy until a failure or `stop`, then close the
/// producer, which returns once every copy sent is acknowledged or has failed.
async fn attempt(
    state: &BrokerState,
    spec: &RunnerSpec,
    stats: &RunnerStats,
    stop: &CancellationToken,
    in_doubt: bool,
) -> Result<(), RouteError> {
    let client = state.internal.client_config();
    let admin = state.internal.admin()?;
    let mut config = ProducerConfig::new("");
    config.client = client.clone();
    config.client.request_timeout = REQUEST_TIMEOUT;
    config.delivery_timeout = DELIVERY_TIMEOUT;
    let producer = Producer::new(config)?;
    let copier = Copier {
        state,
        spec,
        stats,
        admin: &admin,
        client,
        group: progress_group(spec.route_id, &spec.name),
        run: run_id(state.node_id()),
        in_doubt,
    };
    let outcome = tokio::select! {
        r = copier.copy(&producer) => r,
        _ = stop.cancelled() => Ok(()),
    };
    producer.close().await;
    outcome
}

struct Copier<'a> {
    state: &'a BrokerState,
    spec: &'a RunnerSpec,
    stats: &'a RunnerStats,
    admin: &'a Admin,
    client: ClientConfig,
    group: String,
    /// This attempt's run: copies carry it, checkpoints name it (see [`Trust::Run`]).
    run: u64,
    /// The previous attempt ended with a copy that failed: wait out the grace first.
    in_doubt: bool,
}

/// A run id unlikely to repeat: the hash of the time, the broker and a process-wide count
/// under the std library's randomly keyed hasher. Never 0 (0 marks an old checkpoint).
fn run_id(broker: u32) -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.map(|d| d.as_nanos()).unwrap_or(0).hash(&mut hasher);
    broker.hash(&mut hasher);
    COUNT.fetch_add(1, Ordering::Relaxed).hash(&mut hasher);
    hasher.finish().max(1)
}

impl Copier<'_> {
    async fn copy(&self, producer: &Producer) -> Result<(), RouteError> {
        let spec = self.spec;
        let matcher = Matcher::new(&spec.filter).map_err(RouteError::Filter)?;
        let mut next = self.recover().await?;
        let target = spec.target_partition();
        // The high watermark, not the log end: a tail above it may be truncated by a new
        // leader, and copies would then land below a log-end `scan_from`.
        let mut checkpoint = Checkpoint {
            target_partition: target,
            scan_from: self.target_high_watermark(target).await?,
            broker: self.state.node_id(),
            run: self.run,
        };
        // Before the first copy: from here on, a scan from `scan_from` finds every copy.
        self.commit(next, checkpoint).await?;
        self.stats.next_offset.store(next, Ordering::Relaxed);
        let mut consumer = self.consumer()?;
        consumer
            .assign(&spec.from, Some(vec![spec.partition]))
            .await?;
        consumer.seek(&spec.from, spec.partition, next)?;
        let (mut committed, mut last_commit) = (next, Instant::now());
        let mut last_refresh = Instant::now();
        loop {
            let records = consumer.poll(POLL_WAIT).await?;
            let copies: Vec<ProducerRecord> = records
                .iter()
                .filter(|r| matcher.matches(r))
                .map(|r| copy_of(r, spec, self.run, target))
                .collect();
            send_in_order(producer, &spec.to, copies, |end, count| {
                checkpoint.scan_from = checkpoint.scan_from.max(end);
                self.stats
                    .copied
                    .fetch_add(u64::from(count), Ordering::Relaxed);
            })
            .await?;
            if let Some(position) = consumer.position(&spec.from, spec.partition) {
                next = next.max(position);
                self.stats.next_offset.store(next, Ordering::Relaxed);
            }
            // Every copy of this round is acknowledged, none is in flight: no later copy can
            // land below the target's high watermark, so a scan may start there.
            let refresh = last_refresh.elapsed() >= CHECKPOINT_REFRESH;
            if refresh {
                let high_watermark = self.target_high_watermark(target).await?;
                checkpoint.scan_from = checkpoint.scan_from.max(high_watermark);
            }
            let due = records.is_empty() || last_commit.elapsed() >= COMMIT_INTERVAL;
            if (next != committed && due) || refresh {
                self.commit(next, checkpoint).await?;
                (committed, last_commit, last_refresh) = (next, Instant::now(), Instant::now());
            }
        }
    }

    /// The next source offset to copy: the committed one, moved past every copy of the
    /// checkpoint's run found in the target after the commit. With nothing committed (a new
    /// route, or progress lost), past every copy of this route id in the whole target, else
    /// the source's first offset.
    async fn recover(&self) -> Result<i64, RouteError> {
        let spec = self.spec;
        let committed = self
            .admin
            .committed_offsets(&self.group)
            .await?
            .into_iter()
            .find(|o| o.topic == spec.from && o.partition == spec.partition);
        let Some(committed) = committed else {
            return self.recover_without_progress().await;
        };
        let Some(checkpoint) = Checkpoint::from_metadata(&committed.metadata) else {
            return Ok(committed.offset);
        };
        if checkpoint.broker != self.state.node_id() || self.in_doubt {
            tracing::info!(route = %spec.name, partition = spec.partition,
                from_broker = checkpoint.broker, "route runner waiting for copies in flight");
            tokio::time::sleep(HANDOVER_GRACE).await;
        }
        let trust = match checkpoint.run {
            0 => Trust::Any,
            run => Trust::Run {
                route_id: spec.route_id,
                run,
            },
        };
        let target = checkpoint.target_partition;
        let copied = self.scan(target, checkpoint.scan_from, trust).await?;
        let next = committed
            .offset
            .max(copied.map_or(i64::MIN, |o| o.saturating_add(1)));
        tracing::info!(route = %spec.name, partition = spec.partition, committed = committed.offset,
            next, "route runner recovered");
        Ok(next)
    }

    /// No progress committed: resume past the copies of this route id anywhere in the
    /// target (a scan of the whole target partition; none for a new route).
    async fn recover_without_progress(&self) -> Result<i64, RouteError> {
        let spec = self.spec;
        if self.in_doubt {
            tokio::time::sleep(HANDOVER_GRACE).await;
        }
        let target = spec.target_partition();
        let start = self.admin.list_offset(&spec.to, target, -2).await?;
        let trust = Trust::Route {
            route_id: spec.route_id,
        };
        if let Some(copied) = self.scan(target, start, trust).await? {
            tracing::warn!(route = %spec.name, partition = spec.partition, copied,
                "route progress missing; resuming past the copies found in the target");
            return Ok(copied.saturating_add(1));
        }
        Ok(self
            .admin
            .list_offset(&spec.from, spec.partition, -2)
            .await?)
    }

    /// The highest source offset copied into `target` from `scan_from` on that `trust`
    /// accepts and that is below the source's high watermark.
    async fn scan(
        &self,
        target: u32,
        scan_from: i64,
        trust: Trust,
    ) -> Result<Option<i64>, RouteError> {
        let spec = self.spec;
        let end = self.target_end(target, true).await?;
        let source_end = self
            .admin
            .list_offset(&spec.from, spec.partition, -1)
            .await?;
        let wanted = ScanFor {
            name: &spec.name,
            source_partition: spec.partition,
            trust,
            source_end,
        };
        scan_copies(
            self.client.clone(),
            &spec.to,
            target,
            (scan_from, end),
            wanted,
        )
        .await
    }

    /// The target partition's high watermark: every copy landing from now on is at or
    /// above it, whatever leader the target has next.
    async fn target_high_watermark(&self, partition: u32) -> Result<i64, RouteError> {
        let described = self.admin.describe_topic(&self.spec.to).await?;
        let p = described
            .partitions
            .get(partition as usize)
            .ok_or(RouteError::TargetGone(partition))?;
        if p.high_watermark < 0 {
            return Err(RouteError::TargetUnsettled(partition));
        }
        Ok(p.high_watermark)
    }

    /// The target partition's log end; with `settled`, once its high watermark has reached
    /// that end, so every copy written before now is readable.
    async fn target_end(&self, partition: u32, settled: bool) -> Result<i64, RouteError> {
        let deadline = Instant::now() + SETTLE_WAIT;
        loop {
            let described = self.admin.describe_topic(&self.spec.to).await?;
            let p = described
                .partitions
                .get(partition as usize)
                .ok_or(RouteError::TargetGone(partition))?;
            if p.log_end_offset >= 0 && (!settled || p.high_watermark >= p.log_end_offset) {
                return Ok(p.log_end_offset);
            }
            if Instant::now() >= deadline {
                return Err(RouteError::TargetUnsettled(partition));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn commit(&self, next: i64, checkpoint: Checkpoint) -> Result<(), RouteError> {
        let offset = m::CommittedOffset {
            topic: self.spec.from.clone(),
            partition: self.spec.partition,
            offset: next,
            metadata: checkpoint.to_metadata(),
            error: None,
        };
        Ok(self
            .admin
            .commit_offsets_with_metadata(&self.group, vec![offset])
            .await?)
    }

    fn consumer(&self) -> Result<Consumer, RouteError> {
        let mut config = ConsumerConfig::new("");
        config.client = self.client.clone();
        config.start_from = StartFrom::Earliest;
        config.auto_commit_interval = None;
        config.max_poll_records = COPIES_PER_ROUND_MAX;
        config.max_bytes = FETCH_BYTES_MAX;
        config.partition_bytes_max = FETCH_BYTES_MAX;
        Ok(Consumer::new(config)?)
    }
}

/// The copy of `record`: its key, value, timestamp and headers, then the origin headers.
fn copy_of(record: &ConsumerRecord, spec: &RunnerSpec, run: u64, target: u32) -> ProducerRecord {
    let mut headers = record.headers.clone();
    headers.extend(
        origin_headers(
            (&spec.name, spec.route_id, run),
            spec.partition,
            record.offset,
        )
        .map(|(k, v)| (k, Some(Bytes::from(v)))),
    );
    ProducerRecord {
        key: record.key.clone(),
        value: record.value.clone(),
        headers,
        partition: Some(target),
        timestamp_ms: Some(record.timestamp_ms),
    }
}
