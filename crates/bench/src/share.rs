//! `tinymq bench consume --share-group G`: `consumers` members of one share group accepting
//! every record, reporting accepted records per second.
//!
//! The topic is filled first if it holds fewer than `--messages` records (not measured). Each
//! member polls, accepts everything it is handed (the accepts ride on its next fetch) and
//! counts it; the run ends once the members together accepted `--messages` records, and the
//! clock stops after each member's last accepts were answered by the leaders. A share group
//! starts at the earliest offset the first time it fetches: use a fresh group name per run.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tinymq_client::share::{AckKind, ShareConsumer, ShareConsumerConfig};
use tinymq_client::Admin;

use crate::produce::run_producers;
use crate::{new_histogram, BenchConfig, BenchError, BenchResult, Limit, Mode, Progress};

/// Members give up after this long without a new record.
const STALL_LIMIT: Duration = Duration::from_secs(15);
const POLL_WAIT: Duration = Duration::from_millis(100);
/// Records acquired per partition per fetch: about what a regular consumer's 1 MiB
/// partition fetch holds of 1 KiB records.
const MAX_RECORDS: u32 = 1000;

struct MemberOutcome {
    accepted: u64,
    finished: Instant,
}

async fn records_stored(config: &BenchConfig) -> Result<u64, BenchError> {
    let admin = Admin::new(config.client_config())?;
    let d = admin.describe_topic(&config.topic).await?;
    Ok(d.partitions
        .iter()
        .map(|p| (p.high_watermark - p.log_start_offset).max(0) as u64)
        .sum())
}

/// One member: polls and accepts until the members together accepted `target`, or a stall.
async fn member(
    mut consumer: ShareConsumer,
    target: u64,
    progress: Arc<Progress>,
) -> Result<MemberOutcome, BenchError> {
    let mut accepted = 0u64;
    let mut last_new = Instant::now();
    while progress.received.load(Ordering::Relaxed) < target && last_new.elapsed() < STALL_LIMIT {
        let records = match consumer.poll(POLL_WAIT).await {
            Ok(records) => records,
            Err(e) => {
                tracing::warn!(error = %e, "share poll failed");
                tokio::time::sleep(POLL_WAIT).await;
                continue;
            }
        };
        if records.is_empty() {
            continue;
        }
        last_new = Instant::now();
        for record in &records {
            consumer.acknowledge(record, AckKind::Accept)?;
        }
        accepted += records.len() as u64;
        progress
            .received
            .fetch_add(records.len() as u64, Ordering::Relaxed);
    }
    // Accepts not applied (a lock that expired) do not count.
    let failed: u64 = consumer
        .close()
        .await?
        .iter()
        .map(|f| f.range.offset_count())
        .sum();
    Ok(MemberOutcome {
        accepted: accepted.saturating_sub(failed),
        finished: Instant::now(),
    })
}

pub(crate) async fn run_share_consume(
    config: &BenchConfig,
    partitions: u32,
    progress: Arc<Progress>,
) -> Result<BenchResult, BenchError> {
    let (Limit::Count(count), Some(group)) = (&config.limit, &config.share_group) else {
        return Err(BenchError::Config(
            "a share-group consume bench needs --messages and --share-group".into(),
        ));
    };
    let count = *count;
    let stored = records_stored(config).await?;
    if stored < count {
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
    let mut members = Vec::new();
    for _ in 0..config.consumers {
        let mut c = ShareConsumerConfig::new(&config.bootstrap, group);
        c.client = config.client_config();
        c.max_wait = POLL_WAIT;
        c.max_records = MAX_RECORDS;
        c.max_bytes = 16 << 20;
        c.filter = config.filter.clone();
        let mut consumer = ShareConsumer::new(c)?;
        consumer.subscribe(&[&config.topic]).await?;
        members.push(consumer);
    }
    let start = Instant::now();
    let tasks: Vec<_> = members
        .into_iter()
        .map(|m| tokio::spawn(member(m, count, progress.clone())))
        .collect();
    let mut accepted = 0u64;
    let mut last = start;
    for task in tasks {
        let outcome = task
            .await
            .map_err(|e| BenchError::Config(e.to_string()))??;
        accepted += outcome.accepted;
        last = last.max(outcome.finished);
    }
    if accepted < count {
        return Err(BenchError::Incomplete {
            got: accepted,
            want: count,
        });
    }
    Ok(BenchResult::new(
        Mode::Consume,
        config,
        partitions,
        accepted,
        0,
        last - start,
        new_histogram(),
    ))
}
