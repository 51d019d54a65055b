//! Quotas against a real `tinymq server` with SCRAM on: principal alice, with a produce (then
//! a fetch) quota, goes as fast as the real client lets her, and her achieved rate is held to
//! the quota; meanwhile bob, without a quota, sends small messages one at a time, and his
//! throughput stays in the range of his own baseline measured alone in the same test (his
//! latencies are printed). Rates and ratios are asserted, generously; no duration is.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::http::Node;
use tinymq_auth::{QuotaConfig, SCRAM_ITERATIONS_MIN};
use tinymq_client::{
    Admin, ClientConfig, Consumer, ConsumerConfig, Login, Producer, ProducerConfig, ProducerRecord,
    PutUserMode, ScramMechanism, StartFrom, TopicConfig,
};

const ADMIN_PASSWORD: &str = "quota-test-admin-password";
const PASSWORD: &str = "quota-test-password";
/// Alice's produce and fetch quotas: 200 KiB/s each.
const RATE: u64 = 200 * 1024;
/// Alice's first second spends the bucket's burst; her rate is measured after it.
const WARM_UP: Duration = Duration::from_secs(1);
const WINDOW: Duration = Duration::from_secs(5);
/// The achieved rate may be this far from the quota (request framing, the window's edges).
const RATE_TOLERANCE: f64 = 0.35;
/// Bob's throughput beside a throttled alice, as a share of his baseline, at least. On a
/// 2-core machine shared with other builds, the baseline itself varies by 2x; a collapse
/// (a starving neighbour) shows as a far smaller share.
const NEIGHBOUR_SHARE_MIN: f64 = 0.25;

fn login(addr: &str, user: &str, password: &str) -> ClientConfig {
    let mut config = ClientConfig::new(addr);
    config.security.login = Some(Login {
        mechanism: ScramMechanism::Sha256,
        user: user.into(),
        password: password.into(),
        authzid: None,
    });
    config
}

/// What one principal achieved in a measurement window.
struct Achieved {
    bytes: u64,
    elapsed: Duration,
}

impl Achieved {
    fn rate(&self) -> f64 {
        self.bytes as f64 / self.elapsed.as_secs_f64()
    }
}

/// Bob: one 100-byte record at a time, each awaited, until `stop`; the latency of each.
async fn small_messages(config: ClientConfig, topic: &str, stop: Arc<AtomicBool>) -> Vec<Duration> {
    let mut producer_config = ProducerConfig::new("");
    producer_config.client = config;
    producer_config.linger = Duration::ZERO;
    let producer = Producer::new(producer_config).unwrap();
    let value = Bytes::from(vec![b'b'; 100]);
    let mut latencies = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let delivery = producer.send(topic, ProducerRecord::value(value.clone()));
        delivery.await.unwrap().await.unwrap();
        latencies.push(started.elapsed());
    }
    producer.close().await;
    latencies
}

/// Bob alone or beside alice for `WARM_UP + WINDOW`: his messages per second over the window
/// (after the warm-up) and his latencies there.
async fn bob_during(
    addr: &str,
    topic: &'static str,
    alongside: impl std::future::Future<Output = Achieved>,
) -> (f64, Vec<Duration>, Achieved) {
    let stop = Arc::new(AtomicBool::new(false));
    let bob = tokio::spawn(small_messages(
        login(addr, "bob", PASSWORD),
        topic,
        stop.clone(),
    ));
    let measured = alongside.await;
    stop.store(true, Ordering::Relaxed);
    let latencies = bob.await.unwrap();
    // His first second is his warm-up too (connections, metadata).
    let total: Duration = latencies.iter().sum();
    let mut skipped = Duration::ZERO;
    let in_window: Vec<Duration> = latencies
        .into_iter()
        .skip_while(|l| {
            skipped += *l;
            skipped < WARM_UP
        })
        .collect();
    let window: Duration = in_window.iter().sum();
    assert!(
        !in_window.is_empty() && total > WARM_UP,
        "bob sent nothing after his warm-up"
    );
    let rate = in_window.len() as f64 / window.as_secs_f64();
    (rate, in_window, measured)
}

