//! One segment: a `.log` file of record batches starting at `base_offset`, with its offset and
//! time indexes. Files are named by the base offset, zero-padded to 20 digits, so that a
//! directory listing sorts them in offset order.
//!
//! A segment holds no open file: its `.log` is reached through [`LogFileHandle::open`], which
//! goes through the process's LRU of open files ([`crate::open_files`]), and its indexes are
//! in memory, written to their files only when the segment rolls ([`SealedFiles`]).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tinymq_protocol::batch::{field, BatchHeader, BATCH_HEADER_BYTES, BATCH_LENGTH_PREFIX_BYTES};

use crate::index::{store_index_file, OffsetEntry, SparseIndex, TimeEntry};
use crate::open_files::{next_file_id, FileId, OpenFiles};
use crate::storage::{Storage, StorageFile};

pub(crate) const LOG_SUFFIX: &str = "log";
pub(crate) const INDEX_SUFFIX: &str = "index";
pub(crate) const TIME_INDEX_SUFFIX: &str = "timeindex";

/// The path of a segment file: `<dir>/<base offset, 20 digits>.<suffix>`.
pub(crate) fn segment_path(dir: &Path, base_offset: i64, suffix: &str) -> PathBuf {
    dir.join(format!("{base_offset:020}.{suffix}"))
}

/// The base offset named by a segment file, if `path` is one with `suffix`.
pub(crate) fn parse_segment_path(path: &Path, suffix: &str) -> Option<i64> {
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_suffix(suffix)?.strip_suffix('.')?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// Offsets one segment can hold: the indexes store `offset - segment base` as a `u32`.
pub(crate) const SEGMENT_OFFSETS_MAX: u64 = u32::MAX as u64 + 1;
/// Where a segment's data must end: index entries store byte positions as a `u32`.
pub(crate) const SEGMENT_END_POSITION_MAX: u64 = u32::MAX as u64;

/// The header fields of one batch in a log file, read without its records.
///
/// Built only by [`BatchMeta::from_header`], which guarantees `position + size_bytes` and
/// `last_offset + 1` do not overflow and `base_offset <= last_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchMeta {
    pub position: u64,
    pub base_offset: i64,
    pub size_bytes: u64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    /// The `partitionLeaderEpoch` the batch was written under.
    pub leader_epoch: i32,
}

impl BatchMeta {
    pub fn end_position(&self) -> u64 {
        self.position + self.size_bytes
    }

    /// The offset right after this batch.
    pub fn next_offset(&self) -> i64 {
        self.last_offset + 1
    }

    /// Reads the header fields of a batch at `position` from its first bytes. The error says
    /// why they cannot describe a batch: too short, a length below the header, a negative
    /// offset or delta, or offsets past `i64::MAX`.
    pub fn from_header(position: u64, bytes: &[u8]) -> Result<BatchMeta, String> {
        let Some(header) = BatchHeader::new(bytes) else {
            return Err(format!(
                "incomplete batch header: {} of {BATCH_HEADER_BYTES} bytes",
                bytes.len()
            ));
        };
        let length = header.batch_length();
        let size_bytes = u64::try_from(length)
            .ok()
            .filter(|&l| l >= (BATCH_HEADER_BYTES - BATCH_LENGTH_PREFIX_BYTES) as u64)
            .ok_or_else(|| format!("batch length {length} is below the header size"))?
            + BATCH_LENGTH_PREFIX_BYTES as u64;
        position
            .checked_add(size_bytes)
            .ok_or_else(|| format!("batch at position {position} ends past any file"))?;
        let (base_offset, delta) = (header.base_offset(), header.last_offset_delta());
        if base_offset < 0 || delta < 0 {
            return Err(format!(
                "negative batch base offset {base_offset} or last offset delta {delta}"
            ));
        }
        let last_offset = base_offset
            .checked_add(i64::from(delta))
            .filter(|last| last.checked_add(1).is_some())
            .ok_or_else(|| {
                format!("batch offsets {base_offset} + {delta} pass the largest offset")
            })?;
        Ok(BatchMeta {
            position,
            base_offset,
            size_bytes,
            last_offset,
            max_timestamp: header.max_timestamp(),
            leader_epoch: leader_epoch_of(bytes),
        })
    }
}

