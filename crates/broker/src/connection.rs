//! The broker behind the shared connection front end ([`tinymq_net`]): admission of each
//! request (produce is written here, in arrival order), its authorization (every operation is
//! checked here, through [`crate::authorize`], before its handler runs) and dispatch to its
//! handler.

use std::sync::Arc;

use bytes::Bytes;
use tinymq_net::{
    decode_body as decode, encode_response, error_frame, Identity, Peer, Response, ResponseFuture,
};
use tinymq_protocol::{messages as m, ErrorCode, Frame, OpCode};

use tinymq_meta::link::MetaLink;

use crate::state::BrokerState;
use crate::{authorize, group_handlers, handlers, security_admin, topic_handlers, txn_handlers};

/// The front end's view of a broker: every native request goes through
/// [`tinymq_net::Service::admit`] here, whichever listener it came from (the Kafka listener
/// translates its requests into native ones and calls the same `admit`, so both protocols
/// share admission order, authorization, quotas and handlers).
#[derive(Clone)]
pub struct BrokerFront(pub Arc<BrokerState>);

impl tinymq_net::Service for BrokerFront {
    fn identity(&self) -> Identity {
        Identity {
            cluster_id: self.0.cluster.cluster_id(),
            node_id: self.0.node_id(),
        }
    }

    /// From the image as this broker last saw it: a user created moments ago may need a
    /// retry, a deleted one fails at once only once the broker has seen the deletion.
    fn credential(
        &self,
        user: &str,
        mechanism: tinymq_auth::ScramMechanism,
    ) -> Option<tinymq_auth::StoredCredential> {
        use tinymq_auth::CredentialLookup;
        self.0.cluster.image().credential(user, mechanism)
    }

    /// The standalone server is a MetaServer node too: a broker that joined it and died ends
    /// its session early.
    fn peer_left(&self, peer: &Peer, served: tinymq_net::OpsServed) {
        if let MetaLink::Local(service) = &self.0.cluster.link {
            tinymq_meta::server::broker_left(service, peer, &served);
        }
    }

    async fn admit(&self, frame: Frame, peer: &Peer) -> ResponseFuture {
        let state = self.0.clone();
        // A principal over its quota waits here, so the connection is read no further.
        let throttle = crate::quota::admit(&state.quotas, peer, &frame).await;
        if frame.header.op_code() == OpCode::Fetch.code() {
            return Box::pin(fetch(state, frame, peer.clone(), throttle));
        }
        if frame.header.op_code() != OpCode::Produce.code() {
            let peer = peer.clone();
            return Box::pin(async move { dispatch(state, frame, peer).await.map(Into::into) });
        }
        // Written before the front end reads the next frame: a connection's produce requests
        // are written in the order received. The wait for the flush policy runs concurrently.
        let (op, id) = (frame.header.op_code(), frame.header.message_id);
        let (written, refused) = match decode::<m::ProduceRequest>(frame.body) {
            Ok(mut request) => {
                let access = authorize::access(&state);
                let refused = authorize::produce(&access, &peer.principal, &mut request);
                let stats = listener_stats(&state, peer);
                (
                    handlers::produce_write(state, request, stats).await,
                    refused,
                )
            }
            Err(error) => {
                let response = m::ProduceResponse {
                    error: Some(error),
                    partitions: vec![],
                };
                (Err(response), vec![])
            }
        };
        Box::pin(async move {
            // acks = 0 still waits for the flush policy (which raises the high watermark); it
            // only sends no response.
            let response = match written {
                Ok(prepared) => {
                    let acks = prepared.acks();
                    let response = handlers::produce_finish(prepared).await;
                    (acks != 0).then_some(response)
                }
                Err(response) => Some(response),
            };
            response.map(|mut r| {
                if r.error.is_none() {
                    r.partitions.extend(refused);
                }
                encode_response(op, id, &r).into()
            })
        })
    }
}

/// A fetch. Each connection has one fetch response at a time that is not yet written to its
/// Where errors inside a response are counted: the stats of the listener that carried the
/// request (the Kafka port's), else the native port's.
fn listener_stats(state: &BrokerState, peer: &Peer) -> Arc<tinymq_net::ConnectionStats> {
    match &peer.listener_stats {
        Some(listener) => listener.0.clone(),
        None => state.connections.clone(),
    }
}