/// Sleeps through the warm-up and the window, reading `counter` at both ends.
async fn window_of(counter: &AtomicU64) -> Achieved {
    // Not waits: the warm-up and the window are the periods the rate is measured over.
    tokio::time::sleep(WARM_UP).await;
    let (from, started) = (counter.load(Ordering::Relaxed), Instant::now());
    tokio::time::sleep(WINDOW).await;
    Achieved {
        bytes: counter.load(Ordering::Relaxed) - from,
        elapsed: started.elapsed(),
    }
}

/// Alice produces 4 KiB records as fast as the producer allows; counts acknowledged bytes.
async fn alice_produces(addr: String, stop: Arc<AtomicBool>, acked: Arc<AtomicU64>) {
    let mut config = ProducerConfig::new("");
    config.client = login(&addr, "alice", PASSWORD);
    config.queue_records_max = 256;
    let producer = Producer::new(config).unwrap();
    let value = Bytes::from(vec![b'a'; 4096]);
    let mut pending = tokio::task::JoinSet::new();
    while !stop.load(Ordering::Relaxed) {
        let delivery = producer
            .send("alice-in", ProducerRecord::value(value.clone()))
            .await
            .unwrap();
        let acked = acked.clone();
        pending.spawn(async move {
            if delivery.await.is_ok() {
                acked.fetch_add(4096, Ordering::Relaxed);
            }
        });
        while pending.try_join_next().is_some() {}
    }
    producer.close().await;
}

/// Alice reads `alice-out` from the start as fast as the consumer allows; counts the bytes.
async fn alice_fetches(addr: String, stop: Arc<AtomicBool>, fetched: Arc<AtomicU64>) {
    let mut config = ConsumerConfig::new("");
    config.client = login(&addr, "alice", PASSWORD);
    config.start_from = StartFrom::Earliest;
    // Small responses, so that the window sees many of them.
    config.max_bytes = 32 << 10;
    config.partition_bytes_max = 32 << 10;
    let mut consumer = Consumer::new(config).unwrap();
    consumer.assign("alice-out", None).await.unwrap();
    while !stop.load(Ordering::Relaxed) {
        let records = consumer.poll(Duration::from_millis(200)).await.unwrap();
        let bytes: usize = records
            .iter()
            .map(|r| r.value.as_ref().map_or(0, |v| v.len()))
            .sum();
        fetched.fetch_add(bytes as u64, Ordering::Relaxed);
    }
}

