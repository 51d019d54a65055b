//! What groups keep, in bytes: copies of the requests' bytes (never slices pinning a whole
//! request frame), counted exactly, and refused past their limits.

use super::tests::{joined, synced};
use super::*;

const SESSION: Duration = Duration::from_secs(10);

/// A join whose protocol metadata is `metadata`.
fn join_with(member_id: &str, fresh: &str, metadata: Bytes) -> Joining {
    let join = Join {
        member_id: member_id.into(),
        require_known_member_id: false,
        client_id: "client".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout: SESSION,
        rebalance_timeout: SESSION,
        protocol_type: "consumer".into(),
        protocols: vec![Protocol {
            name: "range".into(),
            metadata,
        }],
        group_instance_id: None,
    };
    Joining {
        join,
        fresh_member_id: fresh.into(),
    }
}

/// Whether `part` lies inside `whole`'s memory.
fn is_within(part: &Bytes, whole: &Bytes) -> bool {
    let start = whole.as_ptr() as usize;
    let at = part.as_ptr() as usize;
    at >= start && at < start + whole.len()
}

#[test]
fn members_keep_copies_of_metadata_and_assignments_not_the_request_frames() {
    let mut g: Group<&'static str> = Group::new(Instant::now());
    let now = Instant::now();
    let join_frame = Bytes::from(vec![7u8; 64 * 1024]);
    let metadata = join_frame.slice(100..200);
    assert!(g.join(join_with("", "a", metadata), "a", now).is_empty());
    let d = g.tick(now + INITIAL_REBALANCE_DELAY).1;
    let leader = joined(&d, "a");
    let (_, _, kept) = &leader.members[0];
    assert_eq!(kept.len(), 100);
    assert!(
        !is_within(kept, &join_frame),
        "a copy, not a slice of the frame"
    );

    let sync_frame = Bytes::from(vec![9u8; 64 * 1024]);
    let assignments = vec![("a".to_string(), sync_frame.slice(10..60))];
    let d = g.sync("a", leader.generation, None, None, assignments, "a", now);
    let assignment = synced(&d, "a").assignment;
    assert_eq!(assignment.len(), 50);
    assert!(!is_within(&assignment, &sync_frame));
    assert_eq!(g.stored_bytes(), g.recount_bytes());
}

#[test]
fn metadata_over_its_limit_is_refused_before_anything_is_kept() {
    let mut g: Group<&'static str> = Group::new(Instant::now());
    let now = Instant::now();
    let big = Bytes::from(vec![0u8; MEMBER_METADATA_BYTES_MAX + 1]);
    let d = g.join(join_with("", "a", big), "a", now);
    assert_eq!(joined(&d, "a").error, Some(ClassicError::InvalidRequest));
    assert!(g.is_vacant());
    assert_eq!(g.stored_bytes(), 0);
    // Just under: fine.
    let fits = Bytes::from(vec![0u8; MEMBER_METADATA_BYTES_MAX - "range".len()]);
    assert!(g.join(join_with("", "a", fits), "a", now).is_empty());
    assert_eq!(g.stored_bytes(), g.recount_bytes());
}

#[test]
fn a_join_over_the_groups_budget_is_refused_and_a_rejoin_counts_its_old_bytes_out() {
    let mut g: Group<&'static str> = Group::new(Instant::now());
    let now = Instant::now();
    let metadata = Bytes::from(vec![1u8; 1000]);
    assert!(g
        .join(join_with("", "a", metadata.clone()), "a", now)
        .is_empty());
    let one_member = g.stored_bytes();
    assert!(one_member > 1000);
    g.budget = Budget {
        bytes_max: one_member + 500,
        limit: "TEST_BYTES_MAX",
    };
    let d = g.join(join_with("", "b", metadata.clone()), "b", now);
    assert_eq!(
        joined(&d, "b").error,
        Some(ClassicError::GroupMaxSizeReached)
    );
    assert_eq!(g.members.len(), 1);
    // The member itself may rejoin with as much: its old metadata is replaced.
    assert!(g.join(join_with("a", "", metadata), "a", now).is_empty());
    assert_eq!(g.stored_bytes(), one_member);
    // ...but not with more than the budget allows.
    let more = Bytes::from(vec![1u8; 2000]);
    let d = g.join(join_with("a", "", more), "a2", now);
    assert_eq!(
        joined(&d, "a2").error,
        Some(ClassicError::GroupMaxSizeReached)
    );
    assert_eq!(g.stored_bytes(), g.recount_bytes());
}

