//! Transactions end to end on an in-process broker: transactional batches produced over its
//! native port, markers written through [`super::append::write_marker`] (as the transaction
//! coordinator writes them), then fetches and the native consumer under both isolation
//! levels.

use std::time::Duration;

use bytes::Bytes;
use tinymq_client::{Admin, ClientConfig, Connection, Consumer, ConsumerConfig, Isolation};
use tinymq_client::{StartFrom, TopicConfig};
use tinymq_protocol::batch::{
    BatchBuilder, BatchIter, Compression, ProducerStamp, RecordInput, ATTR_TRANSACTIONAL,
};
use tinymq_protocol::{messages as m, ErrorCode};

use super::append::write_marker;
use crate::{Broker, BrokerConfig};

const TOPIC: &str = "txn";
const WAIT: Duration = Duration::from_secs(10);

async fn start(dir: &std::path::Path) -> (Broker, String) {
    let config = BrokerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.to_path_buf(),
        // Longer than the tests wait for anything: a long poll answers early only if woken.
        fetch_wait_max: Duration::from_secs(120),
        ..BrokerConfig::default()
    };
    let broker = Broker::start(config).await.unwrap();
    let addr = broker.local_addr.to_string();
    let admin = Admin::new(ClientConfig::new(&addr)).unwrap();
    let topic = TopicConfig {
        partitions: 1,
        ..TopicConfig::default()
    };
    admin.create_topic(TOPIC, topic).await.unwrap();
    (broker, addr)
}

/// A batch of `values` from `producer` at `sequence`, transactional or not.
fn batch(producer: i64, sequence: i32, transactional: bool, values: &[&str]) -> Bytes {
    let stamp = match producer {
        ..0 => ProducerStamp::NONE,
        _ => ProducerStamp {
            producer_id: producer,
            producer_epoch: 0,
            base_sequence: sequence,
        },
    };
    let attributes = if transactional { ATTR_TRANSACTIONAL } else { 0 };
    let mut builder = BatchBuilder::new(Compression::None, stamp).with_attributes(attributes);
    for v in values {
        builder.push(&RecordInput {
            timestamp_ms: crate::partition::now_ms(),
            key: None,
            value: Some(v.as_bytes()),
            headers: &[],
        });
    }
    builder.build().unwrap()
}

/// Produces `records`; a transactional batch that would open a transaction is first marked
/// verified on the partition, as its coordinator's confirmation would (these tests drive the
/// partition side alone; crates/cli/tests/in_process/transactions.rs the whole protocol).
async fn produce(c: &Connection, state: &crate::state::BrokerState, records: Bytes) -> i64 {
    let header = tinymq_protocol::batch::BatchHeader::new(&records).unwrap();
    if header.is_transactional() {
        let (partition, _) = state.led_partition(TOPIC, 0).unwrap();
        partition
            .txn_verified(header.producer_id(), header.producer_epoch())
            .unwrap();
    }
    let request = m::ProduceRequest {
        acks: -1,
        timeout_ms: 10_000,
        partitions: vec![m::ProducePartition {
            topic: TOPIC.into(),
            partition: 0,
            records,
        }],
        transactional_id: String::new(),
    };
    let answer = c.request(&request, WAIT).await.unwrap();
    let p = &answer.partitions[0];
    assert!(p.error.is_none(), "{:?}", p.error);
    p.base_offset
}

async fn fetch(c: &Connection, isolation_level: u32) -> m::FetchPartitionResult {
    let request = m::FetchRequest {
        max_wait_ms: 0,
        partitions: vec![m::FetchPartition {
            topic: TOPIC.into(),
            partition: 0,
            offset: 0,
            ..Default::default()
        }],
        isolation_level,
        ..Default::default()
    };
    let mut answer = c.request(&request, WAIT).await.unwrap();
    answer.partitions.remove(0)
}

/// The values of every record of `records`' non-control batches.
fn values(records: &Bytes) -> Vec<String> {
    BatchIter::new(records.clone())
        .map(|b| b.unwrap())
        .filter(|b| !b.is_control())
        .flat_map(|b| b.records(1 << 20).unwrap())
        .map(|r| String::from_utf8(r.value.unwrap().to_vec()).unwrap())
        .collect()
}

