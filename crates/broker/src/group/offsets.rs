//! Committed offsets, stored durably in an internal log-backed topic and served from memory.
//!
//! The topic `__consumer_offsets` has [`OFFSETS_PARTITIONS`] partitions; a group's commits go
//! to partition `murmur2(group) % OFFSETS_PARTITIONS`, whose leader is the group's coordinator.
//! Each commit is one record per partition: key `{"g":group,"t":topic,"p":partition}`, value
//! `{"o":offset,"m":metadata}`, or no value (a tombstone) when the offset is deleted. On start
//! every record is read back, the last one per key winning. Partitions use flush `always`: a
//! commit is acknowledged only once it is on disk.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tinymq_log::{FlushPolicy, LogConfig, LogError, PartitionLog};
use tinymq_protocol::batch::{BatchBuilder, BatchIter, Compression, ProducerStamp, RecordInput};

use super::assignment::Tp;

/// Name of the internal topic (user topics may not start with `__`).
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";
pub const OFFSETS_PARTITIONS: u32 = 4;
/// Bytes read at a time when loading the offsets log.
const LOAD_READ_BYTES: usize = 8 << 20;

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
}

/// A committed offset and its metadata string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub offset: i64,
    pub metadata: String,
}

impl Committed {
    pub fn to_wire(self, (topic, partition): Tp) -> tinymq_protocol::messages::CommittedOffset {
        tinymq_protocol::messages::CommittedOffset {
            topic,
            partition,
            offset: self.offset,
            metadata: self.metadata,
            error: None,
        }
    }
}

#[derive(Debug, Default)]
struct GroupOffsets {
    offsets: BTreeMap<Tp, Committed>,
    last_commit_ms: i64,
}

#[derive(Debug)]
pub struct OffsetStore {
    logs: Vec<PartitionLog>,
    groups: Mutex<HashMap<String, GroupOffsets>>,
    /// Bytes the stored offsets take by [`entry_bytes`], kept with every change under the
    /// `groups` lock, so that a commit's growth is checked without walking every group.
    stored_bytes: std::sync::atomic::AtomicUsize,
}

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

impl OffsetStore {
    /// Opens (recovering) the offsets partitions under `data_dir` and loads every commit.
    pub fn open(data_dir: &Path) -> Result<OffsetStore, LogError> {
        let config = LogConfig {
            flush: FlushPolicy::Always,
            segment_bytes: 64 << 20,
            // One commit is one batch: room for `COMMIT_OFFSETS_MAX` offsets with full metadata.
            batch_bytes_max: 8 << 20,
            ..LogConfig::default()
        };
        let mut logs = Vec::new();
        let mut groups: HashMap<String, GroupOffsets> = HashMap::new();
        for p in 0..OFFSETS_PARTITIONS {
            let dir = data_dir.join(format!("{OFFSETS_TOPIC}-{p}"));
            let (log, _) = PartitionLog::open(&dir, config.clone())?;
            load(&log, &mut groups)?;
            logs.push(log);
        }
        let stored: usize = groups.iter().map(|(n, g)| group_bytes(n, g)).sum();
        Ok(OffsetStore {
            logs,
            groups: Mutex::new(groups),
            stored_bytes: stored.into(),
        })
    }

    /// Durably records `offsets` for `group` (blocks until fsynced), then serves them.
    pub fn commit(&self, group: &str, offsets: &[(Tp, Committed)]) -> Result<(), LogError> {
        if offsets.is_empty() {
            return Ok(());
        }
        let records: Vec<(Vec<u8>, Option<Vec<u8>>)> = offsets
            .iter()
            .map(|((t, p), c)| {
                (
                    encode_key(group, t, *p),
                    Some(
                        serde_json::to_vec(&Value {
                            o: c.offset,
                            m: c.metadata.clone(),
                        })
                        .expect("serializable"),
                    ),
                )
            })
            .collect();
        self.append(group, &records)?;
        let mut groups = self.groups.lock();
        let entry = groups.entry(group.to_string()).or_default();
        for (tp, c) in offsets {
            let added = entry_bytes(group, tp, c);
            let removed = entry
                .offsets
                .insert(tp.clone(), c.clone())
                .map_or(0, |old| entry_bytes(group, tp, &old));
            self.stored_bytes.fetch_add(added, Ordering::Relaxed);
            self.stored_bytes.fetch_sub(removed, Ordering::Relaxed);
        }
        entry.last_commit_ms = now_ms();
        Ok(())
    }

    /// Deletes every offset of `group` (tombstones), returning how many were removed.
    pub fn delete_group(&self, group: &str) -> Result<usize, LogError> {
        let keys: Vec<Tp> = self
            .groups
            .lock()
            .get(group)
            .map(|g| g.offsets.keys().cloned().collect())
            .unwrap_or_default();
        let records: Vec<(Vec<u8>, Option<Vec<u8>>)> = keys
            .iter()
            .map(|(t, p)| (encode_key(group, t, *p), None))
            .collect();
        if !records.is_empty() {
            self.append(group, &records)?;
        }
        let mut groups = self.groups.lock();
        if let Some(removed) = groups.remove(group) {
            self.stored_bytes
                .fetch_sub(group_bytes(group, &removed), Ordering::Relaxed);
        }
        Ok(keys.len())
    }

