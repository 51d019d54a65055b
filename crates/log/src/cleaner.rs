//! Log compaction (Kafka's log cleaner): for a log whose cleanup policy compacts, keep the
//! latest record of each key and drop the older ones, keeping every offset where it was.
//!
//! A pass ([`PartitionLog::clean`]) works on the *cleanable* part of the log: whole segments
//! before the active one, below the caller's bound (a leader's high watermark and last
//! stable offset) and older than `compaction_lag_min`. That part splits at the *first dirty
//! offset* (kept in `cleaner-offset-checkpoint`, see `cleaner_checkpoint.rs`): the records
//! below it were cleaned before, those above are new.
//!
//! 1. **Key map.** The dirty records' keys are hashed (128 bits) into a map from key to the
//!    offset of its latest record, bounded by [`CleanLimits::key_map_bytes_max`]; when it is
//!    full the pass covers only the records mapped so far. A transaction's records enter the
//!    map only once its commit marker is seen in the pass: aborted and undecided records never
//!    supersede anything.
//! 2. **Copy.** Every cleanable segment is read again, in groups that fit one segment, and a
//!    record is dropped when the map holds a later offset for its key, or when it is a
//!    tombstone that was cleaned more than `delete_retention` ago. Markers are kept. A batch
//!    that keeps no record is dropped, except the last one of a group, kept empty so that the
//!    group still ends at the offset where it ended (segments stay contiguous), and the last
//!    batch of each live producer ([`CleanLimits::retained_batch_ends`]), kept empty so that
//!    its sequence survives. A group where nothing is dropped is not written.
//! 3. **Swap.** A group's new file is written as `<base>.log.cleaned` and fsynced, then
//!    renamed to `<base>.log.swap` (from here on the swap is decided), then, under the
//!    segment map's lock, the group's old files are removed and the swap file renamed to
//!    `<base>.log`, and the new segment replaces the old ones. Opening a log finishes a swap
//!    that a crash interrupted (`finish_swaps`) and removes a `.cleaned` file, so a crash at
//!    any point leaves either the old segments or the new one.
//!
//! Every replica cleans its own copy; given the same log and settings the result is the same.
//! The broker runs one pass at a time. Appends, reads and retention go on during a pass: a
//! swap takes the maintenance lock (shared with retention) and the writer lock, and the
//! pass's closing checkpoint write the writer lock; a pass whose planned segments changed
//! under it is abandoned.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use tinymq_protocol::batch::compact::{filter_records, for_each_record, Filtered, KeyedRecord};
use tinymq_protocol::batch::control::{parse_marker, MarkerType};
use tinymq_protocol::batch::RecordBatch;

use crate::cleaner_checkpoint::{self, CleanerCheckpoint};
use crate::error::LogError;
use crate::index::SparseIndex;
use crate::log::PartitionLog;
use crate::segment::{
    read_batch_meta, segment_path, BatchMeta, LogFileHandle, Segment, INDEX_SUFFIX, LOG_SUFFIX,
    SEGMENT_OFFSETS_MAX, TIME_INDEX_SUFFIX,
};
use crate::storage::StorageFile;

/// Default of [`CleanLimits::key_map_bytes_max`]: 64 MiB, about two million keys.
pub const KEY_MAP_BYTES_MAX_DEFAULT: usize = 64 << 20;
/// What one key of the map costs: its 16-byte hash, the 8-byte offset and the hash table's
/// spare capacity.
pub const KEY_MAP_ENTRY_BYTES: usize = 40;
/// The smallest key map accepted: a pass must be able to map at least one batch's worth.
pub const KEY_MAP_BYTES_MIN: usize = 1 << 20;
/// Decompressed bytes one batch may take while cleaning.
const CLEAN_DECOMPRESSED_BYTES_MAX: usize = 64 << 20;

const CLEANED_SUFFIX: &str = "log.cleaned";
const SWAP_SUFFIX: &str = "log.swap";

