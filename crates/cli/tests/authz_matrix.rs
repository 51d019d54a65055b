//! The authorization matrix (issue 16): every native operation, against a real standalone
//! server with TLS and SCRAM authentication on, by principals with and without the permission
//! it needs; and a MetaServer node's own dispatcher.
//!
//! For each operation the table names the request it sends and the permission it needs. Per
//! operation, `lit` (an ALLOW on the literal resource name) and `pre` (an ALLOW on a prefix of
//! it) and the super user `admin` succeed; `none` (no ACL), `other` (the operation on another
//! resource), `premiss` (a prefix that does not match) and `deny` (an ALLOW plus a matching
//! prefixed DENY) are refused with AUTHORIZATION_FAILED naming the permission. List and
//! metadata answers show each principal only what it may describe, as do a group's offsets in
//! OffsetFetch and DescribeGroup answers. Node-only operations are refused to every user, the
//! super user included. The table must cover `OpCode::ALL`.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use common::tls::{node_flags, Ca, Node};
use tinymq_auth::{ScramMechanism, StoredCredential, SCRAM_ITERATIONS_MIN};
use tinymq_client::{ClientError, ClientTls, Connection, Login, Security};
use tinymq_protocol::messages::{self as m, NodeRole};
use tinymq_protocol::{ErrorCode, OpCode, Request};

const ADMIN_PASSWORD: &str = "admin-secret-1";
const WAIT: Duration = Duration::from_secs(10);

/// Every error of an answer: the top-level one first, then those of its entries.
type Errors = Vec<Option<(ErrorCode, String)>>;

/// What a call showed: its errors, and for list operations the names it listed.
struct Outcome {
    errors: Errors,
    listed: Option<Vec<String>>,
}

type Call = for<'a> fn(&'a Connection, Target<'a>) -> Pin<Box<dyn Future<Output = Outcome> + 'a>>;

/// What a call acts on: the resource `name`, and `who` makes request contents unique.
#[derive(Clone, Copy)]
struct Target<'a> {
    name: &'a str,
    who: &'a str,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Resource {
    Topic,
    Group,
    /// A group and a topic of the same name.
    GroupAndTopic,
    Cluster,
    /// Node-only: refused to every user.
    Node,
    /// A transactional id.
    Txn,
    /// A transactional id (WRITE) and a group (READ) of the same name.
    TxnAndGroup,
    /// A topic (the row's operation) and a group (READ) of the same name: half messages.
    TopicAndGroup,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Check {
    /// Allowed: no error, or one of these (the operation ran and had its own reason).
    Runs(&'static [ErrorCode]),
    /// Allowed: the answer lists the target; refused: it does not (an empty list).
    Lists,
}

struct Row {
    op: OpCode,
    /// Distinct per row, and no row's name is a prefix of another's.
    key: &'static str,
    resource: Resource,
    /// The ACL operation the row grants.
    acl: i32,
    /// Whether the resources must exist first (created, and for groups given an offset).
    setup: bool,
    check: Check,
    call: Call,
}

async fn ask<R: Request>(c: &Connection, request: R) -> Result<R::Response, (ErrorCode, String)> {
    match c.request(&request, WAIT).await {
        Ok(response) => Ok(response),
        Err(ClientError::Server { code, message }) => Err((code, message)),
        Err(other) => panic!("{:?} failed outside the protocol: {other}", R::OP),
    }
}

fn err(e: &Option<m::Error>) -> Option<(ErrorCode, String)> {
    e.as_ref().map(|e| (e.error_code(), e.message.clone()))
}

/// The outcome of an answer without entries.
fn top<T>(answer: Result<T, (ErrorCode, String)>) -> Outcome {
    Outcome {
        errors: vec![answer.err()],
        listed: None,
    }
}

/// The outcome of an answer with entries.
fn entries<T>(
    answer: Result<T, (ErrorCode, String)>,
    each: impl Fn(&T) -> Vec<Option<(ErrorCode, String)>>,
) -> Outcome {
    match answer {
        Ok(a) => {
            let mut errors = vec![None];
            errors.extend(each(&a));
            Outcome {
                errors,
                listed: None,
            }
        }
        Err(e) => top::<()>(Err(e)),
    }
}

fn listed<T>(answer: Result<T, (ErrorCode, String)>, names: impl Fn(T) -> Vec<String>) -> Outcome {
    match answer {
        Ok(a) => Outcome {
            errors: vec![None],
            listed: Some(names(a)),
        },
        Err(e) => top::<()>(Err(e)),
    }
}

fn batch() -> bytes::Bytes {
    use tinymq_protocol::batch::{BatchBuilder, Compression, ProducerStamp, RecordInput};
    let mut builder = BatchBuilder::new(Compression::None, ProducerStamp::NONE);
    builder.push(&RecordInput {
        timestamp_ms: 1,
        key: None,
        value: Some(b"v"),
        headers: &[],
    });
    builder.build().expect("a one-record batch")
}

fn group_name(t: Target<'_>) -> String {
    t.name.to_string()
}

macro_rules! call {
    (|$c:ident, $t:ident| $body:expr) => {{
        fn f<'a>(
            $c: &'a Connection,
            $t: Target<'a>,
        ) -> Pin<Box<dyn Future<Output = Outcome> + 'a>> {
            Box::pin(async move { $body })
        }
        f as Call
    }};
}

const READ: i32 = m::AclOperation::Read as i32;
const WRITE: i32 = m::AclOperation::Write as i32;
const CREATE: i32 = m::AclOperation::Create as i32;
const DELETE: i32 = m::AclOperation::Delete as i32;
const ALTER: i32 = m::AclOperation::Alter as i32;
const DESCRIBE: i32 = m::AclOperation::Describe as i32;
const OK: Check = Check::Runs(&[]);

