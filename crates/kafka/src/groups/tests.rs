//! The coordinator's bookkeeping around the state machine: the group id claimed from the
//! native coordinator while Kafka members exist, refused while native members exist, and
//! vacant groups forgotten.

use bytes::Bytes;

use super::state::{Protocol, INITIAL_REBALANCE_DELAY};
use super::*;

fn join(member_id: &str) -> Join {
    Join {
        member_id: member_id.into(),
        fresh_member_id: "m-1".into(),
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

fn join_error(out: &Deliveries<Waiter>) -> Option<i16> {
    out.iter().find_map(|(_, reply)| match reply {
        Reply::Join(j) => Some(j.error),
        Reply::Sync(_) => None,
    })
}

#[test]
fn a_kafka_group_holds_its_id_on_the_native_side_while_it_has_members() {
    let native = GroupCoordinator::default();
    let kafka = Coordinator::default();
    let now = Instant::now();
    let (waiter, _answer) = oneshot::channel();
    let out = kafka.join(&native, "g", join(""), waiter, now);
    assert_eq!(join_error(&out), None, "waits for the join phase");
    assert!(native.is_held_by_other_protocol("g"));
    let (code, _) = kafka
        .with_group(&native, "g", |g| g.leave("m-1", now))
        .unwrap();
    assert_eq!(code, 0);
    assert!(
        !native.is_held_by_other_protocol("g"),
        "released when vacant"
    );
    assert!(!kafka.forget_if_vacant(&native, "unknown"));
    assert!(kafka.forget_if_vacant(&native, "g"));
    assert!(kafka.list().is_empty());
}

#[test]
fn a_group_with_native_members_refuses_kafka_members() {
    let native = GroupCoordinator::default();
    native
        .join(
            &m::JoinGroupRequest {
                group_id: "n".into(),
                topics: vec!["t".into()],
                session_timeout_ms: 10_000,
                client_id: "native".into(),
                ..Default::default()
            },
            &|_| None,
        )
        .unwrap();
    let kafka = Coordinator::default();
    let (waiter, _answer) = oneshot::channel();
    let out = kafka.join(&native, "n", join(""), waiter, Instant::now());
    assert_eq!(join_error(&out), Some(K::InconsistentGroupProtocol.code()));
    assert!(!native.is_held_by_other_protocol("n"));
}

#[test]
fn vacant_groups_are_forgotten_after_a_while() {
    let native = GroupCoordinator::default();
    let kafka = Coordinator::default();
    let now = Instant::now();
    let (waiter, _answer) = oneshot::channel();
    kafka.join(&native, "g", join(""), waiter, now);
    // The join phase ends; the member never syncs nor heartbeats: it expires after its
    // session...
    let joined = now + INITIAL_REBALANCE_DELAY;
    kafka.tick(&native, joined);
    assert!(native.is_held_by_other_protocol("g"));
    let later = joined + Duration::from_secs(10);
    kafka.tick(&native, later);
    assert_eq!(kafka.list().len(), 1, "the group stays a while, empty");
    assert!(!native.is_held_by_other_protocol("g"));
    // ...and the vacant group is forgotten.
    kafka.tick(&native, later + VACANT_GROUP_FORGET_AFTER);
    assert!(kafka.list().is_empty());
}
