//! Fetch sessions (KIP-227) and topic ids (KIP-516) on the Kafka listener of a real
//! `tinymq server --kafka-listen`, with kafka-protocol's own request types over a TcpStream:
//! a session's incremental fetches answer only partitions with news, it outlives its
//! connection, refuses wrong epochs, and is closed by a full fetch (that a session is only its
//! maker's is in the listener's unit tests);
//! Fetch v13+ names topics by the ids Metadata gives, which change when a topic is deleted and
//! created again.

#[path = "kafka_data/batches.rs"]
#[allow(dead_code)]
mod batches;
mod common;
#[path = "kafka_data/requests.rs"]
#[allow(dead_code)]
mod requests;

use kafka_protocol::error::ResponseError as K;
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{DeleteTopicsRequest, FetchRequest, FetchResponse, MetadataRequest};
use uuid::Uuid;

use batches::read_records;
use common::kafka::{Kafka, KafkaServer};
use requests::{name, plain, produce_request, records, T0};

/// Produces one record to `partition` of `topic`.
fn produce_to(k: &mut Kafka, topic: &str, partition: i32, value: &str) {
    let mut request = produce_request(topic, plain(&records(value, 1, T0)), 1);
    request.topic_data[0].partition_data[0].index = partition;
    let answer = k.call(11, &request);
    assert_eq!(answer.responses[0].partition_responses[0].error_code, 0);
}

/// A fetch of session `id` at `epoch` naming `partitions` (index, offset) of `topic`, answered
/// at once (`min_bytes` 0) unless `wait_ms` is given.
fn fetch(
    id: i32,
    epoch: i32,
    topic: &str,
    partitions: &[(i32, i64)],
    wait_ms: i32,
) -> FetchRequest {
    let partitions: Vec<_> = partitions
        .iter()
        .map(|(index, offset)| {
            FetchPartition::default()
                .with_partition(*index)
                .with_fetch_offset(*offset)
                .with_partition_max_bytes(1 << 20)
        })
        .collect();
    let topics = match partitions.is_empty() {
        true => vec![],
        false => vec![FetchTopic::default()
            .with_topic(name(topic))
            .with_partitions(partitions)],
    };
    FetchRequest::default()
        .with_replica_id((-1).into())
        .with_max_wait_ms(wait_ms)
        .with_min_bytes(i32::from(wait_ms > 0))
        .with_max_bytes(1 << 20)
        .with_session_id(id)
        .with_session_epoch(epoch)
        .with_topics(topics)
}

/// The answer's partitions: (index, number of records).
fn listed(response: &FetchResponse) -> Vec<(i32, usize)> {
    assert_eq!(response.error_code, 0, "{response:?}");
    response
        .responses
        .iter()
        .flat_map(|t| &t.partitions)
        .map(|p| {
            let count = p.records.as_ref().map_or(0, |r| read_records(r).0.len());
            (p.partition_index, count)
        })
        .collect()
}

#[test]
fn a_session_answers_only_partitions_with_news_and_outlives_its_connection() {
    let server = KafkaServer::start();
    server.create_topic("s", 4);
    let mut k = server.connect();
    for p in 0..4 {
        produce_to(&mut k, "s", p, "first");
    }
    let all: Vec<(i32, i64)> = (0..4).map(|p| (p, 0)).collect();
    let created = k.call(12, &fetch(0, 0, "s", &all, 0));
    let id = created.session_id;
    assert!(id > 0, "a full fetch at epoch 0 makes a session");
    assert_eq!(listed(&created), vec![(0, 1), (1, 1), (2, 1), (3, 1)]);

    // Every partition moved on; nothing new anywhere: nothing listed.
    let moved: Vec<(i32, i64)> = (0..4).map(|p| (p, 1)).collect();
    let quiet = k.call(12, &fetch(id, 1, "s", &moved, 0));
    assert_eq!((quiet.session_id, listed(&quiet)), (id, vec![]));

    // A long-polling incremental fetch naming nothing is answered by a write to partition 2,
    // with partition 2 only.
    let waiting = k.send(12, &fetch(id, 2, "s", &[], 30_000));
    let mut producer = server.connect();
    produce_to(&mut producer, "s", 2, "second");
    let news = k.receive::<FetchRequest>(12, waiting);
    assert_eq!(listed(&news), vec![(2, 1)]);

    // The same epoch again is refused; the session goes on at the next one.
    let stale = k.call(12, &fetch(id, 2, "s", &[], 0));
    assert_eq!(stale.error_code, K::InvalidFetchSessionEpoch.code());
    assert!(stale.responses.is_empty());

    // From another connection: partition 2 is forgotten, so its next record is not answered.
    let mut other = server.connect();
    let mut forget = fetch(id, 3, "s", &[], 0);
    forget.forgotten_topics_data = vec![ForgottenTopic::default()
        .with_topic(name("s"))
        .with_partitions(vec![2])];
    produce_to(&mut producer, "s", 2, "third");
    produce_to(&mut producer, "s", 0, "third");
    let rest = other.call(12, &forget);
    assert_eq!(listed(&rest), vec![(0, 1)]);

    // A full fetch naming the session closes it; the session is then unknown.
    let closing = other.call(12, &fetch(id, -1, "s", &[(0, 0)], 0));
    assert_eq!(closing.session_id, 0);
    assert_eq!(listed(&closing), vec![(0, 2)]);
    let gone = other.call(12, &fetch(id, 4, "s", &[], 0));
    assert_eq!(gone.error_code, K::FetchSessionIdNotFound.code());
}

