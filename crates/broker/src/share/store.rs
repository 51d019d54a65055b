//! One share partition's state log on disk (docs/storage.md, "Share-group state logs"):
//! `<partition dir>/share/<group id>.state`, records of `tinymq_share`'s format appended (the
//! file is opened with O_APPEND, so a stale handle can never overwrite another's records) as
//! the state changes, fsynced before acknowledgements are answered (group commit: one fsync
//! covers every append made before it started), and rewritten as a single snapshot once it
//! grows past [`STATE_LOG_REWRITE_BYTES`]. After a failed fsync the log refuses every append
//! and sync (the kernel may have dropped the dirty pages), so its owner reloads it from disk.
//! It lives in the partition's directory, so deleting the topic removes it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tinymq_share::{decode_records, encode_record, SharePartition, StateRecord};
use tinymq_storage::{Storage, StorageFile};
use tokio::sync::watch;

/// A state log longer than this is rewritten as one snapshot record (at most ~130 KB) by the
/// background task, so a rebuild reads at most about this much.
pub(crate) const STATE_LOG_REWRITE_BYTES: u64 = 1 << 20;
/// A state log file longer than this is not read (it cannot be one the broker wrote: the
/// rewrite keeps them near [`STATE_LOG_REWRITE_BYTES`]); it is moved aside and the
/// partition's state starts over.
const STATE_LOG_READ_BYTES_MAX: u64 = 64 << 20;
/// Where snapshots are written before they are renamed over a state log (a directory, so the
/// temporary name is no longer than the log's: group ids of up to 249 bytes fit NAME_MAX).
const TMP_DIR: &str = ".tmp";

pub(crate) fn state_dir(partition_dir: &Path) -> PathBuf {
    partition_dir.join("share")
}

/// The state log of `group` in a partition's directory: the id itself names the file (valid
/// ids are `[A-Za-z0-9._-]`, at most 249 bytes, so `<id>.state` fits NAME_MAX, and the
/// suffix keeps `.` and `..` apart from the directory entries).
pub(crate) fn state_path(partition_dir: &Path, group: &str) -> PathBuf {
    state_dir(partition_dir).join(format!("{group}.state"))
}

/// The groups with a state log in a partition's directory (file names that are not a valid
/// group id are ignored).
pub(crate) fn groups_in(storage: &dyn Storage, partition_dir: &Path) -> Vec<String> {
    let Ok(paths) = storage.list(&state_dir(partition_dir)) else {
        return Vec::new();
    };
    paths
        .iter()
        .filter_map(|path| {
            let name = path.file_name()?.to_str()?;
            let group = name.strip_suffix(".state")?;
            crate::group::validate_group_id(group).ok()?;
            Some(group.to_string())
        })
        .collect()
}

/// Creates the `share` directory (and its temporary directory) durably: the partition
/// directory is fsynced after `share` appears, so a power loss cannot lose every group's
/// state at once.
fn ensure_state_dir(storage: &dyn Storage, share_dir: &Path) -> std::io::Result<()> {
    let tmp = share_dir.join(TMP_DIR);
    if storage.exists(&tmp) {
        return Ok(());
    }
    storage.create_dir_all(&tmp)?;
    storage.sync_dir(share_dir)?;
    match share_dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) => storage.sync_dir(parent),
        None => Ok(()),
    }
}

/// Replaces `path` with `bytes` whole (`tinymq_storage::replace_file_with`), through the
/// temporary directory.
fn replace_state_log(storage: &dyn Storage, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(TMP_DIR).join(path.file_name().unwrap_or_default());
    tinymq_storage::replace_file_with(storage, path, &tmp, |out| {
        std::io::Write::write_all(out, bytes)
    })?;
    Ok(())
}

/// Moves an unreadable state log aside (`share/.corrupt-<ms>/<id>.state`) so starting over
/// does not destroy it; an operator may inspect or restore it.
fn move_aside(storage: &dyn Storage, path: &Path) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let aside = dir.join(format!(".corrupt-{}", crate::partition::now_ms()));
    storage.create_dir_all(&aside)?;
    storage.rename(path, &aside.join(path.file_name().unwrap_or_default()))?;
    tracing::error!(from = %path.display(), to = %aside.display(), "unreadable share state log moved aside; the group's state on this partition starts over from the log start");
    storage.sync_dir(dir)
}

struct Appender {
    file: Arc<dyn StorageFile>,
    bytes: u64,
    /// Appends made so far (a sequence number: what `sync` waits for).
    appended: u64,
}

