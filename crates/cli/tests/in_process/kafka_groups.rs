//! Kafka's classic consumer-group protocol through a node's Kafka listener in this process, spoken
//! with kafka-protocol's client-side encoders over plain TcpStreams: members join (the
//! MEMBER_ID_REQUIRED round trip), the leader's assignment reaches the followers, heartbeats
//! see rebalances when a member joins or leaves, commits are checked against the generation,
//! committed offsets outlive the members, and one group id has members of one protocol only.

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::error::ResponseError as K;
use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic,
};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tinymq_protocol::{messages as m, ErrorCode};

use crate::common::frames::create;
use crate::common::kafka::Kafka;
use crate::common::{retry, RawClient};
use crate::node::{KafkaNode, NativeMember};

/// Heartbeats a member sends, 20 ms apart, before the rebalance a join on another connection
/// starts must have been seen.
const JOIN_SEEN_ATTEMPTS_MAX: usize = 500;

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

fn group(name: &str) -> GroupId {
    GroupId(s(name))
}

fn subscription(topic: &str) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i16(0);
    ConsumerProtocolSubscription::default()
        .with_topics(vec![s(topic)])
        .encode(&mut out, 0)
        .unwrap();
    out.freeze()
}

fn assignment(topic: &str, partitions: &[i32]) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i16(0);
    ConsumerProtocolAssignment::default()
        .with_assigned_partitions(vec![TopicPartition::default()
            .with_topic(TopicName(s(topic)))
            .with_partitions(partitions.to_vec())])
        .encode(&mut out, 0)
        .unwrap();
    out.freeze()
}

fn assigned_partitions(mut bytes: Bytes) -> Vec<i32> {
    assert_eq!(bytes.get_i16(), 0);
    let a = ConsumerProtocolAssignment::decode(&mut bytes, 0).unwrap();
    a.assigned_partitions
        .into_iter()
        .flat_map(|t| t.partitions)
        .collect()
}

const JOIN_V: i16 = 9;

/// A member speaking JoinGroup v9: its connection and, once joined, its id and generation.
struct Member {
    kafka: Kafka,
    group: String,
    id: String,
    generation: i32,
    assignors: Vec<&'static str>,
    session_timeout_ms: i32,
    instance: Option<&'static str>,
}

impl Member {
    fn new(addr: &str, group: &str, assignors: &[&'static str]) -> Member {
        Member {
            kafka: Kafka::connect(addr),
            group: group.into(),
            id: String::new(),
            generation: -1,
            assignors: assignors.to_vec(),
            session_timeout_ms: 10_000,
            instance: None,
        }
    }

    fn join_request(&self) -> JoinGroupRequest {
        let protocols = self
            .assignors
            .iter()
            .map(|name| {
                JoinGroupRequestProtocol::default()
                    .with_name(s(name))
                    .with_metadata(subscription("t"))
            })
            .collect();
        JoinGroupRequest::default()
            .with_group_id(group(&self.group))
            .with_session_timeout_ms(self.session_timeout_ms)
            .with_rebalance_timeout_ms(30_000)
            .with_member_id(s(&self.id))
            .with_group_instance_id(self.instance.map(s))
            .with_protocol_type(s("consumer"))
            .with_protocols(protocols)
    }

    /// The first join: told MEMBER_ID_REQUIRED and its id; then sends the real join (whose
    /// answer comes when the join phase ends).
    fn start_join(&mut self) -> i32 {
        // A static member is named by its instance id: no MEMBER_ID_REQUIRED round trip.
        if self.id.is_empty() && self.instance.is_none() {
            let first = self.kafka.call(JOIN_V, &self.join_request());
            assert_eq!(first.error_code, K::MemberIdRequired.code());
            assert!(!first.member_id.is_empty());
            self.id = first.member_id.to_string();
        }
        let request = self.join_request();
        self.kafka.send(JOIN_V, &request)
    }

    fn finish_join(&mut self, correlation: i32) -> JoinGroupResponse {
        let joined = self.kafka.receive::<JoinGroupRequest>(JOIN_V, correlation);
        assert_eq!(joined.error_code, 0, "{joined:?}");
        if self.instance.is_some() && self.id.is_empty() {
            self.id = joined.member_id.to_string();
        }
        assert_eq!(joined.member_id.as_str(), self.id);
        self.generation = joined.generation_id;
        joined
    }

    fn sync_request(&self, assignments: Vec<(String, Bytes)>) -> SyncGroupRequest {
        SyncGroupRequest::default()
            .with_group_id(group(&self.group))
            .with_generation_id(self.generation)
            .with_member_id(s(&self.id))
            .with_protocol_type(Some(s("consumer")))
            .with_protocol_name(Some(s("range")))
            .with_assignments(
                assignments
                    .into_iter()
                    .map(|(id, a)| {
                        SyncGroupRequestAssignment::default()
                            .with_member_id(s(&id))
                            .with_assignment(a)
                    })
                    .collect(),
            )
    }

    fn heartbeat(&mut self) -> i16 {
        let request = HeartbeatRequest::default()
            .with_group_id(group(&self.group))
            .with_generation_id(self.generation)
            .with_member_id(s(&self.id))
            .with_group_instance_id(self.instance.map(s));
        self.kafka.call(4, &request).error_code
    }

    fn commit(&mut self, generation: i32, member: &str, partition: i32, offset: i64) -> i16 {
        let request = OffsetCommitRequest::default()
            .with_group_id(group(&self.group))
            .with_generation_id_or_member_epoch(generation)
            .with_member_id(s(member))
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(TopicName(s("t")))
                .with_partitions(vec![OffsetCommitRequestPartition::default()
                    .with_partition_index(partition)
                    .with_committed_offset(offset)
                    .with_committed_metadata(Some(s("meta")))])]);
        let response = self.kafka.call(8, &request);
        response.topics[0].partitions[0].error_code
    }

    fn leave(&mut self) -> i16 {
        let request = LeaveGroupRequest::default()
            .with_group_id(group(&self.group))
            .with_members(vec![MemberIdentity::default().with_member_id(s(&self.id))]);
        let response = self.kafka.call(5, &request);
        assert_eq!(response.error_code, 0);
        response.members[0].error_code
    }
}

