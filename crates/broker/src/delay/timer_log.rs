//! One partition's timer log on disk: `<partition dir>/delay/timer.log`, a sequence of
//! `tinymq_delay::entry` frames, with the state they rebuild kept beside the open file.
//! Inside the partition's directory, so it goes when the topic is deleted (the directory is
//! retired whole, `crate::deletion`). Opening cuts a torn or damaged tail at the last whole
//! entry; compaction rewrites the live entries into a new file renamed over the old one, so
//! the file stays within about twice what is waiting. Every method blocks on the disk.

use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use tinymq_delay::entry::{self, ENTRY_BODY_BYTES_MAX, FRAME_HEADER_BYTES, STORED_BATCH_OFFSET};
use tinymq_delay::{Entry, Limits, Slot, TimerState};
use tinymq_storage::{FileReader, Storage, StorageFile};

/// The directory under a partition's directory that holds its timer log.
pub const TIMER_DIR: &str = "delay";
const TIMER_FILE: &str = "timer.log";
const COMPACTING_FILE: &str = "timer.log.compacting";
/// A file below this is never compacted (rewriting it would cost more than it holds).
const COMPACT_BYTES_MIN: u64 = 4 << 20;
/// Bytes a waiting entry costs in the file besides its batch (frame, fields, its mark).
const ENTRY_OVERHEAD_BYTES: u64 = 128;

pub fn timer_path(partition_dir: &Path) -> PathBuf {
    partition_dir.join(TIMER_DIR).join(TIMER_FILE)
}

/// Whether the partition has a timer log (it had delayed batches once).
pub fn exists(storage: &dyn Storage, partition_dir: &Path) -> bool {
    storage.exists(&timer_path(partition_dir))
}

#[derive(Debug)]
pub struct TimerLog {
    storage: Arc<dyn Storage>,
    path: PathBuf,
    /// Opened for appending (`Storage::open_append`).
    file: Arc<dyn StorageFile>,
    len: u64,
    state: TimerState,
}

impl TimerLog {
    /// Opens (creating) the timer log of the partition in `partition_dir` through `storage`
    /// and rebuilds its state from it.
    pub fn open(storage: Arc<dyn Storage>, partition_dir: &Path) -> std::io::Result<TimerLog> {
        let dir = partition_dir.join(TIMER_DIR);
        let created = !storage.exists(&dir);
        storage.create_dir_all(&dir)?;
        // A compaction that did not reach its rename left the old file whole.
        let _ = storage.remove(&dir.join(COMPACTING_FILE));
        let path = dir.join(TIMER_FILE);
        let new_file = !storage.exists(&path);
        let file = storage.open_append(&path, true)?;
        if created || new_file {
            // The entries of the new file (and directory) survive a power cut.
            storage.sync_dir(&dir)?;
            if created {
                storage.sync_dir(partition_dir)?;
            }
        }
        let mut state = TimerState::new(Limits::default());
        let len = replay(&*file, &path, &mut state)?;
        if len < file.byte_len()? {
            file.set_len(len)?;
            file.sync_data()?;
        }
        Ok(TimerLog {
            storage,
            path,
            file,
            len,
            state,
        })
    }

    pub fn state(&self) -> &TimerState {
        &self.state
    }

