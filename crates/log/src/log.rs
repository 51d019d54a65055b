//! [`PartitionLog`]: one partition's ordered, durable sequence of record batches, made of
//! segments in one directory. This module owns opening (with recovery), appending and flushing;
//! reads are in `read.rs`, truncation and retention in `maintenance.rs`.
//!
//! Concurrency: writers (appends, rolls, truncation, close) are serialized by the `writer`
//! mutex, so the active segment changes only in the hands of the one writer holding it. The
//! segment map sits behind a `RwLock` taken only briefly: readers copy a file handle and a
//! length out of it, and a writer takes it for writing only to publish what it has already
//! written (the new length and index entries) or to insert a new segment. The bytes are
//! `pwrite`n and every fsync (group commit, a roll's fsyncs of the old segment and of the
//! directory) runs without it, so fetches proceed while the disk works. fsyncs are shared
//! (group commit): an appender that finds an fsync running waits for it, then one waiter
//! starts the next fsync covering every append made meanwhile.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};
use tinymq_protocol::batch::{
    batch_size, compute_crc, stamp_base_offset, stamp_partition_leader_epoch, BatchError,
    BatchHeader, RecordBatch, BATCH_HEADER_BYTES, BATCH_MAGIC,
};
use tinymq_replication::LeaderEpochCache;

use crate::clock::{Clock, SystemClock};
use crate::config::{FlushPolicy, LogConfig};
use crate::error::LogError;
use crate::recovery::{open_segment, Check, RecoveryReport, Truncation};
use crate::segment::{
    broken_invariant, parse_segment_path, segment_path, BatchMeta, FileAccess, SealedFiles,
    Segment, SegmentFiles, LOG_SUFFIX, SEGMENT_OFFSETS_MAX,
};
use crate::storage::{OsStorage, Storage, StorageFile};

/// One batch of an append: where it lies in the caller's buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span {
    pub start: usize,
    pub len: usize,
}

/// Where the next write goes: the active segment as the writer found it (or rolled it to).
pub(crate) struct WriteTarget {
    pub file: Arc<dyn StorageFile>,
    pub base_offset: i64,
    pub position: u64,
    pub next_offset: i64,
}

/// How long a writer that must not block (an async task) waits for another writer before it
/// gives the write to a blocking thread: appends hold the writer lock for a page-cache write,
/// far less than this; a roll or truncation holds it across fsyncs.
pub(crate) const WRITER_WAIT_INLINE_MAX: Duration = Duration::from_micros(500);

/// Where an append landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    /// Offset given to the first record of the first batch.
    pub base_offset: i64,
    /// Offset of the last record of the last batch.
    pub last_offset: i64,
    /// The log's end offset after this append (`last_offset + 1`).
    pub log_end_offset: i64,
    pub batch_count: usize,
    pub max_timestamp: i64,
}

pub(crate) struct LogState {
    /// Never empty: the last segment is the active one.
    pub segments: BTreeMap<i64, Segment>,
    /// The leader epochs of the log, as in `leader-epoch-checkpoint` (see `epoch.rs`).
    pub epochs: LeaderEpochCache,
    /// Records below this were deleted ([`PartitionLog::delete_records_before`], as in
    /// `log-start-offset-checkpoint`, see `log_start.rs`); 0 when none were.
    pub deleted_below: i64,
    /// What the cleaner has done (`cleaner-offset-checkpoint`, see `cleaner_checkpoint.rs`).
    pub cleaner: crate::cleaner_checkpoint::CleanerCheckpoint,
    /// Bumped (under this state's write lock) whenever bytes the log held are cut or
    /// unlinked by truncation. A reader that copied a segment's extent checks it is unchanged
    /// after reading the file, and reads again if not, so it never returns bytes a truncation
    /// cut from under it (or new ones written over them).
    pub truncations: u64,
    pub failed: Option<String>,
    pub closed: bool,
}

/// Why the segment map always has a segment: recovery creates one in an empty directory,
/// truncation creates one when it removes them all, and retention never removes the last.
const NEVER_EMPTY: &str = "the segment map always holds the active segment";

impl LogState {
    pub fn active(&self) -> &Segment {
        self.segments.values().next_back().expect(NEVER_EMPTY)
    }
    pub fn active_mut(&mut self) -> &mut Segment {
        self.segments.values_mut().next_back().expect(NEVER_EMPTY)
    }
    /// The first segment's base, or the offset records were deleted below when that is
    /// higher, never above the log end (opening restarts a log that ends below its
    /// checkpoint there, so the bound holds only in between: during that restart).
    pub fn log_start_offset(&self) -> i64 {
        let first_base = *self.segments.keys().next().expect(NEVER_EMPTY);
        first_base.max(self.deleted_below.min(self.log_end_offset()))
    }
    pub fn log_end_offset(&self) -> i64 {
        self.active().next_offset
    }
    pub fn check_writable(&self) -> Result<(), LogError> {
        if self.closed {
            return Err(LogError::Closed);
        }
        match &self.failed {
            Some(why) => Err(LogError::Failed(why.clone())),
            None => Ok(()),
        }
    }
}

