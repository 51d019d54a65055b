//! The HTTP listener's limits: like the native port's, a named bound on everything a client
//! controls.

use std::time::Duration;

/// Limits of one HTTP listener.
#[derive(Debug, Clone)]
pub struct HttpLimits {
    /// Most open HTTP connections; one more is closed at once after accepting.
    pub connections_max: usize,
    /// Largest request body; a larger one is answered 413 before it is read whole.
    pub body_bytes_max: usize,
    /// A request not answered in this time is answered 408.
    pub request_timeout: Duration,
    /// A connection on which no byte moves either way for this long is closed: an idle
    /// keep-alive, a client that sends its headers slowly or not at all, or one that does not
    /// read its response. At least `request_timeout`, so a request being worked on (no byte
    /// moves meanwhile) is answered first.
    pub idle_timeout: Duration,
    /// Partitions with their own series in `/metrics`; past it, only the totals (cardinality
    /// stays bounded however many partitions a node holds).
    pub partition_series_max: usize,
    /// Most principals the REST API keeps a cluster client (with its connections) for at
    /// once; past it the least recently used is dropped.
    pub principal_clients_max: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            connections_max: 64,
            body_bytes_max: 1 << 20,
            request_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            partition_series_max: 1000,
            principal_clients_max: 64,
        }
    }
}

impl HttpLimits {
    /// Refuses limits no listener could work with.
    pub fn check(&self) -> Result<(), String> {
        // The listener counts places with a semaphore, which holds at most MAX_PERMITS.
        let most = tokio::sync::Semaphore::MAX_PERMITS;
        if self.connections_max == 0 || self.connections_max > most {
            return Err(format!("http_connections_max must be in 1..={most}"));
        }
        if self.principal_clients_max == 0 {
            return Err("http_principal_clients_max must be at least 1".into());
        }
        if self.request_timeout.is_zero() {
            return Err("http_request_timeout_ms must be at least 1".into());
        }
        if self.idle_timeout < self.request_timeout {
            return Err(
                "http_idle_timeout_ms must be at least http_request_timeout_ms (a request being answered moves no byte)"
                    .into(),
            );
        }
        Ok(())
    }
}
