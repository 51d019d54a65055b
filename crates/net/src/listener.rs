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
    let limiter = security.login_limiter.clone();
    let open = Arc::new(Semaphore::new(limits.connections_max));
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.cancelled() => return,
        };
        let (stream, addr) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            stats.refused.fetch_add(1, Ordering::Relaxed);
            refuse(&stream, addr, limits.connections_max);
            continue;
        };
        stats.accepted.fetch_add(1, Ordering::Relaxed);
        stats.open.fetch_add(1, Ordering::Relaxed);
        let (service, limits, shutdown) = (service.clone(), limits.clone(), shutdown.clone());
        let (security, stats, limiter) = (security.clone(), stats.clone(), limiter.clone());
        tasks.spawn(async move {
            connection::run(
                stream,
                addr,
                service,
                limits,
                (security, limiter),
                shutdown,
                stats.clone(),
            )
            .await;
            stats.open.fetch_sub(1, Ordering::Relaxed);
            drop(permit);
        });
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
