//! The Kafka listener's data path against a real `tinymq server --kafka-listen`: Produce
//! (acks 1, -1, 0; several batches in one partition; every compression codec), Fetch (whole
//! batches, from the middle of one, long poll), ListOffsets, InitProducerId with idempotent
//! retries and out-of-order sequences, a transaction committed and one aborted (read_committed
//! fetches and ListOffsets), and records crossing between the Kafka and native
//! protocols unchanged. Requests are kafka-protocol's own types over a TcpStream.

#[path = "kafka_data/batches.rs"]
mod batches;
mod common;
#[path = "kafka_data/requests.rs"]
mod requests;

use bytes::Bytes;
use kafka_protocol::error::ResponseError as K;
use kafka_protocol::messages::{FetchRequest, InitProducerIdRequest, TransactionalId};
use kafka_protocol::protocol::StrBytes;
use tinymq_protocol::batch::{Compression, ProducerStamp};

use batches::{batch, read_records, Rec};
use common::kafka::KafkaServer;
use requests::{fetch, fetch_request, list_offset, plain, produce, produce_request, records, T0};

#[test]
fn produce_with_each_acks_then_fetch_and_list_offsets() {
    let server = KafkaServer::start();
    server.create_topic("t", 1);
    let mut k = server.connect();
    let all = records("r", 8, T0);

    let one = produce(&mut k, 11, "t", plain(&all[0..3]), 1);
    assert_eq!(
        (one.error_code, one.base_offset, one.log_start_offset),
        (0, 0, 0)
    );
    assert_eq!(one.log_append_time_ms, -1);
    let every = produce(&mut k, 3, "t", plain(&all[3..5]), -1);
    assert_eq!((every.error_code, every.base_offset), (0, 3));

    // acks = 0: no response; the next response on the connection answers the next request.
    k.send(11, &produce_request("t", plain(&all[5..6]), 0));
    let latest = common::retry(100, std::time::Duration::from_millis(50), || {
        let latest = list_offset(&mut k, 7, "t", -1);
        (latest.offset == 6).then_some(latest)
    })
    .expect("the acks=0 record is written");
    assert_eq!(latest.error_code, 0);

    // Two batches back to back in one partition's records: both stored, in order.
    let two = [plain(&all[6..7]).to_vec(), plain(&all[7..8]).to_vec()].concat();
    let both = produce(&mut k, 11, "t", Bytes::from(two), 1);
    assert_eq!((both.error_code, both.base_offset), (0, 6));

    for version in [4, 12] {
        // read_committed is accepted: with no transactions every record is committed.
        let request = fetch_request("t", 0, 0).with_isolation_level(1);
        let data = k.call(version, &request).responses[0].partitions[0].clone();
        assert_eq!((data.error_code, data.high_watermark), (0, 8));
        assert_eq!(
            data.last_stable_offset, 8,
            "no transactions: stable = high watermark"
        );
        assert_eq!(data.aborted_transactions.as_deref(), Some(&[][..]));
        let (got, bases) = read_records(&data.records.unwrap());
        let want: Vec<_> = all
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, r)| (i as i64, r))
            .collect();
        assert_eq!(got, want, "fetch v{version}");
        assert_eq!(bases, vec![0, 3, 5, 6, 7]);
    }

    // From the middle of a batch: the whole batch comes back, starting before the offset.
    let middle = fetch(&mut k, 12, "t", 4);
    let (got, bases) = read_records(&middle.records.unwrap());
    assert_eq!(bases[0], 3);
    assert_eq!(got[0], (3, all[3].clone()));
    assert!(got.contains(&(4, all[4].clone())));

    let earliest = list_offset(&mut k, 7, "t", -2);
    assert_eq!((earliest.error_code, earliest.offset), (0, 0));
    let latest = list_offset(&mut k, 1, "t", -1);
    assert_eq!((latest.error_code, latest.offset), (0, 8));
    let at = list_offset(&mut k, 7, "t", T0 + 4);
    assert_eq!((at.error_code, at.offset, at.timestamp), (0, 4, T0 + 4));
    let after_all = list_offset(&mut k, 7, "t", T0 + 1000);
    assert_eq!((after_all.error_code, after_all.offset), (0, -1));
    // KIP-734: the first record with the largest timestamp, the last one here.
    let max_timestamp = list_offset(&mut k, 7, "t", -3);
    assert_eq!(
        (
            max_timestamp.error_code,
            max_timestamp.offset,
            max_timestamp.timestamp
        ),
        (0, 7, T0 + 7)
    );
}

