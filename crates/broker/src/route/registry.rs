//! The route runners of this broker as data ([`Routes`]: which runner runs for which route and
//! source partition, with its progress) and what a runner is given ([`RunnerSpec`]). Starting
//! one is `runner::run`, chosen by `super::run`; this module is below the broker's state
//! (the state holds the registry).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64};
use std::sync::Arc;

use parking_lot::Mutex;
use tinymq_client::ClientError;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// What a runner runs for: one source partition of one route, under one leader epoch and
/// one target partition count (a change of either starts a new runner).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerSpec {
    pub name: String,
    pub route_id: u64,
    pub from: String,
    pub to: String,
    pub filter: String,
    pub partition: u32,
    pub leader_epoch: u32,
    pub target_partitions: u32,
}

impl RunnerSpec {
    /// Source partition p goes to target partition p % target partitions (order kept).
    pub fn target_partition(&self) -> u32 {
        self.partition % self.target_partitions.max(1)
    }
}

/// What ListRoutes reports of a runner.
#[derive(Debug)]
pub struct RunnerStats {
    /// The next source offset to read; -1 until recovered.
    pub next_offset: AtomicI64,
    /// Copies acknowledged since the runner started.
    pub copied: AtomicU64,
}

impl Default for RunnerStats {
    fn default() -> RunnerStats {
        RunnerStats {
            next_offset: AtomicI64::new(-1),
            copied: AtomicU64::new(0),
        }
    }
}

/// Why a runner stopped short (it backs off and recovers).
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    #[error(transparent)]
    Client(#[from] ClientError),
    /// A copy failed for good (after the producer's retries): the route stalls at it.
    #[error("a copy failed: {0}")]
    Delivery(ClientError),
    #[error("the stored filter no longer parses: {0}")]
    Filter(String),
    #[error("the target has no partition {0}")]
    TargetGone(u32),
    #[error("target partition {0}: its leader is unreachable, or its high watermark did not reach its log end in time")]
    TargetUnsettled(u32),
}

/// A runner by route name and source partition.
pub(super) type RunnerKey = (String, u32);

struct Runner {
    spec: RunnerSpec,
    stats: Arc<RunnerStats>,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

/// The route runners of this broker: at most one per (route, source partition led here),
/// so at most `ROUTES_MAX` times the partitions this broker leads.
#[derive(Default)]
pub struct Routes {
    runners: Mutex<HashMap<RunnerKey, Runner>>,
    /// Tasks of stopped runners still finishing (closing their producers), by key, for a
    /// successor of the same key to wait for.
    stopping: Mutex<HashMap<RunnerKey, JoinHandle<()>>>,
}

impl std::fmt::Debug for Routes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Routes")
            .field("runners", &self.runners.lock().len())
            .finish()
    }
}

impl Routes {
    /// The progress of a runner here: (next source offset, copies), if one runs for the
    /// route's partition and has recovered.
    pub(crate) fn progress(
        &self,
        route: &str,
        route_id: u64,
        partition: u32,
    ) -> Option<(i64, u64)> {
        let runners = self.runners.lock();
        let runner = runners.get(&(route.to_string(), partition))?;
        if runner.spec.route_id != route_id {
            return None;
        }
        let next = runner
            .stats
            .next_offset
            .load(std::sync::atomic::Ordering::Relaxed);
        let copied = runner
            .stats
            .copied
            .load(std::sync::atomic::Ordering::Relaxed);
        (next >= 0).then_some((next, copied))
    }

    /// Starts, replaces and stops runners so that exactly `wanted` run. A runner replacing
    /// one of the same key (a new leader epoch, a grown target, leadership back here) first
    /// waits for the stopped one to finish, so two runners of a partition never copy at once.
    ///
    /// `start` spawns a runner's task: `(spec, stats, stop, previous)`.
    pub(super) fn reconcile(
        &self,
        wanted: HashMap<RunnerKey, RunnerSpec>,
        start: impl Fn(
            RunnerSpec,
            Arc<RunnerStats>,
            CancellationToken,
            Option<JoinHandle<()>>,
        ) -> JoinHandle<()>,
    ) {
        let mut runners = self.runners.lock();
        let mut stopping = self.stopping.lock();
        stopping.retain(|_, task| !task.is_finished());
        runners.retain(|key, runner| {
            if wanted.get(key) == Some(&runner.spec) {
                return true;
            }
            runner.stop.cancel();
            if let Some(task) = runner.task.take() {
                stopping.insert(key.clone(), task);
            }
            false
        });
        for (key, spec) in wanted {
            if runners.contains_key(&key) {
                continue;
            }
            let previous = stopping.remove(&key);
            let stats = Arc::new(RunnerStats::default());
            let stop = CancellationToken::new();
            tracing::info!(route = %spec.name, partition = spec.partition, "route runner starting");
            let task = start(spec.clone(), stats.clone(), stop.clone(), previous);
            let runner = Runner {
                spec,
                stats,
                stop,
                task: Some(task),
            };
            runners.insert(key, runner);
        }
    }

    pub(super) fn stop_all(&self) {
        for (_, runner) in self.runners.lock().drain() {
            runner.stop.cancel();
        }
    }
}
