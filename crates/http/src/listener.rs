//! Accepting HTTP connections under `connections_max`: past it a connection is closed at once
//! (counted as refused), so a flood of clients costs a socket each, never a task. A connection
//! on which no byte moves either way for `idle_timeout` (an idle keep-alive, a client sending
//! its headers slowly or not at all, one not reading its response) is closed, giving its place
//! back. A request must also be answered (its first response byte written) within
//! `request_timeout + idle_timeout` of its first byte, so a client that trickles its headers a
//! byte at a time, never idle, cannot hold its place either: hyper bounds header reading only
//! with a timer axum's server does not give it.
//!
//! With TLS the handshake runs inside the same bounds: it happens on the connection's first
//! read, after the connection took its place, and no request byte moves until it is done, so
//! a handshake that does not finish within `idle_timeout` closes the connection like an idle
//! one. A client speaking plain HTTP to the TLS listener is answered a plain 400 saying so.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tinymq_tls::{ServerTls, ServerTlsStream, TlsAcceptor, TLS_HANDSHAKE_RECORD_TYPE};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use crate::HttpLimits;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// What the listener counts, read at scrape time.
#[derive(Debug, Default)]
pub(crate) struct ConnectionCounters {
    pub open: AtomicU64,
    pub accepted: AtomicU64,
    pub refused: AtomicU64,
    pub idle_closed: AtomicU64,
    /// Closed because a request was not received and answered in time (slow senders).
    pub slow_closed: AtomicU64,
    /// Closed because the TLS handshake failed (or the client spoke plain HTTP to HTTPS).
    pub tls_failed: AtomicU64,
    /// Requests refused for credentials that did not verify.
    pub auth_failed: AtomicU64,
}

pub(crate) struct LimitedListener {
    inner: TcpListener,
    /// Serve HTTPS: each connection gets the configuration in force when it is accepted.
    tls: Option<ServerTls>,
    permits: Arc<Semaphore>,
    counters: Arc<ConnectionCounters>,
    idle_timeout: Duration,
    request_limit: Duration,
}

impl LimitedListener {
    /// `request_timeout` bounds the handler (the router answers 408 past it); the time to
    /// receive a request's headers gets `idle_timeout` on top of it.
    pub fn new(
        inner: TcpListener,
        limits: &HttpLimits,
        tls: Option<ServerTls>,
        counters: Arc<ConnectionCounters>,
    ) -> Self {
        LimitedListener {
            inner,
            tls,
            permits: Arc::new(Semaphore::new(limits.connections_max)),
            counters,
            idle_timeout: limits.idle_timeout,
            request_limit: limits.request_timeout.saturating_add(limits.idle_timeout),
        }
    }
}

impl axum::serve::Listener for LimitedListener {
    type Io = LimitedStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            // axum's own accept logs and retries on errors (EMFILE waits a second).
            let (stream, addr) = axum::serve::Listener::accept(&mut self.inner).await;
            let Ok(permit) = self.permits.clone().try_acquire_owned() else {
                self.counters.refused.fetch_add(1, Ordering::Relaxed);
                drop(stream);
                continue;
            };
            self.counters.accepted.fetch_add(1, Ordering::Relaxed);
            self.counters.open.fetch_add(1, Ordering::Relaxed);
            let stream = match &self.tls {
                None => Transport::Plain(stream),
                Some(tls) => Transport::Tls(Box::new(TlsState::Sniffing(stream, tls.acceptor()))),
            };
            let io = LimitedStream {
                stream,
                _permit: permit,
                counters: self.counters.clone(),
                idle_timeout: self.idle_timeout,
                idle: Box::pin(tokio::time::sleep(self.idle_timeout)),
                request_limit: self.request_limit,
                request: Box::pin(tokio::time::sleep(self.request_limit)),
                request_armed: false,
                timed_out: false,
            };
            return (io, addr);
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// The peer's address, for log lines about a request (axum's `ConnectInfo`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PeerAddr(pub std::net::SocketAddr);

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, LimitedListener>>
    for PeerAddr
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, LimitedListener>) -> Self {
        PeerAddr(*stream.remote_addr())
    }
}

/// An accepted connection holding its place under the limit until dropped.
pub(crate) struct LimitedStream {
    stream: Transport,
    _permit: OwnedSemaphorePermit,
    counters: Arc<ConnectionCounters>,
    idle_timeout: Duration,
    /// Fires `idle_timeout` after the last byte moved.
    idle: Pin<Box<Sleep>>,
    request_limit: Duration,
    /// Fires `request_limit` after the first byte read since the last byte written, while
    /// `request_armed`.
    request: Pin<Box<Sleep>>,
    request_armed: bool,
    timed_out: bool,
}

impl Drop for LimitedStream {
    fn drop(&mut self) {
        self.counters.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl LimitedStream {
    fn moved(&mut self) {
        let deadline = later(self.idle_timeout);
        self.idle.as_mut().reset(deadline);
    }

    /// Bytes of a request came in: the first since the last answer starts its clock.
    fn received(&mut self) {
        self.moved();
        if !self.request_armed {
            self.request_armed = true;
            let deadline = later(self.request_limit);
            self.request.as_mut().reset(deadline);
        }
    }

    /// Bytes of an answer went out: the request was served in time.
    fn answered(&mut self) {
        self.moved();
        self.request_armed = false;
    }

    /// Called while the socket has nothing to give or take: an error once the connection
    /// has been idle too long, or a request has gone unanswered too long since its first
    /// byte, which makes the server drop it.
    fn check_idle<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        if self.timed_out {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "timed out")));
        }
        let why = if self.idle.as_mut().poll(cx).is_ready() {
            self.counters.idle_closed.fetch_add(1, Ordering::Relaxed);
            "no byte moved for http_idle_timeout_ms"
        } else if self.request_armed && self.request.as_mut().poll(cx).is_ready() {
            self.counters.slow_closed.fetch_add(1, Ordering::Relaxed);
            "a request went unanswered for http_request_timeout_ms + http_idle_timeout_ms"
        } else {
            return Poll::Pending;
        };
        self.timed_out = true;
        Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, why)))
    }
}