pub(crate) struct StateLog {
    storage: Arc<dyn Storage>,
    path: PathBuf,
    appender: Mutex<Appender>,
    /// The append sequence number the last fsync covered.
    synced: watch::Sender<u64>,
    /// Set for good when an fsync fails: appends and syncs fail from then on (waiters are
    /// woken through `synced`).
    failed: AtomicBool,
    /// Set while an fsync runs: one at a time per log.
    syncing: AtomicBool,
}

impl std::fmt::Debug for StateLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateLog")
            .field("path", &self.path)
            .finish()
    }
}

impl StateLog {
    /// Opens the log at `path` through `storage` and replays it, or creates it with `fresh`
    /// as its first snapshot when there is none (or it cannot be read: logged, and started
    /// over).
    pub(crate) fn open(
        storage: Arc<dyn Storage>,
        path: PathBuf,
        fresh: SharePartition,
    ) -> std::io::Result<(StateLog, SharePartition)> {
        if let Some(parent) = path.parent() {
            ensure_state_dir(&*storage, parent)?;
        }
        match read_existing(&*storage, &path)? {
            Existing::Valid(state, valid) => {
                // A torn tail (a crash mid-append) is cut so new records follow whole ones;
                // appends go through an O_APPEND handle.
                let file = storage.open_append(&path, false)?;
                if file.byte_len()? > valid {
                    file.set_len(valid)?;
                    file.sync_data()?;
                }
                return Ok((StateLog::with_file(storage, path, file, valid), state));
            }
            Existing::Unreadable => move_aside(&*storage, &path)?,
            Existing::None => {}
        }
        let mut bytes = Vec::new();
        encode_record(&StateRecord::Snapshot(fresh.clone()), &mut bytes);
        replace_state_log(&*storage, &path, &bytes)?;
        let file = storage.open_append(&path, false)?;
        let log = StateLog::with_file(storage, path, file, bytes.len() as u64);
        Ok((log, fresh))
    }

    fn with_file(
        storage: Arc<dyn Storage>,
        path: PathBuf,
        file: Arc<dyn StorageFile>,
        bytes: u64,
    ) -> StateLog {
        StateLog {
            storage,
            path,
            appender: Mutex::new(Appender {
                file,
                bytes,
                appended: 0,
            }),
            synced: watch::Sender::new(0),
            failed: AtomicBool::new(false),
            syncing: AtomicBool::new(false),
        }
    }

    fn check_not_failed(&self) -> std::io::Result<()> {
        if self.failed.load(Ordering::Acquire) {
            return Err(std::io::Error::other(format!(
                "an earlier write or fsync of the share state log {} failed; it is reloaded from disk",
                self.path.display()
            )));
        }
        Ok(())
    }

    pub(crate) fn size_bytes(&self) -> u64 {
        self.appender.lock().bytes
    }

    /// Writes `records` (to the page cache); returns the sequence number to `sync` for them.
    /// Called under the share partition's lock, so the log's order is the state's. A failed
    /// write may have left a part of the records: the log refuses everything after it (a
    /// record after a torn one would be lost at the next open), and its owner reloads it.
    pub(crate) fn append(&self, records: &[StateRecord]) -> std::io::Result<u64> {
        let mut appender = self.appender.lock();
        self.check_not_failed()?;
        if records.is_empty() {
            return Ok(appender.appended);
        }
        let mut bytes = Vec::new();
        for record in records {
            encode_record(record, &mut bytes);
        }
        if let Err(e) = appender.file.append_all(&bytes) {
            tracing::error!(path = %self.path.display(), error = %e, "share state log write failed");
            self.failed.store(true, Ordering::Release);
            self.synced.send_modify(|_| {});
            return Err(std::io::Error::new(
                e.kind(),
                format!("share state log {}: write failed: {e}", self.path.display()),
            ));
        }
        appender.bytes += bytes.len() as u64;
        appender.appended += 1;
        Ok(appender.appended)
    }
    /// Waits until the appends up to `sequence` are fsynced (group commit, as
    /// `Partition::await_durable`: one fsync at a time, on the blocking pool, covering every
    /// append before it started).
    pub(crate) async fn sync(self: &Arc<Self>, sequence: u64) -> std::io::Result<()> {
        let mut synced = self.synced.subscribe();
        loop {
            self.check_not_failed()?;
            if *synced.borrow_and_update() >= sequence {
                return Ok(());
            }
            if self.syncing.swap(true, Ordering::AcqRel) {
                let _ = synced.changed().await;
                continue;
            }
            let log = self.clone();
            let outcome = tokio::task::spawn_blocking(move || {
                let (file, covered) = {
                    let appender = log.appender.lock();
                    (appender.file.clone(), appender.appended)
                };
                let outcome = file.sync_data();
                if let Err(e) = &outcome {
                    // Linux may have dropped the unwritten pages: nothing appended to this
                    // handle can be called durable any more.
                    tracing::error!(path = %log.path.display(), error = %e, "share state log fsync failed");
                    log.failed.store(true, Ordering::Release);
                }
                // Cleared before waking the waiters, so one of them can start the next fsync;
                // woken on failure too, to see it.
                log.syncing.store(false, Ordering::Release);
                log.synced.send_modify(|s| {
                    if outcome.is_ok() {
                        *s = (*s).max(covered);
                    }
                });
                outcome
            })
            .await;
            match outcome {
                Ok(result) => result?,
                Err(e) => return Err(std::io::Error::other(e)),
            }
        }
    }