/// Bounds on one pass, and what it must keep besides the latest record of each key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CleanLimits {
    /// Memory for the key map (`cleaner_key_map_bytes_max`).
    pub key_map_bytes_max: usize,
    /// Last offsets of batches kept (emptied of the records the pass removes) even when they
    /// keep no record: the broker names each live producer's last batch, so that its producer
    /// id, epoch and sequence stay in the log and a producer state rebuilt from the log after a
    /// crash still accepts that producer's next batch (Kafka's cleaner keeps them too).
    pub retained_batch_ends: HashSet<i64>,
}

impl Default for CleanLimits {
    fn default() -> CleanLimits {
        CleanLimits {
            key_map_bytes_max: KEY_MAP_BYTES_MAX_DEFAULT,
            retained_batch_ends: HashSet::new(),
        }
    }
}

/// How much of a compacted log waits for the cleaner ([`PartitionLog::cleanable`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cleanable {
    /// Bytes of cleanable segments below the first dirty offset.
    pub clean_bytes: u64,
    /// Bytes of cleanable segments at or above it.
    pub dirty_bytes: u64,
    /// `dirty / (clean + dirty)`.
    pub dirty_ratio: f64,
    /// Its oldest dirty record is past `compaction_lag_max`, or a tombstone it kept may now
    /// be removed: clean it whatever the ratio.
    pub overdue: bool,
}

impl Cleanable {
    /// Whether the settings call for a pass now.
    pub fn due(&self, dirty_ratio_min: f64) -> bool {
        self.overdue || (self.dirty_bytes > 0 && self.dirty_ratio >= dirty_ratio_min)
    }
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanReport {
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Segments replaced by cleaned ones, and how many replaced them.
    pub segments_replaced: usize,
    pub segments_written: usize,
    pub records_removed: u64,
    pub tombstones_removed: u64,
    /// Keys the map held.
    pub keys_mapped: usize,
    /// The key map filled before the dirty records ended; the next pass goes on from here.
    pub key_map_full: bool,
    /// The first dirty offset after the pass.
    pub first_dirty: i64,
    /// The log changed under the pass (truncated, closed): nothing was swapped after that.
    pub abandoned: bool,
}

/// A cleanable segment, copied out from under the segment map's lock.
#[derive(Clone)]
struct SegmentView {
    base: i64,
    log: LogFileHandle,
    size: u64,
    next_offset: i64,
}

/// The cleanable part of the log as a pass starts.
struct Plan {
    segments: Vec<SegmentView>,
    first_dirty: i64,
    end: i64,
    checkpoint: CleanerCheckpoint,
    truncations: u64,
}

/// Keys' 128-bit hashes and the offset of each key's latest record.
struct KeyMap {
    latest: HashMap<u128, i64>,
    /// Records of undecided transactions, by producer id.
    pending: HashMap<i64, Vec<(u128, i64)>>,
    pending_len: usize,
    entries_max: usize,
}

impl KeyMap {
    fn full_after(&self, more: usize) -> bool {
        self.latest.len() + self.pending_len + more > self.entries_max
    }
    fn insert(&mut self, hash: u128, offset: i64) {
        let latest = self.latest.entry(hash).or_insert(offset);
        *latest = (*latest).max(offset);
    }
}

/// The key's hash: two runs of std's fixed-key hasher (the same on every replica of one
/// build) over distinct prefixes. A collision would drop a record of another key, so 128 bits
/// are used, as Kafka's MD5.
fn key_hash(key: &[u8]) -> u128 {
    let half = |prefix: u8| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        prefix.hash(&mut h);
        key.hash(&mut h);
        h.finish()
    };
    (u128::from(half(0)) << 64) | u128::from(half(1))
}