fn rows() -> Vec<Row> {
    use Resource::*;
    vec![
        Row {
            op: OpCode::Metadata,
            key: "metadata",
            resource: Topic,
            acl: DESCRIBE,
            setup: true,
            check: OK,
            call: call!(|c, t| entries(
                ask(
                    c,
                    m::MetadataRequest {
                        topics: vec![t.name.into()]
                    }
                )
                .await,
                |a| a.topics.iter().map(|t| err(&t.error)).collect()
            )),
        },
        Row {
            op: OpCode::Metadata,
            key: "metadataall",
            resource: Topic,
            acl: DESCRIBE,
            setup: true,
            check: Check::Lists,
            call: call!(
                |c, _t| listed(ask(c, m::MetadataRequest::default()).await, |a| a
                    .topics
                    .into_iter()
                    .map(|t| t.name)
                    .collect())
            ),
        },
        Row {
            op: OpCode::CreateTopic,
            key: "createtopic",
            resource: Topic,
            acl: CREATE,
            setup: false,
            check: OK,
            call: call!(|c, t| top(ask(
                c,
                m::CreateTopicRequest {
                    name: t.name.into(),
                    config: Some(m::TopicConfig {
                        partitions: 1,
                        replication_factor: 1,
                        ..Default::default()
                    }),
                    validate_only: false,
                }
            )
            .await)),
        },
        Row {
            op: OpCode::DeleteTopic,
            key: "deletetopic",
            resource: Topic,
            acl: DELETE,
            setup: true,
            check: OK,
            call: call!(|c, t| top(ask(
                c,
                m::DeleteTopicRequest {
                    name: t.name.into()
                }
            )
            .await)),
        },
        Row {
            op: OpCode::ListTopics,
            key: "listtopics",
            resource: Topic,
            acl: DESCRIBE,
            setup: true,
            check: Check::Lists,
            call: call!(|c, _t| listed(ask(c, m::ListTopicsRequest {}).await, |a| a.names)),
        },
        Row {
            op: OpCode::DescribeTopic,
            key: "describetopic",
            resource: Topic,
            acl: DESCRIBE,
            setup: true,
            check: OK,
            call: call!(|c, t| top(ask(
                c,
                m::DescribeTopicRequest {
                    name: t.name.into()
                }
            )
            .await)),
        },
        Row {
            op: OpCode::Produce,
            key: "produce",
            resource: Topic,
            acl: WRITE,
            setup: true,
            check: OK,
            call: call!(|c, t| entries(
                ask(
                    c,
                    m::ProduceRequest {
                        acks: 1,
                        timeout_ms: 5000,
                        partitions: vec![m::ProducePartition {
                            topic: t.name.into(),
                            partition: 0,
                            records: batch(),
                        }],
                        transactional_id: String::new(),
                    }
                )
                .await,
                |a| a.partitions.iter().map(|p| err(&p.error)).collect()
            )),
        },
        Row {
            op: OpCode::Fetch,
            key: "fetch",
            resource: Topic,
            acl: READ,
            setup: true,
            check: OK,
            call: call!(|c, t| entries(
                ask(
                    c,
                    m::FetchRequest {
                        max_wait_ms: 0,
                        min_bytes: 1,
                        partitions: vec![m::FetchPartition {
                            topic: t.name.into(),
                            partition: 0,
                            offset: 0,
                            ..Default::default()
                        }],
                        ..Default::default()
                    }
                )
                .await,
                |a| a.partitions.iter().map(|p| err(&p.error)).collect()
            )),
        },
        Row {
            op: OpCode::Fetch,
            key: "followerfetch",
            resource: Node,
            acl: READ,
            setup: true,
            check: OK,
            call: call!(|c, t| entries(
                ask(
                    c,
                    m::FetchRequest {
                        replica_id: 1,
                        partitions: vec![m::FetchPartition {
                            topic: t.name.into(),
                            partition: 0,
                            ..Default::default()
                        }],
                        ..Default::default()
                    }
                )
                .await,
                |a| a.partitions.iter().map(|p| err(&p.error)).collect()
            )),
        },
        Row {
            op: OpCode::ListOffsets,
            key: "listoffsets",
            resource: Topic,
            acl: DESCRIBE,
            setup: true,
            check: OK,
            call: call!(|c, t| entries(
                ask(
                    c,
                    m::ListOffsetsRequest {
                        partitions: vec![m::ListOffsetsPartition {
                            topic: t.name.into(),
                            partition: 0,
                            timestamp: -1,
                        }],
                        isolation_level: 0,
                    }
                )
                .await,
                |a| a.partitions.iter().map(|p| err(&p.error)).collect()
            )),
        },
        Row {
            op: OpCode::DeleteRecords,
            key: "deleterecords",
            resource: Topic,
            acl: DELETE,
            setup: true,
            check: OK,
            call: call!(|c, t| entries(
                ask(
                    c,
                    m::DeleteRecordsRequest {
                        partitions: vec![m::DeleteRecordsPartition {
                            topic: t.name.into(),
                            partition: 0,
                            offset: -1,
                        }],
                        timeout_ms: 0,
                    }
                )
                .await,
                |a| a.partitions.iter().map(|p| err(&p.error)).collect()
            )),
        },
        Row {
            op: OpCode::InitProducerId,
            key: "initproducerid",
            resource: Topic,
            acl: WRITE,
            setup: true,
            check: OK,
            call: call!(|c, _t| top(ask(c, m::InitProducerIdRequest::default()).await)),
        },
        Row {
            op: OpCode::FindCoordinator,
            key: "findcoordinator",
            resource: Group,
            acl: DESCRIBE,
            setup: false,
            check: OK,
            call: call!(|c, t| top(ask(
                c,
                m::FindCoordinatorRequest {
                    group_id: group_name(t),
                    key_type: 0,
                }
            )
            .await)),
        },
        Row {
            op: OpCode::JoinGroup,
            key: "joingroup",
            resource: Group,
            acl: READ,
            setup: true,
            check: OK,
            call: call!(|c, t| top(join(c, t).await.map(|_| ()))),
        },
        Row {
            op: OpCode::Heartbeat,
            key: "heartbeat",
            resource: Group,
            acl: READ,
            setup: true,
            check: OK,
            call: call!(|c, t| {
                // A refused principal cannot join either: its heartbeat uses a made-up member.
                let (member, generation) = join(c, t).await.unwrap_or(("m-1".into(), 1));
                top(ask(
                    c,
                    m::HeartbeatRequest {
                        group_id: group_name(t),
                        member_id: member,
                        generation,
                        owned: vec![],
                    },
                )
                .await)
            }),
        },
        Row {
            op: OpCode::LeaveGroup,
            key: "leavegroup",
            resource: Group,
            acl: READ,
            setup: true,
            check: OK,
            call: call!(|c, t| {
                let (member, _) = join(c, t).await.unwrap_or(("m-1".into(), 1));
                top(ask(
                    c,
                    m::LeaveGroupRequest {
                        group_id: group_name(t),
                        member_id: member,
                    },
                )
                .await)
            }),
        },
        Row {
            op: OpCode::OffsetCommit,
            key: "offsetcommit",
            resource: GroupAndTopic,
            acl: READ,
            setup: true,
            check: OK,
            call: call!(|c, t| entries(ask(c, commit(t.name)).await, |a| a
                .offsets
                .iter()
                .map(|o| err(&o.error))
                .collect())),
        },
        Row {
            op: OpCode::OffsetFetch,
            key: "offsetfetch",
            resource: GroupAndTopic,
            acl: DESCRIBE,
            setup: true,
            check: OK,
            call: call!(|c, t| entries(
                ask(
                    c,
                    m::OffsetFetchRequest {
                        require_stable: false,
                        group_id: group_name(t),
                        partitions: vec![m::TopicPartitions {
                            topic: t.name.into(),
                            partitions: vec![0],
                        }],
                    }
                )
                .await,
                |a| a.offsets.iter().map(|o| err(&o.error)).collect()
            )),
        },
        Row {
            op: OpCode::ListGroups,
            key: "listgroups",
            resource: Group,
            acl: DESCRIBE,
            setup: true,
            check: Check::Lists,
            call: call!(|c, _t| listed(ask(c, m::ListGroupsRequest {}).await, |a| a.group_ids)),
        },
        Row {
            op: OpCode::DescribeGroup,
            key: "describegroup",
            resource: Group,
            acl: DESCRIBE,
            setup: true,
            check: OK,
            call: call!(|c, t| top(ask(
                c,
                m::DescribeGroupRequest {
                    group_id: group_name(t)
                }
            )
            .await)),
        },
        Row {
            op: OpCode::DeleteGroup,
            key: "deletegroup",
            resource: Group,
            acl: DELETE,
            setup: true,
            check: OK,
            call: call!(|c, t| top(ask(
                c,
                m::DeleteGroupRequest {
                    group_id: group_name(t),
                    offsets: Vec::new(),
                }
            )
            .await)),
        },
        Row {
            op: OpCode::AlterPartitions,
            key: "alterpartitions",
            resource: Topic,
            acl: ALTER,
            setup: true,
            check: OK,
            call: call!(|c, t| top(ask(
                c,
                m::AlterPartitionsRequest {
                    name: t.name.into(),
                    partitions: 2,
                }
            )
            .await)),
        },
        Row {
            op: OpCode::AlterTopicConfig,
            key: "altertopicconfig",
            resource: Topic,
            acl: ALTER,
            setup: true,
            check: OK,
            call: call!(|c, t| top(ask(
                c,
                m::AlterTopicConfigRequest {
                    name: t.name.into(),
                    set: vec![m::TopicSetting {
                        key: "retention_ms".into(),
                        value: "600000".into(),
                    }],
                    unset: vec![],
                    validate_only: false,
                }
            )
            .await)),
        },
        Row {
            op: OpCode::DecommissionBroker,
            key: "decommissionbroker",
            resource: Cluster,
            acl: ALTER,
            setup: false,
            // No broker 77: the request was authorized and then failed on its own merits.
            check: Check::Runs(&[ErrorCode::INVALID_REQUEST]),
            call: call!(|c, _t| top(ask(
                c,
                m::DecommissionBrokerRequest {
                    broker_id: 77,
                    move_partitions: false,
                }
            )
            .await)),
        },
        Row {
            op: OpCode::Rebalance,
            key: "rebalance",
            resource: Cluster,
            acl: ALTER,
            setup: false,
            check: OK,
            call: call!(|c, _t| top(ask(c, m::RebalanceRequest { dry_run: true }).await)),
        },
        Row {
            op: OpCode::DrainBroker,
            key: "drainbroker",
            resource: Cluster,
            acl: ALTER,
            setup: false,
            check: Check::Runs(&[ErrorCode::INVALID_REQUEST]),
            call: call!(|c, _t| top(ask(
                c,
                m::DrainBrokerRequest {
                    broker_id: 77,
                    dry_run: true,
                }
            )
            .await)),
        },
        Row {
            op: OpCode::PutUser,
            key: "putuser",
            resource: Cluster,
            acl: ALTER,
            setup: false,
            check: OK,
            call: call!(|c, t| top(ask(c, put_user(&format!("made-by-{}", t.who))).await)),
        },
        Row {
            op: OpCode::DeleteUser,
            key: "deleteuser",
            resource: Cluster,
            acl: ALTER,
            setup: false,
            check: Check::Runs(&[ErrorCode::USER_NOT_FOUND]),
            call: call!(|c, t| top(ask(
                c,
                m::DeleteUserRequest {
                    name: format!("made-by-{}", t.who)
                }
            )
            .await)),
        },
        Row {
            op: OpCode::ListUsers,
            key: "listusers",
            resource: Cluster,
            acl: DESCRIBE,
            setup: false,
            check: OK,
            call: call!(|c, _t| top(ask(c, m::ListUsersRequest {}).await)),
        },
        Row {
            op: OpCode::CreateAcls,
            key: "createacls",
            resource: Cluster,
            acl: ALTER,
            setup: false,
            check: OK,
            call: call!(|c, _t| top(ask(
                c,
                m::CreateAclsRequest {
                    acls: vec![nobody_acl()]
                }
            )
            .await)),
        },
        Row {
            op: OpCode::DeleteAcls,
            key: "deleteacls",
            resource: Cluster,
            acl: ALTER,
            setup: false,
            check: OK,
            call: call!(|c, _t| top(ask(
                c,
                m::DeleteAclsRequest {
                    filter: Some(m::AclFilter {
                        principal: "User:nobody".into(),
                        ..Default::default()
                    }),
                }
            )
            .await)),
        },
        Row {
            op: OpCode::ListAcls,
            key: "listacls",
            resource: Cluster,
            acl: DESCRIBE,
            setup: false,
            check: OK,
            call: call!(|c, _t| top(ask(c, m::ListAclsRequest::default()).await)),
        },
        Row {
            op: OpCode::SetQuota,
            key: "setquota",
            resource: Cluster,
            acl: ALTER,
            setup: false,
            check: OK,
            call: call!(|c, _t| top(ask(
                c,
                m::SetQuotaRequest {
                    quota: Some(m::Quota {
                        principal: "User:nobody".into(),
                        produce_bytes_per_sec: 1 << 20,
                        ..Default::default()
                    }),
                    remove: false,
                }
            )
            .await)),
        },
        Row {
            op: OpCode::ListQuotas,
            key: "listquotas",
            resource: Cluster,
            acl: DESCRIBE,
            setup: false,
            check: OK,
            call: call!(|c, _t| top(ask(c, m::ListQuotasRequest {}).await)),
        },
        Row {
            op: OpCode::ShareFetch,
            key: "sharefetch",
            resource: GroupAndTopic,
            acl: READ,
            setup: true,
            check: OK,
            call: call!(|c, t| entries(
                ask(
                    c,
                    m::ShareFetchRequest {
                        group_id: t.name.into(),
                        member_id: format!("m-{}", t.who),
                        partitions: vec![m::ShareFetchPartition {
                            topic: t.name.into(),
                            partition: 0,
                        }],
                        max_records: 1,
                        ..Default::default()
                    }
                )
                .await,
                |a| a.partitions.iter().map(|p| err(&p.error)).collect()
            )),
        },
        Row {
            op: OpCode::ShareAcknowledge,
            key: "shareacknowledge",
            resource: GroupAndTopic,
            acl: READ,
            setup: true,
            // Nothing is acquired by this member: authorized, then refused on its merits.
            check: Check::Runs(&[ErrorCode::INVALID_RECORD_STATE]),
            call: call!(|c, t| entries(
                ask(
                    c,
                    m::ShareAcknowledgeRequest {
                        group_id: t.name.into(),
                        member_id: format!("m-{}", t.who),
                        acknowledgements: vec![m::ShareAcknowledgement {
                            topic: t.name.into(),
                            partition: 0,
                            first_offset: 0,
                            last_offset: 0,
                            kind: 1,
                        }],
                    }
                )
                .await,
                |a| a.results.iter().map(|r| err(&r.error)).collect()
            )),
        },
        Row {
            op: OpCode::DescribeShareGroup,
            key: "describesharegroup",
            resource: Group,
            acl: DESCRIBE,
            setup: false,
            check: Check::Runs(&[ErrorCode::GROUP_ID_NOT_FOUND]),
            call: call!(|c, t| top(ask(
                c,
                m::DescribeShareGroupRequest {
                    group_id: t.name.into(),
                }
            )
            .await)),
        },
        Row {
            op: OpCode::ProduceDelayed,
            key: "producedelayed",
            resource: Topic,
            acl: WRITE,
            setup: true,
            check: OK,
            call: call!(|c, t| top(ask(
                c,
                m::ProduceDelayedRequest {
                    topic: t.name.into(),
                    partition: 0,
                    deliver_at_ms: 1,
                    records: batch(),
                    timeout_ms: 5000,
                }
            )
            .await)),
        },
        Row {
            op: OpCode::CreateRoute,
            key: "createroute",
            resource: Cluster,
            acl: ALTER,
            setup: false,
            // The topics do not exist: authorized, then refused on its merits.
            check: Check::Runs(&[
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                ErrorCode::INVALID_REQUEST,
            ]),
            call: call!(|c, t| top(ask(
                c,
                m::CreateRouteRequest {
                    name: format!("r-{}", t.who),
                    from_topic: "no-such-source".into(),
                    to_topic: "no-such-target".into(),
                    filter: String::new(),
                }
            )
            .await)),
        },
        Row {
            op: OpCode::DeleteRoute,
            key: "deleteroute",
            resource: Cluster,
            acl: ALTER,
            setup: false,
            check: Check::Runs(&[ErrorCode::ROUTE_NOT_FOUND]),
            call: call!(|c, t| top(ask(
                c,
                m::DeleteRouteRequest {
                    name: format!("r-{}", t.who),
                }
            )
            .await)),
        },
        Row {
            op: OpCode::ListRoutes,
            key: "listroutes",
            resource: Cluster,
            acl: DESCRIBE,
            setup: false,
            check: OK,
            call: call!(|c, _t| top(ask(c, m::ListRoutesRequest {}).await)),
        },
        Row {
            op: OpCode::InitProducerId,
            key: "inittxn",
            resource: Txn,
            acl: WRITE,
            setup: false,
            check: OK,
            call: call!(|c, t| top(ask(c, init_txn(t.name)).await)),
        },
        Row {
            op: OpCode::FindCoordinator,
            key: "findtxn",
            resource: Txn,
            acl: DESCRIBE,
            setup: false,
            check: OK,
            call: call!(|c, t| top(ask(
                c,
                m::FindCoordinatorRequest {
                    group_id: t.name.into(),
                    key_type: 1,
                }
            )
            .await)),
        },
        Row {
            op: OpCode::AddPartitionsToTxn,
            key: "addparts",
            resource: Txn,
            acl: WRITE,
            setup: false,
            // No producer was initialized for the id: authorized, then refused on its merits.
            check: Check::Runs(&[ErrorCode::INVALID_PRODUCER_ID_MAPPING]),
            call: call!(|c, t| entries(
                ask(
                    c,
                    m::AddPartitionsToTxnRequest {
                        transactional_id: t.name.into(),
                        producer_id: 1,
                        producer_epoch: 0,
                        topics: vec![],
                        verify_only: false,
                    }
                )
                .await,
                |a| vec![err(&a.error)]
            )),
        },
        Row {
            op: OpCode::AddOffsetsToTxn,
            key: "addoffsets",
            resource: TxnAndGroup,
            acl: WRITE,
            setup: false,
            check: Check::Runs(&[ErrorCode::INVALID_PRODUCER_ID_MAPPING]),
            call: call!(|c, t| entries(
                ask(
                    c,
                    m::AddOffsetsToTxnRequest {
                        transactional_id: t.name.into(),
                        producer_id: 1,
                        producer_epoch: 0,
                        group_id: t.name.into(),
                    }
                )
                .await,
                |a| vec![err(&a.error)]
            )),
        },
        Row {
            op: OpCode::EndTxn,
            key: "endtxn",
            resource: Txn,
            acl: WRITE,
            setup: false,
            check: Check::Runs(&[ErrorCode::INVALID_PRODUCER_ID_MAPPING]),
            call: call!(|c, t| entries(
                ask(
                    c,
                    m::EndTxnRequest {
                        transactional_id: t.name.into(),
                        producer_id: 1,
                        producer_epoch: 0,
                        commit: true,
                    }
                )
                .await,
                |a| vec![err(&a.error)]
            )),
        },
        Row {
            op: OpCode::TxnOffsetCommit,
            key: "txncommit",
            resource: TxnAndGroup,
            acl: WRITE,
            setup: false,
            check: OK,
            call: call!(|c, t| entries(
                ask(
                    c,
                    m::TxnOffsetCommitRequest {
                        transactional_id: t.name.into(),
                        group_id: t.name.into(),
                        producer_id: 1,
                        producer_epoch: 0,
                        member_id: String::new(),
                        generation: -1,
                        offsets: vec![],
                    }
                )
                .await,
                |a| vec![err(&a.error)]
            )),
        },
        Row {
            op: OpCode::WriteTxnMarkers,
            key: "writemarkers",
            resource: Cluster,
            acl: ALTER,
            setup: false,
            check: OK,
            call: call!(|c, _t| top(ask(c, m::WriteTxnMarkersRequest::default()).await)),
        },
        Row {
            op: OpCode::DescribeTransactions,
            key: "describetxn",
            resource: Txn,
            acl: DESCRIBE,
            setup: true,
            check: OK,
            call: call!(|c, t| entries(
                ask(
                    c,
                    m::DescribeTransactionsRequest {
                        transactional_ids: vec![t.name.into()],
                    }
                )
                .await,
                |a| a.transactions.iter().map(|t| err(&t.error)).collect()
            )),
        },
        Row {
            op: OpCode::ListTransactions,
            key: "listtxn",
            resource: Txn,
            acl: DESCRIBE,
            setup: true,
            check: Check::Lists,
            call: call!(
                |c, _t| listed(ask(c, m::ListTransactionsRequest::default()).await, |a| a
                    .transactions
                    .into_iter()
                    .map(|t| t.transactional_id)
                    .collect())
            ),
        },
        Row {
            op: OpCode::HalfSend,
            key: "halfsend",
            resource: TopicAndGroup,
            acl: WRITE,
            setup: true,
            check: OK,
            call: call!(|c, t| top(ask(c, half_send(t.name))
                .await
                .and_then(|r| r.error.map_or(Ok(()), |e| Err((e.error_code(), e.message)))))),
        },
        Row {
            op: OpCode::HalfEnd,
            key: "halfend",
            resource: TopicAndGroup,
            acl: WRITE,
            setup: true,
            check: Check::Runs(&[ErrorCode::HALF_MESSAGE_NOT_FOUND]),
            call: call!(|c, t| entries(
                ask(
                    c,
                    m::HalfEndRequest {
                        group: t.name.into(),
                        half_id: 1 << 40,
                        topic: t.name.into(),
                        commit: true,
                        checked: false,
                    }
                )
                .await,
                |a| vec![err(&a.error)]
            )),
        },
        Row {
            op: OpCode::HalfCheckPoll,
            key: "halfpoll",
            resource: Group,
            acl: READ,
            setup: false,
            check: OK,
            call: call!(|c, t| entries(
                ask(
                    c,
                    m::HalfCheckPollRequest {
                        group: t.name.into(),
                        max_wait_ms: 0,
                        max_checks: 0,
                    }
                )
                .await,
                |a| vec![err(&a.error)]
            )),
        },
        Row {
            op: OpCode::HalfList,
            key: "halflist",
            resource: Group,
            acl: DESCRIBE,
            setup: true,
            check: Check::Lists,
            call: call!(
                |c, _t| listed(ask(c, m::HalfListRequest::default()).await, |a| a
                    .halves
                    .into_iter()
                    .map(|h| h.group)
                    .collect())
            ),
        },
        Row {
            op: OpCode::DescribeProducers,
            key: "describeproducers",
            resource: Topic,
            acl: READ,
            setup: true,
            check: OK,
            call: call!(|c, t| entries(
                ask(
                    c,
                    m::DescribeProducersRequest {
                        topics: vec![m::TxnTopic {
                            topic: t.name.into(),
                            partitions: vec![0],
                        }],
                    }
                )
                .await,
                |a| a.partitions.iter().map(|p| err(&p.error)).collect()
            )),
        },
        Row {
            op: OpCode::MetaRead,
            key: "metaread",
            resource: Cluster,
            acl: DESCRIBE,
            setup: false,
            check: OK,
            call: call!(|c, _t| top(ask(c, m::MetaReadRequest::default()).await)),
        },
        Row {
            op: OpCode::RaftRpc,
            key: "raftrpc",
            resource: Node,
            acl: ALTER,
            setup: false,
            check: OK,
            call: call!(|c, _t| top(ask(c, m::RaftRpcRequest::default()).await)),
        },
        Row {
            op: OpCode::MetaWrite,
            key: "metawrite",
            resource: Node,
            acl: ALTER,
            setup: false,
            check: OK,
            call: call!(|c, _t| top(ask(c, m::MetaWriteRequest::default()).await)),
        },
        Row {
            op: OpCode::BrokerHeartbeat,
            key: "brokerheartbeat",
            resource: Node,
            acl: ALTER,
            setup: false,
            check: OK,
            call: call!(|c, _t| top(ask(
                c,
                m::BrokerHeartbeatRequest {
                    broker_id: 1,
                    epoch: 1,
                    ..Default::default()
                }
            )
            .await)),
        },
    ]
}

