//! Half messages (transactional messages with check-back) with tinymq's own client: a half is
//! invisible until committed and never visible once rolled back; a retried HalfEnd answers
//! as the first one did; a producer that stays silent is checked back by another member of
//! its group; halves nobody answers are rolled back after the broker's checks; bad requests
//! get clear errors.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::node::Server;
use tinymq_client::{
    Admin, ClientConfig, ClientError, Consumer, ConsumerConfig, HalfDecision, Producer,
    ProducerConfig, ProducerRecord, StartFrom, TopicConfig,
};
use tinymq_protocol::ErrorCode;

async fn topic(admin: &Admin, name: &str, partitions: u32) {
    let config = TopicConfig {
        partitions,
        ..TopicConfig::default()
    };
    admin.create_topic(name, config).await.unwrap();
}

/// Every record of `topic` now, value -> (count, its `tinymq.half-id` header): polls until
/// three polls in a row bring nothing.
async fn read(addr: &str, topic: &str) -> BTreeMap<String, (usize, Option<String>)> {
    let mut config = ConsumerConfig::new(addr);
    config.start_from = StartFrom::Earliest;
    let mut consumer = Consumer::new(config).unwrap();
    consumer.assign(topic, None).await.unwrap();
    let mut values: BTreeMap<String, (usize, Option<String>)> = BTreeMap::new();
    let mut quiet = 0;
    while quiet < 3 {
        let records = consumer.poll(Duration::from_millis(300)).await.unwrap();
        quiet = if records.is_empty() { quiet + 1 } else { 0 };
        for r in records {
            let value = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
            let header = r
                .headers
                .iter()
                .find(|(k, _)| k == "tinymq.half-id")
                .and_then(|(_, v)| v.as_ref())
                .map(|v| String::from_utf8_lossy(v).into_owned());
            let entry = values.entry(value).or_default();
            entry.0 += 1;
            entry.1 = header;
        }
    }
    values
}

fn code(e: &ClientError) -> Option<ErrorCode> {
    e.code()
}

fn record(value: &str) -> ProducerRecord {
    ProducerRecord::value(value.to_string()).with_key(value.to_string())
}

