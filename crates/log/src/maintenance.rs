//! Changing the log other than by appending: truncation (a follower cutting back to its
//! leader after a failover) and retention (deleting whole old segments).

use std::path::Path;

use crate::error::LogError;
use crate::log::PartitionLog;
use crate::segment::{
    parse_segment_path, read_batch_meta, segment_path, Segment, INDEX_SUFFIX, LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
};
use crate::storage::Storage;

/// What one retention pass deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionReport {
    pub segments_deleted: usize,
    pub bytes_deleted: u64,
    pub log_start_offset: i64,
}

/// Whether `path` in a log directory is left over rather than part of a segment: a temporary
/// or deleted-marker file, or an index whose `.log` is gone.
pub(crate) fn is_stray(path: &Path, segment_bases: &[i64]) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    if name.ends_with(".tmp") || name.ends_with(".deleted") {
        return true;
    }
    [INDEX_SUFFIX, TIME_INDEX_SUFFIX].iter().any(|suffix| {
        parse_segment_path(path, suffix).is_some_and(|base| !segment_bases.contains(&base))
    })
}

pub(crate) fn remove_segment_files(
    storage: &dyn Storage,
    dir: &Path,
    base_offset: i64,
) -> Result<(), LogError> {
    for suffix in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
        let path = segment_path(dir, base_offset, suffix);
        if storage.exists(&path) {
            storage.remove(&path).map_err(|e| LogError::io(&path, e))?;
        }
    }
    Ok(())
}

impl PartitionLog {
    /// Removes every record at or after `offset`; a batch that holds `offset` is removed whole,
    /// so the new end may be below `offset`. Returns the new log end offset. Cutting below the
    /// log start empties the log and restarts it at `offset`.
    pub fn truncate_to(&self, offset: i64) -> Result<i64, LogError> {
        if offset < 0 {
            return Err(LogError::OffsetOutOfRange {
                offset,
                log_start: self.log_start_offset(),
                log_end: self.log_end_offset(),
            });
        }
        let _writer = self.writer.lock();
        let (files, base, end) = {
            let mut state = self.state.write();
            state.check_writable()?;
            if offset >= state.log_end_offset() {
                return Ok(state.log_end_offset());
            }
            let doomed: Vec<i64> = state.segments.range(offset..).map(|(&b, _)| b).collect();
            for base in &doomed {
                state.segments.remove(base);
                remove_segment_files(&*self.storage, &self.dir, *base)?;
            }
            if state.segments.is_empty() {
                let segment = Segment::create(&*self.storage, &self.dir, offset)
                    .map_err(|e| self.io_error(offset, e))?;
                state.segments.insert(offset, segment);
            } else {
                let interval = self.config.index_interval_bytes;
                let active = state.active_mut();
                let base = active.base_offset;
                cut_segment(active, offset, interval).map_err(|e| self.io_error(base, e))?;
            }
            let active = state.active();
            (active.files(), active.base_offset, active.next_offset)
        };
        // The cut is made durable without the segment map's lock (the writer lock keeps
        // appends out); readers meanwhile see the cut log.
        let synced = files
            .sync()
            .map_err(|e| self.io_error(base, e))
            .and_then(|()| {
                self.storage
                    .sync_dir(&self.dir)
                    .map_err(|e| LogError::io(&self.dir, e))
            });
        if let Err(e) = synced {
            self.state
                .write()
                .failed
                .get_or_insert(format!("fsync after truncation failed: {e}"));
            return Err(e);
        }
        let mut sync = self.sync.lock();
        sync.durable_offset = sync.durable_offset.min(end);
        tracing::info!(dir = %self.dir.display(), offset, new_end = end, "log truncated");
        Ok(end)
    }

    /// Deletes whole segments past the retention limits: those whose newest record is older
    /// than `retention_age`, and the oldest ones while the rest still hold `retention_bytes`.
    /// The active segment is never deleted.
    pub fn apply_retention(&self) -> Result<RetentionReport, LogError> {
        let now_ms = self.clock.now_ms();
        let mut report = RetentionReport::default();
        let doomed = {
            let mut state = self.state.write();
            let mut total: u64 = state.segments.values().map(|s| s.size_bytes).sum();
            let mut doomed = Vec::new();
            while state.segments.len() > 1 {
                let oldest = state
                    .segments
                    .values()
                    .next()
                    .expect("the loop runs while len > 1");
                let expired = self.config.retention_age.is_some_and(|age| {
                    let age_ms = i64::try_from(age.as_millis()).unwrap_or(i64::MAX);
                    oldest
                        .max_timestamp
                        .is_none_or(|ts| ts < now_ms.saturating_sub(age_ms))
                });
                let oversized = self
                    .config
                    .retention_bytes
                    .is_some_and(|limit| total - oldest.size_bytes >= limit);
                if !(expired || oversized) {
                    break;
                }
                let base = oldest.base_offset;
                total -= oldest.size_bytes;
                report.bytes_deleted += oldest.size_bytes;
                state.segments.remove(&base);
                doomed.push(base);
            }
            report.log_start_offset = state.log_start_offset();
            doomed
        };
        // Files are removed after the lock is released; readers holding a handle keep reading
        // the unlinked file.
        for &base in &doomed {
            remove_segment_files(&*self.storage, &self.dir, base)?;
        }
        if !doomed.is_empty() {
            self.storage
                .sync_dir(&self.dir)
                .map_err(|e| LogError::io(&self.dir, e))?;
            tracing::info!(dir = %self.dir.display(), segments = doomed.len(),
                bytes = report.bytes_deleted, "retention deleted segments");
        }
        report.segments_deleted = doomed.len();
        Ok(report)
    }
}

/// Cuts `segment` before the first batch whose last offset is at or after `offset`.
fn cut_segment(
    segment: &mut Segment,
    offset: i64,
    index_interval_bytes: u32,
) -> std::io::Result<()> {
    let file = segment.log_file.clone();
    let end = segment.size_bytes;
    segment.reset_tracking()?;
    let mut position = 0;
    while position < end {
        let meta = read_batch_meta(&*file, position, end)?
            .map_err(|why| std::io::Error::new(std::io::ErrorKind::InvalidData, why))?;
        if meta.last_offset >= offset {
            break;
        }
        segment.track_batch(&meta, index_interval_bytes)?;
        position = meta.end_position();
    }
    file.set_len(position)?;
    Ok(())
}
