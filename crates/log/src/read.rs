//! Reading the log: whole batches from an offset (copied out, or located as a file range to
//! send without copying), and offsets by timestamp.
//!
//! A read holds the segment map's lock only long enough to pick the segment and copy its file
//! handle and valid length; the file is then read without the lock. Data below the length
//! taken under the lock is complete, since appends `pwrite` before they publish the new length.
//!
//! Truncation is the one thing that changes bytes below a published length: it cuts the file,
//! and appends then write new batches at the same positions. So a read also copies the log's
//! truncation count, and after reading the file checks it under the lock again: if a
//! truncation ran in between, what it read may mix the old and new logs, and it reads again.
//! A read therefore returns the log as it was either before or after any truncation.

use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;
use tinymq_protocol::batch::RecordBatch;

use crate::error::LogError;
use crate::log::{LogState, PartitionLog};
use crate::segment::{read_batch_meta, BatchMeta, LogFileHandle, Segment};
use crate::storage::StorageFile;

/// Reads redone because truncations kept overlapping them before one gives up with an error
/// (truncation is rare: a follower after a leader change).
const READ_ATTEMPTS_MAX: u32 = 16;

/// Decompressed bytes allowed when decoding one batch to look up a timestamp.
const TIMESTAMP_LOOKUP_DECOMPRESSED_BYTES_MAX: usize = 64 << 20;

/// The result of [`PartitionLog::read`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadResult {
    /// Whole batches, verbatim from the log. The first may start before the requested offset.
    pub records: Bytes,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
}

/// Where the batches of a read lie: see [`PartitionLog::read_slice`].
#[derive(Debug, Clone)]
pub struct FileSlice {
    /// The segment's open file (kept open for as long as the slice lives).
    pub file: Arc<dyn StorageFile>,
    pub position: u64,
    pub len: u64,
    /// Records in the slice's batches (offsets they span), for metrics.
    pub records: u64,
    /// The offset after the slice's last batch: its reader holds every record below it
    /// from the requested offset on (read-committed fetches bound aborted transactions so).
    pub next_offset: i64,
    /// The log's truncation count when the slice was taken.
    truncations: u64,
}

/// The result of [`PartitionLog::read_slice`].
#[derive(Debug, Clone)]
pub struct SliceRead {
    /// `None` when no batch is visible from the offset.
    pub slice: Option<FileSlice>,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
}

/// A segment's file and valid extent, copied out from under the lock.
struct SegmentSnapshot {
    file: Arc<dyn StorageFile>,
    base_offset: i64,
    scan_start: u64,
    end: u64,
}

impl SegmentSnapshot {
    /// Opens the segment's file through the cache of open files (under the segment map's
    /// read lock, so that retention cannot unlink it first).
    fn of(segment: &Segment, scan_start: u64) -> Result<SegmentSnapshot, LogError> {
        let file = segment.log_file().map_err(|e| LogError::Io {
            path: format!("segment {}", segment.base_offset).into(),
            source: e,
        })?;
        Ok(SegmentSnapshot {
            file,
            base_offset: segment.base_offset,
            scan_start,
            end: segment.size_bytes,
        })
    }

    /// Walks batch headers from the scan start, yielding each until `f` says stop.
    fn walk(&self, mut f: impl FnMut(&BatchMeta) -> bool) -> Result<(), LogError> {
        let mut position = self.scan_start;
        while position < self.end {
            let meta = read_batch_meta(&*self.file, position, self.end)
                .map_err(|e| self.error(e))?
                .map_err(|why| {
                    self.error(std::io::Error::new(std::io::ErrorKind::InvalidData, why))
                })?;
            if !f(&meta) {
                break;
            }
            position = meta.end_position();
        }
        Ok(())
    }

    /// Reads `len` bytes at `position`; `len` is within the segment's valid length, which
    /// the log has checked to be at most 4 GiB.
    fn read(&self, position: u64, len: u64) -> Result<Bytes, LogError> {
        let len = usize::try_from(len).map_err(|_| {
            self.error(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a read of {len} bytes does not fit in memory"),
            ))
        })?;
        let mut bytes = vec![0u8; len];
        self.file
            .read_exact_at(&mut bytes, position)
            .map_err(|e| self.error(e))?;
        Ok(Bytes::from(bytes))
    }

    fn error(&self, e: std::io::Error) -> LogError {
        LogError::Io {
            path: format!("segment {}", self.base_offset).into(),
            source: e,
        }
    }
}

/// The segment holding `offset`, or the first segment after it when `offset` falls past the
/// end of its segment's data (an empty segment, or a gap).
fn segment_for(state: &LogState, offset: i64) -> Option<&Segment> {
    let candidate = state.segments.range(..=offset).next_back().map(|(_, s)| s);
    match candidate {
        Some(segment) if offset < segment.next_offset => Some(segment),
        _ => state
            .segments
            .range((Bound::Excluded(offset), Bound::Unbounded))
            .map(|(_, s)| s)
            .find(|s| !s.is_empty()),
    }
}

