//! Accepting HTTP connections under `connections_max`: past it a connection is closed at once
//! (counted as refused), so a flood of clients costs a socket each, never a task. A connection
//! on which no byte moves either way for `idle_timeout` (an idle keep-alive, a client sending
//! its headers slowly or not at all, one not reading its response) is closed, giving its place
//! back. A request must also be answered (its first response byte written) within
//! `request_timeout + idle_timeout` of its first byte, so a client that trickles its headers a
//! byte at a time, never idle, cannot hold its place either: hyper bounds header reading only
//! with a timer axum's server does not give it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
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
}

pub(crate) struct LimitedListener {
    inner: TcpListener,
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
        max: usize,
        idle_timeout: Duration,
        request_timeout: Duration,
        counters: Arc<ConnectionCounters>,
    ) -> Self {
        LimitedListener {
            inner,
            permits: Arc::new(Semaphore::new(max)),
            counters,
            idle_timeout,
            request_limit: request_timeout.saturating_add(idle_timeout),
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

/// An accepted connection holding its place under the limit until dropped.
pub(crate) struct LimitedStream {
    stream: TcpStream,
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
        match Pin::new(&mut self.stream).poll_read(cx, buf) {
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
        match Pin::new(&mut self.stream).poll_write(cx, buf) {
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
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