#[test]
fn assignments_over_their_limits_are_refused_and_the_group_waits_for_a_good_one() {
    let mut g: Group<&'static str> = Group::new(Instant::now());
    let now = Instant::now();
    assert!(g
        .join(join_with("", "a", Bytes::from_static(b"m")), "a", now)
        .is_empty());
    let d = g.tick(now + INITIAL_REBALANCE_DELAY).1;
    let generation = joined(&d, "a").generation;
    let huge = vec![(
        "a".to_string(),
        Bytes::from(vec![0u8; ASSIGNMENT_BYTES_MAX + 1]),
    )];
    let d = g.sync("a", generation, None, None, huge, "a", now);
    assert_eq!(synced(&d, "a").error, Some(ClassicError::InvalidRequest));
    assert_eq!(g.phase, Phase::CompletingRebalance);

    g.budget = Budget {
        bytes_max: g.stored_bytes() + 10,
        limit: "TEST_BYTES_MAX",
    };
    let over = vec![("a".to_string(), Bytes::from(vec![0u8; 11]))];
    let d = g.sync("a", generation, None, None, over, "a", now);
    assert_eq!(
        synced(&d, "a").error,
        Some(ClassicError::GroupMaxSizeReached)
    );
    // Assignments of members that are not in the group are not kept, nor counted.
    let fits = vec![
        ("a".to_string(), Bytes::from(vec![0u8; 10])),
        ("stranger".to_string(), Bytes::from(vec![0u8; 100])),
    ];
    let d = g.sync("a", generation, None, None, fits, "a", now);
    assert_eq!(synced(&d, "a").error, None);
    assert_eq!(g.phase, Phase::Stable);
    assert_eq!(g.stored_bytes(), g.recount_bytes());
}

#[test]
fn the_count_follows_rebalances_leaves_expiries_and_static_replacements() {
    let mut g: Group<&'static str> = Group::new(Instant::now());
    let now = Instant::now();
    let mut static_join = join_with("", "s-1", Bytes::from_static(b"static"));
    static_join.join.group_instance_id = Some("instance".into());
    assert!(g.join(static_join.clone(), "s", now).is_empty());
    assert!(g
        .join(join_with("", "b", Bytes::from_static(b"dynamic")), "b", now)
        .is_empty());
    let d = g.tick(now + INITIAL_REBALANCE_DELAY).1;
    let generation = joined(&d, "s").generation;
    g.sync("b", generation, None, None, vec![], "b", now);
    let assignments = vec![
        ("s-1".to_string(), Bytes::from_static(b"for-s")),
        ("b".to_string(), Bytes::from_static(b"for-b")),
    ];
    g.sync("s-1", generation, None, None, assignments, "s", now);
    assert_eq!(g.stored_bytes(), g.recount_bytes());
    // A restarted static member: a new, longer id.
    let restarted = Joining {
        fresh_member_id: "s-2-much-longer".into(),
        ..static_join
    };
    g.join(restarted, "s2", now);
    assert_eq!(g.stored_bytes(), g.recount_bytes());
    // A rebalance clears assignments; a leave and an expiry remove members.
    g.join(join_with("", "c", Bytes::from_static(b"c")), "c", now);
    assert_eq!(g.stored_bytes(), g.recount_bytes());
    assert_eq!(g.leave("b", now).0, Ok(()));
    assert_eq!(g.stored_bytes(), g.recount_bytes());
    // The join phase ends (who did not rejoin is dropped), then sessions run out.
    let later = now + Duration::from_secs(3600);
    g.tick(later);
    assert_eq!(g.stored_bytes(), g.recount_bytes());
    g.tick(later + SESSION);
    assert!(g.is_vacant());
    assert_eq!(g.stored_bytes(), 0);
}