#[test]
fn every_compression_codec_is_stored_and_read_back_by_both_protocols() {
    let server = KafkaServer::start();
    server.create_topic("z", 1);
    let mut k = server.connect();
    let codecs = [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];
    let mut sent = Vec::new();
    for (i, codec) in codecs.into_iter().enumerate() {
        let recs = records(codec.name(), 20, T0 + 100 * i as i64);
        let answer = produce(
            &mut k,
            11,
            "z",
            batch(&recs, codec, ProducerStamp::NONE),
            -1,
        );
        assert_eq!(
            answer.error_code, 0,
            "{codec:?}: {:?}",
            answer.error_message
        );
        assert_eq!(answer.base_offset, 20 * i as i64);
        sent.extend(recs);
    }
    let data = fetch(&mut k, 12, "z", 0);
    let (got, _) = read_records(&data.records.unwrap());
    let values: Vec<_> = got.into_iter().map(|(_, r)| r).collect();
    assert_eq!(values, sent);
    let consumed = server.run_tool(
        &[
            "consume",
            "z",
            "--from-beginning",
            "--count",
            "80",
            "--timeout-ms",
            "20000",
        ],
        b"",
    );
    let want: Vec<String> = sent
        .iter()
        .map(|r| String::from_utf8(r.value.clone().unwrap()).unwrap())
        .collect();
    assert_eq!(consumed.lines().collect::<Vec<_>>(), want);
}

#[test]
fn an_idempotent_producer_is_deduplicated_and_kept_in_order() {
    let server = KafkaServer::start();
    server.create_topic("idem", 1);
    let mut k = server.connect();
    let init = k.call(
        4,
        &InitProducerIdRequest::default().with_transaction_timeout_ms(60_000),
    );
    assert_eq!(init.error_code, 0);
    assert!(init.producer_id.0 > 0);
    assert_eq!(init.producer_epoch, 0);
    let stamp = |base_sequence| ProducerStamp {
        producer_id: init.producer_id.0,
        producer_epoch: init.producer_epoch,
        base_sequence,
    };
    let first = records("a", 3, T0);
    let second = records("b", 2, T0 + 10);
    let sent = produce(
        &mut k,
        11,
        "idem",
        batch(&first, Compression::None, stamp(0)),
        -1,
    );
    assert_eq!((sent.error_code, sent.base_offset), (0, 0));
    // A retry of the same batch: answered with its first offsets, not written again.
    let retry = produce(
        &mut k,
        11,
        "idem",
        batch(&first, Compression::None, stamp(0)),
        -1,
    );
    assert_eq!((retry.error_code, retry.base_offset), (0, 0));
    let next = produce(
        &mut k,
        11,
        "idem",
        batch(&second, Compression::None, stamp(3)),
        -1,
    );
    assert_eq!((next.error_code, next.base_offset), (0, 3));
    let gap = produce(
        &mut k,
        11,
        "idem",
        batch(&second, Compression::None, stamp(9)),
        -1,
    );
    assert_eq!(gap.error_code, K::OutOfOrderSequenceNumber.code());
    assert_eq!(gap.base_offset, -1);
    assert!(gap.error_message.is_some(), "v8+ says why");

    let (got, _) = read_records(&fetch(&mut k, 12, "idem", 0).records.unwrap());
    let values: Vec<_> = got.into_iter().map(|(_, r)| r).collect();
    assert_eq!(
        values,
        [first, second.clone()].concat(),
        "no duplicate, nothing after the gap"
    );

    // Another InitProducerId (v0 too) is a new producer of the same native id space.
    let again = k.call(0, &InitProducerIdRequest::default());
    assert_eq!(again.error_code, 0);
    assert_ne!(again.producer_id, init.producer_id);

    // An epoch bump (v3+, naming the current id and epoch, KIP-360) gets a fresh id, whose
    // sequences start at 0 again.
    let bump = InitProducerIdRequest::default()
        .with_producer_id(init.producer_id)
        .with_producer_epoch(init.producer_epoch);
    let bumped = k.call(4, &bump);
    assert_eq!(bumped.error_code, 0);
    assert_ne!(bumped.producer_id, init.producer_id);
    let fresh = ProducerStamp {
        producer_id: bumped.producer_id.0,
        producer_epoch: bumped.producer_epoch,
        base_sequence: 0,
    };
    let after_bump = produce(
        &mut k,
        11,
        "idem",
        batch(&second, Compression::None, fresh),
        -1,
    );
    assert_eq!((after_bump.error_code, after_bump.base_offset), (0, 5));
}

