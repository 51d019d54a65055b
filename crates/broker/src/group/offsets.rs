//! Committed offsets of the groups this broker coordinates: their records in the internal
//! topic `__consumer_offsets`, and the in-memory copy served to clients.
//!
//! The topic has [`OFFSETS_PARTITIONS`] partitions, replicated like any other; a group's
//! commits go to partition `murmur2(group) % OFFSETS_PARTITIONS`, whose leader is the group's
//! coordinator. Each commit is one batch with one record per partition: key
//! `{"g":group,"t":topic,"p":partition}`, value `{"o":offset,"m":metadata}`, or no value (a
//! tombstone) when the offset is deleted.
//!
//! Memory holds the offsets of the partitions led here only. When this broker becomes the
//! leader of one, it reads that partition's log to its end ([`read_log`], the last record per
//! key winning) before answering for its groups; when it stops leading one, that partition's
//! groups are dropped. A commit is written to the log under this store's lock and staged; it
//! reaches memory (and so readers) only once the high watermark has passed it, and staged
//! commits are applied in log order ([`OffsetStore::apply_up_to`]), so memory always equals a
//! replay of the log up to the high watermark.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tinymq_log::{LogError, PartitionLog};
use tinymq_protocol::batch::{BatchBuilder, BatchIter, Compression, ProducerStamp, RecordInput};
use tinymq_protocol::{messages as m, ErrorCode};

use super::assignment::Tp;
use super::txn_offsets::{PendingCommit, PendingTxnOffsets, PENDING_TXN_OFFSETS_MAX};
use crate::topic::TopicSettings;

/// Name of the internal topic (user topics may not start with `__`).
pub use tinymq_meta::command::OFFSETS_TOPIC;
pub const OFFSETS_PARTITIONS: u32 = 4;
/// Bytes read at a time when loading an offsets partition.
const LOAD_READ_BYTES: usize = 8 << 20;
/// Segment size of the offsets partitions (replayed whole when a broker starts leading a
/// partition) and of the transaction states (compacted a whole segment at a time).
const OFFSETS_SEGMENT_BYTES: u64 = 64 << 20;
/// Largest batch in an offsets partition: one commit is one batch, with room for
/// `COMMIT_OFFSETS_MAX` offsets with full metadata.
const OFFSETS_BATCH_BYTES_MAX: u32 = 8 << 20;

/// The settings of the offsets partitions, whatever the broker's topic defaults: kept
/// forever, flush `always` (a commit is acknowledged once fsynced on every in-sync replica).
///
/// Not compacted: an offset committed in a transaction (TxnOffsetCommit) is a plain record
/// whose value names its producer, and counts only if a COMMIT marker follows. The cleaner
/// admits only records of transactional batches after their marker, so it would take an
/// undecided or aborted commit for the latest value of its key and remove the offset committed
/// before it. (The transaction states, whose records are all plain, are compacted:
/// [`compacted_topic_settings`].)
pub fn topic_settings(partitions: u32, replication_factor: u32) -> TopicSettings {
    TopicSettings {
        partitions,
        replication_factor,
        retention_ms: -1,
        retention_bytes: -1,
        segment_bytes: OFFSETS_SEGMENT_BYTES,
        segment_ms: 0,
        flush: tinymq_log::FlushPolicy::Always.to_string(),
        message_bytes_max: OFFSETS_BATCH_BYTES_MAX,
        message_timestamp_after_max_ms: -1,
        message_timestamp_before_max_ms: -1,
        // The MetaServer's defaults for the replication factor (`EnsureOffsetsTopic`).
        min_insync_replicas: 0,
        unclean_leader_election: false,
        ..TopicSettings::default()
    }
}

/// [`topic_settings`], compacted: the settings of `__transaction_state`, whose records are
/// the latest state of each transactional id (no value: forgotten), all a load replays, so the
/// cleaner keeps exactly what a replay needs (docs/storage.md, "Compaction").
pub fn compacted_topic_settings(partitions: u32, replication_factor: u32) -> TopicSettings {
    TopicSettings {
        cleanup_policy: tinymq_log::CleanupPolicy::Compact.to_string(),
        ..topic_settings(partitions, replication_factor)
    }
}

#[derive(Serialize, Deserialize)]
struct Key {
    g: String,
    t: String,
    p: u32,
}