/// `wait` from now; a wait past what an `Instant` holds (limits are operator input) is
/// a year, which no connection outlives by idling.
fn later(wait: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(wait)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

impl AsyncRead for LimitedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match this.stream.poll_read(cx, buf, &this.counters) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    self.received();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => self.check_idle(cx),
        }
    }
}

impl AsyncWrite for LimitedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        match this.stream.poll_write(cx, buf, &this.counters) {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    self.answered();
                }
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => self.check_idle(cx),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.stream {
            Transport::Plain(s) => Pin::new(s).poll_flush(cx),
            Transport::Tls(t) => match &mut **t {
                TlsState::Ready(s) => Pin::new(s).poll_flush(cx),
                _ => Poll::Ready(Ok(())),
            },
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.stream {
            Transport::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Transport::Tls(t) => match &mut **t {
                TlsState::Ready(s) => Pin::new(s).poll_shutdown(cx),
                TlsState::Sniffing(s, _) => Pin::new(s).poll_shutdown(cx),
                _ => Poll::Ready(Ok(())),
            },
        }
    }
}

/// The bytes under a connection: plain TCP, or TLS once its handshake is done.
enum Transport {
    Plain(TcpStream),
    Tls(Box<TlsState>),
}

enum TlsState {
    /// Waiting for the first byte: a TLS ClientHello, or a plain HTTP request.
    Sniffing(TcpStream, TlsAcceptor),
    Accepting(tokio_rustls::Accept<TcpStream>),
    Ready(ServerTlsStream<TcpStream>),
    Failed,
}

/// What a plain HTTP client on the HTTPS listener reads before it is closed.
const PLAIN_ON_TLS: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n\
Connection: close\r\nContent-Length: 46\r\n\r\nthis listener speaks HTTPS: use https:// URLs\n";

impl Transport {
    /// Ready once bytes of requests can move: at once for plain TCP, after the handshake
    /// for TLS.
    fn poll_open(
        &mut self,
        cx: &mut Context<'_>,
        counters: &ConnectionCounters,
    ) -> Poll<io::Result<()>> {
        let Transport::Tls(state) = self else {
            return Poll::Ready(Ok(()));
        };
        loop {
            let next = match &mut **state {
                TlsState::Ready(_) => return Poll::Ready(Ok(())),
                TlsState::Failed => return Poll::Ready(Err(handshake_failed("it failed before"))),
                TlsState::Sniffing(stream, _) => {
                    let mut first = [0u8; 1];
                    let mut peeked = ReadBuf::new(&mut first);
                    match stream.poll_peek(cx, &mut peeked) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Err(e)) => Err(e),
                        Poll::Ready(Ok(0)) => Err(handshake_failed("closed before a ClientHello")),
                        Poll::Ready(Ok(_)) if first[0] == TLS_HANDSHAKE_RECORD_TYPE => Ok(None),
                        Poll::Ready(Ok(_)) => {
                            refuse_plain(stream);
                            Err(handshake_failed("plain HTTP on the HTTPS listener"))
                        }
                    }
                }
                TlsState::Accepting(accept) => match Pin::new(accept).poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(stream)) => Ok(Some(stream)),
                    Poll::Ready(Err(e)) => Err(e),
                },
            };
            let taken = std::mem::replace(&mut **state, TlsState::Failed);
            match (next, taken) {
                (Ok(None), TlsState::Sniffing(stream, acceptor)) => {
                    **state = TlsState::Accepting(acceptor.accept(stream));
                }
                (Ok(Some(stream)), _) => **state = TlsState::Ready(stream),
                (Ok(None), _) => return Poll::Ready(Err(handshake_failed("out of order"))),
                (Err(e), _) => {
                    counters.tls_failed.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(error = %e, "HTTPS connection closed in its TLS handshake");
                    return Poll::Ready(Err(e));
                }
            }
        }
    }

    fn poll_read(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
        counters: &ConnectionCounters,
    ) -> Poll<io::Result<()>> {
        match self.poll_open(cx, counters) {
            Poll::Ready(Ok(())) => {}
            other => return other,
        }
        match self {
            Transport::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Transport::Tls(t) => match &mut **t {
                TlsState::Ready(s) => Pin::new(s).poll_read(cx, buf),
                _ => Poll::Ready(Err(handshake_failed("not open"))),
            },
        }
    }

    fn poll_write(
        &mut self,
        cx: &mut Context<'_>,
        buf: &[u8],
        counters: &ConnectionCounters,
    ) -> Poll<io::Result<usize>> {
        match self.poll_open(cx, counters) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        }
        match self {
            Transport::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Transport::Tls(t) => match &mut **t {
                TlsState::Ready(s) => Pin::new(s).poll_write(cx, buf),
                _ => Poll::Ready(Err(handshake_failed("not open"))),
            },
        }
    }
}

fn handshake_failed(why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        format!("TLS handshake: {why}"),
    )
}

/// Tells a plain HTTP client it reached the HTTPS listener: best effort, without waiting
/// (the answer is smaller than any socket buffer). The request already received is read
/// first, so closing sends a FIN the client reads the answer before, not a reset.
fn refuse_plain(stream: &TcpStream) {
    let mut drain = [0u8; 4096];
    for _ in 0..16 {
        if !matches!(stream.try_read(&mut drain), Ok(n) if n > 0) {
            break;
        }
    }
    let _ = stream.try_write(PLAIN_ON_TLS);
}
