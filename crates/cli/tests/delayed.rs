//! Delayed delivery against a real server process: 10,000 records sent with random delays of
//! 0–30 s are each delivered exactly once, none before its deliver-at time, in deliver-at
//! order within each partition — on a server left alone and, at the same time, on one
//! SIGKILLed and restarted in the middle of the deliveries. Lateness (receive time minus
//! deliver-at) is printed, not asserted. Also `produce --tag/--delay/--deliver-at`.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use common::Server;
use tinymq_client::{
    Admin, ClientConfig, Consumer, ConsumerConfig, Producer, ProducerConfig, ProducerRecord,
    StartFrom, TopicConfig,
};

const RECORDS: usize = 10_000;
const DELAY_MS_MAX: i64 = 30_000;
const TOPIC: &str = "later";
const PARTITIONS: u32 = 3;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// splitmix64: reproducible delays from the printed seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

async fn create_topic(addr: &str) {
    let admin = Admin::new(ClientConfig::new(addr)).unwrap();
    let config = TopicConfig {
        partitions: PARTITIONS,
        ..TopicConfig::default()
    };
    admin.create_topic(TOPIC, config).await.unwrap();
}

/// Sends every record with `send_at`; returns each record's asked and accepted deliver-at.
async fn send_all(addr: &str, seed: u64) -> Vec<(i64, i64)> {
    let producer = Producer::new(ProducerConfig::new(addr)).unwrap();
    let mut rng = Rng(seed);
    let mut pending = Vec::with_capacity(RECORDS);
    for i in 0..RECORDS {
        let asked = now_ms() + (rng.next() % (DELAY_MS_MAX as u64 + 1)) as i64;
        let record = ProducerRecord::value(i.to_string()).with_key(format!("k{}", i % 97));
        pending.push((asked, producer.send_at(TOPIC, record, asked).await.unwrap()));
    }
    let mut times = Vec::with_capacity(RECORDS);
    let started = now_ms();
    for (asked, delivery) in pending {
        let accepted = delivery.await.expect("stored in the timer log");
        assert!(
            accepted.deliver_at_ms >= asked,
            "the broker moved a time earlier"
        );
        times.push((asked, accepted.deliver_at_ms));
    }
    let sent = now_ms();
    println!(
        "sent {RECORDS} delayed records; the last acknowledged {} ms after the first send",
        sent - started
    );
    SENT_MS.store(sent, std::sync::atomic::Ordering::Relaxed);
    times
}

/// When the last send was acknowledged (the later of the two runs), to report lateness apart
/// for records due after the sending load.
static SENT_MS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// What the consumer saw: per (partition, offset), the record's id, its `tinymq.deliver-at`
/// header and when it was first received.
type Seen = BTreeMap<(u32, i64), (usize, i64, i64)>;

/// Reads the topic from the start until `until` says stop (or `deadline`), adding to `seen`.
async fn consume(addr: &str, seen: &mut Seen, deadline: Instant, until: impl Fn(&Seen) -> bool) {
    let mut config = ConsumerConfig::new(addr);
    config.start_from = StartFrom::Earliest;
    let mut consumer = Consumer::new(config).unwrap();
    consumer.assign(TOPIC, None).await.unwrap();
    while !until(seen) && Instant::now() < deadline {
        let Ok(records) = consumer.poll(Duration::from_millis(200)).await else {
            continue;
        };
        let received = now_ms();
        for r in records {
            let id: usize = std::str::from_utf8(r.value.as_deref().unwrap())
                .unwrap()
                .parse()
                .unwrap();
            let header = r.headers.iter().find(|(k, _)| k == "tinymq.deliver-at");
            let value = header
                .and_then(|(_, v)| v.as_deref())
                .expect("a tinymq.deliver-at header");
            let deliver_at: i64 = std::str::from_utf8(value).unwrap().parse().unwrap();
            seen.entry((r.partition, r.offset))
                .or_insert((id, deliver_at, received));
        }
    }
}

/// Checks exactly once, never early, per-partition order; prints lateness figures.
fn check(name: &str, times: &[(i64, i64)], seen: &Seen) {
    let mut count = vec![0usize; RECORDS];
    let mut last_in_partition: HashMap<u32, i64> = HashMap::new();
    let mut lateness = Vec::with_capacity(RECORDS);
    let mut quiet_lateness = Vec::with_capacity(RECORDS);
    let sent = SENT_MS.load(std::sync::atomic::Ordering::Relaxed);
    for (&(partition, _), &(id, deliver_at, received)) in seen {
        count[id] += 1;
        let (asked, accepted) = times[id];
        assert_eq!(
            deliver_at, accepted,
            "{name}: record {id} carries another deliver-at"
        );
        assert!(
            received >= asked,
            "{name}: record {id} received {} ms early",
            asked - received
        );
        let last = last_in_partition.entry(partition).or_insert(i64::MIN);
        assert!(
            deliver_at >= *last,
            "{name}: partition {partition} out of deliver-at order"
        );
        *last = deliver_at;
        lateness.push(received - accepted);
        if accepted > sent {
            quiet_lateness.push(received - accepted);
        }
    }
    let lost = count.iter().filter(|c| **c == 0).count();
    let doubled = count.iter().filter(|c| **c > 1).count();
    assert_eq!(
        (lost, doubled),
        (0, 0),
        "{name}: records lost, delivered twice"
    );
    println!(
        "{name}: {RECORDS} delayed records, each once, none early; lateness ms {}; of the {} due after the sending ended: {}",
        percentiles(&mut lateness),
        quiet_lateness.len(),
        percentiles(&mut quiet_lateness)
    );
}

