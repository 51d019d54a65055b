//! The Raft log and vote on disk, as openraft's log storage.
//!
//! `raft-log.jsonl` holds checksummed JSON lines (format and replay rules in
//! [`super::log_file`]): one per entry, plus lines recording truncations, purges and the last
//! committed log id, appended and replayed on open. A torn last line (a crash mid-write) is cut
//! with a warning; damage anywhere else stops the node with an error naming the line.
//!
//! Every append, truncation and purge is fsynced before openraft is told it is durable. The
//! committed log id is appended without an fsync of its own: it is a hint that lets a restarted
//! node apply its committed entries at once instead of after the next election; losing it loses
//! nothing. After a purge (openraft purges entries once a snapshot covers them), and whenever
//! more than [`DEAD_LINES_MAX`] lines no longer describe the live log, the file is replaced by one
//! holding only the live state (last purged log id, surviving entries, committed hint): written
//! to a temp file, fsynced, renamed over the old one, directory fsynced. So the file holds at most
//! the live entries (bounded by the snapshot policy in `mod.rs`) plus `DEAD_LINES_MAX` + 2 lines.
//!
//! `raft-vote.json` is replaced atomically (`tinymq_storage::replace_file`) before `save_vote`
//! returns.
//!
//! Both files go through a `tinymq_storage::Storage` ([`LogStore::open_with`]), so tests can
//! inject ENOSPC, EIO and torn writes.
//!
//! All file work runs on tokio's blocking pool. Openraft awaits each write before the next; the
//! `disk` lock serializes them anyway. Readers only take the `live` lock, which is never held
//! during I/O.

use std::fmt::Debug;
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{Entry, LogId, OptionalSend, StorageError, StorageIOError, Vote};

use tinymq_storage::{OsStorage, Storage, StorageFile};

use super::durable_file::blocking;
use super::log_file::{encode, replay, Line, Live, LOG_FILE};
use super::TypeConfig;

const VOTE_FILE: &str = "raft-vote.json";
/// A vote file longer than this is not one the node wrote (a term and a node id).
const VOTE_BYTES_MAX: u64 = 64 << 10;

/// Lines of `raft-log.jsonl` that no longer describe the live log (purged or truncated
/// entries, truncation records, superseded purge and committed lines) tolerated before the file
/// is rewritten. Committed hints are the usual source: one per commit.
pub const DEAD_LINES_MAX: u64 = 4096;

/// The file side: only writers (on the blocking pool) lock it.
#[derive(Debug)]
struct Disk {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    /// Opened for appending (`Storage::open_append`).
    file: Arc<dyn StorageFile>,
    /// Lines in the file.
    lines: u64,
    /// Set when a write or fsync failed: what is on disk is then unknown, so nothing more is
    /// written (a later line after a half-written one would turn a tear into damage).
    failed: Option<String>,
}

#[derive(Debug)]
struct Shared {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    live: Mutex<Live>,
    vote: Mutex<Option<Vote<u64>>>,
    disk: Mutex<Disk>,
}

/// The log store; clones share it (openraft reads through a clone).
#[derive(Debug, Clone)]
pub struct LogStore {
    shared: Arc<Shared>,
}

fn write_error(e: std::io::Error) -> StorageError<u64> {
    StorageIOError::write_logs(&e).into()
}

fn vote_error(e: std::io::Error) -> StorageError<u64> {
    StorageIOError::write_vote(&e).into()
}

/// How a change reaches the file.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Persist {
    /// Appended without an fsync (the committed hint).
    Append,
    /// Appended and fsynced.
    AppendSynced,
    /// The file is replaced by the new live state (purges).
    Rewrite,
}

impl Disk {
    fn path(&self) -> PathBuf {
        self.dir.join(LOG_FILE)
    }

    fn usable(&self) -> std::io::Result<()> {
        match &self.failed {
            None => Ok(()),
            Some(cause) => Err(std::io::Error::other(format!(
                "an earlier write to {} failed ({cause}); restart the node",
                self.path().display()
            ))),
        }
    }

