//! A connection to the coordinator of one key (a transactional id, a producer group's half
//! messages): found with FindCoordinator, kept while it lives, and found again when a request
//! is refused NOT_COORDINATOR or the connection fails; requests retry what is retriable
//! until their deadline.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tinymq_protocol::{messages as m, ErrorCode};

use crate::cluster::Cluster;
use crate::connection::Connection;
use crate::error::{check, ClientError};

const RETRY_BACKOFF: Duration = Duration::from_millis(20);
const RETRY_BACKOFF_MAX: Duration = Duration::from_millis(500);

/// The coordinator of `key` (FindCoordinator `key_type`).
#[derive(Debug)]
pub(crate) struct CoordinatorLink {
    key: String,
    key_type: u32,
    connection: tokio::sync::Mutex<Option<Arc<Connection>>>,
}

impl CoordinatorLink {
    pub(crate) fn new(key: String, key_type: u32) -> CoordinatorLink {
        CoordinatorLink {
            key,
            key_type,
            connection: tokio::sync::Mutex::new(None),
        }
    }

    async fn connection(&self, cluster: &Cluster) -> Result<Arc<Connection>, ClientError> {
        let mut slot = self.connection.lock().await;
        if let Some(c) = slot.as_ref().filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        let found = cluster
            .request(&m::FindCoordinatorRequest {
                group_id: self.key.clone(),
                key_type: self.key_type,
            })
            .await?;
        check(found.error.as_ref())?;
        let connection = cluster
            .connection(&format!("{}:{}", found.host, found.port))
            .await?;
        *slot = Some(connection.clone());
        Ok(connection)
    }

    /// Sends `request` to the coordinator with `timeout` per attempt, retrying what is
    /// retriable until `deadline`; `top` reads the answer's error, `seen` sees each failure.
    pub(crate) async fn call<R: tinymq_protocol::Request>(
        &self,
        cluster: &Cluster,
        request: &R,
        (timeout, deadline): (Duration, Instant),
        top: impl Fn(&R::Response) -> Option<&m::Error>,
        seen: impl Fn(&ClientError),
    ) -> Result<R::Response, ClientError> {
        let mut backoff = RETRY_BACKOFF;
        loop {
            let attempt = async {
                let c = self.connection(cluster).await?;
                let response = c.request(request, timeout).await?;
                check(top(&response))?;
                Ok::<_, ClientError>(response)
            }
            .await;
            let error = match attempt {
                Ok(response) => return Ok(response),
                Err(e) => e,
            };
            seen(&error);
            if !error.is_retriable() || Instant::now() > deadline {
                return Err(error);
            }
            if matches!(
                error.code(),
                Some(ErrorCode::NOT_COORDINATOR) | Some(ErrorCode::LEADER_NOT_AVAILABLE) | None
            ) {
                *self.connection.lock().await = None;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(RETRY_BACKOFF_MAX);
        }
    }
}
