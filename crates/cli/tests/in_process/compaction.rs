//! A compacted topic replicated on three brokers, in one process: every replica's cleaner
//! compacts its own copy (the brokers check every 200 ms), a keyless record is refused, and
//! after the brokers stop each replica's log — opened from its files — holds the latest
//! record of every key, the same bytes at the same offsets as the others wherever both have
//! a record, and far fewer records than were written; a consumer reading the topic from the
//! start ends with the latest value of every key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::node::Cluster;
use tinymq_client::{
    Acks, Admin, ClientConfig, Consumer, ConsumerConfig, Producer, ProducerConfig, ProducerRecord,
    StartFrom, TopicConfig,
};

const TOPIC: &str = "compacted";
const KEYS: usize = 50;
const RECORDS: usize = 4_000;

fn value(i: usize) -> String {
    format!("{i:06}-{}", "v".repeat(1_000))
}

/// Every replica's partition directory under the cluster's data.
fn replica_dirs(data: &Path) -> Vec<PathBuf> {
    (1..=3)
        .map(|id| data.join(format!("broker-{id}")).join(format!("{TOPIC}-0")))
        .collect()
}

/// Whether the cleaner's checkpoint in `dir` says everything before the active segment
/// (the last `.log` file) is cleaned.
fn cleaned_to_active(dir: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(dir.join("cleaner-offset-checkpoint")) else {
        return false;
    };
    // The CRC line, the version, then the first dirty offset.
    let first_dirty: i64 = text
        .lines()
        .nth(2)
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    let active_base = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".log")?
                .parse::<i64>()
                .ok()
        })
        .max()
        .unwrap_or(0);
    active_base > 0 && first_dirty >= active_base
}

/// Records of the log in `dir` as offset → (key, value), crossing gaps as a consumer does.
fn read_log(dir: &Path) -> BTreeMap<i64, (String, String)> {
    let (log, _) = tinymq_log::PartitionLog::open(dir, tinymq_log::LogConfig::default()).unwrap();
    let mut found = BTreeMap::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let read = log.read(offset, 4 << 20, None).unwrap();
        for batch in tinymq_protocol::batch::BatchIter::new(read.records) {
            let batch = batch.unwrap();
            for r in batch.records(1 << 24).unwrap() {
                let text =
                    |b: Option<bytes::Bytes>| String::from_utf8(b.unwrap().to_vec()).unwrap();
                found.insert(r.offset, (text(r.key), text(r.value)));
            }
            offset = batch.next_offset();
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_replica_compacts_its_copy_and_keeps_the_latest_record_of_each_key() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cluster = tokio::task::block_in_place(|| {
        Cluster::start_tuned(tmp.path(), 1, 3, |b| {
            b.cleaner_check_interval = Duration::from_millis(200);
        })
    });
    let bootstrap = cluster.bootstrap();
    let admin = Admin::new(ClientConfig::new(&bootstrap)).unwrap();
    let topic = TopicConfig {
        partitions: 1,
        replication_factor: 3,
        segment_bytes: 1 << 20,
        cleanup_policy: "compact".into(),
        min_cleanable_dirty_ratio: Some(0.01),
        ..TopicConfig::default()
    };
    admin.create_topic(TOPIC, topic).await.unwrap();
    let mut config = ProducerConfig::new(&bootstrap);
    config.acks = Acks::All;
    let producer = Producer::new(config).unwrap();
    let keyless = producer.send(TOPIC, ProducerRecord::value("no key")).await;
    let keyless = match keyless {
        Ok(delivery) => delivery.await.map(drop),
        Err(e) => Err(e),
    };
    let why = keyless.expect_err("a compacted topic refuses a record without a key");
    assert!(why.to_string().contains("key"), "{why}");
    let mut latest = BTreeMap::new();
    let mut deliveries = Vec::new();
    for i in 0..RECORDS {
        let key = format!("key-{:02}", i % KEYS);
        latest.insert(key.clone(), value(i));
        let record = ProducerRecord::value(value(i)).with_key(key);
        deliveries.push(producer.send(TOPIC, record).await.expect("queued"));
    }
    for d in deliveries {
        d.await.expect("acknowledged");
    }
    // Every replica has cleaned up to its active segment.
    let dirs = replica_dirs(tmp.path());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !dirs.iter().all(|d| cleaned_to_active(d)) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "every replica cleans"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A consumer from the start ends with the latest value of every key.
    let mut config = ConsumerConfig::new(&bootstrap);
    config.start_from = StartFrom::Earliest;
    let mut consumer = Consumer::new(config).unwrap();
    consumer.assign(TOPIC, None).await.unwrap();
    let (mut seen, mut position) = (BTreeMap::new(), 0i64);
    while position < RECORDS as i64 {
        for r in consumer.poll(Duration::from_millis(500)).await.unwrap() {
            assert!(r.offset >= position, "offsets only grow");
            position = r.offset + 1;
            let key = String::from_utf8(r.key.unwrap().to_vec()).unwrap();
            seen.insert(key, String::from_utf8(r.value.unwrap().to_vec()).unwrap());
        }
    }
    assert_eq!(seen, latest, "the latest value of every key");
    drop(consumer);
    drop(producer);

    tokio::task::block_in_place(|| cluster.brokers.iter_mut().for_each(|b| b.stop()));
    let logs: Vec<_> = dirs.iter().map(|d| read_log(d)).collect();
    for (i, log) in logs.iter().enumerate() {
        let mut last: BTreeMap<&str, &str> = BTreeMap::new();
        for (key, value) in log.values() {
            last.insert(key, value);
        }
        let last: BTreeMap<String, String> = last
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(last, latest, "replica {i}: the latest record of every key");
        // Each key once before the active segment, which holds at most about 1,000.
        assert!(
            log.len() < RECORDS / 3,
            "replica {i} compacted: {} records left",
            log.len()
        );
        for other in &logs {
            for (offset, record) in log {
                if let Some(theirs) = other.get(offset) {
                    assert_eq!(record, theirs, "the same record at offset {offset}");
                }
            }
        }
    }
}