impl PartitionLog {
    /// How much of the log waits for the cleaner, with `uncleanable_from` the first offset
    /// it must not touch (the caller's high watermark and last stable offset); `None` when
    /// the policy does not compact or nothing is cleanable.
    pub fn cleanable(&self, now_ms: i64, uncleanable_from: i64) -> Option<Cleanable> {
        let config = self.config.read().clone();
        if !config.cleanup.compacts() {
            return None;
        }
        let plan = self.plan(now_ms, uncleanable_from)?;
        let (mut clean, mut dirty) = (0u64, 0u64);
        for s in &plan.segments {
            if s.next_offset <= plan.first_dirty {
                clean += s.size;
            } else {
                dirty += s.size;
            }
        }
        let lag_max_ms = config
            .compaction
            .compaction_lag_max
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let tombstones_due = (plan.checkpoint.tombstones_due_ms > 0
            && now_ms >= plan.checkpoint.tombstones_due_ms)
            .then_some(true);
        let overdue = tombstones_due.is_some()
            || lag_max_ms.is_some_and(|lag| {
                let state = self.state.read();
                state
                    .segments
                    .range(..=plan.first_dirty)
                    .next_back()
                    .or_else(|| state.segments.range(plan.first_dirty..).next())
                    .and_then(|(_, s)| s.first_batch_timestamp)
                    .is_some_and(|ts| ts < now_ms.saturating_sub(lag))
            });
        let total = clean + dirty;
        Some(Cleanable {
            clean_bytes: clean,
            dirty_bytes: dirty,
            dirty_ratio: if total == 0 {
                0.0
            } else {
                dirty as f64 / total as f64
            },
            overdue,
        })
    }

    /// The cleanable segments and where they split, if any is dirty.
    fn plan(&self, now_ms: i64, uncleanable_from: i64) -> Option<Plan> {
        let lag_min_ms = {
            let c = self.config.read();
            i64::try_from(c.compaction.compaction_lag_min.as_millis()).unwrap_or(i64::MAX)
        };
        let state = self.state.read();
        if state.closed || state.failed.is_some() {
            return None;
        }
        let start = state.log_start_offset();
        let active_base = state.active().base_offset;
        let young = |s: &Segment| {
            lag_min_ms > 0
                && s.max_timestamp
                    .is_some_and(|ts| ts > now_ms.saturating_sub(lag_min_ms))
        };
        let mut segments = Vec::new();
        let mut end = start;
        for s in state.segments.values() {
            if s.base_offset >= active_base || s.next_offset > uncleanable_from || young(s) {
                break;
            }
            end = s.next_offset;
            if !s.is_empty() && s.next_offset > start {
                segments.push(SegmentView {
                    base: s.base_offset,
                    log: s.log.clone(),
                    size: s.size_bytes,
                    next_offset: s.next_offset,
                });
            }
        }
        let first_dirty = state.cleaner.first_dirty.max(start);
        let due_ms = state.cleaner.tombstones_due_ms;
        let tombstones_due = due_ms > 0 && now_ms >= due_ms;
        ((first_dirty < end || tombstones_due) && !segments.is_empty()).then(|| Plan {
            segments,
            first_dirty,
            end,
            checkpoint: state.cleaner.clone(),
            truncations: state.truncations,
        })
    }

    /// Runs one pass (see the module doc) with `uncleanable_from` the first offset it must
    /// not touch. `throttle` is called with the bytes read or written as the pass goes, and
    /// may sleep to bound its I/O rate. Blocks on disk I/O; run it on a blocking thread. A
    /// log whose policy does not compact is left alone.
    pub fn clean(
        &self,
        now_ms: i64,
        uncleanable_from: i64,
        limits: &CleanLimits,
        throttle: &mut dyn FnMut(u64),
    ) -> Result<CleanReport, LogError> {
        let mut report = CleanReport {
            first_dirty: self.state.read().cleaner.first_dirty,
            ..CleanReport::default()
        };
        if !self.config.read().cleanup.compacts() {
            return Ok(report);
        }
        let Some(plan) = self.plan(now_ms, uncleanable_from) else {
            return Ok(report);
        };
        let outcome = self.clean_planned(&plan, now_ms, limits, throttle, &mut report);
        match outcome {
            // A failure after the log was truncated or closed under the pass is that change,
            // not damage: the pass is abandoned and the next one starts over.
            Err(_) if self.changed_since(&plan) => {
                report.abandoned = true;
                Ok(report)
            }
            Err(e) => Err(e),
            Ok(()) => Ok(report),
        }
    }

