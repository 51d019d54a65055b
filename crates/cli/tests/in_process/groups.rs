//! Consumer groups through the protocol and the client, with the node in this process: a
//! stale member cannot commit, and at-most-once polls commit before they return while paused
//! partitions are not fetched (members as `tinymq consume` processes, killed or restarted,
//! are process tests: `groups.rs`).

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::frames::create;
use crate::common::RawClient;
use crate::node::Server;
use tinymq_client::{
    Admin, ClientConfig, Consumer, ConsumerConfig, GroupEvent, Producer, ProducerConfig,
    ProducerRecord, StartFrom,
};
use tinymq_protocol::{messages as m, ErrorCode};

/// Records `from..to` with keys spread over 13 values (`k{i % 13}`), values `m{i}`, as
/// `tinymq produce --key-separator :` sends the lines `k…:m…`.
async fn produce(addr: &str, topic: &str, from: usize, to: usize) {
    let producer = Producer::new(ProducerConfig::new(addr)).unwrap();
    for i in from..to {
        let record = ProducerRecord::value(format!("m{i}")).with_key(format!("k{}", i % 13));
        producer.send(topic, record).await.unwrap().await.unwrap();
    }
    producer.close().await;
}

fn values(from: usize, to: usize) -> BTreeSet<String> {
    (from..to).map(|i| format!("m{i}")).collect()
}

#[test]
fn a_stale_member_cannot_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let mut c = RawClient::handshaken(&server.addr);
    create(&mut c, "t", 2);
    let join = |c: &mut RawClient| {
        c.call(&m::JoinGroupRequest {
            group_id: "g".into(),
            member_id: String::new(),
            topics: vec!["t".into()],
            session_timeout_ms: 10_000,
            strategy: String::new(),
            client_id: "raw".into(),
        })
    };
    let first = join(&mut c);
    assert!(first.error.is_none(), "{:?}", first.error);
    let commit = |c: &mut RawClient, member: &str, generation: u32| {
        c.call(&m::OffsetCommitRequest {
            group_id: "g".into(),
            member_id: member.into(),
            generation,
            offsets: vec![m::CommittedOffset {
                topic: "t".into(),
                partition: 0,
                offset: 5,
                metadata: String::new(),
                error: None,
            }],
        })
        .error
        .map_or(0, |e| e.code)
    };
    assert_eq!(
        commit(&mut c, &first.member_id, first.generation),
        0,
        "the current generation commits"
    );
    // A second member joins; the first learns the new generation from its heartbeat.
    let second = join(&mut c);
    let beat = c.call(&m::HeartbeatRequest {
        group_id: "g".into(),
        member_id: first.member_id.clone(),
        generation: first.generation,
        owned: vec![],
    });
    assert!(beat.generation > first.generation);
    let illegal = u32::from(ErrorCode::ILLEGAL_GENERATION.code());
    assert_eq!(
        commit(&mut c, &first.member_id, first.generation),
        illegal,
        "an old generation is refused"
    );
    assert_eq!(commit(&mut c, &first.member_id, beat.generation), 0);
    // After leaving, the member's commits are refused too; so are administrative ones while
    // the group has members.
    c.call(&m::LeaveGroupRequest {
        group_id: "g".into(),
        member_id: first.member_id.clone(),
    });
    assert_eq!(
        commit(&mut c, &first.member_id, beat.generation),
        u32::from(ErrorCode::UNKNOWN_MEMBER_ID.code())
    );
    assert_eq!(
        commit(&mut c, "", 0),
        u32::from(ErrorCode::GROUP_NOT_EMPTY.code())
    );
    assert!(!second.member_id.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_once_commits_before_returning_and_paused_partitions_are_not_fetched() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    create(&mut RawClient::handshaken(&server.addr), "amo", 2);
    let mut config = ConsumerConfig::new(&server.addr);
    config.start_from = StartFrom::Earliest;
    config.auto_commit_interval = None;
    let mut consumer = Consumer::new(config).unwrap();
    consumer.subscribe("amo-group", &["amo"]).await.unwrap();
    // Pause partition 1: only partition 0's records arrive.
    let mut got = Vec::new();
    for _ in 0..100 {
        if consumer.assignment().len() == 2 {
            break;
        }
        got.extend(consumer.poll(Duration::from_millis(100)).await.unwrap());
    }
    let events = consumer.take_events();
    assert!(
        matches!(&events[..], [GroupEvent::Assigned(p)] if p.len() == 2),
        "{events:?}"
    );
    assert!(got.is_empty(), "the topic is still empty");
    consumer.pause("amo", 1);
    produce(&server.addr, "amo", 0, 50).await;
    for _ in 0..10 {
        got.extend(
            consumer
                .poll_at_most_once(Duration::from_millis(100))
                .await
                .unwrap(),
        );
    }
    assert!(!got.is_empty());
    assert!(
        got.iter().all(|r| r.partition == 0),
        "a paused partition is not fetched"
    );
    // Everything returned by poll_at_most_once was committed before it was returned.
    let admin = Admin::new(ClientConfig::new(&server.addr)).unwrap();
    let described = admin.describe_group("amo-group").await.unwrap();
    let committed_p0 = described
        .offsets
        .iter()
        .find(|o| o.partition == 0)
        .map(|o| o.offset);
    assert_eq!(committed_p0, consumer.position("amo", 0));
    consumer.resume("amo", 1);
    for _ in 0..20 {
        got.extend(consumer.poll(Duration::from_millis(100)).await.unwrap());
        if got.len() >= 50 {
            break;
        }
    }
    let seen: BTreeSet<String> = got
        .iter()
        .map(|r| String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap())
        .collect();
    assert_eq!(seen, values(0, 50));
    consumer.close().await.unwrap();
}