/// The `partitionLeaderEpoch` field of a batch whose whole header `bytes` starts with.
pub(crate) fn leader_epoch_of(bytes: &[u8]) -> i32 {
    let at = field::PARTITION_LEADER_EPOCH;
    let mut epoch = [0u8; 4];
    epoch.copy_from_slice(&bytes[at..at + 4]);
    i32::from_be_bytes(epoch)
}

/// Reads the header of the batch at `position`. The inner error says why no whole, plausible
/// batch starts there before `end` (a torn tail, or garbage).
pub(crate) fn read_batch_meta(
    file: &dyn StorageFile,
    position: u64,
    end: u64,
) -> io::Result<Result<BatchMeta, String>> {
    let available = end.saturating_sub(position);
    if available < BATCH_HEADER_BYTES as u64 {
        return Ok(Err(format!(
            "incomplete batch header: {available} of {BATCH_HEADER_BYTES} bytes"
        )));
    }
    let mut header = [0u8; BATCH_HEADER_BYTES];
    file.read_exact_at(&mut header, position)?;
    let meta = match BatchMeta::from_header(position, &header) {
        Ok(meta) => meta,
        Err(why) => return Ok(Err(why)),
    };
    if meta.end_position() > end {
        return Ok(Err(format!(
            "batch of {} bytes runs {} bytes past the end of the data",
            meta.size_bytes,
            meta.end_position() - end
        )));
    }
    Ok(Ok(meta))
}

/// An error for a state the log's own code rules out; returned rather than panicking, so a
/// bug fails one operation instead of the process.
pub(crate) fn broken_invariant(what: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("log invariant broken: {what}"),
    )
}

/// What opening segment files needs: the file system and the cache of open files.
#[derive(Debug, Clone)]
pub(crate) struct FileAccess {
    pub storage: Arc<dyn Storage>,
    pub cache: Arc<OpenFiles>,
}

/// How to reach a segment's `.log` file: through the cache of open files, which opens it on
/// first use and may close it again once it is the least recently used. Cheap to clone: a
/// reader copies it (or the file it opens) out from under the segment map's lock.
#[derive(Debug, Clone)]
pub(crate) struct LogFileHandle {
    pub(crate) id: FileId,
    path: Arc<Path>,
    files: FileAccess,
}

impl LogFileHandle {
    pub(crate) fn new(files: &FileAccess, dir: &Path, base_offset: i64) -> LogFileHandle {
        LogFileHandle {
            id: next_file_id(),
            path: segment_path(dir, base_offset, LOG_SUFFIX).into(),
            files: files.clone(),
        }
    }

    /// The open file, opened now if the cache does not hold it. Keep the `Arc` for one
    /// operation only: the cache bounds the files held between operations.
    pub fn open(&self) -> io::Result<Arc<dyn StorageFile>> {
        self.files
            .cache
            .get(self.id, &*self.files.storage, &self.path)
    }

    fn index_path(&self, suffix: &str) -> PathBuf {
        self.path.with_extension(suffix)
    }
}

/// The active segment's log file, to fsync it without holding the segment map. Its indexes
/// need no fsync: recovery rebuilds the active segment's indexes from its batches.
#[derive(Debug, Clone)]
pub(crate) struct SegmentFiles {
    log: LogFileHandle,
}

impl SegmentFiles {
    /// fsyncs the log file.
    pub fn sync(&self) -> io::Result<()> {
        let file = self.log.open()?;
        crate::timed_fsync(|| file.sync_data())
    }
}

/// A segment about to stop being the active one, with its index entries as of now.
#[derive(Debug)]
pub(crate) struct SealedFiles {
    log: LogFileHandle,
    offset_index: Vec<u8>,
    time_index: Vec<u8>,
}

impl SealedFiles {
    /// Writes both index files and fsyncs them and the log: from here on recovery trusts the
    /// segment's indexes and walks only the batches after their last entry.
    pub fn sync(&self) -> io::Result<()> {
        let storage = &*self.log.files.storage;
        let file = self.log.open()?;
        crate::timed_fsync(|| file.sync_data())?;
        store_index_file(
            storage,
            &self.log.index_path(INDEX_SUFFIX),
            &self.offset_index,
        )?;
        store_index_file(
            storage,
            &self.log.index_path(TIME_INDEX_SUFFIX),
            &self.time_index,
        )
    }
}

