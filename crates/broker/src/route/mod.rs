//! Content-based routes on the broker (docs/queues.md, "Routes"): CreateRoute, DeleteRoute and
//! ListRoutes (`admin.rs`; routes live in the metadata image), and the runners that copy each
//! matching record of a source partition led here into the target topic exactly once
//! (`runner.rs`, with their progress and recovery in `progress.rs`). [`run`] starts and stops
//! runners as routes and leaderships change.

mod admin;
mod batches;
mod matcher;
mod progress;
mod runner;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tinymq_client::ClientError;
use tinymq_meta::MetadataImage;
use tokio_util::sync::CancellationToken;

use crate::state::BrokerState;
pub use admin::{create_route, delete_route, list_routes};
use runner::{RunnerSpec, RunnerStats};

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
type RunnerKey = (String, u32);

struct Runner {
    spec: RunnerSpec,
    stats: Arc<RunnerStats>,
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

/// The route runners of this broker: at most one per (route, source partition led here),
/// so at most `ROUTES_MAX` times the partitions this broker leads.
#[derive(Default)]
pub struct Routes {
    runners: Mutex<HashMap<RunnerKey, Runner>>,
    /// Tasks of stopped runners still finishing (closing their producers), by key, for a
    /// successor of the same key to wait for.
    stopping: Mutex<HashMap<RunnerKey, tokio::task::JoinHandle<()>>>,
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
    fn reconcile(&self, state: &Arc<BrokerState>, wanted: HashMap<RunnerKey, RunnerSpec>) {
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
            let task = tokio::spawn(runner::run(
                state.clone(),
                spec.clone(),
                stats.clone(),
                stop.clone(),
                previous,
            ));
            let runner = Runner {
                spec,
                stats,
                stop,
                task: Some(task),
            };
            runners.insert(key, runner);
        }
    }

    fn stop_all(&self) {
        for (_, runner) in self.runners.lock().drain() {
            runner.stop.cancel();
        }
    }
}

/// The runners this broker should run in `image`: one per route and source partition it
/// leads.
fn wanted_runners(image: &MetadataImage, me: u32) -> HashMap<RunnerKey, RunnerSpec> {
    let mut wanted = HashMap::new();
    for (name, route) in &image.routes {
        let (Some(from), Some(to)) = (image.topics.get(&route.from), image.topics.get(&route.to))
        else {
            continue;
        };
        for (index, p) in from.partitions.iter().enumerate() {
            if p.leader != Some(me) {
                continue;
            }
            let spec = RunnerSpec {
                name: name.clone(),
                route_id: route.id,
                from: route.from.clone(),
                to: route.to.clone(),
                filter: route.filter.clone(),
                partition: index as u32,
                leader_epoch: p.leader_epoch,
                target_partitions: to.partitions.len() as u32,
            };
            wanted.insert((name.clone(), index as u32), spec);
        }
    }
    wanted
}

/// How often runners are checked against the image even without a change.
const RECONCILE_INTERVAL: Duration = Duration::from_secs(1);

/// Starts and stops runners as routes and leaderships change, until `shutdown`.
pub async fn run(state: Arc<BrokerState>, shutdown: CancellationToken) {
    let mut images = state.cluster.subscribe();
    loop {
        let image = state.cluster.image();
        state
            .routes
            .reconcile(&state, wanted_runners(&image, state.node_id()));
        tokio::select! {
            _ = shutdown.cancelled() => break,
            changed = images.changed() => {
                if changed.is_err() {
                    // No more images (the broker is stopping): check on the interval.
                    tokio::time::sleep(RECONCILE_INTERVAL).await;
                }
            }
            _ = tokio::time::sleep(RECONCILE_INTERVAL) => {}
        }
    }
    state.routes.stop_all();
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use tinymq_meta::{execute_and_apply, Command};

    use super::*;

    fn image() -> MetadataImage {
        let mut image = MetadataImage::default();
        for id in [1, 2] {
            let register = Command::RegisterBroker {
                id,
                host: "h".into(),
                port: id as u16,
                clean_shutdown: true,
                kafka: None,
            };
            execute_and_apply(&mut image, &register).unwrap();
        }
        for (name, partitions) in [("a", 4), ("b", 3)] {
            let create = Command::CreateTopic {
                name: name.into(),
                partitions,
                replication_factor: 1,
                config: BTreeMap::new(),
            };
            execute_and_apply(&mut image, &create).unwrap();
        }
        let route = Command::CreateRoute {
            name: "r".into(),
            from: "a".into(),
            to: "b".into(),
            filter: "tag = 'red'".into(),
        };
        execute_and_apply(&mut image, &route).unwrap();
        image
    }

    #[test]
    fn a_broker_runs_one_runner_per_source_partition_it_leads() {
        let image = image();
        let led_by = |me: u32| -> Vec<u32> {
            let mut led: Vec<u32> = wanted_runners(&image, me)
                .into_values()
                .map(|s| s.partition)
                .collect();
            led.sort_unstable();
            led
        };
        let (one, two) = (led_by(1), led_by(2));
        assert_eq!(one.len() + two.len(), 4);
        for p in &one {
            assert_eq!(image.topics["a"].partitions[*p as usize].leader, Some(1));
        }
        let spec = wanted_runners(&image, 1).into_values().next().unwrap();
        assert_eq!(spec.target_partitions, 3);
        assert_eq!(spec.target_partition(), spec.partition % 3);
        assert_eq!(spec.filter, "tag = 'red'");
        assert!(wanted_runners(&image, 3).is_empty());
    }

    #[test]
    fn a_deleted_route_or_topic_wants_no_runner() {
        let mut image = image();
        let delete = Command::DeleteTopic { name: "b".into() };
        execute_and_apply(&mut image, &delete).unwrap();
        assert!(wanted_runners(&image, 1).is_empty() && wanted_runners(&image, 2).is_empty());
    }
}
