//! One connection to a tinymq node: handshake, then many requests in flight at once, each
//! matched to its response by message id. A reader task routes responses; a writer task sends
//! frames in order, gathering what is queued into one vectored write (`writev`), so a produce
//! request's record batch goes to the socket from the producer's own buffer, uncopied.

use std::collections::HashMap;
use std::io::IoSlice;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use parking_lot::Mutex;
use prost::Message;
use tinymq_protocol::frame::{FrameDecoder, FrameHeader};
use tinymq_protocol::messages::{self as m, NodeRole};
use tinymq_protocol::{Frame, Request, PROTOCOL_VERSION_MAX, PROTOCOL_VERSION_MIN};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

use crate::error::{check, ClientError};
use crate::security::{host_of, Security};

/// Largest response body the client accepts (a fetch answer is bounded by its `max_bytes`).
pub const RESPONSE_BYTES_MAX: u32 = 256 << 20;
/// Time allowed to open the TCP connection and finish the handshake.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The message id of a server's error frame about the whole connection; never used for a
/// request.
const CONNECTION_ERROR_ID: u32 = 0;
/// Pieces handed to one vectored write at most (well under every system's `IOV_MAX`).
const WRITE_PIECES_MAX: usize = 64;

type Pending = Arc<Mutex<HashMap<u32, oneshot::Sender<Frame>>>>;

/// The server's error about the whole connection (message id 0), once one came: what every
/// later request on the connection fails with, instead of a bare "closed".
type ConnectionError = Arc<Mutex<Option<m::Error>>>;

/// Why TLS ended the connection, when it did (a refused client certificate shows up as a read
/// error after the client's side of the handshake has finished).
type TlsFailure = Arc<Mutex<Option<String>>>;

/// The error for a request on a closed connection: the server's reason if it gave one.
fn closed_error(addr: &str, reason: &ConnectionError) -> ClientError {
    match reason.lock().clone() {
        Some(e) => ClientError::Server {
            code: e.error_code(),
            message: e.message,
        },
        None => ClientError::ConnectionClosed(addr.to_string()),
    }
}

/// A handshaken connection. Cheap to share behind an `Arc`; every method takes `&self`.
#[derive(Debug)]
pub struct Connection {
    addr: String,
    outgoing: mpsc::Sender<Outgoing>,
    pending: Pending,
    next_id: AtomicU32,
    closed: Arc<AtomicBool>,
    closed_reason: ConnectionError,
    /// Bounds requests in flight to what the server said it processes at once.
    in_flight: Arc<Semaphore>,
    pub handshake: m::HandshakeResponse,
    /// Whom the server says the connection acts as, once it logged in (`User:alice`).
    pub principal: Option<String>,
}

/// A frame on its way to the socket: whole, or a head (frame header and the start of the
/// body) and the rest of the body, written together without being joined.
#[derive(Debug)]
enum Outgoing {
    Whole(Bytes),
    Split(Bytes, Bytes),
}

/// A request body in two pieces that make one protobuf message when put one after the other:
/// how a produce request carries a record batch it does not copy (see
/// [`Connection::start_split_request`]).
#[derive(Debug, Clone)]
pub struct SplitBody {
    pub head: Bytes,
    pub tail: Bytes,
}

fn encode_request<R: Request>(message_id: u32, body: &R) -> Result<Outgoing, ClientError> {
    let len = body.encoded_len();
    let len32 = u32::try_from(len)
        .map_err(|_| ClientError::Protocol(format!("{} request over 4 GiB", R::OP.name())))?;
    let mut out = BytesMut::with_capacity(12 + len);
    FrameHeader::request(R::OP.code(), message_id, len32).encode(&mut out);
    body.encode(&mut out).expect("BytesMut grows");
    Ok(Outgoing::Whole(out.freeze()))
}

/// The frame of a split body: only the header and the head are copied (into one buffer).
fn encode_split<R: Request>(message_id: u32, body: &SplitBody) -> Result<Outgoing, ClientError> {
    let len = body
        .head
        .len()
        .checked_add(body.tail.len())
        .and_then(|l| u32::try_from(l).ok())
        .ok_or_else(|| ClientError::Protocol(format!("{} request over 4 GiB", R::OP.name())))?;
    let mut head = BytesMut::with_capacity(12 + body.head.len());
    FrameHeader::request(R::OP.code(), message_id, len).encode(&mut head);
    head.extend_from_slice(&body.head);
    Ok(Outgoing::Split(head.freeze(), body.tail.clone()))
}

