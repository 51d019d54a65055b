//! The Raft state machine: committed record batches are applied to the image as they are
//! (commands were executed by the leader before it proposed them); legacy command entries are
//! replayed through [`super::legacy`]. Applying never executes a rule of the current version on
//! a new entry and never panics on data: an entry this node cannot apply stops it with an
//! [`ApplyError`] naming the index, the image left as it was before that entry. A snapshot is
//! the serialized image with the last applied log id and membership, stored in
//! `meta-snapshot.json`.
//!
//! The image is rebuilt on start from the snapshot plus the log entries after it (openraft
//! re-applies them), so applying needs no fsync of its own. Snapshot files are written and read
//! on tokio's blocking pool.

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use openraft::storage::{RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, StorageError,
    StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};

use super::durable_file::blocking;
use super::entry::{ApplyError, EntryOutcome, MetaEntry, RecordBatch};
use super::TypeConfig;
use crate::MetadataImage;

const SNAPSHOT_FILE: &str = "meta-snapshot.json";

/// What the state machine holds: its snapshot is this, serialized.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct Applied {
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, BasicNode>,
    pub(super) image: MetadataImage,
    /// The index of the last entry that changed the image (a record batch or legacy command):
    /// a batch executed against an older index is stale. Missing in snapshots from before
    /// batches: [`Applied::decode`] takes the last applied index then (any entry up to it may
    /// have changed the image).
    #[serde(default)]
    last_change_index: u64,
}

impl Applied {
    /// A serialized snapshot's contents.
    fn decode(data: &[u8]) -> serde_json::Result<Applied> {
        let mut applied: Applied = serde_json::from_slice(data)?;
        let last_applied_index = applied.last_applied.map_or(0, |l| l.index);
        if applied.last_change_index == 0 {
            applied.last_change_index = last_applied_index;
        }
        Ok(applied)
    }
}

/// Whether `data` is a snapshot this state machine can install (checked before a snapshot
/// from a peer reaches openraft, which purges its log for it).
pub fn check_snapshot_data(data: &[u8]) -> Result<(), String> {
    Applied::decode(data)
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
    /// The newest [`RecordBatch::version`] this node applies.
    batch_version_max: u32,
    /// Told when a legacy command entry was replayed: the node then snapshots once, so the
    /// old entries are not executed again at its next start.
    pub(super) legacy_replayed: Arc<tokio::sync::Notify>,
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
    /// Starts from the last snapshot in `dir`, if any, applying record batches up to version
    /// `batch_version_max` (tests pretend to be older or newer versions with it). Blocking.
    pub fn open(dir: &Path, batch_version_max: u32) -> std::io::Result<StateMachine> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(SNAPSHOT_FILE);
        let (applied, saved) = match std::fs::read(&path) {
            Ok(bytes) => {
                let stored: StoredSnapshot =
                    serde_json::from_slice(&bytes).map_err(|e| damaged_snapshot(&path, e))?;
                let applied =
                    Applied::decode(&stored.data).map_err(|e| damaged_snapshot(&path, e))?;
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
            batch_version_max,
            legacy_replayed: Arc::default(),
        })
    }

    pub fn image_handle(&self) -> Arc<RwLock<MetadataImage>> {
        self.image.clone()
    }

    pub fn version_handle(&self) -> Arc<tokio::sync::watch::Sender<u64>> {
        self.version.clone()
    }

    fn publish(&self, applied: &Applied) {
        *self.image.write() = applied.image.clone();
        self.version
            .send_replace(applied.last_applied.map_or(0, |l| l.index));
    }

    /// Replaces the snapshot file with `stored`, fsynced, before returning, unless the file
    /// already holds a newer snapshot.
    async fn save(&self, stored: StoredSnapshot) -> std::io::Result<()> {
        let dir = self.dir.clone();
        let saved = self.saved.clone();
        blocking(move || {
            let mut saved = saved.lock();
            if stored.meta.last_log_id < *saved {
                return Ok(());
            }
            let bytes = serde_json::to_vec(&stored).map_err(std::io::Error::other)?;
            let path = dir.join(SNAPSHOT_FILE);
            tinymq_storage::replace_file(&tinymq_storage::OsStorage, &path, &bytes)?;
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
        let applied = self.applied.read().clone();
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
        let applied = self.applied.read();
        Ok((applied.last_applied, applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<EntryOutcome>, StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut applied = self.applied.write();
        let mut outcomes = Vec::new();
        let mut replayed_legacy = false;
        for entry in entries {
            let index = entry.log_id.index;
            let outcome = match entry.payload {
                EntryPayload::Blank => EntryOutcome::Applied,
                EntryPayload::Membership(m) => {
                    applied.membership = StoredMembership::new(Some(entry.log_id), m);
                    EntryOutcome::Applied
                }
                EntryPayload::Normal(payload) => {
                    replayed_legacy |= matches!(payload, MetaEntry::Legacy(_));
                    match apply_entry(&mut applied, index, payload, self.batch_version_max) {
                        Ok(outcome) => outcome,
                        Err(e) => {
                            // What was applied before this entry stays published; this entry
                            // and every later one are not applied here.
                            self.publish(&applied);
                            tracing::error!(error = %e, index, "cannot apply a committed metadata entry; this MetaServer node stops");
                            return Err(StorageIOError::apply(entry.log_id, &e).into());
                        }
                    }
                }
            };
            applied.last_applied = Some(entry.log_id);
            outcomes.push(outcome);
        }
        self.publish(&applied);
        if replayed_legacy {
            self.legacy_replayed.notify_one();
        }
        Ok(outcomes)
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
        let new = Applied::decode(&data).map_err(sm_error)?;
        self.save(StoredSnapshot {
            meta: meta.clone(),
            data,
        })
        .await
        .map_err(sm_error)?;
        let mut applied = self.applied.write();
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

/// Applies one normal entry to `applied` (image and change index), or refuses it whole.
pub(super) fn apply_entry(
    applied: &mut Applied,
    index: u64,
    payload: MetaEntry,
    batch_version_max: u32,
) -> Result<EntryOutcome, ApplyError> {
    match payload {
        MetaEntry::Records(batch) => apply_batch(applied, index, &batch, batch_version_max),
        MetaEntry::Legacy(command) => {
            let reply = super::legacy::replay(&mut applied.image, &command);
            applied.last_change_index = index;
            Ok(EntryOutcome::Legacy(reply))
        }
        MetaEntry::Unreadable { why, .. } => Err(ApplyError::Unreadable { index, why }),
    }
}

fn apply_batch(
    applied: &mut Applied,
    index: u64,
    batch: &RecordBatch,
    batch_version_max: u32,
) -> Result<EntryOutcome, ApplyError> {
    if batch.version > batch_version_max {
        return Err(ApplyError::NewerBatch {
            index,
            version: batch.version,
            max: batch_version_max,
        });
    }
    if applied.last_change_index > batch.base_index {
        return Ok(EntryOutcome::Stale);
    }
    for record in &batch.records {
        applied.image.apply(record);
    }
    applied.last_change_index = index;
    Ok(EntryOutcome::Applied)
}