    pub fn state_mut(&mut self) -> &mut TimerState {
        &mut self.state
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    /// A second handle on the file, for fsyncs that do not hold the log.
    pub fn file_handle(&self) -> Arc<dyn StorageFile> {
        self.file.clone()
    }

    /// Writes `entries` (not fsynced: see [`TimerLog::file_handle`]) and applies them.
    pub fn append(&mut self, entries: &[Entry]) -> std::io::Result<()> {
        let mut out = Vec::new();
        let mut positions = Vec::with_capacity(entries.len());
        for e in entries {
            positions.push(self.len + (out.len() + STORED_BATCH_OFFSET) as u64);
            entry::encode(e, &mut out);
        }
        if let Err(e) = self.file.append_all(&out) {
            // A partial write is cut here (or, if that fails too, at the next open), so the
            // positions of later entries stay right; the state is not changed.
            let _ = self.file.set_len(self.len);
            return Err(std::io::Error::new(
                e.kind(),
                format!("{}: write failed: {e}", self.path.display()),
            ));
        }
        self.len += out.len() as u64;
        for (e, position) in entries.iter().zip(positions) {
            self.state.apply(e, position);
        }
        Ok(())
    }

    /// The batch of a waiting entry.
    pub fn read_batch(&self, slot: &Slot) -> std::io::Result<Bytes> {
        let mut batch = vec![0u8; slot.length as usize];
        self.file.read_exact_at(&mut batch, slot.position)?;
        Ok(Bytes::from(batch))
    }

    /// Whether the file is large enough, and mostly dead enough, to rewrite.
    pub fn compaction_due(&self) -> bool {
        let index = self.state.index();
        let live = index.bytes()
            + ENTRY_OVERHEAD_BYTES * (index.len() + self.state.remembered_len()) as u64;
        self.len >= COMPACT_BYTES_MIN && self.len > 2 * live
    }

    /// Rewrites the live entries (checkpoint, remembered identities, waiting batches with
    /// their marks) into a new file, replacing the old one (`tinymq_storage::replace_file_with`:
    /// fsynced, renamed over it, the directory fsynced). The state is rebuilt from the new
    /// file, so positions are its own. A failure before the rename leaves this log as it was
    /// (usable); one after it leaves this log's handle on the unlinked old file, which must
    /// not be written any more ([`CompactError::renamed`]).
    pub fn compact(&mut self) -> Result<(), CompactError> {
        let dir = self
            .path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let tmp = dir.join(COMPACTING_FILE);
        let replaced = tinymq_storage::replace_file_with(&*self.storage, &self.path, &tmp, |out| {
            self.write_compacted(out)
        });
        if let Err(e) = replaced {
            return Err(CompactError {
                renamed: e.renamed(),
                source: e.into(),
            });
        }
        let reopened = TimerLog::open(self.storage.clone(), dir.parent().unwrap_or(&dir));
        *self = reopened.map_err(|source| CompactError {
            renamed: true,
            source,
        })?;
        Ok(())
    }

    /// Writes the live entries to `out` (the new file).
    fn write_compacted(&self, out: &mut tinymq_storage::FileWriter<'_>) -> std::io::Result<()> {
        let mut out = std::io::BufWriter::new(out);
        let mut frame = Vec::new();
        for e in self.state.compacted_head() {
            frame.clear();
            entry::encode(&e, &mut frame);
            out.write_all(&frame)?;
        }
        for w in self.state.index().iter() {
            let stored = Entry::Stored {
                entry_id: w.entry_id,
                deliver_at_ms: w.deliver_at_ms,
                stored_at_ms: w.slot.stored_at_ms,
                client: w.slot.client,
                batch: self.read_batch(&w.slot)?,
            };
            frame.clear();
            entry::encode(&stored, &mut frame);
            if let Some(stamp) = w.slot.assigned {
                entry::encode(
                    &Entry::Assigned {
                        entry_id: w.entry_id,
                        stamp,
                        scan_from_offset: w.slot.scan_from_offset,
                    },
                    &mut frame,
                );
            }
            out.write_all(&frame)?;
        }
        out.flush()
    }
}

/// A compaction that failed, and whether it got as far as renaming the new file over the log.
#[derive(Debug, thiserror::Error)]
#[error("{source}")]
pub struct CompactError {
    pub renamed: bool,
    pub source: std::io::Error,
}

/// Applies every whole entry of `file` to `state`; returns where the last one ends (a torn
/// or damaged tail after it is logged, and cut by the caller).
fn replay(file: &dyn StorageFile, path: &Path, state: &mut TimerState) -> std::io::Result<u64> {
    let mut reader = BufReader::with_capacity(1 << 20, FileReader::new(file, 0));
    let mut at = 0u64;
    loop {
        let mut header = [0u8; FRAME_HEADER_BYTES];
        match read_full(&mut reader, &mut header)? {
            0 => return Ok(at),
            n if n < FRAME_HEADER_BYTES => return Ok(cut(path, at, "a torn frame header")),
            _ => {}
        }
        let (length, crc) = match entry::frame_header(header) {
            Ok(frame) => frame,
            Err(e) => return Ok(cut(path, at, &e.to_string())),
        };
        debug_assert!(length <= ENTRY_BODY_BYTES_MAX);
        let mut body = vec![0u8; length];
        if read_full(&mut reader, &mut body)? < length {
            return Ok(cut(path, at, "a torn entry"));
        }
        match entry::decode_body(Bytes::from(body), crc) {
            Ok(e) => state.apply(&e, at + STORED_BATCH_OFFSET as u64),
            Err(e) => return Ok(cut(path, at, &e.to_string())),
        }
        at += (FRAME_HEADER_BYTES + length) as u64;
    }
}

fn cut(path: &Path, at: u64, why: &str) -> u64 {
    tracing::warn!(file = %path.display(), at, why, "timer log cut after its last whole entry");
    at
}

/// Reads until `buf` is full or the file ends; returns the bytes read.
fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;
    use tinymq_delay::{Admission, ClientIdentity};
    use tinymq_storage::fault::{CrashMode, Faults, FaultyStorage};
    use tinymq_storage::OsStorage;