/// Every member sends its join, then reads its answer: one join phase. Returns the leader's
/// index and the generation.
fn join_all(members: &mut [&mut Member]) -> (usize, i32) {
    let sent: Vec<i32> = members.iter_mut().map(|m| m.start_join()).collect();
    let answers: Vec<JoinGroupResponse> = members
        .iter_mut()
        .zip(sent)
        .map(|(m, c)| m.finish_join(c))
        .collect();
    let generation = answers[0].generation_id;
    assert!(answers.iter().all(|a| a.generation_id == generation));
    assert!(answers
        .iter()
        .all(|a| a.protocol_name.as_ref().map(|p| p.to_string()).as_deref() == Some("range")));
    let leader = answers
        .iter()
        .position(|a| a.leader == a.member_id)
        .expect("one member is the leader");
    assert_eq!(
        answers[leader].members.len(),
        members.len(),
        "the leader learns every member"
    );
    for (i, a) in answers.iter().enumerate() {
        if i != leader {
            assert!(a.members.is_empty());
        }
    }
    (leader, generation)
}

/// Followers sync first (and wait), then the leader sends the assignment: partitions
/// 0..4 of "t" split round-robin. Returns each member's assigned partitions.
fn sync_all(members: &mut [&mut Member], leader: usize) -> Vec<Vec<i32>> {
    let n = members.len();
    let plan: Vec<(String, Bytes)> = (0..n)
        .map(|i| {
            let mine: Vec<i32> = (0..4).filter(|p| *p as usize % n == i).collect();
            (members[i].id.clone(), assignment("t", &mine))
        })
        .collect();
    let mut sent = vec![0; n];
    for i in (0..n).filter(|i| *i != leader) {
        let request = members[i].sync_request(vec![]);
        sent[i] = members[i].kafka.send(5, &request);
    }
    let request = members[leader].sync_request(plan);
    sent[leader] = members[leader].kafka.send(5, &request);
    (0..n)
        .map(|i| {
            let synced = members[i].kafka.receive::<SyncGroupRequest>(5, sent[i]);
            assert_eq!(synced.error_code, 0, "{synced:?}");
            assigned_partitions(synced.assignment)
        })
        .collect()
}

fn describe(kafka: &mut Kafka, name: &str) -> describe_groups_response::DescribedGroup {
    let request = DescribeGroupsRequest::default().with_groups(vec![group(name)]);
    kafka.call(5, &request).groups.remove(0)
}

fn fetch_offsets(kafka: &mut Kafka, name: &str) -> Vec<(i32, i64)> {
    let request =
        OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
            .with_group_id(group(name))
            .with_topics(None)]);
    let response = kafka.call(8, &request);
    let g = &response.groups[0];
    assert_eq!(g.error_code, 0);
    g.topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (p.partition_index, p.committed_offset))
        })
        .collect()
}

