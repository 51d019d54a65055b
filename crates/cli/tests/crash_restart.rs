//! Nothing acknowledged is lost: a server stopped with SIGTERM or killed with SIGKILL right
//! after (and during) acknowledged writes restarts with every acknowledged record, at the
//! offset it was acknowledged with, and the topics it had.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::Server;
use tinymq_client::{
    Admin, ClientConfig, Consumer, ConsumerConfig, Producer, ProducerConfig, ProducerRecord,
    StartFrom, TopicConfig,
};

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
    // Acknowledgements that were already on their way count too.
    tokio::time::sleep(Duration::from_millis(300)).await;
    while let Ok((k, v)) = acked_rx.try_recv() {
        acked.insert(k, v);
    }
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
