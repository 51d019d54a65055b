//! Authorization of native operations (issue 16): what each request needs
//! ([`Required::required`], the table of docs/protocol.md "Permissions"), the check of a
//! principal against the ACLs of the metadata image ([`Access`]), and the authorizer kept
//! current with the image ([`AuthorizerCache`]). Brokers and MetaServer nodes both call it from
//! their dispatchers, so every operation is authorized in one place per process.
//!
//! Requests that name several topics (Produce, Fetch, ListOffsets, OffsetCommit, OffsetFetch,
//! Metadata) need their topic permission per topic: the dispatcher refuses each topic in the
//! answer's per-partition errors ([`Requirement::PerTopic`]); list answers show only what the
//! principal may describe ([`Requirement::Filtered`]).

use std::borrow::Borrow;
use std::sync::Arc;

use parking_lot::RwLock;

use tinymq_auth::{AclOperation, Authorizer, Principal, ResourceType, CLUSTER_RESOURCE_NAME};
use tinymq_protocol::{messages as m, ErrorCode};

use crate::image::MetadataImage;

/// Whether authorization is on, and who may do anything.
#[derive(Debug, Clone, Default)]
pub struct AuthorizationConfig {
    /// Off (`--auth none`): every request is allowed, as before issue 16; node-only operations
    /// still need a node role (the front end checks it).
    pub enabled: bool,
    /// Principals allowed everything (`--super-users`).
    pub super_users: Vec<Principal>,
}

/// One permission: an operation on a named resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permission<'a> {
    pub resource: ResourceType,
    pub name: &'a str,
    pub operation: AclOperation,
}

