use std::cell::Cell;

use tinymq_auth::{AclEntry, AclPermission, PatternType};
use tinymq_protocol::OpCode;

use super::*;

fn acl(
    who: &str,
    resource_type: ResourceType,
    name: &str,
    pattern_type: PatternType,
    operation: AclOperation,
    permission: AclPermission,
) -> AclEntry {
    AclEntry {
        principal: who.to_string(),
        resource_type,
        resource_name: name.to_string(),
        pattern_type,
        operation,
        permission,
    }
}

fn access(acls: Vec<AclEntry>) -> Access {
    Access {
        authorizer: Arc::new(Authorizer::new(acls, vec![Principal::user("admin")])),
        enforced: true,
    }
}

fn code(result: Result<(), m::Error>) -> Option<ErrorCode> {
    result.err().and_then(|e| ErrorCode::from_code(e.code))
}

/// Every operation has a requirement (a new operation fails to compile here until it gets
/// one), and the node-only ones need a node.
#[test]
fn every_operation_has_a_requirement() {
    for &op in OpCode::ALL {
        let required = match op {
            OpCode::Handshake => format!("{:?}", m::HandshakeRequest::default().required()),
            OpCode::Metadata => format!("{:?}", m::MetadataRequest::default().required()),
            OpCode::CreateTopic => format!("{:?}", m::CreateTopicRequest::default().required()),
            OpCode::DeleteTopic => format!("{:?}", m::DeleteTopicRequest::default().required()),
            OpCode::ListTopics => format!("{:?}", m::ListTopicsRequest::default().required()),
            OpCode::DescribeTopic => {
                format!("{:?}", m::DescribeTopicRequest::default().required())
            }
            OpCode::Produce => format!("{:?}", m::ProduceRequest::default().required()),
            OpCode::Fetch => format!("{:?}", m::FetchRequest::default().required()),
            OpCode::ListOffsets => format!("{:?}", m::ListOffsetsRequest::default().required()),
            OpCode::DeleteRecords => {
                format!("{:?}", m::DeleteRecordsRequest::default().required())
            }
            OpCode::InitProducerId => {
                format!("{:?}", m::InitProducerIdRequest::default().required())
            }
            OpCode::FindCoordinator => {
                format!("{:?}", m::FindCoordinatorRequest::default().required())
            }
            OpCode::JoinGroup => format!("{:?}", m::JoinGroupRequest::default().required()),
            OpCode::Heartbeat => format!("{:?}", m::HeartbeatRequest::default().required()),
            OpCode::LeaveGroup => format!("{:?}", m::LeaveGroupRequest::default().required()),
            OpCode::OffsetCommit => format!("{:?}", m::OffsetCommitRequest::default().required()),
            OpCode::OffsetFetch => format!("{:?}", m::OffsetFetchRequest::default().required()),
            OpCode::ListGroups => format!("{:?}", m::ListGroupsRequest::default().required()),
            OpCode::DescribeGroup => {
                format!("{:?}", m::DescribeGroupRequest::default().required())
            }
            OpCode::DeleteGroup => format!("{:?}", m::DeleteGroupRequest::default().required()),
            OpCode::AlterPartitions => {
                format!("{:?}", m::AlterPartitionsRequest::default().required())
            }
            OpCode::DecommissionBroker => {
                format!("{:?}", m::DecommissionBrokerRequest::default().required())
            }
            OpCode::Rebalance => format!("{:?}", m::RebalanceRequest::default().required()),
            OpCode::DrainBroker => format!("{:?}", m::DrainBrokerRequest::default().required()),
            OpCode::AlterTopicConfig => {
                format!("{:?}", m::AlterTopicConfigRequest::default().required())
            }
            OpCode::Authenticate => {
                format!("{:?}", m::AuthenticateRequest::default().required())
            }
            OpCode::PutUser => format!("{:?}", m::PutUserRequest::default().required()),
            OpCode::DeleteUser => format!("{:?}", m::DeleteUserRequest::default().required()),
            OpCode::ListUsers => format!("{:?}", m::ListUsersRequest::default().required()),
            OpCode::CreateAcls => format!("{:?}", m::CreateAclsRequest::default().required()),
            OpCode::DeleteAcls => format!("{:?}", m::DeleteAclsRequest::default().required()),
            OpCode::ListAcls => format!("{:?}", m::ListAclsRequest::default().required()),
            OpCode::SetQuota => format!("{:?}", m::SetQuotaRequest::default().required()),
            OpCode::ListQuotas => format!("{:?}", m::ListQuotasRequest::default().required()),
            OpCode::RaftRpc => format!("{:?}", m::RaftRpcRequest::default().required()),
            OpCode::MetaWrite => format!("{:?}", m::MetaWriteRequest::default().required()),
            OpCode::MetaRead => format!("{:?}", m::MetaReadRequest::default().required()),
            OpCode::BrokerHeartbeat => {
                format!("{:?}", m::BrokerHeartbeatRequest::default().required())
            }
            OpCode::ShareFetch => format!("{:?}", m::ShareFetchRequest::default().required()),
            OpCode::ShareAcknowledge => {
                format!("{:?}", m::ShareAcknowledgeRequest::default().required())
            }
            OpCode::DescribeShareGroup => {
                format!("{:?}", m::DescribeShareGroupRequest::default().required())
            }
            OpCode::ProduceDelayed => {
                format!("{:?}", m::ProduceDelayedRequest::default().required())
            }
            OpCode::CreateRoute => format!("{:?}", m::CreateRouteRequest::default().required()),
            OpCode::DeleteRoute => format!("{:?}", m::DeleteRouteRequest::default().required()),
            OpCode::ListRoutes => format!("{:?}", m::ListRoutesRequest::default().required()),
            OpCode::AddPartitionsToTxn => {
                format!("{:?}", m::AddPartitionsToTxnRequest::default().required())
            }
            OpCode::AddOffsetsToTxn => {
                format!("{:?}", m::AddOffsetsToTxnRequest::default().required())
            }
            OpCode::EndTxn => format!("{:?}", m::EndTxnRequest::default().required()),
            OpCode::TxnOffsetCommit => {
                format!("{:?}", m::TxnOffsetCommitRequest::default().required())
            }
            OpCode::WriteTxnMarkers => {
                format!("{:?}", m::WriteTxnMarkersRequest::default().required())
            }
            OpCode::DescribeTransactions => {
                format!("{:?}", m::DescribeTransactionsRequest::default().required())
            }
            OpCode::ListTransactions => {
                format!("{:?}", m::ListTransactionsRequest::default().required())
            }
            OpCode::DescribeProducers => {
                format!("{:?}", m::DescribeProducersRequest::default().required())
            }
            OpCode::HalfSend => format!("{:?}", m::HalfSendRequest::default().required()),
            OpCode::HalfEnd => format!("{:?}", m::HalfEndRequest::default().required()),
            OpCode::HalfCheckPoll => {
                format!("{:?}", m::HalfCheckPollRequest::default().required())
            }
            OpCode::HalfList => format!("{:?}", m::HalfListRequest::default().required()),
        };
        let open = matches!(op, OpCode::Handshake | OpCode::Authenticate);
        assert_eq!(required == "Nothing", open, "{}: {required}", op.name());
        let node_only = matches!(
            op,
            OpCode::RaftRpc | OpCode::MetaWrite | OpCode::BrokerHeartbeat
        );
        assert_eq!(required == "Node", node_only, "{}: {required}", op.name());
    }
    let follower = m::FetchRequest {
        replica_id: 2,
        ..Default::default()
    };
    assert_eq!(follower.required(), Requirement::Node);
}