impl PartitionLog {
    /// Runs `read` until no truncation overlapped it (see the module doc). `read` gets the
    /// truncation count to compare with, copied under the same lock as its snapshot.
    fn consistent<T>(
        &self,
        mut read: impl FnMut() -> (u64, Result<T, LogError>),
    ) -> Result<T, LogError> {
        for _ in 0..READ_ATTEMPTS_MAX {
            let (truncations, outcome) = read();
            if self.state.read().truncations == truncations {
                return outcome;
            }
        }
        Err(LogError::Io {
            path: self.dir.clone(),
            source: std::io::Error::new(
                std::io::ErrorKind::Interrupted,
                format!("the log was truncated during each of {READ_ATTEMPTS_MAX} reads"),
            ),
        })
    }

    /// Reads whole batches starting with the one that holds `offset`, up to `bytes_max` bytes
    /// (but always at least one batch, so a consumer can make progress past a large batch),
    /// and only batches that end below `offset_limit` (e.g. the high watermark).
    pub fn read(
        &self,
        offset: i64,
        bytes_max: usize,
        offset_limit: Option<i64>,
    ) -> Result<ReadResult, LogError> {
        self.consistent(|| {
            let mut truncations = 0;
            let outcome = self
                .locate_once(offset, bytes_max, offset_limit, &mut truncations)
                .and_then(|(found, log_start_offset, log_end_offset)| {
                    let records = match found {
                        Some((snapshot, position, len, _, _)) => snapshot.read(position, len)?,
                        None => Bytes::new(),
                    };
                    Ok(ReadResult {
                        records,
                        log_start_offset,
                        log_end_offset,
                    })
                });
            (truncations, outcome)
        })
    }

    /// Where the batches [`PartitionLog::read`] would return lie, without reading them: the
    /// open segment file and the byte range, for a caller that sends them on without copying
    /// (`sendfile`). The range is complete and was valid when this returned; only a
    /// truncation can change its bytes later, which [`PartitionLog::unchanged_since`] tells
    /// (check it after the bytes have been read from the file). Holding the slice keeps the
    /// file open, so retention deleting the segment meanwhile does not take its bytes away.
    pub fn read_slice(
        &self,
        offset: i64,
        bytes_max: usize,
        offset_limit: Option<i64>,
    ) -> Result<SliceRead, LogError> {
        self.consistent(|| {
            let mut truncations = 0;
            let outcome = self
                .locate_once(offset, bytes_max, offset_limit, &mut truncations)
                .map(|(found, log_start_offset, log_end_offset)| SliceRead {
                    slice: found.map(
                        |(snapshot, position, len, records, next_offset)| FileSlice {
                            file: snapshot.file,
                            position,
                            len,
                            records,
                            next_offset,
                            truncations,
                        },
                    ),
                    log_start_offset,
                    log_end_offset,
                });
            (truncations, outcome)
        })
    }

    /// Whether no truncation has run since `slice` was taken, i.e. whether bytes read from it
    /// up to now are the ones it described.
    pub fn unchanged_since(&self, slice: &FileSlice) -> bool {
        self.state.read().truncations == slice.truncations
    }

    /// The segment, position and length of the batches a read returns (nothing when no
    /// batch is visible), with the log's start and end offsets.
    #[allow(clippy::type_complexity)]
    fn locate_once(
        &self,
        offset: i64,
        bytes_max: usize,
        offset_limit: Option<i64>,
        truncations: &mut u64,
    ) -> Result<(Option<(SegmentSnapshot, u64, u64, u64, i64)>, i64, i64), LogError> {
        let (snapshot, log_start_offset, log_end_offset) = {
            let state = self.state.read();
            *truncations = state.truncations;
            let (start, end) = (state.log_start_offset(), state.log_end_offset());
            if offset < start || offset > end {
                return Err(LogError::OffsetOutOfRange {
                    offset,
                    log_start: start,
                    log_end: end,
                });
            }
            let limit = offset_limit.map_or(end, |l| l.min(end));
            let snapshot = match segment_for(&state, offset) {
                Some(segment) if offset < limit => Some(SegmentSnapshot::of(
                    segment,
                    segment.scan_start_for_offset(offset),
                )?),
                _ => None,
            };
            (snapshot.map(|s| (s, limit)), start, end)
        };
        let Some((snapshot, limit)) = snapshot else {
            return Ok((None, log_start_offset, log_end_offset));
        };
        let mut first_position = None;
        let mut total: u64 = 0;
        let mut records: u64 = 0;
        let mut next_offset = offset;
        snapshot.walk(|meta| {
            if meta.last_offset < offset {
                return true;
            }
            if meta.last_offset >= limit {
                return false;
            }
            if first_position.is_some() && total + meta.size_bytes > bytes_max as u64 {
                return false;
            }
            first_position.get_or_insert(meta.position);
            total += meta.size_bytes;
            // A valid batch's offsets increase (recovery checks it); saturating all the same.
            let spanned = meta
                .last_offset
                .saturating_sub(meta.base_offset)
                .saturating_add(1);
            records = records.saturating_add(u64::try_from(spanned).unwrap_or(0));
            next_offset = meta.last_offset.saturating_add(1);
            true
        })?;
        let found =
            first_position.map(|position| (snapshot, position, total, records, next_offset));
        Ok((found, log_start_offset, log_end_offset))
    }