    /// Whether the log was truncated or closed, or a planned segment removed or replaced
    /// (retention, DeleteRecords), since the plan was made.
    fn changed_since(&self, plan: &Plan) -> bool {
        let state = self.state.read();
        state.closed
            || state.truncations != plan.truncations
            || plan.segments.iter().any(|v| {
                state
                    .segments
                    .get(&v.base)
                    .is_none_or(|s| s.size_bytes != v.size)
            })
    }

    fn clean_planned(
        &self,
        plan: &Plan,
        now_ms: i64,
        limits: &CleanLimits,
        throttle: &mut dyn FnMut(u64),
        report: &mut CleanReport,
    ) -> Result<(), LogError> {
        let entries_max = limits.key_map_bytes_max.max(KEY_MAP_BYTES_MIN) / KEY_MAP_ENTRY_BYTES;
        let (map, map_end) = self.build_key_map(plan, entries_max, throttle, report)?;
        report.keys_mapped = map.latest.len();
        report.key_map_full = map_end < plan.end;
        let delete_retention_ms = {
            let c = self.config.read();
            i64::try_from(c.compaction.delete_retention.as_millis()).unwrap_or(i64::MAX)
        };
        let mut rules = KeepRules {
            map: &map.latest,
            retained_batch_ends: &limits.retained_batch_ends,
            first_dirty: plan.first_dirty,
            checkpoint: &plan.checkpoint,
            now_ms,
            delete_retention_ms,
            tombstones_due_ms: None,
        };
        let mut expected_truncations = plan.truncations;
        for group in self.groups(&plan.segments) {
            let Some(written) = self.copy_group(group, &mut rules, throttle, report)? else {
                continue;
            };
            match self.swap(group, written, expected_truncations)? {
                Some(truncations) => expected_truncations = truncations,
                None => {
                    report.abandoned = true;
                    return Ok(());
                }
            }
            report.segments_replaced += group.len();
            report.segments_written += 1;
        }
        // Under the writer lock: a truncation since the last swap would make `map_end` wrong.
        let _writer = self.writer.lock();
        {
            let state = self.state.read();
            if state.closed || state.truncations != expected_truncations {
                report.abandoned = true;
                return Ok(());
            }
        }
        let due = rules.tombstones_due_ms.unwrap_or(0).max(0);
        self.update_cleaner_checkpoint(|c| {
            c.record_pass(map_end, now_ms);
            c.tombstones_due_ms = due;
            true
        })?;
        report.first_dirty = map_end;
        Ok(())
    }

    /// Maps the keys of the dirty records, from the first dirty offset until the plan's end
    /// or until the map is full; returns it and the offset it covers up to.
    fn build_key_map(
        &self,
        plan: &Plan,
        entries_max: usize,
        throttle: &mut dyn FnMut(u64),
        report: &mut CleanReport,
    ) -> Result<(KeyMap, i64), LogError> {
        let mut map = KeyMap {
            latest: HashMap::new(),
            pending: HashMap::new(),
            pending_len: 0,
            entries_max,
        };
        // The first offset of each undecided transaction: the map covers no further.
        let mut open_txns: HashMap<i64, i64> = HashMap::new();
        let mut map_end = plan.end;
        'segments: for s in plan
            .segments
            .iter()
            .filter(|s| s.next_offset > plan.first_dirty)
        {
            let file = s.log.open().map_err(|e| self.io_error(s.base, e))?;
            let mut position = 0;
            while position < s.size {
                let (meta, batch) =
                    read_batch(&*file, position, s.size).map_err(|e| self.io_error(s.base, e))?;
                report.bytes_read += meta.size_bytes;
                throttle(meta.size_bytes);
                position = meta.end_position();
                if meta.last_offset < plan.first_dirty {
                    continue;
                }
                let pid = batch.producer_id();
                if batch.is_control() {
                    let marker = parse_marker(&batch).map_err(LogError::from)?;
                    open_txns.remove(&pid);
                    let records = map.pending.remove(&pid).unwrap_or_default();
                    map.pending_len -= records.len();
                    if marker.marker == MarkerType::Commit {
                        for (hash, offset) in records {
                            map.insert(hash, offset);
                        }
                    }
                    continue;
                }
                let count = usize::try_from(batch.record_count()).unwrap_or(0);
                if map.full_after(count) {
                    map_end = meta.base_offset;
                    break 'segments;
                }
                let transactional = batch.is_transactional();
                if transactional {
                    open_txns.entry(pid).or_insert(meta.base_offset);
                }
                let mut keyed = Vec::new();
                for_each_record(&batch, CLEAN_DECOMPRESSED_BYTES_MAX, |r| {
                    if let Some(key) = r.key.filter(|_| r.offset >= plan.first_dirty) {
                        keyed.push((key_hash(key), r.offset));
                    }
                })
                .map_err(LogError::from)?;
                if transactional {
                    map.pending_len += keyed.len();
                    map.pending.entry(pid).or_default().extend(keyed);
                } else {
                    for (hash, offset) in keyed {
                        map.insert(hash, offset);
                    }
                }
            }
        }
        // An undecided transaction is cleaned by a later pass that sees its marker.
        if let Some(&first) = open_txns.values().min() {
            map_end = map_end.min(first).max(plan.first_dirty);
        }
        Ok((map, map_end))
    }

