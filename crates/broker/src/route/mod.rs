//! Content-based routes on the broker (docs/queues.md, "Routes"): CreateRoute, DeleteRoute and
//! ListRoutes (`admin.rs`; routes live in the metadata image), and the runners that copy each
//! matching record of a source partition led here into the target topic exactly once
//! (`runner.rs`, with their progress and recovery in `progress.rs`). [`run`] starts and stops
//! runners as routes and leaderships change.

mod admin;
mod batches;
mod matcher;
mod progress;
pub(crate) mod registry;
mod runner;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tinymq_meta::MetadataImage;
use tokio_util::sync::CancellationToken;

use crate::state::BrokerState;
pub use admin::{create_route, delete_route, list_routes};
use registry::{RunnerKey, RunnerSpec};

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
        let wanted = wanted_runners(&image, state.node_id());
        state
            .routes
            .reconcile(wanted, |spec, stats, stop, previous| {
                tokio::spawn(runner::run(state.clone(), spec, stats, stop, previous))
            });
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
