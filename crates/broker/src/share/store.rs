//! One share partition's state log on disk (docs/storage.md, "Share-group state logs"):
//! `<partition dir>/share/<group id>.state`, records of `tinymq_share`'s format appended (the
//! file is opened with O_APPEND, so a stale handle can never overwrite another's records) as
//! the state changes, fsynced before acknowledgements are answered (group commit: one fsync
//! covers every append made before it started), and rewritten as a single snapshot once it
//! grows past [`STATE_LOG_REWRITE_BYTES`]. After a failed fsync the log refuses every append
//! and sync (the kernel may have dropped the dirty pages), so its owner reloads it from disk.
//! It lives in the partition's directory, so deleting the topic removes it.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tinymq_share::{decode_records, encode_record, SharePartition, StateRecord};
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
pub(crate) fn groups_in(partition_dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(state_dir(partition_dir)) else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            let group = name.strip_suffix(".state")?;
            crate::group::validate_group_id(group).ok()?;
            Some(group.to_string())
        })
        .collect()
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Creates the `share` directory (and its temporary directory) durably: the partition
/// directory is fsynced after `share` appears, so a power loss cannot lose every group's
/// state at once.
fn ensure_state_dir(share_dir: &Path) -> std::io::Result<()> {
    let tmp = share_dir.join(TMP_DIR);
    if tmp.is_dir() {
        return Ok(());
    }
    std::fs::create_dir_all(&tmp)?;
    sync_dir(share_dir)?;
    match share_dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) => sync_dir(parent),
        None => Ok(()),
    }
}

/// Replaces `path` with `bytes` whole: written in the temporary directory, fsynced, renamed
/// over it, the directory fsynced.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(TMP_DIR).join(path.file_name().unwrap_or_default());
    let mut file = File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    sync_dir(dir)
}

/// Moves an unreadable state log aside (`share/.corrupt-<ms>/<id>.state`) so starting over
/// does not destroy it; an operator may inspect or restore it.
fn move_aside(path: &Path) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let aside = dir.join(format!(".corrupt-{}", crate::partition::now_ms()));
    std::fs::create_dir_all(&aside)?;
    std::fs::rename(path, aside.join(path.file_name().unwrap_or_default()))?;
    tracing::error!(from = %path.display(), to = %aside.display(), "unreadable share state log moved aside; the group's state on this partition starts over from the log start");
    sync_dir(dir)
}

struct Appender {
    file: Arc<File>,
    bytes: u64,
    /// Appends made so far (a sequence number: what `sync` waits for).
    appended: u64,
}

pub(crate) struct StateLog {
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
    /// Opens the log at `path` and replays it, or creates it with `fresh` as its first
    /// snapshot when there is none (or it cannot be read: logged, and started over).
    pub(crate) fn open(
        path: PathBuf,
        fresh: SharePartition,
    ) -> std::io::Result<(StateLog, SharePartition)> {
        if let Some(parent) = path.parent() {
            ensure_state_dir(parent)?;
        }
        match read_existing(&path)? {
            Existing::Valid(state, valid) => {
                // A torn tail (a crash mid-append) is cut so new records follow whole ones;
                // appends go through an O_APPEND handle.
                OpenOptions::new().write(true).open(&path)?.set_len(valid)?;
                let file = OpenOptions::new().append(true).open(&path)?;
                return Ok((StateLog::with_file(path, file, valid), state));
            }
            Existing::Unreadable => move_aside(&path)?,
            Existing::None => {}
        }
        let mut bytes = Vec::new();
        encode_record(&StateRecord::Snapshot(fresh.clone()), &mut bytes);
        write_atomically(&path, &bytes)?;
        let file = OpenOptions::new().append(true).open(&path)?;
        Ok((StateLog::with_file(path, file, bytes.len() as u64), fresh))
    }