    /// Remembers a failure of `result`, so that no write follows it.
    fn watch<T>(&mut self, result: std::io::Result<T>) -> std::io::Result<T> {
        if let Err(e) = &result {
            self.failed = Some(e.to_string());
        }
        result
    }

    fn append(&mut self, bytes: &[u8], lines: u64, sync: bool) -> std::io::Result<()> {
        self.usable()?;
        let written =
            self.file.append_all(bytes).and_then(
                |()| {
                    if sync {
                        self.file.sync_data()
                    } else {
                        Ok(())
                    }
                },
            );
        let path = self.path();
        self.watch(written)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        self.lines += lines;
        Ok(())
    }

    /// Replaces the file with `live`'s lines.
    fn rewrite(&mut self, live: &Live) -> std::io::Result<()> {
        self.usable()?;
        let bytes = live.encode()?;
        let path = self.path();
        let replaced = tinymq_storage::replace_file(&*self.storage, &path, &bytes)
            .map_err(std::io::Error::from)
            .and_then(|()| self.storage.open_append(&path, false));
        self.file = self.watch(replaced)?;
        self.lines = live.lines();
        Ok(())
    }
}

impl Shared {
    fn live(&self) -> MutexGuard<'_, Live> {
        self.live.lock()
    }

    fn disk(&self) -> MutexGuard<'_, Disk> {
        self.disk.lock()
    }

    /// Records `lines` on disk as `how` says, then in the live state; rewrites the file when it
    /// holds too many dead lines. Blocking: runs on the blocking pool.
    fn record(&self, lines: Vec<Line>, how: Persist) -> std::io::Result<()> {
        let mut disk = self.disk();
        if let Err(problem) = self.live().check_batch(&lines) {
            return Err(std::io::Error::other(format!(
                "refusing to write to {}: {problem}",
                disk.path().display()
            )));
        }
        if how != Persist::Rewrite {
            let mut bytes = Vec::new();
            for line in &lines {
                encode(line, &mut bytes)?;
            }
            disk.append(&bytes, lines.len() as u64, how == Persist::AppendSynced)?;
        }
        let snapshot = {
            let mut live = self.live();
            for line in lines {
                live.apply(line);
            }
            let dead = disk.lines.saturating_sub(live.lines());
            (how == Persist::Rewrite || dead > DEAD_LINES_MAX).then(|| live.clone())
        };
        match snapshot {
            Some(live) => disk.rewrite(&live),
            None => Ok(()),
        }
    }
}

impl LogStore {
    /// Opens (or creates) the log and vote in `dir`, replaying the log. Blocking.
    pub fn open(dir: &Path) -> std::io::Result<LogStore> {
        LogStore::open_with(Arc::new(OsStorage), dir)
    }

    /// [`LogStore::open`] with both files going through `storage`.
    pub fn open_with(storage: Arc<dyn Storage>, dir: &Path) -> std::io::Result<LogStore> {
        storage.create_dir_all(dir)?;
        let path = dir.join(LOG_FILE);
        let replayed = replay(&*storage, &path)?;
        let file = storage.open_append(&path, true)?;
        if let Some(reason) = &replayed.torn {
            tracing::warn!(
                file = %path.display(),
                "cutting a torn last line of the Raft log (a crash during a write): {reason}"
            );
            file.set_len(replayed.good_bytes)?;
            file.sync_data()?;
        }
        storage.sync_dir(dir)?;
        let mut disk = Disk {
            storage: storage.clone(),
            dir: dir.to_path_buf(),
            file,
            lines: replayed.lines,
            failed: None,
        };
        let dead = replayed.lines.saturating_sub(replayed.live.lines());
        if replayed.legacy || dead > DEAD_LINES_MAX {
            // Earlier versions wrote lines without checksums; from here on every line has one.
            disk.rewrite(&replayed.live)?;
        }
        Ok(LogStore {
            shared: Arc::new(Shared {
                vote: Mutex::new(read_vote(&*storage, dir)?),
                storage,
                dir: dir.to_path_buf(),
                live: Mutex::new(replayed.live),
                disk: Mutex::new(disk),
            }),
        })
    }