/// The writer task: waits for a frame, takes whatever else is queued behind it, and writes it
/// all with vectored writes until every byte is out (a write may take only part of it).
async fn write_frames<W: AsyncWrite + Unpin>(mut writer: W, mut queue: mpsc::Receiver<Outgoing>) {
    let mut pieces: Vec<Bytes> = Vec::with_capacity(WRITE_PIECES_MAX);
    let push = |pieces: &mut Vec<Bytes>, frame: Outgoing| match frame {
        Outgoing::Whole(b) => pieces.push(b),
        Outgoing::Split(head, tail) => {
            pieces.push(head);
            if !tail.is_empty() {
                pieces.push(tail);
            }
        }
    };
    while let Some(frame) = queue.recv().await {
        push(&mut pieces, frame);
        while pieces.len() + 2 <= WRITE_PIECES_MAX {
            match queue.try_recv() {
                Ok(frame) => push(&mut pieces, frame),
                Err(_) => break,
            }
        }
        if write_all_vectored(&mut writer, &mut pieces).await.is_err() {
            return;
        }
        // TLS buffers records until flushed; plain TCP has nothing to flush.
        if writer.flush().await.is_err() {
            return;
        }
    }
}

/// Writes every byte of `pieces` (none empty), in order, and leaves `pieces` empty.
async fn write_all_vectored<W: AsyncWrite + Unpin>(
    writer: &mut W,
    pieces: &mut Vec<Bytes>,
) -> std::io::Result<()> {
    let mut first = 0;
    while first < pieces.len() {
        let mut slices = [IoSlice::new(&[]); WRITE_PIECES_MAX];
        let count = (pieces.len() - first).min(WRITE_PIECES_MAX);
        for (slice, piece) in slices.iter_mut().zip(&pieces[first..first + count]) {
            *slice = IoSlice::new(piece);
        }
        let mut written = writer.write_vectored(&slices[..count]).await?;
        if written == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        // Drop the pieces written whole, and the written start of a piece written in part.
        while written > 0 {
            let piece = &mut pieces[first];
            if written >= piece.len() {
                written -= piece.len();
                first += 1;
            } else {
                piece.advance(written);
                written = 0;
            }
        }
    }
    pieces.clear();
    Ok(())
}

/// The reader task: routes each response to its waiter until the connection ends.
async fn read_frames<R: AsyncRead + Unpin>(
    mut reader: R,
    (p, c, r, tls): (Pending, Arc<AtomicBool>, ConnectionError, TlsFailure),
) {
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let decoder = FrameDecoder::new(RESPONSE_BYTES_MAX);
    'read: loop {
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(frame)) if frame.header.message_id == CONNECTION_ERROR_ID => {
                    // About the whole connection (e.g. refused at the server's connection
                    // limit, or a plain client on a TLS port): every request waiting gets its
                    // error, and so does every later one.
                    if let Ok(body) = m::ErrorResponse::decode(frame.body.clone()) {
                        *r.lock() = body.error;
                    }
                    for (_, waiter) in p.lock().drain() {
                        let _ = waiter.send(frame.clone());
                    }
                }
                Ok(Some(frame)) => {
                    if let Some(waiter) = p.lock().remove(&frame.header.message_id) {
                        let _ = waiter.send(frame);
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "invalid frame from server");
                    break 'read;
                }
            }
        }
        match reader.read_buf(&mut buf).await {
            Ok(0) => break,
            Err(e) => {
                *tls.lock() = tinymq_tls::tls_failure(&e);
                break;
            }
            Ok(_) => {}
        }
    }
    c.store(true, Ordering::SeqCst);
    // Dropping the senders wakes every waiter with "closed".
    p.lock().clear();
}

impl Connection {
    /// Connects and handshakes as a client, optionally checking the cluster id.
    pub async fn connect(
        addr: &str,
        client_id: &str,
        cluster_id: &str,
    ) -> Result<Connection, ClientError> {
        Connection::connect_as(addr, client_id, cluster_id, NodeRole::Client, 0).await
    }

