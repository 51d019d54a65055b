//! The answers filtered to what the principal may DESCRIBE.

use tinymq_auth::{AclEntry, AclPermission, PatternType, ResourceType};
use tinymq_meta::authorize::{AuthorizationConfig, AuthorizerCache};
use tinymq_meta::image::MetadataImage;

use super::*;

fn allow(who: &str, resource_type: ResourceType, name: &str) -> AclEntry {
    AclEntry {
        principal: format!("User:{who}"),
        resource_type,
        resource_name: name.into(),
        pattern_type: PatternType::Literal,
        operation: AclOperation::Describe,
        permission: AclPermission::Allow,
    }
}

fn access(acls: Vec<AclEntry>) -> Access {
    let cache = AuthorizerCache::new(AuthorizationConfig {
        enabled: true,
        super_users: vec![Principal::user("admin")],
    });
    let image = MetadataImage {
        acls: acls.into_iter().collect(),
        ..Default::default()
    };
    cache.current(|| 1, || image)
}

fn offset(topic: &str) -> m::CommittedOffset {
    m::CommittedOffset {
        topic: topic.into(),
        partition: 0,
        offset: 7,
        metadata: String::new(),
        error: None,
    }
}

/// A group reading `visible` and `hidden`, with a member subscribed to and assigned both.
fn description() -> m::DescribeGroupResponse {
    let both = ["visible", "hidden"];
    m::DescribeGroupResponse {
        error: None,
        group_id: "g".into(),
        state: "stable".into(),
        generation: 1,
        strategy: "range".into(),
        members: vec![m::GroupMember {
            member_id: "m-1".into(),
            client_id: "c".into(),
            assignment: both
                .iter()
                .map(|t| m::TopicPartitions {
                    topic: t.to_string(),
                    partitions: vec![0],
                })
                .collect(),
            topics: both.map(String::from).to_vec(),
        }],
        offsets: both.map(offset).to_vec(),
    }
}

#[test]
fn a_group_description_shows_only_topics_the_principal_may_describe() {
    let access = access(vec![
        allow("alice", ResourceType::Group, "g"),
        allow("alice", ResourceType::Topic, "visible"),
    ]);
    let shown = describe_group(&access, &Principal::user("alice"), description());
    let topics: Vec<&str> = shown.offsets.iter().map(|o| o.topic.as_str()).collect();
    assert_eq!(topics, ["visible"]);
    let member = &shown.members[0];
    assert_eq!(member.member_id, "m-1", "the member itself is the group's");
    assert_eq!(member.topics, ["visible"]);
    let assigned: Vec<&str> = member.assignment.iter().map(|a| a.topic.as_str()).collect();
    assert_eq!(assigned, ["visible"]);

    // The super user, and everyone with authorization off, see the whole group.
    let all = describe_group(&access, &Principal::user("admin"), description());
    assert_eq!(all, description());
    let off = describe_group(&Access::off(), &Principal::user("bob"), description());
    assert_eq!(off, description());
}

/// Review finding 15: a group READ ACL does not let a principal move a route (commit to its
/// `__route.` progress group); nodes and super users (ALTER on the cluster) may.
#[test]
fn only_nodes_and_cluster_alterers_commit_to_route_progress_groups() {
    // The group's READ is checked up front (not here); the topic's READ is.
    let read = AclEntry {
        operation: AclOperation::Read,
        ..allow("alice", ResourceType::Topic, "orders")
    };
    let access = access(vec![read]);
    let request = |group: &str| m::OffsetCommitRequest {
        group_id: group.into(),
        offsets: vec![offset("orders")],
        ..Default::default()
    };
    let alice = Principal::user("alice");
    let mut ordinary = request("g");
    assert!(offset_commit(&access, &alice, &mut ordinary).is_empty());
    assert_eq!(ordinary.offsets.len(), 1);
    let mut route = request("__route.1.eu");
    let refused = offset_commit(&access, &alice, &mut route);
    assert!(route.offsets.is_empty());
    assert_eq!(
        refused[0].error.as_ref().map(|e| e.code),
        Some(tinymq_protocol::ErrorCode::AUTHORIZATION_FAILED as u32)
    );
    for allowed in [
        Principal::user("admin"),
        Principal::node(tinymq_auth::NodeKind::Broker, 2),
    ] {
        let mut route = request("__route.1.eu");
        assert!(offset_commit(&access, &allowed, &mut route).is_empty());
        assert_eq!(route.offsets.len(), 1, "{allowed}");
    }
}

#[test]
fn a_group_listing_shows_only_groups_the_principal_may_describe() {
    let listing = |id: &str, group_type: &str| m::GroupListing {
        group_id: id.into(),
        group_type: group_type.into(),
        state: "empty".into(),
        members: 0,
        member_ids: vec![],
    };
    let response = m::ListGroupsResponse {
        error: None,
        group_ids: vec!["seen".into(), "unseen".into()],
        groups: vec![
            listing("seen", "consumer"),
            listing("seen-queue", "share"),
            listing("unseen", "consumer"),
            listing("unseen-queue", "share"),
        ],
    };
    let access = access(vec![
        allow("alice", ResourceType::Group, "seen"),
        allow("alice", ResourceType::Group, "seen-queue"),
    ]);
    let shown = list_groups(&access, &Principal::user("alice"), response);
    assert_eq!(shown.group_ids, ["seen"]);
    let ids: Vec<&str> = shown.groups.iter().map(|g| g.group_id.as_str()).collect();
    assert_eq!(ids, ["seen", "seen-queue"]);
}