    /// Consecutive cleanable segments in groups that fit one segment (bytes and offsets).
    fn groups<'a>(&self, segments: &'a [SegmentView]) -> Vec<&'a [SegmentView]> {
        let segment_bytes = self.config.read().segment_bytes;
        let mut groups = Vec::new();
        let mut from = 0;
        while from < segments.len() {
            let first = &segments[from];
            let mut to = from + 1;
            let mut bytes = first.size;
            while let Some(next) = segments.get(to) {
                let offsets = (next.next_offset - first.base) as u64;
                if bytes + next.size > segment_bytes || offsets > SEGMENT_OFFSETS_MAX {
                    break;
                }
                bytes += next.size;
                to += 1;
            }
            groups.push(&segments[from..to]);
            from = to;
        }
        groups
    }

    /// Writes the cleaned copy of `group` as `<base>.log.cleaned`, fsynced, with the segment
    /// that will describe it; `None` when nothing in the group would change.
    fn copy_group(
        &self,
        group: &[SegmentView],
        rules: &mut KeepRules<'_>,
        throttle: &mut dyn FnMut(u64),
        report: &mut CleanReport,
    ) -> Result<Option<Segment>, LogError> {
        let base = group[0].base;
        let interval = self.config.read().index_interval_bytes;
        let mut out = GroupWriter {
            log: self,
            path: cleaned_path(&self.dir, base),
            file: None,
            segment: Segment::with_indexes(
                base,
                LogFileHandle::new(&self.files, &self.dir, base),
                SparseIndex::empty(),
                SparseIndex::empty(),
            ),
            interval,
            unchanged_until: (0, 0),
        };
        let last_segment = group.len() - 1;
        for (i, s) in group.iter().enumerate() {
            let file = s.log.open().map_err(|e| self.io_error(s.base, e))?;
            let mut position = 0;
            while position < s.size {
                let (meta, batch) =
                    read_batch(&*file, position, s.size).map_err(|e| self.io_error(s.base, e))?;
                report.bytes_read += meta.size_bytes;
                throttle(meta.size_bytes);
                position = meta.end_position();
                let last_of_group = i == last_segment && position == s.size;
                let filtered = if batch.is_control() {
                    Filtered::Unchanged
                } else {
                    filter_records(&batch, CLEAN_DECOMPRESSED_BYTES_MAX, |r| {
                        rules.keep(r, report)
                    })
                    .map_err(LogError::from)?
                };
                match filtered {
                    Filtered::Unchanged => out.keep(group, i, &meta, batch.as_bytes())?,
                    Filtered::Rewritten { kept: 0, .. }
                        if !last_of_group
                            && !rules.retained_batch_ends.contains(&meta.last_offset) =>
                    {
                        out.change(group)?;
                    }
                    Filtered::Rewritten { bytes, .. } => {
                        out.change(group)?;
                        out.write(&bytes)?;
                        throttle(bytes.len() as u64);
                    }
                }
            }
        }
        let Some(file) = out.file.take() else {
            return Ok(None);
        };
        report.bytes_written += out.segment.size_bytes;
        crate::timed_fsync(|| file.sync_data()).map_err(|e| self.io_error(base, e))?;
        Ok(Some(out.segment))
    }

    /// Puts a cleaned group in place of its segments (see the module doc), unless the log
    /// changed since `truncations` was read; returns the truncation count after the swap, or
    /// `None` (the cleaned file removed) when it changed.
    fn swap(
        &self,
        group: &[SegmentView],
        cleaned: Segment,
        truncations: u64,
    ) -> Result<Option<u64>, LogError> {
        let base = group[0].base;
        let cleaned_file = cleaned_path(&self.dir, base);
        // Retention and DeleteRecords remove segments: not while this swap replaces some.
        let _maintenance = self.maintenance.lock();
        let _writer = self.writer.lock();
        let unchanged = {
            let state = self.state.read();
            !state.closed
                && state.failed.is_none()
                && state.truncations == truncations
                && group.iter().all(|v| {
                    state
                        .segments
                        .get(&v.base)
                        .is_some_and(|s| s.size_bytes == v.size)
                })
        };
        if !unchanged {
            drop(cleaned);
            let _ = self.storage.remove(&cleaned_file);
            return Ok(None);
        }
        let group_end = group[group.len() - 1].next_offset;
        self.update_cleaner_checkpoint(|c| {
            let raise = c.gaps_below < group_end;
            c.gaps_below = c.gaps_below.max(group_end);
            raise
        })?;
        let swap_file = swap_path(&self.dir, base);
        let committed = self
            .storage
            .rename(&cleaned_file, &swap_file)
            .and_then(|()| self.storage.sync_dir(&self.dir));
        if let Err(e) = committed {
            let _ = self.storage.remove(&cleaned_file);
            return Err(LogError::io(&swap_file, e));
        }
        // Decided: from here a failure fails the log, and opening it finishes the swap.
        let finished = {
            let mut state = self.state.write();
            let placed = remove_replaced(&*self.storage, &self.dir, group.iter().map(|v| v.base))
                .and_then(|()| {
                    self.storage
                        .rename(&swap_file, &segment_path(&self.dir, base, LOG_SUFFIX))
                });
            if placed.is_ok() {
                for v in group {
                    state.segments.remove(&v.base);
                }
                state.segments.insert(base, cleaned);
                state.truncations += 1;
            }
            placed.map(|()| state.truncations)
        };
        let finished = finished
            .and_then(|t| self.storage.sync_dir(&self.dir).map(|()| t))
            .map_err(|e| LogError::io(&swap_file, e));
        match finished {
            Ok(t) => {
                if let Some(s) = self.state.read().segments.get(&base) {
                    // Not fsynced: a lost index is rebuilt when the log opens.
                    if let Err(e) = s.store_indexes() {
                        tracing::warn!(dir = %self.dir.display(), base, error = %e,
                            "cleaned segment's indexes not written; they are rebuilt at open");
                    }
                }
                Ok(Some(t))
            }
            Err(e) => {
                self.fail(format!("swapping in cleaned segment {base} failed: {e}"));
                Err(e)
            }
        }
    }

    /// Changes the cleaner checkpoint with `f` and stores it durably when `f` says it
    /// changed; every change goes through here, one at a time (the checkpoint mutex), so no
    /// writer puts back what another raised.
    pub(crate) fn update_cleaner_checkpoint(
        &self,
        f: impl FnOnce(&mut CleanerCheckpoint) -> bool,
    ) -> Result<(), LogError> {
        let _one = self.cleaner_checkpoint_lock.lock();
        let mut checkpoint = self.state.read().cleaner.clone();
        if !f(&mut checkpoint) {
            return Ok(());
        }
        cleaner_checkpoint::store(&*self.storage, &self.dir, &checkpoint)
            .map_err(|e| LogError::io(cleaner_checkpoint::path(&self.dir), e))?;
        self.state.write().cleaner = checkpoint;
        Ok(())
    }

    /// Raises the offset below which batches may leave gaps to `offset`, durably: called
    /// before a follower writes batches with gaps its leader's cleaner left.
    pub(crate) fn allow_gaps_below(&self, offset: i64) -> Result<(), LogError> {
        self.update_cleaner_checkpoint(|c| {
            let raise = c.gaps_below < offset;
            c.gaps_below = c.gaps_below.max(offset);
            raise
        })
    }

    /// After a truncation to `end`: the records appended from there on are dirty again.
    pub(crate) fn forget_cleaned_from(&self, end: i64) -> Result<(), LogError> {
        self.update_cleaner_checkpoint(|c| c.truncated_to(end))
    }
}