pub(crate) struct SyncState {
    /// Every offset below this is on disk.
    pub durable_offset: i64,
    pub syncing: bool,
    pub last_sync: Instant,
    /// Bumped by truncation: an fsync that started before it covers an end offset that may
    /// no longer exist, so its result is not counted.
    pub truncations: u64,
}

/// One partition's log. Share it with `Arc`; every method takes `&self`.
pub struct PartitionLog {
    pub(crate) dir: PathBuf,
    pub(crate) storage: Arc<dyn Storage>,
    /// The storage with the cache of open files that segments open their log files through.
    pub(crate) files: FileAccess,
    /// Behind a lock so that a topic's settings change while it is open
    /// ([`PartitionLog::set_config`]); read by copying a field out, never held across I/O.
    pub(crate) config: RwLock<LogConfig>,
    pub(crate) clock: Arc<dyn Clock>,
    /// Serializes writers (append, roll, truncation, close); held across their file I/O and
    /// fsyncs, which the segment map's lock never is.
    pub(crate) writer: Mutex<()>,
    /// Serializes what removes or replaces whole segments below the active one (retention,
    /// a cleaner pass), taken before `writer` when both are.
    pub(crate) maintenance: Mutex<()>,
    /// Serializes changes to the cleaner checkpoint (a pass, a follower's gap bound, a
    /// truncation), taken after `writer` when both are.
    pub(crate) cleaner_checkpoint_lock: Mutex<()>,
    pub(crate) state: RwLock<LogState>,
    pub(crate) sync: Mutex<SyncState>,
    pub(crate) sync_done: Condvar,
}

impl std::fmt::Debug for PartitionLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionLog")
            .field("dir", &self.dir)
            .finish()
    }
}

impl PartitionLog {
    /// Opens (or creates) the log in `dir` on the real file system.
    pub fn open(dir: &Path, config: LogConfig) -> Result<(PartitionLog, RecoveryReport), LogError> {
        PartitionLog::open_with(dir, config, Arc::new(OsStorage), Arc::new(SystemClock))
    }

