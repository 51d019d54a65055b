//! The Raft log and vote on disk.
//!
//! `raft-log.jsonl` is append-only: one JSON line per entry, plus lines recording truncations
//! and purges, replayed on open (a torn last line from a crash is dropped). Every append is
//! fsynced before openraft is told it is durable. The last committed log id is recorded too
//! (without an fsync of its own: it is a hint that lets a restarted node apply its committed
//! entries at once instead of after the next election; losing it loses nothing). `raft-vote.json` is replaced atomically and
//! fsynced before `save_vote` returns.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{Entry, LogId, OptionalSend, StorageError, StorageIOError, Vote};
use serde::{Deserialize, Serialize};

use super::TypeConfig;

const LOG_FILE: &str = "raft-log.jsonl";
const VOTE_FILE: &str = "raft-vote.json";

#[derive(Serialize, Deserialize)]
enum Line {
    Entry(Entry<TypeConfig>),
    /// Entries at and after this index were removed.
    Truncate(u64),
    /// Entries up to and including this log id were removed (covered by a snapshot).
    Purge(LogId<u64>),
    /// Entries up to and including this log id are committed.
    Committed(LogId<u64>),
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    file: File,
    entries: BTreeMap<u64, Entry<TypeConfig>>,
    last_purged: Option<LogId<u64>>,
    committed: Option<LogId<u64>>,
    vote: Option<Vote<u64>>,
}

/// The log store; clones share it (openraft reads through a clone).
#[derive(Debug, Clone)]
pub struct LogStore {
    inner: Arc<Mutex<Inner>>,
}

fn write_error(e: std::io::Error) -> StorageError<u64> {
    StorageIOError::write_logs(&e).into()
}

fn vote_error(e: std::io::Error) -> StorageError<u64> {
    StorageIOError::write_vote(&e).into()
}

impl Inner {
    fn append_lines(&mut self, lines: &[Line]) -> std::io::Result<()> {
        self.write_lines(lines)?;
        self.file.sync_data()
    }

    fn write_lines(&mut self, lines: &[Line]) -> std::io::Result<()> {
        let mut buf = Vec::new();
        for line in lines {
            serde_json::to_writer(&mut buf, line).map_err(std::io::Error::other)?;
            buf.push(b'\n');
        }
        self.file.write_all(&buf)
    }
}

impl LogStore {
    /// Opens (or creates) the log and vote in `dir`, replaying the log.
    pub fn open(dir: &Path) -> std::io::Result<LogStore> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(LOG_FILE);
        let mut entries = BTreeMap::new();
        let mut last_purged = None;
        let mut committed = None;
        let mut good_len = 0u64;
        if let Ok(file) = File::open(&path) {
            for line in BufReader::new(file).split(b'\n') {
                let line = line?;
                let Ok(parsed) = serde_json::from_slice::<Line>(&line) else {
                    break;
                };
                good_len += line.len() as u64 + 1;
                match parsed {
                    Line::Entry(e) => {
                        entries.insert(e.log_id.index, e);
                    }
                    Line::Truncate(since) => {
                        entries.split_off(&since);
                    }
                    Line::Purge(upto) => {
                        entries = entries.split_off(&(upto.index + 1));
                        last_purged = Some(upto);
                    }
                    Line::Committed(id) => committed = Some(id),
                }
            }
        }
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        // Drop a torn last line left by a crash mid-append.
        if file.metadata()?.len() > good_len {
            file.set_len(good_len)?;
            file.sync_data()?;
        }
        File::open(dir)?.sync_all()?;
        let vote = match std::fs::read(dir.join(VOTE_FILE)) {
            Ok(bytes) => Some(serde_json::from_slice(&bytes).map_err(std::io::Error::other)?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        Ok(LogStore {
            inner: Arc::new(Mutex::new(Inner {
                dir: dir.to_path_buf(),
                file,
                entries,
                last_purged,
                committed,
                vote,
            })),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("log store lock")
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<u64>> {
        Ok(self
            .lock()
            .entries
            .range(range)
            .map(|(_, e)| e.clone())
            .collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<u64>> {
        let inner = self.lock();
        let last = inner
            .entries
            .values()
            .next_back()
            .map(|e| e.log_id)
            .or(inner.last_purged);
        Ok(LogState {
            last_purged_log_id: inner.last_purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError<u64>> {
        let mut inner = self.lock();
        let bytes = serde_json::to_vec(vote).map_err(|e| vote_error(std::io::Error::other(e)))?;
        super::durable_file::write_atomically(&inner.dir, VOTE_FILE, &bytes).map_err(vote_error)?;
        inner.vote = Some(*vote);
        Ok(())
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<u64>>,
    ) -> Result<(), StorageError<u64>> {
        let mut inner = self.lock();
        if let Some(id) = committed {
            inner
                .write_lines(&[Line::Committed(id)])
                .map_err(write_error)?;
        }
        inner.committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<u64>>, StorageError<u64>> {
        Ok(self.lock().committed)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError<u64>> {
        Ok(self.lock().vote)
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
        let mut inner = self.lock();
        let entries: Vec<Entry<TypeConfig>> = entries.into_iter().collect();
        let lines: Vec<Line> = entries.iter().cloned().map(Line::Entry).collect();
        let result = inner.append_lines(&lines);
        if result.is_ok() {
            for e in entries {
                inner.entries.insert(e.log_id.index, e);
            }
        }
        let failed = result
            .as_ref()
            .err()
            .map(|e| std::io::Error::new(e.kind(), e.to_string()));
        callback.log_io_completed(result);
        match failed {
            Some(e) => Err(write_error(e)),
            None => Ok(()),
        }
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        let mut inner = self.lock();
        inner
            .append_lines(&[Line::Truncate(log_id.index)])
            .map_err(write_error)?;
        inner.entries.split_off(&log_id.index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        let mut inner = self.lock();
        inner
            .append_lines(&[Line::Purge(log_id)])
            .map_err(write_error)?;
        let kept = inner.entries.split_off(&(log_id.index + 1));
        inner.entries = kept;
        inner.last_purged = Some(log_id);
        Ok(())
    }
}