    fn append(&self, group: &str, records: &[(Vec<u8>, Option<Vec<u8>>)]) -> Result<(), LogError> {
        let mut builder = BatchBuilder::new(Compression::None, ProducerStamp::NONE);
        let now = now_ms();
        for (key, value) in records {
            builder.push(&RecordInput {
                timestamp_ms: now,
                key: Some(key),
                value: value.as_deref(),
                headers: &[],
            });
        }
        let mut batch = builder.build()?.to_vec();
        self.logs[partition_for_group(group) as usize].append(&mut batch, 0)?;
        Ok(())
    }

    /// The bytes stored offsets take now, and how many more they would take after `offsets`
    /// were committed for `group` (0 when they would take fewer).
    pub fn growth(&self, group: &str, offsets: &[(Tp, Committed)]) -> (usize, usize) {
        let groups = self.groups.lock();
        let stored = groups.get(group);
        let (mut added, mut removed) = (0usize, 0usize);
        for (tp, c) in offsets {
            added += entry_bytes(group, tp, c);
            if let Some(old) = stored.and_then(|g| g.offsets.get(tp)) {
                removed += entry_bytes(group, tp, old);
            }
        }
        let now = self.stored_bytes.load(Ordering::Relaxed);
        (now, added.saturating_sub(removed))
    }

    pub fn committed(&self, group: &str, tp: &Tp) -> Option<Committed> {
        self.groups.lock().get(group)?.offsets.get(tp).cloned()
    }

    pub fn all(&self, group: &str) -> BTreeMap<Tp, Committed> {
        self.groups
            .lock()
            .get(group)
            .map(|g| g.offsets.clone())
            .unwrap_or_default()
    }

    /// Whether `group` has any committed offset.
    pub fn has_offsets(&self, group: &str) -> bool {
        self.groups
            .lock()
            .get(group)
            .is_some_and(|g| !g.offsets.is_empty())
    }

    pub fn groups(&self) -> Vec<String> {
        self.groups.lock().keys().cloned().collect()
    }

    /// Groups whose last commit is older than `retention` (the caller checks they are empty).
    pub fn idle_groups(&self, retention: Duration) -> Vec<String> {
        let cutoff = now_ms() - retention.as_millis() as i64;
        self.groups
            .lock()
            .iter()
            .filter(|(_, g)| g.last_commit_ms < cutoff)
            .map(|(name, _)| name.clone())
            .collect()
    }

    pub fn close(&self) -> Result<(), LogError> {
        for log in &self.logs {
            log.close()?;
        }
        Ok(())
    }
}

fn encode_key(group: &str, topic: &str, partition: u32) -> Vec<u8> {
    serde_json::to_vec(&Key {
        g: group.into(),
        t: topic.into(),
        p: partition,
    })
    .expect("serializable")
}

/// Replays one offsets partition into `groups`.
fn load(log: &PartitionLog, groups: &mut HashMap<String, GroupOffsets>) -> Result<(), LogError> {
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let read = log.read(offset, LOAD_READ_BYTES, None)?;
        if read.records.is_empty() {
            break;
        }
        for batch in BatchIter::new(read.records) {
            let batch = batch?;
            offset = batch.next_offset();
            for record in batch.records(LOAD_READ_BYTES)? {
                apply(groups, record.key, record.value, record.timestamp_ms);
            }
        }
    }
    Ok(())
}

fn apply(
    groups: &mut HashMap<String, GroupOffsets>,
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
mod tests {
    use super::*;

    #[test]
    fn commits_survive_reopening_and_deletes_too() {
        let tmp = tempfile::tempdir().unwrap();
        let store = OffsetStore::open(tmp.path()).unwrap();
        let c = |o| Committed {
            offset: o,
            metadata: "m".into(),
        };
        store
            .commit("g1", &[(("t".into(), 0), c(5)), (("t".into(), 1), c(7))])
            .unwrap();
        store.commit("g1", &[(("t".into(), 0), c(9))]).unwrap();
        store.commit("g2", &[(("t".into(), 0), c(1))]).unwrap();
        store.delete_group("g2").unwrap();
        drop(store);
        let store = OffsetStore::open(tmp.path()).unwrap();
        assert_eq!(store.committed("g1", &("t".into(), 0)), Some(c(9)));
        assert_eq!(store.committed("g1", &("t".into(), 1)), Some(c(7)));
        assert_eq!(store.committed("g2", &("t".into(), 0)), None);
        assert_eq!(store.groups(), vec!["g1".to_string()]);
    }
}
