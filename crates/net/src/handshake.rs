//! The handshake and what it decides: the protocol version, the cluster-id check, and the
//! peer's role, which [`authorize`] uses to keep node-to-node operations between nodes.

use std::net::SocketAddr;

use bytes::Bytes;
use prost::Message;
use tinymq_protocol::{
    messages as m, ErrorCode, Frame, OpCode, PROTOCOL_VERSION_MAX, PROTOCOL_VERSION_MIN,
};

use crate::{encode_response, error_frame, Identity, ListenerLimits, NodeRole, Peer};

/// Answers a frame received before the handshake succeeded: the response to send, and the
/// peer when the handshake succeeded.
pub(crate) fn answer(
    frame: Frame,
    addr: SocketAddr,
    identity: Identity,
    limits: &ListenerLimits,
) -> (Bytes, Option<Peer>) {
    let (op, id) = (frame.header.op_code(), frame.header.message_id);
    if frame.header.is_response() || OpCode::from_code(op) != Some(OpCode::Handshake) {
        let refusal = "send a Handshake request first".to_string();
        return (
            error_frame(op, id, ErrorCode::HANDSHAKE_REQUIRED, refusal),
            None,
        );
    }
    let request = match m::HandshakeRequest::decode(frame.body) {
        Ok(r) => r,
        Err(e) => {
            let why = format!("handshake body: {e}");
            return (error_frame(op, id, ErrorCode::MALFORMED_BODY, why), None);
        }
    };
    let version = request.max_version.min(PROTOCOL_VERSION_MAX);
    let role = NodeRole::try_from(request.role);
    let error = if request.min_version > PROTOCOL_VERSION_MAX
        || version < PROTOCOL_VERSION_MIN.max(request.min_version)
    {
        Some(ErrorCode::UNSUPPORTED_VERSION.with_message(format!(
            "client speaks {}..={}, server {PROTOCOL_VERSION_MIN}..={PROTOCOL_VERSION_MAX}",
            request.min_version, request.max_version
        )))
    } else if !request.cluster_id.is_empty() && request.cluster_id != identity.cluster_id {
        let this = if identity.cluster_id.is_empty() {
            "this node's cluster has no id yet".to_string()
        } else {
            format!("this is {}", identity.cluster_id)
        };
        Some(ErrorCode::CLUSTER_ID_MISMATCH.with_message(format!(
            "client expects cluster {}, {this}",
            request.cluster_id
        )))
    } else if role.is_err() {
        Some(ErrorCode::INVALID_REQUEST.with_message(format!(
            "unknown node role {} (0 client, 1 broker, 2 meta)",
            request.role
        )))
    } else {
        None
    };
    let success = error.is_none();
    let response = m::HandshakeResponse {
        error,
        version,
        cluster_id: identity.cluster_id,
        node_id: identity.node_id,
        frame_bytes_max: limits.frame_bytes_max,
        // Checked by `ListenerLimits::check` to fit.
        requests_in_flight_max: u32::try_from(limits.requests_in_flight_max).unwrap_or(u32::MAX),
        auth_required: false,
        auth_mechanisms: vec![],
    };
    let peer = success.then(|| Peer {
        addr,
        role: role.unwrap_or(NodeRole::Client),
        node_id: request.node_id,
        client_id: request.client_id,
        tls_principal: None,
        large_response_gate: crate::LargeResponseGate::new(),
    });
    (encode_response(op, id, &response), peer)
}

/// Whether a connection of `role` may send operation `op`: Raft RPCs only between MetaServer
/// nodes, metadata writes and broker heartbeats only from brokers and MetaServer nodes,
/// everything else from anyone. The error says why when it may not.
pub fn authorize(op: OpCode, role: NodeRole) -> Result<(), m::Error> {
    let allowed: &[NodeRole] = match op {
        OpCode::RaftRpc => &[NodeRole::Meta],
        OpCode::MetaWrite | OpCode::BrokerHeartbeat => &[NodeRole::Broker, NodeRole::Meta],
        _ => return Ok(()),
    };
    if allowed.contains(&role) {
        return Ok(());
    }
    let who = allowed
        .iter()
        .map(|r| role_name(*r))
        .collect::<Vec<_>>()
        .join(" or ");
    Err(ErrorCode::CLUSTER_AUTHORIZATION_FAILED.with_message(format!(
        "{} is accepted only from connections that identified as {who} in the handshake; this one is {}",
        op.name(),
        role_name(role)
    )))
}

fn role_name(role: NodeRole) -> &'static str {
    match role {
        NodeRole::Client => "CLIENT",
        NodeRole::Broker => "BROKER",
        NodeRole::Meta => "META",
    }
}

/// The operation of a request a handshaken connection may send, or the refusal of one it may
/// never send (an unknown operation, a response frame, a second handshake).
pub(crate) fn screen(frame: &Frame) -> Result<OpCode, Bytes> {
    let (op_code, id) = (frame.header.op_code(), frame.header.message_id);
    let Some(op) = OpCode::from_code(op_code).filter(|_| !frame.header.is_response()) else {
        let why = format!("unknown operation {op_code}");
        return Err(error_frame(op_code, id, ErrorCode::UNKNOWN_OPERATION, why));
    };
    if op == OpCode::Handshake {
        let why = "already handshaken".to_string();
        return Err(error_frame(op_code, id, ErrorCode::INVALID_REQUEST, why));
    }
    Ok(op)
}
