//! Accepting HTTP connections under `connections_max`: past it a connection is closed at once
//! (counted as refused), so a flood of clients costs a socket each, never a task.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// What the listener counts, read at scrape time.
#[derive(Debug, Default)]
pub(crate) struct ConnectionCounters {
    pub open: AtomicU64,
    pub accepted: AtomicU64,
    pub refused: AtomicU64,
}

pub(crate) struct LimitedListener {
    inner: TcpListener,
    permits: Arc<Semaphore>,
    counters: Arc<ConnectionCounters>,
}

impl LimitedListener {
    pub fn new(inner: TcpListener, max: usize, counters: Arc<ConnectionCounters>) -> Self {
        LimitedListener {
            inner,
            permits: Arc::new(Semaphore::new(max)),
            counters,
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
}

impl Drop for LimitedStream {
    fn drop(&mut self) {
        self.counters.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl AsyncRead for LimitedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for LimitedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
