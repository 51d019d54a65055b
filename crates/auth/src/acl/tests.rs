//! The authorization matrix of single rules, and the ACL wire forms.

use super::*;
use crate::principal::NodeKind;

fn acl(
    principal: &str,
    t: ResourceType,
    name: &str,
    pattern: PatternType,
    op: AclOperation,
    permission: AclPermission,
) -> AclEntry {
    AclEntry {
        principal: principal.into(),
        resource_type: t,
        resource_name: name.into(),
        pattern_type: pattern,
        operation: op,
        permission,
    }
}

fn allow_topic(principal: &str, name: &str, pattern: PatternType, op: AclOperation) -> AclEntry {
    acl(
        principal,
        ResourceType::Topic,
        name,
        pattern,
        op,
        AclPermission::Allow,
    )
}

use AclOperation::*;
use PatternType::*;
use ResourceType::*;

#[test]
fn default_deny() {
    let auth = Authorizer::new([], vec![]);
    let alice = Principal::user("alice");
    for t in ResourceType::ALL {
        for op in AclOperation::ALL {
            let denied = auth.check(&alice, t, "x", op).unwrap_err();
            assert!(denied.deny_acl.is_none());
        }
    }
}

#[test]
fn literal_matches_only_its_name_and_its_type() {
    let auth = Authorizer::new(
        [allow_topic("User:alice", "orders", Literal, Write)],
        vec![],
    );
    let alice = Principal::user("alice");
    assert!(auth.allows(&alice, Topic, "orders", Write));
    assert!(!auth.allows(&alice, Topic, "orders2", Write));
    assert!(!auth.allows(&alice, Topic, "order", Write));
    assert!(!auth.allows(&alice, Group, "orders", Write));
    assert!(!auth.allows(&alice, Topic, "orders", Read));
    assert!(!auth.allows(&alice, Topic, "orders", Create));
    assert!(!auth.allows(&Principal::user("bob"), Topic, "orders", Write));
    assert!(!auth.allows(&Principal::user("alice2"), Topic, "orders", Write));
}

#[test]
fn prefixed_matches_names_starting_with_it() {
    let auth = Authorizer::new([allow_topic("User:alice", "ord", Prefixed, Read)], vec![]);
    let alice = Principal::user("alice");
    assert!(auth.allows(&alice, Topic, "ord", Read));
    assert!(auth.allows(&alice, Topic, "orders", Read));
    assert!(!auth.allows(&alice, Topic, "or", Read));
    assert!(!auth.allows(&alice, Topic, "xord", Read));
}

#[test]
fn literal_star_matches_every_name_but_prefixed_star_is_a_prefix() {
    let auth = Authorizer::new(
        [
            allow_topic("User:alice", "*", Literal, Read),
            allow_topic("User:bob", "*", Prefixed, Read),
        ],
        vec![],
    );
    assert!(auth.allows(&Principal::user("alice"), Topic, "anything", Read));
    assert!(!auth.allows(&Principal::user("bob"), Topic, "anything", Read));
    assert!(auth.allows(&Principal::user("bob"), Topic, "*x", Read));
}

#[test]
fn user_star_matches_every_authenticated_user() {
    let auth = Authorizer::new([allow_topic("User:*", "public", Literal, Read)], vec![]);
    assert!(auth.allows(&Principal::user("alice"), Topic, "public", Read));
    assert!(auth.allows(&Principal::user("bob"), Topic, "public", Read));
    assert!(!auth.allows(&Principal::anonymous(), Topic, "public", Read));
}

#[test]
fn deny_wins_and_is_named() {
    let deny = acl(
        "User:alice",
        Topic,
        "secret",
        Prefixed,
        Read,
        AclPermission::Deny,
    );
    let auth = Authorizer::new(
        [
            allow_topic("User:*", "*", Literal, Read),
            allow_topic("User:alice", "secret-1", Literal, Read),
            deny.clone(),
        ],
        vec![],
    );
    let alice = Principal::user("alice");
    let denied = auth.check(&alice, Topic, "secret-1", Read).unwrap_err();
    assert_eq!(denied.deny_acl, Some(deny));
    assert_eq!(
        denied.to_string(),
        "User:alice may not READ topic 'secret-1' \
         (denied by ACL DENY User:alice READ topic PREFIXED 'secret')"
    );
    assert!(auth.allows(&alice, Topic, "public", Read));
    assert!(auth.allows(&Principal::user("bob"), Topic, "secret-1", Read));
    // The deny names READ only: DESCRIBE stays implied by the wildcard's READ.
    assert!(auth.allows(&alice, Topic, "secret-1", Describe));
}

