//! A leader that stalls rather than dies (its broker SIGSTOPped: connections stay open,
//! nothing answers): once the MetaServer has fenced it and named another leader, an
//! idempotent `acks=all` producer and a consumer move on to the new leader *while the old
//! one is still stopped*, instead of waiting out their request timeout (set longer than the
//! test's bound here, so waiting it out fails the test). After the old leader resumes,
//! every acknowledged record is stored exactly once and no record twice.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::cluster::{tool_ok, Cluster};
use common::Frozen;
use tinymq_client::{
    ClientConfig, Cluster as ClientCluster, Consumer, ConsumerConfig, Producer, ProducerConfig,
    ProducerRecord, StartFrom,
};

/// Longer than any wait below: a client that waits out a stalled leader's request timeout
/// cannot pass.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(180);
/// Generous bound on each wait (never asserted as a duration; only that it happened).
const PATIENCE: Duration = Duration::from_secs(60);

/// Polls `done` every 200 ms until it holds; panics after [`PATIENCE`].
async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The address of the leader of `topic`/0 as `bootstrap` sees it, if it has one.
async fn leader_of(topic: &str, bootstrap: &str) -> Option<String> {
    let mut config = ClientConfig::new(bootstrap);
    config.request_timeout = Duration::from_secs(5);
    let cluster = ClientCluster::new(config).ok()?;
    let route = cluster.refresh(topic).await.ok()?;
    route.leaders.first().cloned().flatten()
}

/// Sends `v-000000`, `v-000001`, … every few milliseconds until `stop`, recording each value
/// once it is acknowledged.
async fn produce_steadily(
    producer: Producer,
    acked: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
) {
    let mut deliveries = tokio::task::JoinSet::new();
    let mut i = 0u32;
    while !stop.load(Ordering::SeqCst) {
        let value = format!("v-{i:06}");
        i += 1;
        let delivery = producer
            .send("s", ProducerRecord::value(value.clone()))
            .await
            .expect("queued");
        let acked = acked.clone();
        deliveries.spawn(async move {
            if delivery.await.is_ok() {
                acked.lock().unwrap().push(value);
            }
        });
        // Not a wait: paces the producer to a steady stream.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    producer.flush().await;
    while deliveries.join_next().await.is_some() {}
}

/// Reads `s`/0 from the start until `stop`, recording every value.
async fn consume_steadily(
    mut consumer: Consumer,
    read: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
) {
    while !stop.load(Ordering::SeqCst) {
        let records = consumer
            .poll(Duration::from_millis(200))
            .await
            .expect("poll");
        let mut read = read.lock().unwrap();
        for r in records {
            read.push(String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_and_consumer_move_to_the_new_leader_while_the_old_one_is_stopped() {
    let cluster = Cluster::start(3);
    let all = cluster.bootstrap();
    tool_ok(&[
        "topic",
        "create",
        "s",
        "--partitions",
        "1",
        "--replicas",
        "3",
        "--bootstrap",
        &all,
    ]);
    wait_for("s to have a leader", || {
        let out = tool_ok(&["topic", "describe", "s", "--json", "--bootstrap", &all]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
        v["partitions"][0]["isr"]
            .as_array()
            .is_some_and(|isr| isr.len() == 3)
    })
    .await;
    let old_leader = leader_of("s", &all).await.expect("a leader");
    let victim = cluster
        .addrs
        .iter()
        .position(|a| *a == old_leader)
        .expect("a broker");
    let others = cluster
        .addrs
        .iter()
        .filter(|a| **a != old_leader)
        .cloned()
        .collect::<Vec<_>>()
        .join(",");

    let mut pconfig = ProducerConfig::new(&all);
    pconfig.client.request_timeout = REQUEST_TIMEOUT;
    pconfig.delivery_timeout = REQUEST_TIMEOUT * 2;
    let producer = Producer::new(pconfig).unwrap();
    let mut cconfig = ConsumerConfig::new(&all);
    cconfig.client.request_timeout = REQUEST_TIMEOUT;
    cconfig.start_from = StartFrom::Earliest;
    let mut consumer = Consumer::new(cconfig).unwrap();
    consumer.assign("s", None).await.unwrap();

    let (acked, read) = (Arc::default(), Arc::default());
    let stop = Arc::new(AtomicBool::new(false));
    let producing = tokio::spawn(produce_steadily(producer, Arc::clone(&acked), stop.clone()));
    let consuming = tokio::spawn(consume_steadily(consumer, Arc::clone(&read), stop.clone()));
    wait_for("the first 100 acknowledgements", || {
        acked.lock().unwrap().len() >= 100
    })
    .await;
    wait_for("the consumer to read 100 records", || {
        read.lock().unwrap().len() >= 100
    })
    .await;

    let frozen = Frozen::stop(cluster.broker(victim as u32 + 1));
    // The MetaServer fences the silent broker and elects another replica.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let now = leader_of("s", &others).await;
        if now.is_some_and(|l| l != old_leader) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no new leader was elected"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Whatever is acknowledged from now on was written through the new leader.
    let acked_at_election = acked.lock().unwrap().len();
    wait_for("writes acknowledged by the new leader", || {
        acked.lock().unwrap().len() >= acked_at_election + 100
    })
    .await;
    let fresh: BTreeSet<String> = acked.lock().unwrap()[acked_at_election..]
        .iter()
        .cloned()
        .collect();
    wait_for("the consumer to read from the new leader", || {
        read.lock().unwrap().iter().any(|v| fresh.contains(v))
    })
    .await;
    drop(frozen); // SIGCONT: the old leader rejoins as a follower.

    // Not a wait: traffic goes on for a second while the old leader rejoins.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::SeqCst);
    producing.await.unwrap();
    consuming.await.unwrap();

    let out = tool_ok(&[
        "consume",
        "s",
        "--from-beginning",
        "--timeout-ms",
        "3000",
        "--bootstrap",
        &others,
    ]);
    let mut count: HashMap<&str, usize> = HashMap::new();
    for line in out.lines() {
        *count.entry(line).or_default() += 1;
    }
    let twice: Vec<_> = count.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "records stored more than once: {twice:?}");
    let acked = acked.lock().unwrap();
    let missing: Vec<_> = acked
        .iter()
        .filter(|v| !count.contains_key(v.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "acknowledged but not stored: {missing:?}"
    );
    let read = read.lock().unwrap();
    let read_twice = read.len() - read.iter().collect::<BTreeSet<_>>().len();
    assert_eq!(read_twice, 0, "the consumer read no record twice");
}