async fn join(c: &Connection, t: Target<'_>) -> Result<(String, u32), (ErrorCode, String)> {
    let joined = ask(
        c,
        m::JoinGroupRequest {
            group_id: group_name(t),
            member_id: String::new(),
            topics: vec![t.name.into()],
            session_timeout_ms: 30_000,
            strategy: String::new(),
            client_id: format!("authz-{}", t.who),
        },
    )
    .await?;
    Ok((joined.member_id, joined.generation))
}

/// An administrative commit (no member) of offset 0 of `name`/0 to group `name`.
fn commit(name: &str) -> m::OffsetCommitRequest {
    m::OffsetCommitRequest {
        group_id: name.into(),
        member_id: String::new(),
        generation: 0,
        offsets: vec![m::CommittedOffset {
            topic: name.into(),
            partition: 0,
            offset: 0,
            metadata: String::new(),
            error: None,
        }],
    }
}

/// InitProducerId for transactional id `name`.
fn init_txn(name: &str) -> m::InitProducerIdRequest {
    m::InitProducerIdRequest {
        transactional_id: name.into(),
        producer_id: -1,
        producer_epoch: -1,
        transaction_timeout_ms: 0,
    }
}

/// Initializes transactional id `name` as a client does: finds its coordinator (creating
/// `__transaction_state` the first time), then retries while the coordinator loads.
async fn init_txn_retrying(admin: &Connection, name: &str) {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let find = m::FindCoordinatorRequest {
            group_id: name.into(),
            key_type: 1,
        };
        let found = ask(admin, find).await.map(|f| f.error);
        let initialized = match found {
            Ok(None) => ask(admin, init_txn(name)).await.map(|r| r.error),
            other => other,
        };
        match initialized {
            Ok(None) => return,
            other if std::time::Instant::now() > deadline => {
                panic!("initializing {name}: {other:?}")
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

fn half_send(name: &str) -> m::HalfSendRequest {
    m::HalfSendRequest {
        group: name.into(),
        topic: name.into(),
        partition: 0,
        records: common::frames::batch("half", tinymq_protocol::batch::ProducerStamp::NONE),
        check_after_ms: 3_600_000,
        timeout_ms: 0,
        request_id: String::new(),
    }
}

/// Stores a half of group `name` for topic `name` (the first creates `__half_messages`).
async fn half_send_retrying(admin: &Connection, name: &str) {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        // As a client does: FindCoordinator first (it creates `__half_messages`).
        let find = m::FindCoordinatorRequest {
            group_id: name.into(),
            key_type: 2,
        };
        let stored = match ask(admin, find).await.map(|f| f.error) {
            Ok(None) => ask(admin, half_send(name)).await.map(|r| r.error),
            other => other,
        };
        match stored {
            Ok(None) => return,
            other if std::time::Instant::now() > deadline => panic!("storing a half: {other:?}"),
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

fn put_user(name: &str) -> m::PutUserRequest {
    let credential =
        StoredCredential::derive(ScramMechanism::Sha256, "pw-of-a-user", SCRAM_ITERATIONS_MIN);
    m::PutUserRequest {
        name: name.into(),
        credentials: vec![credential.to_wire()],
        mode: m::PutUserMode::Create as i32,
    }
}

fn nobody_acl() -> m::Acl {
    m::Acl {
        principal: "User:nobody".into(),
        resource_type: m::ResourceType::Topic as i32,
        resource_name: "nobody".into(),
        pattern_type: m::PatternType::Literal as i32,
        operation: READ,
        permission: m::AclPermission::Allow as i32,
    }
}

/// The principals of the matrix and whether each may do a row's operation.
const ALLOWED: [&str; 2] = ["lit", "pre"];
const REFUSED: [&str; 4] = ["none", "other", "premiss", "deny"];

/// The resource each principal acts on in `row`.
fn target(row: &Row, who: &str) -> String {
    if row.resource == Resource::Cluster {
        return "cluster".into();
    }
    match who {
        "pre" => format!("{}-pre1", row.key),
        "admin" => format!("{}-adm", row.key),
        _ => format!("{}-lit", row.key),
    }
}

fn acl(who: &str, resource_type: m::ResourceType, name: &str, prefixed: bool, op: i32) -> m::Acl {
    m::Acl {
        principal: format!("User:{who}"),
        resource_type: resource_type as i32,
        resource_name: name.into(),
        pattern_type: if prefixed {
            m::PatternType::Prefixed as i32
        } else {
            m::PatternType::Literal as i32
        },
        operation: op,
        permission: m::AclPermission::Allow as i32,
    }
}

/// The ACLs a row grants: `lit` literal, `pre` prefixed, `other` on another resource,
/// `premiss` a prefix that does not match, `deny` an ALLOW and a matching prefixed DENY. The
/// cluster is named only literally: there `pre` has the literal ACL too, `premiss` the name on
/// another resource type and `deny` a literal DENY.
fn row_acls(row: &Row) -> Vec<m::Acl> {
    use m::ResourceType as R;
    let types: &[R] = match row.resource {
        Resource::Topic => &[R::Topic],
        Resource::Group => &[R::Group],
        Resource::GroupAndTopic => &[R::Group, R::Topic],
        Resource::Cluster => &[R::Cluster],
        Resource::Node => &[R::Cluster, R::Topic],
        Resource::Txn => &[R::TransactionalId],
        Resource::TxnAndGroup => &[R::TransactionalId, R::Group],
        Resource::TopicAndGroup => &[R::Topic, R::Group],
    };
    let mut acls = vec![];
    for &t in types {
        if t == R::Cluster {
            let k = row.key;
            acls.push(acl("lit", t, "cluster", false, row.acl));
            acls.push(acl("pre", t, "cluster", false, row.acl));
            acls.push(acl("other", R::Group, &format!("{k}-zz"), false, row.acl));
            acls.push(acl(
                "premiss",
                R::TransactionalId,
                "cluster",
                false,
                row.acl,
            ));
            acls.push(acl("deny", t, "cluster", false, row.acl));
            let mut denied = acl("deny", t, "cluster", false, row.acl);
            denied.permission = m::AclPermission::Deny as i32;
            acls.push(denied);
            continue;
        }
        // A transaction's offsets need the group's READ beside the id's WRITE.
        let with_group = matches!(
            row.resource,
            Resource::TxnAndGroup | Resource::TopicAndGroup
        );
        let op = if with_group && t == R::Group {
            READ
        } else {
            row.acl
        };
        let row = &Row { acl: op, ..*row };
        let (lit, pre, miss, deny_prefix) = if t == R::Cluster {
            (
                "cluster".to_string(),
                "clu".to_string(),
                "x".to_string(),
                "c".to_string(),
            )
        } else {
            let k = row.key;
            (
                format!("{k}-lit"),
                format!("{k}-pre"),
                format!("{k}-q"),
                format!("{k}-"),
            )
        };
        acls.push(acl("lit", t, &lit, false, row.acl));
        acls.push(acl("pre", t, &pre, true, row.acl));
        let elsewhere = if t == R::Cluster { R::Group } else { t };
        acls.push(acl(
            "other",
            elsewhere,
            &format!("{}-zz", row.key),
            false,
            row.acl,
        ));
        acls.push(acl("premiss", t, &miss, true, row.acl));
        acls.push(acl("deny", t, &lit, false, row.acl));
        let mut denied = acl("deny", t, &deny_prefix, true, row.acl);
        denied.permission = m::AclPermission::Deny as i32;
        acls.push(denied);
    }
    acls
}

/// A port to log in to, and the CA its TLS certificate is checked against (plain without one).
struct Endpoint {
    addr: String,
    tls: Option<ClientTls>,
}

fn security(to: &Endpoint, user: &str, password: &str) -> Security {
    Security {
        tls: to.tls.clone(),
        login: Some(Login {
            mechanism: ScramMechanism::Sha256,
            user: user.into(),
            password: password.into(),
            authzid: None,
        }),
    }
}

async fn login(to: &Endpoint, user: &str, password: &str) -> Connection {
    let security = security(to, user, password);
    Connection::connect_secure(
        &to.addr,
        &format!("authz-{user}"),
        "",
        NodeRole::Client,
        0,
        &security,
    )
    .await
    .unwrap_or_else(|e| panic!("{user} logs in: {e}"))
}

/// The bootstrap admin, once the server has created it (shortly after its first start).
async fn admin_login(to: &Endpoint) -> Connection {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let security = security(to, "admin", ADMIN_PASSWORD);
    loop {
        let c =
            Connection::connect_secure(&to.addr, "authz-admin", "", NodeRole::Client, 0, &security);
        match c.await {
            Ok(c) => return c,
            Err(e) if std::time::Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("the bootstrap admin never logged in: {e}"),
        }
    }
}

/// Creates the topics (and groups, with an offset) a row's principals act on.
async fn set_up(admin: &Connection, row: &Row) {
    for who in ["lit", "pre", "admin"] {
        let name = target(row, who);
        let created = ask(
            admin,
            m::CreateTopicRequest {
                name: name.clone(),
                config: Some(m::TopicConfig {
                    partitions: 1,
                    replication_factor: 1,
                    ..Default::default()
                }),
                validate_only: false,
            },
        )
        .await;
        assert!(created.is_ok(), "creating {name}: {created:?}");
        if matches!(row.resource, Resource::Group | Resource::GroupAndTopic) {
            let committed = ask(admin, commit(&name)).await;
            assert!(committed.is_ok(), "committing to {name}: {committed:?}");
        }
        if row.resource == Resource::Txn {
            init_txn_retrying(admin, &name).await;
        }
        if row.op == OpCode::HalfList {
            half_send_retrying(admin, &name).await;
        }
    }
}

fn refusal_code(row: &Row) -> ErrorCode {
    if row.resource == Resource::Node {
        ErrorCode::CLUSTER_AUTHORIZATION_FAILED
    } else {
        ErrorCode::AUTHORIZATION_FAILED
    }
}

fn is_refusal(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::AUTHORIZATION_FAILED | ErrorCode::CLUSTER_AUTHORIZATION_FAILED
    )
}

/// Checks one principal's call of `row`; returns a description of what was wrong, if anything.
async fn check(row: &Row, c: &Connection, who: &str, allowed: bool) -> Option<String> {
    let name = target(row, who);
    let outcome = (row.call)(c, Target { name: &name, who }).await;
    let errors: Vec<&(ErrorCode, String)> = outcome.errors.iter().flatten().collect();
    let what = format!("{} ({}) by {who} on {name}", row.op.name(), row.key);
    if let (Check::Lists, Some(list)) = (row.check, &outcome.listed) {
        let shows = list.contains(&name);
        let shows_secret = list.iter().any(|n| n.starts_with("secret"));
        if shows != allowed || (shows_secret && who != "admin") {
            return Some(format!("{what}: listed {list:?}"));
        }
        return None;
    }
    if allowed {
        let tolerated = match row.check {
            Check::Runs(codes) => codes,
            Check::Lists => &[],
        };
        let wrong: Vec<_> = errors
            .iter()
            .filter(|(code, _)| is_refusal(*code) || !tolerated.contains(code))
            .collect();
        return (!wrong.is_empty()).then(|| format!("{what}: should run, got {wrong:?}"));
    }
    let expected = refusal_code(row);
    match errors.iter().find(|(code, _)| *code == expected) {
        None => Some(format!(
            "{what}: should be refused with {expected:?}, got {errors:?}"
        )),
        // The refusal names the principal (the node-only ones name what is missing their own way).
        Some((_, message))
            if expected == ErrorCode::AUTHORIZATION_FAILED
                && !message.contains(&format!("User:{who}")) =>
        {
            Some(format!("{what}: the refusal does not say who: {message}"))
        }
        Some(_) => None,
    }
}

#[test]
fn the_table_covers_every_operation() {
    let covered: std::collections::BTreeSet<u8> = rows().iter().map(|r| r.op.code()).collect();
    for &op in OpCode::ALL {
        // Handshake and Authenticate are open to every connection (the authentication tests
        // cover them).
        if matches!(op, OpCode::Handshake | OpCode::Authenticate) {
            continue;
        }
        assert!(covered.contains(&op.code()), "{} has no row", op.name());
    }
    let keys: Vec<&str> = rows().iter().map(|r| r.key).collect();
    for a in &keys {
        for b in &keys {
            assert!(
                a == b || !b.starts_with(&format!("{a}-")),
                "{a} is a prefix of {b}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_is_allowed_exactly_to_principals_with_its_permission() {
    let tmp = tempfile::tempdir().unwrap();
    // TLS and SCRAM on, as in production.
    let ca = Ca::new(tmp.path(), "ca");
    let password_file = tmp.path().join("admin.password");
    std::fs::write(&password_file, ADMIN_PASSWORD).unwrap();
    let mut flags = node_flags(&ca.cert, &ca.leaf("server-1"), "none");
    flags.extend(
        [
            "--auth",
            "scram",
            "--super-users",
            "User:admin",
            "--admin-password-file",
        ]
        .map(String::from),
    );
    flags.push(password_file.to_str().unwrap().into());
    let server = Node::server(&tmp.path().join("data"), &flags);
    let to = Endpoint {
        addr: server.addr.clone(),
        tls: Some(ClientTls::load(&ca.cert, None, None).expect("the CA loads")),
    };
    let admin = admin_login(&to).await;
    let rows = rows();

    // Users, resources and every row's ACLs (in one request: one image change).
    let mut users = vec![];
    for who in ALLOWED.iter().chain(REFUSED.iter()) {
        let password = format!("{who}-password");
        let credential =
            StoredCredential::derive(ScramMechanism::Sha256, &password, SCRAM_ITERATIONS_MIN);
        let put = ask(
            &admin,
            m::PutUserRequest {
                name: who.to_string(),
                credentials: vec![credential.to_wire()],
                mode: m::PutUserMode::Create as i32,
            },
        )
        .await;
        assert!(put.is_ok(), "creating user {who}: {put:?}");
        users.push((*who, password));
    }
    let created = ask(
        &admin,
        m::CreateTopicRequest {
            name: "secret".into(),
            config: Some(m::TopicConfig {
                partitions: 1,
                replication_factor: 1,
                ..Default::default()
            }),
            validate_only: false,
        },
    )
    .await;
    assert!(created.is_ok(), "{created:?}");
    for row in rows.iter().filter(|r| r.setup) {
        set_up(&admin, row).await;
    }
    let acls: Vec<m::Acl> = rows.iter().flat_map(row_acls).collect();
    let granted = ask(&admin, m::CreateAclsRequest { acls }).await;
    assert!(granted.is_ok(), "{granted:?}");

    let mut connections = vec![];
    for (who, password) in &users {
        connections.push((*who, login(&to, who, password).await));
    }
    // The ACLs reach the broker's image: `lit` may describe its topic.
    let lit = &connections[0].1;
    let probe = target(
        rows.iter().find(|r| r.key == "describetopic").unwrap(),
        "lit",
    );
    let deadline = std::time::Instant::now() + WAIT;
    while let Err(refused) = ask(
        lit,
        m::DescribeTopicRequest {
            name: probe.clone(),
        },
    )
    .await
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the ACLs never applied: {refused:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let mut failures = vec![];
    for row in &rows {
        // The refused first: the allowed ones' calls change things (delete, create).
        for (who, c) in connections.iter().filter(|(w, _)| REFUSED.contains(w)) {
            failures.extend(check(row, c, who, false).await);
        }
        let node_only = row.resource == Resource::Node;
        for (who, c) in connections.iter().filter(|(w, _)| ALLOWED.contains(w)) {
            failures.extend(check(row, c, who, !node_only).await);
        }
        failures.extend(check(row, &admin, "admin", !node_only).await);
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );

    // A group's description shows only the topics the principal may DESCRIBE: `lit` may
    // describe group describegroup-lit and topic describetopic-lit, not topic
    // describegroup-lit, so of the group's two offsets it sees one; the super user both.
    let mut second = commit("describegroup-lit");
    second.offsets[0].topic = "describetopic-lit".into();
    let committed = ask(&admin, second).await;
    assert!(committed.is_ok(), "{committed:?}");
    let describe = || m::DescribeGroupRequest {
        group_id: "describegroup-lit".into(),
    };
    let topics = |d: m::DescribeGroupResponse| -> Vec<String> {
        d.offsets.into_iter().map(|o| o.topic).collect()
    };
    let seen = ask(&connections[0].1, describe()).await.expect("described");
    assert_eq!(topics(seen), ["describetopic-lit"]);
    let everything = ask(&admin, describe()).await.expect("described");
    assert_eq!(
        topics(everything),
        ["describegroup-lit", "describetopic-lit"]
    );

    // One request over two topics: the topic without the permission is refused in its own
    // entry, the other is served.
    let lit = &connections[0].1;
    let produce = m::ProduceRequest {
        acks: 1,
        timeout_ms: 5000,
        partitions: ["produce-lit", "fetch-lit"]
            .map(|topic| m::ProducePartition {
                topic: topic.into(),
                partition: 0,
                records: batch(),
            })
            .to_vec(),
        transactional_id: String::new(),
    };
    let answer = ask(lit, produce).await.expect("a produce answer");
    let by_topic = |t: &str| answer.partitions.iter().find(|p| p.topic == t).cloned();
    let written = by_topic("produce-lit").expect("produce-lit answered");
    assert!(
        written.error.is_none() && written.base_offset >= 0,
        "{written:?}"
    );
    let refused = by_topic("fetch-lit").expect("fetch-lit answered");
    let code = refused.error.as_ref().map(|e| e.error_code());
    assert_eq!(code, Some(ErrorCode::AUTHORIZATION_FAILED), "{refused:?}");
    assert_eq!(refused.base_offset, -1);
    let mut commit = commit("offsetcommit-lit");
    commit.offsets.push(m::CommittedOffset {
        topic: "produce-lit".into(),
        ..commit.offsets[0].clone()
    });
    let answer = ask(lit, commit).await.expect("a commit answer");
    let codes: Vec<_> = answer
        .offsets
        .iter()
        .map(|o| (o.topic.as_str(), o.error.as_ref().map(|e| e.error_code())))
        .collect();
    assert!(codes.contains(&("offsetcommit-lit", None)), "{codes:?}");
    let refused = ("produce-lit", Some(ErrorCode::AUTHORIZATION_FAILED));
    assert!(codes.contains(&refused), "{codes:?}");
}

/// A MetaServer node authorizes in its own dispatcher: operations it serves are refused to a
/// user without the permission, allowed with it, and node-only ones refused to every user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metaserver_node_authorizes_what_it_serves() {
    let tmp = tempfile::tempdir().unwrap();
    let secret = tmp.path().join("cluster.secret");
    tinymq_auth::ClusterSecret::generate_into(&secret).unwrap();
    let password_file = tmp.path().join("admin.password");
    std::fs::write(&password_file, ADMIN_PASSWORD).unwrap();
    let addrs = vec![format!("127.0.0.1:{}", common::free_port())];
    let flags = [
        "--auth",
        "scram",
        "--cluster-secret-file",
        secret.to_str().unwrap(),
        "--admin-password-file",
        password_file.to_str().unwrap(),
    ];
    let _node = common::start_with(1, &addrs, tmp.path(), &flags);
    let to = Endpoint {
        addr: addrs[0].clone(),
        tls: None,
    };
    let admin = admin_login(&to).await;
    for user in ["alice", "bob"] {
        let put = ask(&admin, put_user(user)).await;
        assert!(put.is_ok(), "{put:?}");
    }
    let grant = acl(
        "alice",
        m::ResourceType::Cluster,
        "cluster",
        false,
        DESCRIBE,
    );
    let granted = ask(&admin, m::CreateAclsRequest { acls: vec![grant] }).await;
    assert!(granted.is_ok(), "{granted:?}");
    let alice = login(&to, "alice", "pw-of-a-user").await;
    let bob = login(&to, "bob", "pw-of-a-user").await;

    // A MetaServer node applies its own image: the ACL holds once the write has answered.
    assert!(ask(&alice, m::ListUsersRequest {}).await.is_ok());
    let refused = ask(&bob, m::ListUsersRequest {}).await.unwrap_err();
    assert_eq!(refused.0, ErrorCode::AUTHORIZATION_FAILED);
    assert!(refused.1.contains("User:bob"), "{}", refused.1);
    assert!(refused.1.contains("DESCRIBE"), "{}", refused.1);
    let create = m::CreateTopicRequest {
        name: "orders".into(),
        ..Default::default()
    };
    for c in [&alice, &bob] {
        let refused = ask(c, create.clone()).await.unwrap_err();
        assert_eq!(refused.0, ErrorCode::AUTHORIZATION_FAILED, "{}", refused.1);
        assert!(refused.1.contains("CREATE"), "{}", refused.1);
    }
    let refused = ask(
        &bob,
        m::CreateAclsRequest {
            acls: vec![nobody_acl()],
        },
    )
    .await
    .unwrap_err();
    assert_eq!(refused.0, ErrorCode::AUTHORIZATION_FAILED);
    let refused = ask(&bob, m::MetaReadRequest::default()).await.unwrap_err();
    assert_eq!(refused.0, ErrorCode::AUTHORIZATION_FAILED);
    assert!(ask(&admin, m::MetaReadRequest::default()).await.is_ok());
    for c in [&admin, &alice] {
        let refused = ask(c, m::MetaWriteRequest::default()).await.unwrap_err();
        assert_eq!(refused.0, ErrorCode::CLUSTER_AUTHORIZATION_FAILED);
    }
    // ListTopics answers (no topics without brokers) are filtered, not refused.
    let listed = ask(&bob, m::ListTopicsRequest {}).await;
    assert!(listed.is_ok_and(|l| l.names.is_empty()));
}