#[test]
fn wildcard_deny_applies_to_everyone() {
    let auth = Authorizer::new(
        [
            allow_topic("User:alice", "t", Literal, Write),
            acl("User:*", Topic, "*", Literal, Write, AclPermission::Deny),
        ],
        vec![],
    );
    assert!(!auth.allows(&Principal::user("alice"), Topic, "t", Write));
}

#[test]
fn describe_is_implied_by_read_write_delete_alter_only() {
    let alice = Principal::user("alice");
    for op in AclOperation::ALL {
        let auth = Authorizer::new([allow_topic("User:alice", "t", Literal, op)], vec![]);
        let implied = matches!(op, Read | Write | Delete | Alter | Describe);
        assert_eq!(auth.allows(&alice, Topic, "t", Describe), implied, "{op:?}");
        for other in AclOperation::ALL {
            if other != op && other != Describe {
                assert!(
                    !auth.allows(&alice, Topic, "t", other),
                    "{op:?} gave {other:?}"
                );
            }
        }
    }
}

#[test]
fn denied_text_without_a_deny_acl() {
    let auth = Authorizer::new([], vec![]);
    let denied = auth
        .check(&Principal::user("bob"), Topic, "orders", Write)
        .unwrap_err();
    assert_eq!(denied.to_string(), "User:bob may not WRITE topic 'orders'");
    assert_eq!(
        denied.code(),
        tinymq_protocol::ErrorCode::AUTHORIZATION_FAILED
    );
}

#[test]
fn super_users_and_nodes_are_always_allowed() {
    let deny_all = acl(
        "User:*",
        Cluster,
        "cluster",
        Literal,
        Alter,
        AclPermission::Deny,
    );
    let auth = Authorizer::new([deny_all], vec![Principal::user("admin")]);
    let admin = Principal::user("admin");
    let node = Principal::node(NodeKind::Broker, 1);
    for p in [&admin, &node] {
        for t in ResourceType::ALL {
            for op in AclOperation::ALL {
                assert!(auth.allows(p, t, "cluster", op));
            }
        }
    }
    assert!(!auth.allows(&Principal::user("bob"), Cluster, "cluster", Alter));
    assert!(!auth.allows(&Principal::user("admin2"), Topic, "t", Read));
}

#[test]
fn allow_all_allows_everyone() {
    let auth = Authorizer::allow_all();
    assert!(auth.allows(&Principal::anonymous(), Cluster, "cluster", Alter));
    assert!(auth.is_allow_all());
}

#[test]
fn allows_any_finds_a_grant_of_the_type() {
    let auth = Authorizer::new([allow_topic("User:alice", "a", Prefixed, Write)], vec![]);
    assert!(auth.allows_any(&Principal::user("alice"), Topic, Write));
    assert!(auth.allows_any(&Principal::user("alice"), Topic, Describe));
    assert!(!auth.allows_any(&Principal::user("alice"), Topic, Read));
    assert!(!auth.allows_any(&Principal::user("alice"), Cluster, Write));
    assert!(!auth.allows_any(&Principal::user("bob"), Topic, Write));
}

