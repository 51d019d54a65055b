//! The handshake and what it decides: the protocol version, the cluster-id check, whether the
//! connection must authenticate, and the peer's role, which [`authorize`] uses to keep
//! node-to-node operations between nodes (where nodes authenticate, a claimed node role counts
//! only once proven: until then the peer is a client).

use std::net::SocketAddr;

use bytes::Bytes;
use prost::Message;
use tinymq_protocol::{
    messages as m, ErrorCode, Frame, OpCode, PROTOCOL_VERSION_MAX, PROTOCOL_VERSION_MIN,
};

use crate::{
    encode_response, error_frame, AuthMode, Identity, ListenerLimits, ListenerSecurity, NodeRole,
    Peer,
};

/// Answers a frame received before the handshake succeeded: the response to send, and the
/// peer when the handshake succeeded (with whether it must still authenticate).
/// `tls_principal` is the name a verified client certificate gave, if any.
pub(crate) fn answer(
    frame: Frame,
    addr: SocketAddr,
    identity: Identity,
    limits: &ListenerLimits,
    security: &ListenerSecurity,
    tls_principal: Option<&str>,
) -> (Bytes, Option<(Peer, bool)>) {
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
    let certified = match tls_principal {
        Some(name) if security.auth == AuthMode::Mtls => Some(certificate_principal(name)),
        _ => None,
    };
    let auth_required = security.auth != AuthMode::None && certified.is_none();
    let response = m::HandshakeResponse {
        error,
        version,
        cluster_id: identity.cluster_id,
        node_id: identity.node_id,
        frame_bytes_max: limits.frame_bytes_max,
        // Checked by `ListenerLimits::check` to fit.
        requests_in_flight_max: u32::try_from(limits.requests_in_flight_max).unwrap_or(u32::MAX),
        auth_required,
        auth_mechanisms: security
            .mechanisms()
            .iter()
            .map(|m| m.name().to_string())
            .collect(),
    };
    let claimed = (role.unwrap_or(NodeRole::Client), request.node_id);
    let (principal, (role, node_id)) = match certified {
        Some(certified) => certified,
        None if security.nodes_authenticate() => {
            (tinymq_auth::Principal::anonymous(), (NodeRole::Client, 0))
        }
        None => (tinymq_auth::Principal::anonymous(), claimed),
    };
    let peer = success.then(|| {
        let peer = Peer {
            addr,
            role,
            node_id,
            principal,
            client_id: request.client_id,
            tls_principal: tls_principal.map(str::to_string),
            large_response_gate: crate::LargeResponseGate::new(),
            listener_stats: None,
            connection_tag: Default::default(),
        };
        (peer, auth_required)
    });
    (encode_response(op, id, &response), peer)
}

/// The principal a verified client certificate names, with the node role and id it proves: a
/// certificate for a node user (`node:broker:3`) is that node's.
fn certificate_principal(name: &str) -> (tinymq_auth::Principal, (NodeRole, u64)) {
    use tinymq_auth::{NodeKind, Principal};
    match tinymq_auth::parse_node_user(name) {
        Some((NodeKind::Broker, id)) => (
            Principal::node(NodeKind::Broker, id),
            (NodeRole::Broker, id),
        ),
        Some((NodeKind::Meta, id)) => (Principal::node(NodeKind::Meta, id), (NodeRole::Meta, id)),
        None => (Principal::user(name), (NodeRole::Client, 0)),
    }
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
        "{} is accepted only from connections of {who} nodes (authenticated as such where nodes authenticate); this one acts as {}",
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
/// never send (an unknown operation, a response frame, a second handshake or login).
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
    if op == OpCode::Authenticate {
        let why = "already authenticated: a connection authenticates once".to_string();
        return Err(error_frame(op_code, id, ErrorCode::INVALID_REQUEST, why));
    }
    Ok(op)
}
