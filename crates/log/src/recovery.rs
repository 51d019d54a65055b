//! Opening segments after a clean stop or a crash: walk the batches, check them, cut a torn or
//! corrupt tail, and rebuild indexes that disagree with the log.
//!
//! Segments before the active one were fsynced (log and indexes) when they rolled, so they
//! are trusted up to their last index entry and only the batches after it are walked
//! (`Check::Tail`). The active segment may end in a torn write, so every batch in it is read
//! and its CRC checked (`Check::Full`). The first batch that fails ends the segment there.
//!
//! Nothing in a file can make opening fail or panic: a batch that cannot be replayed (bad
//! header, length past the file or past 4 GiB, offsets going backwards or outside the range
//! the segment's indexes can encode, CRC mismatch) is cut with a reason; indexes that look
//! wrong are rebuilt. Only I/O errors are errors.

use std::io;
use std::path::Path;

use tinymq_protocol::batch::{
    field, BatchError, BatchHeader, Compression, BATCH_HEADER_BYTES, BATCH_MAGIC,
};

use crate::index::{OffsetEntry, SparseIndex, TimeEntry};
use crate::segment::{
    read_batch_meta, segment_path, BatchMeta, FileAccess, Segment, INDEX_SUFFIX, TIME_INDEX_SUFFIX,
};
use crate::storage::StorageFile;

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
    /// Why the leader-epoch checkpoint was rebuilt from the batch headers (missing while the
    /// log holds batches, damaged, or disagreeing with the log), if it was.
    pub leader_epochs_rebuilt: Option<String>,
    /// Why `log-start-offset-checkpoint` could not be read, if it could not (the log then
    /// starts at its first segment).
    pub log_start_checkpoint_damaged: Option<String>,
    /// Why `cleaner-offset-checkpoint` could not be read, if it could not (gaps are then
    /// accepted anywhere, and cleaning starts over).
    pub cleaner_checkpoint_damaged: Option<String>,
    /// Swaps of cleaned segments that a crash interrupted, finished.
    pub swaps_finished: usize,
}

impl RecoveryReport {
    pub fn bytes_cut(&self) -> u64 {
        self.truncations.iter().map(|t| t.bytes_cut).sum()
    }
}

/// Bytes read at a time when checking a batch's CRC, so that the memory recovery uses does
/// not depend on the batch lengths a file claims.
const CRC_READ_CHUNK_BYTES: usize = 64 << 10;

/// Checks what [`tinymq_protocol::batch::RecordBatch::parse`] checks (magic, header sanity,
/// compression, CRC) without holding the whole batch in memory: the CRC is computed over
/// chunks read into `scratch`, reused from batch to batch. The inner error says why the batch
/// is not valid.
fn verify_batch(
    file: &dyn StorageFile,
    meta: &BatchMeta,
    scratch: &mut Vec<u8>,
) -> io::Result<Result<(), String>> {
    let mut bytes = [0u8; BATCH_HEADER_BYTES];
    file.read_exact_at(&mut bytes, meta.position)?;
    let header = BatchHeader::of(&bytes);
    if header.magic() != BATCH_MAGIC {
        return Ok(Err(BatchError::BadMagic(header.magic()).to_string()));
    }
    if let Err(e) = Compression::from_attributes(header.attributes()) {
        return Ok(Err(e.to_string()));
    }
    let record_count = header.record_count();
    if record_count < 0 {
        return Ok(Err(format!("negative record count {record_count}")));
    }
    let stored = header.crc();
    let mut computed = 0;
    let mut position = meta.position + field::ATTRIBUTES as u64;
    let end = meta.end_position();
    scratch.resize(CRC_READ_CHUNK_BYTES, 0);
    let chunk = scratch.as_mut_slice();
    while position < end {
        let n = usize::try_from(end - position).map_or(chunk.len(), |left| left.min(chunk.len()));
        file.read_exact_at(&mut chunk[..n], position)?;
        computed = crc32c::crc32c_append(computed, &chunk[..n]);
        position += n as u64;
    }
    if computed != stored {
        return Ok(Err(BatchError::CrcMismatch { stored, computed }.to_string()));
    }
    Ok(Ok(()))
}

/// What recovery accepts of a segment's batches.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    pub index_interval_bytes: u32,
    pub batch_bytes_max: u64,
    /// Batches starting below this may start past the end of the batch before (compaction
    /// and the followers copying it left gaps: `cleaner_checkpoint.rs`).
    pub gaps_below: i64,
}