/// The topic id Metadata v12 gives `topic`.
fn topic_id(k: &mut Kafka, topic: &str) -> Uuid {
    let request = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(name(topic))),
    ]));
    let answer = k.call(12, &request);
    assert_eq!(answer.topics[0].error_code, 0);
    answer.topics[0].topic_id
}

fn fetch_by_id(k: &mut Kafka, version: i16, id: Uuid) -> FetchResponse {
    let mut request = fetch(0, -1, "", &[(0, 0)], 0);
    request.topics[0].topic_id = id;
    k.call(version, &request)
}

#[test]
fn from_fetch_v13_topics_are_named_by_the_ids_metadata_gives() {
    let server = KafkaServer::start();
    server.create_topic("ids", 1);
    let mut k = server.connect();
    produce_to(&mut k, "ids", 0, "one");
    let id = topic_id(&mut k, "ids");
    assert_ne!(id, Uuid::nil());
    for version in 13..=17 {
        let answer = fetch_by_id(&mut k, version, id);
        assert_eq!(answer.responses[0].topic_id, id, "fetch v{version}");
        assert_eq!(listed(&answer), vec![(0, 1)], "fetch v{version}");
    }
    // Metadata by id names the topic.
    let by_id = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_topic_id(id)
    ]));
    let answer = k.call(12, &by_id);
    assert_eq!(answer.topics[0].name, Some(name("ids")));

    // Deleted by id and created again: a new id, and the old one names no topic.
    let delete = DeleteTopicsRequest::default()
        .with_topics(vec![DeleteTopicState::default().with_topic_id(id)])
        .with_timeout_ms(10_000);
    let deleted = k.call(6, &delete);
    assert_eq!(deleted.responses[0].error_code, 0, "{deleted:?}");
    server.create_topic("ids", 1);
    let again = topic_id(&mut k, "ids");
    assert_ne!(again, id);
    // Answered at once, long poll or not (the reads here give up after 10 s).
    let mut waiting = fetch(0, -1, "", &[(0, 0)], 30_000);
    waiting.topics[0].topic_id = id;
    let old = k.call(13, &waiting);
    let code = old.responses[0].partitions[0].error_code;
    assert_eq!(code, K::UnknownTopicId.code());
    let answer = k.call(12, &by_id);
    assert_eq!(answer.topics[0].error_code, K::UnknownTopicId.code());

    // A session made with ids refuses names, and the other way round.
    let mut by_ids = fetch(0, 0, "", &[(0, 0)], 0);
    by_ids.topics[0].topic_id = again;
    let session = k.call(13, &by_ids).session_id;
    assert!(session > 0);
    let named = k.call(12, &fetch(session, 1, "ids", &[], 0));
    assert_eq!(named.error_code, K::FetchSessionTopicIdError.code());
}

/// An incremental fetch reads only the partitions that may have news, at once; when those
/// hold nothing it must still wait on all of them, or a record arriving in a quiet one would
/// wait out the poll.
#[test]
fn a_long_poll_waits_on_quiet_partitions_too() {
    let server = KafkaServer::start();
    server.create_topic("q", 2);
    let mut k = server.connect();
    produce_to(&mut k, "q", 0, "old");
    let created = k.call(12, &fetch(0, 0, "q", &[(0, 1)], 0));
    let id = created.session_id;
    assert!(id > 0);
    // Partition 1 joins at its (empty) end; partition 0 is quiet at its end.
    let waiting = k.send(12, &fetch(id, 1, "q", &[(1, 0)], 30_000));
    let mut producer = server.connect();
    produce_to(&mut producer, "q", 0, "new");
    let answer = k.receive::<FetchRequest>(12, waiting);
    let got = listed(&answer);
    assert!(
        got.contains(&(0, 1)),
        "the record in the quiet partition: {got:?}"
    );
}