/// `call` until the answer's error code (read by `code`) is no longer one a client retries
/// while a transaction coordinator is created, loads or writes markers.
fn until_settled<R: kafka_protocol::protocol::Request>(
    k: &mut common::kafka::Kafka,
    version: i16,
    request: &R,
    code: impl Fn(&R::Response) -> i16,
) -> R::Response {
    let retriable = [
        K::CoordinatorNotAvailable.code(),
        K::CoordinatorLoadInProgress.code(),
        K::NotCoordinator.code(),
        K::ConcurrentTransactions.code(),
    ];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let response = k.call(version, request);
        if !retriable.contains(&code(&response)) || std::time::Instant::now() > deadline {
            return response;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn a_transaction_commits_and_aborts_as_kafka_clients_see_it() {
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    use kafka_protocol::messages::{
        AddPartitionsToTxnRequest, EndTxnRequest, FindCoordinatorRequest, ProducerId, TopicName,
    };
    let server = KafkaServer::start();
    server.create_topic("tx", 1);
    let mut k = server.connect();
    let id = TransactionalId(StrBytes::from_static_str("my-tx"));
    let found = until_settled(
        &mut k,
        3,
        &FindCoordinatorRequest::default()
            .with_key(StrBytes::from_static_str("my-tx"))
            .with_key_type(1),
        |r| r.error_code,
    );
    assert_eq!(found.error_code, 0, "{found:?}");
    let init = until_settled(
        &mut k,
        4,
        &InitProducerIdRequest::default()
            .with_transactional_id(Some(id.clone()))
            .with_transaction_timeout_ms(60_000),
        |r| r.error_code,
    );
    assert_eq!((init.error_code, init.producer_epoch), (0, 0), "{init:?}");
    let (pid, epoch) = (init.producer_id, init.producer_epoch);
    let stamp = |sequence| ProducerStamp {
        producer_id: pid.0,
        producer_epoch: epoch,
        base_sequence: sequence,
    };
    let transactional =
        |recs: &[Rec], sequence| batches::transactional_batch(recs, stamp(sequence));
    let add = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(id.clone())
        .with_v3_and_below_producer_id(pid)
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("tx")))
            .with_partitions(vec![0])]);
    let end = |commit: bool| {
        EndTxnRequest::default()
            .with_transactional_id(id.clone())
            .with_producer_id(ProducerId(pid.0))
            .with_producer_epoch(epoch)
            .with_committed(commit)
    };
    let added_code = |r: &kafka_protocol::messages::AddPartitionsToTxnResponse| {
        r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
    };

    // A partition index that cannot exist refuses the whole request, as in Kafka.
    let bad = add
        .clone()
        .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("tx")))
            .with_partitions(vec![0, -1])]);
    let refused = k.call(3, &bad);
    let codes: Vec<i16> = refused.results_by_topic_v3_and_below[0]
        .results_by_partition
        .iter()
        .map(|r| r.partition_error_code)
        .collect();
    assert_eq!(
        codes,
        [
            K::OperationNotAttempted.code(),
            K::UnknownTopicOrPartition.code()
        ]
    );

    // A committed transaction of 3 records.
    let added = until_settled(&mut k, 3, &add, added_code);
    assert_eq!(added_code(&added), 0, "{added:?}");
    let request = produce_request("tx", transactional(&records("c", 3, T0), 0), -1)
        .with_transactional_id(Some(id.clone()));
    let answer = &k.call(11, &request).responses[0].partition_responses[0].clone();
    assert_eq!(
        (answer.error_code, answer.base_offset),
        (0, 0),
        "{answer:?}"
    );
    let read_committed = |k: &mut common::kafka::Kafka| {
        let request = fetch_request("tx", 0, 0).with_isolation_level(1);
        k.call(11, &request).responses[0].partitions[0].clone()
    };
    let open = read_committed(&mut k);
    assert_eq!(
        (open.high_watermark, open.last_stable_offset),
        (3, 0),
        "the transaction is open"
    );
    assert!(
        open.records.as_ref().is_none_or(|r| r.is_empty()),
        "nothing below the LSO"
    );
    let ended = until_settled(&mut k, 3, &end(true), |r| r.error_code);
    assert_eq!(ended.error_code, 0);

    // Then an aborted one of 2 records.
    let added = until_settled(&mut k, 3, &add, added_code);
    assert_eq!(added_code(&added), 0, "{added:?}");
    let request = produce_request("tx", transactional(&records("a", 2, T0), 3), -1)
        .with_transactional_id(Some(id.clone()));
    let answer = &k.call(11, &request).responses[0].partition_responses[0].clone();
    assert_eq!(answer.error_code, 0, "{answer:?}");
    let ended = until_settled(&mut k, 3, &end(false), |r| r.error_code);
    assert_eq!(ended.error_code, 0);

    // Both markers are written once EndTxn of the next attempt stops being concurrent.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let done = loop {
        let p = read_committed(&mut k);
        // c0..c2 at 0..=2, COMMIT at 3, a0, a1 at 4..=5, ABORT at 6.
        if p.last_stable_offset == 7 {
            break p;
        }
        assert!(std::time::Instant::now() < deadline, "{p:?}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(done.high_watermark, 7);
    let aborted = done.aborted_transactions.unwrap_or_default();
    assert_eq!(aborted.len(), 1, "{aborted:?}");
    assert_eq!(
        (aborted[0].producer_id.0, aborted[0].first_offset),
        (pid.0, 4)
    );
    let (stored, _) = read_records(&done.records.unwrap());
    let keys: Vec<_> = stored.iter().map(|(o, r)| (*o, r.key.clone())).collect();
    // The batches as stored: the markers are control records (key: version 0, type), which
    // clients skip.
    assert_eq!(keys.len(), 7, "{keys:?}");
    assert_eq!(keys[3], (3, Some(vec![0, 0, 0, 1])), "COMMIT: {keys:?}");
    assert_eq!(keys[6], (6, Some(vec![0, 0, 0, 0])), "ABORT: {keys:?}");
    assert_eq!(
        list_offset_isolated(&mut k, "tx", 1),
        7,
        "ListOffsets latest under read_committed is the LSO"
    );
}

