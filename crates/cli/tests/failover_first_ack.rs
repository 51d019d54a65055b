//! kill -9 of the leader of an RF 3 partition under a steady `acks=all` idempotent producer,
//! once with the native client (`Producer::send`) and once with confluent-kafka (librdkafka)
//! through the brokers' Kafka listeners. Each run prints how long after the kill the first
//! record *sent after the kill* was acknowledged, and the longest pause between two
//! acknowledgements: the figures issue 31's 2 s bar is about. No duration is asserted (that
//! bar is the benchmark's); what is asserted is that every record was acknowledged and is
//! stored exactly once.

mod common;
mod kafka_clients;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::cluster::{describe, stored, tool_ok, wait_all_in_sync, Cluster};
use kafka_clients::{python_script, CLIENT_RUN_LIMIT};
use serde_json::Value;
use tinymq_client::{Producer, ProducerConfig, ProducerRecord};

/// Records each producer sends, one every [`PACE`]: about 3 s before the kill and the rest
/// after it.
const RECORDS: usize = 1200;
const KILL_AFTER_ACKS: usize = 300;
const PACE: Duration = Duration::from_millis(10);

/// An RF 3 topic with one partition, every replica in sync; answers its leader's broker id.
fn rf3_topic(cluster: &Cluster, topic: &str) -> u32 {
    let all = cluster.bootstrap();
    tool_ok(&[
        "topic",
        "create",
        topic,
        "--partitions",
        "1",
        "--replicas",
        "3",
        "--bootstrap",
        &all,
    ]);
    wait_all_in_sync(topic, &all);
    let leader = describe(topic, &all)[0].leader;
    u32::try_from(leader).expect("a broker id")
}

/// One acknowledgement: when its record was handed to the client and when it was answered,
/// in seconds on the same clock as the kill.
struct Ack {
    sent: f64,
    acked: f64,
}

/// Prints the figures and checks that `values` (the acknowledged ones) are stored once each.
fn report(client: &str, kill: f64, acks: &[Ack], values: &[String], topic: &str, at: &str) {
    let first = acks
        .iter()
        .filter(|a| a.sent > kill)
        .map(|a| a.acked)
        .fold(f64::INFINITY, f64::min);
    let mut times: Vec<f64> = acks.iter().map(|a| a.acked).collect();
    times.sort_by(f64::total_cmp);
    let pause = times.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max);
    println!(
        "{client}: first acknowledgement of a record sent after the kill {:.0} ms after it; \
         longest pause between acknowledgements {:.0} ms",
        (first - kill) * 1e3,
        pause * 1e3
    );
    assert!(
        first.is_finite(),
        "{client}: nothing sent after the kill was acknowledged"
    );
    assert_eq!(
        acks.len(),
        RECORDS,
        "{client}: every record is acknowledged"
    );
    let mut expected = values.to_vec();
    expected.sort();
    assert_eq!(stored(topic, at), expected, "{client}: stored once each");
}

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_producer_acknowledges_again_soon_after_its_leader_is_killed() {
    let mut cluster = Cluster::start(3);
    let leader = rf3_topic(&cluster, "fa");
    let producer = Producer::new(ProducerConfig::new(&cluster.bootstrap())).unwrap();
    let acks: Arc<Mutex<Vec<(Ack, String)>>> = Arc::default();
    let mut deliveries = tokio::task::JoinSet::new();
    let mut kill = None;
    for i in 0..RECORDS {
        if kill.is_none() && acks.lock().unwrap().len() >= KILL_AFTER_ACKS {
            cluster.kill9(leader);
            kill = Some(now_s());
        }
        let value = format!("f-{i:06}");
        let sent = now_s();
        let delivery = producer
            .send("fa", ProducerRecord::value(value.clone()))
            .await
            .expect("queued");
        let acks = acks.clone();
        deliveries.spawn(async move {
            let result = delivery.await;
            let acked = now_s();
            result.unwrap_or_else(|e| panic!("{value} failed: {e}"));
            acks.lock().unwrap().push((Ack { sent, acked }, value));
        });
        // Not a wait: paces the producer to a steady stream.
        tokio::time::sleep(PACE).await;
    }
    while let Some(done) = deliveries.join_next().await {
        done.expect("delivery task");
    }
    let kill = kill.expect("the leader was killed before the last record");
    let (acks, values): (Vec<Ack>, Vec<String>) = Arc::try_unwrap(acks)
        .ok()
        .unwrap()
        .into_inner()
        .unwrap()
        .into_iter()
        .unzip();
    report(
        "native",
        kill,
        &acks,
        &values,
        "fa",
        cluster.live_other_than(leader),
    );
}

#[test]
fn kafka_producer_acknowledges_again_soon_after_its_leader_is_killed() {
    let mut cluster = Cluster::start_with_kafka(3);
    let leader = rf3_topic(&cluster, "fk");
    let kafka = cluster.kafka_addrs.join(",");
    let (records, pace) = (RECORDS.to_string(), PACE.as_millis().to_string());
    let mut command = python_script("confluent_clients.py", "confluent_kafka");
    command.args(["steady-acks", &kafka, "fk", &records, &pace]);
    let mut child = command.stdout(Stdio::piped()).spawn().expect("python");
    let started = Instant::now();
    let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let (mut acks, mut values, mut kill, mut summary) = (Vec::new(), Vec::new(), None, None);
    for line in lines {
        let line = line.expect("read the client's output");
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
        assert!(v.get("error").is_none(), "confluent-kafka: {line}");
        if v.get("done").is_some() {
            summary = Some(v);
            continue;
        }
        let ack = |key: &str| v[key].as_f64().unwrap_or_else(|| panic!("{key} in {line}"));
        acks.push(Ack {
            sent: ack("sent"),
            acked: ack("acked"),
        });
        values.push(v["value"].as_str().expect("value").to_string());
        if kill.is_none() && acks.len() >= KILL_AFTER_ACKS {
            cluster.kill9(leader);
            kill = Some(now_s());
        }
        assert!(started.elapsed() < CLIENT_RUN_LIMIT, "the client hangs");
    }
    let status = child.wait().expect("python exits");
    assert!(status.success(), "confluent-kafka exited with {status}");
    assert!(summary.is_some(), "the client printed its summary");
    let kill = kill.expect("the leader was killed before the last record");
    report(
        "confluent-kafka",
        kill,
        &acks,
        &values,
        "fk",
        cluster.live_other_than(leader),
    );
}