    /// Connects and handshakes as `role` (a broker or MetaServer node reaching another node
    /// says so, which node-to-node operations require) with its `node_id`.
    pub async fn connect_as(
        addr: &str,
        client_id: &str,
        cluster_id: &str,
        role: NodeRole,
        node_id: u64,
    ) -> Result<Connection, ClientError> {
        let security = Security::default();
        Connection::connect_secure(addr, client_id, cluster_id, role, node_id, &security).await
    }

    /// [`connect_as`](Self::connect_as) with `security`: TLS (the server's certificate must
    /// be signed by the given CA and name the host of `addr`, a DNS name or an IP address)
    /// and, when a login is given, authentication after the handshake.
    pub async fn connect_secure(
        addr: &str,
        client_id: &str,
        cluster_id: &str,
        role: NodeRole,
        node_id: u64,
        security: &Security,
    ) -> Result<Connection, ClientError> {
        let fail = |reason: String| ClientError::Connect {
            addr: addr.to_string(),
            reason,
        };
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
            .await
            .map_err(|_| fail("timed out".into()))?
            .map_err(|e| fail(e.to_string()))?;
        let _ = stream.set_nodelay(true);
        let (outgoing, queue) = mpsc::channel::<Outgoing>(256);
        let pending: Pending = Arc::new(Mutex::new(HashMap::new()));
        let closed = Arc::new(AtomicBool::new(false));
        let closed_reason = ConnectionError::default();
        let tls_failure = TlsFailure::default();
        let shared = (
            pending.clone(),
            closed.clone(),
            closed_reason.clone(),
            tls_failure.clone(),
        );
        match &security.tls {
            None => {
                let (reader, writer) = stream.into_split();
                tokio::spawn(write_frames(writer, queue));
                tokio::spawn(read_frames(reader, shared));
            }
            Some(tls) => {
                let connecting = tls.connect(host_of(addr), stream);
                let stream = tokio::time::timeout(CONNECT_TIMEOUT, connecting)
                    .await
                    .map_err(|_| fail("TLS handshake timed out".into()))?
                    .map_err(|e| match e.is_tls_failure() {
                        true => ClientError::Tls {
                            addr: addr.to_string(),
                            reason: e.to_string(),
                        },
                        false => fail(e.to_string()),
                    })?;
                let (reader, writer) = tokio::io::split(stream);
                tokio::spawn(write_frames(writer, queue));
                tokio::spawn(read_frames(reader, shared));
            }
        }
        let mut connection = Connection {
            addr: addr.to_string(),
            outgoing,
            pending,
            next_id: AtomicU32::new(1),
            closed,
            closed_reason,
            in_flight: Arc::new(Semaphore::new(1)),
            handshake: m::HandshakeResponse::default(),
            principal: None,
        };
        let handshake = m::HandshakeRequest {
            min_version: PROTOCOL_VERSION_MIN,
            max_version: PROTOCOL_VERSION_MAX,
            cluster_id: cluster_id.to_string(),
            client_id: client_id.to_string(),
            role: role.into(),
            node_id,
        };
        let response = match connection.request(&handshake, CONNECT_TIMEOUT).await {
            Ok(r) => r,
            // TLS 1.3 finishes the client's side of the handshake before the server has
            // checked the client's certificate: its refusal comes as the first read.
            Err(e) => match tls_failure.lock().clone() {
                Some(reason) => {
                    return Err(ClientError::Tls {
                        addr: addr.to_string(),
                        reason,
                    })
                }
                None => return Err(e),
            },
        };
        check(response.error.as_ref())?;
        connection.in_flight = Arc::new(Semaphore::new(
            response.requests_in_flight_max.max(1) as usize
        ));
        connection.handshake = response;
        match &security.login {
            Some(login) => {
                let principal = crate::authenticate::authenticate(&connection, login).await?;
                connection.principal = Some(principal);
            }
            // Nothing but a login would be served: say so now, not at the first request.
            None if connection.handshake.auth_required => {
                return Err(ClientError::Server {
                    code: tinymq_protocol::ErrorCode::AUTHENTICATION_REQUIRED,
                    message: format!(
                        "{addr} requires a login: give a user and password (the tools take --user and --password, or TINYMQ_USER and TINYMQ_PASSWORD)"
                    ),
                });
            }
            None => {}
        }
        Ok(connection)
    }

