//! The consuming side: `consume` reads a filled topic as fast as it can; `e2e` runs producers
//! and consumers together and times each message from its send time to its receipt.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tinymq_client::{Admin, Consumer, ConsumerConfig, StartFrom};

use crate::produce::run_producers;
use crate::{new_histogram, now_ns, BenchConfig, BenchError, BenchResult, Limit, Mode, Progress};

/// Consumers give up after this long without a new message.
const STALL_LIMIT: Duration = Duration::from_secs(15);
const POLL_WAIT: Duration = Duration::from_millis(100);

struct ConsumerOutcome {
    received: u64,
    /// With a filter: source records this consumer's positions moved past.
    scanned: u64,
    last_receive: Option<Instant>,
    latency: Histogram<u64>,
}

/// Consumer `index` of `count` takes every partition `p` with `p % count == index`.
async fn assigned_consumer(
    config: &BenchConfig,
    partitions: u32,
    index: usize,
    start_from: StartFrom,
) -> Result<Option<Consumer>, BenchError> {
    let mine: Vec<u32> = (0..partitions)
        .filter(|p| *p as usize % config.consumers == index)
        .collect();
    if mine.is_empty() {
        return Ok(None);
    }
    let mut c = ConsumerConfig::new(&config.bootstrap);
    c.client = config.client_config();
    c.start_from = start_from;
    c.max_wait = POLL_WAIT;
    // Counting a record is all the processing here: take each fetch whole.
    c.max_poll_records = usize::MAX;
    c.filter = config.filter.clone();
    c.isolation = config.isolation;
    let mut consumer = Consumer::new(c)?;
    consumer.assign(&config.topic, Some(mine)).await?;
    // Resolves the start positions now, before any producer starts.
    consumer.resolve_positions().await?;
    Ok(Some(consumer))
}

/// Polls until the shared count reaches `target` (which may be raised later), or a stall.
/// With a filter the count is of source records scanned (the positions' progress), since
/// only matching ones arrive.
async fn consume_until(
    mut consumer: Consumer,
    target: Arc<AtomicU64>,
    progress: Arc<Progress>,
    e2e: bool,
) -> ConsumerOutcome {
    let filtered = progress_counts_scan(&consumer);
    let mut out = ConsumerOutcome {
        received: 0,
        scanned: 0,
        last_receive: None,
        latency: new_histogram(),
    };
    let starts: Vec<((String, u32), Option<i64>)> = consumer
        .assignment()
        .into_iter()
        .map(|(t, p)| {
            let start = consumer.position(&t, p);
            ((t, p), start)
        })
        .collect();
    let counted = |p: &Progress| {
        if filtered {
            p.scanned.load(Ordering::Relaxed)
        } else {
            p.received.load(Ordering::Relaxed)
        }
    };
    let mut last_new = Instant::now();
    while counted(&progress) < target.load(Ordering::Relaxed) && last_new.elapsed() < STALL_LIMIT {
        let records = match consumer.poll(POLL_WAIT).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "poll failed");
                tokio::time::sleep(POLL_WAIT).await;
                continue;
            }
        };
        let now = Instant::now();
        if filtered {
            let scanned = scanned_since(&consumer, &starts);
            if scanned > out.scanned {
                progress
                    .scanned
                    .fetch_add(scanned - out.scanned, Ordering::Relaxed);
                out.scanned = scanned;
                last_new = now;
                out.last_receive = Some(now);
            }
        }
        if records.is_empty() {
            continue;
        }
        let now_wall = now_ns();
        last_new = now;
        out.last_receive = Some(now);
        for r in &records {
            if e2e {
                if let Some(sent) = r.value.as_ref().and_then(|v| v.get(..8)) {
                    let sent_ns = u64::from_be_bytes(sent.try_into().expect("8 bytes"));
                    out.latency
                        .saturating_record((now_wall.saturating_sub(sent_ns) / 1000).max(1));
                }
            }
        }
        out.received += records.len() as u64;
        progress
            .received
            .fetch_add(records.len() as u64, Ordering::Relaxed);
    }
    out
}

/// Whether a consumer's progress is counted in records scanned (it fetches with a filter).
fn progress_counts_scan(consumer: &Consumer) -> bool {
    consumer.filter().is_some()
}

/// Source records the positions moved past since `starts` (positions when consuming began).
fn scanned_since(consumer: &Consumer, starts: &[((String, u32), Option<i64>)]) -> u64 {
    starts
        .iter()
        .filter_map(|((topic, partition), start)| {
            let now = consumer.position(topic, *partition)?;
            Some(now.saturating_sub(start.unwrap_or(now)).max(0) as u64)
        })
        .sum()
}

