//! The accept loop: at most `connections_max` connections at once; one more is told why in a
//! `LIMIT_EXCEEDED` frame and closed, without the loop waiting for it.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tinymq_protocol::ErrorCode;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::{connection, error_frame, ConnectionStats, ListenerLimits, ListenerSecurity, Service};

/// Pause after a failed accept (out of file descriptors and the like) instead of spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Accepts connections on `listener` and serves each with `service` until `shutdown` is
/// cancelled. Connection tasks are spawned on `tasks`, so waiting for the tracker waits for
/// their graceful end.
pub async fn serve<S: Service>(
    listener: TcpListener,
    service: Arc<S>,
    limits: ListenerLimits,
    shutdown: CancellationToken,
    tasks: TaskTracker,
) {
    let stats = Arc::new(ConnectionStats::default());
    serve_counted(listener, service, limits, shutdown, tasks, stats).await
}

/// [`serve`], counting connections in `stats`.
pub async fn serve_counted<S: Service>(
    listener: TcpListener,
    service: Arc<S>,
    limits: ListenerLimits,
    shutdown: CancellationToken,
    tasks: TaskTracker,
    stats: Arc<ConnectionStats>,
) {
    let security = ListenerSecurity::default();
    serve_secure(listener, service, limits, security, shutdown, tasks, stats).await
}

/// [`serve_counted`] with `security` (TLS, authentication) asked of every connection.
pub async fn serve_secure<S: Service>(
    listener: TcpListener,
    service: Arc<S>,
    limits: ListenerLimits,
    security: ListenerSecurity,
    shutdown: CancellationToken,
    tasks: TaskTracker,
    stats: Arc<ConnectionStats>,
) {
    let limits = Arc::new(limits);
    let security = Arc::new(security);
    let connections_max = limits.connections_max;
    let (each_shutdown, each_stats) = (shutdown.clone(), stats.clone());
    let serve_one = move |stream: TcpStream, addr: SocketAddr| {
        let (service, limits) = (service.clone(), limits.clone());
        let (shutdown, stats) = (each_shutdown.clone(), each_stats.clone());
        // The node's one count of failed logins, shared with its other listeners.
        let login = (security.clone(), security.login_limiter.clone());
        connection::run(stream, addr, service, limits, login, shutdown, stats)
    };
    let refuse_one = move |stream: &TcpStream, addr| refuse(stream, addr, connections_max);
    let accepting = Accepting {
        name: "native",
        listener,
        connections_max,
        stats,
        shutdown,
        tasks,
    };
    accept_connections(accepting, refuse_one, serve_one).await
}

/// What an accept loop serves: a listener (`name`, for its log lines), at most
/// `connections_max` connections at once, counted in `stats`, spawned on `tasks`, until
/// `shutdown`.
pub struct Accepting {
    pub name: &'static str,
    pub listener: TcpListener,
    pub connections_max: usize,
    pub stats: Arc<ConnectionStats>,
    pub shutdown: CancellationToken,
    pub tasks: TaskTracker,
}

/// The accept loop of a listener of either protocol ([`Accepting`]): each connection is
/// served by `serve`; one past `connections_max` is handed to `refuse` (which may tell it why)
/// and dropped, without the loop waiting for it. Counts connections (open, accepted, refused)
/// for metrics. Returns when `shutdown` is cancelled.
pub async fn accept_connections<Serve, Fut>(
    accepting: Accepting,
    refuse: impl Fn(&TcpStream, SocketAddr),
    serve: Serve,
) where
    Serve: Fn(TcpStream, SocketAddr) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let Accepting {
        name,
        listener,
        connections_max,
        stats,
        shutdown,
        tasks,
    } = accepting;
    let open = Arc::new(Semaphore::new(connections_max));
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.cancelled() => return,
        };
        let (stream, addr) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(listener = name, error = %e, "accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            stats.refused.fetch_add(1, Ordering::Relaxed);
            refuse(&stream, addr);
            continue;
        };
        let _ = stream.set_nodelay(true);
        stats.accepted.fetch_add(1, Ordering::Relaxed);
        stats.open.fetch_add(1, Ordering::Relaxed);
        let served = serve(stream, addr);
        let open = OpenConnection {
            stats: stats.clone(),
            _permit: permit,
        };
        tasks.spawn(async move {
            served.await;
            drop(open);
        });
    }
}

/// A connection being served: its place under `connections_max` and its count in the open
/// gauge, both given back when it ends, however it ends (a panicking task included).
struct OpenConnection {
    stats: Arc<ConnectionStats>,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.stats.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Tells a connection over the limit why it is closed: one error frame (message id 0), written
/// only if the fresh socket takes it at once (it always has room for so few bytes).
fn refuse(stream: &TcpStream, addr: SocketAddr, connections_max: usize) {
    let why = format!(
        "connections_max ({connections_max}) reached: this server has no room for another connection; closing it"
    );
    let frame = error_frame(0, 0, ErrorCode::LIMIT_EXCEEDED, why);
    let _ = stream.try_write(&frame);
    tracing::warn!(peer = %addr, limit = connections_max, "connections_max reached; refused a connection");
}
