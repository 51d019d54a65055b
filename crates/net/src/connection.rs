//! One connection: a reader loop that decodes frames, runs the handshake and authentication
//! (see `auth`), and hands each request to the service, and a writer task that sends responses as they complete (full
//! duplex, matched by message id).
//!
//! Backpressure: at most `requests_in_flight_max` requests run at once, counting a request
//! whose response has not been written to the socket yet; the reader waits for one to finish
//! before it reads further, so a flooding peer, or one that reads no responses, fills its own
//! socket buffers, not the server's memory. A peer that reads none of its responses for the
//! idle timeout is disconnected.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tinymq_protocol::frame::{Decoded, FrameDecoder};
use tinymq_protocol::{ErrorCode, FrameError};
use tinymq_tls::ServerTlsStream;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, WriteHalf};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::auth::{Login, Outcome};
use crate::transport::{self, Transport};
use crate::writer::Writer;
use crate::{
    error_frame, handshake, ConnectionStats, ListenerLimits, ListenerSecurity, Peer, Response,
    ResponseFuture, Service,
};
use tinymq_auth::LoginLimiter;

/// A response on its way to the socket, with the request's permit (none before the handshake):
/// both are released once it is written.
type Outgoing = (Response, Option<OwnedSemaphorePermit>);

/// Bytes read from the socket at a time at most.
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// Responses taken from the queue for one round of writes at most (their permits are
/// released together once it is written).
const WRITE_BATCH_RESPONSES_MAX: usize = 64;
/// A peer that accepts none of a response's bytes for this long (or the idle timeout, if
/// shorter) is disconnected: its unread responses hold memory and permits.
const WRITE_STALL_MAX: std::time::Duration = std::time::Duration::from_secs(30);
/// Why a connection closed after `idle_timeout_ms` without a frame (counted apart).
const IDLE_TIMEOUT: &str = "idle timeout";

struct Connection<S> {
    service: Arc<S>,
    limits: Arc<ListenerLimits>,
    security: Arc<ListenerSecurity>,
    /// Failed logins per source address, shared by the listener's connections.
    limiter: Arc<LoginLimiter>,
    addr: SocketAddr,
    shutdown: CancellationToken,
    tx: mpsc::Sender<Outgoing>,
    permits: Arc<Semaphore>,
    stats: Arc<ConnectionStats>,
    /// The subject CN of the client certificate the TLS handshake verified.
    tls_principal: Option<String>,
    /// The operations this connection carried, for [`Service::peer_left`].
    served: crate::OpsServed,
    /// Whether the peer closed the connection (end of stream or a reset read here).
    peer_closed: std::sync::atomic::AtomicBool,
}

/// Serves one accepted connection until the peer leaves, breaks the protocol, times out, or
/// the server shuts down; then lets requests in flight finish (within the shutdown grace) and
/// flushes their responses. The TLS handshake, if the listener has TLS, and the tinymq
/// handshake both happen within `handshake_timeout`.
pub(crate) async fn run<S: Service>(
    stream: TcpStream,
    addr: SocketAddr,
    service: Arc<S>,
    limits: Arc<ListenerLimits>,
    // The listener's security and its failed-login counts, which go together.
    (security, limiter): (Arc<ListenerSecurity>, Arc<LoginLimiter>),
    shutdown: CancellationToken,
    stats: Arc<ConnectionStats>,
) {
    let handshake_deadline = Instant::now() + limits.handshake_timeout;
    let opened = tokio::select! {
        o = transport::open(stream, addr, &security, handshake_deadline) => o,
        _ = shutdown.cancelled() => return,
    };
    let (transport, tls_principal) = match opened {
        Ok(t) => t,
        Err(why) => {
            tracing::debug!(peer = %addr, %why, "closing connection");
            return;
        }
    };
    let start = Start {
        addr,
        service,
        limits,
        security,
        limiter,
        shutdown,
        stats,
        tls_principal,
        handshake_deadline,
    };
    match transport {
        Transport::Plain(stream) => {
            let (reader, writer) = stream.into_split();
            serve_stream(reader, Sink::Tcp(writer), start).await
        }
        Transport::Tls(stream) => {
            let (reader, writer) = tokio::io::split(*stream);
            serve_stream(reader, Sink::Tls(writer), start).await
        }
    }
}

