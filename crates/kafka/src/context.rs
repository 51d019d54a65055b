//! What a Kafka request's handler works with: the connection's native identity ([`Peer`]),
//! the broker's native service, and the listener's shared state. Handlers translate a Kafka
//! request into native requests and send them through [`Ctx::admit`] / [`Ctx::call`], the same
//! path a native connection's frames take, so both protocols share admission order,
//! authorization, quotas and every handler.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::ResponseKind;
use prost::Message;
use tinymq_broker::state::BrokerState;
use tinymq_broker::BrokerFront;
use tinymq_net::{Part, Peer, Response, ResponseFuture, Service};
use tinymq_protocol::frame::{FrameHeader, FRAME_HEADER_BYTES};
use tinymq_protocol::{messages as m, ErrorCode, Frame, OpCode};

use crate::config::KafkaConfig;

/// A Kafka response still being worked out.
pub(crate) type Pending = Pin<Box<dyn Future<Output = Reply> + Send>>;

/// What a connection's writer does for one request.
pub(crate) enum Reply {
    /// Writes `response`, then lets `hold` go (a fetch's turn at the connection's one large
    /// response, so a connection holds at most one fetch answer in memory at a time).
    Send {
        response: Box<ResponseKind>,
        hold: Hold,
    },
    /// No response is due (produce with acks = 0 that succeeded).
    Nothing,
    /// Writes these bytes after Kafka's 4-byte size and nothing else: a raw SASL token (the
    /// exchange after a SaslHandshake v0).
    Raw(bytes::Bytes),
    /// Closes the connection, logging why: what Kafka does when a produce with acks = 0
    /// fails, so that the producer (which hears nothing else) refreshes its metadata.
    Close(String),
}

impl Reply {
    pub fn send(response: ResponseKind) -> Reply {
        Reply::Send {
            response: Box::new(response),
            hold: None,
        }
    }
}

/// Whatever must stay held until a response has been written.
pub(crate) type Hold = Option<Box<dyn std::any::Any + Send>>;

/// The listener's state shared by its connections.
pub(crate) struct Shared {
    pub config: KafkaConfig,
    pub front: BrokerFront,
    /// The listener's connections, and the native operations its requests became, for
    /// metrics (`kafka_*` series).
    pub stats: Arc<tinymq_net::ConnectionStats>,
    /// The listener's fetch sessions (KIP-227), which its clients keep across connections.
    pub fetch_sessions: crate::fetch::FetchSessions,
    /// Message ids for the native frames built here (they only pair a frame with its
    /// response inside this process).
    message_ids: AtomicU32,
}

impl Shared {
    pub fn new(config: KafkaConfig, front: BrokerFront) -> Shared {
        let fetch_sessions = crate::fetch::FetchSessions::new(config.fetch_sessions_max);
        Shared {
            config,
            front,
            stats: Arc::default(),
            fetch_sessions,
            message_ids: AtomicU32::new(1),
        }
    }
}

/// One request's context: the connection's peer as the native side sees it.
#[derive(Clone)]
pub(crate) struct Ctx {
    pub peer: Peer,
    pub shared: Arc<Shared>,
    /// The connection's one fetch at a time: taken in arrival order (in the read loop) and
    /// held until the fetch's answer is written, so a connection holds at most one fetch
    /// answer in memory however many fetches it pipelines (Kafka clients send one at a time).
    pub fetch_turn: Arc<tokio::sync::Semaphore>,
}

impl Ctx {
    /// This connection's context from its next request on, with `change` made to its peer
    /// (a completed login's principal, the client id of its first request).
    pub fn with_peer(self: &Arc<Ctx>, change: impl FnOnce(&mut Peer)) -> Arc<Ctx> {
        let mut next = Ctx::clone(self);
        change(&mut next.peer);
        Arc::new(next)
    }

    pub fn state(&self) -> &Arc<BrokerState> {
        &self.shared.front.0
    }

    pub fn config(&self) -> &KafkaConfig {
        &self.shared.config
    }