#[test]
fn allows_any_is_false_under_a_deny_of_every_name() {
    let deny = |principal: &str, op| acl(principal, Topic, "*", Literal, op, AclPermission::Deny);
    let grant = allow_topic("User:alice", "a", Prefixed, Write);
    let alice = Principal::user("alice");
    for denial in [deny("User:alice", Write), deny("User:*", Write)] {
        let auth = Authorizer::new([grant.clone(), denial.clone()], vec![]);
        assert!(!auth.allows_any(&alice, Topic, Write), "{denial}");
        assert!(!auth.allows(&alice, Topic, "a1", Write), "{denial}");
        // The DENY names WRITE only: DESCRIBE implied by the ALLOW still counts.
        assert!(auth.allows_any(&alice, Topic, Describe), "{denial}");
    }
    // DENYs that do not cover every name, or name another user or operation, leave it true.
    for other in [
        deny("User:bob", Write),
        deny("User:alice", Read),
        acl(
            "User:alice",
            Topic,
            "a",
            Prefixed,
            Write,
            AclPermission::Deny,
        ),
        acl(
            "User:alice",
            Group,
            "*",
            Literal,
            Write,
            AclPermission::Deny,
        ),
    ] {
        let auth = Authorizer::new([grant.clone(), other.clone()], vec![]);
        assert!(auth.allows_any(&alice, Topic, Write), "{other}");
    }
    let auth = Authorizer::new([grant, deny("User:alice", Write)], vec![alice.clone()]);
    assert!(
        auth.allows_any(&alice, Topic, Write),
        "a super user is never denied"
    );
}

#[test]
fn invalid_allows_are_dropped_and_denies_kept() {
    let alice = Principal::user("alice");
    let invalid_allows = [
        // The cluster resource under another name or pattern.
        acl(
            "User:alice",
            Cluster,
            "*",
            Literal,
            Alter,
            AclPermission::Allow,
        ),
        acl(
            "User:alice",
            Cluster,
            "",
            Prefixed,
            Alter,
            AclPermission::Allow,
        ),
        // An empty or over-long name, a node or malformed principal.
        allow_topic("User:alice", "", Prefixed, Read),
        allow_topic("User:alice", &"t".repeat(256), Prefixed, Read),
        allow_topic("Node:broker-1", "t", Prefixed, Read),
        allow_topic("alice", "t", Prefixed, Read),
    ];
    let auth = Authorizer::new(invalid_allows, vec![]);
    assert!(!auth.allows(&alice, Cluster, "cluster", Alter));
    assert!(!auth.allows(&alice, Topic, "t", Read));
    assert!(!auth.allows(&alice, Topic, &"t".repeat(256), Read));
    assert!(!auth.allows_any(&alice, Topic, Read));
    assert!(!auth.allows_any(&alice, Cluster, Alter));

    // An invalid DENY (empty prefix: every name) still refuses.
    let auth = Authorizer::new(
        [
            allow_topic("User:alice", "t", Literal, Read),
            acl("User:alice", Topic, "", Prefixed, Read, AclPermission::Deny),
        ],
        vec![],
    );
    let denied = auth.check(&alice, Topic, "t", Read).unwrap_err();
    assert!(denied.deny_acl.is_some(), "{denied}");
}

#[test]
fn a_wildcard_super_user_is_ignored() {
    let auth = Authorizer::new([], vec![Principal::user("*"), Principal::user("admin")]);
    // A certificate whose subject is "*" gets no super powers.
    assert!(!auth.is_super_user(&Principal::user("*")));
    assert!(!auth.allows(&Principal::user("*"), Cluster, "cluster", Alter));
    assert!(auth.is_super_user(&Principal::user("admin")));
}

#[test]
fn wire_round_trip_and_validation() {
    let e = acl(
        "User:alice",
        TransactionalId,
        "tx-",
        Prefixed,
        Write,
        AclPermission::Deny,
    );
    assert_eq!(AclEntry::from_wire(&e.to_wire()).unwrap(), e);
    let good = e.to_wire();
    type Mutation = Box<dyn Fn(&mut m::Acl)>;
    let cases: Vec<(&str, Mutation)> = vec![
        ("no principal", Box::new(|a| a.principal = String::new())),
        (
            "node principal",
            Box::new(|a| a.principal = "Node:broker-1".into()),
        ),
        ("bad principal", Box::new(|a| a.principal = "alice".into())),
        ("no type", Box::new(|a| a.resource_type = 0)),
        ("unknown type", Box::new(|a| a.resource_type = 99)),
        ("empty name", Box::new(|a| a.resource_name = String::new())),
        ("long name", Box::new(|a| a.resource_name = "x".repeat(256))),
        ("pattern", Box::new(|a| a.pattern_type = 7)),
        ("no operation", Box::new(|a| a.operation = 0)),
        ("operation", Box::new(|a| a.operation = -1)),
        ("permission", Box::new(|a| a.permission = 2)),
        (
            "cluster name",
            Box::new(|a| {
                a.resource_type = m::ResourceType::Cluster as i32;
                a.pattern_type = 0;
                a.resource_name = "other".into();
            }),
        ),
        (
            "prefixed cluster",
            Box::new(|a| {
                a.resource_type = m::ResourceType::Cluster as i32;
                a.resource_name = "cluster".into();
            }),
        ),
    ];
    for (what, mutate) in cases {
        let mut a = good.clone();
        mutate(&mut a);
        assert!(AclEntry::from_wire(&a).is_err(), "{what}");
    }
}