/// What a connection starts with once its transport is open.
struct Start<S> {
    addr: SocketAddr,
    service: Arc<S>,
    limits: Arc<ListenerLimits>,
    security: Arc<ListenerSecurity>,
    limiter: Arc<LoginLimiter>,
    shutdown: CancellationToken,
    stats: Arc<ConnectionStats>,
    tls_principal: Option<String>,
    handshake_deadline: Instant,
}

/// The writing half of a connection's transport.
enum Sink {
    Tcp(OwnedWriteHalf),
    Tls(WriteHalf<ServerTlsStream<TcpStream>>),
}

async fn serve_stream<S: Service, R: AsyncRead + Unpin>(
    mut reader: R,
    sink: Sink,
    start: Start<S>,
) {
    let Start {
        addr,
        service,
        limits,
        security,
        limiter,
        shutdown,
        stats,
        tls_principal,
        handshake_deadline,
    } = start;
    let in_flight_max = limits.requests_in_flight_max;
    let (tx, rx) = mpsc::channel::<Outgoing>(in_flight_max);
    let write_task = tokio::spawn(write_loop(sink, rx, limits.clone()));
    let connection = Connection {
        service,
        limits,
        security,
        limiter,
        addr,
        shutdown,
        tx,
        permits: Arc::new(Semaphore::new(in_flight_max)),
        stats,
        tls_principal,
        served: crate::OpsServed::default(),
        peer_closed: std::sync::atomic::AtomicBool::new(false),
    };
    let mut peer = None;
    let read = connection.read_loop(&mut reader, handshake_deadline, &mut peer);
    if let Err(why) = read.await {
        if why == IDLE_TIMEOUT {
            connection.stats.idle_closed.fetch_add(1, Ordering::Relaxed);
        }
        tracing::debug!(peer = %addr, %why, "closing connection");
    }
    let Connection {
        tx,
        permits,
        limits,
        service,
        served,
        peer_closed,
        ..
    } = connection;
    if let Some((peer, _)) = peer.filter(|_| peer_closed.into_inner()) {
        service.peer_left(&peer, served);
    }
    let all = u32::try_from(in_flight_max).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout(limits.shutdown_grace, permits.acquire_many(all)).await;
    drop(tx);
    let _ = write_task.await;
}

/// Sends responses in the order they complete, every response queued at the moment in one
/// go (their buffers in shared vectored writes), releasing each one's permit (and what it
/// holds) once written; gives up on a peer that accepts no bytes for `WRITE_STALL_MAX` (its
/// requests' senders then fail and the reader stops).
async fn write_loop(mut sink: Sink, rx: mpsc::Receiver<Outgoing>, limits: Arc<ListenerLimits>) {
    let stall_max = limits.idle_timeout.min(WRITE_STALL_MAX);
    match &mut sink {
        Sink::Tcp(writer) => write_responses(Writer::new(writer.as_ref(), stall_max), rx).await,
        Sink::Tls(writer) => write_responses(Writer::tls(writer, stall_max), rx).await,
    }
    // TLS: close_notify, then FIN.
    let _ = match &mut sink {
        Sink::Tcp(writer) => writer.shutdown().await,
        Sink::Tls(writer) => writer.shutdown().await,
    };
}

async fn write_responses(mut out: Writer<'_>, mut rx: mpsc::Receiver<Outgoing>) {
    let mut written: Vec<Outgoing> = Vec::new();
    'responses: while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        while let Some(outgoing) = next.take() {
            if let Err(e) = out.response(&outgoing.0.parts).await {
                tracing::debug!(error = %e, "writing a response failed");
                break 'responses;
            }
            written.push(outgoing);
            if written.len() < WRITE_BATCH_RESPONSES_MAX {
                next = rx.try_recv().ok();
            }
        }
        if let Err(e) = out.flush().await {
            tracing::debug!(error = %e, "writing responses failed");
            break;
        }
        written.clear();
    }
}

