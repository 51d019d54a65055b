//! Accepting HTTP connections under `connections_max`: past it a connection is closed at once
//! (counted as refused), so a flood of clients costs a socket each, never a task. A connection
//! on which no byte moves either way for `idle_timeout` (an idle keep-alive, a client sending
//! its headers slowly or not at all, one not reading its response) is closed, giving its place
//! back.

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
}

pub(crate) struct LimitedListener {
    inner: TcpListener,
    permits: Arc<Semaphore>,
    counters: Arc<ConnectionCounters>,
    idle_timeout: Duration,
}

impl LimitedListener {
    pub fn new(
        inner: TcpListener,
        max: usize,
        idle_timeout: Duration,
        counters: Arc<ConnectionCounters>,
    ) -> Self {
        LimitedListener {
            inner,
            permits: Arc::new(Semaphore::new(max)),
            counters,
            idle_timeout,
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
    timed_out: bool,
}

impl Drop for LimitedStream {
    fn drop(&mut self) {
        self.counters.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl LimitedStream {
    fn moved(&mut self) {
        let deadline = Instant::now() + self.idle_timeout;
        self.idle.as_mut().reset(deadline);
    }

    /// Called while the socket has nothing to give or take: an error once the connection
    /// has been idle too long, which makes the server drop it.
    fn check_idle<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        if self.timed_out || self.idle.as_mut().poll(cx).is_ready() {
            if !self.timed_out {
                self.timed_out = true;
                self.counters.idle_closed.fetch_add(1, Ordering::Relaxed);
            }
            let why = "no byte moved for http_idle_timeout_ms";
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, why)));
        }
        Poll::Pending
    }
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
                    self.moved();
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
                    self.moved();
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