#[test]
fn filters_select_by_stored_fields() {
    let a = allow_topic("User:alice", "ord", Prefixed, Read);
    let b = acl("User:bob", Group, "g", Literal, Read, AclPermission::Deny);
    assert!(AclFilter::any().matches(&a) && AclFilter::any().matches(&b));
    let by_name = AclFilter {
        resource_name: Some("orders".into()),
        ..AclFilter::any()
    };
    assert!(!by_name.matches(&a));
    let deny = AclFilter {
        permission: Some(AclPermission::Deny),
        ..AclFilter::any()
    };
    assert!(!deny.matches(&a) && deny.matches(&b));

    let empty = AclFilter::from_wire(&m::AclFilter::default()).unwrap();
    assert_eq!(empty, AclFilter::any());
    let full = AclFilter {
        principal: Some("User:bob".into()),
        resource_type: Some(Group),
        resource_name: Some("g".into()),
        pattern_type: Some(Literal),
        operation: Some(Read),
        permission: Some(AclPermission::Deny),
    };
    assert!(full.matches(&b) && !full.matches(&a));
    assert_eq!(AclFilter::from_wire(&full.to_wire()).unwrap(), full);
    let mut bad = full.to_wire();
    bad.permission = Some(5);
    assert!(AclFilter::from_wire(&bad).is_err());
    bad = full.to_wire();
    bad.principal = "bob".into();
    assert!(AclFilter::from_wire(&bad).is_err());
}

#[test]
fn operation_names() {
    for op in AclOperation::ALL {
        assert_eq!(AclOperation::from_name(op.name()), Some(op));
        assert_eq!(AclOperation::from_name(&op.name().to_lowercase()), Some(op));
    }
    assert_eq!(AclOperation::from_name("ALL"), None);
}

#[test]
fn a_default_deny_of_describe_is_reworded_for_the_operation_that_needed_it() {
    let bob = Principal::user("bob");
    let denied = Authorizer::new([], vec![])
        .check(&bob, ResourceType::Topic, "orders", AclOperation::Describe)
        .unwrap_err()
        .to_string();
    assert_eq!(
        describe_refusal_as(&denied, AclOperation::Write).as_deref(),
        Some("User:bob may not WRITE topic 'orders'")
    );
    let group = "User:bob may not DESCRIBE group 'og'";
    assert_eq!(
        describe_refusal_as(group, AclOperation::Read).as_deref(),
        Some("User:bob may not READ group 'og'")
    );
    // A DENY of DESCRIBE decided it: the message is exact as it is.
    let deny = acl(
        "User:bob",
        Topic,
        "orders",
        Literal,
        Describe,
        AclPermission::Deny,
    );
    let by_deny = Authorizer::new([deny], vec![])
        .check(&bob, ResourceType::Topic, "orders", AclOperation::Describe)
        .unwrap_err()
        .to_string();
    assert_eq!(describe_refusal_as(&by_deny, AclOperation::Write), None);
    // Other refusals, and operations that do not imply DESCRIBE, are left alone.
    let read = "User:bob may not READ topic 'orders'";
    assert_eq!(describe_refusal_as(read, AclOperation::Write), None);
    assert_eq!(describe_refusal_as(&denied, AclOperation::Create), None);
    assert_eq!(
        describe_refusal_as("no such topic", AclOperation::Write),
        None
    );
}
