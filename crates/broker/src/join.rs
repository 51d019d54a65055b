//! Joining the cluster at start: the data directory's identity (which broker and cluster it
//! belongs to, so a directory is never served under another id or against another cluster's
//! metadata), registration and the first image.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cluster::ClusterView;

/// The identity file in a broker's data directory.
const IDENTITY_FILE: &str = "broker.json";
/// Written to the data directory when a broker stops cleanly (every partition flushed and
/// closed) and removed when it starts: missing at a start, the previous run crashed, and the
/// MetaServer is told so (a replica whose unflushed tail may be gone is not elected from).
const CLEAN_SHUTDOWN_FILE: &str = "clean-shutdown";
/// How long a start waits for the MetaServer to name the cluster.
const CLUSTER_ID_WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error("data directory {dir} belongs to broker {stored}, not {asked}; start it with --id {stored} or use another directory")]
    WrongBrokerId {
        dir: PathBuf,
        stored: u32,
        asked: u32,
    },
    #[error("data directory {dir} belongs to cluster {stored}, but the MetaServer is cluster {current}; refusing to serve it")]
    WrongCluster {
        dir: PathBuf,
        stored: String,
        current: String,
    },
    #[error("registration refused: {0}")]
    Refused(String),
    #[error("the MetaServer named no cluster within {0:?}")]
    NoClusterId(Duration),
    #[error("data directory: {0}")]
    Io(#[from] std::io::Error),
}

#[derive(Debug, Serialize, Deserialize)]
struct Identity {
    broker_id: u32,
    cluster_id: String,
}

fn read_identity(dir: &Path) -> Result<Option<Identity>, JoinError> {
    match std::fs::read(dir.join(IDENTITY_FILE)) {
        Ok(bytes) => Ok(Some(
            serde_json::from_slice(&bytes).map_err(std::io::Error::other)?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Registers the broker and waits for an image that names the cluster; checks and records the
/// data directory's identity. Returns the registration epoch.
pub async fn join(
    cluster: &ClusterView,
    data_dir: &Path,
    host: &str,
    port: u16,
) -> Result<u64, JoinError> {
    let dir = data_dir.to_path_buf();
    let (stored, clean_shutdown) = blocking(move || {
        std::fs::create_dir_all(&dir)?;
        let identity = read_identity(&dir)?;
        // A directory that never belonged to a broker holds nothing to lose.
        let clean = take_clean_shutdown_marker(&dir)? || identity.is_none();
        Ok((identity, clean))
    })
    .await?;
    if !clean_shutdown {
        tracing::warn!(dir = %data_dir.display(), "the previous run did not stop cleanly");
    }
    if let Some(stored) = stored.as_ref().filter(|s| s.broker_id != cluster.broker_id) {
        return Err(JoinError::WrongBrokerId {
            dir: data_dir.into(),
            stored: stored.broker_id,
            asked: cluster.broker_id,
        });
    }
    let epoch = cluster
        .register(host, port, clean_shutdown)
        .await
        .map_err(|e| JoinError::Refused(e.message))?;
    let deadline = tokio::time::Instant::now() + CLUSTER_ID_WAIT;
    while cluster.cluster_id().is_empty() {
        if tokio::time::Instant::now() > deadline {
            return Err(JoinError::NoClusterId(CLUSTER_ID_WAIT));
        }
        if cluster.refresh(Duration::from_millis(500)).await.is_err() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let current = cluster.cluster_id();
    match stored {
        Some(stored) if stored.cluster_id != current => Err(JoinError::WrongCluster {
            dir: data_dir.into(),
            stored: stored.cluster_id,
            current,
        }),
        Some(_) => Ok(epoch),
        None => {
            let identity = Identity {
                broker_id: cluster.broker_id,
                cluster_id: current,
            };
            let bytes = serde_json::to_vec_pretty(&identity).map_err(std::io::Error::other)?;
            let path = data_dir.join(IDENTITY_FILE);
            blocking(move || Ok(crate::durable_file::write_atomically(&path, &bytes)?)).await?;
            Ok(epoch)
        }
    }
}

/// Whether the last run left the clean-shutdown marker; removes it (durably), so that a crash
/// of this run is seen at the next start.
fn take_clean_shutdown_marker(dir: &Path) -> std::io::Result<bool> {
    match std::fs::remove_file(dir.join(CLEAN_SHUTDOWN_FILE)) {
        Ok(()) => {
            std::fs::File::open(dir)?.sync_all()?;
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Leaves the clean-shutdown marker: call once every partition is flushed and closed.
pub fn mark_clean_shutdown(data_dir: &Path) -> std::io::Result<()> {
    crate::durable_file::write_atomically(&data_dir.join(CLEAN_SHUTDOWN_FILE), b"")
}

/// Runs disk work on the blocking pool, not on an async thread.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, JoinError> + Send + 'static,
) -> Result<T, JoinError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| JoinError::Io(std::io::Error::other(e)))?
}