    /// Opens (or creates) the log in `dir`, recovering from a crash if needed.
    pub fn open_with(
        dir: &Path,
        config: LogConfig,
        storage: Arc<dyn Storage>,
        clock: Arc<dyn Clock>,
    ) -> Result<(PartitionLog, RecoveryReport), LogError> {
        config.validate().map_err(LogError::InvalidConfig)?;
        let mut report_damage = None;
        let files = FileAccess {
            storage: storage.clone(),
            cache: config.open_files.clone(),
        };
        let cleaner = match crate::cleaner_checkpoint::load(&*storage, dir) {
            Ok(found) => found.unwrap_or_default(),
            Err(why) => {
                tracing::warn!(dir = %dir.display(), %why,
                    "cleaner checkpoint unreadable: gaps are accepted anywhere, cleaning starts over");
                report_damage = Some(why);
                crate::cleaner_checkpoint::CleanerCheckpoint::damaged()
            }
        };
        let (segments, mut report) = recover_segments(&files, dir, &config, cleaner.gaps_below)?;
        report.cleaner_checkpoint_damaged = report_damage;
        let epochs = crate::epoch::recover(&*storage, dir, &segments, &mut report)
            .map_err(|e| LogError::io(crate::epoch::checkpoint_path(dir), e))?;
        let deleted_below = match crate::log_start::load(&*storage, dir) {
            Ok(found) => found.unwrap_or(0),
            Err(why) => {
                tracing::warn!(dir = %dir.display(), %why,
                    "log-start checkpoint unreadable: the log starts at its first segment");
                report.log_start_checkpoint_damaged = Some(why);
                0
            }
        };
        let log = PartitionLog {
            dir: dir.to_path_buf(),
            storage,
            files,
            config: RwLock::new(config),
            clock,
            writer: Mutex::new(()),
            maintenance: Mutex::new(()),
            cleaner_checkpoint_lock: Mutex::new(()),
            state: RwLock::new(LogState {
                segments,
                epochs,
                deleted_below,
                cleaner,
                truncations: 0,
                failed: None,
                closed: false,
            }),
            sync: Mutex::new(SyncState {
                durable_offset: 0,
                syncing: false,
                last_sync: Instant::now(),
                truncations: 0,
            }),
            sync_done: Condvar::new(),
        };
        // Whatever survived is made durable now, so the durable offset starts at the end.
        let (files, base, end) = log.active_files();
        files.sync().map_err(|e| log.io_error(base, e))?;
        log.sync.lock().durable_offset = end;
        // Records were deleted past what survived (a disk that lost synced writes): the log
        // restarts at the checkpoint, as Kafka's does, so later appends stay readable.
        if deleted_below > end {
            tracing::warn!(dir = %dir.display(), log_end = end, log_start = deleted_below,
                "the log ends below its log-start checkpoint: restarting it there");
            log.truncate_fully_and_start_at(deleted_below)?;
        }
        Ok((log, report))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The settings now (a copy: they may change while the log is open).
    pub fn config(&self) -> LogConfig {
        self.config.read().clone()
    }

    /// The cleanup policy now; read on every produce (a compacted topic needs keys).
    pub fn cleanup_policy(&self) -> crate::CleanupPolicy {
        self.config.read().cleanup
    }

    /// The largest batch an append takes; read on every produce, so without the copy of the
    /// whole config (and its `Arc`) that [`Self::config`] makes.
    pub fn batch_bytes_max(&self) -> u32 {
        self.config.read().batch_bytes_max
    }

    /// The flush policy, which never changes while the log is open (see [`Self::set_config`]).
    pub fn flush_policy(&self) -> FlushPolicy {
        self.config.read().flush
    }

    /// Changes the settings of the open log: later appends, rolls and retention passes use
    /// them; existing segments stay as they are. Refused (nothing changes) when they are
    /// invalid or change what cannot change while the log is open: the flush policy, which
    /// decides what has been acknowledged, and the index interval and file cache.
    pub fn set_config(&self, config: LogConfig) -> Result<(), LogError> {
        config.validate().map_err(LogError::InvalidConfig)?;
        let mut current = self.config.write();
        if config.flush != current.flush
            || config.index_interval_bytes != current.index_interval_bytes
            || !Arc::ptr_eq(&config.open_files, &current.open_files)
        {
            return Err(LogError::InvalidConfig(
                "only the size, age and retention limits change while a log is open".into(),
            ));
        }
        *current = config;
        Ok(())
    }

    /// The first offset still in the log.
    pub fn log_start_offset(&self) -> i64 {
        self.state.read().log_start_offset()
    }

    /// The offset the next record will get.
    pub fn log_end_offset(&self) -> i64 {
        self.state.read().log_end_offset()
    }

    /// Every offset below this has been fsynced.
    pub fn durable_offset(&self) -> i64 {
        self.sync.lock().durable_offset
    }

    pub fn size_bytes(&self) -> u64 {
        self.state
            .read()
            .segments
            .values()
            .map(|s| s.size_bytes)
            .sum()
    }

    pub fn segment_count(&self) -> usize {
        self.state.read().segments.len()
    }

    pub(crate) fn io_error(&self, segment_base: i64, e: std::io::Error) -> LogError {
        LogError::io(segment_path(&self.dir, segment_base, LOG_SUFFIX), e)
    }

    /// The active segment's file handles, base offset and end offset, copied out of the map.
    fn active_files(&self) -> (SegmentFiles, i64, i64) {
        let state = self.state.read();
        let active = state.active();
        (active.files(), active.base_offset, active.next_offset)
    }

    /// Marks the log failed: it refuses writes until reopened.
    pub(crate) fn fail(&self, why: String) {
        tracing::error!(dir = %self.dir.display(), %why, "log failed; it refuses writes until reopened");
        self.state.write().failed.get_or_insert(why);
    }

    /// Appends one or more whole batches (back to back in `batches`), giving them the next
    /// offsets and stamping `leader_epoch`. Returns once the flush policy is satisfied: under
    /// `always`, only after the bytes are fsynced.
    pub fn append(&self, batches: &mut [u8], leader_epoch: i32) -> Result<AppendInfo, LogError> {
        let info = self.write(batches, leader_epoch)?;
        self.await_flush_policy(info.log_end_offset)?;
        Ok(info)
    }

    /// Blocks as the flush policy requires for an append that ended at `end_offset`: under
    /// `always` until it is fsynced (sharing fsyncs with other callers); under `interval`
    /// only if an fsync is due; under `os` not at all.
    pub fn await_flush_policy(&self, end_offset: i64) -> Result<(), LogError> {
        let flush = self.config.read().flush;
        match flush {
            FlushPolicy::Always => self.sync_to(end_offset),
            FlushPolicy::Interval(_) => self.flush_if_due(),
            FlushPolicy::Os => Ok(()),
        }
    }

    /// The first half of [`PartitionLog::append`]: checks, stamps and writes the batches, and
    /// returns without waiting for any fsync. Callers that must order appends (idempotence
    /// checks) do this under their own lock and call [`PartitionLog::await_flush_policy`]
    /// after releasing it, so that fsyncs stay shared.
    ///
    /// `leader_epoch` must be ≥ 0 and not below the log's latest epoch
    /// ([`LogError::StaleLeaderEpoch`]: a deposed leader). A newer epoch is recorded in the
    /// leader-epoch checkpoint, durably, before its first batch is written; that costs an
    /// fsync only when the epoch changes.
    pub fn write(&self, batches: &mut [u8], leader_epoch: i32) -> Result<AppendInfo, LogError> {
        if leader_epoch < 0 {
            return Err(LogError::InvalidLeaderEpoch(leader_epoch));
        }
        let limit = u64::from(self.config.read().batch_bytes_max);
        let (spans, offsets) = self.check_batches(batches, limit, true)?;
        let _writer = self.writer.lock();
        self.enter_epoch(leader_epoch)?;
        let target = self.prepare_write(offsets, batches.len() as u64)?;
        let mut next_offset = target.next_offset;
        let mut metas = Vec::with_capacity(spans.len());
        for span in &spans {
            let batch = &mut batches[span.start..span.start + span.len];
            stamp_base_offset(batch, next_offset);
            stamp_partition_leader_epoch(batch, leader_epoch);
            let meta = BatchMeta::from_header(target.position + span.start as u64, batch)
                .map_err(BatchError::Corrupt)?;
            next_offset = meta.next_offset();
            metas.push(meta);
        }
        self.commit_write(&target, &[batches], &metas)
    }

    /// Writes one batch that [`RecordBatch::parse`] has checked (framing, magic, CRC), so
    /// the log does not check it again: the leader's produce path. The batch is not copied:
    /// a copy of its 61-byte header gets the offset and `leader_epoch` (both outside the
    /// CRC's range) and goes down with the untouched body in one vectored write. Otherwise
    /// as [`PartitionLog::write`]; may block on slow disk work (see
    /// [`PartitionLog::try_write_batch`]).
    pub fn write_batch(
        &self,
        batch: &RecordBatch,
        leader_epoch: i32,
    ) -> Result<AppendInfo, LogError> {
        match self.write_batch_with(batch, leader_epoch, true)? {
            Some(info) => Ok(info),
            None => Err(self.io_error(
                self.state.read().active().base_offset,
                broken_invariant("a write allowed to block did not write".into()),
            )),
        }
    }

    /// [`PartitionLog::write_batch`] for a caller that must not block on slow disk work (an
    /// async task): returns `Ok(None)`, having changed nothing, when the write would have to
    /// fsync (a segment roll, a new leader epoch's checkpoint) or wait more than
    /// `WRITER_WAIT_INLINE_MAX` (500 µs) for another writer (which may be doing either). The caller
    /// then repeats it with [`PartitionLog::write_batch`] on a blocking thread.
    pub fn try_write_batch(
        &self,
        batch: &RecordBatch,
        leader_epoch: i32,
    ) -> Result<Option<AppendInfo>, LogError> {
        self.write_batch_with(batch, leader_epoch, false)
    }

    fn write_batch_with(
        &self,
        batch: &RecordBatch,
        leader_epoch: i32,
        may_block: bool,
    ) -> Result<Option<AppendInfo>, LogError> {
        if leader_epoch < 0 {
            return Err(LogError::InvalidLeaderEpoch(leader_epoch));
        }
        let bytes = batch.as_bytes();
        let limit = {
            let config = self.config.read();
            u64::from(config.batch_bytes_max).min(config.segment_bytes)
        };
        if bytes.len() as u64 > limit {
            return Err(LogError::BatchTooLarge {
                size: bytes.len(),
                limit,
            });
        }
        // `parse` refused a negative delta, so this is in 1..=2^31: within one segment.
        let offsets = u64::try_from(batch.last_offset_delta())
            .map_err(|_| BatchError::Corrupt("negative last offset delta".into()))?
            + 1;
        let _writer = if may_block {
            self.writer.lock()
        } else {
            match self.writer.try_lock_for(WRITER_WAIT_INLINE_MAX) {
                Some(writer) => writer,
                None => return Ok(None),
            }
        };
        if may_block {
            self.enter_epoch(leader_epoch)?;
        } else if self.epoch_is_new(leader_epoch)? {
            return Ok(None);
        }
        let target = match self.plan_write(offsets, bytes.len() as u64)? {
            (None, target) => target,
            (Some(_), _) if !may_block => return Ok(None),
            (Some(old), target) => self.roll(old, target.base_offset, target.next_offset)?,
        };
        let (header, body) = bytes.split_at(BATCH_HEADER_BYTES);
        let mut header: [u8; BATCH_HEADER_BYTES] = header
            .try_into()
            .map_err(|_| BatchError::Corrupt("batch shorter than its header".into()))?;
        stamp_base_offset(&mut header, target.next_offset);
        stamp_partition_leader_epoch(&mut header, leader_epoch);
        let meta = BatchMeta::from_header(target.position, &header).map_err(BatchError::Corrupt)?;
        self.commit_write(&target, &[&header, body], &[meta])
            .map(Some)
    }

    /// Writes `parts` (back to back: the batches `metas` describe, positioned for `target`)
    /// at the end of the active segment and publishes them. The caller holds the writer lock
    /// and got `target` from [`PartitionLog::prepare_write`].
    pub(crate) fn commit_write(
        &self,
        target: &WriteTarget,
        parts: &[&[u8]],
        metas: &[BatchMeta],
    ) -> Result<AppendInfo, LogError> {
        let (Some(first), Some(last)) = (metas.first(), metas.last()) else {
            return Err(self.io_error(
                target.base_offset,
                broken_invariant("a write of no batches".into()),
            ));
        };
        // Readers never look past the published length, so the bytes go down without the
        // segment map's lock; only publishing them below takes it.
        if let Err(e) = target.file.write_all_vectored_at(parts, target.position) {
            // Drop whatever part of the write landed, so the next append starts clean.
            if let Err(cleanup) = target.file.set_len(target.position) {
                self.fail(format!("write failed ({e}); cleanup failed ({cleanup})"));
            }
            return Err(self.io_error(target.base_offset, e));
        }
        let mut state = self.state.write();
        let active = state.active_mut();
        let interval = self.config.read().index_interval_bytes;
        for meta in metas {
            if let Err(e) = active.track_batch(meta, interval) {
                let base = active.base_offset;
                state.failed = Some(format!("index write failed: {e}"));
                return Err(self.io_error(base, e));
            }
        }
        Ok(AppendInfo {
            base_offset: first.base_offset,
            last_offset: last.last_offset,
            log_end_offset: last.next_offset(),
            batch_count: metas.len(),
            max_timestamp: metas
                .iter()
                .map(|m| m.max_timestamp)
                .fold(i64::MIN, i64::max),
        })
    }

    /// Holding the writer lock: checks that `epoch` may write (not below the latest) and, if
    /// it is newer, records it as starting at the log end. O(1) unless the epoch changes.
    pub(crate) fn enter_epoch(&self, epoch: i32) -> Result<(), LogError> {
        if !self.epoch_is_new(epoch)? {
            return Ok(());
        }
        let next = {
            let state = self.state.read();
            let mut next = state.epochs.clone();
            next.assign(epoch, state.log_end_offset())?;
            next
        };
        self.update_epochs(|cache| *cache = next)
    }

    /// Whether writing under `epoch` first has to record it (an fsync of the checkpoint);
    /// refuses an epoch below the latest, and a log that takes no writes.
    fn epoch_is_new(&self, epoch: i32) -> Result<bool, LogError> {
        let state = self.state.read();
        state.check_writable()?;
        match state.epochs.latest_epoch() {
            Some(latest) if epoch < latest => Err(LogError::StaleLeaderEpoch { epoch, latest }),
            Some(latest) => Ok(epoch != latest),
            None => Ok(true),
        }
    }

    /// Holding the writer lock: applies `change` to a copy of the epoch cache, writes the
    /// checkpoint durably, then publishes the copy. A failed write fails the log: the file on
    /// disk may then be either version, and only a reopen (which checks it against the log)
    /// makes that safe again.
    pub(crate) fn update_epochs(
        &self,
        change: impl FnOnce(&mut LeaderEpochCache),
    ) -> Result<(), LogError> {
        let mut next = self.state.read().epochs.clone();
        change(&mut next);
        if let Err(e) = crate::epoch::store(&*self.storage, &self.dir, &next) {
            self.fail(format!("leader-epoch checkpoint write failed: {e}"));
            return Err(LogError::io(crate::epoch::checkpoint_path(&self.dir), e));
        }
        self.state.write().epochs = next;
        Ok(())
    }

    /// Splits `batches` into spans and checks each batch's size (at most `batch_bytes_max`),
    /// magic, CRC and offset delta before the log is locked. Returns the spans and the
    /// offsets they take together, which must fit one segment when `one_segment` is set (a
    /// leader's append is one write); a follower's replicated batches may span several.
    pub(crate) fn check_batches(
        &self,
        batches: &[u8],
        batch_bytes_max: u64,
        one_segment: bool,
    ) -> Result<(Vec<Span>, u64), LogError> {
        let segment_bytes = self.config.read().segment_bytes;
        if one_segment && batches.len() as u64 > segment_bytes {
            return Err(LogError::BatchTooLarge {
                size: batches.len(),
                limit: segment_bytes,
            });
        }
        let mut spans = Vec::new();
        let mut offsets: u64 = 0;
        let mut start = 0;
        while start < batches.len() {
            let rest = &batches[start..];
            let len = batch_size(rest)?.ok_or(BatchError::Truncated {
                needed: 12,
                available: rest.len(),
            })?;
            if len > rest.len() {
                return Err(BatchError::Truncated {
                    needed: len,
                    available: rest.len(),
                }
                .into());
            }
            if len as u64 > batch_bytes_max {
                return Err(LogError::BatchTooLarge {
                    size: len,
                    limit: batch_bytes_max,
                });
            }
            let batch = &rest[..len];
            // `batch_size` guarantees a whole header: `len` ≥ 61 bytes.
            let header = BatchHeader::new(batch).ok_or(BatchError::Truncated {
                needed: BATCH_HEADER_BYTES,
                available: len,
            })?;
            if header.magic() != BATCH_MAGIC {
                return Err(BatchError::BadMagic(header.magic()).into());
            }
            let (stored, computed) = (header.crc(), compute_crc(batch));
            if stored != computed {
                return Err(BatchError::CrcMismatch { stored, computed }.into());
            }
            let delta = header.last_offset_delta();
            let batch_offsets = u64::try_from(delta)
                .map_err(|_| BatchError::Corrupt(format!("negative last offset delta {delta}")))?
                + 1;
            offsets = offsets.saturating_add(batch_offsets);
            spans.push(Span { start, len });
            start += len;
        }
        if spans.is_empty() {
            return Err(BatchError::Truncated {
                needed: 12,
                available: 0,
            }
            .into());
        }
        if one_segment && offsets > SEGMENT_OFFSETS_MAX {
            return Err(LogError::OffsetSpanTooLarge {
                offsets,
                limit: SEGMENT_OFFSETS_MAX,
            });
        }
        Ok((spans, offsets))
    }

    /// Finds where a write of `offsets` offsets and `bytes` bytes goes, rolling first when the
    /// active segment is too big or too old, or when the write's last offset would be past
    /// what the segment's indexes can encode. The caller holds the writer lock, so the active
    /// segment cannot change until it has written.
    pub(crate) fn prepare_write(&self, offsets: u64, bytes: u64) -> Result<WriteTarget, LogError> {
        match self.plan_write(offsets, bytes)? {
            (None, target) => Ok(target),
            (Some(old), target) => self.roll(old, target.base_offset, target.next_offset),
        }
    }

    /// [`PartitionLog::prepare_write`] without rolling: the active segment as a target, and
    /// its files when the write must roll first (a new segment at `target.next_offset`).
    fn plan_write(
        &self,
        offsets: u64,
        bytes: u64,
    ) -> Result<(Option<SealedFiles>, WriteTarget), LogError> {
        let (target, files) = {
            let state = self.state.read();
            state.check_writable()?;
            let active = state.active();
            let next_offset = active.next_offset;
            // `offsets` ≤ 2^32 (checked by `check_batches`), so it converts.
            let last = i64::try_from(offsets)
                .ok()
                .and_then(|n| next_offset.checked_add(n))
                .ok_or(LogError::OffsetsExhausted {
                    log_end: next_offset,
                    offsets,
                })?
                - 1;
            let offsets_fit = active.relative(last).is_some();
            let (segment_bytes, segment_age_max) = {
                let config = self.config.read();
                (config.segment_bytes, config.segment_age_max)
            };
            let too_big = active.size_bytes + bytes > segment_bytes;
            let too_old = match (segment_age_max, active.first_batch_timestamp) {
                (Some(age), Some(first)) => {
                    let age_ms = i64::try_from(age.as_millis()).unwrap_or(i64::MAX);
                    // The first batch's timestamp is the producer's: never older than the
                    // segment's creation here.
                    let born = active
                        .created_ms
                        .map_or(first, |created| first.max(created));
                    self.clock.now_ms().saturating_sub(born) >= age_ms
                }
                _ => false,
            };
            let file = active
                .log_file()
                .map_err(|e| self.io_error(active.base_offset, e))?;
            let target = WriteTarget {
                file,
                base_offset: active.base_offset,
                position: active.size_bytes,
                next_offset,
            };
            if active.is_empty() && !offsets_fit {
                // Only a segment based below its first offset could get here; a fresh one
                // holds any write `check_batches` lets through.
                return Err(LogError::OffsetSpanTooLarge {
                    offsets,
                    limit: SEGMENT_OFFSETS_MAX,
                });
            }
            let roll = !active.is_empty() && (too_big || too_old || !offsets_fit);
            // Only a roll needs the sealed files: encoding the indexes walks every entry, so
            // doing it on each write made a write's cost grow with the segment.
            (target, roll.then(|| active.sealed()))
        };
        Ok((files, target))
    }

    /// Starts a new segment at `next_offset`. The old one (`old`) is sealed first (its index
    /// files written, everything fsynced) and the directory fsynced after the new file is
    /// created, so only the active segment can ever be torn; none of it holds the segment map's lock, which is taken only to insert
    /// the new segment. A failed fsync fails the log.
    fn roll(
        &self,
        old: SealedFiles,
        old_base: i64,
        next_offset: i64,
    ) -> Result<WriteTarget, LogError> {
        if let Err(e) = old.sync() {
            self.fail(format!("fsync before roll failed: {e}"));
            return Err(self.io_error(old_base, e));
        }
        let mut segment = Segment::create(&self.files, &self.dir, next_offset)
            .map_err(|e| self.io_error(next_offset, e))?;
        segment.created_ms = Some(self.clock.now_ms());
        let file = segment
            .log_file()
            .map_err(|e| self.io_error(next_offset, e))?;
        if let Err(e) = self.storage.sync_dir(&self.dir) {
            self.fail(format!("directory fsync after roll failed: {e}"));
            return Err(LogError::io(&self.dir, e));
        }
        let target = WriteTarget {
            file,
            base_offset: next_offset,
            position: 0,
            next_offset,
        };
        self.state.write().segments.insert(next_offset, segment);
        let mut sync = self.sync.lock();
        sync.durable_offset = sync.durable_offset.max(next_offset);
        tracing::debug!(dir = %self.dir.display(), base_offset = next_offset, "rolled segment");
        Ok(target)
    }

    /// Blocks until every offset below `target` is fsynced, sharing fsyncs with concurrent
    /// callers (group commit).
    pub(crate) fn sync_to(&self, target: i64) -> Result<(), LogError> {
        let mut sync = self.sync.lock();
        loop {
            if sync.durable_offset >= target {
                return Ok(());
            }
            if sync.syncing {
                self.sync_done.wait(&mut sync);
                continue;
            }
            sync.syncing = true;
            let truncations = sync.truncations;
            drop(sync);
            let outcome = self.sync_active();
            sync = self.sync.lock();
            sync.syncing = false;
            sync.last_sync = Instant::now();
            self.sync_done.notify_all();
            match outcome {
                // A truncation meanwhile may have cut what this fsync covered: not counted.
                Ok(covered) if sync.truncations == truncations => {
                    sync.durable_offset = sync.durable_offset.max(covered)
                }
                Ok(_) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// fsyncs the active segment's log file; returns the end offset it covers. A failed fsync
    /// fails the log: the kernel may have dropped the unsynced pages, so nothing written since
    /// the last good fsync can be trusted until the log is reopened and re-read.
    fn sync_active(&self) -> Result<i64, LogError> {
        let (log, base, end) = {
            let state = self.state.read();
            state.check_writable()?;
            let active = state.active();
            (active.log.clone(), active.base_offset, active.next_offset)
        };
        // Failing to open the file (say, out of descriptors) loses nothing: not a failed fsync.
        let file = log.open().map_err(|e| self.io_error(base, e))?;
        if let Err(e) = crate::timed_fsync(|| file.sync_data()) {
            self.fail(format!("fsync failed: {e}"));
            return Err(self.io_error(base, e));
        }
        Ok(end)
    }

    /// fsyncs everything appended so far.
    pub fn flush(&self) -> Result<(), LogError> {
        let end = self.log_end_offset();
        self.sync_to(end)
    }

    /// Under `interval:<ms>`, fsyncs if the interval has passed since the last fsync and there
    /// is something to sync. A broker calls this on a timer so idle logs are flushed too.
    pub fn flush_if_due(&self) -> Result<(), LogError> {
        if self.flush_due() {
            self.flush()?;
        }
        Ok(())
    }

    /// Whether [`PartitionLog::flush_if_due`] would fsync now: under `interval:<ms>`, the
    /// interval has passed since the last fsync, none is running, and something is unsynced.
    /// Cheap (no I/O), so an async caller can ask before handing the flush to a blocking
    /// thread.
    pub fn flush_due(&self) -> bool {
        let flush = self.config.read().flush;
        let FlushPolicy::Interval(interval) = flush else {
            return false;
        };
        let due = {
            let sync = self.sync.lock();
            !sync.syncing && sync.last_sync.elapsed() >= interval
        };
        due && self.durable_offset() < self.log_end_offset()
    }

    /// Refuses further appends without flushing anything: for a log whose files are about to
    /// be deleted, where a flush would only cost fsyncs. Reads still work.
    pub fn abandon(&self) {
        let _writer = self.writer.lock();
        self.state.write().closed = true;
    }

    /// Flushes everything (log and indexes) and refuses further appends. Reads still work.
    pub fn close(&self) -> Result<(), LogError> {
        let _writer = self.writer.lock();
        self.flush()?;
        let (files, base, _) = self.active_files();
        files.sync().map_err(|e| self.io_error(base, e))?;
        self.state.write().closed = true;
        Ok(())
    }
}

/// Finds the segments in `dir`, removes stray files, and opens each segment: the active one
/// fully checked, the others from their indexes. A cut in an older segment deletes every later
/// segment, since the offsets after the cut would leave a gap; so does a segment whose name
/// (base offset) lies below the end of the one before it, since offsets only increase.
/// Fails only on I/O errors: whatever the files hold, the log opens.
fn recover_segments(
    files: &FileAccess,
    dir: &Path,
    config: &LogConfig,
    gaps_below: i64,
) -> Result<(BTreeMap<i64, Segment>, RecoveryReport), LogError> {
    let storage = &*files.storage;
    let io = |e| LogError::io(dir, e);
    let created = !storage.exists(dir);
    storage.create_dir_all(dir).map_err(io)?;
    let mut report = RecoveryReport {
        swaps_finished: crate::cleaner::finish_swaps(storage, dir).map_err(io)?,
        ..RecoveryReport::default()
    };
    let paths = storage.list(dir).map_err(io)?;
    let bases: Vec<i64> = paths
        .iter()
        .filter_map(|p| parse_segment_path(p, LOG_SUFFIX))
        .collect();
    for path in &paths {
        if crate::maintenance::is_stray(path, &bases) {
            storage.remove(path).map_err(|e| LogError::io(path, e))?;
            report.stray_files_removed += 1;
        }
    }
    let mut segments: BTreeMap<i64, Segment> = BTreeMap::new();
    // Recovery accepts any batch that fits a segment: batch_bytes_max may have been lowered
    // since older batches were written.
    let batch_bytes_max = config.segment_bytes;
    for (i, &base) in bases.iter().enumerate() {
        let previous_end = segments.values().next_back().map(|s| s.next_offset);
        if let Some(previous_end) = previous_end.filter(|&end| base < end) {
            let reason = format!(
                "segment {base} starts below the end of the segment before it ({previous_end})"
            );
            drop_segments(storage, dir, &bases[i..], previous_end, reason, &mut report)?;
            break;
        }
        let is_active = i + 1 == bases.len();
        let check = if is_active { Check::Full } else { Check::Tail };
        let cuts_before = report.truncations.len();
        let segment = open_segment(
            files,
            dir,
            base,
            check,
            &crate::recovery::Rules {
                index_interval_bytes: config.index_interval_bytes,
                batch_bytes_max,
                gaps_below,
            },
            &mut report,
        )
        .map_err(|e| LogError::io(segment_path(dir, base, LOG_SUFFIX), e))?;
        segments.insert(base, segment);
        if !is_active && report.truncations.len() > cuts_before {
            for &later in &bases[i + 1..] {
                crate::maintenance::remove_segment_files(storage, dir, later)?;
                report.segments_deleted.push(later);
            }
            break;
        }
    }
    let created_segment = segments.is_empty();
    if created_segment {
        let segment = Segment::create(files, dir, 0).map_err(io)?;
        segments.insert(0, segment);
    }
    // The directory's entries (and its own entry in the parent) are made durable whenever
    // they may not be: a new directory or segment, files removed, or a log found holding no
    // batch (an earlier open may have created it and stopped before these fsyncs). A log that
    // holds batches was appended to, which happens only after an open made them durable; so
    // reopening thousands of partitions costs no directory fsyncs.
    let holds_batches = segments.values().any(|s| !s.is_empty());
    let changed =
        created_segment || report.stray_files_removed > 0 || !report.segments_deleted.is_empty();
    if created || !holds_batches {
        if let Some(parent) = dir.parent() {
            storage
                .sync_dir(parent)
                .map_err(|e| LogError::io(parent, e))?;
        }
    }
    if changed || !holds_batches {
        storage.sync_dir(dir).map_err(io)?;
    }
    if !report.truncations.is_empty() || !report.segments_deleted.is_empty() {
        tracing::warn!(dir = %dir.display(), ?report, "log recovered with data cut");
    }
    Ok((segments, report))
}

/// Deletes the segments `doomed` (the first of them is cut whole, for `reason`), recording
/// them in `report`.
fn drop_segments(
    storage: &dyn Storage,
    dir: &Path,
    doomed: &[i64],
    next_offset: i64,
    reason: String,
    report: &mut RecoveryReport,
) -> Result<(), LogError> {
    let Some(&first) = doomed.first() else {
        return Ok(());
    };
    let path = segment_path(dir, first, LOG_SUFFIX);
    let bytes_cut = storage
        .open(&path, false)
        .and_then(|f| f.byte_len())
        .map_err(|e| LogError::io(&path, e))?;
    tracing::warn!(segment = first, %reason, "recovery deleted a segment");
    report.truncations.push(Truncation {
        segment_base_offset: first,
        position: 0,
        bytes_cut,
        next_offset,
        reason,
    });
    for &base in doomed {
        crate::maintenance::remove_segment_files(storage, dir, base)?;
        report.segments_deleted.push(base);
    }
    Ok(())
}
