//! The broker behind the shared connection front end ([`tinymq_net`]): admission of each
//! request (produce is written here, in arrival order) and dispatch to its handler.

use std::sync::Arc;

use bytes::Bytes;
use tinymq_net::{
    decode_body as decode, encode_response, error_frame, Identity, Peer, Response, ResponseFuture,
};
use tinymq_protocol::{messages as m, ErrorCode, Frame, OpCode};

use tinymq_meta::link::MetaLink;

use crate::state::BrokerState;
use crate::{group_handlers, handlers, security_admin, topic_handlers};

/// The front end's view of a broker.
pub(crate) struct BrokerFront(pub Arc<BrokerState>);

impl tinymq_net::Service for BrokerFront {
    fn identity(&self) -> Identity {
        Identity {
            cluster_id: self.0.cluster.cluster_id(),
            node_id: self.0.node_id(),
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
            let node_id = peer.node_id;
            return Box::pin(async move { dispatch(state, frame, node_id).await.map(Into::into) });
        }
        // Written before the front end reads the next frame: a connection's produce requests
        // are written in the order received. The wait for the flush policy runs concurrently.
        let (op, id) = (frame.header.op_code(), frame.header.message_id);
        let written = match decode::<m::ProduceRequest>(frame.body) {
            Ok(request) => handlers::produce_write(state, request).await,
            Err(error) => Err(m::ProduceResponse {
                error: Some(error),
                partitions: vec![],
            }),
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
            response.map(|r| encode_response(op, id, &r).into())
        })
    }
}

/// A fetch. Each connection has one fetch response at a time that is not yet written to its
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
    let request = decode::<m::FetchRequest>(frame.body).and_then(|request| {
        if request.replica_id != 0 {
            crate::replica::serve::authorize(request.replica_id, &peer)?;
        }
        Ok(request)
    });
    let (answer, hold) = match request {
        Ok(request) => handlers::fetch(state, request, peer.large_response_gate.0).await,
        Err(error) => {
            let answer = handlers::FetchAnswer {
                error: Some(error),
                partitions: vec![],
            };
            (answer, None)
        }
    };
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

/// Routes one request to its handler; returns the encoded response, or `None` when none is due
/// (produce with acks = 0).
async fn dispatch(state: Arc<BrokerState>, frame: Frame, peer_node_id: u64) -> Option<Bytes> {
    let (op_code, id) = (frame.header.op_code(), frame.header.message_id);
    let Some(op) = OpCode::from_code(op_code) else {
        // The front end answers unknown operations; this is only for completeness.
        let why = format!("unknown operation {op_code}");
        return Some(error_frame(op_code, id, ErrorCode::UNKNOWN_OPERATION, why));
    };
    macro_rules! handle {
        ($req:ty, |$r:ident| $body:expr) => {
            match decode::<$req>(frame.body) {
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
        OpCode::Metadata => handle!(m::MetadataRequest, |r| topic_handlers::metadata(&state, r)),
        OpCode::CreateTopic => handle!(m::CreateTopicRequest, |r| topic_handlers::create_topic(
            state, r
        )
        .await),
        OpCode::DeleteTopic => handle!(m::DeleteTopicRequest, |r| topic_handlers::delete_topic(
            state, r
        )
        .await),
        OpCode::ListTopics => handle!(m::ListTopicsRequest, |_r| topic_handlers::list_topics(
            &state
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
        OpCode::OffsetCommit => {
            handle!(m::OffsetCommitRequest, |r| group_handlers::commit(state, r)
                .await)
        }
        OpCode::OffsetFetch => handle!(m::OffsetFetchRequest, |r| group_handlers::fetch_offsets(
            &state, r
        )),
        OpCode::ListGroups => handle!(m::ListGroupsRequest, |_r| group_handlers::list(&state)),
        OpCode::DescribeGroup => handle!(m::DescribeGroupRequest, |r| group_handlers::describe(
            &state, r
        )),
        OpCode::DeleteGroup => handle!(m::DeleteGroupRequest, |r| group_handlers::delete(state, r)
            .await),
        // The standalone server is also a single-node MetaServer: brokers may join it (the
        // front end has checked that node-only operations come from nodes).
        OpCode::RaftRpc | OpCode::MetaWrite | OpCode::MetaRead | OpCode::BrokerHeartbeat
            if matches!(state.cluster.link, MetaLink::Local(_)) =>
        {
            let MetaLink::Local(service) = &state.cluster.link else {
                unreachable!("matched above")
            };
            Some(tinymq_meta::server::handle(service, frame, peer_node_id).await)
        }
        OpCode::MetaRead => handle!(m::MetaReadRequest, |_r| topic_handlers::meta_read(&state)
            .await),
        OpCode::RaftRpc | OpCode::MetaWrite | OpCode::BrokerHeartbeat => Some(error_frame(
            op_code,
            id,
            ErrorCode::UNKNOWN_OPERATION,
            format!(
                "{} is served by MetaServer nodes (and the standalone server), not by a cluster broker",
                op.name()
            ),
        )),
        OpCode::ListOffsets => handle!(m::ListOffsetsRequest, |r| handlers::list_offsets(state, r)
            .await),
        OpCode::InitProducerId => {
            handle!(m::InitProducerIdRequest, |r| handlers::init_producer_id(
                state, r
            )
            .await)
        }
        OpCode::PutUser => handle!(m::PutUserRequest, |r| security_admin::put_user(state, r)
            .await),
        OpCode::DeleteUser => handle!(m::DeleteUserRequest, |r| {
            security_admin::delete_user(state, r).await
        }),
        OpCode::ListUsers => handle!(m::ListUsersRequest, |r| security_admin::list_users(
            &state, r
        )),
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
        // Issue 16 in progress: served once the security work lands.
        OpCode::Authenticate => Some(error_frame(
            op_code,
            id,
            ErrorCode::UNKNOWN_OPERATION,
            format!("{} is not served yet", op.name()),
        )),
    }
}
