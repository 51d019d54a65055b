//! DeleteRecords on a replicated partition, in one process (a MetaServer node and three
//! brokers): the answer comes once every in-sync replica has moved its log start, so after the
//! leader is shut down the new leader starts at the same offset and no reader sees a deleted
//! record again.

use std::time::Duration;

use crate::node::Cluster;
use tinymq_client::{
    Acks, Admin, ClientConfig, Consumer, ConsumerConfig, Producer, ProducerConfig, ProducerRecord,
    StartFrom, TopicConfig,
};

const RECORDS: usize = 300;
const DELETED_BELOW: i64 = 120;

/// The partition's leader once one is known, other than `not`, with `isr` replicas in sync.
async fn leader_with_isr(admin: &Admin, not: Option<u32>, isr: usize) -> u32 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(t) = admin.describe_topic("trimmed").await {
            if let Some(p) = t.partitions.first() {
                if p.leader != 0 && Some(p.leader) != not && p.isr.len() == isr {
                    return p.leader;
                }
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no leader with {isr} in sync"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_records_stay_deleted_after_the_leader_moves() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cluster = tokio::task::block_in_place(|| Cluster::start(tmp.path(), 1, 3));
    let bootstrap = cluster.bootstrap();
    let admin = Admin::new(ClientConfig::new(&bootstrap)).unwrap();
    let topic = TopicConfig {
        partitions: 1,
        replication_factor: 3,
        ..TopicConfig::default()
    };
    admin.create_topic("trimmed", topic).await.unwrap();
    let first_leader = leader_with_isr(&admin, None, 3).await;
    let mut config = ProducerConfig::new(&bootstrap);
    config.acks = Acks::All;
    let producer = Producer::new(config).unwrap();
    let mut deliveries = Vec::new();
    for i in 0..RECORDS {
        let record = ProducerRecord::value(format!("r{i}"));
        deliveries.push(producer.send("trimmed", record).await.expect("queued"));
    }
    for d in deliveries {
        d.await.expect("acknowledged");
    }

    assert_eq!(
        admin
            .delete_records("trimmed", 0, DELETED_BELOW)
            .await
            .unwrap(),
        DELETED_BELOW
    );
    assert_eq!(
        admin.list_offset("trimmed", 0, -2).await.unwrap(),
        DELETED_BELOW
    );
    let beyond = admin.delete_records("trimmed", 0, RECORDS as i64 + 1).await;
    assert!(beyond.is_err(), "past the high watermark: {beyond:?}");

    let index = usize::try_from(first_leader - 1).expect("a broker id");
    tokio::task::block_in_place(|| cluster.brokers[index].stop());
    let second_leader = leader_with_isr(&admin, Some(first_leader), 2).await;
    assert_ne!(second_leader, first_leader);
    assert_eq!(
        admin.list_offset("trimmed", 0, -2).await.unwrap(),
        DELETED_BELOW,
        "the new leader deleted them too"
    );

    let mut config = ConsumerConfig::new(&bootstrap);
    config.start_from = StartFrom::Earliest;
    let mut consumer = Consumer::new(config).unwrap();
    consumer.assign("trimmed", None).await.unwrap();
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while seen.len() < RECORDS - DELETED_BELOW as usize && tokio::time::Instant::now() < deadline {
        for r in consumer.poll(Duration::from_millis(200)).await.unwrap() {
            seen.push((
                r.offset,
                String::from_utf8(r.value.unwrap().to_vec()).unwrap(),
            ));
        }
    }
    let expected: Vec<(i64, String)> = (DELETED_BELOW..RECORDS as i64)
        .map(|i| (i, format!("r{i}")))
        .collect();
    assert_eq!(seen, expected);
    tokio::task::block_in_place(|| drop(cluster));
}