#[test]
fn literal_and_prefixed_acls_allow_and_everything_else_is_refused() {
    use AclPermission::{Allow, Deny};
    use PatternType::{Literal, Prefixed};
    let rules = access(vec![
        acl(
            "User:alice",
            ResourceType::Topic,
            "orders",
            Literal,
            Write,
            Allow,
        ),
        acl(
            "User:bob",
            ResourceType::Topic,
            "pay-",
            Prefixed,
            Read,
            Allow,
        ),
        acl(
            "User:bob",
            ResourceType::Topic,
            "pay-secret",
            Literal,
            Read,
            Deny,
        ),
        acl(
            "User:carol",
            ResourceType::Topic,
            "order",
            Prefixed,
            Write,
            Allow,
        ),
    ]);
    let (alice, bob, carol) = (
        Principal::user("alice"),
        Principal::user("bob"),
        Principal::user("carol"),
    );
    let image = MetadataImage::default;
    let delete = |name: &str| m::DeleteTopicRequest {
        name: name.to_string(),
    };
    let describe = |name: &str| m::DescribeTopicRequest {
        name: name.to_string(),
    };
    // No ACL on the operation.
    let refused = rules.require_request(&alice, &delete("orders"), image);
    let error = refused.clone().unwrap_err();
    assert_eq!(code(refused), Some(ErrorCode::AUTHORIZATION_FAILED));
    assert!(error.message.contains("DELETE"), "{}", error.message);
    assert!(error.message.contains("orders"), "{}", error.message);
    // WRITE implies DESCRIBE; an ACL on another topic does not.
    assert!(rules
        .require_request(&alice, &describe("orders"), image)
        .is_ok());
    assert!(rules
        .require_request(&alice, &describe("orders2"), image)
        .is_err());
    // Prefixed: matches names starting with it, not others; a DENY wins over the ALLOW.
    assert!(rules.check(&bob, Permission::topic("pay-eu", Read)).is_ok());
    assert!(rules
        .check(&bob, Permission::topic("payroll", Read))
        .is_err());
    assert!(rules
        .check(&bob, Permission::topic("pay-secret", Read))
        .is_err());
    assert!(rules
        .check(&carol, Permission::topic("orders", Write))
        .is_ok());
    // Super users and nodes may do anything.
    let admin = Principal::user("admin");
    assert!(rules.require_request(&admin, &delete("x"), image).is_ok());
    let node = Principal::node(tinymq_auth::NodeKind::Broker, 2);
    assert!(rules.require_request(&node, &delete("x"), image).is_ok());
    // Node-only operations: refused to users, super users included.
    let heartbeat = m::BrokerHeartbeatRequest::default();
    assert_eq!(
        code(rules.require_request(&admin, &heartbeat, image)),
        Some(ErrorCode::CLUSTER_AUTHORIZATION_FAILED)
    );
    assert!(rules.require_request(&node, &heartbeat, image).is_ok());
}

