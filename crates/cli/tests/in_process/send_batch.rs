//! `Producer::send_batch` against a real server: one future per batch, offsets contiguous, order
//! kept with `send` on the same partition, routing of a batch to one partition, and the
//! refusals (a batch over the topic's limit, records naming two partitions).

use std::time::Duration;

use crate::node::Server;
use tinymq_client::{
    Admin, ClientConfig, ClientError, Compression, Consumer, ConsumerConfig, Producer,
    ProducerConfig, ProducerRecord, StartFrom, TopicConfig,
};

fn to_partition(value: String, partition: u32) -> ProducerRecord {
    ProducerRecord {
        partition: Some(partition),
        ..ProducerRecord::value(value)
    }
}

/// Every value stored in `topic`'s `partition`, by offset.
async fn stored(addr: &str, topic: &str, partition: u32) -> Vec<(i64, String)> {
    let mut config = ConsumerConfig::new(addr);
    config.start_from = StartFrom::Earliest;
    let mut consumer = Consumer::new(config).unwrap();
    consumer.assign(topic, Some(vec![partition])).await.unwrap();
    let mut out = Vec::new();
    let mut quiet = 0;
    while quiet < 3 {
        let records = consumer.poll(Duration::from_millis(300)).await.unwrap();
        quiet = if records.is_empty() { quiet + 1 } else { 0 };
        for r in records {
            out.push((
                r.offset,
                String::from_utf8(r.value.unwrap().to_vec()).unwrap(),
            ));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_and_single_records_keep_their_order_and_offsets() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(&tmp.path().join("data"));
    let admin = Admin::new(ClientConfig::new(&server.addr)).unwrap();
    for (topic, compression) in [("plain", Compression::None), ("lz4", Compression::Lz4)] {
        let config = TopicConfig {
            partitions: 2,
            ..TopicConfig::default()
        };
        admin.create_topic(topic, config).await.unwrap();
        let mut config = ProducerConfig::new(&server.addr);
        config.compression = compression;
        config.batch_bytes = 4096;
        let producer = Producer::new(config).unwrap();
        let mut expected = Vec::new();
        let mut singles = Vec::new();
        let mut batches = Vec::new();
        for round in 0..30 {
            for i in 0..7 {
                let value = format!("single-{round}-{i}");
                expected.push(value.clone());
                singles.push(producer.send(topic, to_partition(value, 1)).await.unwrap());
            }
            let values: Vec<String> = (0..100).map(|i| format!("batch-{round}-{i}")).collect();
            expected.extend(values.iter().cloned());
            let records = values.iter().map(|v| to_partition(v.clone(), 1)).collect();
            batches.push((values, producer.send_batch(topic, records).await.unwrap()));
        }
        let mut by_offset = std::collections::BTreeMap::new();
        for delivery in singles {
            let meta = delivery.await.unwrap();
            assert_eq!(meta.partition, 1);
            assert_eq!(&*meta.topic, topic);
            assert!(
                by_offset.insert(meta.offset, ()).is_none(),
                "one offset each"
            );
        }
        let stored = stored(&server.addr, topic, 1).await;
        let values: Vec<&str> = stored.iter().map(|(_, v)| v.as_str()).collect();
        assert_eq!(values, expected, "{topic}: stored in the order sent");
        for (values, delivery) in batches {
            let meta = delivery.await.unwrap();
            assert_eq!((meta.partition, meta.record_count), (1, 100));
            for (i, value) in values.iter().enumerate() {
                let offset = meta.base_offset + i as i64;
                let at = stored
                    .iter()
                    .find(|(o, _)| *o == offset)
                    .expect("offset stored");
                assert_eq!(&at.1, value, "{topic}: the batch's offsets are contiguous");
            }
        }
        producer.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_goes_to_one_partition_and_oversize_or_split_batches_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(&tmp.path().join("data"));
    let admin = Admin::new(ClientConfig::new(&server.addr)).unwrap();
    let config = TopicConfig {
        partitions: 3,
        message_bytes_max: 65536,
        ..TopicConfig::default()
    };
    admin.create_topic("t", config).await.unwrap();
    let producer = Producer::new(ProducerConfig::new(&server.addr)).unwrap();

    // Keyless batches take the partitions in turn, each batch whole.
    let mut partitions = Vec::new();
    for b in 0..3 {
        let records = (0..10)
            .map(|i| ProducerRecord::value(format!("{b}-{i}")))
            .collect();
        let meta = producer
            .send_batch("t", records)
            .await
            .unwrap()
            .await
            .unwrap();
        assert_eq!(meta.record_count, 10);
        partitions.push(meta.partition);
    }
    partitions.sort();
    assert_eq!(partitions, [0, 1, 2], "one batch per partition in turn");

    // A keyed batch goes where its first key hashes, whatever the other keys.
    let key = b"customer-7";
    let records = vec![
        ProducerRecord::value("a").with_key(&key[..]),
        ProducerRecord::value("b").with_key("other"),
    ];
    let meta = producer
        .send_batch("t", records)
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(meta.partition, tinymq_client::partition_for_key(key, 3));

    let split = vec![to_partition("x".into(), 0), to_partition("y".into(), 2)];
    match producer.send_batch("t", split).await {
        Err(ClientError::Config(message)) => assert!(message.contains("one partition")),
        Err(e) => panic!("expected a configuration error, got {e}"),
        Ok(_) => panic!("expected a configuration error, got a delivery"),
    }
    assert!(matches!(
        producer.send_batch("t", Vec::new()).await,
        Err(ClientError::Config(_))
    ));

    // Over the topic's 64 KiB: refused whole, and the next batch is stored.
    let big = (0..100)
        .map(|_| ProducerRecord::value(vec![b'x'; 1000]))
        .collect();
    let refused = producer.send_batch("t", big).await.unwrap().await;
    match refused {
        Err(ClientError::RecordTooLarge { limit, bytes, .. }) => {
            assert_eq!(limit, 65536);
            assert!(bytes > limit);
        }
        other => panic!("expected MESSAGE_TOO_LARGE, got {other:?}"),
    }
    let after = vec![to_partition("after".into(), 0)];
    let meta = producer
        .send_batch("t", after)
        .await
        .unwrap()
        .await
        .unwrap();
    let stored = stored(&server.addr, "t", 0).await;
    assert_eq!(
        stored.last(),
        Some(&(meta.base_offset, "after".to_string()))
    );
    producer.close().await;
}
