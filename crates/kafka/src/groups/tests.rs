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
    assert!(
        kafka.list().is_empty(),
        "the refused join left no group behind"
    );
}

#[test]
fn refused_joins_leave_no_group_behind() {
    let native = GroupCoordinator::default();
    let kafka = Coordinator::default();
    let now = Instant::now();
    let refused = [
        (
            Join {
                session_timeout: Duration::ZERO,
                ..join("")
            },
            K::InvalidSessionTimeout,
        ),
        (
            Join {
                protocols: Vec::new(),
                ..join("")
            },
            K::InconsistentGroupProtocol,
        ),
        // Refused by the (new, empty) group itself.
        (join("not-a-member"), K::UnknownMemberId),
    ];
    for (n, (request, error)) in refused.into_iter().enumerate() {
        let (waiter, _answer) = oneshot::channel();
        let out = kafka.join(&native, &format!("g{n}"), request, waiter, now);
        assert_eq!(join_error(&out), Some(error.code()));
    }
    assert!(kafka.list().is_empty());
    // A join told MEMBER_ID_REQUIRED keeps its group: the member comes back.
    let (waiter, _answer) = oneshot::channel();
    let first = Join {
        require_known_member_id: true,
        ..join("")
    };
    let out = kafka.join(&native, "kept", first, waiter, now);
    assert_eq!(join_error(&out), Some(K::MemberIdRequired.code()));
    assert_eq!(kafka.list().len(), 1);
}

#[test]
fn a_group_may_keep_what_the_other_groups_leave_of_the_coordinators_budget() {
    let native = GroupCoordinator::default();
    let kafka = Coordinator::default();
    let now = Instant::now();
    let (waiter, _answer) = oneshot::channel();
    let big = Join {
        protocols: vec![Protocol {
            name: "range".into(),
            metadata: Bytes::from(vec![0u8; 100_000]),
        }],
        ..join("")
    };
    kafka.join(&native, "big", big, waiter, now);
    let groups = kafka.groups.lock();
    let kept = groups.get("big").map_or(0, |g| g.stored_bytes());
    assert!(kept > 100_000);
    // Plenty left: the group's own limit.
    let roomy = budget_of(&groups, "other", KAFKA_GROUPS_BYTES_MAX);
    assert_eq!(roomy, Budget::default());
    // Little left: what is left, named.
    let tight = budget_of(&groups, "other", kept + 10);
    assert_eq!(tight.bytes_max, 10);
    assert_eq!(tight.limit, "KAFKA_GROUPS_BYTES_MAX");
    // A group's own bytes are not counted against itself.
    assert_eq!(budget_of(&groups, "big", kept + 10).bytes_max, kept + 10);
}

#[test]
fn only_the_groups_a_principal_may_describe_are_listed() {
    use tinymq_auth::{AclEntry, AclOperation, AclPermission, PatternType, ResourceType};
    use tinymq_meta::authorize::{AuthorizationConfig, AuthorizerCache};
    use tinymq_meta::MetadataImage;

    let native = GroupCoordinator::default();
    let kafka = Coordinator::default();
    let now = Instant::now();
    for group_id in ["visible", "hidden"] {
        let (waiter, _answer) = oneshot::channel();
        kafka.join(&native, group_id, join(""), waiter, now);
    }
    let mut image = MetadataImage::default();
    image.acls.insert(AclEntry {
        principal: "User:alice".into(),
        resource_type: ResourceType::Group,
        resource_name: "visible".into(),
        pattern_type: PatternType::Literal,
        operation: AclOperation::Describe,
        permission: AclPermission::Allow,
    });
    let config = AuthorizationConfig {
        enabled: true,
        super_users: Vec::new(),
    };
    let access = AuthorizerCache::new(config).current(|| 1, || image);
    let names = |p: &str| -> Vec<String> {
        let listed = kafka.list_describable(&access, &Principal::user(p));
        listed.into_iter().map(|(id, _, _)| id).collect()
    };
    assert_eq!(names("alice"), ["visible"]);
    assert!(names("mallory").is_empty());
    // Authorization off: every group.
    let off =
        AuthorizerCache::new(AuthorizationConfig::default()).current(|| 1, MetadataImage::default);
    assert_eq!(
        kafka
            .list_describable(&off, &Principal::user("mallory"))
            .len(),
        2
    );
}

#[test]
fn fresh_member_ids_start_with_a_bounded_part_of_the_client_id() {
    let kafka = Coordinator::default();
    let id = kafka.fresh_member_id(&"c".repeat(100_000));
    assert!(id.starts_with(&"c".repeat(MEMBER_ID_CLIENT_ID_CHARS_MAX)));
    assert!(id.len() < MEMBER_ID_CLIENT_ID_CHARS_MAX + 64);
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

#[test]
fn a_kafka_join_past_the_brokers_one_bound_on_groups_is_told_the_group_limit() {
    let native = GroupCoordinator::default();
    for i in 0..tinymq_broker::group::GROUPS_MAX {
        native
            .claim_for_other_protocol(&format!("held-{i}"))
            .unwrap();
    }
    let kafka = Coordinator::default();
    let (waiter, _answer) = oneshot::channel();
    let out = kafka.join(&native, "one-more", join(""), waiter, Instant::now());
    assert_eq!(join_error(&out), Some(K::GroupMaxSizeReached.code()));
    assert!(
        kafka.list().is_empty(),
        "the refused join left no group behind"
    );
}
