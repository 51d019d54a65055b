//! The server side of a native-protocol connection, one front end for brokers and MetaServer
//! nodes: the accept loop with `connections_max` (a connection over it gets a
//! `LIMIT_EXCEEDED` frame and is closed), frame decoding with the pre-handshake limit, the
//! handshake (version range, cluster id, the peer's role), TLS (or its refusal to peers of the
//! wrong kind), authentication (only Authenticate is served until it succeeds, see `auth`), the
//! handshake deadline and idle timeout, `requests_in_flight_max` permits (backpressure), a
//! writer task, error frames for
//! bad input, the node-only operations, and graceful shutdown.
//!
//! A server plugs in a [`Service`]: the front end hands it each request that passed those
//! checks and writes whatever response it produces.

mod auth;
#[cfg(test)]
mod auth_tests;
mod connection;
mod handshake;
mod listener;
mod security;
mod stats;
#[cfg(test)]
mod tests;
mod transport;
mod writer;
#[cfg(test)]
mod writer_tests;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use prost::Message;
use tinymq_protocol::frame::{FrameHeader, FRAME_BODY_BYTES_MAX_PRE_HANDSHAKE};
use tinymq_protocol::{messages as m, ErrorCode, Frame};

pub use auth::{claimed_user, failure_delay, log_safe, AUTH_FAILURE_DELAY, AUTH_FAILURE_DELAY_MAX};
pub use handshake::authorize;
pub use listener::{accept_connections, serve, serve_counted, serve_secure, Accepting};
pub use security::{AuthMode, ClientAuth, ListenerSecurity, ServerTls, AUTH_FAILURES_MAX_DEFAULT};
pub use stats::{ConnectionStats, OpSnapshot, RequestStats};
pub use tinymq_protocol::messages::NodeRole;
pub use transport::PLAIN_ON_TLS_PORT;
pub use writer::in_page_cache;

/// Named limits of one listener: everything a peer can make the server hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerLimits {
    /// Open connections at most; one more gets a `LIMIT_EXCEEDED` frame and is closed.
    pub connections_max: usize,
    /// Largest frame body accepted after the handshake (64 KiB before it).
    pub frame_bytes_max: u32,
    /// Requests of one connection processed at once; the connection is not read further
    /// until one finishes (backpressure). Bounds per-connection memory at about
    /// `requests_in_flight_max × frame_bytes_max` for requests, plus their responses (a
    /// fetch response holds up to the broker's `fetch_bytes_max` and one more batch).
    pub requests_in_flight_max: usize,
    /// A connection that has not completed its handshake by then is closed.
    pub handshake_timeout: Duration,
    /// A connection with no request in flight and no frame received for this long is closed;
    /// so is one whose peer reads none of its responses for this long.
    pub idle_timeout: Duration,
    /// How long shutdown waits for requests in flight before closing connections anyway.
    pub shutdown_grace: Duration,
}