/// Which records a pass keeps.
struct KeepRules<'a> {
    map: &'a HashMap<u128, i64>,
    /// [`CleanLimits::retained_batch_ends`].
    retained_batch_ends: &'a HashSet<i64>,
    first_dirty: i64,
    checkpoint: &'a CleanerCheckpoint,
    now_ms: i64,
    delete_retention_ms: i64,
    /// The earliest time a tombstone kept so far may be removed.
    tombstones_due_ms: Option<i64>,
}

impl KeepRules<'_> {
    fn keep(&mut self, r: &KeyedRecord<'_>, report: &mut CleanReport) -> bool {
        let Some(key) = r.key else {
            return true;
        };
        if self
            .map
            .get(&key_hash(key))
            .is_some_and(|&latest| r.offset < latest)
        {
            report.records_removed += 1;
            return false;
        }
        if !r.tombstone {
            return true;
        }
        // Cleaned by an earlier pass, or by this one (dated now).
        let cleaned_at = match r.offset < self.first_dirty {
            true => self.checkpoint.cleaned_at(r.offset).unwrap_or(self.now_ms),
            false => self.now_ms,
        };
        let due = cleaned_at.saturating_add(self.delete_retention_ms);
        if r.offset < self.first_dirty && self.now_ms >= due {
            report.records_removed += 1;
            report.tombstones_removed += 1;
            return false;
        }
        self.tombstones_due_ms = Some(self.tombstones_due_ms.map_or(due, |d| d.min(due)));
        true
    }
}