fn percentiles(ms: &mut [i64]) -> String {
    if ms.is_empty() {
        return "none".into();
    }
    ms.sort_unstable();
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q) as usize];
    format!("p50 {} p99 {} max {}", at(0.5), at(0.99), at(1.0))
}

async fn left_alone(seed: u64) {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    create_topic(&server.addr).await;
    let times = send_all(&server.addr, seed).await;
    let mut seen = Seen::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    consume(&server.addr, &mut seen, deadline, |s| s.len() >= RECORDS).await;
    // A little longer, to see a duplicate if there were one.
    let settle = Instant::now() + Duration::from_secs(1);
    consume(&server.addr, &mut seen, settle, |_| false).await;
    check("left alone", &times, &seen);
}

async fn killed_and_restarted(seed: u64) {
    let tmp = tempfile::tempdir().unwrap();
    let mut server = Server::start(tmp.path());
    create_topic(&server.addr).await;
    let started = Instant::now();
    let times = send_all(&server.addr, seed).await;
    let mut seen = Seen::new();
    // Consume until about the middle of the delivery window, then kill the server.
    let middle = started + Duration::from_millis(DELAY_MS_MAX as u64 / 2);
    consume(&server.addr, &mut seen, middle, |_| false).await;
    let before_kill = seen.len();
    server.kill9();
    let server = Server::start(tmp.path());
    let deadline = Instant::now() + Duration::from_secs(90);
    consume(&server.addr, &mut seen, deadline, |s| s.len() >= RECORDS).await;
    let settle = Instant::now() + Duration::from_secs(1);
    consume(&server.addr, &mut seen, settle, |_| false).await;
    println!("SIGKILL after {before_kill} of {RECORDS} records were received");
    assert!(before_kill < RECORDS, "the kill came after every delivery");
    check("SIGKILL and restart", &times, &seen);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_delayed_records_arrive_once_in_order_never_early_across_a_sigkill() {
    let seed = std::env::var("DELAYED_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| now_ms() as u64);
    println!("seed {seed} (DELAYED_SEED={seed} repeats it)");
    let alone = tokio::spawn(left_alone(seed));
    let killed = tokio::spawn(killed_and_restarted(seed ^ 0x5555));
    alone.await.unwrap();
    killed.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_tag_and_delay_flags() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    create_topic(&server.addr).await;
    let sent = now_ms();
    server.run_tool(
        &["produce", TOPIC, "--tag", "red", "--delay", "2s"],
        b"a\nb\n",
    );
    let at = (now_ms() + 1000).to_string();
    server.run_tool(&["produce", TOPIC, "--deliver-at", &at], b"c\n");
    let both = common::run_with_input(
        &mut server.tool(&["produce", TOPIC, "--deliver-at", &at, "--delay", "1s"]),
        b"x\n",
    );
    assert!(
        !both.status.success(),
        "--deliver-at and --delay together are refused"
    );
    let late = common::run_with_input(
        &mut server.tool(&["produce", TOPIC, "--delay", "8d"]),
        b"x\n",
    );
    assert!(!late.status.success(), "a delay past 7 days is refused");
    assert!(String::from_utf8_lossy(&late.stderr).contains("INVALID_DELIVERY_TIME"));

    let deadline = Instant::now() + Duration::from_secs(30);
    let mut config = ConsumerConfig::new(&server.addr);
    config.start_from = StartFrom::Earliest;
    let mut consumer = Consumer::new(config).unwrap();
    consumer.assign(TOPIC, None).await.unwrap();
    let mut values = BTreeMap::new();
    while values.len() < 3 && Instant::now() < deadline {
        for r in consumer.poll(Duration::from_millis(200)).await.unwrap() {
            let value = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
            let tag = r
                .headers
                .iter()
                .find(|(k, _)| k == "tag")
                .and_then(|(_, v)| v.clone());
            let has_deliver_at = r.headers.iter().any(|(k, _)| k == "tinymq.deliver-at");
            values.insert(value, (tag, has_deliver_at, now_ms()));
        }
    }
    assert_eq!(values.len(), 3, "{values:?}");
    for (value, (tag, has_deliver_at, received)) in &values {
        assert!(has_deliver_at, "{value} carries tinymq.deliver-at");
        let expected_tag = (value != "c").then(|| bytes::Bytes::from_static(b"red"));
        assert_eq!(tag, &expected_tag, "{value}");
        if value != "c" {
            assert!(
                *received >= sent + 2000,
                "{value} arrived before its 2 s delay"
            );
        }
    }
}
