//! The classic mode's rules between groups: one namespace with native groups, one bound on
//! groups, the classic groups' shared byte budget, vacant groups forgotten, dropped
//! partitions answering parked requests. Parked requests are oneshot receivers read with
//! `try_recv` (answered, or still waiting); time is passed in.

use std::time::Duration;

use bytes::Bytes;
use tinymq_protocol::{messages as m, ErrorCode};

use super::super::classic::{
    self, Phase, Protocol, CLASSIC_GROUPS_BYTES_MAX, INITIAL_REBALANCE_DELAY,
};
use super::super::offsets::partition_for_group;
use super::super::table;
use super::*;

fn join(member_id: &str) -> Join {
    Join {
        member_id: member_id.into(),
        require_known_member_id: false,
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout: Duration::from_secs(10),
        rebalance_timeout: Duration::from_secs(10),
        protocol_type: "consumer".into(),
        protocols: vec![Protocol {
            name: "range".into(),
            metadata: Bytes::new(),
        }],
        group_instance_id: None,
    }
}

/// Sends `join` of `group`; its answer, now or later.
fn park(
    coordinator: &GroupCoordinator,
    group: &str,
    join: Join,
    now: Instant,
) -> oneshot::Receiver<Reply> {
    let (waiter, answer) = oneshot::channel();
    deliver(coordinator.park_join(group, join, waiter, now));
    answer
}

/// The join's answer if it came (`None`: still waiting).
fn joined(answer: &mut oneshot::Receiver<Reply>) -> Option<Joined> {
    match answer.try_recv() {
        Ok(Reply::Join(joined)) => Some(joined),
        Ok(other) => panic!("not a join answer: {other:?}"),
        Err(oneshot::error::TryRecvError::Empty) => None,
        Err(e) => panic!("dropped unanswered: {e}"),
    }
}

fn join_error(answer: &mut oneshot::Receiver<Reply>) -> Option<ClassicError> {
    joined(answer).and_then(|j| j.error)
}

fn native_join(coordinator: &GroupCoordinator, group: &str) -> Result<(), ErrorCode> {
    let request = m::JoinGroupRequest {
        group_id: group.into(),
        topics: vec!["t".into()],
        session_timeout_ms: 10_000,
        client_id: "native".into(),
        ..Default::default()
    };
    coordinator
        .join(&request, &|_| None)
        .map(|_| ())
        .map_err(|(code, _)| code)
}

fn is_listed(coordinator: &GroupCoordinator, group: &str) -> bool {
    coordinator
        .classic_groups()
        .iter()
        .any(|g| g.group_id == group)
}

#[test]
fn a_classic_group_holds_its_id_while_it_has_members() {
    let coordinator = GroupCoordinator::default();
    let now = Instant::now();
    let mut answer = park(&coordinator, "g", join(""), now);
    assert_eq!(joined(&mut answer), None, "waits for the join phase");
    assert_eq!(
        native_join(&coordinator, "g"),
        Err(ErrorCode::GROUP_NOT_EMPTY)
    );
    let refused = coordinator.prepare_delete("g").unwrap_err();
    assert_eq!(refused.0, ErrorCode::GROUP_NOT_EMPTY, "{}", refused.1);
    let member = coordinator.classic_describe("g").unwrap().members[0]
        .member_id
        .clone();
    // Its answer is the leave's: the member left before its join phase ended.
    assert_eq!(coordinator.classic_leave("g", &member, None, now), Ok(()));
    assert_eq!(join_error(&mut answer), Some(ClassicError::UnknownMemberId));
    assert!(is_listed(&coordinator, "g"), "vacant, kept a while");
    // Vacant: a native join takes the id over.
    native_join(&coordinator, "g").unwrap();
    assert!(!is_listed(&coordinator, "g"));
    assert!(coordinator.groups.lock().is_consistent());
}

#[test]
fn a_vacant_classic_group_is_deleted_by_a_native_delete() {
    let coordinator = GroupCoordinator::default();
    let now = Instant::now();
    let _answer = park(&coordinator, "g", join(""), now);
    let member = coordinator.classic_describe("g").unwrap().members[0]
        .member_id
        .clone();
    coordinator.classic_leave("g", &member, None, now).unwrap();
    assert_eq!(coordinator.prepare_delete("g"), Ok(Vec::new()));
    assert!(!is_listed(&coordinator, "g"));
    let unknown = coordinator.prepare_delete("g").unwrap_err();
    assert_eq!(unknown.0, ErrorCode::GROUP_ID_NOT_FOUND);
}