impl<'a> Permission<'a> {
    pub fn topic(name: &'a str, operation: AclOperation) -> Permission<'a> {
        Permission {
            resource: ResourceType::Topic,
            name,
            operation,
        }
    }

    pub fn group(name: &'a str, operation: AclOperation) -> Permission<'a> {
        Permission {
            resource: ResourceType::Group,
            name,
            operation,
        }
    }

    pub fn transactional_id(name: &'a str, operation: AclOperation) -> Permission<'a> {
        Permission {
            resource: ResourceType::TransactionalId,
            name,
            operation,
        }
    }

    pub fn cluster(operation: AclOperation) -> Permission<'static> {
        Permission {
            resource: ResourceType::Cluster,
            name: CLUSTER_RESOURCE_NAME,
            operation,
        }
    }
}

/// What a request needs before its handler runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement<'a> {
    /// Nothing beyond the connection (Handshake, Authenticate: the front end serves them).
    Nothing,
    /// This permission.
    One(Permission<'a>),
    /// Both permissions.
    Both(Permission<'a>, Permission<'a>),
    /// Either permission (CreateTopic: on the topic or on the cluster).
    Either(Permission<'a>, Permission<'a>),
    /// WRITE on some topic or on the cluster (InitProducerId: an idempotent producer).
    WriteSomewhere,
    /// An authenticated node (Raft, metadata writes, heartbeats, follower fetches).
    Node,
    /// `operation` on each topic of the request, refused topic by topic in the answer; and
    /// `group` first when given (the whole request is refused without it).
    PerTopic {
        operation: AclOperation,
        group: Option<Permission<'a>>,
    },
    /// Nothing up front; the answer lists only what the principal may DESCRIBE.
    Filtered,
}

/// The permissions a decoded request needs (one impl per request type: see the table in
/// docs/protocol.md, "Permissions").
pub trait Required {
    fn required(&self) -> Requirement<'_>;
}

macro_rules! required {
    ($($t:ident => |$r:ident| $e:expr;)*) => {
        $(impl Required for m::$t {
            #[allow(unused_variables)]
            fn required(&self) -> Requirement<'_> {
                let $r = self;
                $e
            }
        })*
    };
}

use AclOperation::{Alter, Create, Delete, Describe, Read, Write};

required! {
    HandshakeRequest => |r| Requirement::Nothing;
    AuthenticateRequest => |r| Requirement::Nothing;
    MetadataRequest => |r| if r.topics.is_empty() {
        Requirement::Filtered
    } else {
        Requirement::PerTopic { operation: Describe, group: None }
    };
    ListTopicsRequest => |r| Requirement::Filtered;
    ListGroupsRequest => |r| Requirement::Filtered;
    CreateTopicRequest => |r| Requirement::Either(
        Permission::topic(&r.name, Create),
        Permission::cluster(Create),
    );
    DeleteTopicRequest => |r| Requirement::One(Permission::topic(&r.name, Delete));
    DescribeTopicRequest => |r| Requirement::One(Permission::topic(&r.name, Describe));
    AlterPartitionsRequest => |r| Requirement::One(Permission::topic(&r.name, Alter));
    AlterTopicConfigRequest => |r| Requirement::One(Permission::topic(&r.name, Alter));
    ProduceRequest => |r| Requirement::PerTopic { operation: Write, group: None };
    FetchRequest => |r| if r.replica_id != 0 {
        Requirement::Node
    } else {
        Requirement::PerTopic { operation: Read, group: None }
    };
    ListOffsetsRequest => |r| Requirement::PerTopic { operation: Describe, group: None };
    DeleteRecordsRequest => |r| Requirement::PerTopic { operation: Delete, group: None };
    InitProducerIdRequest => |r| if r.transactional_id.is_empty() {
        Requirement::WriteSomewhere
    } else {
        Requirement::One(Permission::transactional_id(&r.transactional_id, Write))
    };
    FindCoordinatorRequest => |r| if r.key_type == 1 {
        Requirement::One(Permission::transactional_id(&r.group_id, Describe))
    } else {
        Requirement::One(Permission::group(&r.group_id, Describe))
    };
    // The topics' WRITE is checked per topic by the dispatcher.
    AddPartitionsToTxnRequest => |r| Requirement::One(
        Permission::transactional_id(&r.transactional_id, Write),
    );
    AddOffsetsToTxnRequest => |r| Requirement::Both(
        Permission::transactional_id(&r.transactional_id, Write),
        Permission::group(&r.group_id, Read),
    );
    EndTxnRequest => |r| Requirement::One(Permission::transactional_id(&r.transactional_id, Write));
    // The topics' READ is checked per topic by the dispatcher.
    TxnOffsetCommitRequest => |r| Requirement::Both(
        Permission::transactional_id(&r.transactional_id, Write),
        Permission::group(&r.group_id, Read),
    );
    // Brokers' markers, and an operator's abort of a hung transaction (KIP-664).
    WriteTxnMarkersRequest => |r| Requirement::One(Permission::cluster(Alter));
    DescribeTransactionsRequest => |r| Requirement::Filtered;
    ListTransactionsRequest => |r| Requirement::Filtered;
    DescribeProducersRequest => |r| Requirement::PerTopic { operation: Read, group: None };
    JoinGroupRequest => |r| Requirement::One(Permission::group(&r.group_id, Read));
    HeartbeatRequest => |r| Requirement::One(Permission::group(&r.group_id, Read));
    LeaveGroupRequest => |r| Requirement::One(Permission::group(&r.group_id, Read));
    OffsetCommitRequest => |r| Requirement::PerTopic {
        operation: Read,
        group: Some(Permission::group(&r.group_id, Read)),
    };
    OffsetFetchRequest => |r| Requirement::PerTopic {
        operation: Describe,
        group: Some(Permission::group(&r.group_id, Describe)),
    };
    DescribeGroupRequest => |r| Requirement::One(Permission::group(&r.group_id, Describe));
    DeleteGroupRequest => |r| Requirement::One(Permission::group(&r.group_id, Delete));
    DecommissionBrokerRequest => |r| Requirement::One(Permission::cluster(Alter));
    RebalanceRequest => |r| Requirement::One(Permission::cluster(Alter));
    DrainBrokerRequest => |r| Requirement::One(Permission::cluster(Alter));
    PutUserRequest => |r| Requirement::One(Permission::cluster(Alter));
    DeleteUserRequest => |r| Requirement::One(Permission::cluster(Alter));
    CreateAclsRequest => |r| Requirement::One(Permission::cluster(Alter));
    DeleteAclsRequest => |r| Requirement::One(Permission::cluster(Alter));
    SetQuotaRequest => |r| Requirement::One(Permission::cluster(Alter));
    ListUsersRequest => |r| Requirement::One(Permission::cluster(Describe));
    ListAclsRequest => |r| Requirement::One(Permission::cluster(Describe));
    ListQuotasRequest => |r| Requirement::One(Permission::cluster(Describe));
    MetaReadRequest => |r| Requirement::One(Permission::cluster(Describe));
    RaftRpcRequest => |r| Requirement::Node;
    MetaWriteRequest => |r| Requirement::Node;
    BrokerHeartbeatRequest => |r| Requirement::Node;
    ShareFetchRequest => |r| Requirement::PerTopic {
        operation: Read,
        group: Some(Permission::group(&r.group_id, Read)),
    };
    ShareAcknowledgeRequest => |r| Requirement::PerTopic {
        operation: Read,
        group: Some(Permission::group(&r.group_id, Read)),
    };
    DescribeShareGroupRequest => |r| Requirement::One(Permission::group(&r.group_id, Describe));
    ProduceDelayedRequest => |r| Requirement::One(Permission::topic(&r.topic, Write));
    CreateRouteRequest => |r| Requirement::One(Permission::cluster(Alter));
    DeleteRouteRequest => |r| Requirement::One(Permission::cluster(Alter));
    ListRoutesRequest => |r| Requirement::One(Permission::cluster(Describe));
    // Half messages: a producer group is a group resource; the half's topic needs WRITE.
    HalfSendRequest => |r| Requirement::Both(
        Permission::topic(&r.topic, Write),
        Permission::group(&r.group, Read),
    );
    HalfEndRequest => |r| Requirement::Both(
        Permission::topic(&r.topic, Write),
        Permission::group(&r.group, Read),
    );
    // The halves offered are those whose topic the member may WRITE (checked per half).
    HalfCheckPollRequest => |r| Requirement::One(Permission::group(&r.group, Read));
    // Only the groups the principal may DESCRIBE are listed.
    HalfListRequest => |r| Requirement::Filtered;
}

/// The ACLs of one image version, applied to one request's principal.
#[derive(Clone)]
pub struct Access {
    authorizer: Arc<Authorizer>,
    enforced: bool,
}

impl Access {
    /// Authorization off: everything allowed.
    pub fn off() -> Access {
        Access {
            authorizer: Arc::new(Authorizer::allow_all()),
            enforced: false,
        }
    }