/// The cleaned copy of a group as it is written. Nothing is written while every batch is
/// kept as it was: the unchanged prefix is copied only once a change is found.
struct GroupWriter<'a> {
    log: &'a PartitionLog,
    path: PathBuf,
    file: Option<std::sync::Arc<dyn StorageFile>>,
    segment: Segment,
    interval: u32,
    /// (segment index in the group, position) up to which batches are unchanged and not
    /// yet written.
    unchanged_until: (usize, u64),
}

impl GroupWriter<'_> {
    fn io(&self, e: std::io::Error) -> LogError {
        LogError::io(&self.path, e)
    }

    /// A batch kept whole: written now if the copy has started, else remembered.
    fn keep(
        &mut self,
        group: &[SegmentView],
        index: usize,
        meta: &BatchMeta,
        bytes: &[u8],
    ) -> Result<(), LogError> {
        if self.file.is_some() {
            return self.write(bytes);
        }
        debug_assert!(index < group.len());
        self.unchanged_until = (index, meta.end_position());
        Ok(())
    }

    /// A batch changes: start the copy, writing the unchanged batches before it.
    fn change(&mut self, group: &[SegmentView]) -> Result<(), LogError> {
        if self.file.is_some() {
            return Ok(());
        }
        let file = self
            .log
            .storage
            .open(&self.path, true)
            .map_err(|e| self.io(e))?;
        file.set_len(0).map_err(|e| self.io(e))?;
        self.file = Some(file);
        let (last, until) = self.unchanged_until;
        if until == 0 && last == 0 {
            return Ok(());
        }
        for (i, s) in group.iter().enumerate().take(last + 1) {
            let end = if i == last { until } else { s.size };
            let source = s.log.open().map_err(|e| self.log.io_error(s.base, e))?;
            let mut position = 0;
            while position < end {
                let (meta, batch) = read_batch(&*source, position, end)
                    .map_err(|e| self.log.io_error(s.base, e))?;
                position = meta.end_position();
                self.write(batch.as_bytes())?;
            }
        }
        Ok(())
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), LogError> {
        let file = self.file.clone().ok_or_else(|| {
            self.io(std::io::Error::other(
                "cleaned file written before it was opened",
            ))
        })?;
        let position = self.segment.size_bytes;
        let meta = BatchMeta::from_header(position, bytes)
            .map_err(|why| self.io(std::io::Error::new(std::io::ErrorKind::InvalidData, why)))?;
        file.write_all_at(bytes, position).map_err(|e| self.io(e))?;
        self.segment
            .track_batch(&meta, self.interval)
            .map_err(|e| self.io(e))
    }
}

