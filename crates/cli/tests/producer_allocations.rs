//! A regression guard on the producer's hot path that needs no clock: count heap allocations
//! (in every thread of this process: the caller's, and the tokio tasks of the producer's
//! workers and connection) while records flow to a real server. `send` encodes each record
//! into its partition's open batch and hands back a future sharing the batch's completion, so
//! allocations come per batch, not per record; a change that adds a channel, a oneshot or a
//! boxed future per record fails here, deterministically, on any machine.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use common::Server;
use tinymq_client::{Admin, ClientConfig, Producer, ProducerConfig, ProducerRecord, TopicConfig};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator; the counter is a static atomic, which never
// allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const RECORDS: usize = 20_000;

#[test]
fn send_and_send_batch_allocate_per_batch_not_per_record() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(&tmp.path().join("data"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let admin = Admin::new(ClientConfig::new(&server.addr)).unwrap();
        let topic = TopicConfig {
            flush: "os".into(),
            ..TopicConfig::default()
        };
        admin.create_topic("alloc", topic).await.unwrap();
        // Batches close by size (or the flush below), never by the clock, so the number of
        // batches, and with it the count, does not depend on the machine's speed.
        let mut config = ProducerConfig::new(&server.addr);
        config.batch_bytes = 64 << 10;
        config.linger = std::time::Duration::from_secs(600);
        config.queue_records_max = 2 * RECORDS;
        let producer = Producer::new(config).unwrap();
        let value = Bytes::from(vec![b'x'; 100]);
        // Warm up: the topic's limits and routes, the connection, the partition's worker.
        let warm_up = producer.send("alloc", ProducerRecord::value(value.clone()));
        let warm_up = warm_up.await.unwrap();
        producer.flush().await;
        warm_up.await.unwrap();

        let mut deliveries = Vec::with_capacity(RECORDS);
        let before = ALLOCATIONS.load(Ordering::SeqCst);
        for _ in 0..RECORDS {
            let record = ProducerRecord::value(value.clone());
            deliveries.push(producer.send("alloc", record).await.unwrap());
        }
        producer.flush().await;
        for delivery in deliveries.drain(..) {
            delivery.await.unwrap();
        }
        let per_send = ALLOCATIONS.load(Ordering::SeqCst) - before;
        assert!(
            per_send < (RECORDS / 10) as u64,
            "{per_send} allocations for {RECORDS} records sent one by one"
        );

        // send_batch: the caller's Vec, the encoded records and a completion per batch, and
        // the request's pieces; nothing per record.
        let batches = 20;
        let mut records: Vec<Vec<ProducerRecord>> = (0..batches)
            .map(|_| vec![ProducerRecord::value(value.clone()); 1000])
            .collect();
        let mut waits = Vec::with_capacity(batches);
        let before = ALLOCATIONS.load(Ordering::SeqCst);
        for batch in records.drain(..) {
            waits.push(producer.send_batch("alloc", batch).await.unwrap());
        }
        for wait in waits {
            assert_eq!(wait.await.unwrap().record_count, 1000);
        }
        let per_batch = ALLOCATIONS.load(Ordering::SeqCst) - before;
        assert!(
            per_batch < (batches * 50) as u64,
            "{per_batch} allocations for {batches} batches of 1000 records"
        );
        eprintln!("allocations: {per_send} for {RECORDS} sends, {per_batch} for {batches} batches");
        producer.close().await;
    });
}