impl<S: Service> Connection<S> {
    async fn read_loop<R: AsyncRead + Unpin>(
        &self,
        reader: &mut R,
        handshake_deadline: Instant,
        // The peer, once handshaken, and whether it must still authenticate.
        peer: &mut Option<(Peer, bool)>,
    ) -> Result<(), String> {
        let mut decoder = FrameDecoder::pre_handshake();
        let mut buf = BytesMut::with_capacity(4096);
        let mut login = Login::default();
        loop {
            // Serve every complete frame already buffered.
            loop {
                match decoder.peek(&buf) {
                    Ok(Decoded::Complete(_)) => {}
                    Ok(Decoded::NeedMore { total_bytes }) => {
                        // The total is known to be within the limit: reserving it is bounded.
                        buf.reserve(total_bytes.saturating_sub(buf.len()).min(READ_CHUNK_BYTES));
                        break;
                    }
                    Err(e) => return Err(self.reject_frame(&buf, e)),
                };
                let Some(frame) = decoder.decode(&mut buf).map_err(|e| e.to_string())? else {
                    break;
                };
                match peer {
                    Some((p, must)) if is_authenticate(&frame) && !login.done => {
                        // A login on a connection already serving (a node proving itself on a
                        // listener without `--auth`) gets a deadline of its own.
                        let deadline = if *must {
                            handshake_deadline
                        } else {
                            Instant::now() + self.limits.handshake_timeout
                        };
                        let ready = self.authenticate(frame, p, &mut login, deadline);
                        if ready.await? {
                            decoder.set_body_bytes_max(self.limits.frame_bytes_max);
                            *must = false;
                        }
                    }
                    Some((_, true)) => {
                        let (op, id) = (frame.header.op_code(), frame.header.message_id);
                        let why = "authenticate first (Authenticate, operation 25)".to_string();
                        let refusal = error_frame(op, id, ErrorCode::AUTHENTICATION_REQUIRED, why);
                        self.send_before(handshake_deadline, refusal).await?;
                    }
                    Some((p, false)) => self.serve(frame, p).await?,
                    None => {
                        let identity = self.service.identity();
                        let (response, done) = handshake::answer(
                            frame,
                            self.addr,
                            identity,
                            &self.limits,
                            &self.security,
                            self.tls_principal.as_deref(),
                        );
                        self.send_before(handshake_deadline, response).await?;
                        if let Some((p, must_authenticate)) = done {
                            tracing::debug!(peer = %self.addr, role = ?p.role, node = p.node_id, client = %p.client_id, must_authenticate, "handshake done");
                            if !must_authenticate {
                                decoder.set_body_bytes_max(self.limits.frame_bytes_max);
                            }
                            *peer = Some((p, must_authenticate));
                        }
                    }
                }
            }
            // Until the peer may send requests, the handshake deadline bounds the connection.
            let ready = matches!(peer, Some((_, false)));
            let read = async {
                if ready {
                    tokio::time::timeout(self.limits.idle_timeout, reader.read_buf(&mut buf)).await
                } else {
                    tokio::time::timeout_at(handshake_deadline, reader.read_buf(&mut buf)).await
                }
            };
            let n = tokio::select! {
                r = read => r,
                _ = self.shutdown.cancelled() => return Err("shutting down".into()),
                _ = self.tx.closed() => return Err("the peer stopped reading responses".into()),
            };
            let left = match &n {
                Ok(Ok(0)) => true,
                Ok(Err(e)) => matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
                ),
                _ => false,
            };
            self.peer_closed.store(left, Ordering::Relaxed);
            match n {
                Ok(Ok(0)) if buf.is_empty() => return Ok(()),
                Ok(Ok(0)) => {
                    return Err(format!(
                        "connection closed in the middle of a frame ({} bytes)",
                        buf.len()
                    ))
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(e.to_string()),
                Err(_) if peer.is_none() => return Err("handshake timed out".into()),
                Err(_) if !ready => return Err("authentication timed out".into()),
                Err(_)
                    if self.permits.available_permits() == self.limits.requests_in_flight_max =>
                {
                    return Err(IDLE_TIMEOUT.into())
                }
                Err(_) => {}
            }
        }
    }