/// Why the batch described by `meta` cannot be replayed into `segment` as the batch that
/// starts at `expected_base` (the segment's base offset, or the end of the batch before), if
/// it cannot. Offsets are contiguous, so a batch that starts anywhere else is damage (its
/// `baseOffset` is not covered by the CRC) and is cut: accepting a gap would let the next
/// append go on from a wrong offset. Below `rules.gaps_below` a batch may start later.
fn unreplayable(
    segment: &Segment,
    meta: &BatchMeta,
    expected_base: i64,
    rules: &Rules,
) -> Option<String> {
    if meta.size_bytes > rules.batch_bytes_max {
        return Some(format!(
            "batch claims {} bytes, over the limit",
            meta.size_bytes
        ));
    }
    let gap_allowed = meta.base_offset > expected_base && meta.base_offset < rules.gaps_below;
    if meta.base_offset != expected_base && !gap_allowed {
        return Some(format!(
            "batch base offset {} is not the expected {expected_base}",
            meta.base_offset
        ));
    }
    segment.misfit(meta)
}

/// Walks the batches of `segment`'s log from `start` to `end`, tracking each good one in the
/// segment; returns where the good data ends and, if it ends early, why. A batch is good if
/// its header is sane, it fits the segment (offsets and position), its offsets increase, and
/// (under `Check::Full`) its CRC matches. Only I/O failures are errors.
fn scan_batches(
    segment: &mut Segment,
    start: u64,
    end: u64,
    check: Check,
    rules: &Rules,
) -> io::Result<(u64, Option<String>)> {
    let file = segment.log_file()?;
    let mut scratch = Vec::new();
    let mut position = start;
    while position < end {
        let meta = match read_batch_meta(&*file, position, end)? {
            Ok(meta) => meta,
            Err(reason) => return Ok((position, Some(reason))),
        };
        if let Some(reason) = unreplayable(segment, &meta, segment.next_offset, rules) {
            return Ok((position, Some(reason)));
        }
        if check == Check::Full {
            if let Err(reason) = verify_batch(&*file, &meta, &mut scratch)? {
                return Ok((position, Some(reason)));
            }
        }
        segment.track_batch(&meta, rules.index_interval_bytes)?;
        position = meta.end_position();
    }
    Ok((position, None))
}

/// Opens an existing segment, checking it as `check` says. A problem found is cut off the
/// log file and recorded in `report`. Fails only on I/O errors.
pub(crate) fn open_segment(
    files: &FileAccess,
    dir: &Path,
    base_offset: i64,
    check: Check,
    rules: &Rules,
    report: &mut RecoveryReport,
) -> io::Result<Segment> {
    let mut segment = Segment::existing(files, dir, base_offset);
    report.segments += 1;
    if check == Check::Tail {
        // At most one index entry per batch, and a batch is at least a header.
        let entries_max = segment.log_file()?.byte_len()? / BATCH_HEADER_BYTES as u64 + 1;
        let storage = &*files.storage;
        let loaded = (
            SparseIndex::<OffsetEntry>::load(
                storage,
                &segment_path(dir, base_offset, INDEX_SUFFIX),
                entries_max,
            )?,
            SparseIndex::<TimeEntry>::load(
                storage,
                &segment_path(dir, base_offset, TIME_INDEX_SUFFIX),
                entries_max,
            )?,
        );
        if let (Some(offset_index), Some(time_index)) = loaded {
            segment.offset_index = offset_index;
            segment.time_index = time_index;
            if open_tail(&mut segment, rules)? {
                return Ok(segment);
            }
        }
        report.indexes_rebuilt += 1;
    }
    open_full(&mut segment, rules, report)?;
    if check == Check::Tail {
        segment.store_indexes()?;
    }
    Ok(segment)
}

/// Walks the batches after the last entry of the loaded indexes. Returns false (leaving the
/// segment to be fully checked) if the indexes or the tail look wrong.
fn open_tail(segment: &mut Segment, rules: &Rules) -> io::Result<bool> {
    let file = segment.log_file()?;
    let file_len = file.byte_len()?;
    let first = match read_batch_meta(&*file, 0, file_len)? {
        Ok(meta) => Some(meta),
        Err(_) if file_len == 0 => None,
        Err(_) => return Ok(false),
    };
    if first.is_some_and(|m| unreplayable(segment, &m, segment.base_offset, rules).is_some()) {
        return Ok(false);
    }
    // The last offset-index entry names the batch the walk starts at; it must be there.
    let (start, start_offset) = match segment.offset_index.last().copied() {
        None => (0, None),
        Some(entry) => {
            let Some(offset) = segment
                .base_offset
                .checked_add(i64::from(entry.relative_offset))
            else {
                return Ok(false);
            };
            (u64::from(entry.position), Some(offset))
        }
    };
    if let Some(offset) = start_offset {
        match read_batch_meta(&*file, start, file_len)? {
            Ok(meta) if meta.base_offset == offset => segment.next_offset = offset,
            _ => return Ok(false),
        }
    }
    segment.size_bytes = start;
    segment.max_timestamp = segment.time_index.last().map(|e| e.timestamp);
    segment.first_batch_timestamp = first.map(|m| m.max_timestamp);
    segment.bytes_since_index_entry = 0;
    let (end, problem) = scan_batches(segment, start, file_len, Check::Tail, rules)?;
    // Both offsets are ≥ 0 (segment names and batch offsets are), so this cannot overflow.
    let offsets_held = segment.next_offset - segment.base_offset;
    let time_index_agrees = segment
        .time_index
        .last()
        .is_none_or(|e| i64::from(e.relative_offset) < offsets_held);
    Ok(problem.is_none() && end == file_len && time_index_agrees)
}