    /// Appends `entries` and fsyncs them; the body of [`RaftLogStorage::append`].
    pub(super) async fn append_entries(
        &self,
        entries: Vec<Entry<TypeConfig>>,
    ) -> std::io::Result<()> {
        let shared = self.shared.clone();
        let lines = entries.into_iter().map(Line::Entry).collect();
        blocking(move || shared.record(lines, Persist::AppendSynced)).await
    }

    async fn record(&self, line: Line, how: Persist) -> std::io::Result<()> {
        let shared = self.shared.clone();
        blocking(move || shared.record(vec![line], how)).await
    }

    /// Lines in the log file now (for tests of its bound).
    #[cfg(test)]
    pub(super) fn file_lines(&self) -> u64 {
        self.shared.disk().lines
    }
}

fn read_vote(storage: &dyn Storage, dir: &Path) -> std::io::Result<Option<Vote<u64>>> {
    let path = dir.join(VOTE_FILE);
    let Some(bytes) = tinymq_storage::read_file(storage, &path, VOTE_BYTES_MAX)? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{} is damaged ({e}); restore it or the node's data directory from a backup",
                path.display()
            ),
        )
    })
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<u64>> {
        use std::ops::Bound;
        // `BTreeMap::range` panics on a range whose start is past its end; such a range
        // (asked for after a peer's odd append) holds no entries.
        let start = match range.start_bound() {
            Bound::Included(&s) => Some(s),
            Bound::Excluded(&s) => s.checked_add(1),
            Bound::Unbounded => Some(0),
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e.checked_add(1),
            Bound::Excluded(&e) => Some(e),
            Bound::Unbounded => None,
        };
        let Some(start) = start else {
            return Ok(Vec::new());
        };
        if end.is_some_and(|end| end <= start) {
            return Ok(Vec::new());
        }
        let live = self.shared.live();
        let entries = match end {
            Some(end) => live.entries.range(start..end),
            None => live.entries.range(start..),
        };
        Ok(entries.map(|(_, e)| e.clone()).collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<u64>> {
        let live = self.shared.live();
        Ok(LogState {
            last_purged_log_id: live.last_purged,
            last_log_id: live.last_log_id(),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError<u64>> {
        let bytes = serde_json::to_vec(vote).map_err(|e| vote_error(std::io::Error::other(e)))?;
        let (storage, path) = (self.shared.storage.clone(), self.shared.dir.join(VOTE_FILE));
        blocking(move || Ok(tinymq_storage::replace_file(&*storage, &path, &bytes)?))
            .await
            .map_err(vote_error)?;
        *self.shared.vote.lock() = Some(*vote);
        Ok(())
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<u64>>,
    ) -> Result<(), StorageError<u64>> {
        match committed {
            Some(id) => self
                .record(Line::Committed(id), Persist::Append)
                .await
                .map_err(write_error),
            // Openraft never takes the committed index back; nothing to record.
            None => Ok(()),
        }
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<u64>>, StorageError<u64>> {
        Ok(self.shared.live().committed)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError<u64>> {
        Ok(*self.shared.vote.lock())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let result = self.append_entries(entries.into_iter().collect()).await;
        let failed = result
            .as_ref()
            .err()
            .map(|e| std::io::Error::new(e.kind(), e.to_string()));
        // Only now are the entries fsynced (or known not to be).
        callback.log_io_completed(result);
        match failed {
            Some(e) => Err(write_error(e)),
            None => Ok(()),
        }
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        self.record(Line::Truncate(log_id.index), Persist::AppendSynced)
            .await
            .map_err(write_error)
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        self.record(Line::Purge(log_id), Persist::Rewrite)
            .await
            .map_err(write_error)
    }
}

#[cfg(test)]
#[path = "log_store_tests.rs"]
mod tests;