#[derive(Serialize, Deserialize)]
struct Value {
    o: i64,
    m: String,
    /// The producer id of the transaction this offset was committed in (TxnOffsetCommit): it
    /// counts only once that producer's COMMIT marker follows in this partition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    x: Option<i64>,
    /// That producer's epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    e: Option<i16>,
}

/// A committed offset and its metadata string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub offset: i64,
    pub metadata: String,
}

impl Committed {
    pub fn to_wire(self, (topic, partition): Tp) -> m::CommittedOffset {
        m::CommittedOffset {
            topic,
            partition,
            offset: self.offset,
            metadata: self.metadata,
            error: None,
        }
    }
}

/// One change to a group's offsets: a new committed offset, or `None` to delete it.
pub type Change = (Tp, Option<Committed>);

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct GroupOffsets {
    offsets: BTreeMap<Tp, Committed>,
    last_commit_ms: i64,
}

/// The committed offsets of every group of one offsets partition, as read from its log.
pub type LoadedOffsets = HashMap<String, GroupOffsets>;

/// The memory one committed offset is counted for: its names, its metadata and a fixed cost
/// for the map entries.
pub fn entry_bytes(group: &str, (topic, _): &Tp, committed: &Committed) -> usize {
    const ENTRY_OVERHEAD_BYTES: usize = 96;
    group.len() + topic.len() + committed.metadata.len() + ENTRY_OVERHEAD_BYTES
}

fn group_bytes(name: &str, group: &GroupOffsets) -> usize {
    group
        .offsets
        .iter()
        .map(|(tp, c)| entry_bytes(name, tp, c))
        .sum()
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The offsets partition of a group (and so its coordinator).
pub fn partition_for_group(group: &str) -> u32 {
    tinymq_protocol::hash::murmur2_positive(group.as_bytes()) % OFFSETS_PARTITIONS
}

/// Where an offsets partition led here stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Load {
    /// Its log is being read; its groups are not answered for yet.
    Loading,
    /// Its groups are served from memory since this instant.
    Loaded(Instant),
}

/// A write staged until the high watermark passes it.
#[derive(Debug)]
enum Staging {
    /// A commit: its group, changes and time.
    Commit(String, Vec<Change>, i64),
    /// A TxnOffsetCommit of producer `0`: pending until its marker.
    Txn(i64, PendingCommit),
    /// A transaction marker of producer `0` in epoch `1`: COMMIT (`true`) or ABORT.
    Marker(i64, i16, bool),
}

/// Writes staged until the high watermark passes them, by the log end after the write.
type Staged = BTreeMap<i64, Staging>;

/// An offsets partition this broker leads, in one leader epoch.
#[derive(Debug)]
struct Led {
    leader_epoch: u32,
    load: Load,
    staged: Staged,
}

#[derive(Debug, Default)]
struct Inner {
    groups: HashMap<String, GroupOffsets>,
    led: BTreeMap<u32, Led>,
    /// Bytes the offsets in `groups` take by [`entry_bytes`], kept with every change.
    stored_bytes: usize,
    /// Offsets committed in transactions not resolved yet.
    pending: PendingTxnOffsets,
}

impl Inner {
    fn apply(&mut self, group: &str, changes: Vec<Change>, timestamp_ms: i64) {
        let mut bytes = self.stored_bytes;
        let entry = self.groups.entry(group.to_string()).or_default();
        for (tp, value) in changes {
            let removed = match value {
                Some(c) => {
                    bytes += entry_bytes(group, &tp, &c);
                    entry.offsets.insert(tp.clone(), c)
                }
                None => entry.offsets.remove(&tp),
            };
            if let Some(old) = removed {
                bytes = bytes.saturating_sub(entry_bytes(group, &tp, &old));
            }
        }
        entry.last_commit_ms = entry.last_commit_ms.max(timestamp_ms);
        if entry.offsets.is_empty() {
            self.groups.remove(group);
        }
        self.stored_bytes = bytes;
    }