/// Reads and CRC-checks every batch, rebuilding both indexes, and cuts at the first problem.
fn open_full(segment: &mut Segment, rules: &Rules, report: &mut RecoveryReport) -> io::Result<()> {
    segment.reset_tracking()?;
    let file_len = segment.log_file()?.byte_len()?;
    let (end, problem) = scan_batches(segment, 0, file_len, Check::Full, rules)?;
    report.segments_fully_checked += 1;
    if end < file_len {
        let reason = problem.unwrap_or_else(|| "data past the last batch".into());
        cut(segment, end, file_len, reason, report)?;
    }
    Ok(())
}

/// Cuts a segment's log file at `end` (durably) and records why.
fn cut(
    segment: &Segment,
    end: u64,
    file_len: u64,
    reason: String,
    report: &mut RecoveryReport,
) -> io::Result<()> {
    let base_offset = segment.base_offset;
    tracing::warn!(
        segment = base_offset,
        position = end,
        bytes_cut = file_len - end,
        %reason,
        "recovery cut the log"
    );
    let file = segment.log_file()?;
    file.set_len(end)?;
    file.sync_data()?;
    report.truncations.push(Truncation {
        segment_base_offset: base_offset,
        position: end,
        bytes_cut: file_len - end,
        next_offset: segment.next_offset,
        reason,
    });
    Ok(())
}

/// Bytes read at a time when walking batch headers: small batches are read whole (their
/// headers are most of them), large ones only for their headers.
const HEADER_WALK_READ_BYTES: usize = 256 << 10;