    /// A fresh message id (wrapping, skipping the id of connection-wide errors).
    fn next_message_id(&self) -> u32 {
        loop {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            if id != CONNECTION_ERROR_ID {
                return id;
            }
        }
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Sends a request and waits for its response. A response whose top-level error is set is
    /// returned as `Err`.
    pub async fn request<R: Request>(
        &self,
        body: &R,
        timeout: Duration,
    ) -> Result<R::Response, ClientError> {
        self.start_request(body).await?.wait(timeout).await
    }

    /// Queues a request for sending and returns a handle to await its response. Requests
    /// started one after another from one task are sent in that order.
    pub async fn start_request<R: Request>(
        &self,
        body: &R,
    ) -> Result<PendingResponse<R>, ClientError> {
        self.start_frame(|id| encode_request(id, body)).await
    }

    /// [`start_request`](Self::start_request) for a body given in two pieces (the bytes of
    /// an `R` when joined), written with one vectored write instead of being joined.
    pub async fn start_split_request<R: Request>(
        &self,
        body: &SplitBody,
    ) -> Result<PendingResponse<R>, ClientError> {
        self.start_frame(|id| encode_split::<R>(id, body)).await
    }

    async fn start_frame<R: Request>(
        &self,
        encode: impl FnOnce(u32) -> Result<Outgoing, ClientError>,
    ) -> Result<PendingResponse<R>, ClientError> {
        let closed = || closed_error(&self.addr, &self.closed_reason);
        let permit = self
            .in_flight
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| closed())?;
        if self.is_closed() {
            return Err(closed());
        }
        let id = self.next_message_id();
        let (tx, rx) = oneshot::channel();
        self.pending.lock().insert(id, tx);
        // The reader may have closed the connection (and dropped every waiter) between the
        // check above and the insert: then nobody would ever answer this one.
        if self.is_closed() {
            self.pending.lock().remove(&id);
            return Err(closed());
        }
        let frame = match encode(id) {
            Ok(frame) => frame,
            Err(e) => {
                self.pending.lock().remove(&id);
                return Err(e);
            }
        };
        if self.outgoing.send(frame).await.is_err() {
            self.pending.lock().remove(&id);
            return Err(closed());
        }
        Ok(PendingResponse {
            rx,
            id,
            pending: self.pending.clone(),
            addr: self.addr.clone(),
            closed_reason: self.closed_reason.clone(),
            _permit: permit,
            _response: std::marker::PhantomData,
        })
    }

    /// Sends a request that gets no response (produce with acks = 0).
    pub async fn send_only<R: Request>(&self, body: &R) -> Result<(), ClientError> {
        let id = self.next_message_id();
        self.outgoing
            .send(encode_request(id, body)?)
            .await
            .map_err(|_| ClientError::ConnectionClosed(self.addr.clone()))
    }

    /// [`send_only`](Self::send_only) for a body in two pieces.
    pub async fn send_only_split<R: Request>(&self, body: &SplitBody) -> Result<(), ClientError> {
        let id = self.next_message_id();
        self.outgoing
            .send(encode_split::<R>(id, body)?)
            .await
            .map_err(|_| ClientError::ConnectionClosed(self.addr.clone()))
    }
}

/// A request on the wire whose response has not been read yet.
pub struct PendingResponse<R: Request> {
    rx: oneshot::Receiver<Frame>,
    id: u32,
    pending: Pending,
    addr: String,
    closed_reason: ConnectionError,
    _permit: OwnedSemaphorePermit,
    _response: std::marker::PhantomData<fn() -> R>,
}

impl<R: Request> PendingResponse<R> {
    /// Waits for the response, up to `timeout`.
    pub async fn wait(self, timeout: Duration) -> Result<R::Response, ClientError> {
        let frame = match tokio::time::timeout(timeout, self.rx).await {
            Ok(Ok(frame)) => frame,
            Ok(Err(_)) => return Err(closed_error(&self.addr, &self.closed_reason)),
            Err(_) => {
                self.pending.lock().remove(&self.id);
                return Err(ClientError::Timeout(timeout.as_millis() as u64));
            }
        };
        // Field 1 of every response is the error, so this reads it from any response type.
        let top = m::ErrorResponse::decode(frame.body.clone())
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        check(top.error.as_ref())?;
        R::Response::decode(frame.body)
            .map_err(|e| ClientError::Protocol(format!("{}: {e}", R::OP.name())))
    }
}