    /// Applies one staged write that the high watermark passed.
    fn apply_staged(&mut self, partition: u32, staged: Staging) {
        match staged {
            Staging::Commit(group, changes, timestamp_ms) => {
                self.apply(&group, changes, timestamp_ms)
            }
            Staging::Txn(producer_id, commit) => self.pending.add(producer_id, commit),
            Staging::Marker(producer_id, epoch, commit) => {
                for c in self.pending.take(producer_id, partition) {
                    if commit && c.producer_epoch == epoch {
                        self.apply(&c.group, c.changes, c.timestamp_ms);
                    }
                }
            }
        }
    }

    /// Forgets the groups of offsets partition `partition`.
    fn drop_groups(&mut self, partition: u32) {
        self.pending.drop_partition(partition);
        let mut freed = 0;
        self.groups.retain(|name, g| {
            let keep = partition_for_group(name) != partition;
            if !keep {
                freed += group_bytes(name, g);
            }
            keep
        });
        self.stored_bytes = self.stored_bytes.saturating_sub(freed);
    }
}

/// The offsets of the groups coordinated here, and which offsets partitions are led here.
#[derive(Debug, Default)]
pub struct OffsetStore {
    inner: Mutex<Inner>,
}

/// Refusal of a write to an offsets partition no longer led here in the expected epoch.
fn moved(partition: u32) -> m::Error {
    ErrorCode::NOT_COORDINATOR.with_message(format!(
        "{OFFSETS_TOPIC}/{partition} is no longer led here; find the coordinator again"
    ))
}

impl OffsetStore {
    /// When the offsets of `partition` were loaded here in `leader_epoch`, if they are.
    pub fn loaded_since(&self, partition: u32, leader_epoch: u32) -> Option<Instant> {
        match self.inner.lock().led.get(&partition)? {
            Led {
                leader_epoch: e,
                load: Load::Loaded(since),
                ..
            } if *e == leader_epoch => Some(*since),
            _ => None,
        }
    }

    /// When the offsets of `partition` were loaded here, in whatever epoch.
    pub fn loaded_at(&self, partition: u32) -> Option<Instant> {
        match self.inner.lock().led.get(&partition)?.load {
            Load::Loaded(since) => Some(since),
            Load::Loading => None,
        }
    }

    /// The offsets partitions led here (loaded or loading) and their leader epochs.
    pub fn led(&self) -> BTreeMap<u32, u32> {
        let inner = self.inner.lock();
        inner
            .led
            .iter()
            .map(|(p, led)| (*p, led.leader_epoch))
            .collect()
    }

    /// This broker leads `partition` in `leader_epoch`: forgets what it held of it and marks
    /// it loading. Returns false (and changes nothing) if it already is, in that epoch.
    pub fn begin_load(&self, partition: u32, leader_epoch: u32) -> bool {
        let mut inner = self.inner.lock();
        if inner
            .led
            .get(&partition)
            .is_some_and(|l| l.leader_epoch == leader_epoch)
        {
            return false;
        }
        inner.drop_groups(partition);
        inner.led.insert(
            partition,
            Led {
                leader_epoch,
                load: Load::Loading,
                staged: Staged::new(),
            },
        );
        true
    }

    /// Serves `loaded` as the offsets of `partition`, if it is still loading in
    /// `leader_epoch` (leadership may have moved while the log was read). Returns whether it
    /// was taken.
    pub fn finish_load(&self, partition: u32, leader_epoch: u32, loaded: LoadedOffsets) -> bool {
        self.finish_load_with(
            partition,
            leader_epoch,
            loaded,
            PendingTxnOffsets::default(),
        )
    }

    /// [`OffsetStore::finish_load`] with the transactional offsets the log still holds pending.
    pub fn finish_load_with(
        &self,
        partition: u32,
        leader_epoch: u32,
        loaded: LoadedOffsets,
        pending: PendingTxnOffsets,
    ) -> bool {
        let mut inner = self.inner.lock();
        match inner.led.get_mut(&partition) {
            Some(led) if led.leader_epoch == leader_epoch && led.load == Load::Loading => {
                led.load = Load::Loaded(Instant::now());
            }
            _ => return false,
        }
        let bytes: usize = loaded.iter().map(|(n, g)| group_bytes(n, g)).sum();
        inner.stored_bytes += bytes;
        inner.groups.extend(loaded);
        inner.pending.extend(pending);
        true
    }

    /// This broker no longer leads `partition`: drops its groups and staged writes.
    pub fn drop_partition(&self, partition: u32) {
        let mut inner = self.inner.lock();
        inner.led.remove(&partition);
        inner.drop_groups(partition);
    }

