//! Nothing acknowledged is lost: a server stopped with SIGTERM or killed with SIGKILL right
//! after (and during) acknowledged writes restarts with every acknowledged record, at the
//! offset it was acknowledged with, and the topics it had; and an idempotent producer's state
//! survives a SIGKILL (seen through raw frames), the documented rules (docs/protocol.md)
//! holding before and after it.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::frames::{self, batch, code, error_of, fetch, init_producer_id, produce, produce_to};
use common::{RawClient, Server};
use tinymq_client::{
    Admin, ClientConfig, Consumer, ConsumerConfig, Producer, ProducerConfig, ProducerRecord,
    StartFrom, TopicConfig,
};
use tinymq_protocol::batch::ProducerStamp;
use tinymq_protocol::ErrorCode;

type Acked = BTreeMap<(u32, i64), String>;

async fn produce_acked(addr: &str, topic: &str, count: usize) -> Acked {
    let producer = Producer::new(ProducerConfig::new(addr)).unwrap();
    let mut deliveries = Vec::new();
    for i in 0..count {
        let value = format!("{topic}-{i}");
        let record = ProducerRecord::value(value.clone()).with_key(format!("k{}", i % 7));
        deliveries.push((value, producer.send(topic, record).await.unwrap()));
    }
    let mut acked = BTreeMap::new();
    for (value, delivery) in deliveries {
        let meta = delivery.await.unwrap();
        acked.insert((meta.partition, meta.offset), value);
    }
    acked
}

async fn consume_all(addr: &str, topic: &str) -> Acked {
    let mut config = ConsumerConfig::new(addr);
    config.start_from = StartFrom::Earliest;
    let mut consumer = Consumer::new(config).unwrap();
    consumer.assign(topic, None).await.unwrap();
    let mut got = BTreeMap::new();
    let mut quiet_polls = 0;
    while quiet_polls < 3 {
        let records = consumer.poll(Duration::from_millis(300)).await.unwrap();
        if records.is_empty() {
            quiet_polls += 1;
        }
        for r in records {
            let value = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
            assert!(
                got.insert((r.partition, r.offset), value).is_none(),
                "offset seen twice"
            );
        }
    }
    got
}

async fn create(addr: &str, topic: &str, flush: &str) {
    let admin = Admin::new(ClientConfig::new(addr)).unwrap();
    let config = TopicConfig {
        partitions: 3,
        flush: flush.into(),
        ..TopicConfig::default()
    };
    admin.create_topic(topic, config).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_and_sigkill_right_after_acknowledged_writes_lose_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let mut server = Server::start(tmp.path());
    create(&server.addr, "always", "always").await;
    create(&server.addr, "os", "os").await;
    let mut expected_always = produce_acked(&server.addr, "always", 2000).await;
    let mut expected_os = produce_acked(&server.addr, "os", 2000).await;

    assert!(server.terminate().success(), "SIGTERM exits 0");
    let mut server = Server::start(tmp.path());
    assert_eq!(consume_all(&server.addr, "always").await, expected_always);
    assert_eq!(consume_all(&server.addr, "os").await, expected_os);

    expected_always.extend(produce_acked(&server.addr, "always", 2000).await);
    expected_os.extend(produce_acked(&server.addr, "os", 2000).await);
    server.kill9();
    let server = Server::start(tmp.path());
    // Under `os` a process crash loses nothing either: the page cache survives the process.
    assert_eq!(consume_all(&server.addr, "always").await, expected_always);
    assert_eq!(consume_all(&server.addr, "os").await, expected_os);
    let admin = Admin::new(ClientConfig::new(&server.addr)).unwrap();
    assert_eq!(
        admin.list_topics().await.unwrap(),
        vec!["always", "os"],
        "metadata survives"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_a_stream_of_writes_keeps_every_acknowledged_record() {
    let tmp = tempfile::tempdir().unwrap();
    let mut server = Server::start(tmp.path());
    create(&server.addr, "stream", "always").await;
    let mut config = ProducerConfig::new(&server.addr);
    config.delivery_timeout = Duration::from_secs(2);
    config.client.request_timeout = Duration::from_secs(1);
    let producer = Producer::new(config).unwrap();
    let (acked_tx, mut acked_rx) = tokio::sync::mpsc::unbounded_channel();
    let writer = tokio::spawn(async move {
        for i in 0.. {
            let value = format!("v{i}");
            let Ok(delivery) = producer
                .send("stream", ProducerRecord::value(value.clone()))
                .await
            else {
                break;
            };
            let tx = acked_tx.clone();
            tokio::spawn(async move {
                if let Ok(meta) = delivery.await {
                    let _ = tx.send(((meta.partition, meta.offset), value));
                }
            });
            if i % 64 == 0 {
                tokio::task::yield_now().await;
            }
            if acked_tx.is_closed() {
                break;
            }
        }
    });
    // Let a few thousand acknowledgements through, then kill mid-stream.
    let mut acked = BTreeMap::new();
    while acked.len() < 3000 {
        let (k, v) = acked_rx.recv().await.unwrap();
        acked.insert(k, v);
    }
    server.kill9();
    writer.abort();
    // Acknowledgements that were already on their way count too: the channel closes once the
    // writer and every delivery it started have ended (each within its delivery timeout).
    let drained = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some((k, v)) = acked_rx.recv().await {
            acked.insert(k, v);
        }
    })
    .await;
    assert!(
        drained.is_ok(),
        "deliveries still pending 30 s after the kill"
    );
    let server = Server::start(tmp.path());
    let stored = consume_all(&server.addr, "stream").await;
    for (key, value) in &acked {
        assert_eq!(
            stored.get(key),
            Some(value),
            "acknowledged record at {key:?}"
        );
    }
    // Offsets are contiguous per partition: nothing unexpected in between.
    for p in 0..3u32 {
        let offsets: Vec<i64> = stored
            .keys()
            .filter(|(q, _)| *q == p)
            .map(|(_, o)| *o)
            .collect();
        assert_eq!(offsets, (0..offsets.len() as i64).collect::<Vec<_>>());
    }
}