/// The admin, once the server has created it (just after it starts listening).
async fn admin_when_bootstrapped(addr: &str) -> Admin {
    for _ in 0..100 {
        let admin = Admin::new(login(addr, "admin", ADMIN_PASSWORD)).unwrap();
        if admin.list_topics().await.is_ok() {
            return admin;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("the server did not create its admin user from --admin-password-file");
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn report(what: &str, rate: f64, latencies: &mut [Duration]) {
    latencies.sort();
    println!(
        "bob {what}: {rate:.0} msg/s, p50 {:?}, p99 {:?} over {} messages",
        percentile(latencies, 0.5),
        percentile(latencies, 0.99),
        latencies.len()
    );
}

fn assert_held(what: &str, achieved: &Achieved) {
    let rate = achieved.rate();
    println!(
        "alice {what}: {rate:.0} B/s against a quota of {RATE} B/s ({} bytes in {:?})",
        achieved.bytes, achieved.elapsed
    );
    let (low, high) = (
        RATE as f64 * (1.0 - RATE_TOLERANCE),
        RATE as f64 * (1.0 + RATE_TOLERANCE),
    );
    assert!(
        rate >= low && rate <= high,
        "alice's {what} rate {rate:.0} B/s is not within {RATE_TOLERANCE} of her quota {RATE}"
    );
}

fn metric(node: &Node, series: &str) -> f64 {
    let text = node.get("/metrics").body;
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn a_throttled_principal_is_held_to_its_rates_and_its_neighbour_is_not_starved() {
    let data = tempfile::tempdir().unwrap();
    let password_file = data.path().join("admin-password");
    std::fs::write(&password_file, ADMIN_PASSWORD).unwrap();
    let node = Node::spawn_in(
        &[
            "server",
            "--listen",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
            "--auth",
            "scram",
            "--admin-password-file",
            password_file.to_str().unwrap(),
            "--super-users",
            "User:admin,User:alice,User:bob",
        ],
        tempfile::tempdir().unwrap(),
        "tinymq listening on ",
    );
    let addr = node.native.clone();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let admin = admin_when_bootstrapped(&addr).await;
        for user in ["alice", "bob"] {
            let mechanisms = [ScramMechanism::Sha256];
            let (create, iterations) = (PutUserMode::Create, SCRAM_ITERATIONS_MIN);
            let created = admin.put_user(user, PASSWORD, create, &mechanisms, iterations);
            created.await.unwrap();
        }
        for topic in ["alice-in", "alice-out", "bob"] {
            let config = TopicConfig {
                partitions: 1,
                flush: "os".into(),
                ..TopicConfig::default()
            };
            admin.create_topic(topic, config).await.unwrap();
        }
        // What alice will fetch: more than her quota lets her read in the whole test.
        let mut config = ProducerConfig::new("");
        config.client = login(&addr, "admin", ADMIN_PASSWORD);
        let filler = Producer::new(config).unwrap();
        let value = Bytes::from(vec![b'f'; 4096]);
        let mut deliveries = Vec::new();
        for _ in 0..1024 {
            let record = ProducerRecord::value(value.clone());
            deliveries.push(filler.send("alice-out", record).await.unwrap());
        }
        filler.flush().await;
        for d in deliveries {
            d.await.unwrap();
        }
        filler.close().await;
    });

    // Bob alone.
    let (baseline, mut latencies, _) = runtime.block_on(bob_during(&addr, "bob", async {
        // Not a wait: bob's measured period with no load beside him.
        tokio::time::sleep(WARM_UP + WINDOW).await;
        Achieved {
            bytes: 0,
            elapsed: WINDOW,
        }
    }));
    report("alone", baseline, &mut latencies);

    // Alice produces, throttled. Her quota applies on the broker once its metadata has it
    // (at once here: the answer waits for that); her warm-up covers any lag.
    let quota = QuotaConfig {
        produce_bytes_per_sec: RATE,
        fetch_bytes_per_sec: RATE,
        requests_per_sec: 0,
    };
    runtime.block_on(async {
        let admin = Admin::new(login(&addr, "admin", ADMIN_PASSWORD)).unwrap();
        admin.set_quota("User:alice", &quota).await.unwrap();
    });
    let (beside, mut latencies, achieved) = runtime.block_on(async {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicU64::new(0));
        let alice = tokio::spawn(alice_produces(addr.clone(), stop.clone(), acked.clone()));
        let measured = bob_during(&addr, "bob", window_of(&acked)).await;
        stop.store(true, Ordering::Relaxed);
        alice.await.unwrap();
        measured
    });
    report("beside alice producing", beside, &mut latencies);
    assert_held("produce", &achieved);
    assert!(
        beside >= baseline * NEIGHBOUR_SHARE_MIN,
        "bob's throughput collapsed beside a throttled producer: {beside:.0} msg/s, alone {baseline:.0}"
    );

    // Alice fetches, throttled.
    let (beside, mut latencies, achieved) = runtime.block_on(async {
        let stop = Arc::new(AtomicBool::new(false));
        let fetched = Arc::new(AtomicU64::new(0));
        let alice = tokio::spawn(alice_fetches(addr.clone(), stop.clone(), fetched.clone()));
        let measured = bob_during(&addr, "bob", window_of(&fetched)).await;
        stop.store(true, Ordering::Relaxed);
        alice.await.unwrap();
        measured
    });
    report("beside alice fetching", beside, &mut latencies);
    assert_held("fetch", &achieved);
    assert!(
        beside >= baseline * NEIGHBOUR_SHARE_MIN,
        "bob's throughput collapsed beside a throttled consumer: {beside:.0} msg/s, alone {baseline:.0}"
    );

    // The broker counted alice's throttling, and none of bob's.
    let throttled = |principal: &str, kind: &str| {
        let series = format!(
            "tinymq_quota_throttled_requests_total{{principal=\"{principal}\",kind=\"{kind}\"}}"
        );
        metric(&node, &series)
    };
    assert!(throttled("User:alice", "produce") > 0.0);
    assert!(throttled("User:alice", "fetch") > 0.0);
    assert_eq!(throttled("User:bob", "produce"), 0.0);
}