/// Polls `check` until it holds (bounded), sleeping between tries.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let happened = retry(300, Duration::from_millis(100), || check().then_some(()));
    assert!(happened.is_some(), "never happened: {what}");
}

#[test]
fn members_join_sync_rebalance_commit_and_resume() {
    let server = KafkaNode::start();
    create(&mut RawClient::handshaken(&server.native), "t", 4);
    let mut admin = Kafka::connect(&server.kafka);

    // FindCoordinator names this broker by its Kafka address, batched (v4) or not; a
    // transactional key is found too.
    let found = admin.call(
        4,
        &FindCoordinatorRequest::default().with_coordinator_keys(vec![s("g1")]),
    );
    let c = &found.coordinators[0];
    assert_eq!(c.error_code, 0, "{c:?}");
    assert_eq!(format!("{}:{}", c.host.as_str(), c.port), server.kafka);
    let txn = admin.call(
        3,
        &FindCoordinatorRequest::default()
            .with_key(s("tx"))
            .with_key_type(1),
    );
    assert_eq!(txn.error_code, 0, "{txn:?}");
    assert_eq!(format!("{}:{}", txn.host.as_str(), txn.port), server.kafka);

    // Two members; b offers only range, so range is the protocol chosen.
    let mut a = Member::new(&server.kafka, "g1", &["cooperative-sticky", "range"]);
    let mut b = Member::new(&server.kafka, "g1", &["range"]);
    let (leader, generation) = join_all(&mut [&mut a, &mut b]);
    let owned = sync_all(&mut [&mut a, &mut b], leader);
    assert_eq!(owned.iter().map(Vec::len).sum::<usize>(), 4);
    assert_eq!((a.heartbeat(), b.heartbeat()), (0, 0));

    let described = describe(&mut admin, "g1");
    assert_eq!(described.group_state.as_str(), "Stable");
    assert_eq!(described.protocol_type.as_str(), "consumer");
    assert_eq!(described.protocol_data.as_str(), "range");
    assert_eq!(described.members.len(), 2);
    let listed = admin.call(4, &ListGroupsRequest::default());
    assert!(listed
        .groups
        .iter()
        .any(|g| g.group_id.0.as_str() == "g1" && g.group_state.as_str() == "Stable"));

    // Commits: a current member of the current generation only.
    assert_eq!(a.commit(generation, &a.id.clone(), 0, 5), 0);
    assert_eq!(
        a.commit(generation - 1, &a.id.clone(), 0, 6),
        K::IllegalGeneration.code()
    );
    assert_eq!(
        a.commit(generation, "stranger", 0, 6),
        K::UnknownMemberId.code()
    );
    assert_eq!(
        a.commit(-1, "", 0, 6),
        K::UnknownMemberId.code(),
        "the group has members"
    );
    let deleted = admin.call(
        2,
        &DeleteGroupsRequest::default().with_groups_names(vec![group("g1")]),
    );
    assert_eq!(deleted.results[0].error_code, K::NonEmptyGroup.code());

    // A third member: the others hear of the rebalance by heartbeat and rejoin.
    let mut c = Member::new(&server.kafka, "g1", &["range"]);
    let c_sent = c.start_join();
    // c's join travels on its own connection: a's heartbeat sees the rebalance once the
    // coordinator has taken it, which may be after a first heartbeat.
    let mut seen = a.heartbeat();
    for _ in 0..JOIN_SEEN_ATTEMPTS_MAX {
        if seen == K::RebalanceInProgress.code() {
            break;
        }
        assert_eq!(seen, 0, "a heartbeat before the rebalance");
        std::thread::sleep(std::time::Duration::from_millis(20));
        seen = a.heartbeat();
    }
    assert_eq!(seen, K::RebalanceInProgress.code());
    let (a_sent, b_sent) = (a.start_join(), b.start_join());
    let answers = [
        a.finish_join(a_sent),
        b.finish_join(b_sent),
        c.finish_join(c_sent),
    ];
    assert!(answers.iter().all(|j| j.generation_id == generation + 1));
    let leader = answers
        .iter()
        .position(|j| j.leader == j.member_id)
        .unwrap();
    assert_eq!(answers[leader].members.len(), 3);
    let owned = sync_all(&mut [&mut a, &mut b, &mut c], leader);
    assert!(owned.iter().all(|o| !o.is_empty()));
    assert_eq!(a.heartbeat(), 0);

    // b leaves: a and c rejoin without it.
    assert_eq!(b.leave(), 0);
    assert_eq!(a.heartbeat(), K::RebalanceInProgress.code());
    let (leader, generation) = join_all(&mut [&mut a, &mut c]);
    assert_eq!(generation, answers[0].generation_id + 1);
    sync_all(&mut [&mut a, &mut c], leader);
    assert_eq!(c.commit(generation, &c.id.clone(), 3, 42), 0);
    assert_eq!(
        b.heartbeat(),
        K::UnknownMemberId.code(),
        "a departed member is no longer known"
    );

    // Every member leaves; a restarted consumer reads the committed offsets back, which
    // are the native group's offsets too.
    assert_eq!((a.leave(), c.leave()), (0, 0));
    assert_eq!(describe(&mut admin, "g1").group_state.as_str(), "Empty");
    let mut restarted = Kafka::connect(&server.kafka);
    let mut offsets = fetch_offsets(&mut restarted, "g1");
    offsets.sort();
    assert_eq!(offsets, vec![(0, 5), (3, 42)]);
    let v7 = restarted.call(
        7,
        &OffsetFetchRequest::default()
            .with_group_id(group("g1"))
            .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                .with_name(TopicName(s("t")))
                .with_partition_indexes(vec![0, 1])])),
    );
    let parts: Vec<(i32, i64)> = v7.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.committed_offset))
        .collect();
    assert_eq!(parts, vec![(0, 5), (1, -1)]);
    let mut native = RawClient::handshaken(&server.native);
    let fetched = native.call(&m::OffsetFetchRequest {
        require_stable: false,
        group_id: "g1".into(),
        partitions: vec![],
    });
    let mut natively: Vec<(u32, i64)> = fetched
        .offsets
        .iter()
        .map(|o| (o.partition, o.offset))
        .collect();
    natively.sort();
    assert_eq!(natively, vec![(0, 5), (3, 42)]);

    // A standalone consumer (no group membership) may commit to the empty group; then the
    // group is deleted with its offsets.
    assert_eq!(a.commit(-1, "", 1, 7), 0);
    let deleted = admin.call(
        2,
        &DeleteGroupsRequest::default().with_groups_names(vec![group("g1")]),
    );
    assert_eq!(deleted.results[0].error_code, 0);
    assert!(fetch_offsets(&mut restarted, "g1").is_empty());
}

