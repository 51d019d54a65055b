//! The group state machine, driven by hand: waiters are names, time is an `Instant` moved
//! forward explicitly.

use super::ClassicError as E;
use super::*;

const SESSION: Duration = Duration::from_secs(10);
const REBALANCE: Duration = Duration::from_secs(30);

fn protocols(names: &[&str]) -> Vec<Protocol> {
    names
        .iter()
        .map(|n| Protocol {
            name: n.to_string(),
            metadata: Bytes::from(format!("meta-{n}")),
        })
        .collect()
}

fn join(member_id: &str, fresh: &str, names: &[&str]) -> Joining {
    let join = Join {
        member_id: member_id.into(),
        require_known_member_id: false,
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout: SESSION,
        rebalance_timeout: REBALANCE,
        protocol_type: "consumer".into(),
        protocols: protocols(names),
        group_instance_id: None,
    };
    Joining {
        join,
        fresh_member_id: fresh.into(),
    }
}

pub(super) fn joined(d: &Deliveries<&'static str>, who: &str) -> Joined {
    d.iter()
        .find_map(|(w, r)| match r {
            Reply::Join(j) if *w == who => Some(j.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no join answer for {who} in {d:?}"))
}

pub(super) fn synced(d: &Deliveries<&'static str>, who: &str) -> Synced {
    d.iter()
        .find_map(|(w, r)| match r {
            Reply::Sync(s) if *w == who => Some(s.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no sync answer for {who} in {d:?}"))
}

/// A stable group of members "a" (leader) and "b", at `now`; returns the generation.
fn stable_pair(g: &mut Group<&'static str>, now: Instant) -> i32 {
    assert!(g.join(join("", "a", &["range"]), "a", now).is_empty());
    assert!(g.join(join("", "b", &["range"]), "b", now).is_empty());
    let (_, d) = g.tick(now + INITIAL_REBALANCE_DELAY);
    let a = joined(&d, "a");
    let b = joined(&d, "b");
    assert_eq!(a.leader, "a");
    assert_eq!(a.members.len(), 2, "the leader learns every member");
    assert!(b.members.is_empty(), "followers do not");
    assert_eq!(a.generation, b.generation);
    assert_eq!(g.phase, Phase::CompletingRebalance);
    let later = now + INITIAL_REBALANCE_DELAY;
    assert!(g
        .sync("b", b.generation, None, None, vec![], "b", later)
        .is_empty());
    let assignments = vec![
        ("a".to_string(), Bytes::from_static(b"for-a")),
        ("b".to_string(), Bytes::from_static(b"for-b")),
    ];
    let d = g.sync("a", a.generation, None, None, assignments, "a", later);
    assert_eq!(synced(&d, "a").assignment, Bytes::from_static(b"for-a"));
    assert_eq!(synced(&d, "b").assignment, Bytes::from_static(b"for-b"));
    assert_eq!(g.phase, Phase::Stable);
    a.generation
}

#[test]
fn a_first_join_at_v4_is_told_its_member_id_then_joins_with_it() {
    let now = Instant::now();
    let mut g = Group::new(now);
    let mut first = join("", "m-1", &["range"]);
    first.join.require_known_member_id = true;
    let d = g.join(first, "x", now);
    let answer = joined(&d, "x");
    assert_eq!(answer.error, Some(E::MemberIdRequired));
    assert_eq!(answer.member_id, "m-1");
    assert!(!g.is_vacant(), "the id is reserved");
    assert!(g.members.is_empty());
    // Joining with it: the join phase waits for the initial delay.
    assert!(g
        .join(join("m-1", "unused", &["range"]), "x", now)
        .is_empty());
    assert!(g.tick(now).1.is_empty());
    let (_, d) = g.tick(now + INITIAL_REBALANCE_DELAY);
    let answer = joined(&d, "x");
    assert_eq!((answer.error, answer.generation), (None, 1));
    assert_eq!(answer.leader, "m-1");
    assert_eq!(answer.protocol_name.as_deref(), Some("range"));
    // An unknown id is refused.
    let d = g.join(join("nobody", "unused", &["range"]), "y", now);
    assert_eq!(joined(&d, "y").error, Some(E::UnknownMemberId));
}

#[test]
fn a_join_phase_waits_for_known_members_and_heartbeats_say_rebalancing() {
    let now = Instant::now();
    let mut g = Group::new(now);
    let generation = stable_pair(&mut g, now);
    assert_eq!(g.heartbeat("a", generation, now), Ok(()));
    assert_eq!(
        g.heartbeat("b", generation - 1, now),
        Err(E::IllegalGeneration)
    );
    assert_eq!(g.heartbeat("zz", generation, now), Err(E::UnknownMemberId));
    // c joins: a and b must rejoin; until then the phase waits.
    assert!(g.join(join("", "c", &["range"]), "c", now).is_empty());
    assert_eq!(g.phase, Phase::PreparingRebalance);
    assert_eq!(
        g.heartbeat("a", generation, now),
        Err(E::RebalanceInProgress)
    );
    assert!(
        g.check_commit("a", generation).is_ok(),
        "commit before rejoining"
    );
    assert!(g.join(join("a", "", &["range"]), "a", now).is_empty());
    let d = g.join(join("b", "", &["range"]), "b", now);
    assert_eq!(d.len(), 3, "all three answered once the last rejoined");
    let a = joined(&d, "a");
    assert_eq!(a.generation, generation + 1);
    assert_eq!(a.members.len(), 3);
    assert_eq!(a.leader, "a", "the leader stays the leader");
    assert_eq!(
        g.check_commit("a", a.generation).unwrap_err(),
        E::RebalanceInProgress,
        "no commits while the assignment is awaited"
    );
}

#[test]
fn a_member_that_does_not_rejoin_in_time_is_dropped() {
    let now = Instant::now();
    let mut g = Group::new(now);
    let generation = stable_pair(&mut g, now);
    assert!(g.join(join("a", "", &["range"]), "a", now).is_empty());
    // b keeps heartbeating but never rejoins.
    let mid = now + REBALANCE / 2;
    assert_eq!(
        g.heartbeat("b", generation, mid),
        Err(E::RebalanceInProgress)
    );
    let (_, d) = g.tick(now + REBALANCE);
    let a = joined(&d, "a");
    assert_eq!(a.members.len(), 1);
    assert!(!g.members.contains_key("b"));
}

#[test]
fn leaving_and_expiry_rebalance_the_rest_and_an_empty_group_is_forgettable() {
    let now = Instant::now();
    let mut g = Group::new(now);
    let generation = stable_pair(&mut g, now);
    assert_eq!(g.leave("zz", now).0, Err(E::UnknownMemberId));
    let (error, d) = g.leave("b", now);
    assert_eq!(error, Ok(()));
    assert!(d.is_empty());
    assert_eq!(g.phase, Phase::PreparingRebalance);
    let d = g.join(join("a", "", &["range"]), "a", now);
    let a = joined(&d, "a");
    assert_eq!((a.generation, a.members.len()), (generation + 1, 1));
    // a never syncs nor heartbeats: its session ends and the group empties.
    let (expired, _) = g.tick(now + SESSION);
    assert_eq!(expired, vec!["a".to_string()]);
    assert_eq!(g.phase, Phase::Empty);
    assert!(g.is_vacant());
    assert!(!g.is_forgettable(now + SESSION, Duration::from_secs(60)));
    assert!(g.is_forgettable(
        now + SESSION + Duration::from_secs(60),
        Duration::from_secs(60)
    ));
    assert!(
        g.check_commit("", -1).is_ok(),
        "a standalone consumer's commit"
    );
}

#[test]
fn followers_waiting_for_an_assignment_are_told_when_a_rebalance_starts() {
    let now = Instant::now();
    let mut g = Group::new(now);
    stable_pair(&mut g, now);
    assert!(g.join(join("", "c", &["range"]), "c", now).is_empty());
    assert!(g.join(join("a", "", &["range"]), "a", now).is_empty());
    let d = g.join(join("b", "", &["range"]), "b", now);
    let generation = joined(&d, "b").generation;
    assert!(g
        .sync("b", generation, None, None, vec![], "b", now)
        .is_empty());
    let (_, d) = g.leave("c", now);
    assert_eq!(synced(&d, "b").error, Some(E::RebalanceInProgress));
}

#[test]
fn the_protocol_is_one_every_member_supports() {
    let now = Instant::now();
    let mut g = Group::new(now);
    let d = g.join(join("", "a", &["cooperative-sticky", "range"]), "a", now);
    assert!(d.is_empty());
    let d = g.join(join("", "b", &["roundrobin"]), "b", now);
    assert_eq!(joined(&d, "b").error, Some(E::InconsistentGroupProtocol));
    let mut other_type = join("", "b", &["range"]);
    other_type.join.protocol_type = "connect".into();
    let d = g.join(other_type, "b", now);
    assert_eq!(joined(&d, "b").error, Some(E::InconsistentGroupProtocol));
    assert!(g
        .join(join("", "b", &["range", "cooperative-sticky"]), "b", now)
        .is_empty());
    assert!(g.join(join("", "c", &["range"]), "c", now).is_empty());
    let (_, d) = g.tick(now + INITIAL_REBALANCE_DELAY);
    let a = joined(&d, "a");
    assert_eq!(a.protocol_name.as_deref(), Some("range"));
    let metadata: Vec<Bytes> = a.members.iter().map(|(_, _, m)| m.clone()).collect();
    assert!(metadata
        .iter()
        .all(|m| m == &Bytes::from_static(b"meta-range")));
    let mut bad = join("", "d", &["range"]);
    bad.join.session_timeout = Duration::from_millis(1);
    assert_eq!(
        joined(&g.join(bad, "d", now), "d").error,
        Some(E::InvalidSessionTimeout)
    );
}

#[test]
fn a_sync_from_the_wrong_generation_or_member_is_refused() {
    let now = Instant::now();
    let mut g = Group::new(now);
    let generation = stable_pair(&mut g, now);
    let d = g.sync("a", generation + 5, None, None, vec![], "a", now);
    assert_eq!(synced(&d, "a").error, Some(E::IllegalGeneration));
    let d = g.sync("zz", generation, None, None, vec![], "z", now);
    assert_eq!(synced(&d, "z").error, Some(E::UnknownMemberId));
    let d = g.sync(
        "b",
        generation,
        Some("consumer"),
        Some("roundrobin"),
        vec![],
        "b",
        now,
    );
    assert_eq!(synced(&d, "b").error, Some(E::InconsistentGroupProtocol));
    // Stable: the member's assignment again.
    let d = g.sync(
        "b",
        generation,
        Some("consumer"),
        Some("range"),
        vec![],
        "b",
        now,
    );
    assert_eq!(synced(&d, "b").assignment, Bytes::from_static(b"for-b"));
}

fn static_join(member_id: &str, fresh: &str, instance: &str) -> Joining {
    let mut joining = join(member_id, fresh, &["range"]);
    joining.join.group_instance_id = Some(instance.into());
    joining
}

#[test]
fn a_restarted_static_member_takes_its_place_back_and_its_old_id_is_fenced() {
    let now = Instant::now();
    let mut g = Group::new(now);
    // Static members skip MEMBER_ID_REQUIRED even when the client could handle it.
    let mut first = static_join("", "s-1", "instance-a");
    first.join.require_known_member_id = true;
    assert!(g.join(first, "a", now).is_empty());
    assert!(g.join(join("", "b", &["range"]), "b", now).is_empty());
    let (_, d) = g.tick(now + INITIAL_REBALANCE_DELAY);
    let generation = joined(&d, "a").generation;
    let leader = joined(&d, "a").leader;
    let follower = if leader == "s-1" { "b" } else { "s-1" };
    let assignments = vec![
        ("s-1".to_string(), Bytes::from_static(b"for-a")),
        ("b".to_string(), Bytes::from_static(b"for-b")),
    ];
    let who = if leader == "s-1" { "a" } else { "b" };
    g.sync(follower, generation, None, None, vec![], "f", now);
    g.sync(&leader, generation, None, None, assignments, who, now);
    assert_eq!(g.phase, Phase::Stable);
    assert_eq!(g.check_instance(Some("instance-a"), "s-1"), Ok(()));

    // The instance restarts: it joins without a member id and gets a new one.
    let d = g.join(static_join("", "s-2", "instance-a"), "a2", now);
    assert_eq!(
        g.check_instance(Some("instance-a"), "s-1"),
        Err(E::FencedInstanceId)
    );
    assert_eq!(
        g.member_of_instance("instance-a").map(String::as_str),
        Some("s-2")
    );
    if leader == "b" {
        // A follower comes back without a rebalance, with its assignment.
        let again = joined(&d, "a2");
        assert_eq!((again.error, again.generation), (None, generation));
        assert_eq!(g.phase, Phase::Stable);
        let d = g.sync("s-2", generation, None, None, vec![], "a2", now);
        assert_eq!(synced(&d, "a2").assignment, Bytes::from_static(b"for-a"));
    } else {
        assert_eq!(
            g.phase,
            Phase::PreparingRebalance,
            "the leader came back: rebalance"
        );
    }
    let d = g.join(static_join("s-1", "", "instance-a"), "old", now);
    assert_eq!(joined(&d, "old").error, Some(E::FencedInstanceId));
    // Leaving by instance id.
    let (error, _) = g.leave("s-2", now);
    assert_eq!(error, Ok(()));
    assert_eq!(g.member_of_instance("instance-a"), None);
}