    /// Hands a native request to the broker as a native connection's frame would be: the
    /// broker admits it (a produce is written here, before this returns, so requests admitted
    /// in order are written in order) and the returned call yields its response.
    pub async fn admit<Req: Message>(&self, op: OpCode, request: &Req) -> NativeCall {
        let body = Bytes::from(request.encode_to_vec());
        let message_id = self.shared.message_ids.fetch_add(1, Ordering::Relaxed);
        // A native body the broker would refuse as too long is refused there, with an error.
        let body_len = u32::try_from(body.len()).unwrap_or(u32::MAX);
        let frame = Frame {
            header: FrameHeader::request(op.code(), message_id, body_len),
            body,
        };
        let started = std::time::Instant::now();
        let response = self.shared.front.admit(frame, &self.peer).await;
        NativeCall {
            response,
            op,
            started,
            stats: self.shared.stats.clone(),
        }
    }

    /// [`Ctx::admit`] and its response.
    pub async fn call<Req: Message, Resp: Message + Default>(
        &self,
        op: OpCode,
        request: &Req,
    ) -> Result<Resp, m::Error> {
        self.admit(op, request)
            .await
            .finish()
            .await?
            .ok_or_else(|| ErrorCode::UNKNOWN_SERVER_ERROR.with_message("no response"))
    }
}

/// A native request admitted by the broker, whose response is still to come.
pub(crate) struct NativeCall {
    response: ResponseFuture,
    op: OpCode,
    started: std::time::Instant,
    stats: Arc<tinymq_net::ConnectionStats>,
}

impl NativeCall {
    /// The response decoded as `Resp`; `Ok(None)` when the broker sends none (acks = 0).
    /// A refused request's response (authorization, a malformed body, …) decodes as a `Resp`
    /// whose `error` (field 1 of every native response) says why.
    pub async fn finish<Resp: Message + Default>(self) -> Result<Option<Resp>, m::Error> {
        let answered = self.response.await;
        let elapsed = self.started.elapsed();
        self.stats
            .requests
            .record(self.op.code(), elapsed, answered.as_ref());
        let Some(response) = answered else {
            return Ok(None);
        };
        let frame = if response.parts.iter().any(|p| matches!(p, Part::File(_))) {
            // Reading segment files may wait on the disk: off the runtime's workers, once
            // per response (fetches only).
            tokio::task::spawn_blocking(move || collect(response))
                .await
                .map_err(|e| ErrorCode::UNKNOWN_SERVER_ERROR.with_message(e.to_string()))??
        } else {
            collect(response)?
        };
        let body = frame.slice(FRAME_HEADER_BYTES.min(frame.len())..);
        Resp::decode(body).map(Some).map_err(|e| {
            ErrorCode::UNKNOWN_SERVER_ERROR.with_message(format!("native response: {e}"))
        })
    }
}

/// A response frame's bytes, with its file ranges read (the native port sends those with
/// `sendfile`; here they become part of a Kafka response).
fn collect(response: Response) -> Result<Bytes, m::Error> {
    if let [Part::Bytes(only)] = response.parts.as_slice() {
        return Ok(only.clone());
    }
    let len = usize::try_from(response.len()).unwrap_or(usize::MAX);
    let mut out = BytesMut::with_capacity(len);
    for part in &response.parts {
        match part {
            Part::Bytes(b) => out.extend_from_slice(b),
            Part::File(range) => {
                let start = out.len();
                out.resize(start + range.len as usize, 0);
                let mut done = 0usize;
                while done < range.len as usize {
                    let read = range
                        .source
                        .read_at(&mut out[start + done..], range.position + done as u64)
                        .map_err(|e| ErrorCode::STORAGE_ERROR.with_message(e.to_string()))?;
                    if read == 0 {
                        return Err(ErrorCode::STORAGE_ERROR
                            .with_message("a log file ended before the range read from it"));
                    }
                    done += read;
                }
                if !range.source.unchanged() {
                    return Err(ErrorCode::STORAGE_ERROR
                        .with_message("a log file changed while it was read; fetch again"));
                }
            }
        }
    }
    Ok(out.freeze())
}