#[test]
fn idempotence_state_survives_a_sigkill() {
    let tmp = tempfile::tempdir().unwrap();
    let mut server = Server::start(tmp.path());
    let mut c = RawClient::handshaken(&server.addr);
    frames::create(&mut c, "idem", 1);
    let id = init_producer_id(&mut c);
    let stamp = |seq| ProducerStamp {
        producer_id: id.producer_id,
        producer_epoch: id.producer_epoch as i16,
        base_sequence: seq,
    };
    for seq in 0..3 {
        let r = produce(&mut c, "idem", batch(&format!("s{seq}"), stamp(seq)), -1).unwrap();
        assert_eq!(r.base_offset, i64::from(seq));
    }
    server.kill9();

    let server = Server::start(tmp.path());
    let mut c = RawClient::handshaken(&server.addr);
    // A retry of the last batch is recognised after the crash: original offset, not re-stored.
    let retry = produce(&mut c, "idem", batch("s2", stamp(2)), -1).unwrap();
    assert!(retry.error.is_none(), "{:?}", retry.error);
    assert_eq!(retry.base_offset, 2);
    // A gap in the sequence is refused.
    let gap = produce(&mut c, "idem", batch("s9", stamp(9)), -1).unwrap();
    assert_eq!(
        gap.error.unwrap().code,
        u32::from(ErrorCode::OUT_OF_ORDER_SEQUENCE.code())
    );
    // The next sequence is stored at the next offset.
    let next = produce(&mut c, "idem", batch("s3", stamp(3)), -1).unwrap();
    assert_eq!(next.base_offset, 3);
    // A new producer id from the restarted server is never one handed out before.
    let fresh = init_producer_id(&mut c);
    assert!(fresh.producer_id > id.producer_id);
    assert_eq!(fetch(&mut c, "idem", 0, 100).high_watermark, 4);
}

#[test]
fn idempotence_follows_the_documented_rules_and_survives_kill_9() {
    let tmp = tempfile::tempdir().unwrap();
    let mut server = Server::start(tmp.path());
    let mut c = RawClient::handshaken(&server.addr);
    frames::create(&mut c, "idem", 2);
    let id = init_producer_id(&mut c);
    let stamp = |epoch: i16, seq: i32| ProducerStamp {
        producer_id: id.producer_id,
        producer_epoch: epoch,
        base_sequence: seq,
    };
    let send = |c: &mut RawClient, partition, epoch, seq| {
        let r = produce_to(c, "idem", partition, batch("x", stamp(epoch, seq)), -1).unwrap();
        (error_of(&r.error), r.base_offset)
    };
    let ok = |offset| (0, offset);
    let refused = |e: ErrorCode| (code(e), -1);
    for seq in 0..7 {
        assert_eq!(send(&mut c, 0, 0, seq), ok(i64::from(seq)));
    }
    // (partition, epoch, sequence, the doc's outcome), in order.
    let cases = [
        // Rule 4: a retry of one of the last 5 batches (sequences 2..=6) gets its offset.
        (0, 0, 6, ok(6)),
        (0, 0, 2, ok(2)),
        // Older than the newest 5: OUT_OF_ORDER_SEQUENCE although it was written.
        (0, 0, 1, refused(ErrorCode::OUT_OF_ORDER_SEQUENCE)),
        // Rule 5: a gap.
        (0, 0, 9, refused(ErrorCode::OUT_OF_ORDER_SEQUENCE)),
        // Rule 3: a higher epoch starts at 0.
        (0, 1, 7, refused(ErrorCode::OUT_OF_ORDER_SEQUENCE)),
        (0, 1, 0, ok(7)),
        // Rule 2: the old epoch is fenced.
        (0, 0, 7, refused(ErrorCode::INVALID_PRODUCER_EPOCH)),
        // Rule 1: a producer new to partition 1 must start at 0.
        (1, 0, 3, refused(ErrorCode::UNKNOWN_PRODUCER_ID)),
        (1, 0, 0, ok(0)),
    ];
    for (partition, epoch, seq, expected) in cases {
        assert_eq!(
            send(&mut c, partition, epoch, seq),
            expected,
            "partition {partition}, epoch {epoch}, sequence {seq}"
        );
    }
    // Rule 1: a producer id this cluster never handed out.
    let foreign = ProducerStamp {
        producer_id: 1 << 40,
        producer_epoch: 0,
        base_sequence: 0,
    };
    let r = produce(&mut c, "idem", batch("x", foreign), -1).unwrap();
    assert_eq!(error_of(&r.error), code(ErrorCode::UNKNOWN_PRODUCER_ID));

    // Producer state survives kill -9: the retries are still recognised.
    server.kill9();
    let server = Server::start(tmp.path());
    let mut c = RawClient::handshaken(&server.addr);
    assert_eq!(send(&mut c, 0, 1, 0), ok(7));
    assert_eq!(send(&mut c, 1, 0, 0), ok(0));
    assert_eq!(
        send(&mut c, 0, 0, 8),
        refused(ErrorCode::INVALID_PRODUCER_EPOCH)
    );
    assert_eq!(send(&mut c, 0, 1, 1), ok(8));
    assert_eq!(fetch(&mut c, "idem", 0, 0).high_watermark, 9);
}
