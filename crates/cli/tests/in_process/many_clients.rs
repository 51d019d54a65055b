//! Many producers and consumers at once on separate connections: every consumer sees every
//! record, and each producer's records keep their order within a partition.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::node::Server;
use tinymq_client::{
    Admin, ClientConfig, Consumer, ConsumerConfig, Producer, ProducerConfig, ProducerRecord,
    StartFrom, TopicConfig,
};

const PRODUCERS: usize = 25;
const CONSUMERS: usize = 25;
const PER_PRODUCER: usize = 400;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_connections_produce_and_consume_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let admin = Admin::new(ClientConfig::new(&server.addr)).unwrap();
    admin
        .create_topic(
            "busy",
            TopicConfig {
                partitions: 4,
                ..TopicConfig::default()
            },
        )
        .await
        .unwrap();
    let total = PRODUCERS * PER_PRODUCER;

    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|_| {
            let addr = server.addr.clone();
            tokio::spawn(async move {
                let mut config = ConsumerConfig::new(&addr);
                config.start_from = StartFrom::Earliest;
                let mut consumer = Consumer::new(config).unwrap();
                consumer.assign("busy", None).await.unwrap();
                let mut seen = Vec::with_capacity(total);
                let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
                while seen.len() < total && tokio::time::Instant::now() < deadline {
                    for r in consumer.poll(Duration::from_millis(200)).await.unwrap() {
                        seen.push((
                            r.partition,
                            r.offset,
                            String::from_utf8(r.value.unwrap().to_vec()).unwrap(),
                        ));
                    }
                }
                seen
            })
        })
        .collect();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let addr = server.addr.clone();
            tokio::spawn(async move {
                let producer = Producer::new(ProducerConfig::new(&addr)).unwrap();
                let mut deliveries = Vec::new();
                for i in 0..PER_PRODUCER {
                    let record = ProducerRecord::value(format!("p{p}-{i}"))
                        .with_key(format!("producer-{p}"));
                    deliveries.push(producer.send("busy", record).await.unwrap());
                }
                for d in deliveries {
                    d.await.unwrap();
                }
            })
        })
        .collect();
    for p in producers {
        p.await.unwrap();
    }
    for consumer in consumers {
        let seen = consumer.await.unwrap();
        assert_eq!(seen.len(), total, "every consumer sees every record");
        let mut per_producer: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (_, _, value) in &seen {
            let (p, i) = value.split_once('-').unwrap();
            per_producer
                .entry(p.to_string())
                .or_default()
                .push(i.parse().unwrap());
        }
        assert_eq!(per_producer.len(), PRODUCERS);
        for (p, numbers) in per_producer {
            assert_eq!(
                numbers,
                (0..PER_PRODUCER).collect::<Vec<_>>(),
                "{p}'s records in order"
            );
        }
    }
}