fn list_offset_isolated(k: &mut common::kafka::Kafka, topic: &str, isolation: i8) -> i64 {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::{ListOffsetsRequest, TopicName};
    let request = ListOffsetsRequest::default()
        .with_replica_id((-1).into())
        .with_isolation_level(isolation)
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.into())))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(-1)])]);
    let response = k.call(7, &request);
    response.topics[0].partitions[0].offset
}

#[test]
fn records_cross_between_kafka_and_native_clients_unchanged() {
    let server = KafkaServer::start();
    server.create_topic("x", 1);
    let mut k = server.connect();

    // Native → Kafka.
    let lines = [
        r#"{"key":"n0","value":"native zero","headers":[{"key":"h","value":"one"},{"key":"empty"}],"timestamp":1700000000000}"#,
        r#"{"key":"n1","value":"native one","headers":[],"timestamp":1700000000005}"#,
    ];
    server.run_tool(
        &["produce", "x", "--input-format", "json", "--partition", "0"],
        (lines.join("\n") + "\n").as_bytes(),
    );
    let (got, _) = common::retry(100, std::time::Duration::from_millis(50), || {
        let read = read_records(&fetch(&mut k, 12, "x", 0).records.unwrap());
        (read.0.len() == 2).then_some(read)
    })
    .expect("the native records are visible over Kafka");
    let native_zero = Rec {
        key: Some(b"n0".to_vec()),
        value: Some(b"native zero".to_vec()),
        headers: vec![("h".into(), Some(b"one".to_vec())), ("empty".into(), None)],
        timestamp_ms: T0,
    };
    assert_eq!(got[0], (0, native_zero));
    assert_eq!(got[1].0, 1);
    assert_eq!(got[1].1.key.as_deref(), Some(&b"n1"[..]));
    assert_eq!(got[1].1.timestamp_ms, T0 + 5);

    // Kafka → native.
    let from_kafka = Rec {
        key: Some(b"k0".to_vec()),
        value: Some(b"from kafka".to_vec()),
        headers: vec![
            ("trace".into(), Some(b"abc".to_vec())),
            ("none".into(), None),
        ],
        timestamp_ms: T0 + 42,
    };
    let answer = produce(
        &mut k,
        11,
        "x",
        plain(std::slice::from_ref(&from_kafka)),
        -1,
    );
    assert_eq!((answer.error_code, answer.base_offset), (0, 2));
    let out = server.run_tool(
        &[
            "consume",
            "x",
            "--offset",
            "2",
            "--count",
            "1",
            "--format",
            "json",
            "--timeout-ms",
            "20000",
        ],
        b"",
    );
    let line: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(line["offset"], 2);
    assert_eq!(line["partition"], 0);
    assert_eq!(line["timestamp"], T0 + 42);
    assert_eq!(line["key"], "k0");
    assert_eq!(line["value"], "from kafka");
    assert_eq!(line["headers"][0]["key"], "trace");
    assert_eq!(line["headers"][0]["value"], "abc");
    assert_eq!(line["headers"][1]["key"], "none");
    assert!(line["headers"][1]["value"].is_null(), "{line}");
}

