//! The Raft state machine: committed commands are executed against the image with
//! [`crate::execute`] and their records applied; a snapshot is the serialized image with the
//! last applied log id and membership, stored in `meta-snapshot.json`.
//!
//! The image is rebuilt on start from the snapshot plus the log entries after it (openraft
//! re-applies them), so applying needs no fsync of its own. Snapshot files are written and read
//! on tokio's blocking pool.

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use openraft::storage::{RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, StorageError,
    StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};

use super::durable_file::{blocking, write_atomically};
use super::{CommandResult, TypeConfig};
use crate::{execute, MetadataImage, Reply};

const SNAPSHOT_FILE: &str = "meta-snapshot.json";

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Applied {
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, BasicNode>,
    image: MetadataImage,
}

/// Whether `data` is a snapshot this state machine can install (checked before a snapshot
/// from a peer reaches openraft, which purges its log for it).
pub fn check_snapshot_data(data: &[u8]) -> Result<(), String> {
    serde_json::from_slice::<Applied>(data)
        .map(drop)
        .map_err(|e| format!("the snapshot is not a metadata image: {e}"))
}

#[derive(Debug, Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<u64, BasicNode>,
    data: Vec<u8>,
}

#[derive(Debug, Clone)]
pub struct StateMachine {
    dir: PathBuf,
    applied: Arc<RwLock<Applied>>,
    /// The image alone, shared with readers of the node.
    image: Arc<RwLock<MetadataImage>>,
    /// The index of the last applied log entry, sent after the image is published: readers
    /// wait on it for changes.
    version: Arc<tokio::sync::watch::Sender<u64>>,
    snapshot_seq: Arc<std::sync::atomic::AtomicU64>,
    /// The last log id of the snapshot on disk. Held while a snapshot is written (on the
    /// blocking pool), so that a snapshot being built and one being installed never write the
    /// file at once, and an older one never replaces a newer one (whose covered log entries
    /// may already be purged).
    saved: Arc<Mutex<Option<LogId<u64>>>>,
}

fn sm_error(e: impl std::error::Error + 'static) -> StorageError<u64> {
    StorageIOError::write_state_machine(&e).into()
}

fn damaged_snapshot(path: &Path, e: serde_json::Error) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!(
            "{} is damaged ({e}); restore the node's data directory from a backup",
            path.display()
        ),
    )
}

impl StateMachine {
    /// Starts from the last snapshot in `dir`, if any. Blocking.
    pub fn open(dir: &Path) -> std::io::Result<StateMachine> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(SNAPSHOT_FILE);
        let (applied, saved) = match std::fs::read(&path) {
            Ok(bytes) => {
                let stored: StoredSnapshot =
                    serde_json::from_slice(&bytes).map_err(|e| damaged_snapshot(&path, e))?;
                let applied =
                    serde_json::from_slice(&stored.data).map_err(|e| damaged_snapshot(&path, e))?;
                (applied, stored.meta.last_log_id)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (Applied::default(), None),
            Err(e) => return Err(e),
        };
        let image = Arc::new(RwLock::new(applied.image.clone()));
        let version = Arc::new(tokio::sync::watch::Sender::new(
            applied.last_applied.map_or(0, |l| l.index),
        ));
        Ok(StateMachine {
            dir: dir.to_path_buf(),
            applied: Arc::new(RwLock::new(applied)),
            image,
            version,
            snapshot_seq: Arc::default(),
            saved: Arc::new(Mutex::new(saved)),
        })
    }

    pub fn image_handle(&self) -> Arc<RwLock<MetadataImage>> {
        self.image.clone()
    }

    pub fn version_handle(&self) -> Arc<tokio::sync::watch::Sender<u64>> {
        self.version.clone()
    }

    fn publish(&self, applied: &Applied) {
        *self.image.write().expect("image lock") = applied.image.clone();
        self.version
            .send_replace(applied.last_applied.map_or(0, |l| l.index));
    }

    /// Replaces the snapshot file with `stored`, fsynced, before returning, unless the file
    /// already holds a newer snapshot.
    async fn save(&self, stored: StoredSnapshot) -> std::io::Result<()> {
        let dir = self.dir.clone();
        let saved = self.saved.clone();
        blocking(move || {
            let mut saved = saved.lock().expect("snapshot lock poisoned by a panic");
            if stored.meta.last_log_id < *saved {
                return Ok(());
            }
            let bytes = serde_json::to_vec(&stored).map_err(std::io::Error::other)?;
            write_atomically(&dir, SNAPSHOT_FILE, &bytes)?;
            *saved = stored.meta.last_log_id;
            Ok(())
        })
        .await
    }

    /// The snapshot file, if one was written.
    async fn load(&self) -> std::io::Result<Option<StoredSnapshot>> {
        let path = self.dir.join(SNAPSHOT_FILE);
        blocking(move || match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| damaged_snapshot(&path, e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        })
        .await
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<u64>> {
        let applied = self.applied.read().expect("applied lock").clone();
        let data = serde_json::to_vec(&applied).map_err(sm_error)?;
        let seq = self
            .snapshot_seq
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let meta = SnapshotMeta {
            last_log_id: applied.last_applied,
            last_membership: applied.membership.clone(),
            snapshot_id: format!("{}-{seq}", applied.last_applied.map_or(0, |l| l.index)),
        };
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data: data.clone(),
        };
        self.save(stored).await.map_err(sm_error)?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<u64>>, StoredMembership<u64, BasicNode>), StorageError<u64>> {
        let applied = self.applied.read().expect("applied lock");
        Ok((applied.last_applied, applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<CommandResult>, StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut applied = self.applied.write().expect("applied lock");
        let mut results = Vec::new();
        for entry in entries {
            applied.last_applied = Some(entry.log_id);
            let result = match entry.payload {
                EntryPayload::Blank => Ok(Reply::Done),
                EntryPayload::Membership(m) => {
                    applied.membership = StoredMembership::new(Some(entry.log_id), m);
                    Ok(Reply::Done)
                }
                EntryPayload::Normal(command) => {
                    execute(&applied.image, &command).map(|(records, reply)| {
                        for record in &records {
                            applied.image.apply(record);
                        }
                        reply
                    })
                }
            };
            results.push(CommandResult(result));
        }
        self.publish(&applied);
        Ok(results)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<u64>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<u64>> {
        let data = snapshot.into_inner();
        let new: Applied = serde_json::from_slice(&data).map_err(sm_error)?;
        self.save(StoredSnapshot {
            meta: meta.clone(),
            data,
        })
        .await
        .map_err(sm_error)?;
        let mut applied = self.applied.write().expect("applied lock");
        *applied = new;
        self.publish(&applied);
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<u64>> {
        match self.load().await {
            Ok(stored) => Ok(stored.map(|stored| Snapshot {
                meta: stored.meta,
                snapshot: Box::new(Cursor::new(stored.data)),
            })),
            Err(e) => Err(StorageIOError::read_snapshot(None, &e).into()),
        }
    }
}
