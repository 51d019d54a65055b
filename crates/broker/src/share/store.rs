//! One share partition's state log on disk (docs/storage.md, "Share-group state logs"):
//! `<partition dir>/share/<hex of the group id>.state`, records of `tinymq_share`'s format
//! appended as the state changes, fsynced before acknowledgements are answered (group commit:
//! one fsync covers every append made before it started), and rewritten as a single snapshot
//! once it grows past [`STATE_LOG_REWRITE_BYTES`]. It lives in the partition's directory, so
//! deleting the topic removes it.

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
/// rewrite keeps them near [`STATE_LOG_REWRITE_BYTES`]); the partition's state starts over.
const STATE_LOG_READ_BYTES_MAX: u64 = 64 << 20;

pub(crate) fn state_dir(partition_dir: &Path) -> PathBuf {
    partition_dir.join("share")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The state log of `group` in a partition's directory.
pub(crate) fn state_path(partition_dir: &Path, group: &str) -> PathBuf {
    state_dir(partition_dir).join(format!("{}.state", hex(group.as_bytes())))
}

/// The groups with a state log in a partition's directory (file names that do not decode to
/// a group id are ignored).
pub(crate) fn groups_in(partition_dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(state_dir(partition_dir)) else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            let hex = name.strip_suffix(".state")?;
            let bytes = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
                .collect::<Option<Vec<u8>>>()?;
            let group = String::from_utf8(bytes).ok()?;
            crate::group::validate_group_id(&group).ok()?;
            Some(group)
        })
        .collect()
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
            std::fs::create_dir_all(parent)?;
        }
        if let Some((state, valid)) = read_existing(&path)? {
            let file = OpenOptions::new().read(true).write(true).open(&path)?;
            // A torn tail (a crash mid-append) is cut so new records follow whole ones.
            file.set_len(valid)?;
            let mut file = file;
            std::io::Seek::seek(&mut file, std::io::SeekFrom::End(0))?;
            return Ok((StateLog::with_file(path, file, valid), state));
        }
        let mut bytes = Vec::new();
        encode_record(&StateRecord::Snapshot(fresh.clone()), &mut bytes);
        crate::durable_file::write_atomically(&path, &bytes)?;
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
            syncing: AtomicBool::new(false),
        }
    }

    pub(crate) fn size_bytes(&self) -> u64 {
        self.appender.lock().bytes
    }

    /// Writes `records` (to the page cache); returns the sequence number to `sync` for them.
    /// Called under the share partition's lock, so the log's order is the state's.
    pub(crate) fn append(&self, records: &[StateRecord]) -> std::io::Result<u64> {
        let mut appender = self.appender.lock();
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
                log.syncing.store(false, Ordering::Release);
                if outcome.is_ok() {
                    log.synced.send_modify(|s| *s = (*s).max(covered));
                }
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
        let mut bytes = Vec::new();
        encode_record(&StateRecord::Snapshot(state.clone()), &mut bytes);
        crate::durable_file::write_atomically(&self.path, &bytes)?;
        let file = OpenOptions::new().append(true).open(&self.path)?;
        appender.file = Arc::new(file);
        appender.bytes = bytes.len() as u64;
        // The snapshot holds everything appended so far, and it is fsynced.
        let covered = appender.appended;
        self.synced.send_modify(|s| *s = (*s).max(covered));
        Ok(())
    }
}

/// The state a log file holds and the length of its whole records; `None` when there is no
/// file, or it holds no valid snapshot to start from.
fn read_existing(path: &Path) -> std::io::Result<Option<(SharePartition, u64)>> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let length = file.metadata()?.len();
    if length > STATE_LOG_READ_BYTES_MAX {
        tracing::error!(path = %path.display(), length, "share state log too long; starting over");
        return Ok(None);
    }
    let mut bytes = Vec::with_capacity(length as usize);
    file.read_to_end(&mut bytes)?;
    let decoded = decode_records(&bytes);
    if let Some(why) = &decoded.stopped {
        tracing::warn!(path = %path.display(), %why, "share state log has a torn or corrupt tail; cut");
    }
    if !matches!(decoded.records.first(), Some(StateRecord::Snapshot(_))) {
        tracing::error!(path = %path.display(), "share state log does not start with a snapshot; starting over");
        return Ok(None);
    }
    match SharePartition::replay(&decoded.records) {
        Ok(state) => Ok(Some((state, decoded.valid_bytes as u64))),
        Err(why) => {
            tracing::error!(path = %path.display(), %why, "share state log cannot be replayed; starting over");
            Ok(None)
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
        for group in ["orders-eu.1", "g"] {
            StateLog::open(state_path(dir.path(), group), SharePartition::new(0)).unwrap();
        }
        std::fs::write(state_dir(dir.path()).join("zz.state"), b"").unwrap();
        let mut groups = groups_in(dir.path());
        groups.sort();
        assert_eq!(groups, vec!["g".to_string(), "orders-eu.1".to_string()]);
    }

    #[test]
    fn a_log_without_a_snapshot_starts_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = state_path(dir.path(), "g");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"not a state log").unwrap();
        let (_, share) = StateLog::open(path, SharePartition::new(42)).unwrap();
        assert_eq!(share, SharePartition::new(42));
    }
}