/// peer (the connection's large-response gate, held with the response), so a peer that reads
/// slowly delays only its own fetches and holds at most one response's memory; the broker's
/// fetch memory bounds the reads in progress across connections.
async fn fetch(
    state: Arc<BrokerState>,
    frame: Frame,
    peer: Peer,
    throttle: Option<crate::quota::Throttle>,
) -> Option<Response> {
    let (op, id) = (frame.header.op_code(), frame.header.message_id);
    let access = authorize::access(&state);
    let mut refused = vec![];
    let request = decode::<m::FetchRequest>(frame.body).and_then(|mut request| {
        if request.replica_id != 0 {
            crate::replica::serve::authorize(request.replica_id, &peer)?;
            access.check_node(&peer.principal)?;
        } else {
            refused = authorize::fetch(&access, &peer.principal, &mut request);
        }
        Ok(request)
    });
    let (mut answer, hold) = match request {
        // Every partition refused: answered now, not after the long poll.
        Ok(request) if request.partitions.is_empty() && !refused.is_empty() => {
            let answer = crate::service::fetch::FetchAnswer {
                error: None,
                partitions: vec![],
            };
            (answer, None)
        }
        Ok(request) => {
            let stats = listener_stats(&state, &peer);
            handlers::fetch(state, request, peer.large_response_gate.0, stats).await
        }
        Err(error) => {
            let answer = crate::service::fetch::FetchAnswer {
                error: Some(error),
                partitions: vec![],
            };
            (answer, None)
        }
    };
    if answer.error.is_none() {
        answer.partitions.extend(refused);
    }
    let parts = crate::fetch_frame::encode(op, id, answer.error, answer.partitions);
    let response = Response {
        parts,
        held: hold.map(|hold| {
            drop(hold.memory);
            Box::new(hold.turn) as Box<dyn std::any::Any + Send>
        }),
    };
    // Held back (its fetch memory already released) if the principal is over its fetch rate.
    if let Some(throttle) = throttle {
        crate::quota::hold_fetch(&throttle, response.len()).await;
    }
    Some(response)
}

