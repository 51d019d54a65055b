//! Joining the cluster at start: the data directory's identity (which broker and cluster it
//! belongs to, so a directory is never served under another id or against another cluster's
//! metadata), registration and the first image.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tinymq_storage::{OsStorage, Storage};

use crate::cluster::ClusterView;

/// The identity file in a broker's data directory.
const IDENTITY_FILE: &str = "broker.json";
/// Written to the data directory when a broker stops cleanly (every partition flushed and
/// closed) and removed when it starts: missing at a start, the previous run crashed, and the
/// MetaServer is told so (a replica whose unflushed tail may be gone is not elected from).
const CLEAN_SHUTDOWN_FILE: &str = "clean-shutdown";
/// A `broker.json` longer than this is not one the broker wrote (it holds two short fields).
const IDENTITY_BYTES_MAX: u64 = 64 << 10;
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

/// The data directory's identity, if it has one. A damaged file is an error naming it (the
/// broker does not start rather than guess which cluster the directory belongs to).
fn read_identity(storage: &dyn Storage, dir: &Path) -> Result<Option<Identity>, JoinError> {
    let path = dir.join(IDENTITY_FILE);
    let Some(bytes) = tinymq_storage::read_file(storage, &path, IDENTITY_BYTES_MAX)? else {
        return Ok(None);
    };
    let identity = serde_json::from_slice(&bytes).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{} is damaged ({e}); restore it, or move the data directory aside",
                path.display()
            ),
        )
    })?;
    Ok(Some(identity))
}

/// Records the data directory's identity (`tinymq_storage::replace_file`: the file is there
/// whole, or not at all).
fn write_identity(storage: &dyn Storage, dir: &Path, identity: &Identity) -> std::io::Result<()> {
    let bytes = serde_json::to_vec_pretty(identity).map_err(std::io::Error::other)?;
    tinymq_storage::replace_file(storage, &dir.join(IDENTITY_FILE), &bytes)?;
    Ok(())
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
        OsStorage.create_dir_all(&dir)?;
        let identity = read_identity(&OsStorage, &dir)?;
        // A directory that never belonged to a broker holds nothing to lose.
        let clean = take_clean_shutdown_marker(&OsStorage, &dir)? || identity.is_none();
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
            let dir = data_dir.to_path_buf();
            blocking(move || Ok(write_identity(&OsStorage, &dir, &identity)?)).await?;
            Ok(epoch)
        }
    }
}

/// Whether the last run left the clean-shutdown marker; removes it (durably), so that a crash
/// of this run is seen at the next start.
fn take_clean_shutdown_marker(storage: &dyn Storage, dir: &Path) -> std::io::Result<bool> {
    match storage.remove(&dir.join(CLEAN_SHUTDOWN_FILE)) {
        Ok(()) => {
            storage.sync_dir(dir)?;
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Leaves the clean-shutdown marker: call once every partition is flushed and closed.
pub fn mark_clean_shutdown(data_dir: &Path) -> std::io::Result<()> {
    tinymq_storage::replace_file(&OsStorage, &data_dir.join(CLEAN_SHUTDOWN_FILE), b"")?;
    Ok(())
}

/// Runs disk work on the blocking pool, not on an async thread.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, JoinError> + Send + 'static,
) -> Result<T, JoinError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| JoinError::Io(std::io::Error::other(e)))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use tinymq_storage::fault::{CrashMode, Faults, FaultyStorage};

    fn identity() -> Identity {
        Identity {
            broker_id: 3,
            cluster_id: "cluster-a".into(),
        }
    }

    /// Issue 28: recording `broker.json` on a failing disk (ENOSPC, a torn write, EIO on its
    /// fsync) is refused with an error naming it; no part of it is ever visible, before or
    /// after a power cut; a later write is read back whole after one.
    #[test]
    fn a_failed_identity_write_leaves_no_partial_file_and_a_later_one_survives_a_crash() {
        let dir = Path::new("/data");
        for fault in Faults::each_write_fault(10) {
            let fs = FaultyStorage::new();
            fs.create_dir_all(dir).unwrap();
            fs.set_faults(fault.clone());
            let e = write_identity(&fs, dir, &identity()).unwrap_err();
            assert!(e.to_string().contains(IDENTITY_FILE), "{fault:?}: {e}");
            fs.set_faults(Faults::default());
            assert!(read_identity(&fs, dir).unwrap().is_none(), "{fault:?}");
            fs.crash(CrashMode::KeepUnsyncedPrefix(1 << 20));
            assert!(read_identity(&fs, dir).unwrap().is_none(), "{fault:?}");
            write_identity(&fs, dir, &identity()).unwrap();
            fs.crash(CrashMode::LoseUnsynced);
            let read = read_identity(&fs, dir).unwrap().unwrap();
            assert_eq!((read.broker_id, read.cluster_id.as_str()), (3, "cluster-a"));
            // A failed replace of an existing identity keeps the old one whole.
            fs.set_faults(fault.clone());
            let other = Identity {
                broker_id: 4,
                cluster_id: "cluster-b".into(),
            };
            assert!(write_identity(&fs, dir, &other).is_err());
            fs.set_faults(Faults::default());
            fs.crash(CrashMode::KeepUnsyncedPrefix(1 << 20));
            let read = read_identity(&fs, dir).unwrap().unwrap();
            assert_eq!((read.broker_id, read.cluster_id.as_str()), (3, "cluster-a"));
        }
    }

    /// A damaged `broker.json` is an error naming it (the broker does not start), never a
    /// panic.
    #[test]
    fn a_damaged_identity_is_an_error_naming_the_file() {
        let fs = FaultyStorage::new();
        let dir = Path::new("/data");
        fs.create_dir_all(dir).unwrap();
        tinymq_storage::replace_file(&fs, &dir.join(IDENTITY_FILE), b"{\"broker_id\": 3,").unwrap();
        let e = read_identity(&fs, dir).unwrap_err();
        assert!(e.to_string().contains("broker.json is damaged"), "{e}");
    }

    /// The clean-shutdown marker is taken once, durably: after a crash it stays taken.
    #[test]
    fn the_clean_shutdown_marker_is_taken_durably() {
        let fs = FaultyStorage::new();
        let dir = Path::new("/data");
        fs.create_dir_all(dir).unwrap();
        tinymq_storage::replace_file(&fs, &dir.join(CLEAN_SHUTDOWN_FILE), b"").unwrap();
        assert!(take_clean_shutdown_marker(&fs, dir).unwrap());
        fs.crash(CrashMode::LoseUnsynced);
        assert!(!take_clean_shutdown_marker(&fs, dir).unwrap());
    }
}