#[test]
fn one_group_id_has_members_of_one_protocol() {
    let server = KafkaNode::start();
    create(&mut RawClient::handshaken(&server.native), "t", 2);
    let mut admin = Kafka::connect(&server.kafka);

    // A native consumer in "native-g": a Kafka join is refused.
    let consumer = NativeMember::start(&server.native, "native-g", "t");
    eventually("the native member owns both partitions", || {
        let d = describe(&mut admin, "native-g");
        d.members.len() == 1
            && assigned_partitions(d.members[0].member_assignment.clone()).len() == 2
    });
    let native_view = describe(&mut admin, "native-g");
    assert_eq!(native_view.protocol_type.as_str(), "consumer");
    let mine = assigned_partitions(native_view.members[0].member_assignment.clone());
    assert_eq!(
        mine,
        vec![0, 1],
        "a native member's assignment, as Kafka encodes it"
    );
    let mut k = Member::new(&server.kafka, "native-g", &["range"]);
    let refused = k.kafka.call(JOIN_V, &k.join_request());
    assert_eq!(refused.error_code, K::InconsistentGroupProtocol.code());
    drop(consumer);

    // A Kafka member in "kafka-g": native join and native deletion are refused.
    // Its session (10 s) outlasts the native calls below on a loaded machine; the wait for
    // its expiry allows 30 s.
    let mut a = Member::new(&server.kafka, "kafka-g", &["range"]);
    a.session_timeout_ms = 10_000;
    let (leader, _) = join_all(&mut [&mut a]);
    sync_all(&mut [&mut a], leader);
    let mut native = RawClient::handshaken(&server.native);
    let join = m::JoinGroupRequest {
        group_id: "kafka-g".into(),
        topics: vec!["t".into()],
        session_timeout_ms: 10_000,
        client_id: "native".into(),
        ..Default::default()
    };
    let refused = native.call(&join);
    assert_eq!(
        refused.error.as_ref().map(|e| e.code),
        Some(u32::from(ErrorCode::GROUP_NOT_EMPTY.code())),
        "{refused:?}"
    );
    let refused = native.call(&m::DeleteGroupRequest {
        group_id: "kafka-g".into(),
        offsets: Vec::new(),
    });
    assert_eq!(
        refused.error.as_ref().map(|e| e.code),
        Some(u32::from(ErrorCode::GROUP_NOT_EMPTY.code())),
        "{refused:?}"
    );

    // The Kafka member stops heartbeating: its session expires, the group empties and
    // native members may use the id.
    eventually("the silent member's session expired", || {
        describe(&mut admin, "kafka-g").group_state.as_str() == "Empty"
    });
    let joined = native.call(&join);
    assert!(joined.error.is_none(), "{joined:?}");
    assert_eq!(a.heartbeat(), K::UnknownMemberId.code());
}