/// Routes one request to its handler once authorized; returns the encoded response, or `None`
/// when none is due (produce with acks = 0).
async fn dispatch(state: Arc<BrokerState>, frame: Frame, peer: Peer) -> Option<Bytes> {
    let (op_code, id) = (frame.header.op_code(), frame.header.message_id);
    let Some(op) = OpCode::from_code(op_code) else {
        // The front end answers unknown operations; this is only for completeness.
        let why = format!("unknown operation {op_code}");
        return Some(error_frame(op_code, id, ErrorCode::UNKNOWN_OPERATION, why));
    };
    let access = authorize::access(&state);
    let principal = &peer.principal;
    // Every request is checked here (what it needs up front) before its handler runs; the
    // arms of multi-topic and list operations apply the per-topic part.
    macro_rules! handle {
        ($req:ty, |$r:ident| $body:expr) => {
            match decode::<$req>(frame.body).and_then(|r| {
                access.require_request(principal, &r, || state.cluster.image())?;
                Ok(r)
            }) {
                Ok($r) => {
                    let response = $body;
                    Some(encode_response(op_code, id, &response))
                }
                Err(e) => Some(encode_response(
                    op_code,
                    id,
                    &m::ErrorResponse { error: Some(e) },
                )),
            }
        };
    }
    match op {
        OpCode::Handshake => Some(error_frame(
            op_code,
            id,
            ErrorCode::INVALID_REQUEST,
            "already handshaken".into(),
        )),
        OpCode::Metadata => handle!(m::MetadataRequest, |r| {
            let all = r.topics.is_empty();
            let response = topic_handlers::metadata(&state, r);
            authorize::metadata(&access, principal, all, response)
        }),
        OpCode::CreateTopic => handle!(m::CreateTopicRequest, |r| topic_handlers::create_topic(
            state, r
        )
        .await),
        OpCode::DeleteTopic => handle!(m::DeleteTopicRequest, |r| topic_handlers::delete_topic(
            state, r
        )
        .await),
        OpCode::ListTopics => handle!(m::ListTopicsRequest, |_r| authorize::list_topics(
            &access,
            principal,
            topic_handlers::list_topics(&state)
        )),
        OpCode::DescribeTopic => {
            handle!(m::DescribeTopicRequest, |r| topic_handlers::describe_topic(
                &state, r
            ))
        }
        OpCode::AlterPartitions => handle!(m::AlterPartitionsRequest, |r| {
            topic_handlers::alter_partitions(state, r).await
        }),
        OpCode::AlterTopicConfig => handle!(m::AlterTopicConfigRequest, |r| {
            crate::alter_config::alter_topic_config(state, r).await
        }),
        OpCode::DecommissionBroker => handle!(m::DecommissionBrokerRequest, |r| {
            topic_handlers::decommission_broker(state, r).await
        }),
        OpCode::Rebalance => handle!(m::RebalanceRequest, |r| {
            topic_handlers::rebalance(state, r).await
        }),
        OpCode::DrainBroker => handle!(m::DrainBrokerRequest, |r| {
            topic_handlers::drain_broker(state, r).await
        }),
        // Admitted by `BrokerFront::admit`, which writes produce requests in the order received.
        OpCode::Produce | OpCode::Fetch => unreachable!("admit serves produce and fetch itself"),
        OpCode::FindCoordinator => handle!(m::FindCoordinatorRequest, |r| {
            group_handlers::find_coordinator(state, r).await
        }),
        OpCode::JoinGroup => handle!(m::JoinGroupRequest, |r| group_handlers::join(&state, r)),
        OpCode::Heartbeat => handle!(m::HeartbeatRequest, |r| group_handlers::heartbeat(
            &state, r
        )),
        OpCode::LeaveGroup => handle!(m::LeaveGroupRequest, |r| group_handlers::leave(&state, r)),
        OpCode::OffsetCommit => handle!(m::OffsetCommitRequest, |r| {
            let mut r = r;
            let refused = authorize::offset_commit(&access, principal, &mut r);
            let mut response = if r.offsets.is_empty() && !refused.is_empty() {
                m::OffsetCommitResponse::default()
            } else {
                group_handlers::commit(state.clone(), r).await
            };
            if response.error.is_none() {
                response.offsets.extend(refused);
            }
            response
        }),
        OpCode::OffsetFetch => handle!(m::OffsetFetchRequest, |r| {
            let all = r.partitions.is_empty();
            let response = group_handlers::fetch_offsets(&state, r);
            authorize::offset_fetch(&access, principal, all, response)
        }),
        OpCode::ListGroups => handle!(m::ListGroupsRequest, |_r| authorize::list_groups(
            &access,
            principal,
            group_handlers::list(state.clone()).await
        )),
        OpCode::DescribeGroup => handle!(m::DescribeGroupRequest, |r| authorize::describe_group(
            &access,
            principal,
            group_handlers::describe(&state, r)
        )),
        OpCode::DeleteGroup => handle!(m::DeleteGroupRequest, |r| {
            match authorize::delete_group(&access, principal, &r.group_id) {
                Ok(()) => {
                    // Offsets deleted one by one need READ on their topics too (Kafka's
                    // OffsetDelete); the refused ones are answered, not deleted.
                    let mut request = r;
                    let refused = authorize::delete_offsets(&access, principal, &mut request);
                    let mut response = if request.offsets.is_empty() && !refused.is_empty() {
                        m::DeleteGroupResponse::default()
                    } else {
                        group_handlers::delete(state, request).await
                    };
                    response.offsets.extend(refused);
                    response
                }
                Err(error) => m::DeleteGroupResponse {
                    error: Some(error),
                    offsets: Vec::new(),
                },
            }
        }),
        // The standalone server is also a single-node MetaServer: brokers may join it (the
        // front end has checked that node-only operations come from nodes).
        OpCode::RaftRpc | OpCode::MetaWrite | OpCode::MetaRead | OpCode::BrokerHeartbeat
            if matches!(state.cluster.link, MetaLink::Local(_)) =>
        {
            let MetaLink::Local(service) = &state.cluster.link else {
                unreachable!("matched above")
            };
            Some(tinymq_meta::server::handle(service, frame, &peer, &state.authorization).await)
        }
        OpCode::MetaRead => handle!(m::MetaReadRequest, |_r| {
            let mut answer = topic_handlers::meta_read(&state).await;
            if peer.role == m::NodeRole::Client {
                tinymq_meta::service::strip_credentials(&mut answer);
            }
            answer
        }),
        OpCode::RaftRpc | OpCode::MetaWrite | OpCode::BrokerHeartbeat => Some(error_frame(
            op_code,
            id,
            ErrorCode::UNKNOWN_OPERATION,
            format!(
                "{} is served by MetaServer nodes (and the standalone server), not by a cluster broker",
                op.name()
            ),
        )),
        OpCode::ListOffsets => handle!(m::ListOffsetsRequest, |r| {
            let response = handlers::list_offsets(state.clone(), r).await;
            authorize::list_offsets(&access, principal, response)
        }),
        OpCode::DeleteRecords => handle!(m::DeleteRecordsRequest, |r| {
            let mut request = r;
            let refused = authorize::delete_records(&access, principal, &mut request);
            let mut response =
                crate::service::delete_records::delete_records(state.clone(), request).await;
            response.partitions.extend(refused);
            response
        }),
        OpCode::InitProducerId => {
            handle!(m::InitProducerIdRequest, |r| handlers::init_producer_id(
                state, r
            )
            .await)
        }
        OpCode::AddPartitionsToTxn => handle!(m::AddPartitionsToTxnRequest, |r| {
            txn_handlers::add_partitions(&state, &access, principal, r).await
        }),
        OpCode::AddOffsetsToTxn => handle!(m::AddOffsetsToTxnRequest, |r| {
            txn_handlers::add_offsets(&state, r).await
        }),
        OpCode::EndTxn => handle!(m::EndTxnRequest, |r| txn_handlers::end_txn(&state, r).await),
        OpCode::TxnOffsetCommit => handle!(m::TxnOffsetCommitRequest, |r| {
            let mut r = r;
            let refused = authorize::txn_offset_commit(&access, principal, &mut r);
            let mut response = if r.offsets.is_empty() && !refused.is_empty() {
                m::TxnOffsetCommitResponse::default()
            } else {
                txn_handlers::txn_offset_commit(&state, r).await
            };
            if response.error.is_none() {
                response.offsets.extend(refused);
            }
            response
        }),
        OpCode::WriteTxnMarkers => handle!(m::WriteTxnMarkersRequest, |r| {
            txn_handlers::write_markers(&state, r).await
        }),
        OpCode::DescribeTransactions => handle!(m::DescribeTransactionsRequest, |r| {
            txn_handlers::describe(&state, &access, principal, r)
        }),
        OpCode::ListTransactions => handle!(m::ListTransactionsRequest, |r| {
            txn_handlers::list(&state, &access, principal, r)
        }),
        OpCode::DescribeProducers => handle!(m::DescribeProducersRequest, |r| {
            let response = txn_handlers::describe_producers(&state, r);
            authorize::describe_producers(&access, principal, response)
        }),
        OpCode::HalfSend => handle!(m::HalfSendRequest, |r| crate::half::ops::send(&state, r)
            .await),
        OpCode::HalfEnd => handle!(m::HalfEndRequest, |r| crate::half::ops::end(&state, r).await),
        OpCode::HalfCheckPoll => handle!(m::HalfCheckPollRequest, |r| {
            let may = |topic: &str| {
                access.allows(
                    principal,
                    tinymq_meta::authorize::Permission::topic(
                        topic,
                        tinymq_auth::AclOperation::Write,
                    ),
                )
            };
            crate::half::ops::check_poll(&state, r, may).await
        }),
        OpCode::HalfList => handle!(m::HalfListRequest, |r| {
            let may = |group: &str| {
                access.allows(
                    principal,
                    tinymq_meta::authorize::Permission::group(
                        group,
                        tinymq_auth::AclOperation::Describe,
                    ),
                )
            };
            crate::half::ops::list(&state, &r, may)
        }),
        OpCode::PutUser => handle!(m::PutUserRequest, |r| security_admin::put_user(state, r)
            .await),
        OpCode::DeleteUser => handle!(m::DeleteUserRequest, |r| {
            security_admin::delete_user(state, r).await
        }),
        OpCode::ListUsers => handle!(m::ListUsersRequest, |r| {
            security_admin::list_users(state, r).await
        }),
        OpCode::CreateAcls => handle!(m::CreateAclsRequest, |r| {
            security_admin::create_acls(state, r).await
        }),
        OpCode::DeleteAcls => handle!(m::DeleteAclsRequest, |r| {
            security_admin::delete_acls(state, r).await
        }),
        OpCode::ListAcls => handle!(m::ListAclsRequest, |r| security_admin::list_acls(&state, r)),
        OpCode::SetQuota => handle!(m::SetQuotaRequest, |r| security_admin::set_quota(state, r)
            .await),
        OpCode::ListQuotas => handle!(m::ListQuotasRequest, |r| security_admin::list_quotas(
            &state, r
        )),
        // The front end runs the login and refuses a second one (`screen`); as for Handshake,
        // this arm is only for completeness.
        OpCode::ShareFetch => handle!(m::ShareFetchRequest, |r| {
            crate::share::share_fetch(state, &access, principal, r).await
        }),
        OpCode::ShareAcknowledge => handle!(m::ShareAcknowledgeRequest, |r| {
            crate::share::share_acknowledge(state, &access, principal, r).await
        }),
        OpCode::DescribeShareGroup => handle!(m::DescribeShareGroupRequest, |r| {
            crate::share::describe_share_group(state, r).await
        }),
        OpCode::ProduceDelayed => handle!(m::ProduceDelayedRequest, |r| {
            crate::delay::produce_delayed(state, r).await
        }),
        OpCode::CreateRoute => handle!(m::CreateRouteRequest, |r| {
            crate::route::create_route(state, r).await
        }),
        OpCode::DeleteRoute => handle!(m::DeleteRouteRequest, |r| {
            crate::route::delete_route(state, r).await
        }),
        OpCode::ListRoutes => handle!(m::ListRoutesRequest, |r| {
            crate::route::list_routes(state, r).await
        }),
        OpCode::Authenticate => Some(error_frame(
            op_code,
            id,
            ErrorCode::INVALID_REQUEST,
            "already authenticated: a connection authenticates once".into(),
        )),
    }
}