/// Reads and CRC-checks the whole batch at `position`.
fn read_batch(
    file: &dyn StorageFile,
    position: u64,
    end: u64,
) -> std::io::Result<(BatchMeta, RecordBatch)> {
    let invalid = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidData, why);
    let meta = read_batch_meta(file, position, end)?.map_err(invalid)?;
    let len = usize::try_from(meta.size_bytes).map_err(|_| invalid("batch too large".into()))?;
    let mut bytes = vec![0u8; len];
    file.read_exact_at(&mut bytes, position)?;
    let batch = RecordBatch::parse(bytes.into()).map_err(|e| invalid(e.to_string()))?;
    Ok((meta, batch))
}

/// Removes the files of the segments a cleaned group replaces (the first one's log stays:
/// the swap file is renamed over it).
fn remove_replaced(
    storage: &dyn crate::storage::Storage,
    dir: &Path,
    bases: impl Iterator<Item = i64>,
) -> std::io::Result<()> {
    for (i, base) in bases.enumerate() {
        let suffixes: &[&str] = if i == 0 {
            &[INDEX_SUFFIX, TIME_INDEX_SUFFIX]
        } else {
            &[LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX]
        };
        for suffix in suffixes {
            let path = segment_path(dir, base, suffix);
            if storage.exists(&path) {
                storage.remove(&path)?;
            }
        }
    }
    Ok(())
}

fn cleaned_path(dir: &Path, base: i64) -> PathBuf {
    segment_path(dir, base, CLEANED_SUFFIX)
}

fn swap_path(dir: &Path, base: i64) -> PathBuf {
    segment_path(dir, base, SWAP_SUFFIX)
}

/// Whether `path` is a cleaned copy that was never decided (opening removes it).
pub(crate) fn is_cleaned_leftover(path: &Path) -> bool {
    crate::segment::parse_segment_path(path, CLEANED_SUFFIX).is_some()
}

/// Finishes every swap a crash interrupted: a `<base>.log.swap` file replaces the segments
/// whose bases lie between its base and the end of its last batch, and becomes
/// `<base>.log`. Returns how many it finished.
pub(crate) fn finish_swaps(
    storage: &dyn crate::storage::Storage,
    dir: &Path,
) -> std::io::Result<usize> {
    let paths = storage.list(dir)?;
    let mut finished = 0;
    for path in &paths {
        let Some(base) = crate::segment::parse_segment_path(path, SWAP_SUFFIX) else {
            continue;
        };
        let file = storage.open(path, false)?;
        let len = file.byte_len()?;
        let mut end = base;
        let mut position = 0;
        // The swap file was fsynced whole before it got its name.
        while position < len {
            match read_batch_meta(&*file, position, len)? {
                Ok(meta) => {
                    end = meta.next_offset();
                    position = meta.end_position();
                }
                Err(_) => break,
            }
        }
        drop(file);
        let replaced: Vec<i64> = paths
            .iter()
            .filter_map(|p| crate::segment::parse_segment_path(p, LOG_SUFFIX))
            .filter(|&b| b >= base && b < end.max(base.saturating_add(1)))
            .collect();
        let mut bases = vec![base];
        bases.extend(replaced.into_iter().filter(|&b| b != base));
        remove_replaced(storage, dir, bases.into_iter())?;
        storage.rename(path, &segment_path(dir, base, LOG_SUFFIX))?;
        storage.sync_dir(dir)?;
        tracing::info!(dir = %dir.display(), base, end, "finished a cleaned segment's swap");
        finished += 1;
    }
    Ok(finished)
}