/// A segment's files and what the log knows about their contents.
#[derive(Debug)]
pub(crate) struct Segment {
    pub base_offset: i64,
    pub log: LogFileHandle,
    pub offset_index: SparseIndex<OffsetEntry>,
    pub time_index: SparseIndex<TimeEntry>,
    /// Bytes of whole, valid batches; the file is never longer once the segment is open.
    pub size_bytes: u64,
    /// One past the last offset in this segment (`base_offset` when empty).
    pub next_offset: i64,
    /// Largest record timestamp, if the segment holds any batch.
    pub max_timestamp: Option<i64>,
    /// Largest timestamp of the first batch: the segment's age for rolling.
    pub first_batch_timestamp: Option<i64>,
    /// When this process created the segment by rolling (by its clock); `None` for segments
    /// found on disk. A segment never rolls by age sooner than its age limit after this, so
    /// batches with ancient timestamps cannot make every write roll.
    pub created_ms: Option<i64>,
    pub bytes_since_index_entry: u64,
}

impl Segment {
    /// Creates the empty log file of a new segment (the caller syncs the directory). Its
    /// index files are written when it rolls.
    pub fn create(files: &FileAccess, dir: &Path, base_offset: i64) -> io::Result<Segment> {
        let log = LogFileHandle::new(files, dir, base_offset);
        let file = files.storage.open(&log.path, true)?;
        file.set_len(0)?;
        files.cache.insert(log.id, file);
        Ok(Segment::with_indexes(
            base_offset,
            log,
            SparseIndex::empty(),
            SparseIndex::empty(),
        ))
    }

    /// A segment over an existing log file, with no index entries and tracking nothing yet.
    pub fn existing(files: &FileAccess, dir: &Path, base_offset: i64) -> Segment {
        Segment::with_indexes(
            base_offset,
            LogFileHandle::new(files, dir, base_offset),
            SparseIndex::empty(),
            SparseIndex::empty(),
        )
    }