    /// Whether `p` may do `operation` on `resource` `name`.
    pub fn allows(&self, p: &Principal, perm: Permission<'_>) -> bool {
        !self.enforced
            || self
                .authorizer
                .allows(p, perm.resource, perm.name, perm.operation)
    }

    /// `AUTHORIZATION_FAILED` naming the missing permission, unless `p` has it.
    pub fn check(&self, p: &Principal, perm: Permission<'_>) -> Result<(), m::Error> {
        if !self.enforced {
            return Ok(());
        }
        self.authorizer
            .check(p, perm.resource, perm.name, perm.operation)
            .map_err(|denied| ErrorCode::AUTHORIZATION_FAILED.with_message(denied.to_string()))
    }

    /// Whether `p` may DESCRIBE topic `name` (what metadata and list answers show).
    pub fn describes_topic(&self, p: &Principal, name: &str) -> bool {
        self.allows(p, Permission::topic(name, Describe))
    }

    /// Checks what a request needs up front: everything but its per-topic permissions
    /// (checked by the dispatcher entry by entry) and the filtering of list answers. `image`
    /// (for its topic names) is asked for only by [`Requirement::WriteSomewhere`].
    pub fn require<I: Borrow<MetadataImage>>(
        &self,
        p: &Principal,
        required: &Requirement<'_>,
        image: impl FnOnce() -> I,
    ) -> Result<(), m::Error> {
        match required {
            Requirement::Nothing | Requirement::Filtered => Ok(()),
            Requirement::PerTopic { group: None, .. } => Ok(()),
            Requirement::PerTopic { group: Some(g), .. } => self.check(p, *g),
            Requirement::One(a) => self.check(p, *a),
            Requirement::Both(a, b) => self.check(p, *a).and_then(|()| self.check(p, *b)),
            Requirement::Either(a, b) => {
                if self.allows(p, *b) {
                    Ok(())
                } else {
                    self.check(p, *a)
                }
            }
            Requirement::WriteSomewhere => {
                let cluster = Permission::cluster(Write);
                if !self.enforced || self.allows(p, cluster) {
                    return Ok(());
                }
                let image = image();
                let mut topics = image.borrow().topics.keys();
                if topics.any(|t| self.allows(p, Permission::topic(t, Write))) {
                    return Ok(());
                }
                Err(ErrorCode::AUTHORIZATION_FAILED.with_message(format!(
                    "{p} may not WRITE any topic nor the cluster (an idempotent producer needs one of them)"
                )))
            }
            Requirement::Node => self.check_node(p),
        }
    }

