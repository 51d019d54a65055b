//! The coordinator's native mode and the rules both modes share: offsets expiry, dropped
//! partitions, one namespace of group ids, one bound on groups.

use super::*;

fn none(_: &str) -> Option<u32> {
    None
}

/// A coordinator leading (in epoch 1, loaded, empty) every offsets partition.
fn leading_everything() -> GroupCoordinator {
    let coordinator = GroupCoordinator::default();
    for p in 0..offsets::OFFSETS_PARTITIONS {
        coordinator.offsets.begin_load(p, 1);
        coordinator
            .offsets
            .finish_load(p, 1, offsets::LoadedOffsets::new());
    }
    coordinator
}

/// Appends `changes` as if written at the next offset and replicated at once.
fn append_replicated(coordinator: &GroupCoordinator, group: &str, changes: Vec<Change>) {
    static END: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
    let end = END.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    coordinator
        .offsets
        .append(group, 1, changes, || Ok(((), end)))
        .unwrap();
    coordinator
        .offsets
        .apply_up_to(partition_for_group(group), 1, end);
}

#[test]
fn offsets_of_empty_groups_expire_but_not_of_groups_with_members() {
    let coordinator = leading_everything();
    let commit = |group: &str, member: &str, generation: u32| m::OffsetCommitRequest {
        group_id: group.into(),
        member_id: member.into(),
        generation,
        offsets: vec![m::CommittedOffset {
            topic: "t".into(),
            partition: 0,
            offset: 3,
            metadata: String::new(),
            error: None,
        }],
    };
    let topic_t = |t: &str| (t == "t").then_some(1);
    let changes = coordinator
        .prepare_commit(&commit("idle", "", 0), &topic_t)
        .unwrap();
    append_replicated(&coordinator, "idle", changes);
    let join = coordinator
        .join(
            &m::JoinGroupRequest {
                group_id: "busy".into(),
                topics: vec!["t".into()],
                session_timeout_ms: 10_000,
                client_id: "c".into(),
                ..Default::default()
            },
            &none,
        )
        .unwrap();
    let changes = coordinator
        .prepare_commit(&commit("busy", &join.member_id, join.generation), &topic_t)
        .unwrap();
    append_replicated(&coordinator, "busy", changes);
    std::thread::sleep(Duration::from_millis(5));
    let expired = coordinator.expired_offsets(Duration::ZERO);
    assert_eq!(
        expired,
        vec![("idle".to_string(), vec![(("t".to_string(), 0), None)])],
        "an empty group's offsets expire, a group with members keeps them"
    );
    for (group, tombstones) in expired {
        append_replicated(&coordinator, &group, tombstones);
    }
    assert!(coordinator.committed("idle").is_empty());
    assert_eq!(coordinator.committed("busy").len(), 1);
    assert_eq!(coordinator.list(), vec!["busy".to_string()]);
    assert_eq!(
        validate_group_id("bad/id").unwrap_err().0,
        ErrorCode::INVALID_GROUP_ID
    );
}

/// A native join of `group` (one topic, a 10 s session).
fn native_join(
    coordinator: &GroupCoordinator,
    group: &str,
) -> Result<m::JoinGroupResponse, GroupError> {
    let request = m::JoinGroupRequest {
        group_id: group.into(),
        topics: vec!["t".into()],
        session_timeout_ms: 10_000,
        client_id: "c".into(),
        ..Default::default()
    };
    coordinator.join(&request, &none)
}

#[test]
fn losing_an_offsets_partition_drops_its_groups_members_and_offsets() {
    let coordinator = leading_everything();
    let join = |group: &str| native_join(&coordinator, group).unwrap();
    let a = "a";
    let b = ["b", "c", "d", "e", "f", "g"]
        .into_iter()
        .find(|b| partition_for_group(b) != partition_for_group(a))
        .unwrap();
    join(a);
    join(b);
    let committed = Some(Committed {
        offset: 1,
        metadata: String::new(),
    });
    append_replicated(&coordinator, a, vec![(("t".into(), 0), committed)]);
    coordinator.drop_partition(partition_for_group(a));
    assert!(
        coordinator.describe(a).is_none(),
        "members and offsets are gone"
    );
    assert!(coordinator.describe(b).is_some());
    assert_eq!(coordinator.list(), vec![b.to_string()]);
}

/// A classic join of `group` by a new member; its answer, now or at the end of the join
/// phase.
fn classic_join(
    coordinator: &GroupCoordinator,
    group: &str,
    now: Instant,
) -> tokio::sync::oneshot::Receiver<classic::Reply> {
    let join = classic::Join {
        member_id: String::new(),
        require_known_member_id: false,
        client_id: "k".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout: Duration::from_secs(10),
        rebalance_timeout: Duration::from_secs(10),
        protocol_type: "consumer".into(),
        protocols: vec![classic::Protocol {
            name: "range".into(),
            metadata: bytes::Bytes::new(),
        }],
        group_instance_id: None,
    };
    let (waiter, answer) = tokio::sync::oneshot::channel();
    table::deliver(coordinator.park_join(group, join, waiter, now));
    answer
}

/// Whether a classic join of `group` was refused at once, and with what.
fn classic_refusal(
    answer: &mut tokio::sync::oneshot::Receiver<classic::Reply>,
) -> Option<classic::ClassicError> {
    match answer.try_recv() {
        Ok(classic::Reply::Join(joined)) => joined.error,
        _ => None,
    }
}