#[test]
fn create_topic_and_idempotent_producers_take_either_permission() {
    use AclPermission::Allow;
    use PatternType::Literal;
    let rules = access(vec![
        acl(
            "User:ops",
            ResourceType::Cluster,
            "cluster",
            Literal,
            Create,
            Allow,
        ),
        acl("User:dev", ResourceType::Topic, "t", Literal, Create, Allow),
        acl("User:app", ResourceType::Topic, "t", Literal, Write, Allow),
    ]);
    let create = |name: &str| m::CreateTopicRequest {
        name: name.to_string(),
        ..Default::default()
    };
    let image = || {
        let mut image = MetadataImage::default();
        let topic = crate::image::TopicRecord {
            id: 1,
            partitions: vec![],
            config: Default::default(),
        };
        image.topics.insert("t".into(), topic);
        image
    };
    let (ops, dev, app) = (
        Principal::user("ops"),
        Principal::user("dev"),
        Principal::user("app"),
    );
    assert!(rules.require_request(&ops, &create("any"), image).is_ok());
    assert!(rules.require_request(&dev, &create("t"), image).is_ok());
    assert!(rules.require_request(&dev, &create("u"), image).is_err());
    let init = m::InitProducerIdRequest::default();
    assert!(rules.require_request(&app, &init, image).is_ok());
    assert_eq!(
        code(rules.require_request(&dev, &init, image)),
        Some(ErrorCode::AUTHORIZATION_FAILED)
    );
}

#[test]
fn off_allows_everything_but_leaves_node_roles_to_the_front_end() {
    let off = Access::off();
    let anonymous = Principal::anonymous();
    let image = MetadataImage::default;
    let delete = m::DeleteTopicRequest { name: "x".into() };
    assert!(off.require_request(&anonymous, &delete, image).is_ok());
    assert!(off.check_node(&anonymous).is_ok());
    let cache = AuthorizerCache::new(AuthorizationConfig::default());
    let asked = Cell::new(0);
    let access = cache.current(
        || {
            asked.set(asked.get() + 1);
            1
        },
        image,
    );
    assert!(!access.is_enforced());
    assert_eq!(
        asked.get(),
        0,
        "no version is read while authorization is off"
    );
}

#[test]
fn the_cache_rebuilds_only_when_the_image_version_changes() {
    let cache = AuthorizerCache::new(AuthorizationConfig {
        enabled: true,
        super_users: vec![Principal::user("admin")],
    });
    let built = Cell::new(0);
    let image = || {
        built.set(built.get() + 1);
        MetadataImage::default()
    };
    let alice = Principal::user("alice");
    for version in [3, 3, 3, 4, 4] {
        let access = cache.current(|| version, image);
        assert!(access.is_enforced());
        // Default deny: an image without ACLs allows nothing to a plain user.
        assert!(!access.describes_topic(&alice, "t"));
        assert!(access.describes_topic(&Principal::user("admin"), "t"));
    }
    assert_eq!(built.get(), 2);
    let heartbeat = m::BrokerHeartbeatRequest::default();
    assert!(cache
        .require_request(&alice, &heartbeat, || 5, image)
        .is_err());
    assert_eq!(built.get(), 2, "a node-only check builds no ACL index");
    // A new version with an ACL: applied.
    let granted = || {
        let mut image = MetadataImage::default();
        image.acls.insert(acl(
            "User:alice",
            ResourceType::Topic,
            "t",
            PatternType::Literal,
            Read,
            AclPermission::Allow,
        ));
        image
    };
    let access = cache.current(|| 6, granted);
    assert!(access.describes_topic(&alice, "t"));
    assert!(!access.describes_topic(&alice, "u"));
}
