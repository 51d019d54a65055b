//! Changing the log other than by appending: truncation (a follower cutting back to its
//! leader after a failover) and retention (deleting whole old segments).

use std::ops::Bound;
use std::path::Path;

use tinymq_replication::LeaderEpochCache;

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
    if name.ends_with(".tmp")
        || name.ends_with(".deleted")
        || crate::cleaner::is_cleaned_leftover(path)
    {
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
    /// Removes every record at or after `offset`, durably, and the leader epochs that start
    /// there or later: a follower cutting a divergent tail. Offsets are cut at batch
    /// boundaries: a batch that holds `offset` is removed whole (as Kafka does), so the new
    /// end may be below `offset`. Returns the new log end offset; compare it with `offset` to
    /// see whether a batch was split. An `offset` at or past the end changes nothing; one
    /// below the log start is refused (`OffsetOutOfRange`; see
    /// [`PartitionLog::truncate_fully_and_start_at`]). When it returns, the cut, the deleted
    /// segments and the checkpoint are fsynced: a crash never brings the tail back.
    ///
    /// Concurrent reads return either the log before the cut or after it, never bytes of
    /// both: a read that overlapped the cut is redone (see `read.rs`).
    pub fn truncate_to(&self, offset: i64) -> Result<i64, LogError> {
        let _writer = self.writer.lock();
        self.truncate_locked(offset)
    }

    /// Empties the log and restarts it at `offset`, durably: for a follower whose log ends
    /// below its leader's log start (Kafka's `truncateFullyAndStartAt`). Every segment is
    /// deleted and the leader-epoch cache cleared; the next append (replicated or not) gets
    /// offset `offset`. `offset` may be anywhere ≥ 0.
    pub fn truncate_fully_and_start_at(&self, offset: i64) -> Result<(), LogError> {
        if offset < 0 {
            return Err(LogError::OffsetOutOfRange {
                offset,
                log_start: self.log_start_offset(),
                log_end: self.log_end_offset(),
            });
        }
        let _writer = self.writer.lock();
        // First empty the log where it starts (crash-safe: every state on the way is a
        // prefix of the old log), then move the empty log to `offset`.
        let start = self.log_start_offset();
        self.truncate_locked(start)?;
        if !self.state.read().epochs.entries().is_empty() {
            self.update_epochs(|cache| *cache = LeaderEpochCache::new())?;
        }
        if start == offset {
            return Ok(());
        }
        let segment = Segment::create(&self.files, &self.dir, offset)
            .map_err(|e| self.io_error(offset, e))?;
        let files = segment.files();
        let outcome = files
            .sync()
            .map_err(|e| self.io_error(offset, e))
            .and_then(|()| self.sync_dir())
            .and_then(|()| {
                let mut state = self.state.write();
                state.truncations += 1;
                // The log start may be inside the first segment (records deleted below it):
                // every old segment goes, not only one based at the log start.
                let old: Vec<i64> = state.segments.keys().copied().collect();
                state.segments.clear();
                state.segments.insert(offset, segment);
                drop(state);
                // A crash before these removals leaves the old segments and an empty one past
                // them; recovery drops the segment after the gap, and the follower restarts
                // again.
                old.iter()
                    .filter(|&&base| base != offset)
                    .try_for_each(|&base| remove_segment_files(&*self.storage, &self.dir, base))
            })
            .and_then(|()| self.sync_dir());
        if let Err(e) = outcome {
            self.fail(format!("restarting the log at {offset} failed: {e}"));
            return Err(e);
        }
        self.truncated(offset);
        // The cleaned part went with the old segments; the first dirty offset is at least
        // the log start anyway.
        self.forget_cleaned_from(start)?;
        tracing::info!(dir = %self.dir.display(), offset, "log emptied and restarted");
        Ok(())
    }

    /// [`PartitionLog::truncate_to`] with the writer lock held.
    fn truncate_locked(&self, offset: i64) -> Result<i64, LogError> {
        let (files, base, end, epochs_changed) = {
            let mut state = self.state.write();
            state.check_writable()?;
            let (start, log_end) = (state.log_start_offset(), state.log_end_offset());
            if offset < start {
                return Err(LogError::OffsetOutOfRange {
                    offset,
                    log_start: start,
                    log_end,
                });
            }
            if offset >= log_end {
                return Ok(log_end);
            }
            state.truncations += 1;
            // Newest first, so that a crash part way leaves a prefix of the log (recovery
            // would keep a later segment after a gap).
            let doomed: Vec<i64> = state
                .segments
                .range((Bound::Excluded(offset), Bound::Unbounded))
                .map(|(&b, _)| b)
                .rev()
                .collect();
            for base in &doomed {
                state.segments.remove(base);
                remove_segment_files(&*self.storage, &self.dir, *base)?;
            }
            // `offset` ≥ the log start, so a segment holds it and survives.
            let interval = self.config.read().index_interval_bytes;
            let active = state.active_mut();
            let base = active.base_offset;
            cut_segment(active, offset, interval).map_err(|e| self.io_error(base, e))?;
            let (files, end) = (active.files(), active.next_offset);
            let epochs_changed = state.epochs.clone().truncate_from_end(end);
            (files, base, end, epochs_changed)
        };
        // The cut is made durable without the segment map's lock (the writer lock keeps
        // appends out); readers meanwhile see the cut log. The checkpoint is rewritten only
        // after the cut is durable: a crash in between leaves entries past the log end,
        // which opening drops.
        let synced = files
            .sync()
            .map_err(|e| self.io_error(base, e))
            .and_then(|()| self.sync_dir())
            .and_then(|()| {
                if epochs_changed {
                    self.update_epochs(|cache| {
                        cache.truncate_from_end(end);
                    })
                } else {
                    Ok(())
                }
            });
        let synced = synced.and_then(|()| self.forget_cleaned_from(end));
        if let Err(e) = synced {
            self.fail(format!("making a truncation durable failed: {e}"));
            return Err(e);
        }
        self.truncated(end);
        tracing::info!(dir = %self.dir.display(), offset, new_end = end, "log truncated");
        Ok(end)
    }

    /// After a durable truncation to `end`: everything below it is on disk, and fsyncs that
    /// started before it do not count.
    fn truncated(&self, end: i64) {
        let mut sync = self.sync.lock();
        sync.truncations += 1;
        sync.durable_offset = end;
    }

    fn sync_dir(&self) -> Result<(), LogError> {
        self.storage
            .sync_dir(&self.dir)
            .map_err(|e| LogError::io(&self.dir, e))
    }

    /// Deletes whole segments past the retention limits: those whose newest record is older
    /// than `retention_age`, the oldest ones while the rest still hold `retention_bytes`, and
    /// those wholly below the offset records were deleted below. The active segment is never
    /// deleted.
    pub fn apply_retention(&self) -> Result<RetentionReport, LogError> {
        let _maintenance = self.maintenance.lock();
        let now_ms = self.clock.now_ms();
        let mut report = RetentionReport::default();
        let doomed = {
            let mut state = self.state.write();
            let mut total: u64 = state.segments.values().map(|s| s.size_bytes).sum();
            // A compact-only log keeps its records whatever their age or size.
            let (retention_age, retention_bytes) = {
                let config = self.config.read();
                match config.cleanup.deletes() {
                    true => (config.retention_age, config.retention_bytes),
                    false => (None, None),
                }
            };
            let mut doomed = Vec::new();
            while state.segments.len() > 1 {
                let oldest = state
                    .segments
                    .values()
                    .next()
                    .expect("the loop runs while len > 1");
                let expired = retention_age.is_some_and(|age| {
                    let age_ms = i64::try_from(age.as_millis()).unwrap_or(i64::MAX);
                    oldest
                        .max_timestamp
                        .is_none_or(|ts| ts < now_ms.saturating_sub(age_ms))
                });
                let oversized =
                    retention_bytes.is_some_and(|limit| total - oldest.size_bytes >= limit);
                let deleted = oldest.next_offset <= state.deleted_below;
                if !(expired || oversized || deleted) {
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
        self.forget_epochs_below(report.log_start_offset);
        Ok(report)
    }
}

impl PartitionLog {
    /// Deletes the records below `offset` (Kafka's DeleteRecords): the log start moves up to
    /// `offset` (never down), durably, before this returns; reads below it are refused with
    /// `OffsetOutOfRange` from then on, and the segments wholly below it are removed at once
    /// (the rest of the segment holding it stays until retention, unread). `offset` may be up
    /// to the log end; the caller bounds it further (a leader: its high watermark). Returns
    /// the log start after the call.
    pub fn delete_records_before(&self, offset: i64) -> Result<i64, LogError> {
        {
            let _writer = self.writer.lock();
            let (start, end) = {
                let state = self.state.read();
                state.check_writable()?;
                (state.log_start_offset(), state.log_end_offset())
            };
            if offset < 0 || offset > end {
                return Err(LogError::OffsetOutOfRange {
                    offset,
                    log_start: start,
                    log_end: end,
                });
            }
            if offset <= start {
                return Ok(start);
            }
            // Every record below the new log start durable first: a crash must not leave the
            // checkpoint above the log end (the records written after it would be hidden).
            self.sync_to(offset)?;
            crate::log_start::store(&*self.storage, &self.dir, offset)
                .map_err(|e| LogError::io(crate::log_start::path(&self.dir), e))?;
            self.state.write().deleted_below = offset;
        }
        // Outside the writer lock: retention takes it to trim the epoch checkpoint.
        Ok(self.apply_retention()?.log_start_offset)
    }
}

impl PartitionLog {
    /// Trims the epoch entries below a log start that retention moved. A failure to rewrite
    /// the checkpoint is only logged: extra entries below the log start mislead nothing, and
    /// opening the log trims them again.
    fn forget_epochs_below(&self, log_start: i64) {
        if !self.state.read().epochs.starts_below(log_start) {
            return; // every retention pass asks; the writer lock is taken only for a change
        }
        let _writer = self.writer.lock();
        let mut trimmed = self.state.read().epochs.clone();
        trimmed.truncate_from_start(log_start);
        if let Err(e) = crate::epoch::store(&*self.storage, &self.dir, &trimmed) {
            tracing::warn!(dir = %self.dir.display(), error = %e,
                "leader-epoch checkpoint not rewritten after retention");
            return;
        }
        self.state.write().epochs = trimmed;
    }
}

/// Cuts `segment` before the first batch whose last offset is at or after `offset`.
fn cut_segment(
    segment: &mut Segment,
    offset: i64,
    index_interval_bytes: u32,
) -> std::io::Result<()> {
    let file = segment.log_file()?;
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