#[test]
fn a_group_with_classic_members_refuses_native_joins_and_deletion() {
    let coordinator = leading_everything();
    let join = |group: &str| native_join(&coordinator, group);
    let now = Instant::now();
    let mut waiting = classic_join(&coordinator, "k", now);
    assert_eq!(classic_refusal(&mut waiting), None);
    assert_eq!(join("k").unwrap_err().0, ErrorCode::GROUP_NOT_EMPTY);
    assert_eq!(
        coordinator.prepare_delete("k").unwrap_err().0,
        ErrorCode::GROUP_NOT_EMPTY
    );
    let member = coordinator.classic_describe("k").unwrap().members[0]
        .member_id
        .clone();
    coordinator.classic_leave("k", &member, None, now).unwrap();
    join("k").unwrap();
    assert_eq!(
        classic_refusal(&mut classic_join(&coordinator, "k", now)),
        Some(classic::ClassicError::InconsistentGroupProtocol),
        "a group with native members takes no classic member"
    );
}

#[test]
fn groups_of_both_protocols_count_against_one_bound() {
    let coordinator = leading_everything();
    let join = |group: &str| native_join(&coordinator, group);
    let now = Instant::now();
    join("native").unwrap();
    let mut answer = classic_join(&coordinator, "kafka-0", now);
    assert_eq!(classic_refusal(&mut answer), None);
    {
        // The others vacant (as if their members just left): cheap to make, and counted.
        let mut groups = coordinator.groups.lock();
        for i in 1..GROUPS_MAX - 1 {
            let vacant = table::ClassicGroup::new(now);
            groups.insert(format!("kafka-{i}"), Entry::Classic(vacant));
        }
    }
    let refused = join("one-more-native").unwrap_err();
    assert_eq!(refused.0, ErrorCode::LIMIT_EXCEEDED, "{}", refused.1);
    let mut refused = classic_join(&coordinator, "one-more-kafka", now);
    assert_eq!(
        classic_refusal(&mut refused),
        Some(classic::ClassicError::GroupMaxSizeReached)
    );
    // Groups already counted keep working.
    join("native").unwrap();
    let mut again = classic_join(&coordinator, "kafka-1", now);
    assert_eq!(classic_refusal(&mut again), None);
    // Vacant classic groups are forgotten after a while: room again.
    coordinator.classic_tick(now + classic::VACANT_GROUP_FORGET_AFTER);
    join("one-more-native").unwrap();
    assert_eq!(coordinator.classic_groups().len(), 2, "kafka-0 and kafka-1");
}

#[test]
fn session_timeouts_up_to_kafkas_maximum_are_taken_natively() {
    let coordinator = leading_everything();
    let join = |session_timeout_ms: u32| {
        let request = m::JoinGroupRequest {
            group_id: "g".into(),
            topics: vec!["t".into()],
            session_timeout_ms,
            client_id: "c".into(),
            ..Default::default()
        };
        coordinator.join(&request, &none)
    };
    join(30 * 60 * 1000).unwrap();
    let refused = join(30 * 60 * 1000 + 1).unwrap_err();
    assert_eq!(refused.0, ErrorCode::INVALID_REQUEST, "{}", refused.1);
}

#[test]
fn offsets_are_deleted_per_partition_unless_a_live_member_consumes_the_topic() {
    let coordinator = leading_everything();
    let admin_commit = |group: &str, offsets: &[(&str, u32)]| m::OffsetCommitRequest {
        group_id: group.into(),
        offsets: offsets
            .iter()
            .map(|(topic, partition)| m::CommittedOffset {
                topic: (*topic).into(),
                partition: *partition,
                offset: 7,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let two_partitions = |_: &str| Some(2);
    let changes = coordinator
        .prepare_commit(
            &admin_commit("g", &[("a", 0), ("a", 1), ("b", 0)]),
            &two_partitions,
        )
        .unwrap();
    append_replicated(&coordinator, "g", changes);
    let tp = |t: &str, p: u32| (t.to_string(), p);
    let asked: BTreeSet<Tp> = [tp("a", 0), tp("b", 1)].into();
    let (tombstones, outcomes) = coordinator.prepare_delete_offsets("g", &asked).unwrap();
    assert_eq!(
        tombstones,
        vec![(tp("a", 0), None)],
        "b-1 has no offset to delete"
    );
    assert_eq!(outcomes, vec![(tp("a", 0), None), (tp("b", 1), None)]);
    append_replicated(&coordinator, "g", tombstones);
    let left: Vec<Tp> = coordinator.committed("g").into_keys().collect();
    assert_eq!(left, vec![tp("a", 1), tp("b", 0)]);

    // A member subscribed to a: its offsets stay; b's may go.
    coordinator
        .join(
            &m::JoinGroupRequest {
                group_id: "g".into(),
                topics: vec!["a".into()],
                session_timeout_ms: 10_000,
                client_id: "c".into(),
                ..Default::default()
            },
            &two_partitions,
        )
        .unwrap();
    let asked: BTreeSet<Tp> = [tp("a", 1), tp("b", 0)].into();
    let (tombstones, outcomes) = coordinator.prepare_delete_offsets("g", &asked).unwrap();
    assert_eq!(tombstones, vec![(tp("b", 0), None)]);
    let refused = outcomes[0].1.as_ref().map(|(code, _)| *code);
    assert_eq!(refused, Some(ErrorCode::GROUP_SUBSCRIBED_TO_TOPIC));
    assert_eq!(outcomes[1], (tp("b", 0), None));

    let unknown = coordinator
        .prepare_delete_offsets("nobody", &asked)
        .unwrap_err();
    assert_eq!(unknown.0, ErrorCode::GROUP_ID_NOT_FOUND);
}
