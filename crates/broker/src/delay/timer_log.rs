//! One partition's timer log on disk: `<partition dir>/delay/timer.log`, a sequence of
//! `tinymq_delay::entry` frames, with the state they rebuild kept beside the open file.
//! Inside the partition's directory, so it goes when the topic is deleted (the directory is
//! retired whole, `crate::deletion`). Opening cuts a torn or damaged tail at the last whole
//! entry; compaction rewrites the live entries into a new file renamed over the old one, so
//! the file stays within about twice what is waiting. Every method blocks on the disk.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use tinymq_delay::entry::{self, ENTRY_BODY_BYTES_MAX, FRAME_HEADER_BYTES, STORED_BATCH_OFFSET};
use tinymq_delay::{Entry, Limits, Slot, TimerState};

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
pub fn exists(partition_dir: &Path) -> bool {
    timer_path(partition_dir).exists()
}

#[derive(Debug)]
pub struct TimerLog {
    path: PathBuf,
    file: File,
    len: u64,
    state: TimerState,
}

impl TimerLog {
    /// Opens (creating) the timer log of the partition in `partition_dir` and rebuilds its
    /// state from it.
    pub fn open(partition_dir: &Path) -> std::io::Result<TimerLog> {
        let dir = partition_dir.join(TIMER_DIR);
        std::fs::create_dir_all(&dir)?;
        // A compaction that did not reach its rename left the old file whole.
        let _ = std::fs::remove_file(dir.join(COMPACTING_FILE));
        let path = dir.join(TIMER_FILE);
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)?;
        let mut state = TimerState::new(Limits::default());
        let len = replay(&file, &path, &mut state)?;
        if len < file.metadata()?.len() {
            file.set_len(len)?;
            file.sync_all()?;
        }
        Ok(TimerLog {
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
    pub fn file_handle(&self) -> std::io::Result<File> {
        self.file.try_clone()
    }

    /// Writes `entries` (not fsynced: see [`TimerLog::file_handle`]) and applies them.
    pub fn append(&mut self, entries: &[Entry]) -> std::io::Result<()> {
        let mut out = Vec::new();
        let mut positions = Vec::with_capacity(entries.len());
        for e in entries {
            positions.push(self.len + (out.len() + STORED_BATCH_OFFSET) as u64);
            entry::encode(e, &mut out);
        }
        if let Err(e) = self.file.write_all(&out) {
            // A partial write is cut here (or, if that fails too, at the next open), so the
            // positions of later entries stay right; the state is not changed.
            let _ = self.file.set_len(self.len);
            return Err(e);
        }
        self.len += out.len() as u64;
        for (e, position) in entries.iter().zip(positions) {
            self.state.apply(e, position);
        }
        Ok(())
    }

    /// Makes every later write fail, as a failing disk would (tests).
    #[cfg(test)]
    pub fn break_writes_for_test(&mut self) -> std::io::Result<()> {
        self.file = File::open(&self.path)?;
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
    /// their marks) into a new file, fsyncs it and renames it over the old one. The state is
    /// rebuilt from the new file, so positions are its own. A failure before the rename
    /// leaves this log as it was (usable); one after it leaves this log's handle on the
    /// unlinked old file, which must not be written any more ([`CompactError::renamed`]).
    pub fn compact(&mut self) -> Result<(), CompactError> {
        let dir = self
            .path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let tmp = dir.join(COMPACTING_FILE);
        if let Err(source) = self.write_compacted(&tmp) {
            let _ = std::fs::remove_file(&tmp);
            return Err(CompactError {
                renamed: false,
                source,
            });
        }
        let after_rename = |source| CompactError {
            renamed: true,
            source,
        };
        File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(after_rename)?;
        *self = TimerLog::open(dir.parent().unwrap_or(&dir)).map_err(after_rename)?;
        Ok(())
    }

    /// Writes the live entries to `tmp`, fsyncs it and renames it over the log.
    fn write_compacted(&self, tmp: &Path) -> std::io::Result<()> {
        let mut out = std::io::BufWriter::new(File::create(tmp)?);
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
        let file = out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(tmp, &self.path)
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
fn replay(file: &File, path: &Path, state: &mut TimerState) -> std::io::Result<u64> {
    let mut reader = BufReader::with_capacity(1 << 20, file);
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
    use tinymq_delay::{Admission, ClientIdentity};

    fn client(seq: i32) -> ClientIdentity {
        ClientIdentity {
            producer_id: 5,
            producer_epoch: 0,
            first_sequence: seq,
            last_sequence: seq,
        }
    }

    fn store(log: &mut TimerLog, seq: i32, deliver_at_ms: i64, bytes: usize) {
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
        log.append(&[stored]).unwrap();
    }

    #[test]
    fn a_reopened_log_has_the_same_entries_and_a_torn_tail_is_cut() {
        let tmp = tempfile::tempdir().unwrap();
        let mut log = TimerLog::open(tmp.path()).unwrap();
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
        let log = TimerLog::open(tmp.path()).unwrap();
        assert_eq!(log.len(), whole, "the torn frame is cut");
        assert_eq!(log.state().index().iter().collect::<Vec<_>>(), before);
        let w = log.state().index().iter().next().unwrap();
        assert_eq!(log.read_batch(&w.slot).unwrap().len(), 10);
    }

    #[test]
    fn compaction_keeps_waiting_batches_and_remembered_identities_and_shrinks_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let mut log = TimerLog::open(tmp.path()).unwrap();
        for seq in 0..60 {
            store(&mut log, seq, i64::from(seq), 100_000);
        }
        let marks: Vec<Entry> = (1..=55)
            .map(|entry_id| Entry::Delivered {
                entry_id,
                delivered_at_ms: 1,
            })
            .collect();
        log.append(&marks).unwrap();
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
}
