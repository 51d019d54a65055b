//! A whole cluster in one process — three MetaServer nodes and three brokers — loses the
//! leader of a replicated partition (shut down, as SIGTERM does): a new leader is elected, the
//! producer (acks = all) goes on, and every acknowledged record is read back exactly once.
//! The crash form (`kill -9`) is a process test (replication.rs).

use std::collections::BTreeSet;
use std::time::Duration;

use crate::node::Cluster;
use tinymq_client::{
    Acks, Admin, ClientConfig, Consumer, ConsumerConfig, Producer, ProducerConfig, ProducerRecord,
    StartFrom, TopicConfig,
};

const RECORDS_PER_ROUND: usize = 500;

async fn send_round(producer: &Producer, round: usize) {
    let mut deliveries = Vec::new();
    for i in 0..RECORDS_PER_ROUND {
        let record = ProducerRecord::value(format!("r{round}-{i}"));
        deliveries.push(producer.send("replicated", record).await.expect("queued"));
    }
    for d in deliveries {
        d.await.expect("acknowledged");
    }
}

/// The partition's leader once one is known and all three replicas are in sync.
async fn leader_in_sync(admin: &Admin, not: Option<u32>) -> u32 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(t) = admin.describe_topic("replicated").await {
            if let Some(p) = t.partitions.first() {
                let in_sync = p.isr.len() == if not.is_some() { 2 } else { 3 };
                if p.leader != 0 && Some(p.leader) != not && in_sync {
                    return p.leader;
                }
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no leader with its in-sync replicas"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_shut_down_hands_over_and_no_acknowledged_record_is_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cluster = tokio::task::block_in_place(|| Cluster::start(tmp.path(), 3, 3));
    let bootstrap = cluster.bootstrap();
    let admin = Admin::new(ClientConfig::new(&bootstrap)).unwrap();
    admin
        .create_topic(
            "replicated",
            TopicConfig {
                partitions: 1,
                replication_factor: 3,
                ..TopicConfig::default()
            },
        )
        .await
        .unwrap();
    let first_leader = leader_in_sync(&admin, None).await;

    let mut config = ProducerConfig::new(&bootstrap);
    config.acks = Acks::All;
    let producer = Producer::new(config).unwrap();
    send_round(&producer, 0).await;
    let index = usize::try_from(first_leader - 1).expect("a broker id");
    tokio::task::block_in_place(|| cluster.brokers[index].stop());
    let second_leader = leader_in_sync(&admin, Some(first_leader)).await;
    assert_ne!(second_leader, first_leader);
    send_round(&producer, 1).await;

    let mut config = ConsumerConfig::new(&bootstrap);
    config.start_from = StartFrom::Earliest;
    let mut consumer = Consumer::new(config).unwrap();
    consumer.assign("replicated", None).await.unwrap();
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while seen.len() < 2 * RECORDS_PER_ROUND && tokio::time::Instant::now() < deadline {
        for r in consumer.poll(Duration::from_millis(200)).await.unwrap() {
            seen.push(String::from_utf8(r.value.unwrap().to_vec()).unwrap());
        }
    }
    let distinct: BTreeSet<&String> = seen.iter().collect();
    assert_eq!(distinct.len(), seen.len(), "a record read twice");
    let expected: BTreeSet<String> = (0..2)
        .flat_map(|round| (0..RECORDS_PER_ROUND).map(move |i| format!("r{round}-{i}")))
        .collect();
    assert_eq!(
        distinct.into_iter().cloned().collect::<BTreeSet<_>>(),
        expected
    );
    tokio::task::block_in_place(|| drop(cluster));
}