#[test]
fn a_group_with_native_members_refuses_classic_members() {
    let coordinator = GroupCoordinator::default();
    native_join(&coordinator, "n").unwrap();
    let mut answer = park(&coordinator, "n", join(""), Instant::now());
    assert_eq!(
        join_error(&mut answer),
        Some(ClassicError::InconsistentGroupProtocol)
    );
    assert!(
        !is_listed(&coordinator, "n"),
        "the refused join left no group behind"
    );
    assert_eq!(coordinator.describe("n").unwrap().members.len(), 1);
}

#[test]
fn refused_joins_leave_no_group_behind() {
    let coordinator = GroupCoordinator::default();
    let now = Instant::now();
    let refused = [
        (
            Join {
                session_timeout: Duration::ZERO,
                ..join("")
            },
            ClassicError::InvalidSessionTimeout,
        ),
        (
            Join {
                protocols: Vec::new(),
                ..join("")
            },
            ClassicError::InconsistentGroupProtocol,
        ),
        // Refused by the (new, empty) group itself.
        (join("not-a-member"), ClassicError::UnknownMemberId),
    ];
    for (n, (request, error)) in refused.into_iter().enumerate() {
        let mut answer = park(&coordinator, &format!("g{n}"), request, now);
        assert_eq!(join_error(&mut answer), Some(error));
    }
    let mut answer = park(&coordinator, "bad/id", join(""), now);
    assert_eq!(join_error(&mut answer), Some(ClassicError::InvalidGroupId));
    assert!(coordinator.classic_groups().is_empty());
    // A join told MEMBER_ID_REQUIRED keeps its group: the member comes back.
    let first = Join {
        require_known_member_id: true,
        ..join("")
    };
    let mut answer = park(&coordinator, "kept", first, now);
    assert_eq!(
        join_error(&mut answer),
        Some(ClassicError::MemberIdRequired)
    );
    assert_eq!(coordinator.classic_groups().len(), 1);
    assert!(coordinator.groups.lock().is_consistent());
}

#[test]
fn a_group_may_keep_what_the_other_classic_groups_leave_of_the_budget() {
    // Plenty left: the group's own limit. Little left: what is left, named.
    assert_eq!(
        table::budget_left(1000, CLASSIC_GROUPS_BYTES_MAX),
        classic::Budget::default()
    );
    let tight = table::budget_left(1000, 1010);
    assert_eq!(tight.bytes_max, 10);
    assert_eq!(tight.limit, "CLASSIC_GROUPS_BYTES_MAX");
    // The running total follows joins, leaves and expiries.
    let coordinator = GroupCoordinator::default();
    let now = Instant::now();
    let big = Join {
        protocols: vec![Protocol {
            name: "range".into(),
            metadata: Bytes::from(vec![0u8; 100_000]),
        }],
        ..join("")
    };
    let _big = park(&coordinator, "big", big, now);
    let _small = park(&coordinator, "small", join(""), now);
    let total = coordinator.groups.lock().classic_bytes();
    assert!(total > 100_000, "{total}");
    // Sessions run out (nobody heartbeats after the join phase).
    coordinator.classic_tick(now + INITIAL_REBALANCE_DELAY);
    assert_eq!(coordinator.groups.lock().classic_bytes(), total);
    coordinator.classic_tick(now + INITIAL_REBALANCE_DELAY + Duration::from_secs(10));
    let groups = coordinator.groups.lock();
    assert_eq!(groups.classic_bytes(), 0);
    assert!(groups.is_consistent());
}

#[test]
fn vacant_groups_are_forgotten_after_a_while() {
    let coordinator = GroupCoordinator::default();
    let now = Instant::now();
    let mut answer = park(&coordinator, "g", join(""), now);
    // The join phase ends; the member never syncs nor heartbeats: it expires after its
    // session...
    let joined_at = now + INITIAL_REBALANCE_DELAY;
    coordinator.classic_tick(joined_at);
    assert_eq!(join_error(&mut answer), None, "joined");
    assert_eq!(
        native_join(&coordinator, "g"),
        Err(ErrorCode::GROUP_NOT_EMPTY)
    );
    let later = joined_at + Duration::from_secs(10);
    coordinator.classic_tick(later);
    assert!(
        is_listed(&coordinator, "g"),
        "the group stays a while, empty"
    );
    let summary = &coordinator.classic_groups()[0];
    assert_eq!((summary.phase, summary.members), (Phase::Empty, 0));
    // ...and the vacant group is forgotten.
    coordinator.classic_tick(later + VACANT_GROUP_FORGET_AFTER);
    assert!(coordinator.classic_groups().is_empty());
}