    /// A segment over existing files, tracking nothing yet.
    pub fn with_indexes(
        base_offset: i64,
        log: LogFileHandle,
        offset_index: SparseIndex<OffsetEntry>,
        time_index: SparseIndex<TimeEntry>,
    ) -> Segment {
        Segment {
            base_offset,
            log,
            offset_index,
            time_index,
            size_bytes: 0,
            next_offset: base_offset,
            max_timestamp: None,
            first_batch_timestamp: None,
            created_ms: None,
            bytes_since_index_entry: 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.size_bytes == 0
    }

    /// `offset - base_offset` if it fits the indexes' `u32`.
    pub fn relative(&self, offset: i64) -> Option<u32> {
        offset
            .checked_sub(self.base_offset)
            .and_then(|r| u32::try_from(r).ok())
    }

    /// Why `meta` cannot be part of this segment, if it cannot: its offsets past the range the
    /// indexes can encode, or its bytes ending past 4 GiB.
    pub fn misfit(&self, meta: &BatchMeta) -> Option<String> {
        if self.relative(meta.base_offset).is_none() || self.relative(meta.last_offset).is_none() {
            return Some(format!(
                "batch offsets {}..={} are outside segment {}'s range of {SEGMENT_OFFSETS_MAX} offsets",
                meta.base_offset, meta.last_offset, self.base_offset
            ));
        }
        if meta.end_position() > SEGMENT_END_POSITION_MAX {
            return Some(format!(
                "batch at position {} ends past the 4 GiB a segment can address",
                meta.position
            ));
        }
        None
    }

    /// Records a batch written at `meta.position`: advances size, offsets and timestamps, and
    /// adds index entries every `index_interval_bytes`. Callers pass batches in file order,
    /// with increasing offsets, that fit the segment ([`Segment::misfit`]); anything else is
    /// refused with an error and changes nothing.
    pub fn track_batch(&mut self, meta: &BatchMeta, index_interval_bytes: u32) -> io::Result<()> {
        let entry = match (
            self.relative(meta.base_offset),
            u32::try_from(meta.position),
        ) {
            (Some(relative_offset), Ok(position))
                if meta.position == self.size_bytes
                    && meta.base_offset >= self.next_offset
                    && self.misfit(meta).is_none() =>
            {
                OffsetEntry {
                    relative_offset,
                    position,
                }
            }
            _ => {
                return Err(broken_invariant(format!(
                    "batch {meta:?} does not follow segment {} (size {}, next offset {})",
                    self.base_offset, self.size_bytes, self.next_offset
                )))
            }
        };
        if self.bytes_since_index_entry >= u64::from(index_interval_bytes) {
            self.offset_index.append(entry)?;
            let max_so_far = self
                .max_timestamp
                .unwrap_or(i64::MIN)
                .max(meta.max_timestamp);
            if self
                .time_index
                .last()
                .is_none_or(|e| e.timestamp < max_so_far)
            {
                self.time_index.append(TimeEntry {
                    timestamp: max_so_far,
                    relative_offset: entry.relative_offset,
                })?;
            }
            self.bytes_since_index_entry = 0;
        }
        self.bytes_since_index_entry += meta.size_bytes;
        self.size_bytes = meta.end_position();
        self.next_offset = meta.next_offset();
        self.max_timestamp = Some(
            self.max_timestamp
                .unwrap_or(i64::MIN)
                .max(meta.max_timestamp),
        );
        self.first_batch_timestamp.get_or_insert(meta.max_timestamp);
        Ok(())
    }

    /// The position to start scanning from for `offset`: the indexed batch at or before it.
    pub fn scan_start_for_offset(&self, offset: i64) -> u64 {
        match self
            .offset_index
            .floor(offset.saturating_sub(self.base_offset))
        {
            Some(entry) => u64::from(entry.position),
            None => 0,
        }
    }

    /// The position to start scanning from for the first record at or after `timestamp`.
    pub fn scan_start_for_timestamp(&self, timestamp: i64) -> u64 {
        match self.time_index.lower(timestamp) {
            Some(entry) => self.scan_start_for_offset(
                self.base_offset
                    .saturating_add(i64::from(entry.relative_offset)),
            ),
            None => 0,
        }
    }

    /// Forgets everything tracked and empties both indexes, so that the batches can be
    /// tracked again from position 0 (recovery and truncation). The log file is untouched.
    pub fn reset_tracking(&mut self) -> io::Result<()> {
        self.offset_index = SparseIndex::empty();
        self.time_index = SparseIndex::empty();
        self.size_bytes = 0;
        self.next_offset = self.base_offset;
        self.max_timestamp = None;
        self.first_batch_timestamp = None;
        self.bytes_since_index_entry = 0;
        Ok(())
    }

    /// The segment's log file, opened through the cache of open files.
    pub fn log_file(&self) -> io::Result<Arc<dyn StorageFile>> {
        self.log.open()
    }

    /// The active segment's log file, to fsync it after releasing the segment map.
    pub fn files(&self) -> SegmentFiles {
        SegmentFiles {
            log: self.log.clone(),
        }
    }

    /// The segment's log file and index entries, to seal it (write its indexes and fsync)
    /// after releasing the segment map, before it stops being the active segment.
    pub fn sealed(&self) -> SealedFiles {
        SealedFiles {
            log: self.log.clone(),
            offset_index: self.offset_index.encode(),
            time_index: self.time_index.encode(),
        }
    }

    /// Writes the index files of a segment that is not the active one and whose indexes were
    /// rebuilt, so that the next open trusts them. Not fsynced: a lost index is rebuilt again.
    pub fn store_indexes(&self) -> io::Result<()> {
        let storage = &*self.log.files.storage;
        let offsets = self.offset_index.encode();
        let times = self.time_index.encode();
        for (suffix, bytes) in [(INDEX_SUFFIX, offsets), (TIME_INDEX_SUFFIX, times)] {
            let file = storage.open(&self.log.index_path(suffix), true)?;
            file.set_len(0)?;
            file.write_all_at(&bytes, 0)?;
        }
        Ok(())
    }
}

/// A segment dropped from the map (deleted, or its log closed) closes its file, unless a
/// reader still holds it for an operation in flight.
impl Drop for Segment {
    fn drop(&mut self) {
        self.log.files.cache.forget(self.log.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_sort_by_offset_and_parse_back() {
        let p = segment_path(Path::new("/d"), 42, LOG_SUFFIX);
        assert_eq!(p, Path::new("/d/00000000000000000042.log"));
        assert_eq!(parse_segment_path(&p, LOG_SUFFIX), Some(42));
        assert_eq!(parse_segment_path(&p, INDEX_SUFFIX), None);
        assert_eq!(parse_segment_path(Path::new("/d/42.log"), LOG_SUFFIX), None);
    }
}