impl Default for ListenerLimits {
    /// The broker's defaults.
    fn default() -> ListenerLimits {
        ListenerLimits {
            connections_max: 10_000,
            frame_bytes_max: tinymq_protocol::frame::FRAME_BODY_BYTES_MAX_DEFAULT,
            requests_in_flight_max: 32,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(600),
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

impl ListenerLimits {
    /// Why these limits cannot be served, if they cannot.
    pub fn check(&self) -> Result<(), String> {
        let permits_max = tokio::sync::Semaphore::MAX_PERMITS;
        if self.connections_max == 0 || self.connections_max > permits_max {
            return Err(format!("connections_max must be in 1..={permits_max}"));
        }
        if self.requests_in_flight_max == 0
            || self.requests_in_flight_max > permits_max
            || u32::try_from(self.requests_in_flight_max).is_err()
        {
            return Err(format!(
                "requests_in_flight_max must be in 1..={}",
                permits_max.min(u32::MAX as usize)
            ));
        }
        if self.frame_bytes_max < FRAME_BODY_BYTES_MAX_PRE_HANDSHAKE {
            return Err(format!(
                "frame_bytes_max must be at least {FRAME_BODY_BYTES_MAX_PRE_HANDSHAKE}"
            ));
        }
        if self.handshake_timeout.is_zero() || self.idle_timeout.is_zero() {
            return Err("handshake_timeout_ms and idle_timeout_ms must be > 0".into());
        }
        Ok(())
    }
}

/// What a server tells peers about itself in the handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// Empty while the cluster has no id yet (a new MetaServer group names itself shortly
    /// after its first election).
    pub cluster_id: String,
    pub node_id: u32,
}

/// The other end of a connection, as it identified itself in a successful handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub addr: SocketAddr,
    /// The node role the connection may act in. Where nodes authenticate (authentication on,
    /// or a cluster secret set) it is `Client` until the peer proved a node identity, then
    /// that node's; elsewhere it is what the handshake claimed.
    pub role: NodeRole,
    /// The node id of a broker or MetaServer peer (0 for clients), proven like `role`.
    pub node_id: u64,
    /// Whom the connection acts as: `User:ANONYMOUS` until it authenticates (and always with
    /// `--auth none`), then the SCRAM user, the node, or the certificate's subject.
    pub principal: tinymq_auth::Principal,
    pub client_id: String,
    /// The subject CN of the client certificate the TLS handshake verified (mutual TLS);
    /// `None` on plain connections and TLS ones without a client certificate.
    pub tls_principal: Option<String>,
    /// One permit per connection for a service's large responses (the broker's fetches): a
    /// service takes it before building one and holds it (in [`Response::held`]) until the
    /// response is written, so a peer that reads slowly holds up only its own.
    pub large_response_gate: LargeResponseGate,
    /// The counts of the listener that carried the request when it is not the service's own
    /// port (the Kafka listener, which hands its requests to the broker in process): the
    /// service counts errors inside a response (a partition's) there, so each listener's
    /// metrics hold its own requests' errors. `None`: the service's own port.
    pub listener_stats: Option<ListenerStats>,
    /// A value the service may keep for this connection (shared by every request's copy of
    /// the peer) and read back in [`Service::peer_left`]: the MetaServer keeps the token of
    /// the last broker heartbeat the connection carried. 0 until set.
    pub connection_tag: ConnectionTag,
}

/// See [`Peer::connection_tag`].
#[derive(Debug, Clone, Default)]
pub struct ConnectionTag(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl ConnectionTag {
    pub fn set(&self, value: u64) {
        self.0.store(value, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn get(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// The same connection's tag (as [`LargeResponseGate`]: one per connection).
impl PartialEq for ConnectionTag {
    fn eq(&self, other: &ConnectionTag) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ConnectionTag {}

/// See [`Peer::listener_stats`]; equal when they are the same listener's.
#[derive(Debug, Clone)]
pub struct ListenerStats(pub std::sync::Arc<ConnectionStats>);

impl PartialEq for ListenerStats {
    fn eq(&self, other: &ListenerStats) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ListenerStats {}

/// See [`Peer::large_response_gate`].
#[derive(Debug, Clone)]
pub struct LargeResponseGate(pub std::sync::Arc<tokio::sync::Semaphore>);

impl LargeResponseGate {
    pub fn new() -> LargeResponseGate {
        LargeResponseGate(std::sync::Arc::new(tokio::sync::Semaphore::new(1)))
    }
}

impl Default for LargeResponseGate {
    fn default() -> LargeResponseGate {
        LargeResponseGate::new()
    }
}

impl PartialEq for LargeResponseGate {
    fn eq(&self, other: &LargeResponseGate) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for LargeResponseGate {}

/// An encoded response frame, and whatever must stay held until it has been written to the
/// peer (e.g. the broker's reservation of fetch memory): a response that waits for a slow
/// reader keeps counting against the limits it was made under.
///
/// The frame is a sequence of parts written back to back, without being joined: buffers
/// (written with vectored I/O, together with the other responses queued at the same time) and
/// ranges of open files (sent from the page cache with `sendfile`), so a fetch response
/// carries its records without copying them into the frame.
pub struct Response {
    pub parts: Vec<Part>,
    pub held: Option<Box<dyn std::any::Any + Send>>,
}

impl Response {
    /// The frame's length in bytes.
    pub fn len(&self) -> u64 {
        self.parts.iter().map(Part::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl From<Bytes> for Response {
    fn from(frame: Bytes) -> Response {
        Response {
            parts: vec![Part::Bytes(frame)],
            held: None,
        }
    }
}

/// One piece of a response frame.
pub enum Part {
    Bytes(Bytes),
    File(FileRange),
}

impl Part {
    pub fn len(&self) -> u64 {
        match self {
            Part::Bytes(b) => b.len() as u64,
            Part::File(range) => range.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `len` bytes of a file from `position`, to be sent as they are.
#[derive(Clone)]
pub struct FileRange {
    pub source: std::sync::Arc<dyn FileSource>,
    pub position: u64,
    pub len: u64,
}

/// An open file whose bytes a response sends, and the check that they are still the bytes
/// that were meant. Holding one keeps the file open, so a file deleted (by retention) before
/// its range is sent is still read whole.
pub trait FileSource: Send + Sync {
    /// The descriptor to `sendfile` from; `None` for files that have none (in-memory test
    /// storage), which are read with [`FileSource::read_at`] and written instead.
    fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>>;
    /// Reads up to `buf.len()` bytes at `position` (0 at the end of the file).
    fn read_at(&self, buf: &mut [u8], position: u64) -> std::io::Result<usize>;
    /// Whether every byte read from the file so far was the intended one (e.g. no truncation
    /// has rewritten the range since it was chosen). Asked after the frame's file ranges have
    /// been read and before its last byte is written: a frame whose bytes changed is never
    /// completed (the connection is closed instead).
    fn unchanged(&self) -> bool;
}

/// The rest of a request's work, run concurrently with the connection's other requests; it
/// yields the response, or `None` when none is due (produce with acks = 0).
pub type ResponseFuture = Pin<Box<dyn Future<Output = Option<Response>> + Send + 'static>>;

/// A server behind the front end.
pub trait Service: Send + Sync + 'static {
    /// The cluster id and node id for the handshake (asked at every handshake).
    fn identity(&self) -> Identity;

    /// Takes one request from a handshaken connection. The front end has already refused
    /// unknown operations, response frames, a second handshake and node-only operations from
    /// the wrong role; `frame` is a known request the peer may send.
    ///
    /// The returned future is awaited **before the next frame of the connection is read**, so
    /// work done there happens in arrival order (the broker writes produce requests there);
    /// the [`ResponseFuture`] it yields runs concurrently, holding one of the connection's
    /// `requests_in_flight_max` permits until its response has been written to the peer (so
    /// responses a peer does not read count against the same bound as requests).
    fn admit(&self, frame: Frame, peer: &Peer) -> impl Future<Output = ResponseFuture> + Send;

    /// The stored SCRAM verifier of `user` for Authenticate (from the server's current
    /// metadata); `None` for an unknown user. Node users are answered from the cluster secret
    /// by the front end and never asked here.
    fn credential(
        &self,
        user: &str,
        mechanism: tinymq_auth::ScramMechanism,
    ) -> Option<tinymq_auth::StoredCredential> {
        let _ = (user, mechanism);
        None
    }

    /// Called once when a handshaken connection was closed **from the peer's side**: its end
    /// of stream, or a reset, read by this server (a killed process's sockets close so).
    /// Never for a close this server chose (shutdown, idle timeout, a protocol error). `served`
    /// holds the operations the connection carried. The MetaServer ends a broker's session
    /// early on it.
    fn peer_left(&self, peer: &Peer, served: OpsServed) {
        let _ = (peer, served);
    }
}

/// The operation codes one connection carried (requests admitted, refused or not).
#[derive(Debug, Default)]
pub struct OpsServed {
    /// Bit `op` set for each operation code `op` seen (codes are below 128).
    bits: [std::sync::atomic::AtomicU64; 2],
}

impl OpsServed {
    pub fn insert(&self, op_code: u8) {
        // Codes from 128 are no operation; folding them onto a real one would make a
        // connection look as if it had carried that operation.
        if op_code >= 128 {
            return;
        }
        let (word, bit) = (usize::from(op_code / 64), op_code % 64);
        self.bits[word].fetch_or(1 << bit, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn contains(&self, op: tinymq_protocol::OpCode) -> bool {
        let code = op.code();
        if code >= 128 {
            return false;
        }
        let (word, bit) = (usize::from(code / 64), code % 64);
        self.bits[word].load(std::sync::atomic::Ordering::Relaxed) & (1 << bit) != 0
    }
}

/// A response that is already known.
pub fn ready(response: Option<Bytes>) -> ResponseFuture {
    Box::pin(std::future::ready(response.map(Response::from)))
}

/// Encodes a response frame: header and protobuf body in one buffer.
pub fn encode_response(op_code: u8, message_id: u32, body: &impl Message) -> Bytes {
    let len = body.encoded_len();
    let mut out = BytesMut::with_capacity(12 + len);
    // A body is built by this process from bounded parts; its length fits a frame's u32.
    let body_len = u32::try_from(len).unwrap_or(u32::MAX);
    FrameHeader::response(op_code & 0x7F, message_id, body_len).encode(&mut out);
    body.encode(&mut out).expect("BytesMut grows");
    out.freeze()
}

/// A response frame carrying only an error (any response type decodes from it: field 1).
pub fn error_frame(op_code: u8, message_id: u32, code: ErrorCode, message: String) -> Bytes {
    let body = m::ErrorResponse {
        error: Some(code.with_message(message)),
    };
    encode_response(op_code, message_id, &body)
}

/// Decodes a request body, or the `MALFORMED_BODY` error to answer with.
pub fn decode_body<T: Message + Default>(body: Bytes) -> Result<T, m::Error> {
    T::decode(body)
        .map_err(|e| ErrorCode::MALFORMED_BODY.with_message(format!("cannot decode body: {e}")))
}
