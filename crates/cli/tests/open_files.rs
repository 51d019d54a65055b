//! A broker keeps its segment files open through an LRU bounded by `--open-segment-files-max`:
//! with many partitions and several segments each, every record (old segments included) is
//! still read back, and the server never holds more `.log` files open than the limit, nor any
//! index file — before and after a SIGTERM restart and a `kill -9` restart.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::Server;
use tinymq_client::{
    Consumer, ConsumerConfig, Producer, ProducerConfig, ProducerRecord, StartFrom,
};

/// The LRU's limit in this test: far below the segment files the broker holds.
const OPEN_FILES_LIMIT: usize = 6;
const PARTITIONS: u32 = 24;
/// Partitions that get enough data to roll several 1 MiB segments.
const BIG_PARTITIONS: u32 = 3;
/// Files a read or write may still hold after the LRU closed them (one per operation in
/// flight), plus one per partition range of a fetch response still being sent by `sendfile`
/// (only the big partitions' reads are large enough for it); see docs/storage.md, "File
/// handles". Far fewer than the segments.
const IN_FLIGHT_SLACK: usize = 2 + BIG_PARTITIONS as usize;
const BIG_VALUE_BYTES: usize = 16 << 10;
const BIG_VALUES: usize = 200; // 3.2 MiB: four segments

/// (partition, offset) -> value.
type Stored = BTreeMap<(u32, i64), String>;

/// The server's open files whose names end with `suffix`.
fn open_files_ending(server: &Server, suffix: &str) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", server.pid()))
        .expect("fd dir")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().ends_with(suffix))
        .count()
}

fn assert_files_bounded(server: &Server, when: &str) {
    let logs = open_files_ending(server, ".log");
    assert!(
        logs <= OPEN_FILES_LIMIT + IN_FLIGHT_SLACK,
        "{when}: {logs} segment files open, limit {OPEN_FILES_LIMIT}"
    );
    assert_eq!(
        open_files_ending(server, "index"),
        0,
        "{when}: index files open"
    );
}

async fn produce(addr: &str) -> Stored {
    let producer = Producer::new(ProducerConfig::new(addr)).unwrap();
    let mut deliveries = Vec::new();
    let big = "b".repeat(BIG_VALUE_BYTES);
    for partition in 0..PARTITIONS {
        let count = if partition < BIG_PARTITIONS {
            BIG_VALUES
        } else {
            5
        };
        for i in 0..count {
            let value = if partition < BIG_PARTITIONS {
                format!("{partition}-{i}-{big}")
            } else {
                format!("{partition}-{i}")
            };
            let mut record = ProducerRecord::value(value.clone());
            record.partition = Some(partition);
            deliveries.push((value, producer.send("many", record).await.unwrap()));
        }
    }
    let mut stored = BTreeMap::new();
    for (value, delivery) in deliveries {
        let meta = delivery.await.unwrap();
        stored.insert((meta.partition, meta.offset), value);
    }
    stored
}

/// Reads every partition from the start, checking the open files as it goes.
async fn consume_all(server: &Server) -> Stored {
    let mut config = ConsumerConfig::new(&server.addr);
    config.start_from = StartFrom::Earliest;
    let mut consumer = Consumer::new(config).unwrap();
    consumer.assign("many", None).await.unwrap();
    let mut got = BTreeMap::new();
    let mut quiet_polls = 0;
    while quiet_polls < 3 {
        let records = consumer.poll(Duration::from_millis(300)).await.unwrap();
        if records.is_empty() {
            quiet_polls += 1;
        }
        for r in records {
            let value = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
            assert!(got.insert((r.partition, r.offset), value).is_none());
        }
        assert_files_bounded(server, "while reading");
    }
    got
}

fn start(data: &std::path::Path) -> Server {
    let limit = OPEN_FILES_LIMIT.to_string();
    Server::start_with(data, &["--open-segment-files-max", &limit])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_partitions_read_every_segment_with_few_files_open() {
    let tmp = tempfile::tempdir().unwrap();
    let mut server = start(tmp.path());
    let partitions = PARTITIONS.to_string();
    server.run_tool(
        &[
            "topic",
            "create",
            "many",
            "--partitions",
            &partitions,
            "--segment-bytes",
            "1048576",
            "--flush",
            "os",
        ],
        b"",
    );
    let expected = produce(&server.addr).await;
    assert_files_bounded(&server, "after writing");
    let segments = walkdir_logs(tmp.path());
    assert!(
        segments >= PARTITIONS as usize + 3 * BIG_PARTITIONS as usize,
        "several segments per big partition: {segments}"
    );
    assert_eq!(consume_all(&server).await, expected);

    assert!(server.terminate().success());
    let mut server = start(tmp.path());
    assert_files_bounded(&server, "after a clean restart");
    assert_eq!(consume_all(&server).await, expected);

    server.kill9();
    let server = start(tmp.path());
    assert_files_bounded(&server, "after a kill -9 restart");
    assert_eq!(consume_all(&server).await, expected);
}

/// `.log` files under `dir`, at any depth.
fn walkdir_logs(dir: &std::path::Path) -> usize {
    let mut count = 0;
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            count += walkdir_logs(&path);
        } else if path.extension().is_some_and(|e| e == "log") {
            count += 1;
        }
    }
    count
}