#[test]
fn a_long_poll_fetch_is_answered_when_records_arrive() {
    let server = KafkaServer::start();
    server.create_topic("poll", 1);
    let mut consumer = server.connect();
    let id = consumer.send(12, &fetch_request("poll", 0, 30_000));
    let mut producer = server.connect();
    let recs = records("p", 2, T0);
    assert_eq!(
        produce(&mut producer, 11, "poll", plain(&recs), 1).error_code,
        0
    );
    let response = consumer.receive::<FetchRequest>(12, id);
    let data = &response.responses[0].partitions[0];
    let (got, _) = read_records(data.records.as_ref().unwrap());
    assert_eq!(got, vec![(0, recs[0].clone()), (1, recs[1].clone())]);
}

#[test]
fn errors_are_kafkas_codes() {
    let server = KafkaServer::start();
    server.create_topic("e", 1);
    let mut k = server.connect();
    let unknown = produce(&mut k, 11, "no-such-topic", plain(&records("u", 1, T0)), 1);
    assert_eq!(unknown.error_code, K::UnknownTopicOrPartition.code());
    let unknown = fetch(&mut k, 12, "no-such-topic", 0);
    assert_eq!(unknown.error_code, K::UnknownTopicOrPartition.code());
    let corrupt = produce(&mut k, 11, "e", Bytes::from_static(&[0u8; 80]), 1);
    assert_eq!(corrupt.error_code, K::CorruptMessage.code(), "{corrupt:?}");
    assert_eq!(
        produce(&mut k, 11, "e", plain(&records("e", 1, T0)), 1).error_code,
        0
    );
    let beyond = fetch(&mut k, 12, "e", 50);
    assert_eq!(beyond.error_code, K::OffsetOutOfRange.code());
    let session = k.call(
        12,
        &fetch_request("e", 0, 0)
            .with_session_id(77)
            .with_session_epoch(3),
    );
    assert_eq!(session.error_code, K::FetchSessionIdNotFound.code());
    let bad_acks = produce(&mut k, 11, "e", plain(&records("e", 1, T0)), 2);
    assert_eq!(bad_acks.error_code, K::InvalidRequiredAcks.code());
}

