//! Opening segments after a clean stop or a crash: walk the batches, check them, cut a torn or
//! corrupt tail, and rebuild indexes that disagree with the log.
//!
//! Segments before the active one were fsynced (log and indexes) when they rolled, so they
//! are trusted up to their last index entry and only the batches after it are walked
//! (`Check::Tail`). The active segment may end in a torn write, so every batch in it is read
//! and its CRC checked (`Check::Full`). The first batch that fails ends the segment there.

use std::io;
use std::path::Path;

use bytes::Bytes;
use tinymq_protocol::batch::RecordBatch;

use crate::index::{OffsetEntry, SparseIndex, TimeEntry};
use crate::segment::{
    read_batch_meta, segment_path, BatchMeta, Segment, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX,
};
use crate::storage::{Storage, StorageFile};

/// How much of a segment recovery checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// Read every batch and verify its CRC.
    Full,
    /// Trust the indexes; walk the headers after the last index entry.
    Tail,
}

/// A cut made by recovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncation {
    pub segment_base_offset: i64,
    /// Byte position in the segment's `.log` file where the valid data ends.
    pub position: u64,
    /// Bytes removed from the file.
    pub bytes_cut: u64,
    /// The log's end offset after the cut.
    pub next_offset: i64,
    pub reason: String,
}

/// What opening a log found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    pub segments: usize,
    /// Segments whose every batch was read and CRC-checked.
    pub segments_fully_checked: usize,
    /// Segments whose indexes were rebuilt because they were missing or disagreed with the log.
    pub indexes_rebuilt: usize,
    pub truncations: Vec<Truncation>,
    /// Segments deleted because an earlier segment was cut (their offsets would leave a gap).
    pub segments_deleted: Vec<i64>,
    /// Stray files removed (temporary files, indexes without a log).
    pub stray_files_removed: usize,
}

impl RecoveryReport {
    pub fn bytes_cut(&self) -> u64 {
        self.truncations.iter().map(|t| t.bytes_cut).sum()
    }
}

/// Walks batches from `start` to `end`, calling `on_batch` for each good one; returns where
/// the good data ends and, if it ends early, why.
fn scan_batches(
    file: &dyn StorageFile,
    start: u64,
    end: u64,
    mut expected_offset_min: i64,
    check: Check,
    batch_bytes_max: u64,
    mut on_batch: impl FnMut(&BatchMeta) -> io::Result<()>,
) -> io::Result<(u64, Option<String>)> {
    let mut position = start;
    while position < end {
        let meta = match read_batch_meta(file, position, end)? {
            Ok(meta) => meta,
            Err(reason) => return Ok((position, Some(reason))),
        };
        if meta.size_bytes > batch_bytes_max {
            let reason = format!("batch claims {} bytes, over the limit", meta.size_bytes);
            return Ok((position, Some(reason)));
        }
        if meta.base_offset < expected_offset_min {
            let reason = format!(
                "batch base offset {} is below the expected {expected_offset_min}",
                meta.base_offset
            );
            return Ok((position, Some(reason)));
        }
        if check == Check::Full {
            let mut bytes = vec![0u8; meta.size_bytes as usize];
            file.read_exact_at(&mut bytes, position)?;
            if let Err(e) = RecordBatch::parse(Bytes::from(bytes)) {
                return Ok((position, Some(e.to_string())));
            }
        }
        on_batch(&meta)?;
        expected_offset_min = meta.last_offset + 1;
        position = meta.end_position();
    }
    Ok((position, None))
}