    /// Runs `write` (the append of `group`'s `changes` to its offsets partition, returning
    /// its outcome and the log end after it) under this store's lock, so that staged writes
    /// are ordered as in the log, and stages the changes until the high watermark passes that
    /// end. Refused with `NOT_COORDINATOR` unless the partition is loaded here in
    /// `leader_epoch`.
    pub fn append<T>(
        &self,
        group: &str,
        leader_epoch: u32,
        changes: Vec<Change>,
        write: impl FnOnce() -> Result<(T, i64), m::Error>,
    ) -> Result<T, m::Error> {
        let partition = partition_for_group(group);
        let mut inner = self.inner.lock();
        let led = inner
            .led
            .get_mut(&partition)
            .filter(|l| l.leader_epoch == leader_epoch && matches!(l.load, Load::Loaded(_)))
            .ok_or_else(|| moved(partition))?;
        let (outcome, end) = write()?;
        led.staged
            .insert(end, Staging::Commit(group.to_string(), changes, now_ms()));
        Ok(outcome)
    }

    /// [`OffsetStore::append`] for a TxnOffsetCommit of `producer_id`: the changes wait for
    /// its transaction's marker. Refused with `LIMIT_EXCEEDED` past
    /// [`PENDING_TXN_OFFSETS_MAX`] offsets waiting.
    pub fn append_txn<T>(
        &self,
        group: &str,
        leader_epoch: u32,
        (producer_id, producer_epoch): (i64, i16),
        changes: Vec<Change>,
        write: impl FnOnce() -> Result<(T, i64), m::Error>,
    ) -> Result<T, m::Error> {
        let partition = partition_for_group(group);
        let mut inner = self.inner.lock();
        if inner.pending.room() < changes.len() {
            return Err(ErrorCode::LIMIT_EXCEEDED.with_message(format!(
                "{PENDING_TXN_OFFSETS_MAX} offsets committed in open transactions wait on this                  broker (pending_txn_offsets_max); retry once transactions end"
            )));
        }
        let led = inner
            .led
            .get_mut(&partition)
            .filter(|l| l.leader_epoch == leader_epoch && matches!(l.load, Load::Loaded(_)))
            .ok_or_else(|| moved(partition))?;
        let (outcome, end) = write()?;
        let commit = PendingCommit {
            partition,
            producer_epoch,
            group: group.to_string(),
            changes,
            timestamp_ms: now_ms(),
        };
        led.staged.insert(end, Staging::Txn(producer_id, commit));
        Ok(outcome)
    }

    /// Runs `write` (a marker of `producer_id` to offsets partition `partition`, returning
    /// its outcome and the log end after it) under this store's lock and stages it: once the
    /// high watermark passes it, the producer's pending offsets there are committed or
    /// dropped. Refused with `COORDINATOR_LOAD_IN_PROGRESS` while the partition loads (its
    /// coordinator retries), `NOT_COORDINATOR` unless it is led here in `leader_epoch`.
    pub fn append_marker<T>(
        &self,
        partition: u32,
        leader_epoch: u32,
        (producer_id, producer_epoch): (i64, i16),
        commit: bool,
        write: impl FnOnce() -> Result<(T, i64), m::Error>,
    ) -> Result<T, m::Error> {
        let mut inner = self.inner.lock();
        let led = match inner.led.get_mut(&partition) {
            Some(l) if l.leader_epoch == leader_epoch && matches!(l.load, Load::Loaded(_)) => l,
            Some(l) if l.leader_epoch == leader_epoch => {
                return Err(
                    ErrorCode::COORDINATOR_LOAD_IN_PROGRESS.with_message(format!(
                        "{OFFSETS_TOPIC}/{partition} is loading; retry the marker"
                    )),
                )
            }
            _ => return Err(moved(partition)),
        };
        let (outcome, end) = write()?;
        led.staged
            .insert(end, Staging::Marker(producer_id, producer_epoch, commit));
        Ok(outcome)
    }

    /// Whether an open transaction holds an offset of `group` for `tp`.
    pub fn unstable(&self, group: &str, tp: &Tp) -> bool {
        self.inner.lock().pending.holds(group, tp)
    }