#[test]
fn a_broker_that_does_not_lead_names_the_leader_and_its_kafka_address() {
    let tmp = tempfile::tempdir().unwrap();
    let meta = format!("127.0.0.1:{}", common::free_port());
    let _meta = common::start(1, std::slice::from_ref(&meta), tmp.path());
    let brokers = [KafkaServer::broker(1, &meta), KafkaServer::broker(2, &meta)];
    let create = [
        "topic",
        "create",
        "moved",
        "--partitions",
        "1",
        "--replicas",
        "2",
    ];
    let created = common::retry(150, std::time::Duration::from_millis(200), || {
        let out =
            common::cluster::tool(&[&create[..], &["--bootstrap", &brokers[0].native]].concat());
        out.status.success().then_some(())
    });
    assert!(
        created.is_some(),
        "the topic is created once both brokers registered"
    );
    common::cluster::wait_all_in_sync("moved", &brokers[0].native);
    let leader_id = common::cluster::describe("moved", &brokers[0].native)[0].leader as u32;
    let leader = &brokers[leader_id as usize - 1];
    let follower = &brokers[2 - leader_id as usize];
    let leader_port: i32 = leader.kafka.rsplit(':').next().unwrap().parse().unwrap();

    let mut k = follower.connect();
    let refused = k.call(
        11,
        &produce_request("moved", plain(&records("m", 1, T0)), -1),
    );
    let answer = &refused.responses[0].partition_responses[0];
    assert_eq!(answer.error_code, K::NotLeaderOrFollower.code());
    assert_eq!(answer.current_leader.leader_id.0, leader_id as i32);
    assert!(answer.current_leader.leader_epoch >= 0);
    let endpoint = refused
        .node_endpoints
        .iter()
        .find(|e| e.node_id.0 == leader_id as i32)
        .expect("the leader's Kafka address comes with the refusal");
    assert_eq!(
        (endpoint.host.as_str(), endpoint.port),
        ("127.0.0.1", leader_port)
    );
    // Before v10 the same refusal, without the fields the version lacks.
    let old = produce(&mut k, 9, "moved", plain(&records("m", 1, T0)), -1);
    assert_eq!(old.error_code, K::NotLeaderOrFollower.code());

    let fetched = fetch(&mut k, 12, "moved", 0);
    assert_eq!(fetched.error_code, K::NotLeaderOrFollower.code());
    assert_eq!(fetched.current_leader.leader_id.0, leader_id as i32);
    assert_eq!(
        list_offset(&mut k, 7, "moved", -1).error_code,
        K::NotLeaderOrFollower.code()
    );

    // Where it says: the leader takes the write.
    let mut at_leader = leader.connect();
    let written = produce(&mut at_leader, 11, "moved", plain(&records("m", 1, T0)), -1);
    assert_eq!((written.error_code, written.base_offset), (0, 0));
}

#[test]
fn every_served_version_of_the_data_apis_answers() {
    let server = KafkaServer::start();
    server.create_topic("v", 1);
    let mut k = server.connect();
    let recs = records("v", 9, T0);
    for (i, version) in (3..=11).enumerate() {
        let answer = produce(&mut k, version, "v", plain(&recs[i..i + 1]), 1);
        assert_eq!(
            (answer.error_code, answer.base_offset),
            (0, i as i64),
            "produce v{version}"
        );
    }
    for version in 4..=12 {
        let data = fetch(&mut k, version, "v", 0);
        assert_eq!(data.error_code, 0, "fetch v{version}");
        let (got, _) = read_records(&data.records.unwrap());
        assert_eq!(got.len(), 9, "fetch v{version}");
    }
    for version in 1..=7 {
        let latest = list_offset(&mut k, version, "v", -1);
        assert_eq!(
            (latest.error_code, latest.offset),
            (0, 9),
            "list offsets v{version}"
        );
    }
    for version in 0..=4 {
        let init = k.call(version, &InitProducerIdRequest::default());
        assert_eq!(init.error_code, 0, "init producer id v{version}");
        assert!(init.producer_id.0 > 0, "init producer id v{version}");
    }
}