    /// `CLUSTER_AUTHORIZATION_FAILED` unless `p` is an authenticated node (when authorization
    /// is off the front end's role check is all there is).
    pub fn check_node(&self, p: &Principal) -> Result<(), m::Error> {
        if !self.enforced || p.is_node() {
            return Ok(());
        }
        Err(
            ErrorCode::CLUSTER_AUTHORIZATION_FAILED.with_message(format!(
                "{p} is not a cluster node; only nodes may send this"
            )),
        )
    }

    /// Checks `request` up front (see [`Access::require`]).
    pub fn require_request<I: Borrow<MetadataImage>>(
        &self,
        p: &Principal,
        request: &impl Required,
        image: impl FnOnce() -> I,
    ) -> Result<(), m::Error> {
        self.require(p, &request.required(), image)
    }

    /// `AUTHORIZATION_FAILED` for topic `name` unless `p` may do `operation` on it; the last
    /// topic's answer is reused (`last`), since a request's partitions come grouped by topic.
    pub fn check_topic_cached(
        &self,
        p: &Principal,
        name: &str,
        operation: AclOperation,
        last: &mut Option<(String, Result<(), m::Error>)>,
    ) -> Result<(), m::Error> {
        if !self.enforced {
            return Ok(());
        }
        if let Some((topic, answer)) = last {
            if topic == name {
                return answer.clone();
            }
        }
        let answer = self.check(p, Permission::topic(name, operation));
        *last = Some((name.to_string(), answer.clone()));
        answer
    }

    pub fn is_enforced(&self) -> bool {
        self.enforced
    }

    /// These rules, `enforced` or not (for checks that need no ACL: [`Access::check_node`]).
    fn clone_enforced(&self, enforced: bool) -> Access {
        Access {
            authorizer: self.authorizer.clone(),
            enforced,
        }
    }
}

/// The [`Access`] of the newest image seen, rebuilt only when the image version changes, so a
/// check on the produce and fetch paths costs a lock and a version comparison.
pub struct AuthorizerCache {
    config: AuthorizationConfig,
    off: Access,
    built: RwLock<Option<(u64, Access)>>,
}

impl std::fmt::Debug for AuthorizerCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthorizerCache")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl AuthorizerCache {
    pub fn new(config: AuthorizationConfig) -> AuthorizerCache {
        AuthorizerCache {
            config,
            off: Access::off(),
            built: RwLock::new(None),
        }
    }

    pub fn enabled(&self) -> bool {
        self.config.enabled
    }

    /// Checks `request` up front (see [`Access::require`]); the ACLs of the image whose
    /// version `version` gives are built only when the request needs them (a node-only
    /// operation needs only the principal).
    pub fn require_request<I: Borrow<MetadataImage>>(
        &self,
        p: &Principal,
        request: &impl Required,
        version: impl FnOnce() -> u64,
        image: impl Fn() -> I,
    ) -> Result<(), m::Error> {
        match request.required() {
            Requirement::Nothing | Requirement::Filtered => Ok(()),
            Requirement::Node => self.off.clone_enforced(self.config.enabled).check_node(p),
            required => self.current(version, &image).require(p, &required, &image),
        }
    }

    /// The access rules of the image whose version `version` gives; `image` is asked for only
    /// when that version is not the one last built (neither is asked when authorization is off).
    pub fn current<I: Borrow<MetadataImage>>(
        &self,
        version: impl FnOnce() -> u64,
        image: impl FnOnce() -> I,
    ) -> Access {
        if !self.config.enabled {
            return self.off.clone();
        }
        let version = version();
        // A read lock for the version comparison, so requests never wait on one another; the
        // ACL index of a new version is built outside the lock, and kept unless a newer one
        // was stored meanwhile (image versions only grow).
        if let Some((v, access)) = &*self.built.read() {
            if *v == version {
                return access.clone();
            }
        }
        let authorizer = image().borrow().authorizer(self.config.super_users.clone());
        let access = Access {
            authorizer: Arc::new(authorizer),
            enforced: true,
        };
        let mut built = self.built.write();
        if built.as_ref().is_none_or(|(v, _)| *v < version) {
            *built = Some((version, access.clone()));
        }
        access
    }
}

#[cfg(test)]
mod tests;