/// Opens an existing segment, checking it as `check` says. A problem found is cut off the
/// log file and recorded in `report`.
pub(crate) fn open_segment(
    storage: &dyn Storage,
    dir: &Path,
    base_offset: i64,
    check: Check,
    index_interval_bytes: u32,
    batch_bytes_max: u64,
    report: &mut RecoveryReport,
) -> io::Result<Segment> {
    let log_file = storage.open(&segment_path(dir, base_offset, LOG_SUFFIX), false)?;
    let offset_path = segment_path(dir, base_offset, INDEX_SUFFIX);
    let time_path = segment_path(dir, base_offset, TIME_INDEX_SUFFIX);
    let indexes_exist = storage.exists(&offset_path) && storage.exists(&time_path);
    let offset_file = storage.open(&offset_path, true)?;
    let time_file = storage.open(&time_path, true)?;
    report.segments += 1;
    if check == Check::Tail && indexes_exist {
        let loaded = (
            SparseIndex::<OffsetEntry>::load(offset_file.clone())?,
            SparseIndex::<TimeEntry>::load(time_file.clone())?,
        );
        if let (Some(offset_index), Some(time_index)) = loaded {
            let mut segment =
                Segment::with_indexes(base_offset, log_file.clone(), offset_index, time_index);
            if open_tail(&mut segment, index_interval_bytes, batch_bytes_max)? {
                return Ok(segment);
            }
        }
    }
    if check == Check::Tail {
        report.indexes_rebuilt += 1;
    }
    let mut segment = Segment::with_indexes(
        base_offset,
        log_file,
        SparseIndex::empty(offset_file)?,
        SparseIndex::empty(time_file)?,
    );
    open_full(&mut segment, index_interval_bytes, batch_bytes_max, report)?;
    Ok(segment)
}

/// Walks the batches after the last entry of the loaded indexes. Returns false (leaving the
/// segment to be fully checked) if the indexes or the tail look wrong.
fn open_tail(
    segment: &mut Segment,
    index_interval_bytes: u32,
    batch_bytes_max: u64,
) -> io::Result<bool> {
    let file_len = segment.log_file.byte_len()?;
    let last_entry = segment.offset_index.last().copied();
    let start = last_entry.map_or(0, |e| u64::from(e.position));
    let start_offset = segment.base_offset + last_entry.map_or(0, |e| i64::from(e.relative_offset));
    let first = match read_batch_meta(&*segment.log_file, 0, file_len)? {
        Ok(meta) => Some(meta),
        Err(_) if file_len == 0 => None,
        Err(_) => return Ok(false),
    };
    segment.size_bytes = start;
    segment.max_timestamp = segment.time_index.last().map(|e| e.timestamp);
    segment.first_batch_timestamp = first.map(|m| m.max_timestamp);
    segment.bytes_since_index_entry = 0;
    let mut first_tail_offset = None;
    let log_file = segment.log_file.clone();
    let (end, problem) = scan_batches(
        &*log_file,
        start,
        file_len,
        segment.base_offset,
        Check::Tail,
        batch_bytes_max,
        |meta| {
            first_tail_offset.get_or_insert(meta.base_offset);
            segment.track_batch(meta, index_interval_bytes)
        },
    )?;
    let index_agrees = last_entry.is_none() || first_tail_offset == Some(start_offset);
    let time_index_agrees = segment
        .time_index
        .last()
        .is_none_or(|e| segment.base_offset + i64::from(e.relative_offset) < segment.next_offset);
    Ok(problem.is_none() && end == file_len && index_agrees && time_index_agrees)
}

/// Reads and CRC-checks every batch, rebuilding both indexes, and cuts at the first problem.
fn open_full(
    segment: &mut Segment,
    index_interval_bytes: u32,
    batch_bytes_max: u64,
    report: &mut RecoveryReport,
) -> io::Result<()> {
    segment.reset_tracking()?;
    let file_len = segment.log_file.byte_len()?;
    let log_file = segment.log_file.clone();
    let base_offset = segment.base_offset;
    let (end, problem) = scan_batches(
        &*log_file,
        0,
        file_len,
        base_offset,
        Check::Full,
        batch_bytes_max,
        |meta| segment.track_batch(meta, index_interval_bytes),
    )?;
    report.segments_fully_checked += 1;
    if end < file_len {
        let reason = problem.unwrap_or_else(|| "data past the last batch".into());
        tracing::warn!(
            segment = base_offset,
            position = end,
            bytes_cut = file_len - end,
            %reason,
            "recovery cut the log"
        );
        log_file.set_len(end)?;
        log_file.sync_data()?;
        report.truncations.push(Truncation {
            segment_base_offset: base_offset,
            position: end,
            bytes_cut: file_len - end,
            next_offset: segment.next_offset,
            reason,
        });
    }
    Ok(())
}