/// librdkafka refuses a response larger than its `fetch.max.bytes` (plus overhead): only the
/// first batch of the first partition with records may pass `max_bytes`.
#[test]
fn a_fetch_returns_no_more_than_max_bytes_beyond_its_first_batch() {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    let server = KafkaServer::start();
    server.create_topic("big", 3);
    let mut k = server.connect();
    let value = "x".repeat(200 * 1024);
    for partition in 0..3 {
        let rec = Rec::new(&format!("k{partition}"), &value, T0);
        let mut request = produce_request("big", plain(&[rec]), 1);
        request.topic_data[0].partition_data[0].index = partition;
        let response = k.call(11, &request);
        assert_eq!(response.responses[0].partition_responses[0].error_code, 0);
    }
    let fetch_all = |max_bytes: i32| {
        let partitions = (0..3)
            .map(|p| {
                FetchPartition::default()
                    .with_partition(p)
                    .with_partition_max_bytes(1 << 20)
            })
            .collect();
        FetchRequest::default()
            .with_replica_id((-1).into())
            .with_max_bytes(max_bytes)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(requests::name("big"))
                .with_partitions(partitions)])
    };
    let sizes = |k: &mut common::kafka::Kafka, max_bytes: i32| -> Vec<usize> {
        let response = k.call(12, &fetch_all(max_bytes));
        response.responses[0]
            .partitions
            .iter()
            .map(|p| p.records.as_ref().map_or(0, Bytes::len))
            .collect()
    };
    // Less than one batch: the first partition's first batch all the same, nothing else.
    let one = sizes(&mut k, 1000);
    assert!(one[0] > 200 * 1024, "{one:?}");
    assert_eq!(&one[1..], &[0, 0]);
    // Room for two batches: two partitions answer, the third waits for the next fetch.
    let two = sizes(&mut k, 450 * 1024);
    assert!(two[0] > 0 && two[1] > 0, "{two:?}");
    assert_eq!(two[2], 0);
    assert!(two.iter().sum::<usize>() <= 450 * 1024);
}

/// acks = 0 gets no response, so Kafka signals a failed write by closing the connection (the
/// producer then refreshes its metadata); a write that succeeds keeps the connection open.
#[test]
fn a_failed_produce_with_acks_0_closes_the_connection() {
    use kafka_protocol::messages::MetadataRequest;
    let server = KafkaServer::start();
    server.create_topic("t", 1);
    let metadata = MetadataRequest::default().with_topics(None);

    // Written: nothing comes back for it, and the next request on the connection is answered.
    let mut k = server.connect();
    k.send(11, &produce_request("t", plain(&records("ok", 1, T0)), 0));
    let answered = k.call(12, &metadata);
    assert_eq!(answered.brokers.len(), 1, "{answered:?}");
    assert_eq!(
        list_offset(&mut k, 7, "t", -1).offset,
        1,
        "the record is written"
    );

    // Refused: nothing is sent for it (nor for the request after it) and the connection closes.
    let mut no_partition = produce_request("t", plain(&records("p", 1, T0)), 0);
    no_partition.topic_data[0].partition_data[0].index = 5;
    let no_topic = produce_request("no-such-topic", plain(&records("u", 1, T0)), 0);
    let corrupt = produce_request("t", Bytes::from_static(&[0u8; 80]), 0);
    let mut stayed_open = Vec::new();
    for (what, request) in [
        ("a partition that does not exist", no_partition),
        ("a topic that does not exist", no_topic),
        ("a corrupt batch", corrupt),
    ] {
        let mut k = server.connect();
        k.send(11, &request);
        k.send(12, &metadata);
        if !k.closed() {
            stayed_open.push(what);
        }
    }
    assert!(
        stayed_open.is_empty(),
        "a failed acks=0 produce left the connection open: {stayed_open:?}"
    );

    // None of the refused records was written; the server still serves.
    let mut k = server.connect();
    assert_eq!(list_offset(&mut k, 7, "t", -1).offset, 1);
}