#[test]
fn a_restarted_static_member_gets_its_assignment_back_and_fences_its_old_self() {
    let server = KafkaNode::start();
    create(&mut RawClient::handshaken(&server.native), "t", 4);
    let mut a = Member::new(&server.kafka, "static-g", &["range"]);
    let mut b = Member::new(&server.kafka, "static-g", &["range"]);
    b.instance = Some("instance-b");
    let (leader, generation) = join_all(&mut [&mut a, &mut b]);
    let owned = sync_all(&mut [&mut a, &mut b], leader);
    let b_owned = owned[1].clone();

    // b restarts (a new connection, same instance id, no member id).
    let mut b2 = Member::new(&server.kafka, "static-g", &["range"]);
    b2.instance = Some("instance-b");
    let sent = b2.start_join();
    let joined = b2.finish_join(sent);
    assert_ne!(b2.id, b.id, "a new member id");
    // The leader is the first member in id order: a, whose id was handed out first.
    assert_eq!(leader, 0);
    {
        // A follower came back: same generation, same assignment, no rebalance.
        assert_eq!(joined.generation_id, generation);
        let request = b2.sync_request(vec![]);
        let synced = b2.kafka.call(5, &request);
        assert_eq!(assigned_partitions(synced.assignment), b_owned);
        assert_eq!(a.heartbeat(), 0);
    }
    assert_eq!(
        b.heartbeat(),
        K::FencedInstanceId.code(),
        "the old self is fenced"
    );
    let described = describe(&mut Kafka::connect(&server.kafka), "static-g");
    assert!(described.members.iter().any(|m| m
        .group_instance_id
        .as_ref()
        .map(|i| i.to_string())
        .as_deref()
        == Some("instance-b")));
}

/// Kafka's OffsetCommit refuses a partition of an unknown topic (or past its topic's
/// partitions) before the coordinator checks the committer, and only the known partitions
/// meet that check (librdkafka's test 0030, `do_nonexist_commit`, commits for a topic that
/// does not exist as a member that is not in the group).
#[test]
fn a_commit_of_unknown_partitions_is_refused_for_them_before_the_member_check() {
    let server = KafkaNode::start();
    create(&mut RawClient::handshaken(&server.native), "t", 2);
    let mut kafka = Kafka::connect(&server.kafka);
    let partition = |index: i32| {
        OffsetCommitRequestPartition::default()
            .with_partition_index(index)
            .with_committed_offset(1)
    };
    let topic = |name: &str, partitions: Vec<OffsetCommitRequestPartition>| {
        OffsetCommitRequestTopic::default()
            .with_name(TopicName(s(name)))
            .with_partitions(partitions)
    };
    let commit = |topics: Vec<OffsetCommitRequestTopic>| {
        OffsetCommitRequest::default()
            .with_group_id(group("nonexist-commit"))
            .with_generation_id_or_member_epoch(3)
            .with_member_id(s("not-a-member"))
            .with_topics(topics)
    };
    let codes = |response: OffsetCommitResponse| -> Vec<(String, i32, i16)> {
        response
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.name.0.to_string(), p.partition_index, p.error_code))
            })
            .collect()
    };
    let unknown = K::UnknownTopicOrPartition.code();
    let only_unknown = kafka.call(8, &commit(vec![topic("no-such-topic", vec![partition(0)])]));
    assert_eq!(codes(only_unknown), [("no-such-topic".into(), 0, unknown)]);
    // Mixed: the unknown ones are refused for themselves, the known one meets the member
    // check (a stranger with a positive generation).
    let mixed = commit(vec![
        topic("no-such-topic", vec![partition(0)]),
        topic("t", vec![partition(0), partition(7)]),
    ]);
    assert_eq!(
        codes(kafka.call(8, &mixed)),
        [
            ("no-such-topic".into(), 0, unknown),
            ("t".into(), 0, K::UnknownMemberId.code()),
            ("t".into(), 7, unknown),
        ]
    );
    assert!(fetch_offsets(&mut kafka, "nonexist-commit").is_empty());
}
