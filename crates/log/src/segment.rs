//! One segment: a `.log` file of record batches starting at `base_offset`, with its offset and
//! time indexes. Files are named by the base offset, zero-padded to 20 digits, so that a
//! directory listing sorts them in offset order.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tinymq_protocol::batch::{field, BATCH_HEADER_BYTES, BATCH_LENGTH_PREFIX_BYTES};

use crate::index::{OffsetEntry, SparseIndex, TimeEntry};
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

/// The header fields of one batch in a log file, read without its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchMeta {
    pub position: u64,
    pub base_offset: i64,
    pub size_bytes: u64,
    pub last_offset: i64,
    pub max_timestamp: i64,
}

impl BatchMeta {
    pub fn end_position(&self) -> u64 {
        self.position + self.size_bytes
    }

    /// Reads the header fields of a batch (already known to be whole) from its bytes.
    pub fn from_header(position: u64, header: &[u8]) -> BatchMeta {
        let i32_at = |at: usize| i32::from_be_bytes(header[at..at + 4].try_into().expect("4"));
        let i64_at = |at: usize| i64::from_be_bytes(header[at..at + 8].try_into().expect("8"));
        let base_offset = i64_at(field::BASE_OFFSET);
        BatchMeta {
            position,
            base_offset,
            size_bytes: BATCH_LENGTH_PREFIX_BYTES as u64 + i32_at(field::BATCH_LENGTH) as u64,
            last_offset: base_offset + i64::from(i32_at(field::LAST_OFFSET_DELTA)),
            max_timestamp: i64_at(field::MAX_TIMESTAMP),
        }
    }
}

/// Reads the header of the batch at `position`. The inner error says why no whole, plausible
/// batch starts there before `end` (a torn tail, or garbage).
pub(crate) fn read_batch_meta(
    file: &dyn StorageFile,
    position: u64,
    end: u64,
) -> io::Result<Result<BatchMeta, String>> {
    if position + BATCH_HEADER_BYTES as u64 > end {
        return Ok(Err(format!(
            "incomplete batch header: {} of {BATCH_HEADER_BYTES} bytes",
            end - position
        )));
    }
    let mut header = [0u8; BATCH_HEADER_BYTES];
    file.read_exact_at(&mut header, position)?;
    let length = i32::from_be_bytes(header[field::BATCH_LENGTH..][..4].try_into().expect("4"));
    if length < (BATCH_HEADER_BYTES - BATCH_LENGTH_PREFIX_BYTES) as i32 {
        return Ok(Err(format!(
            "batch length {length} is below the header size"
        )));
    }
    let meta = BatchMeta::from_header(position, &header);
    if meta.end_position() > end {
        return Ok(Err(format!(
            "batch of {} bytes runs {} bytes past the end of the data",
            meta.size_bytes,
            meta.end_position() - end
        )));
    }
    if meta.last_offset < meta.base_offset {
        return Ok(Err(format!(
            "batch last offset {} is below its base offset {}",
            meta.last_offset, meta.base_offset
        )));
    }
    Ok(Ok(meta))
}

/// A segment's files and what the log knows about their contents.
#[derive(Debug)]
pub(crate) struct Segment {
    pub base_offset: i64,
    pub log_file: Arc<dyn StorageFile>,
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
    pub bytes_since_index_entry: u64,
}

impl Segment {
    /// Creates the empty files of a new segment (the caller syncs the directory).
    pub fn create(storage: &dyn Storage, dir: &Path, base_offset: i64) -> io::Result<Segment> {
        let log_file = storage.open(&segment_path(dir, base_offset, LOG_SUFFIX), true)?;
        log_file.set_len(0)?;
        let offset_index =
            SparseIndex::empty(storage.open(&segment_path(dir, base_offset, INDEX_SUFFIX), true)?)?;
        let time_index = SparseIndex::empty(
            storage.open(&segment_path(dir, base_offset, TIME_INDEX_SUFFIX), true)?,
        )?;
        Ok(Segment::with_indexes(
            base_offset,
            log_file,
            offset_index,
            time_index,
        ))
    }

    /// A segment over existing files, tracking nothing yet.
    pub fn with_indexes(
        base_offset: i64,
        log_file: Arc<dyn StorageFile>,
        offset_index: SparseIndex<OffsetEntry>,
        time_index: SparseIndex<TimeEntry>,
    ) -> Segment {
        Segment {
            base_offset,
            log_file,
            offset_index,
            time_index,
            size_bytes: 0,
            next_offset: base_offset,
            max_timestamp: None,
            first_batch_timestamp: None,
            bytes_since_index_entry: 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.size_bytes == 0
    }

    pub fn relative(&self, offset: i64) -> u32 {
        let relative = offset - self.base_offset;
        assert!(
            (0..=i64::from(u32::MAX)).contains(&relative),
            "offset {offset} belongs to segment {}",
            self.base_offset
        );
        relative as u32
    }

    /// Records a batch written at `meta.position`: advances size, offsets and timestamps, and
    /// adds index entries every `index_interval_bytes`.
    pub fn track_batch(&mut self, meta: &BatchMeta, index_interval_bytes: u32) -> io::Result<()> {
        assert_eq!(
            meta.position, self.size_bytes,
            "batches are tracked in file order"
        );
        if self.bytes_since_index_entry >= u64::from(index_interval_bytes) {
            self.offset_index.append(OffsetEntry {
                relative_offset: self.relative(meta.base_offset),
                position: u32::try_from(meta.position).expect("segment_bytes fits u32"),
            })?;
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
                    relative_offset: self.relative(meta.base_offset),
                })?;
            }
            self.bytes_since_index_entry = 0;
        }
        self.bytes_since_index_entry += meta.size_bytes;
        self.size_bytes = meta.end_position();
        self.next_offset = meta.last_offset + 1;
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
        match self.offset_index.floor(offset - self.base_offset) {
            Some(entry) => u64::from(entry.position),
            None => 0,
        }
    }

    /// The position to start scanning from for the first record at or after `timestamp`.
    pub fn scan_start_for_timestamp(&self, timestamp: i64) -> u64 {
        match self.time_index.lower(timestamp) {
            Some(entry) => {
                self.scan_start_for_offset(self.base_offset + i64::from(entry.relative_offset))
            }
            None => 0,
        }
    }

    /// Forgets everything tracked and empties both indexes, so that the batches can be
    /// tracked again from position 0 (recovery and truncation). The log file is untouched.
    pub fn reset_tracking(&mut self) -> io::Result<()> {
        self.offset_index = SparseIndex::empty(self.offset_index.file().clone())?;
        self.time_index = SparseIndex::empty(self.time_index.file().clone())?;
        self.size_bytes = 0;
        self.next_offset = self.base_offset;
        self.max_timestamp = None;
        self.first_batch_timestamp = None;
        self.bytes_since_index_entry = 0;
        Ok(())
    }

    /// fsyncs the log and both indexes.
    pub fn sync(&self) -> io::Result<()> {
        self.log_file.sync_data()?;
        self.offset_index.sync()?;
        self.time_index.sync()
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
