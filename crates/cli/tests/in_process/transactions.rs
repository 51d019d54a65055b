//! Transactions on the native port with tinymq's own client: commits and aborts across
//! partitions as read-committed and read-uncommitted consumers see them, fencing of an older
//! instance of a transactional id, the abort of an abandoned transaction at its timeout, and
//! offsets committed inside a transaction.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::node::Server;
use tinymq_client::{
    Admin, ClientConfig, ClientError, Consumer, ConsumerConfig, Isolation, Producer,
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

fn transactional(addr: &str, id: &str, timeout: Duration) -> Producer {
    let mut config = ProducerConfig::new(addr);
    config.transactional_id = Some(id.to_string());
    config.transaction_timeout = timeout;
    Producer::new(config).unwrap()
}

/// Sends `count` records `prefix0..` keyed to spread over the partitions; waits for each.
async fn send(producer: &Producer, topic: &str, prefix: &str, count: usize) {
    let mut deliveries = Vec::new();
    for i in 0..count {
        let record = ProducerRecord::value(format!("{prefix}{i}")).with_key(format!("k{i}"));
        deliveries.push(producer.send(topic, record).await.unwrap());
    }
    for d in deliveries {
        d.await.unwrap();
    }
}

/// Every value of `topic` readable under `isolation` now, with how often each appears:
/// polls until three polls in a row bring nothing.
async fn read(addr: &str, topic: &str, isolation: Isolation) -> BTreeMap<String, usize> {
    let mut config = ConsumerConfig::new(addr);
    config.start_from = StartFrom::Earliest;
    config.isolation = isolation;
    let mut consumer = Consumer::new(config).unwrap();
    consumer.assign(topic, None).await.unwrap();
    let mut values = BTreeMap::new();
    let mut quiet = 0;
    while quiet < 3 {
        let records = consumer.poll(Duration::from_millis(300)).await.unwrap();
        quiet = if records.is_empty() { quiet + 1 } else { 0 };
        for r in records {
            let value = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
            *values.entry(value).or_default() += 1;
        }
    }
    values
}

fn count_prefix(values: &BTreeMap<String, usize>, prefix: &str) -> usize {
    values
        .iter()
        .filter(|(v, _)| v.starts_with(prefix))
        .map(|(_, n)| *n)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_sees_committed_transactions_whole_and_never_aborted_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let admin = Admin::new(ClientConfig::new(&server.addr)).unwrap();
    topic(&admin, "tx", 3).await;
    let producer = transactional(&server.addr, "t1", Duration::from_secs(60));
    let early = producer.begin_transaction().unwrap_err();
    assert!(early.to_string().contains("init_transactions"), "{early}");
    producer.init_transactions().await.unwrap();

    producer.begin_transaction().unwrap();
    send(&producer, "tx", "c", 30).await;
    producer.commit_transaction().await.unwrap();
    producer.begin_transaction().unwrap();
    send(&producer, "tx", "a", 20).await;
    producer.abort_transaction().await.unwrap();
    producer.begin_transaction().unwrap();
    send(&producer, "tx", "o", 10).await;

    // The third transaction is open: read-committed stops at its first offset.
    let committed = read(&server.addr, "tx", Isolation::ReadCommitted).await;
    assert_eq!(count_prefix(&committed, "c"), 30, "{committed:?}");
    assert_eq!(count_prefix(&committed, "a"), 0, "{committed:?}");
    assert_eq!(count_prefix(&committed, "o"), 0, "{committed:?}");
    assert!(committed.values().all(|n| *n == 1), "{committed:?}");
    let everything = read(&server.addr, "tx", Isolation::ReadUncommitted).await;
    assert_eq!(
        everything.len(),
        60,
        "every record, none twice: {everything:?}"
    );

    let open = admin.describe_transaction("t1").await.unwrap();
    assert_eq!(open.state, "Ongoing");
    assert!(!open.topics.is_empty());
    producer.commit_transaction().await.unwrap();
    let committed = read(&server.addr, "tx", Isolation::ReadCommitted).await;
    assert_eq!(count_prefix(&committed, "o"), 10, "{committed:?}");
    assert_eq!(committed.len(), 40, "{committed:?}");
    let listed = admin.list_transactions().await.unwrap();
    assert!(
        listed
            .iter()
            .any(|t| t.transactional_id == "t1" && t.state == "CompleteCommit"),
        "{listed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_instance_fences_the_old_one_and_aborts_its_open_transaction() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let admin = Admin::new(ClientConfig::new(&server.addr)).unwrap();
    topic(&admin, "fenced", 2).await;
    let old = transactional(&server.addr, "shared-id", Duration::from_secs(60));
    old.init_transactions().await.unwrap();
    old.begin_transaction().unwrap();
    send(&old, "fenced", "zombie", 8).await;

    let new = transactional(&server.addr, "shared-id", Duration::from_secs(60));
    new.init_transactions().await.unwrap();
    new.begin_transaction().unwrap();
    send(&new, "fenced", "fresh", 8).await;
    new.commit_transaction().await.unwrap();

    let refused = old.commit_transaction().await.unwrap_err();
    assert_eq!(
        refused.code(),
        Some(ErrorCode::PRODUCER_FENCED),
        "{refused}"
    );
    let committed = read(&server.addr, "fenced", Isolation::ReadCommitted).await;
    assert_eq!(count_prefix(&committed, "fresh"), 8, "{committed:?}");
    assert_eq!(count_prefix(&committed, "zombie"), 0, "{committed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_transaction_is_aborted_at_its_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let admin = Admin::new(ClientConfig::new(&server.addr)).unwrap();
    topic(&admin, "abandoned", 1).await;
    let gone = transactional(&server.addr, "gone", Duration::from_millis(1500));
    gone.init_transactions().await.unwrap();
    gone.begin_transaction().unwrap();
    send(&gone, "abandoned", "lost", 5).await;
    drop(gone);

    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let state = admin.describe_transaction("gone").await.unwrap();
        if state.state == "CompleteAbort" {
            assert_eq!(
                state.producer_epoch, 1,
                "the abort bumped the epoch: {state:?}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "still {state:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The partition's last stable offset moved past it: a later transaction is readable.
    let later = transactional(&server.addr, "later", Duration::from_secs(60));
    later.init_transactions().await.unwrap();
    later.begin_transaction().unwrap();
    send(&later, "abandoned", "kept", 3).await;
    later.commit_transaction().await.unwrap();
    let committed = read(&server.addr, "abandoned", Isolation::ReadCommitted).await;
    assert_eq!(count_prefix(&committed, "kept"), 3, "{committed:?}");
    assert_eq!(count_prefix(&committed, "lost"), 0, "{committed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_sent_to_a_transaction_count_only_when_it_commits() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let admin = Admin::new(ClientConfig::new(&server.addr)).unwrap();
    topic(&admin, "src", 1).await;
    topic(&admin, "dst", 1).await;
    let producer = transactional(&server.addr, "copier", Duration::from_secs(60));
    producer.init_transactions().await.unwrap();

    producer.begin_transaction().unwrap();
    send(&producer, "dst", "x", 2).await;
    producer
        .send_offsets_to_transaction("copiers", &[("src".into(), 0, 7)])
        .await
        .unwrap();
    producer.abort_transaction().await.unwrap();
    let group = admin.describe_group("copiers").await;
    let committed = |g: &Result<tinymq_client::DescribeGroupResponse, ClientError>| {
        g.as_ref().ok().and_then(|g| {
            g.offsets
                .iter()
                .find(|o| o.topic == "src")
                .map(|o| o.offset)
        })
    };
    assert_eq!(
        committed(&group),
        None,
        "an aborted transaction's offsets: {group:?}"
    );

    producer.begin_transaction().unwrap();
    send(&producer, "dst", "y", 2).await;
    producer
        .send_offsets_to_transaction("copiers", &[("src".into(), 0, 9)])
        .await
        .unwrap();
    // KIP-447: while the transaction is open, a fetch that requires stable offsets is told to
    // wait; one that does not sees what is committed now (nothing).
    let addr = server.addr.clone();
    let (stable, plain) = tokio::task::spawn_blocking(move || {
        let mut c = crate::common::RawClient::handshaken(&addr);
        let mut ask = |require_stable| {
            c.call(&tinymq_protocol::messages::OffsetFetchRequest {
                group_id: "copiers".into(),
                partitions: vec![tinymq_protocol::messages::TopicPartitions {
                    topic: "src".into(),
                    partitions: vec![0],
                }],
                require_stable,
            })
        };
        (ask(true), ask(false))
    })
    .await
    .unwrap();
    let unstable = stable.offsets[0].error.as_ref().map(|e| e.error_code());
    assert_eq!(
        unstable,
        Some(ErrorCode::UNSTABLE_OFFSET_COMMIT),
        "{stable:?}"
    );
    assert_eq!(stable.offsets[0].offset, -1);
    assert_eq!(
        (plain.offsets[0].offset, &plain.offsets[0].error),
        (-1, &None)
    );
    producer.commit_transaction().await.unwrap();
    // The marker on the offsets partition is written after EndTxn is answered.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let group = admin.describe_group("copiers").await;
        if committed(&group) == Some(9) {
            break;
        }
        assert!(Instant::now() < deadline, "{group:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// KIP-890's defence: a transactional batch to a partition not added to the producer's
/// transaction is refused and holds nothing back; once added, it opens the transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transactional_batch_to_a_partition_not_in_the_transaction_is_refused() {
    use tinymq_protocol::batch::{BatchBuilder, Compression, ProducerStamp, RecordInput};
    use tinymq_protocol::messages as m;
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let admin = Admin::new(ClientConfig::new(&server.addr)).unwrap();
    topic(&admin, "guarded", 1).await;
    let c = tinymq_client::Connection::connect(&server.addr, "raw", "")
        .await
        .unwrap();
    let wait = Duration::from_secs(10);
    // The id's producer id and epoch, as a client gets them (retrying while the coordinator's
    // partition is created and loaded).
    let deadline = Instant::now() + Duration::from_secs(30);
    let init = loop {
        let find = m::FindCoordinatorRequest {
            group_id: "guard".into(),
            key_type: 1,
        };
        let _ = c.request(&find, wait).await;
        let init = m::InitProducerIdRequest {
            transactional_id: "guard".into(),
            producer_id: -1,
            producer_epoch: -1,
            transaction_timeout_ms: 60_000,
        };
        match c.request(&init, wait).await {
            Ok(r) if r.error.is_none() => break r,
            other => assert!(Instant::now() < deadline, "{other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let stamp = ProducerStamp {
        producer_id: init.producer_id,
        producer_epoch: init.producer_epoch as i16,
        base_sequence: 0,
    };
    let mut builder = BatchBuilder::new(Compression::None, stamp)
        .with_attributes(tinymq_protocol::batch::ATTR_TRANSACTIONAL);
    builder.push(&RecordInput {
        timestamp_ms: 1,
        key: None,
        value: Some(b"v"),
        headers: &[],
    });
    let produce = m::ProduceRequest {
        acks: -1,
        timeout_ms: 10_000,
        partitions: vec![m::ProducePartition {
            topic: "guarded".into(),
            partition: 0,
            records: builder.build().unwrap(),
        }],
        transactional_id: "guard".into(),
    };
    let refused = c.request(&produce, wait).await.unwrap();
    let error = refused.partitions[0].error.clone().expect("refused");
    assert_eq!(
        error.error_code(),
        ErrorCode::INVALID_TXN_STATE,
        "{error:?}"
    );

    let add = m::AddPartitionsToTxnRequest {
        transactional_id: "guard".into(),
        producer_id: init.producer_id,
        producer_epoch: init.producer_epoch,
        topics: vec![m::TxnTopic {
            topic: "guarded".into(),
            partitions: vec![0],
        }],
        verify_only: false,
    };
    let added = c.request(&add, wait).await.unwrap();
    assert!(added.error.is_none(), "{added:?}");
    let written = c.request(&produce, wait).await.unwrap();
    assert!(written.partitions[0].error.is_none(), "{written:?}");
    let open = admin.describe_producers("guarded", 0).await.unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].current_txn_start_offset, 0, "{open:?}");
}

/// KIP-664: an operator aborts a producer's open transaction on a partition by hand; the
/// partition's last stable offset moves past it and its records stay hidden.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_aborts_a_transaction_left_open_on_a_partition() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let admin = Admin::new(ClientConfig::new(&server.addr)).unwrap();
    topic(&admin, "hung", 1).await;
    let producer = transactional(&server.addr, "hanging", Duration::from_secs(600));
    producer.init_transactions().await.unwrap();
    producer.begin_transaction().unwrap();
    send(&producer, "hung", "h", 4).await;
    let producers = admin.describe_producers("hung", 0).await.unwrap();
    let open = producers
        .iter()
        .find(|p| p.current_txn_start_offset == 0)
        .expect("the open transaction is listed");
    let refused = admin
        .abort_transaction("hung", 0, open.producer_id + 1000)
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        Some(ErrorCode::INVALID_TXN_STATE),
        "{refused}"
    );
    admin
        .abort_transaction("hung", 0, open.producer_id)
        .await
        .unwrap();
    let after = admin.describe_producers("hung", 0).await.unwrap();
    assert!(
        after.iter().all(|p| p.current_txn_start_offset < 0),
        "{after:?}"
    );
    // A later transaction of another producer is readable: nothing holds the partition back.
    let other = transactional(&server.addr, "other", Duration::from_secs(60));
    other.init_transactions().await.unwrap();
    other.begin_transaction().unwrap();
    send(&other, "hung", "ok", 2).await;
    other.commit_transaction().await.unwrap();
    let committed = read(&server.addr, "hung", Isolation::ReadCommitted).await;
    assert_eq!(count_prefix(&committed, "ok"), 2, "{committed:?}");
    assert_eq!(count_prefix(&committed, "h"), 0, "{committed:?}");
}
