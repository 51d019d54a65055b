//! The Kafka listener: an accept loop bounded by `connections_max`, and per connection a
//! read loop (one request at a time, `requests_in_flight_max` in flight at most, so a client
//! that floods is simply read more slowly) and a writer that sends responses in request
//! order, as Kafka clients require.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesOrdered, StreamExt};
use tinymq_broker::BrokerFront;
use tinymq_net::{LargeResponseGate, NodeRole, Peer};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::KafkaConfig;
use crate::context::{Ctx, Hold, Reply, Shared};
use crate::dispatch::{self, Admitted};
use crate::frame::{self, FrameError};
use crate::sasl::Session;

/// Bytes read from a connection's socket at a time.
const READ_BUFFER_BYTES: usize = 64 * 1024;
/// Why a connection closed after `idle_timeout` with nothing in flight (counted apart).
const IDLE_CLOSE: &str = "idle_timeout with no request in flight";

/// A running Kafka listener.
pub struct KafkaListener {
    pub local_addr: SocketAddr,
    stats: Arc<tinymq_net::ConnectionStats>,
    shutdown: CancellationToken,
    tasks: TaskTracker,
    shutdown_grace: Duration,
}

impl KafkaListener {
    /// Serves Kafka clients on `listener` (bound by the caller, so that the broker can
    /// register its Kafka address before clients arrive) for the broker behind `front`.
    pub fn start(
        listener: TcpListener,
        front: BrokerFront,
        config: KafkaConfig,
    ) -> std::io::Result<KafkaListener> {
        let local_addr = listener.local_addr()?;
        config
            .limits
            .check()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let shutdown_grace = config.limits.shutdown_grace;
        let shared = Arc::new(Shared::new(config, front));
        let stats = shared.stats.clone();
        let shutdown = CancellationToken::new();
        let tasks = TaskTracker::new();
        tasks.spawn(accept_loop(
            listener,
            shared,
            shutdown.clone(),
            tasks.clone(),
        ));
        tracing::info!(%local_addr, "Kafka listener started");
        Ok(KafkaListener {
            local_addr,
            stats,
            shutdown,
            tasks,
            shutdown_grace,
        })
    }

    /// The listener's connection counts, and the native operations its requests became (for
    /// the `kafka_*` metrics).
    pub fn stats(&self) -> Arc<tinymq_net::ConnectionStats> {
        self.stats.clone()
    }

    /// Stops accepting, lets requests in flight finish (up to `shutdown_grace`), then closes.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        self.tasks.close();
        if tokio::time::timeout(self.shutdown_grace, self.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!("Kafka connections still open after shutdown_grace; closing them");
        }
    }
}

/// The Kafka port's accept loop is the native port's (`tinymq_net::accept_connections`): the
/// same `connections_max` rule and connection counts; only the refusal differs, since Kafka's
/// protocol has no greeting to refuse with (the client sees the close).
async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
    tasks: TaskTracker,
) {
    let connections_max = shared.config.limits.connections_max;
    let refuse = move |_: &TcpStream, addr: SocketAddr| {
        tracing::warn!(peer = %addr, connections_max, "Kafka connection refused: connections_max reached");
    };
    let stats = shared.stats.clone();
    let each_shutdown = shutdown.clone();
    let serve = move |stream: TcpStream, addr: SocketAddr| {
        open(stream, addr, shared.clone(), each_shutdown.clone())
    };
    let accepting = tinymq_net::Accepting {
        name: "kafka",
        listener,
        connections_max,
        stats,
        shutdown,
        tasks,
    };
    tinymq_net::accept_connections(accepting, refuse, serve).await
}

/// Completes TLS (when the broker's listeners use it) and serves the connection.
async fn open(
    stream: TcpStream,
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
) {
    let tls = shared.front.0.config.security.tls.clone();
    let Some(tls) = tls else {
        return serve(stream, addr, None, shared, shutdown).await;
    };
    let deadline = tokio::time::Instant::now() + shared.config.limits.handshake_timeout;
    // A plain Kafka client is told apart (and logged as such) before the TLS library fails.
    if let Err(why) = crate::tls::expect_tls(&stream, addr, deadline).await {
        tracing::info!(peer = %addr, reason = %why, "Kafka connection closed");
        return;
    }
    let handshake = tokio::time::timeout_at(deadline, tls.acceptor().accept(stream));
    match handshake.await {
        Ok(Ok(stream)) => {
            let principal = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(tinymq_tls::peer_principal);
            serve(stream, addr, principal, shared, shutdown).await
        }
        Ok(Err(e)) => {
            tracing::info!(peer = %addr, error = %e, "Kafka connection: TLS handshake failed")
        }
        Err(_) => tracing::info!(peer = %addr, "Kafka connection: TLS handshake timed out"),
    }
}