async fn messages_stored(config: &BenchConfig) -> Result<u64, BenchError> {
    let admin = Admin::new(config.client_config())?;
    let d = admin.describe_topic(&config.topic).await?;
    Ok(d.partitions
        .iter()
        .map(|p| (p.high_watermark - p.log_start_offset).max(0) as u64)
        .sum())
}

/// What the consumers of a run got together.
struct Joined {
    received: u64,
    scanned: u64,
    elapsed: Duration,
    latency: Histogram<u64>,
}

fn join_consumers(outcomes: Vec<ConsumerOutcome>, start: Instant) -> Joined {
    let mut joined = Joined {
        received: 0,
        scanned: 0,
        elapsed: Duration::ZERO,
        latency: new_histogram(),
    };
    let mut last = start;
    for o in outcomes {
        joined.received += o.received;
        joined.scanned += o.scanned;
        last = last.max(o.last_receive.unwrap_or(start));
        joined.latency.add(&o.latency).expect("same bounds");
    }
    joined.elapsed = last - start;
    joined
}

/// The run's result from what the consumers got, `want` messages expected: with a filter the
/// scan must have covered them, else the messages received must.
fn finish(
    mode: Mode,
    config: &BenchConfig,
    partitions: u32,
    joined: Joined,
    want: u64,
    failed: u64,
) -> Result<BenchResult, BenchError> {
    let got = match config.filter {
        Some(_) => joined.scanned,
        None => joined.received,
    };
    if got < want {
        return Err(BenchError::Incomplete { got, want });
    }
    let result = BenchResult::new(
        mode,
        config,
        partitions,
        joined.received,
        failed,
        joined.elapsed,
        joined.latency,
    );
    Ok(match &config.filter {
        Some(filter) => result.with_scan(filter, joined.scanned),
        None => result,
    })
}

async fn spawn_consumers(
    config: &BenchConfig,
    partitions: u32,
    start_from: StartFrom,
    target: Arc<AtomicU64>,
    progress: Arc<Progress>,
    e2e: bool,
) -> Result<Vec<tokio::task::JoinHandle<ConsumerOutcome>>, BenchError> {
    let mut tasks = Vec::new();
    for index in 0..config.consumers {
        if let Some(consumer) = assigned_consumer(config, partitions, index, start_from).await? {
            tasks.push(tokio::spawn(consume_until(
                consumer,
                target.clone(),
                progress.clone(),
                e2e,
            )));
        }
    }
    Ok(tasks)
}

async fn gather(
    tasks: Vec<tokio::task::JoinHandle<ConsumerOutcome>>,
) -> Result<Vec<ConsumerOutcome>, BenchError> {
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(t.await.map_err(|e| BenchError::Config(e.to_string()))?);
    }
    Ok(outcomes)
}

pub(crate) async fn run_consume(
    config: &BenchConfig,
    partitions: u32,
    progress: Arc<Progress>,
) -> Result<BenchResult, BenchError> {
    let Limit::Count(count) = config.limit else {
        unreachable!("validated")
    };
    let stored = messages_stored(config).await?;
    if stored < count {
        // Fill the topic first; this part is not measured.
        let mut fill = config.clone();
        fill.limit = Limit::Count(count - stored);
        fill.rate = None;
        let filled = run_producers(&fill, Arc::new(Progress::default()), false).await?;
        if filled.failed > 0 {
            return Err(BenchError::Incomplete {
                got: stored + filled.messages,
                want: count,
            });
        }
    }
    let target = Arc::new(AtomicU64::new(count));
    let start = Instant::now();
    let tasks = spawn_consumers(
        config,
        partitions,
        StartFrom::Earliest,
        target,
        progress.clone(),
        false,
    )
    .await?;
    let joined = join_consumers(gather(tasks).await?, start);
    finish(Mode::Consume, config, partitions, joined, count, 0)
}

pub(crate) async fn run_e2e(
    config: &BenchConfig,
    partitions: u32,
    progress: Arc<Progress>,
) -> Result<BenchResult, BenchError> {
    let target = Arc::new(AtomicU64::new(u64::MAX));
    let consumers = spawn_consumers(
        config,
        partitions,
        StartFrom::Latest,
        target.clone(),
        progress.clone(),
        true,
    )
    .await?;
    let start = Instant::now();
    let produced = run_producers(config, progress.clone(), true).await?;
    // Now the consumers know how many to expect.
    target.store(produced.messages, Ordering::SeqCst);
    let joined = join_consumers(gather(consumers).await?, start);
    finish(
        Mode::E2e,
        config,
        partitions,
        joined,
        produced.messages,
        produced.failed,
    )
}
