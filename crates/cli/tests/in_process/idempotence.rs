//! Idempotent produce under lost acknowledgements: a proxy between producer and server drops
//! some produce responses, so the producer times out and sends the same batch again. With
//! idempotence every record is stored exactly once; without it the same proxy makes duplicates
//! (which shows the retries really happen).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::node::Server;
use bytes::BytesMut;
use tinymq_client::{
    Admin, ClientConfig, Consumer, ConsumerConfig, Producer, ProducerConfig, ProducerRecord,
    StartFrom, TopicConfig,
};
use tinymq_protocol::frame::FrameDecoder;
use tinymq_protocol::OpCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Forwards connections to `upstream`, dropping every third produce response.
async fn lossy_proxy(listener: TcpListener, upstream: String, dropped: Arc<AtomicUsize>) {
    let seen = Arc::new(AtomicUsize::new(0));
    loop {
        let Ok((client, _)) = listener.accept().await else {
            return;
        };
        let Ok(server) = TcpStream::connect(&upstream).await else {
            return;
        };
        let (mut client_read, mut client_write) = client.into_split();
        let (mut server_read, mut server_write) = server.into_split();
        tokio::spawn(async move {
            let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
        });
        let (seen, dropped) = (seen.clone(), dropped.clone());
        tokio::spawn(async move {
            let decoder = FrameDecoder::new(64 << 20);
            let mut buf = BytesMut::new();
            loop {
                while let Ok(Some(frame)) = decoder.decode(&mut buf) {
                    let is_produce = frame.header.op_code() == OpCode::Produce.code();
                    if is_produce && seen.fetch_add(1, Ordering::SeqCst) % 3 == 1 {
                        dropped.fetch_add(1, Ordering::SeqCst);
                        continue;
                    }
                    let mut out = BytesMut::new();
                    frame.encode(&mut out);
                    if client_write.write_all(&out).await.is_err() {
                        return;
                    }
                }
                match server_read.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        });
    }
}

async fn run(idempotence: bool) -> (usize, BTreeMap<String, usize>, usize) {
    let tmp = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_addr = listener.local_addr().unwrap().to_string();
    // Clients learn broker addresses from metadata, so the server advertises the proxy.
    let advertise = tinymq_broker::Advertised::parse(&proxy_addr).expect("HOST:PORT");
    let server = Server::start_tuned(tmp.path(), |c| c.advertise = Some(advertise));
    let dropped = Arc::new(AtomicUsize::new(0));
    tokio::spawn(lossy_proxy(listener, server.addr.clone(), dropped.clone()));

    let admin = Admin::new(ClientConfig::new(&proxy_addr)).unwrap();
    admin
        .create_topic(
            "idem",
            TopicConfig {
                partitions: 2,
                ..TopicConfig::default()
            },
        )
        .await
        .unwrap();
    let mut config = ProducerConfig::new(&proxy_addr);
    config.idempotence = idempotence;
    config.client.request_timeout = Duration::from_millis(300);
    config.retry_backoff = Duration::from_millis(10);
    config.batch_bytes = 2048;
    let producer = Producer::new(config).unwrap();
    let sent = 3000;
    let mut deliveries = Vec::new();
    for i in 0..sent {
        let record = ProducerRecord::value(format!("m{i}")).with_key(format!("k{}", i % 5));
        deliveries.push((
            format!("m{i}"),
            producer.send("idem", record).await.unwrap(),
        ));
    }
    let mut acked = BTreeMap::new();
    for (value, delivery) in deliveries {
        let meta = delivery
            .await
            .expect("delivered despite lost acknowledgements");
        acked.insert((meta.partition, meta.offset), value);
    }

    let mut consumer_config = ConsumerConfig::new(&server.addr);
    consumer_config.start_from = StartFrom::Earliest;
    consumer_config.client.bootstrap = vec![proxy_addr.clone()];
    let mut consumer = Consumer::new(consumer_config).unwrap();
    consumer.assign("idem", None).await.unwrap();
    let mut stored = BTreeMap::new();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut quiet = 0;
    while quiet < 3 {
        let records = consumer.poll(Duration::from_millis(300)).await.unwrap();
        quiet = if records.is_empty() { quiet + 1 } else { 0 };
        for r in records {
            let value = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
            *counts.entry(value.clone()).or_default() += 1;
            stored.insert((r.partition, r.offset), value);
        }
    }
    if idempotence {
        for (key, value) in &acked {
            assert_eq!(
                stored.get(key),
                Some(value),
                "acknowledged offset {key:?} holds its record"
            );
        }
    }
    assert_eq!(counts.len(), sent, "every record stored at least once");
    (sent, counts, dropped.load(Ordering::SeqCst))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_acknowledgements_with_idempotence_store_every_record_exactly_once() {
    let (sent, counts, dropped) = run(true).await;
    assert!(dropped > 0, "the proxy dropped responses");
    let stored: usize = counts.values().sum();
    assert_eq!(
        stored, sent,
        "no duplicates although {dropped} acknowledgements were lost"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_losses_without_idempotence_duplicate_records() {
    let (sent, counts, dropped) = run(false).await;
    assert!(dropped > 0);
    let stored: usize = counts.values().sum();
    assert!(
        stored > sent,
        "retries without idempotence write batches twice"
    );
}