/// A response on its way to the writer.
struct Outgoing {
    admitted: Admitted,
    permit: OwnedSemaphorePermit,
}

async fn serve<S: AsyncRead + AsyncWrite + Send + 'static>(
    stream: S,
    addr: SocketAddr,
    tls_principal: Option<String>,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
) {
    let limits = shared.config.limits.clone();
    let security = &shared.front.0.config.security;
    let mut session = Session::new(security, tls_principal.as_deref());
    let peer = Peer {
        addr,
        role: NodeRole::Client,
        node_id: 0,
        principal: session.initial_principal(),
        client_id: String::new(),
        tls_principal,
        large_response_gate: LargeResponseGate::new(),
        listener_stats: Some(tinymq_net::ListenerStats(shared.stats.clone())),
        connection_tag: Default::default(),
    };
    let mut ctx = Arc::new(Ctx {
        peer,
        shared: shared.clone(),
        fetch_turn: Arc::new(Semaphore::new(1)),
    });
    let (reader, writer) = tokio::io::split(stream);
    let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, reader);
    let in_flight = Arc::new(Semaphore::new(limits.requests_in_flight_max));
    let (outgoing, queue) = mpsc::channel(limits.requests_in_flight_max);
    let writer = tokio::spawn(write_loop(writer, queue, addr, limits.idle_timeout));
    let deadline = tokio::time::Instant::now() + limits.handshake_timeout;
    let reason = loop {
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            break "closing".to_string();
        };
        let frame_bytes_max = session.frame_bytes_max(limits.frame_bytes_max);
        let read = tokio::select! {
            _ = shutdown.cancelled() => break "shutting down".into(),
            read = read_next(&mut reader, frame_bytes_max, &in_flight, &limits, &session, deadline) => read,
        };
        let frame = match read {
            Ok(Some(frame)) => frame,
            Ok(None) => break String::new(),
            Err(why) => break why,
        };
        if session.expects_raw_token() {
            // After a SaslHandshake v0: the frame is a raw SCRAM message, not a request.
            let admitted = match raw_sasl(&mut ctx, &mut session, frame).await {
                Ok(admitted) => admitted,
                Err(why) => break why,
            };
            if outgoing.send(Outgoing { admitted, permit }).await.is_err() {
                break String::new();
            }
            continue;
        }
        let request = match frame::parse_request(frame) {
            Ok(request) => request,
            Err(e) => break e.to_string(),
        };
        if ctx.peer.client_id.is_empty() {
            if let Some(client_id) = &request.header.client_id {
                ctx = ctx.with_peer(|peer| peer.client_id = client_id.to_string());
            }
        }
        match dispatch::admit(&mut ctx, &mut session, request).await {
            Ok(admitted) => {
                if outgoing.send(Outgoing { admitted, permit }).await.is_err() {
                    break String::new();
                }
            }
            Err(why) => break why,
        }
    };
    if reason == IDLE_CLOSE {
        shared.stats.count_idle_close();
    }
    if !reason.is_empty() {
        tracing::info!(peer = %addr, reason = %reason, "Kafka connection closed");
    }
    drop(outgoing);
    let _ = writer.await;
}

/// Whether a size prefix is in fact the start of a native tinymq frame (magic `TM`, version 1).
fn native_magic(size: i64) -> bool {
    let magic = u32::from(tinymq_protocol::frame::FRAME_MAGIC) << 16
        | u32::from(tinymq_protocol::frame::FRAME_VERSION) << 8;
    (size as u32) & 0xFFFF_FF00 == magic
}

