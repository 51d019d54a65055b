//! The log cleaner's task: every `cleaner_check_interval` it looks at each open partition
//! whose topic compacts, asks its log how much waits for cleaning (below the high watermark
//! and the last stable offset, so nothing a consumer cannot yet read, and no open
//! transaction, is touched), and runs a pass ([`tinymq_log::PartitionLog::clean`]) over those
//! due by their settings, dirtiest first, one at a time on a blocking thread. Leaders and
//! followers clean their own copies alike.
//!
//! Bounded: one pass at a time per broker, its key map within `cleaner_key_map_bytes_max`,
//! its reads and writes within `cleaner_io_bytes_per_sec_max`. Counted in [`CleanerStats`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::partition::{now_ms, Partition};
use crate::state::BrokerState;

/// The smallest `cleaner_key_map_bytes_max`.
pub use tinymq_log::KEY_MAP_BYTES_MIN;

pub use crate::config::{CLEANER_CHECK_INTERVAL_DEFAULT, CLEANER_IO_BYTES_PER_SEC_MAX_DEFAULT};

/// What the cleaner has done in this process, and what waits for it.
#[derive(Debug)]
pub struct CleanerStats {
    pub passes: AtomicU64,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    pub records_removed: AtomicU64,
    pub failures: AtomicU64,
    /// At the last check: bytes of compacted logs not cleaned yet, over all partitions...
    pub dirty_bytes: AtomicU64,
    /// ... and the largest dirty ratio, in millionths.
    pub dirty_ratio_max_millionths: AtomicU64,
}

static STATS: CleanerStats = CleanerStats {
    passes: AtomicU64::new(0),
    bytes_read: AtomicU64::new(0),
    bytes_written: AtomicU64::new(0),
    records_removed: AtomicU64::new(0),
    failures: AtomicU64::new(0),
    dirty_bytes: AtomicU64::new(0),
    dirty_ratio_max_millionths: AtomicU64::new(0),
};

/// This process's cleaner figures.
pub fn stats() -> &'static CleanerStats {
    &STATS
}

/// Runs the cleaner until shutdown.
pub(crate) async fn run(state: Arc<BrokerState>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(state.config.cleaner_check_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        let (state, stop) = (state.clone(), shutdown.clone());
        let _ = tokio::task::spawn_blocking(move || clean_due(&state, &stop)).await;
    }
}

/// The first offset the cleaner must leave alone: what consumers cannot read yet, and the
/// first offset of the oldest open transaction.
fn cleanable_bound(p: &Partition) -> i64 {
    p.high_watermark().min(p.last_stable_offset())
}

/// One check: every compacted partition measured, the due ones cleaned.
fn clean_due(state: &BrokerState, stop: &CancellationToken) {
    let now = now_ms();
    let (mut dirty_bytes, mut ratio_max) = (0u64, 0f64);
    let mut due = Vec::new();
    for p in state.all_partitions() {
        let Some(c) = p.log.cleanable(now, cleanable_bound(&p)) else {
            continue;
        };
        dirty_bytes += c.dirty_bytes;
        ratio_max = ratio_max.max(c.dirty_ratio);
        if c.due(p.log.config().compaction.dirty_ratio_min) {
            due.push((c.overdue, c.dirty_ratio, p));
        }
    }
    STATS.dirty_bytes.store(dirty_bytes, Ordering::Relaxed);
    STATS
        .dirty_ratio_max_millionths
        .store((ratio_max * 1e6) as u64, Ordering::Relaxed);
    due.sort_by(|a, b| {
        (b.0, b.1)
            .partial_cmp(&(a.0, a.1))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let mut rate = RateLimit::new(state.config.cleaner_io_bytes_per_sec_max);
    for (_, _, p) in due {
        if stop.is_cancelled() {
            return;
        }
        let started = Instant::now();
        // Each live producer's last batch stays (Kafka's rule). The table is read after the
        // bound: a batch is recorded in it before the high watermark passes it (on leaders
        // under the producers' lock with its write, on followers before the watermark moves),
        // so every batch below the bound is in the table as read here.
        let bound = cleanable_bound(&p);
        let limits = tinymq_log::CleanLimits {
            key_map_bytes_max: state.config.cleaner_key_map_bytes_max,
            retained_batch_ends: p.producers.lock().last_batch_ends(),
        };
        match p
            .log
            .clean(now_ms(), bound, &limits, &mut |bytes| rate.take(bytes))
        {
            Ok(report) => {
                STATS.passes.fetch_add(1, Ordering::Relaxed);
                STATS
                    .bytes_read
                    .fetch_add(report.bytes_read, Ordering::Relaxed);
                STATS
                    .bytes_written
                    .fetch_add(report.bytes_written, Ordering::Relaxed);
                STATS
                    .records_removed
                    .fetch_add(report.records_removed, Ordering::Relaxed);
                tracing::debug!(topic = %p.topic, partition = p.index, ?report,
                    elapsed_ms = started.elapsed().as_millis() as u64, "log cleaned");
            }
            Err(e) => {
                STATS.failures.fetch_add(1, Ordering::Relaxed);
                tracing::error!(topic = %p.topic, partition = p.index, error = %e, "log cleaning failed");
            }
        }
    }
}

/// Paces the cleaner's I/O: after `take(n)`, the bytes taken since it started never run
/// ahead of `bytes_per_sec` by more than a tenth of a second's worth.
struct RateLimit {
    bytes_per_sec: u64,
    started: Instant,
    taken: u64,
}

impl RateLimit {
    fn new(bytes_per_sec: u64) -> RateLimit {
        RateLimit {
            bytes_per_sec,
            started: Instant::now(),
            taken: 0,
        }
    }

    fn take(&mut self, bytes: u64) {
        self.taken = self.taken.saturating_add(bytes);
        if let Some(pause) = self.pause(self.started.elapsed()) {
            std::thread::sleep(pause);
        }
    }

    /// How long to wait, `elapsed` after the start, so as not to run ahead of the rate.
    fn pause(&self, elapsed: Duration) -> Option<Duration> {
        if self.bytes_per_sec == 0 {
            return None;
        }
        let due = Duration::from_secs_f64(self.taken as f64 / self.bytes_per_sec as f64);
        (due > elapsed + Duration::from_millis(100)).then(|| due - elapsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_limit_pauses_for_what_runs_ahead_of_the_rate() {
        let mut rate = RateLimit::new(10 << 20);
        rate.taken = 30 << 20;
        // 30 MiB at 10 MiB/s are due at 3 s.
        assert_eq!(
            rate.pause(Duration::from_secs(1)),
            Some(Duration::from_secs(2))
        );
        assert_eq!(rate.pause(Duration::from_millis(2_950)), None);
        let mut unlimited = RateLimit::new(0);
        unlimited.taken = u64::MAX;
        assert_eq!(unlimited.pause(Duration::ZERO), None);
    }
}