    fn os() -> Arc<dyn Storage> {
        Arc::new(OsStorage)
    }

    fn client(seq: i32) -> ClientIdentity {
        ClientIdentity {
            producer_id: 5,
            producer_epoch: 0,
            first_sequence: seq,
            last_sequence: seq,
        }
    }

    fn store(log: &mut TimerLog, seq: i32, deliver_at_ms: i64, bytes: usize) {
        try_store(log, seq, deliver_at_ms, bytes).unwrap();
    }

    fn try_store(
        log: &mut TimerLog,
        seq: i32,
        deliver_at_ms: i64,
        bytes: usize,
    ) -> std::io::Result<()> {
        let batch = Bytes::from(vec![seq as u8; bytes]);
        let Ok(Admission::Store {
            entry_id,
            deliver_at_ms,
        }) = log.state().admit(&client(seq), bytes, deliver_at_ms, 0)
        else {
            panic!("admitted")
        };
        let stored = Entry::Stored {
            entry_id,
            deliver_at_ms,
            stored_at_ms: 0,
            client: client(seq),
            batch,
        };
        log.append(&[stored])
    }

    #[test]
    fn a_reopened_log_has_the_same_entries_and_a_torn_tail_is_cut() {
        let tmp = tempfile::tempdir().unwrap();
        let mut log = TimerLog::open(os(), tmp.path()).unwrap();
        for seq in 0..5 {
            store(&mut log, seq, 100 - i64::from(seq), 10);
        }
        let delivered = Entry::Delivered {
            entry_id: 2,
            delivered_at_ms: 1,
        };
        log.append(&[delivered]).unwrap();
        let before: Vec<_> = log.state().index().iter().collect();
        let whole = log.len();
        drop(log);
        let mut file = OpenOptions::new()
            .append(true)
            .open(timer_path(tmp.path()))
            .unwrap();
        file.write_all(&[0, 0, 0, 40, 1, 2]).unwrap();
        let log = TimerLog::open(os(), tmp.path()).unwrap();
        assert_eq!(log.len(), whole, "the torn frame is cut");
        assert_eq!(log.state().index().iter().collect::<Vec<_>>(), before);
        let w = log.state().index().iter().next().unwrap();
        assert_eq!(log.read_batch(&w.slot).unwrap().len(), 10);
    }

    /// 60 stored batches, 55 of them delivered: enough dead entries for a compaction.
    fn fill_until_compaction_due(log: &mut TimerLog) {
        for seq in 0..60 {
            store(log, seq, i64::from(seq), 100_000);
        }
        let marks: Vec<Entry> = (1..=55)
            .map(|entry_id| Entry::Delivered {
                entry_id,
                delivered_at_ms: 1,
            })
            .collect();
        log.append(&marks).unwrap();
    }