    /// Applies, in log order, every staged write of `partition` in `leader_epoch` that ends
    /// at or below the high watermark `hw`.
    pub fn apply_up_to(&self, partition: u32, leader_epoch: u32, hw: i64) {
        let mut inner = self.inner.lock();
        let Some(led) = inner
            .led
            .get_mut(&partition)
            .filter(|l| l.leader_epoch == leader_epoch)
        else {
            return;
        };
        let later = led.staged.split_off(&hw.saturating_add(1));
        let due = std::mem::replace(&mut led.staged, later);
        for (_, staged) in due {
            inner.apply_staged(partition, staged);
        }
    }

    /// The bytes stored offsets take now, and how many more they would take after `offsets`
    /// were committed for `group` (0 when they would take fewer).
    pub fn growth(&self, group: &str, offsets: &[Change]) -> (usize, usize) {
        let inner = self.inner.lock();
        let stored = inner.groups.get(group);
        let (mut added, mut removed) = (0usize, 0usize);
        for (tp, c) in offsets {
            if let Some(c) = c {
                added += entry_bytes(group, tp, c);
            }
            if let Some(old) = stored.and_then(|g| g.offsets.get(tp)) {
                removed += entry_bytes(group, tp, old);
            }
        }
        (inner.stored_bytes, added.saturating_sub(removed))
    }

    pub fn all(&self, group: &str) -> BTreeMap<Tp, Committed> {
        self.inner
            .lock()
            .groups
            .get(group)
            .map(|g| g.offsets.clone())
            .unwrap_or_default()
    }

    /// Whether `group` has any committed offset.
    pub fn has_offsets(&self, group: &str) -> bool {
        self.inner
            .lock()
            .groups
            .get(group)
            .is_some_and(|g| !g.offsets.is_empty())
    }

    pub fn groups(&self) -> Vec<String> {
        self.inner.lock().groups.keys().cloned().collect()
    }

    /// Groups whose last commit is older than `retention` (the caller checks they are empty).
    pub fn idle_groups(&self, retention: Duration) -> Vec<String> {
        let cutoff =
            now_ms().saturating_sub(i64::try_from(retention.as_millis()).unwrap_or(i64::MAX));
        self.inner
            .lock()
            .groups
            .iter()
            .filter(|(_, g)| g.last_commit_ms < cutoff)
            .map(|(name, _)| name.clone())
            .collect()
    }
}

fn encode_key(group: &str, topic: &str, partition: u32) -> Vec<u8> {
    serde_json::to_vec(&Key {
        g: group.into(),
        t: topic.into(),
        p: partition,
    })
    .expect("a struct of strings and integers serializes")
}

/// The batch recording `changes` to `group`'s offsets, stamped `now_ms`.
pub fn encode_batch(
    group: &str,
    changes: &[Change],
    now_ms: i64,
) -> Result<Bytes, tinymq_protocol::batch::BatchError> {
    encode_commit(group, changes, None, now_ms)
}

/// [`encode_batch`] for offsets committed in the transaction of a producer (id, epoch), when
/// given.
pub fn encode_commit(
    group: &str,
    changes: &[Change],
    producer: Option<(i64, i16)>,
    now_ms: i64,
) -> Result<Bytes, tinymq_protocol::batch::BatchError> {
    let records: Vec<(Vec<u8>, Option<Vec<u8>>)> = changes
        .iter()
        .map(|((t, p), c)| {
            let value = c.as_ref().map(|c| {
                serde_json::to_vec(&Value {
                    o: c.offset,
                    m: c.metadata.clone(),
                    x: producer.map(|p| p.0),
                    e: producer.map(|p| p.1),
                })
                .expect("a struct of strings and integers serializes")
            });
            (encode_key(group, t, *p), value)
        })
        .collect();
    let mut builder = BatchBuilder::new(Compression::None, ProducerStamp::NONE);
    for (key, value) in &records {
        builder.push(&RecordInput {
            timestamp_ms: now_ms,
            key: Some(key),
            value: value.as_deref(),
            headers: &[],
        });
    }
    builder.build()
}

/// Replays one offsets partition's log, from its start to its end, into the offsets of its
/// groups (the last record per key wins). Blocks.
pub fn read_log(log: &PartitionLog) -> Result<LoadedOffsets, LogError> {
    read_log_with_pending(log, 0).map(|(groups, _)| groups)
}

