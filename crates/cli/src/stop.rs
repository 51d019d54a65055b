//! How a long-running node (`tinymq server|broker|meta`) stops: the first SIGTERM or SIGINT
//! starts a clean shutdown; a second one, or the shutdown outliving
//! [`tinymq_node::Node::shutdown_deadline`], ends the process at once with an error, so a stop
//! never hangs a supervisor (systemd, Kubernetes, a test) waiting on it.

use tokio::signal::unix::{signal, Signal, SignalKind};

/// Exit code when a second signal cut the shutdown short.
const EXIT_FORCED: i32 = 130;
/// Exit code when the shutdown outlived its deadline.
const EXIT_SHUTDOWN_HUNG: i32 = 71;

/// The stop signals' handlers. Installed when created (not when first polled), so a signal
/// that arrives right after the node says it listens is handled.
pub struct StopSignals {
    term: Signal,
    int: Signal,
}

impl StopSignals {
    pub fn install() -> std::io::Result<StopSignals> {
        Ok(StopSignals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Waits for the next SIGTERM or SIGINT and names it.
    pub async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

/// Runs `node`'s shutdown, bounded by its deadline and cut short by another signal; returns
/// only when the shutdown finished (the other two end the process).
pub async fn shut_down(node: tinymq_node::Node, signals: &mut StopSignals) {
    let deadline = node.shutdown_deadline();
    tokio::select! {
        () = node.shutdown() => {}
        signal = signals.next() => {
            tracing::warn!(signal, "second stop signal: exiting without finishing the shutdown");
            std::process::exit(EXIT_FORCED);
        }
        () = tokio::time::sleep(deadline) => {
            tracing::error!(?deadline, "the shutdown did not finish within its deadline; exiting");
            std::process::exit(EXIT_SHUTDOWN_HUNG);
        }
    }
}