    /// Takes one Authenticate request: answers it (a failure after its delay, all within the
    /// handshake deadline), and on success makes `peer` act as the proven principal. Whether
    /// the connection has authenticated; an error closes it.
    async fn authenticate(
        &self,
        frame: tinymq_protocol::Frame,
        peer: &mut Peer,
        login: &mut Login,
        deadline: Instant,
    ) -> Result<bool, String> {
        let (service, limiter) = (self.service.as_ref(), self.limiter.as_ref());
        match login.step(frame, service, &self.security, limiter, peer) {
            Outcome::Continue(reply) => {
                self.send_before(deadline, reply).await?;
                Ok(false)
            }
            Outcome::Done {
                reply,
                principal,
                role,
                node_id,
            } => {
                self.stats.auth_succeeded.fetch_add(1, Ordering::Relaxed);
                (peer.principal, peer.role, peer.node_id) = (principal, role, node_id);
                self.send_before(deadline, reply).await?;
                Ok(true)
            }
            Outcome::Failed {
                reply,
                delay,
                close,
            } => {
                self.stats.auth_failed.fetch_add(1, Ordering::Relaxed);
                let slowed = Instant::now() + delay;
                tokio::select! {
                    _ = tokio::time::sleep_until(slowed.min(deadline)) => {}
                    _ = self.shutdown.cancelled() => return Err("shutting down".into()),
                }
                self.send_before(deadline, reply).await?;
                if close {
                    return Err("too many failed authentications".into());
                }
                Ok(false)
            }
        }
    }

    /// Takes one request of a handshaken connection: waits for a permit, screens it, lets the
    /// service admit it (in arrival order), and runs the rest concurrently.
    async fn serve(&self, frame: tinymq_protocol::Frame, peer: &Peer) -> Result<(), String> {
        // Timed from here: the wait for a permit (backpressure) is part of the request's time.
        let started = std::time::Instant::now();
        let permit = tokio::select! {
            p = self.permits.clone().acquire_owned() => p.map_err(|e| e.to_string())?,
            _ = self.shutdown.cancelled() => return Err("shutting down".into()),
            _ = self.tx.closed() => return Err("the peer stopped reading responses".into()),
        };
        let (op_code, id) = (frame.header.op_code(), frame.header.message_id);
        self.served.insert(op_code);
        let response: ResponseFuture = match handshake::screen(&frame) {
            Err(refusal) => crate::ready(Some(refusal)),
            Ok(op) => match handshake::authorize(op, peer.role) {
                Ok(()) => self.service.admit(frame, peer).await,
                Err(error) => {
                    tracing::info!(peer = %self.addr, role = ?peer.role, op = op.name(), "node-only operation refused");
                    let body = tinymq_protocol::messages::ErrorResponse { error: Some(error) };
                    crate::ready(Some(crate::encode_response(op_code, id, &body)))
                }
            },
        };
        let tx = self.tx.clone();
        let stats = self.stats.clone();
        tokio::spawn(async move {
            let response = response.await;
            let requests = &stats.requests;
            requests.record(op_code, started.elapsed(), response.as_ref());
            // The permit goes with the response and is released once it is written.
            if let Some(response) = response {
                let _ = tx.send((response, Some(permit))).await;
            }
        });
        Ok(())
    }

    /// Sends a pre-handshake answer; a peer that reads none of them cannot hold the
    /// connection past the handshake deadline.
    async fn send_before(&self, deadline: Instant, response: Bytes) -> Result<(), String> {
        match tokio::time::timeout_at(deadline, self.tx.send((response.into(), None))).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err("the writer stopped".into()),
            Err(_) => Err("handshake timed out".into()),
        }
    }

    /// Answers an invalid frame with an error frame where possible, before closing.
    fn reject_frame(&self, buf: &[u8], e: FrameError) -> String {
        let message_id = buf
            .get(4..8)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map_or(0, u32::from_be_bytes);
        let code = match e {
            FrameError::UnsupportedVersion { .. } => ErrorCode::UNSUPPORTED_VERSION,
            _ => ErrorCode::INVALID_FRAME,
        };
        let op = buf.get(3).copied().unwrap_or(0);
        let why = format!("{e}; closing the connection");
        // Not waited for: a peer that does not read gets no error frame, only the close.
        let _ = self
            .tx
            .try_send((error_frame(op, message_id, code, why).into(), None));
        tracing::info!(peer = %self.addr, error = %e, "invalid frame");
        e.to_string()
    }
}

/// Whether `frame` is an Authenticate request.
fn is_authenticate(frame: &tinymq_protocol::Frame) -> bool {
    !frame.header.is_response()
        && tinymq_protocol::OpCode::from_code(frame.header.op_code())
            == Some(tinymq_protocol::OpCode::Authenticate)
}