    #[test]
    fn compaction_keeps_waiting_batches_and_remembered_identities_and_shrinks_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let mut log = TimerLog::open(os(), tmp.path()).unwrap();
        fill_until_compaction_due(&mut log);
        assert!(log.compaction_due());
        let (before, len) = (log.state().index().iter().collect::<Vec<_>>(), log.len());
        log.compact().unwrap();
        assert!(log.len() < len / 5, "{} of {len}", log.len());
        let after: Vec<_> = log.state().index().iter().collect();
        assert_eq!(after.len(), before.len());
        for (a, b) in after.iter().zip(&before) {
            assert_eq!((a.entry_id, a.deliver_at_ms), (b.entry_id, b.deliver_at_ms));
            assert_eq!(log.read_batch(&a.slot).unwrap()[0], (a.entry_id - 1) as u8);
        }
        let again = log.state().admit(&client(3), 1, 0, 0);
        assert_eq!(again, Ok(Admission::Duplicate { deliver_at_ms: 3 }));
        assert_eq!(log.state().next_entry_id(), 61);
    }

    fn waiting(log: &TimerLog) -> Vec<(u64, i64)> {
        log.state()
            .index()
            .iter()
            .map(|w| (w.entry_id, w.deliver_at_ms))
            .collect()
    }

    /// A timer log on the fault-injecting storage with three fsynced (acknowledged) entries.
    fn faulty_log(batch_bytes: usize) -> (FaultyStorage, TimerLog, Vec<(u64, i64)>) {
        let fs = FaultyStorage::new();
        let mut log = TimerLog::open(Arc::new(fs.clone()), Path::new("/data/t-0")).unwrap();
        for seq in 0..3 {
            store(&mut log, seq, 100 + i64::from(seq), batch_bytes);
        }
        log.file_handle().sync_data().unwrap();
        let acknowledged = waiting(&log);
        (fs, log, acknowledged)
    }

    /// Issue 28: ENOSPC and a torn write refuse the append with an error naming the file (no
    /// panic) and leave the state as it was; a restart after a power cut (keeping or losing
    /// the torn bytes) has every acknowledged entry, and appends go on after it.
    #[test]
    fn enospc_and_torn_appends_are_refused_and_a_restart_keeps_what_was_acknowledged() {
        for (fault, mode) in [
            (
                Faults {
                    space_bytes_left: Some(7),
                    ..Faults::default()
                },
                CrashMode::KeepUnsyncedPrefix(1 << 20),
            ),
            (
                Faults {
                    torn_next_write_bytes: Some(7),
                    ..Faults::default()
                },
                CrashMode::KeepUnsyncedPrefix(1 << 20),
            ),
            (
                Faults {
                    torn_next_write_bytes: Some(30),
                    ..Faults::default()
                },
                CrashMode::LoseUnsynced,
            ),
        ] {
            let (fs, mut log, acknowledged) = faulty_log(10);
            let len = log.len();
            fs.set_faults(fault.clone());
            let e = try_store(&mut log, 9, 50, 10).unwrap_err();
            assert!(e.to_string().contains("timer.log"), "{fault:?}: {e}");
            assert_eq!(log.len(), len, "{fault:?}");
            assert_eq!(waiting(&log), acknowledged, "{fault:?}: state unchanged");
            fs.set_faults(Faults::default());
            drop(log);
            fs.crash(mode);
            let mut log = TimerLog::open(Arc::new(fs.clone()), Path::new("/data/t-0")).unwrap();
            assert_eq!(waiting(&log), acknowledged, "{fault:?} {mode:?}");
            assert_eq!(log.len(), len, "{fault:?}: a torn tail is cut");
            store(&mut log, 9, 50, 10);
            let w = log.state().index().iter().next().unwrap();
            assert_eq!(log.read_batch(&w.slot).unwrap(), vec![9u8; 10]);
        }
    }

    /// EIO on fsync: the sync fails, and after a power cut a restart has the entries fsynced
    /// before it (the ones the failed fsync covered were never acknowledged).
    #[test]
    fn eio_on_fsync_fails_and_a_restart_keeps_what_was_synced_before() {
        let (fs, mut log, acknowledged) = faulty_log(10);
        store(&mut log, 9, 50, 10);
        fs.set_faults(Faults {
            fail_sync: true,
            ..Faults::default()
        });
        let e = log.file_handle().sync_data().unwrap_err();
        assert!(e.to_string().contains("EIO"), "{e}");
        fs.set_faults(Faults::default());
        drop(log);
        fs.crash(CrashMode::LoseUnsynced);
        let log = TimerLog::open(Arc::new(fs.clone()), Path::new("/data/t-0")).unwrap();
        assert_eq!(waiting(&log), acknowledged);
    }

    /// A compaction that fails before its rename (ENOSPC, a torn write, EIO on the new
    /// file's fsync) leaves the old log whole and usable; after a crash too.
    #[test]
    fn a_failed_compaction_leaves_the_old_log_whole() {
        for fault in Faults::each_write_fault(1000) {
            let fs = FaultyStorage::new();
            let dir = Path::new("/data/t-0");
            let mut log = TimerLog::open(Arc::new(fs.clone()), dir).unwrap();
            fill_until_compaction_due(&mut log);
            log.file_handle().sync_data().unwrap();
            assert!(log.compaction_due());
            let (before, len) = (waiting(&log), log.len());
            fs.set_faults(fault.clone());
            let e = log.compact().unwrap_err();
            assert!(!e.renamed, "{fault:?}: {e}");
            assert!(e.to_string().contains("timer.log"), "{fault:?}: {e}");
            fs.set_faults(Faults::default());
            assert_eq!((waiting(&log), log.len()), (before.clone(), len));
            assert!(!fs.exists(&dir.join(TIMER_DIR).join(COMPACTING_FILE)));
            store(&mut log, 70, 1, 10);
            log.file_handle().sync_data().unwrap();
            drop(log);
            fs.crash(CrashMode::LoseUnsynced);
            let mut log = TimerLog::open(Arc::new(fs.clone()), dir).unwrap();
            assert_eq!(waiting(&log).len(), before.len() + 1, "{fault:?}");
            log.compact().unwrap();
            assert_eq!(waiting(&log).len(), before.len() + 1, "{fault:?}");
        }
    }
}