/// [`read_log`] of offsets partition `partition`, with transactional offsets: a
/// TxnOffsetCommit counts once its producer's COMMIT marker follows, and what no marker
/// resolved yet is returned pending.
pub fn read_log_with_pending(
    log: &PartitionLog,
    partition: u32,
) -> Result<(LoadedOffsets, PendingTxnOffsets), LogError> {
    let mut groups = LoadedOffsets::new();
    let mut pending = PendingTxnOffsets::default();
    for_each_batch(log, "offsets", |batch| {
        if let Some(commit) = super::txn_offsets::marker_commits(&batch) {
            for c in pending.take(batch.producer_id(), partition) {
                if commit && c.producer_epoch == batch.producer_epoch() {
                    apply_loaded(&mut groups, c);
                }
            }
            return Ok(());
        }
        for record in batch.records(LOAD_READ_BYTES)? {
            replay(
                &mut groups,
                &mut pending,
                partition,
                record.key,
                record.value,
                record.timestamp_ms,
            );
        }
        Ok(())
    })?;
    Ok((groups, pending))
}

/// Calls `each` with every batch of `log`, from its start to its end, read in chunks of
/// [`LOAD_READ_BYTES`]: the replay of an internal partition (offsets or transaction states,
/// named by `what` in a log line) when its leader loads it. Blocks.
pub(crate) fn for_each_batch(
    log: &PartitionLog,
    what: &str,
    mut each: impl FnMut(tinymq_protocol::batch::RecordBatch) -> Result<(), LogError>,
) -> Result<(), LogError> {
    let mut offset = log.log_start_offset();
    let end = log.log_end_offset();
    while offset < end {
        let read = log.read(offset, LOAD_READ_BYTES, None)?;
        if read.records.is_empty() {
            break;
        }
        let started_at = offset;
        for batch in BatchIter::new(read.records) {
            let batch = batch?;
            offset = batch.next_offset().max(offset);
            each(batch)?;
        }
        if offset <= started_at {
            tracing::warn!(offset, what, "load made no progress; stopping");
            break;
        }
    }
    Ok(())
}

/// A resolved transactional commit into the loaded offsets.
fn apply_loaded(groups: &mut LoadedOffsets, c: PendingCommit) {
    for (tp, value) in c.changes {
        let g = groups.entry(c.group.clone()).or_default();
        match value {
            Some(v) => {
                g.offsets.insert(tp, v);
            }
            None => {
                g.offsets.remove(&tp);
            }
        }
        g.last_commit_ms = g.last_commit_ms.max(c.timestamp_ms);
    }
    groups.retain(|_, g| !g.offsets.is_empty());
}

fn replay(
    groups: &mut LoadedOffsets,
    pending: &mut PendingTxnOffsets,
    partition: u32,
    key: Option<Bytes>,
    value: Option<Bytes>,
    timestamp_ms: i64,
) {
    let Some(Ok(key)) = key.map(|k| serde_json::from_slice::<Key>(&k)) else {
        tracing::warn!("skipping an unreadable offsets record");
        return;
    };
    let tp = (key.t, key.p);
    match value.map(|v| serde_json::from_slice::<Value>(&v)) {
        Some(Ok(Value {
            o,
            m,
            x: Some(producer_id),
            e,
        })) => {
            let commit = PendingCommit {
                partition,
                producer_epoch: e.unwrap_or(-1),
                group: key.g,
                changes: vec![(
                    tp,
                    Some(Committed {
                        offset: o,
                        metadata: m,
                    }),
                )],
                timestamp_ms,
            };
            pending.add(producer_id, commit);
        }
        Some(Ok(v)) => {
            let g = groups.entry(key.g).or_default();
            g.offsets.insert(
                tp,
                Committed {
                    offset: v.o,
                    metadata: v.m,
                },
            );
            g.last_commit_ms = g.last_commit_ms.max(timestamp_ms);
        }
        None => {
            if let Some(g) = groups.get_mut(&key.g) {
                g.offsets.remove(&tp);
                if g.offsets.is_empty() {
                    groups.remove(&key.g);
                }
            }
        }
        Some(Err(_)) => tracing::warn!("skipping an unreadable offsets value"),
    }
}

#[cfg(test)]
mod tests;