    fn with_file(path: PathBuf, file: File, bytes: u64) -> StateLog {
        StateLog {
            path,
            appender: Mutex::new(Appender {
                file: Arc::new(file),
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
            return Err(std::io::Error::other(
                "an earlier fsync of this state log failed; it is reloaded from disk",
            ));
        }
        Ok(())
    }

    pub(crate) fn size_bytes(&self) -> u64 {
        self.appender.lock().bytes
    }

    /// Writes `records` (to the page cache); returns the sequence number to `sync` for them.
    /// Called under the share partition's lock, so the log's order is the state's.
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
        (&*appender.file).write_all(&bytes)?;
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
        write_atomically(&self.path, &bytes)?;
        let file = OpenOptions::new().append(true).open(&self.path)?;
        appender.file = Arc::new(file);
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

fn read_existing(path: &Path) -> std::io::Result<Existing> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Existing::None),
        Err(e) => return Err(e),
    };
    let length = file.metadata()?.len();
    if length > STATE_LOG_READ_BYTES_MAX {
        tracing::error!(path = %path.display(), length, "share state log longer than {STATE_LOG_READ_BYTES_MAX} bytes");
        return Ok(Existing::Unreadable);
    }
    let mut bytes = Vec::with_capacity(length as usize);
    file.read_to_end(&mut bytes)?;
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
    use std::sync::Arc;

    use tinymq_share::{AckKind, SharePartition};

    use super::*;

    /// Acquires `count` new records for member `a` and accepts every other one, logging it.
    fn work(log: &StateLog, share: &mut SharePartition, count: i64) -> u64 {
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
        log.append(&records).unwrap()
    }

    #[tokio::test]
    async fn a_log_reopens_to_its_state_after_a_torn_tail_and_a_rewrite() {
        let dir = tempfile::tempdir().unwrap();
        let path = state_path(dir.path(), "group-1");
        let (log, mut share) = StateLog::open(path.clone(), SharePartition::new(5)).unwrap();
        let log = Arc::new(log);
        let sequence = work(&log, &mut share, 10);
        log.sync(sequence).await.unwrap();
        drop(log);
        // A crash mid-append leaves a torn record: cut on open, the rest replayed.
        let whole = std::fs::metadata(&path).unwrap().len();
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(&[9, 0, 0, 0, 1, 2]).unwrap();
        drop(file);
        let (log, reopened) = StateLog::open(path.clone(), SharePartition::new(0)).unwrap();
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
        let (_, reopened) = StateLog::open(path, SharePartition::new(0)).unwrap();
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
            StateLog::open(state_path(dir.path(), group), SharePartition::new(0)).unwrap();
        }
        std::fs::write(state_dir(dir.path()).join("z z.state"), b"").unwrap();
        let mut groups = groups_in(dir.path());
        groups.sort();
        let mut expected = vec![".", "..", "g", "orders-eu.1", longest.as_str()];
        expected.sort();
        assert_eq!(groups, expected);
        // A rewrite of the longest id's log goes through the temporary directory.
        let (log, share) =
            StateLog::open(state_path(dir.path(), &longest), SharePartition::new(0)).unwrap();
        log.rewrite(&share).unwrap();
    }

    #[test]
    fn a_log_without_a_snapshot_starts_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = state_path(dir.path(), "g");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"not a state log").unwrap();
        let (_, share) = StateLog::open(path.clone(), SharePartition::new(42)).unwrap();
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
        drop(StateLog::open(path.clone(), SharePartition::new(0)).unwrap());
        let (stale, mut stale_share) =
            StateLog::open(path.clone(), SharePartition::new(0)).unwrap();
        let (live, mut live_share) = StateLog::open(path.clone(), SharePartition::new(0)).unwrap();
        work(&live, &mut live_share, 4);
        work(&stale, &mut stale_share, 2);
        let bytes = std::fs::read(&path).unwrap();
        let decoded = decode_records(&bytes);
        assert_eq!(decoded.stopped, None);
        assert_eq!(decoded.valid_bytes, bytes.len());
        // The snapshot, the live handle's acquisition and accepts, then the stale one's.
        assert!(decoded.records.len() >= 3, "{:?}", decoded.records);
    }
}