impl crate::log::PartitionLog {
    /// Calls `f` with the header (the first [`BATCH_HEADER_BYTES`] bytes) of every batch from
    /// the one holding `offset` to the end of the log, in order, reading the headers but not
    /// the records: for state a broker rebuilds from batch headers when it opens a partition
    /// (idempotent producers), which must not cost a read and CRC check of the whole log.
    /// Opening already checked what can be torn (the active segment, whole); earlier
    /// segments were fsynced when they rolled. Meant for a log nothing writes to meanwhile.
    pub fn for_each_batch_header(
        &self,
        offset: i64,
        mut f: impl FnMut(BatchHeader<'_>),
    ) -> Result<(), crate::LogError> {
        let segments: Vec<(crate::segment::LogFileHandle, i64, u64)> = {
            let state = self.state.read();
            state
                .segments
                .values()
                .filter(|s| s.next_offset > offset && !s.is_empty())
                .map(|s| (s.log.clone(), s.base_offset, s.size_bytes))
                .collect()
        };
        let mut buffer = Vec::new();
        for (log, base, end) in segments {
            let io = |e| self.io_error(base, e);
            let file = log.open().map_err(io)?;
            let start = match self.state.read().segments.get(&base) {
                Some(s) => s.scan_start_for_offset(offset),
                None => 0,
            };
            walk_headers(&*file, start, end, &mut buffer, |meta, header| {
                if meta.last_offset >= offset {
                    f(header);
                }
            })
            .map_err(io)?;
        }
        Ok(())
    }
}

/// Walks the batch headers of `file` from `start` to `end`, reading
/// [`HEADER_WALK_READ_BYTES`] at a time into `buffer`. A header that does not describe a
/// batch is an error: recovery cut every such tail before.
fn walk_headers(
    file: &dyn StorageFile,
    start: u64,
    end: u64,
    buffer: &mut Vec<u8>,
    mut f: impl FnMut(&BatchMeta, BatchHeader<'_>),
) -> io::Result<()> {
    let mut position = start;
    // The file range `buffer` holds: [held_from, held_from + buffer.len()).
    let mut held_from = start;
    buffer.clear();
    while position < end {
        let header_end = position + BATCH_HEADER_BYTES as u64;
        if header_end > end {
            return Err(bad_header(position, "an incomplete batch header".into()));
        }
        let held_to = held_from + buffer.len() as u64;
        if position < held_from || header_end > held_to {
            let want = (end - position).min(HEADER_WALK_READ_BYTES as u64) as usize;
            buffer.resize(want.max(BATCH_HEADER_BYTES), 0);
            file.read_exact_at(buffer, position)?;
            held_from = position;
        }
        let at = (position - held_from) as usize;
        let header = buffer
            .get(at..)
            .and_then(BatchHeader::new)
            .ok_or_else(|| bad_header(position, "outside the read buffer".into()))?;
        let meta = BatchMeta::from_header(position, header.bytes())
            .map_err(|why| bad_header(position, why))?;
        f(&meta, header);
        position = meta.end_position();
    }
    Ok(())
}

fn bad_header(position: u64, why: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("batch header at position {position}: {why}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::FaultyStorage;
    use crate::open_files::OpenFiles;
    use crate::segment::SEGMENT_END_POSITION_MAX;
    use crate::storage::Storage;
    use std::sync::Arc;
    use tinymq_protocol::batch::{stamp_base_offset, BatchBuilder, ProducerStamp, RecordInput};

    /// A file of `len` bytes, zero but for one batch at `position`: a segment past 4 GiB
    /// without 4 GiB of memory or disk.
    #[derive(Debug)]
    struct SparseFile {
        len: u64,
        position: u64,
        data: Vec<u8>,
    }

    impl StorageFile for SparseFile {
        fn read_at(&self, buf: &mut [u8], position: u64) -> io::Result<usize> {
            let n = buf.len().min(self.len.saturating_sub(position) as usize);
            for (i, byte) in buf[..n].iter_mut().enumerate() {
                let at = position + i as u64;
                *byte = at
                    .checked_sub(self.position)
                    .and_then(|k| self.data.get(k as usize).copied())
                    .unwrap_or(0);
            }
            Ok(n)
        }
        fn write_all_at(&self, _: &[u8], _: u64) -> io::Result<()> {
            Err(io::Error::other("read-only"))
        }
        fn byte_len(&self) -> io::Result<u64> {
            Ok(self.len)
        }
        fn set_len(&self, _: u64) -> io::Result<()> {
            Err(io::Error::other("read-only"))
        }
        fn sync_data(&self) -> io::Result<()> {
            Ok(())
        }
    }

    fn one_batch() -> Vec<u8> {
        let mut builder = BatchBuilder::new(Compression::None, ProducerStamp::NONE);
        builder.push(&RecordInput {
            timestamp_ms: 0,
            key: None,
            value: Some(b"near the end"),
            headers: &[],
        });
        let mut bytes = builder.build().unwrap().to_vec();
        stamp_base_offset(&mut bytes, 7);
        bytes
    }

    /// Scans a segment whose one batch (at offset 7) ends `past` bytes after the last
    /// position a segment can address.
    fn scan_batch_ending_past_4_gib(past: u64, check: Check) -> (u64, u64, Option<String>) {
        let data = one_batch();
        let end = SEGMENT_END_POSITION_MAX + past;
        let position = end - data.len() as u64;
        let fs = FaultyStorage::new();
        fs.create_dir_all(Path::new("/s")).unwrap();
        let files = FileAccess {
            storage: Arc::new(fs),
            cache: Arc::new(OpenFiles::new(4)),
        };
        let mut segment = Segment::existing(&files, Path::new("/s"), 0);
        // The cache hands out this file as the segment's log.
        files.cache.insert(
            segment.log.id,
            Arc::new(SparseFile {
                len: end,
                position,
                data,
            }),
        );
        // As if every byte before had been whole batches up to offset 7.
        segment.size_bytes = position;
        segment.next_offset = 7;
        let rules = Rules {
            index_interval_bytes: 4096,
            batch_bytes_max: u64::MAX,
            gaps_below: 0,
        };
        let (stop, problem) =
            scan_batches(&mut segment, position, end, check, &rules).expect("no I/O error");
        (position, stop, problem)
    }

    #[test]
    fn a_batch_ending_past_4_gib_is_cut_and_one_ending_at_it_is_kept() {
        for check in [Check::Tail, Check::Full] {
            let (_, stop, problem) = scan_batch_ending_past_4_gib(0, check);
            assert_eq!(
                (stop, problem),
                (SEGMENT_END_POSITION_MAX, None),
                "{check:?}"
            );
            let (start, stop, problem) = scan_batch_ending_past_4_gib(1, check);
            assert_eq!(stop, start, "{check:?}: cut where the batch starts");
            let reason = problem.expect("a reason");
            assert!(reason.contains("4 GiB"), "{check:?}: {reason}");
        }
    }
}