/// Polls a consumer of the whole partition until its position reaches `end`.
async fn consume(addr: &str, isolation: Isolation, end: i64) -> Vec<String> {
    let mut config = ConsumerConfig::new(addr);
    config.start_from = StartFrom::Earliest;
    config.isolation = isolation;
    let mut consumer = Consumer::new(config).unwrap();
    consumer.assign(TOPIC, Some(vec![0])).await.unwrap();
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    while consumer.position(TOPIC, 0).is_none_or(|p| p < end) {
        assert!(tokio::time::Instant::now() < deadline, "consumed {got:?}");
        for r in consumer.poll(Duration::from_millis(100)).await.unwrap() {
            got.push(String::from_utf8(r.value.unwrap().to_vec()).unwrap());
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_stops_at_open_transactions_and_drops_aborted_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let (broker, addr) = start(tmp.path()).await;
    let state = broker.state().clone();
    let c = Connection::connect(&addr, "test", "").await.unwrap();
    let (p1, p2) = (
        state.cluster.allocate_producer_id().await.unwrap(),
        state.cluster.allocate_producer_id().await.unwrap(),
    );
    // 0-1 p1 (to commit), 2 plain, 3-4 p2 (to abort).
    assert_eq!(
        produce(&c, &state, batch(p1, 0, true, &["c1", "c2"])).await,
        0
    );
    assert_eq!(
        produce(&c, &state, batch(-1, -1, false, &["plain"])).await,
        2
    );
    assert_eq!(
        produce(&c, &state, batch(p2, 0, true, &["a1", "a2"])).await,
        3
    );

    let uncommitted = fetch(&c, 0).await;
    assert_eq!(
        values(&uncommitted.records),
        ["c1", "c2", "plain", "a1", "a2"]
    );
    assert_eq!(
        (uncommitted.high_watermark, uncommitted.last_stable_offset),
        (5, 0)
    );
    let committed = fetch(&c, 1).await;
    assert!(
        committed.records.is_empty(),
        "p1's transaction is open at 0"
    );
    assert_eq!(committed.last_stable_offset, 0);

    let commit = write_marker(&state, TOPIC, 0, p1, 0, true, 0)
        .await
        .unwrap();
    assert_eq!(commit, 5);
    let committed = fetch(&c, 1).await;
    assert_eq!(committed.last_stable_offset, 3, "p2's is still open");
    assert_eq!(values(&committed.records), ["c1", "c2", "plain"]);
    assert!(committed.aborted_transactions.is_empty());

    let abort = write_marker(&state, TOPIC, 0, p2, 0, false, 0)
        .await
        .unwrap();
    assert_eq!(abort, 6);
    assert_eq!(produce(&c, &state, batch(p2, 2, true, &["after"])).await, 7);
    let commit = write_marker(&state, TOPIC, 0, p2, 0, true, 0)
        .await
        .unwrap();
    assert_eq!(commit, 8);
    let committed = fetch(&c, 1).await;
    assert_eq!(committed.last_stable_offset, 9);
    assert_eq!(
        committed.aborted_transactions,
        [m::AbortedTransaction {
            producer_id: p2,
            first_offset: 3
        }]
    );

    // The consumers: no control record either way; read committed drops the aborted ones.
    let all = consume(&addr, Isolation::ReadUncommitted, 9).await;
    assert_eq!(all, ["c1", "c2", "plain", "a1", "a2", "after"]);
    let decided = consume(&addr, Isolation::ReadCommitted, 9).await;
    assert_eq!(decided, ["c1", "c2", "plain", "after"]);

    // A fenced marker (an epoch below the partition's) is refused; so is a bad level.
    let bump = write_marker(&state, TOPIC, 0, p2, 5, false, 1)
        .await
        .unwrap();
    assert_eq!(bump, 9);
    let e = write_marker(&state, TOPIC, 0, p2, 0, true, 0)
        .await
        .unwrap_err();
    assert_eq!(
        e.code,
        u32::from(ErrorCode::INVALID_PRODUCER_EPOCH.code()),
        "{}",
        e.message
    );
    let e = c
        .request(
            &m::FetchRequest {
                isolation_level: 2,
                ..Default::default()
            },
            WAIT,
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("isolation_level"), "{e}");
    broker.shutdown().await;
}

/// Markers go to internal topics too (the coordinator ends offset commits made in a
/// transaction there), and a broker that does not lead the partition says who does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markers_reach_the_offsets_topic_and_name_the_leader() {
    let tmp = tempfile::tempdir().unwrap();
    let (broker, _addr) = start(tmp.path()).await;
    let state = broker.state().clone();
    let offsets = crate::group::offsets::OFFSETS_TOPIC;
    let deadline = tokio::time::Instant::now() + WAIT;
    let offset = loop {
        match write_marker(&state, offsets, 0, 1, 0, true, 0).await {
            Ok(offset) => break offset,
            Err(e) if tokio::time::Instant::now() < deadline => {
                let _ = e; // the offsets topic is created at start; its leadership follows
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("{}", e.message),
        }
    };
    assert!(offset >= 0);
    let e = write_marker(&state, "no-such-topic", 0, 1, 0, true, 0)
        .await
        .unwrap_err();
    assert_eq!(
        e.code,
        u32::from(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.code())
    );
    broker.shutdown().await;
}

/// A read-committed long poll waiting behind an open transaction is woken by its marker
/// (which moves the last stable offset, and the high watermark once durable): the poll may
/// wait two minutes, and the test gives it ten seconds. (If the marker is written before the poll's
/// first read, the read finds the records at once: the test then passes without a wait.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marker_wakes_a_read_committed_long_poll() {
    let tmp = tempfile::tempdir().unwrap();
    let (broker, addr) = start(tmp.path()).await;
    let state = broker.state().clone();
    let c = Connection::connect(&addr, "test", "").await.unwrap();
    let p1 = state.cluster.allocate_producer_id().await.unwrap();
    produce(&c, &state, batch(p1, 0, true, &["x"])).await;
    let waiting = {
        let request = m::FetchRequest {
            max_wait_ms: 60_000,
            min_bytes: 1,
            partitions: vec![m::FetchPartition {
                topic: TOPIC.into(),
                partition: 0,
                offset: 0,
                ..Default::default()
            }],
            isolation_level: 1,
            ..Default::default()
        };
        let c = Connection::connect(&addr, "test", "").await.unwrap();
        c.start_request(&request).await.unwrap()
    };
    // A round trip on another connection, so the poll has most likely read and waits.
    assert!(fetch(&c, 1).await.records.is_empty());
    write_marker(&state, TOPIC, 0, p1, 0, true, 0)
        .await
        .unwrap();
    let answer = waiting.wait(WAIT).await.expect("woken by the marker");
    assert_eq!(values(&answer.partitions[0].records), ["x"]);
    broker.shutdown().await;
}