    /// The first offset whose record timestamp is at or after `timestamp_ms`, with that
    /// record's timestamp; `None` when every record is older.
    pub fn offset_for_timestamp(&self, timestamp_ms: i64) -> Result<Option<(i64, i64)>, LogError> {
        self.consistent(|| {
            let mut truncations = 0;
            let outcome = self.offset_for_timestamp_once(timestamp_ms, &mut truncations);
            (truncations, outcome)
        })
    }

    /// The offset of the first record with the log's largest timestamp, with that timestamp
    /// (Kafka's ListOffsets `-3`, KIP-734); `None` when the log holds no record. The largest
    /// is found from each segment's own maximum, and the record by a search for that time
    /// from the log start. (A segment's maximum counts records deleted inside it: when the
    /// largest timestamp was a deleted record's, the answer is `None`.)
    pub fn offset_of_max_timestamp(&self) -> Result<Option<(i64, i64)>, LogError> {
        let max = {
            let state = self.state.read();
            state
                .segments
                .values()
                .filter_map(|s| s.max_timestamp)
                .max()
        };
        match max {
            Some(max) => self.offset_for_timestamp(max),
            None => Ok(None),
        }
    }

    fn offset_for_timestamp_once(
        &self,
        timestamp_ms: i64,
        truncations: &mut u64,
    ) -> Result<Option<(i64, i64)>, LogError> {
        // Segment handles, not open files: this may visit every segment of the log, and the
        // cache of open files must not be flooded (nor the lock held) while it opens them all.
        let (candidates, log_start): (Vec<(LogFileHandle, i64, u64, u64)>, i64) = {
            let state = self.state.read();
            *truncations = state.truncations;
            let log_start = state.log_start_offset();
            let candidates = state
                .segments
                .values()
                .filter(|s| s.next_offset > log_start)
                .filter(|s| s.max_timestamp.is_some_and(|max| max >= timestamp_ms))
                .map(|s| {
                    let start = s.scan_start_for_timestamp(timestamp_ms);
                    (s.log.clone(), s.base_offset, start, s.size_bytes)
                })
                .collect();
            (candidates, log_start)
        };
        for (log, base_offset, scan_start, end) in candidates {
            let file = match log.open() {
                Ok(file) => file,
                // Retention deleted it meanwhile: its records are below the log start now.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    return Err(LogError::Io {
                        path: format!("segment {base_offset}").into(),
                        source: e,
                    })
                }
            };
            let snapshot = SegmentSnapshot {
                file,
                base_offset,
                scan_start,
                end,
            };
            // Batches whose max timestamp reaches the target are searched record by record
            // (without keeping records: a batch may hold millions of tiny ones).
            let mut outcome: Result<Option<(i64, i64)>, LogError> = Ok(None);
            snapshot.walk(|meta| {
                // Below the log start (records deleted inside this segment): never an answer.
                if meta.max_timestamp < timestamp_ms || meta.last_offset < log_start {
                    return true;
                }
                outcome = snapshot
                    .read(meta.position, meta.size_bytes)
                    .and_then(|bytes| {
                        let batch = RecordBatch::parse(bytes)?;
                        Ok(batch.first_at_or_after(
                            timestamp_ms,
                            log_start,
                            TIMESTAMP_LOOKUP_DECOMPRESSED_BYTES_MAX,
                        )?)
                    });
                matches!(outcome, Ok(None))
            })?;
            if let Some(found) = outcome? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod slice_tests {
    use crate::fault::FaultyStorage;
    use crate::tests::{batch, open, small_segments, T0};

    /// A slice names exactly the bytes `read` returns, and a truncation after it is taken
    /// is noticed by `unchanged_since` (a sender must then not complete its frame).
    #[test]
    fn a_slice_is_the_read_and_a_truncation_invalidates_it() {
        let fs = FaultyStorage::new();
        let (log, _) = open(&fs, small_segments());
        for id in 0..6 {
            log.append(&mut batch(id, 3, T0), 0).unwrap();
        }
        let read = log.read(4, 1000, None).unwrap();
        let sliced = log.read_slice(4, 1000, None).unwrap();
        let slice = sliced.slice.clone().expect("batches are visible");
        let mut bytes = vec![0u8; slice.len as usize];
        slice
            .file
            .read_exact_at(&mut bytes, slice.position)
            .unwrap();
        assert_eq!(bytes, read.records.to_vec());
        assert_eq!(
            (sliced.log_start_offset, sliced.log_end_offset),
            (read.log_start_offset, read.log_end_offset)
        );
        assert!(log.unchanged_since(&slice));
        log.truncate_to(9).unwrap();
        assert!(!log.unchanged_since(&slice));
        assert!(log.read_slice(9, 1000, None).unwrap().slice.is_none());
    }
}