    /// Replaces the log with one snapshot of `state` (call under the share partition's lock,
    /// on a blocking thread): written to a temporary file, fsynced, renamed over the log.
    pub(crate) fn rewrite(&self, state: &SharePartition) -> std::io::Result<()> {
        let mut appender = self.appender.lock();
        self.check_not_failed()?;
        let mut bytes = Vec::new();
        encode_record(&StateRecord::Snapshot(state.clone()), &mut bytes);
        replace_state_log(&*self.storage, &self.path, &bytes)?;
        appender.file = self.storage.open_append(&self.path, false)?;
        appender.bytes = bytes.len() as u64;
        // The snapshot holds everything appended so far, and it is fsynced.
        let covered = appender.appended;
        self.synced.send_modify(|s| *s = (*s).max(covered));
        Ok(())
    }
}

/// What a state log file holds.
enum Existing {
    None,
    /// The state and the length of the whole records.
    Valid(SharePartition, u64),
    /// Too long, no snapshot to start from, or not replayable.
    Unreadable,
}

fn read_existing(storage: &dyn Storage, path: &Path) -> std::io::Result<Existing> {
    let file = match storage.open(path, false) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Existing::None),
        Err(e) => return Err(e),
    };
    let length = file.byte_len()?;
    if length > STATE_LOG_READ_BYTES_MAX {
        tracing::error!(path = %path.display(), length, "share state log longer than {STATE_LOG_READ_BYTES_MAX} bytes");
        return Ok(Existing::Unreadable);
    }
    // Bounded just above.
    let mut bytes = vec![0u8; length as usize];
    file.read_exact_at(&mut bytes, 0)?;
    let decoded = decode_records(&bytes);
    if let Some(why) = &decoded.stopped {
        tracing::warn!(path = %path.display(), %why, "share state log has a torn or corrupt tail; cut");
    }
    if !matches!(decoded.records.first(), Some(StateRecord::Snapshot(_))) {
        tracing::error!(path = %path.display(), "share state log does not start with a snapshot");
        return Ok(Existing::Unreadable);
    }
    match SharePartition::replay(&decoded.records) {
        Ok(state) => Ok(Existing::Valid(state, decoded.valid_bytes as u64)),
        Err(why) => {
            tracing::error!(path = %path.display(), %why, "share state log cannot be replayed");
            Ok(Existing::Unreadable)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::fs::OpenOptions;
    use std::io::Write;
    use std::sync::Arc;

    use tinymq_share::{AckKind, SharePartition};
    use tinymq_storage::fault::{CrashMode, Faults, FaultyStorage};
    use tinymq_storage::OsStorage;

    use super::*;

    fn os() -> Arc<dyn Storage> {
        Arc::new(OsStorage)
    }

    /// Acquires `count` new records for member `a` and accepts every other one, logging it.
    fn work(log: &StateLog, share: &mut SharePartition, count: i64) -> u64 {
        try_work(log, share, count).unwrap()
    }

    fn try_work(log: &StateLog, share: &mut SharePartition, count: i64) -> std::io::Result<u64> {
        let member: Arc<str> = Arc::from("a");
        let mut records = Vec::new();
        let first = share.end_offset();
        let range = (first, first + count - 1);
        share.acquire(&member, range, 1, 5, &mut records).unwrap();
        for offset in (first..first + count).step_by(2) {
            share
                .acknowledge("a", (offset, offset), AckKind::Accept, 5, &mut records)
                .unwrap();
        }
        log.append(&records)
    }

    #[tokio::test]
    async fn a_log_reopens_to_its_state_after_a_torn_tail_and_a_rewrite() {
        let dir = tempfile::tempdir().unwrap();
        let path = state_path(dir.path(), "group-1");
        let (log, mut share) = StateLog::open(os(), path.clone(), SharePartition::new(5)).unwrap();
        let log = Arc::new(log);
        let sequence = work(&log, &mut share, 10);
        log.sync(sequence).await.unwrap();
        drop(log);
        // A crash mid-append leaves a torn record: cut on open, the rest replayed.
        let whole = std::fs::metadata(&path).unwrap().len();
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(&[9, 0, 0, 0, 1, 2]).unwrap();
        drop(file);
        let (log, reopened) = StateLog::open(os(), path.clone(), SharePartition::new(0)).unwrap();
        assert_eq!(reopened, share.rebuilt());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), whole);
        // Appends after the cut follow whole records; a rewrite keeps the state, smaller.
        let mut share = reopened;
        work(&log, &mut share, 10);
        let before = log.size_bytes();
        log.rewrite(&share).unwrap();
        assert!(log.size_bytes() < before, "{} < {before}", log.size_bytes());
        work(&log, &mut share, 4);
        drop(log);
        let (_, reopened) = StateLog::open(os(), path, SharePartition::new(0)).unwrap();
        assert_eq!(reopened, share.rebuilt());
        assert_eq!(
            reopened.start_offset(),
            6,
            "offset 6 was acquired, not accepted"
        );
    }

    #[test]
    fn group_ids_round_trip_through_file_names() {
        let dir = tempfile::tempdir().unwrap();
        // Review F9: the longest valid id (249 bytes) and "." / ".." are share groups too.
        let longest = "x".repeat(crate::group::GROUP_ID_BYTES_MAX);
        for group in ["orders-eu.1", "g", ".", "..", longest.as_str()] {
            StateLog::open(os(), state_path(dir.path(), group), SharePartition::new(0)).unwrap();
        }
        std::fs::write(state_dir(dir.path()).join("z z.state"), b"").unwrap();
        let mut groups = groups_in(&OsStorage, dir.path());
        groups.sort();
        let mut expected = vec![".", "..", "g", "orders-eu.1", longest.as_str()];
        expected.sort();
        assert_eq!(groups, expected);
        // A rewrite of the longest id's log goes through the temporary directory.
        let (log, share) = StateLog::open(
            os(),
            state_path(dir.path(), &longest),
            SharePartition::new(0),
        )
        .unwrap();
        log.rewrite(&share).unwrap();
    }

    #[test]
    fn a_log_without_a_snapshot_starts_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = state_path(dir.path(), "g");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"not a state log").unwrap();
        let (_, share) = StateLog::open(os(), path.clone(), SharePartition::new(42)).unwrap();
        assert_eq!(share, SharePartition::new(42));
        // Review F5: the unreadable file is kept aside, not overwritten.
        let kept: Vec<_> = std::fs::read_dir(state_dir(dir.path()))
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with(".corrupt-"))
            .map(|e| std::fs::read(e.path().join("g.state")).unwrap())
            .collect();
        assert_eq!(kept, vec![b"not a state log".to_vec()]);
    }

    /// Review F1: two handles on one log (a stale instance and the live one) both append at
    /// the end, so neither overwrites the other's records.
    #[test]
    fn two_handles_on_one_log_never_overwrite_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let path = state_path(dir.path(), "g");
        drop(StateLog::open(os(), path.clone(), SharePartition::new(0)).unwrap());
        let (stale, mut stale_share) =
            StateLog::open(os(), path.clone(), SharePartition::new(0)).unwrap();
        let (live, mut live_share) =
            StateLog::open(os(), path.clone(), SharePartition::new(0)).unwrap();
        work(&live, &mut live_share, 4);
        work(&stale, &mut stale_share, 2);
        let bytes = std::fs::read(&path).unwrap();
        let decoded = decode_records(&bytes);
        assert_eq!(decoded.stopped, None);
        assert_eq!(decoded.valid_bytes, bytes.len());
        // The snapshot, the live handle's acquisition and accepts, then the stale one's.
        assert!(decoded.records.len() >= 3, "{:?}", decoded.records);
    }

    /// A state log on the fault-injecting storage, with some acknowledged (fsynced) work.
    async fn faulty_log() -> (FaultyStorage, PathBuf, Arc<StateLog>, SharePartition) {
        let fs = FaultyStorage::new();
        let path = state_path(Path::new("/data/t-0"), "g");
        let (log, mut share) =
            StateLog::open(Arc::new(fs.clone()), path.clone(), SharePartition::new(0)).unwrap();
        let log = Arc::new(log);
        let sequence = work(&log, &mut share, 10);
        log.sync(sequence).await.unwrap();
        (fs, path, log, share.rebuilt())
    }

    /// Issue 28: ENOSPC and a torn write refuse the append with an error naming the file (no
    /// panic), the log refuses everything after it, and a restart, after a crash that keeps
    /// or loses the torn bytes, recovers exactly what was acknowledged.
    #[tokio::test]
    async fn enospc_and_torn_appends_are_refused_and_a_restart_recovers_the_acknowledged_state() {
        for (fault, mode) in [
            (
                Faults {
                    space_bytes_left: Some(3),
                    ..Faults::default()
                },
                CrashMode::KeepUnsyncedPrefix(1 << 20),
            ),
            (
                Faults {
                    torn_next_write_bytes: Some(5),
                    ..Faults::default()
                },
                CrashMode::KeepUnsyncedPrefix(1 << 20),
            ),
            (
                Faults {
                    torn_next_write_bytes: Some(5),
                    ..Faults::default()
                },
                CrashMode::LoseUnsynced,
            ),
        ] {
            let (fs, path, log, acknowledged) = faulty_log().await;
            let mut share = acknowledged.clone();
            fs.set_faults(fault.clone());
            let e = try_work(&log, &mut share, 4).unwrap_err();
            assert!(e.to_string().contains("g.state"), "{fault:?}: {e}");
            fs.set_faults(Faults::default());
            let refused = try_work(&log, &mut share, 1).unwrap_err();
            assert!(refused.to_string().contains("failed"), "{refused}");
            assert!(
                log.sync(u64::MAX).await.is_err(),
                "a failed log syncs nothing"
            );
            drop(log);
            // A power cut that keeps the torn bytes (cut at the restart) or loses them.
            fs.crash(mode);
            let (log, mut reopened) =
                StateLog::open(Arc::new(fs.clone()), path.clone(), SharePartition::new(0)).unwrap();
            assert_eq!(reopened, acknowledged, "{fault:?} {mode:?}");
            let log = Arc::new(log);
            // The reopened log takes appends again.
            let sequence = work(&log, &mut reopened, 2);
            log.sync(sequence).await.unwrap();
        }
    }

    /// EIO on fsync: the sync fails (what it covered is not acknowledged), the log refuses
    /// appends from then on, and after a power cut a restart has everything fsynced before.
    #[tokio::test]
    async fn eio_on_fsync_fails_the_sync_and_a_restart_keeps_what_was_synced_before() {
        let (fs, path, log, acknowledged) = faulty_log().await;
        let mut share = acknowledged.clone();
        let sequence = work(&log, &mut share, 4);
        fs.set_faults(Faults {
            fail_sync: true,
            ..Faults::default()
        });
        let e = log.sync(sequence).await.unwrap_err();
        assert!(e.to_string().contains("EIO"), "{e}");
        fs.set_faults(Faults::default());
        assert!(try_work(&log, &mut share, 1).is_err(), "refused after EIO");
        drop(log);
        fs.crash(CrashMode::LoseUnsynced);
        let (_, reopened) =
            StateLog::open(Arc::new(fs.clone()), path, SharePartition::new(0)).unwrap();
        assert_eq!(reopened, acknowledged);
    }

    /// A rewrite that fails (ENOSPC, a torn write, EIO on its fsync) leaves the log as it
    /// was: whole, still appendable, and a restart (after a crash too) replays it.
    #[tokio::test]
    async fn a_failed_rewrite_leaves_the_log_whole() {
        for fault in Faults::each_write_fault(3) {
            let (fs, path, log, acknowledged) = faulty_log().await;
            fs.set_faults(fault.clone());
            let e = log.rewrite(&acknowledged).unwrap_err();
            assert!(e.to_string().contains("g.state"), "{fault:?}: {e}");
            fs.set_faults(Faults::default());
            let mut share = acknowledged.clone();
            let sequence = work(&log, &mut share, 2);
            log.sync(sequence).await.unwrap();
            drop(log);
            fs.crash(CrashMode::LoseUnsynced);
            let (_, reopened) =
                StateLog::open(Arc::new(fs.clone()), path, SharePartition::new(0)).unwrap();
            assert_eq!(reopened, share.rebuilt(), "{fault:?}");
        }
    }
}