#[test]
fn a_classic_join_past_the_one_bound_on_groups_is_told_the_group_limit() {
    let coordinator = GroupCoordinator::default();
    let now = Instant::now();
    {
        let mut groups = coordinator.groups.lock();
        for i in 0..GROUPS_MAX - 1 {
            groups.insert(format!("held-{i}"), Entry::Classic(ClassicGroup::new(now)));
        }
    }
    native_join(&coordinator, "native").unwrap();
    let mut answer = park(&coordinator, "one-more", join(""), now);
    assert_eq!(
        join_error(&mut answer),
        Some(ClassicError::GroupMaxSizeReached)
    );
    assert!(!is_listed(&coordinator, "one-more"), "left no group behind");
    assert_eq!(
        native_join(&coordinator, "one-more-native"),
        Err(ErrorCode::LIMIT_EXCEEDED)
    );
    // Groups already counted keep working, and a group freed makes room.
    let mut answer = park(&coordinator, "held-0", join(""), now);
    assert_eq!(join_error(&mut answer), None, "taken");
    native_join(&coordinator, "native").unwrap();
    coordinator.groups.lock().remove("held-1");
    let mut answer = park(&coordinator, "one-more", join(""), now);
    assert_eq!(join_error(&mut answer), None, "taken");
    assert!(is_listed(&coordinator, "one-more"));
}

#[test]
fn losing_an_offsets_partition_drops_its_classic_groups_and_answers_their_waiters() {
    let coordinator = GroupCoordinator::default();
    let now = Instant::now();
    let a = "a";
    let b = ["b", "c", "d", "e", "f", "g"]
        .into_iter()
        .find(|b| partition_for_group(b) != partition_for_group(a))
        .unwrap();
    let mut waiting_a = park(&coordinator, a, join(""), now);
    let mut waiting_b = park(&coordinator, b, join(""), now);
    coordinator.drop_partition(partition_for_group(a));
    assert_eq!(
        join_error(&mut waiting_a),
        Some(ClassicError::NotCoordinator)
    );
    assert_eq!(join_error(&mut waiting_b), None, "still waiting");
    assert!(!is_listed(&coordinator, a));
    assert!(is_listed(&coordinator, b));
    assert!(coordinator.groups.lock().is_consistent());
}

#[test]
fn offsets_of_a_group_with_classic_members_do_not_expire() {
    let coordinator = GroupCoordinator::default();
    for p in 0..super::super::offsets::OFFSETS_PARTITIONS {
        coordinator.offsets.begin_load(p, 1);
        let loaded = super::super::offsets::LoadedOffsets::new();
        coordinator.offsets.finish_load(p, 1, loaded);
    }
    let now = Instant::now();
    let _answer = park(&coordinator, "k", join(""), now);
    let committed = Some(super::super::offsets::Committed {
        offset: 1,
        metadata: String::new(),
    });
    let end = 1;
    coordinator
        .offsets
        .append("k", 1, vec![(("t".into(), 0), committed)], || Ok(((), end)))
        .unwrap();
    coordinator
        .offsets
        .apply_up_to(partition_for_group("k"), 1, end);
    std::thread::sleep(Duration::from_millis(5));
    assert!(coordinator.expired_offsets(Duration::ZERO).is_empty());
    let member = coordinator.classic_describe("k").unwrap().members[0]
        .member_id
        .clone();
    coordinator.classic_leave("k", &member, None, now).unwrap();
    assert_eq!(coordinator.expired_offsets(Duration::ZERO).len(), 1);
}

#[test]
fn commits_are_checked_by_kafkas_rules_and_unknown_groups_are_empty() {
    let coordinator = GroupCoordinator::default();
    let now = Instant::now();
    let check = |group: &str, member: &str, generation| {
        coordinator.classic_check_commit(group, member, None, generation)
    };
    assert_eq!(
        check("unknown", "", -1),
        Ok(()),
        "a consumer assigning itself"
    );
    assert_eq!(check("unknown", "m", 1), Err(ClassicError::UnknownMemberId));
    let mut answer = park(&coordinator, "g", join(""), now);
    coordinator.classic_tick(now + INITIAL_REBALANCE_DELAY);
    let joined = joined(&mut answer).unwrap();
    assert_eq!(
        check("g", &joined.member_id, joined.generation),
        Err(ClassicError::RebalanceInProgress),
        "no commits while the assignment is awaited"
    );
    assert_eq!(
        check("g", &joined.member_id, joined.generation + 1),
        Err(ClassicError::IllegalGeneration)
    );
    assert_eq!(
        check("g", "stranger", 1),
        Err(ClassicError::UnknownMemberId)
    );
}