async fn wait_for(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_appears_only_when_committed_and_a_retry_answers_as_the_first() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let admin = Admin::new(ClientConfig::new(&server.addr)).unwrap();
    topic(&admin, "orders", 3).await;
    let producer = Producer::new(ProducerConfig::new(&server.addr)).unwrap();
    let hour = Duration::from_secs(3600);
    let kept = producer
        .send_half(
            "shop",
            "orders",
            vec![record("kept-1"), record("kept-2")],
            hour,
        )
        .await
        .unwrap();
    let dropped = producer
        .send_half("shop", "orders", vec![record("dropped")], hour)
        .await
        .unwrap();
    assert_ne!(kept.id, dropped.id);
    // Stored, unresolved: nobody sees them, the operator's list does.
    assert!(read(&server.addr, "orders").await.is_empty());
    let listed = admin.list_halves(Some("shop")).await.unwrap();
    let ids: Vec<i64> = listed.iter().map(|h| h.half_id).collect();
    assert_eq!(ids, vec![kept.id, dropped.id], "{listed:?}");
    assert_eq!(listed[0].records, 2);
    assert_eq!(listed[0].state, "pending");

    let offset = kept.commit().await.unwrap();
    assert!(offset >= 0);
    dropped.rollback().await.unwrap();
    // Retries answer as the first did; the other outcome is refused.
    assert_eq!(kept.commit().await.unwrap(), offset);
    dropped.rollback().await.unwrap();
    let e = kept.rollback().await.unwrap_err();
    assert_eq!(code(&e), Some(ErrorCode::HALF_MESSAGE_RESOLVED), "{e}");
    let e = dropped.commit().await.unwrap_err();
    assert_eq!(code(&e), Some(ErrorCode::HALF_MESSAGE_RESOLVED), "{e}");
    assert!(e.to_string().contains("rolled back (producer)"), "{e}");

    let values = read(&server.addr, "orders").await;
    assert_eq!(values.keys().collect::<Vec<_>>(), ["kept-1", "kept-2"]);
    for (value, (count, header)) in &values {
        assert_eq!(*count, 1, "{value}");
        let header = header.as_deref().unwrap_or_default();
        // <topic id>.<partition>.<half id>.<nonce>
        let parts: Vec<&str> = header.split('.').collect();
        assert_eq!(parts.len(), 4, "{header}");
        assert_eq!(parts[2], kept.id.to_string(), "{header}");
    }
    // Both records landed together, in the half's partition.
    let mut config = ConsumerConfig::new(&server.addr);
    config.start_from = StartFrom::Earliest;
    let mut consumer = Consumer::new(config).unwrap();
    consumer
        .assign("orders", Some(vec![kept.partition]))
        .await
        .unwrap();
    let records = consumer.poll(Duration::from_secs(5)).await.unwrap();
    let offsets: Vec<i64> = records.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, vec![offset, offset + 1]);
    assert!(admin.list_halves(Some("shop")).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_producer_is_checked_back_by_another_member_of_its_group() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start_tuned(tmp.path(), |c| {
        c.half_check_interval = Duration::from_millis(200);
        c.half_checks_max = 5;
    });
    let admin = Admin::new(ClientConfig::new(&server.addr)).unwrap();
    topic(&admin, "outbox", 2).await;
    // The producer that stores the halves and then "dies" (never resolves them).
    let gone = Producer::new(ProducerConfig::new(&server.addr)).unwrap();
    let after = Duration::from_millis(100);
    let committed = gone
        .send_half("billing", "outbox", vec![record("paid")], after)
        .await
        .unwrap();
    let rolled_back = gone
        .send_half("billing", "outbox", vec![record("refused")], after)
        .await
        .unwrap();
    // Another group's half is never offered to this group's member.
    let other = gone
        .send_half(
            "other",
            "outbox",
            vec![record("other")],
            Duration::from_secs(3600),
        )
        .await
        .unwrap();
    drop(gone);

    let member = Producer::new(ProducerConfig::new(&server.addr)).unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = seen.clone();
    let checker = member.check_halves("billing", move |check| {
        let s = s.clone();
        async move {
            let value = check.records[0].value.clone().unwrap();
            s.lock()
                .unwrap()
                .push((check.id, check.check_number, value.clone()));
            // The local transaction's outcome, as a database would tell it.
            if value.as_ref() == b"paid" {
                HalfDecision::Commit
            } else {
                HalfDecision::Rollback
            }
        }
    });
    wait_for("both halves resolved", async || {
        admin.list_halves(Some("billing")).await.unwrap().is_empty()
    })
    .await;
    checker.stop();
    let seen = seen.lock().unwrap().clone();
    let ids: Vec<i64> = seen.iter().map(|(id, _, _)| *id).collect();
    assert!(
        ids.contains(&committed.id) && ids.contains(&rolled_back.id),
        "{seen:?}"
    );
    // (Ids are per group's partition: the other group's is told apart by its content.)
    assert!(
        seen.iter().all(|(_, _, v)| v.as_ref() != b"other"),
        "{seen:?}"
    );
    other.rollback().await.unwrap();
    assert!(seen.iter().all(|(_, n, _)| *n == 1), "{seen:?}");
    let values = read(&server.addr, "outbox").await;
    assert_eq!(values.keys().collect::<Vec<_>>(), ["paid"], "{values:?}");
    assert_eq!(values["paid"].0, 1);
    // The producer's own late commit of the checked half is answered as done.
    let late = member
        .end_half("billing", "outbox", committed.id, true)
        .await
        .unwrap();
    assert!(late >= 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn halves_nobody_resolves_are_rolled_back_after_the_checks() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start_tuned(tmp.path(), |c| {
        c.half_check_interval = Duration::from_millis(150);
        c.half_checks_max = 3;
    });
    let admin = Admin::new(ClientConfig::new(&server.addr)).unwrap();
    topic(&admin, "undecided", 1).await;
    let producer = Producer::new(ProducerConfig::new(&server.addr)).unwrap();
    let after = Duration::from_millis(50);
    let asked = producer
        .send_half("maybe", "undecided", vec![record("asked")], after)
        .await
        .unwrap();
    // No member of this group ever polls: rolled back at the deadline.
    let lonely = producer
        .send_half("nobody", "undecided", vec![record("lonely")], after)
        .await
        .unwrap();
    let checks = Arc::new(AtomicU32::new(0));
    let c = checks.clone();
    let checker = producer.check_halves("maybe", move |_| {
        c.fetch_add(1, Ordering::Relaxed);
        async { HalfDecision::Unknown }
    });
    wait_for("both halves rolled back", async || {
        admin.list_halves(None).await.unwrap().is_empty()
    })
    .await;
    checker.stop();
    assert_eq!(checks.load(Ordering::Relaxed), 3);
    let e = asked.commit().await.unwrap_err();
    assert_eq!(code(&e), Some(ErrorCode::HALF_MESSAGE_RESOLVED), "{e}");
    assert!(e.to_string().contains("checks exhausted"), "{e}");
    let e = lonely.commit().await.unwrap_err();
    assert!(e.to_string().contains("lifetime"), "{e}");
    assert!(read(&server.addr, "undecided").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_half_requests_get_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let admin = Admin::new(ClientConfig::new(&server.addr)).unwrap();
    topic(&admin, "t", 2).await;
    let producer = Producer::new(ProducerConfig::new(&server.addr)).unwrap();
    let hour = Duration::from_secs(3600);
    let e = producer
        .send_half("g", "t", vec![], hour)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("at least one record"), "{e}");
    let e = producer
        .send_half("g", "t", vec![record("x")], Duration::from_secs(3601))
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some(ErrorCode::INVALID_REQUEST), "{e}");
    let e = producer
        .send_half("bad group!", "t", vec![record("x")], hour)
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some(ErrorCode::INVALID_GROUP_ID), "{e}");
    let e = producer
        .send_half("g", "nope", vec![record("x")], hour)
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION), "{e}");
    let half = producer
        .send_half("g", "t", vec![record("x")], hour)
        .await
        .unwrap();
    let e = producer
        .end_half("g", "other-topic", half.id, true)
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some(ErrorCode::INVALID_REQUEST), "{e}");
    let e = producer
        .end_half("g", "t", half.id + 1000, true)
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some(ErrorCode::HALF_MESSAGE_NOT_FOUND), "{e}");
    // Another group cannot resolve it.
    let e = producer
        .end_half("h", "t", half.id, true)
        .await
        .unwrap_err();
    assert_eq!(code(&e), Some(ErrorCode::HALF_MESSAGE_NOT_FOUND), "{e}");
    half.rollback().await.unwrap();
    // A half whose topic is deleted before the commit is rolled back, saying why.
    topic(&admin, "short-lived", 1).await;
    let orphan = producer
        .send_half("g", "short-lived", vec![record("x")], hour)
        .await
        .unwrap();
    admin.delete_topic("short-lived").await.unwrap();
    let e = orphan.commit().await.unwrap_err();
    assert_eq!(code(&e), Some(ErrorCode::HALF_MESSAGE_RESOLVED), "{e}");
    assert!(e.to_string().contains("topic deleted"), "{e}");
}
