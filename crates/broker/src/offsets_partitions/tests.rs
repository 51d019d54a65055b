use std::collections::BTreeMap;
use std::path::Path;

use tinymq_log::{FlushPolicy, LogConfig, PartitionLog};
use tinymq_meta::link::MetaLink;
use tinymq_meta::{BrokerRecord, MetadataImage, PartitionRecord, TopicRecord};

use super::*;
use crate::cluster::ClusterView;
use crate::config::BrokerConfig;
use crate::group::offsets::{encode_batch, Committed};

/// An image with brokers 1 and 2 and the offsets topic, every partition led by `leader` in
/// `leader_epoch` with one replica.
fn image(leader: u32, leader_epoch: u32) -> MetadataImage {
    let mut image = MetadataImage {
        cluster_id: "tmq-test".into(),
        ..MetadataImage::default()
    };
    for id in [1, 2] {
        let broker = BrokerRecord {
            id,
            host: "127.0.0.1".into(),
            port: 9000 + id as u16,
            epoch: 1,
            fenced: false,
            kafka: None,
        };
        image.brokers.insert(id, broker);
    }
    let partition = PartitionRecord {
        replicas: vec![leader],
        leader: Some(leader),
        leader_epoch,
        isr: vec![leader],
        ..PartitionRecord::default()
    };
    let topic = TopicRecord {
        id: 3,
        partitions: vec![partition; OFFSETS_PARTITIONS as usize],
        config: BTreeMap::new(),
    };
    image.topics.insert(OFFSETS_TOPIC.into(), topic);
    image
}

/// Broker 1's state over `data_dir`, with `image`.
fn broker_one(data_dir: &Path, image: MetadataImage) -> Arc<BrokerState> {
    let cluster = ClusterView::new(1, MetaLink::remote(vec![], 1));
    cluster.offer(1, image);
    // As if heartbeats were answered: no MetaServer runs in these tests.
    cluster.assume_session_current();
    let config = BrokerConfig {
        data_dir: data_dir.to_path_buf(),
        ..BrokerConfig::default()
    };
    let addr = config.listen;
    Arc::new(BrokerState::new(config, addr.into(), Arc::new(cluster)).unwrap())
}

/// A group whose offsets live in partition `index`.
fn group_on(index: u32) -> String {
    (0..)
        .map(|i| format!("group-{i}"))
        .find(|g| partition_for_group(g) == index)
        .unwrap()
}

/// Reconciles with `image` and syncs the coordinated groups, as the image watch does.
async fn apply_image(state: &Arc<BrokerState>, image: MetadataImage, version: u64) {
    state.cluster.offer(version, image.clone());
    let s = state.clone();
    tokio::task::spawn_blocking(move || s.reconcile(&image))
        .await
        .unwrap();
    sync(state);
}

async fn await_loaded(state: &BrokerState, group: &str) {
    for _ in 0..500 {
        if state.check_coordinator(group).is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{:?}", state.check_coordinator(group));
}

fn committed(offset: i64) -> Option<Committed> {
    Some(Committed {
        offset,
        metadata: "m".into(),
    })
}

/// Offsets written by the broker before the offsets topic was replicated (its own
/// `PartitionLog` in `<data>/__consumer_offsets-N`, no `topic-id` file, leader epoch 0) are
/// found by the partition opened in their place and loaded when it is led here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_written_before_replication_load_and_new_commits_follow_them() {
    let tmp = tempfile::tempdir().unwrap();
    let group = group_on(2);
    let old_config = LogConfig {
        flush: FlushPolicy::Always,
        segment_bytes: 64 << 20,
        batch_bytes_max: 8 << 20,
        ..LogConfig::default()
    };
    let dir = tmp.path().join(format!("{OFFSETS_TOPIC}-2"));
    let (log, _) = PartitionLog::open(&dir, old_config).unwrap();
    for offset in [5, 8] {
        let changes = [(("t".to_string(), 0), committed(offset))];
        let mut batch = encode_batch(&group, &changes, now_ms()).unwrap().to_vec();
        log.append(&mut batch, 0).unwrap();
    }
    log.close().unwrap();
    drop(log);

    let state = broker_one(tmp.path(), image(1, 1));
    let refused = state.check_coordinator(&group).unwrap_err();
    assert_eq!(
        refused.error_code(),
        ErrorCode::COORDINATOR_LOAD_IN_PROGRESS,
        "led by the image, not loaded yet: {}",
        refused.message
    );
    apply_image(&state, image(1, 1), 2).await;
    await_loaded(&state, &group).await;
    let tp = ("t".to_string(), 0);
    assert_eq!(state.groups.committed(&group)[&tp].offset, 8);

    let changes = vec![(tp.clone(), committed(11))];
    append(&state, &group, changes).await.unwrap();
    assert_eq!(state.groups.committed(&group)[&tp].offset, 11);
    let partition = state.local_partition(OFFSETS_TOPIC, 2).unwrap();
    assert_eq!(
        partition.high_watermark(),
        3,
        "the commit is past the old records"
    );

    // The partition moves to broker 2: the group is dropped here and refused.
    apply_image(&state, image(2, 2), 3).await;
    assert!(state.groups.committed(&group).is_empty());
    let moved = state.check_coordinator(&group).unwrap_err();
    assert_eq!(moved.error_code(), ErrorCode::NOT_COORDINATOR);
    let refused = append(&state, &group, vec![(tp.clone(), committed(12))])
        .await
        .unwrap_err();
    assert_eq!(refused.error_code(), ErrorCode::NOT_COORDINATOR);

    // Back here in a later epoch: loaded again from the log, the new commit included.
    apply_image(&state, image(1, 3), 4).await;
    await_loaded(&state, &group).await;
    assert_eq!(state.groups.committed(&group)[&tp].offset, 11);
}

/// A commit is refused, not written, while fewer replicas than `min_insync_replicas` are in
/// sync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_needs_min_insync_replicas() {
    let tmp = tempfile::tempdir().unwrap();
    let group = group_on(1);
    let mut short = image(1, 1);
    let topic = short.topics.get_mut(OFFSETS_TOPIC).unwrap();
    topic
        .config
        .insert("min_insync_replicas".into(), "2".into());
    for p in &mut topic.partitions {
        p.replicas = vec![1, 2];
    }
    let state = broker_one(tmp.path(), short.clone());
    apply_image(&state, short, 2).await;
    await_loaded(&state, &group).await;
    let refused = append(&state, &group, vec![(("t".into(), 0), committed(1))])
        .await
        .unwrap_err();
    assert_eq!(refused.error_code(), ErrorCode::NOT_ENOUGH_REPLICAS);
    let partition = state.local_partition(OFFSETS_TOPIC, 1).unwrap();
    assert_eq!(partition.log.log_end_offset(), 0, "nothing was written");
}