/// One raw SASL token after a SaslHandshake v0, answered with a raw token; the connection
/// acts as the new principal once the login completes.
async fn raw_sasl(
    ctx: &mut Arc<Ctx>,
    session: &mut Session,
    token: bytes::Bytes,
) -> Result<Admitted, String> {
    let (reply, principal) = session.raw_step(ctx, token).await?;
    if let Some(principal) = principal {
        *ctx = ctx.with_peer(|peer| peer.principal = principal);
    }
    Ok(Admitted {
        // Not written: a raw reply has no response header.
        api_key: kafka_protocol::messages::ApiKey::SaslAuthenticate,
        version: 0,
        correlation_id: 0,
        pending: Box::pin(std::future::ready(Reply::Raw(reply))),
    })
}

/// The next request's bytes; `Err` says why the connection is closed instead.
async fn read_next<R: tokio::io::AsyncRead + Unpin>(
    reader: &mut R,
    frame_bytes_max: u32,
    in_flight: &Semaphore,
    limits: &tinymq_net::ListenerLimits,
    session: &Session,
    login_deadline: tokio::time::Instant,
) -> Result<Option<bytes::Bytes>, String> {
    loop {
        let wait = if session.authenticated() {
            tokio::time::Instant::now() + limits.idle_timeout
        } else {
            login_deadline
        };
        // The read is cancel-safe only between requests; a timeout in the middle of one
        // closes the connection anyway.
        match tokio::time::timeout_at(wait, frame::read_request(reader, frame_bytes_max)).await {
            Ok(Ok(frame)) => return Ok(frame),
            Ok(Err(FrameError::Io(e))) => return Err(format!("read failed: {e}")),
            Ok(Err(FrameError::TooLarge { size, .. })) if native_magic(size) => {
                return Err("a native tinymq client connected to the Kafka port (its frame starts with the native magic \"TM\"); point it at the native port".into())
            }
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) if !session.authenticated() => {
                return Err("SASL authentication not completed within handshake_timeout".into())
            }
            // Idle only when nothing is in flight (a long poll may outlast the timeout).
            Err(_) if in_flight.available_permits() == limits.requests_in_flight_max - 1 => {
                return Err(IDLE_CLOSE.into())
            }
            Err(_) => continue,
        }
    }
}

/// One request's outcome, encoded, for the writer.
enum Written {
    Bytes(Result<bytes::Bytes, String>, Hold),
    Nothing,
    Close(String),
}

/// Writes responses in request order as they complete; each frees its in-flight permit once
/// written. A peer that reads none of them for `idle_timeout` is disconnected.
async fn write_loop<W: AsyncWrite + Send + 'static>(
    writer: tokio::io::WriteHalf<W>,
    mut queue: mpsc::Receiver<Outgoing>,
    addr: SocketAddr,
    idle_timeout: Duration,
) {
    let mut writer = writer;
    let mut ordered = FuturesOrdered::new();
    let mut open = true;
    loop {
        tokio::select! {
            next = queue.recv(), if open => match next {
                Some(Outgoing { admitted, permit }) => ordered.push_back(async move {
                    let reply = admitted.pending.await;
                    let encoded = match reply {
                        Reply::Send { response, hold } => Written::Bytes(
                            crate::frame::encode_response(admitted.api_key, admitted.version, admitted.correlation_id, &response),
                            hold,
                        ),
                        Reply::Nothing => Written::Nothing,
                        Reply::Raw(token) => Written::Bytes(crate::frame::size_prefixed(&token), None),
                        Reply::Close(why) => Written::Close(why),
                    };
                    (encoded, permit)
                }),
                None => open = false,
            },
            Some((written, permit)) = ordered.next(), if !ordered.is_empty() => {
                let (bytes, hold) = match written {
                    Written::Nothing => continue,
                    Written::Close(why) => {
                        tracing::info!(peer = %addr, reason = %why, "Kafka connection closed");
                        break;
                    }
                    Written::Bytes(Ok(bytes), hold) => (bytes, hold),
                    Written::Bytes(Err(e), _) => {
                        tracing::error!(peer = %addr, error = %e, "Kafka response could not be encoded; closing the connection");
                        break;
                    }
                };
                match tokio::time::timeout(idle_timeout, writer.write_all(&bytes)).await {
                    Ok(Ok(())) => drop((permit, hold)),
                    Ok(Err(_)) => break,
                    Err(_) => {
                        tracing::info!(peer = %addr, "Kafka client read no response for idle_timeout; closing");
                        break;
                    }
                }
            },
            else => break,
        }
    }
    let _ = writer.shutdown().await;
}
