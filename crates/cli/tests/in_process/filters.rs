//! A broker-side filter that matches nothing, with the node in this process: the fetch
//! answers the next offset past the skipped records, and a consumer waiting at the end gets
//! the one match among new records (the random expressions, checked through the client and
//! `consume --filter`, are process tests: `filters.rs`).

use std::time::Duration;

use crate::common::frames::create;
use crate::common::RawClient;
use crate::node::Server;
use bytes::Bytes;
use tinymq_client::{
    Consumer, ConsumerConfig, ConsumerRecord, Producer, ProducerConfig, ProducerRecord, StartFrom,
};
use tinymq_protocol::messages as m;

fn offsets(records: &[ConsumerRecord]) -> Vec<(u32, i64)> {
    records.iter().map(|r| (r.partition, r.offset)).collect()
}

#[test]
fn a_filter_that_matches_nothing_answers_next_offset_and_long_polls_for_matches() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    create(&mut RawClient::handshaken(&server.addr), "t", 1);
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let send = |tags: &[&str]| {
        rt.block_on(async {
            let producer = Producer::new(ProducerConfig::new(&server.addr)).unwrap();
            for tag in tags {
                let mut r = ProducerRecord::value(Bytes::from_static(b"v"));
                r.headers = vec![("tag".into(), Some(Bytes::from(tag.to_string())))];
                producer.send("t", r).await.unwrap().await.unwrap();
            }
            producer.close().await;
        })
    };
    send(&["blue"; 50]);
    let mut raw = RawClient::handshaken(&server.addr);
    let request = m::FetchRequest {
        max_wait_ms: 300,
        partitions: vec![m::FetchPartition {
            topic: "t".into(),
            offset: 10,
            ..Default::default()
        }],
        filter: "tag = 'red'".into(),
        ..Default::default()
    };
    let answer = raw.call(&request);
    let p = &answer.partitions[0];
    assert!(p.error.is_none(), "{:?}", p.error);
    assert!(p.records.is_empty(), "nothing matches");
    assert_eq!(
        (p.next_offset, p.high_watermark),
        (50, 50),
        "past the skipped records"
    );

    // A consumer waiting at the end gets the one match among new records, and moves past.
    let (waiting, at_end) = std::sync::mpsc::channel();
    let (got, position) = std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            rt.block_on(async {
                let mut config = ConsumerConfig::new(&server.addr);
                config.start_from = StartFrom::Latest;
                config.filter = Some("tag = 'red'".into());
                let mut consumer = Consumer::new(config).unwrap();
                consumer.assign("t", None).await.unwrap();
                consumer.resolve_positions().await.unwrap();
                waiting.send(()).unwrap();
                let mut got = Vec::new();
                for _ in 0..100 {
                    got.extend(consumer.poll(Duration::from_millis(200)).await.unwrap());
                    if consumer.position("t", 0) == Some(61) {
                        break;
                    }
                }
                (got, consumer.position("t", 0))
            })
        });
        // New records only once the consumer's position is the end (it starts from latest).
        at_end.recv().expect("the consumer resolved its position");
        send(&[
            "blue", "blue", "blue", "blue", "blue", "red", "blue", "blue", "blue", "blue",
        ]);
        send(&["green"]);
        waiter.join().unwrap()
    });
    assert_eq!(offsets(&got), vec![(0, 55)]);
    assert_eq!(position, Some(61));
}
