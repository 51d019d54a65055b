//! The cleaner against a model: after any sequence of appends and passes, every record read
//! is one that was appended, at its offset; the latest record of every key is there (a
//! tombstone only until `delete_retention` after it was cleaned); the cleanable part holds
//! each key once; nothing at or above the bound a pass was given changes; and reopening the
//! log (recovery, with its rule that offsets follow on) reads the same records.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use proptest::prelude::*;
use tinymq_protocol::batch::{BatchBuilder, BatchIter, Compression, ProducerStamp, RecordInput};

use crate::fault::FaultyStorage;
use crate::tests::{open_at, T0};
use crate::{CleanLimits, CleanupPolicy, CompactionConfig, LogConfig, ManualClock, PartitionLog};

/// One record: key number, and value (`None` = tombstone).
type Op = (u8, Option<u16>);

fn config(delete_retention: Duration) -> LogConfig {
    LogConfig {
        segment_bytes: 1024,
        index_interval_bytes: 128,
        batch_bytes_max: 1024,
        cleanup: CleanupPolicy::Compact,
        compaction: CompactionConfig {
            delete_retention,
            ..CompactionConfig::default()
        },
        ..LogConfig::default()
    }
}

fn batch(records: &[Op], compression: Compression, ts: i64) -> BytesMut {
    let mut builder = BatchBuilder::new(compression, ProducerStamp::NONE);
    for (key, value) in records {
        let key = format!("key-{key}");
        let value = value.map(|v| format!("value-{v}"));
        builder.push(&RecordInput {
            timestamp_ms: ts,
            key: Some(key.as_bytes()),
            value: value.as_deref().map(str::as_bytes),
            headers: &[],
        });
    }
    BytesMut::from(&builder.build().unwrap()[..])
}

/// Every record in the log as (offset, key, value), read from its start as a consumer does
/// (a batch's end moves the position on, so gaps and empty batches are crossed).
pub(crate) fn records(log: &PartitionLog) -> Vec<(i64, String, Option<String>)> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let read = log.read(offset, 1 << 20, None).unwrap();
        assert!(!read.records.is_empty(), "a read at {offset} returns data");
        for batch in BatchIter::new(read.records) {
            let batch = batch.unwrap();
            for r in batch.records(1 << 20).unwrap() {
                if r.offset >= offset {
                    let text =
                        |b: Option<bytes::Bytes>| b.map(|b| String::from_utf8(b.to_vec()).unwrap());
                    out.push((r.offset, text(r.key).unwrap(), text(r.value)));
                }
            }
            offset = offset.max(batch.next_offset());
        }
    }
    out
}

fn clean(log: &PartitionLog, now: i64, bound: i64, map_bytes: usize) -> crate::CleanReport {
    let limits = CleanLimits {
        key_map_bytes_max: map_bytes,
        ..CleanLimits::default()
    };
    log.clean(now, bound, &limits, &mut |_| {}).unwrap()
}

/// Appends `ops` in batches of `per_batch`, returning every record appended.
fn append_all(
    log: &PartitionLog,
    ops: &[Op],
    per_batch: usize,
    compression: Compression,
    appended: &mut BTreeMap<i64, (String, Option<String>)>,
) {
    for chunk in ops.chunks(per_batch) {
        let info = log.append(&mut batch(chunk, compression, T0), 0).unwrap();
        for (i, (key, value)) in chunk.iter().enumerate() {
            appended.insert(
                info.base_offset + i as i64,
                (format!("key-{key}"), value.map(|v| format!("value-{v}"))),
            );
        }
    }
}

fn check_against_model(
    log: &PartitionLog,
    appended: &BTreeMap<i64, (String, Option<String>)>,
    tombstones_may_go: bool,
) {
    let now = records(log);
    for (offset, key, value) in &now {
        assert_eq!(
            appended.get(offset),
            Some(&(key.clone(), value.clone())),
            "record at {offset} is the one appended there"
        );
    }
    let mut latest: BTreeMap<&str, (i64, &Option<String>)> = BTreeMap::new();
    for (offset, (key, value)) in appended {
        latest.insert(key, (*offset, value));
    }
    for (key, (offset, value)) in latest {
        let present = now.iter().any(|(o, _, _)| *o == offset);
        if value.is_some() || !tombstones_may_go {
            assert!(
                present,
                "the latest record of {key} (offset {offset}) is kept"
            );
        }
    }
}

#[test]
fn a_pass_keeps_the_latest_record_of_each_key_at_its_offset() {
    let fs = FaultyStorage::new();
    let clock = Arc::new(ManualClock::new(T0));
    let (log, _) = open_at(&fs, config(Duration::from_secs(3600)), clock);
    let mut appended = BTreeMap::new();
    let ops: Vec<Op> = (0..400u16).map(|i| ((i % 7) as u8, Some(i))).collect();
    append_all(&log, &ops, 4, Compression::None, &mut appended);
    let end = log.log_end_offset();
    let report = clean(&log, T0, end, 1 << 20);
    assert!(
        report.segments_replaced > 1 && report.records_removed > 300,
        "{report:?}"
    );
    check_against_model(&log, &appended, false);
    // Below the active segment each key is there once.
    let active_base = log.state.read().active().base_offset;
    let cleaned: Vec<_> = records(&log)
        .into_iter()
        .filter(|r| r.0 < active_base)
        .collect();
    let mut keys: Vec<_> = cleaned.iter().map(|r| r.1.clone()).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), cleaned.len(), "{cleaned:?}");
    assert_eq!(log.log_end_offset(), end, "the log end never moves");
    // A second pass with nothing new changes nothing.
    let again = clean(&log, T0, end, 1 << 20);
    assert_eq!(
        (again.segments_written, again.bytes_written),
        (0, 0),
        "{again:?}"
    );
}

/// The batches of the log as (base offset, last offset, producer id, record count).
fn batch_headers(log: &PartitionLog) -> Vec<(i64, i64, i64, i32)> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let read = log.read(offset, 1 << 20, None).unwrap();
        for batch in BatchIter::new(read.records) {
            let batch = batch.unwrap();
            if batch.base_offset() >= offset {
                out.push((
                    batch.base_offset(),
                    batch.last_offset(),
                    batch.producer_id(),
                    batch.record_count(),
                ));
            }
            offset = offset.max(batch.next_offset());
        }
    }
    out
}

#[test]
fn a_producers_last_batch_is_kept_empty_when_named_and_dropped_otherwise() {
    for retained in [true, false] {
        let fs = FaultyStorage::new();
        let clock = Arc::new(ManualClock::new(T0));
        let (log, _) = open_at(&fs, config(Duration::from_secs(3600)), clock);
        // Producer 7 writes keys 0..4 in three batches; a later keyless-stamp writer then
        // supersedes every one of them, and fills segments past the bound.
        let mut producer_last = 0;
        for (i, keys) in [[0u8, 1], [2, 3], [0, 1]].iter().enumerate() {
            let stamp = ProducerStamp {
                producer_id: 7,
                producer_epoch: 0,
                base_sequence: 2 * i as i32,
            };
            let mut builder = BatchBuilder::new(Compression::None, stamp);
            for key in keys {
                let key = format!("key-{key}");
                builder.push(&RecordInput {
                    timestamp_ms: T0,
                    key: Some(key.as_bytes()),
                    value: Some(b"p7"),
                    headers: &[],
                });
            }
            let mut bytes = BytesMut::from(&builder.build().unwrap()[..]);
            producer_last = log.append(&mut bytes, 0).unwrap().last_offset;
        }
        let ops: Vec<Op> = (0..200u16).map(|i| ((i % 4) as u8, Some(i))).collect();
        append_all(&log, &ops, 4, Compression::None, &mut BTreeMap::new());
        let limits = CleanLimits {
            key_map_bytes_max: 1 << 20,
            retained_batch_ends: if retained {
                [producer_last].into_iter().collect()
            } else {
                Default::default()
            },
        };
        let end = log.log_end_offset();
        log.clean(T0, end, &limits, &mut |_| {}).unwrap();
        let of_producer: Vec<_> = batch_headers(&log)
            .into_iter()
            .filter(|b| b.2 == 7)
            .collect();
        if retained {
            assert_eq!(
                of_producer,
                [(producer_last - 1, producer_last, 7, 0)],
                "only the last batch of producer 7 is kept, with its offsets, emptied"
            );
            let kept_records = records(&log);
            assert!(
                kept_records.iter().all(|r| r.0 != producer_last),
                "its superseded records are gone"
            );
        } else {
            assert!(of_producer.is_empty(), "{of_producer:?}");
        }
    }
}

#[test]
fn tombstones_go_only_after_delete_retention_from_their_first_clean() {
    let fs = FaultyStorage::new();
    let clock = Arc::new(ManualClock::new(T0));
    let (log, _) = open_at(&fs, config(Duration::from_secs(60)), clock);
    let mut appended = BTreeMap::new();
    let mut ops: Vec<Op> = (0..40u16).map(|i| ((i % 4) as u8, Some(i))).collect();
    ops.push((1, None));
    ops.extend((0..200u16).map(|i| (9, Some(i))));
    append_all(&log, &ops, 1, Compression::Lz4, &mut appended);
    let end = log.log_end_offset();
    clean(&log, T0, end, 1 << 20);
    let tombstone = |log: &PartitionLog| {
        records(log)
            .iter()
            .any(|(_, k, v)| k == "key-1" && v.is_none())
    };
    assert!(tombstone(&log), "kept by its first clean");
    clean(&log, T0 + 59_000, end, 1 << 20);
    assert!(tombstone(&log), "kept within delete_retention");
    let report = clean(&log, T0 + 61_000, end, 1 << 20);
    assert!(
        !tombstone(&log),
        "removed after delete_retention: {report:?}"
    );
    assert_eq!(report.tombstones_removed, 1);
    assert!(
        records(&log).iter().all(|(_, k, _)| k != "key-1"),
        "key-1 is gone"
    );
    check_against_model(&log, &appended, true);
}

#[test]
fn nothing_at_or_above_the_bound_is_touched_and_reopening_keeps_the_cleaned_log() {
    let fs = FaultyStorage::new();
    let clock = Arc::new(ManualClock::new(T0));
    let (log, _) = open_at(&fs, config(Duration::ZERO), clock.clone());
    let mut appended = BTreeMap::new();
    let ops: Vec<Op> = (0..300u16).map(|i| ((i % 3) as u8, Some(i))).collect();
    append_all(&log, &ops, 3, Compression::Zstd, &mut appended);
    let bound = 150;
    let above = |log: &PartitionLog| -> Vec<_> {
        records(log).into_iter().filter(|r| r.0 >= bound).collect()
    };
    let untouched = above(&log);
    clean(&log, T0, bound, 1 << 20);
    assert_eq!(above(&log), untouched);
    let cleaned = records(&log);
    log.close().unwrap();
    let (reopened, report) = open_at(&fs, config(Duration::ZERO), clock);
    assert_eq!(report.truncations, vec![]);
    assert_eq!(records(&reopened), cleaned);
    check_against_model(&reopened, &appended, true);
}

#[test]
fn a_small_key_map_cleans_in_several_passes() {
    let fs = FaultyStorage::new();
    let clock = Arc::new(ManualClock::new(T0));
    let (log, _) = open_at(&fs, config(Duration::ZERO), clock);
    let mut appended = BTreeMap::new();
    // More distinct keys than the smallest map holds, each written twice.
    let keys = (crate::KEY_MAP_BYTES_MIN / crate::KEY_MAP_ENTRY_BYTES) as u32 + 2_000;
    let mut builder_ops = Vec::new();
    for round in 0..2u16 {
        for k in 0..keys {
            builder_ops.push((k, round));
        }
    }
    let mut cfg = config(Duration::ZERO);
    cfg.segment_bytes = 64 << 10;
    cfg.batch_bytes_max = 64 << 10;
    log.set_config(cfg).unwrap();
    for chunk in builder_ops.chunks(500) {
        let mut b = BatchBuilder::new(Compression::Lz4, ProducerStamp::NONE);
        for (k, round) in chunk {
            let (key, value) = (format!("k{k}"), format!("{round}"));
            b.push(&RecordInput {
                timestamp_ms: T0,
                key: Some(key.as_bytes()),
                value: Some(value.as_bytes()),
                headers: &[],
            });
        }
        let info = log
            .append(&mut BytesMut::from(&b.build().unwrap()[..]), 0)
            .unwrap();
        for (i, (k, round)) in chunk.iter().enumerate() {
            appended.insert(
                info.base_offset + i as i64,
                (format!("k{k}"), Some(round.to_string())),
            );
        }
    }
    // Filler until every record above is in a segment before the active one.
    let written = log.log_end_offset();
    while log.state.read().active().base_offset < written {
        log.append(&mut batch(&[(0, Some(0)); 20], Compression::None, T0), 0)
            .unwrap();
    }
    let bound = log.log_end_offset();
    let first = clean(&log, T0, bound, crate::KEY_MAP_BYTES_MIN);
    assert!(first.key_map_full, "{first:?}");
    let mut passes = 1;
    let mut last = first;
    while last.key_map_full {
        let next = clean(&log, T0, bound, crate::KEY_MAP_BYTES_MIN);
        assert!(
            next.first_dirty > last.first_dirty,
            "the passes progress: {next:?}"
        );
        last = next;
        passes += 1;
    }
    assert!(passes >= 2);
    // The map covered the second round's keys only in part at first: one more pass with
    // the whole second round mapped leaves one record per key.
    clean(&log, T0, bound, 1 << 24);
    let last_round: Vec<_> = records(&log)
        .into_iter()
        .filter(|(_, k, _)| !k.starts_with("key-"))
        .collect();
    assert_eq!(last_round.len(), keys as usize, "one record per key");
    assert!(last_round.iter().all(|(_, _, v)| v.as_deref() == Some("1")));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn the_cleaner_agrees_with_the_model(
        steps in proptest::collection::vec(
            (proptest::collection::vec((0u8..6, proptest::option::weighted(0.85, 0u16..1000)), 1..40),
             1usize..6, any::<bool>(), 0u8..3),
            1..12),
        retention_zero in any::<bool>(),
    ) {
        let fs = FaultyStorage::new();
        let clock = Arc::new(ManualClock::new(T0));
        let retention = if retention_zero { Duration::ZERO } else { Duration::from_secs(3600) };
        let (log, _) = open_at(&fs, config(retention), clock.clone());
        let mut appended = BTreeMap::new();
        let mut now = T0;
        for (ops, per_batch, compress, clean_how) in &steps {
            let compression = if *compress { Compression::Lz4 } else { Compression::None };
            append_all(&log, ops, *per_batch, compression, &mut appended);
            now += 1_000;
            match clean_how {
                0 => {}
                1 => { clean(&log, now, log.log_end_offset(), 1 << 20); }
                _ => {
                    let bound = log.log_end_offset() / 2;
                    let above: Vec<_> = records(&log).into_iter().filter(|r| r.0 >= bound).collect();
                    clean(&log, now, bound, 1 << 20);
                    let after: Vec<_> = records(&log).into_iter().filter(|r| r.0 >= bound).collect();
                    prop_assert_eq!(above, after);
                }
            }
            check_against_model(&log, &appended, retention_zero);
        }
        let cleaned = records(&log);
        log.close().unwrap();
        let (reopened, report) = open_at(&fs, config(retention), clock);
        prop_assert!(report.truncations.is_empty());
        prop_assert_eq!(records(&reopened), cleaned);
    }
}

/// A process that dies at its `n`th change to the directory (create, remove, rename, fsync of
/// the directory): that call and every later one fail, as if the process were gone.
#[derive(Debug)]
struct DiesAt {
    inner: FaultyStorage,
    left: std::sync::atomic::AtomicI64,
}

impl DiesAt {
    fn step(&self) -> std::io::Result<()> {
        use std::sync::atomic::Ordering;
        if self.left.fetch_sub(1, Ordering::SeqCst) <= 1 {
            return Err(std::io::Error::other("the process died here"));
        }
        Ok(())
    }
}

impl crate::Storage for DiesAt {
    fn open(
        &self,
        path: &std::path::Path,
        create: bool,
    ) -> std::io::Result<Arc<dyn crate::StorageFile>> {
        if create && !self.inner.exists(path) {
            self.step()?;
        }
        self.inner.open(path, create)
    }
    fn remove(&self, path: &std::path::Path) -> std::io::Result<()> {
        self.step()?;
        self.inner.remove(path)
    }
    fn rename(&self, from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
        self.step()?;
        self.inner.rename(from, to)
    }
    fn exists(&self, path: &std::path::Path) -> bool {
        self.inner.exists(path)
    }
    fn list(&self, dir: &std::path::Path) -> std::io::Result<Vec<std::path::PathBuf>> {
        self.inner.list(dir)
    }
    fn create_dir_all(&self, dir: &std::path::Path) -> std::io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn sync_dir(&self, dir: &std::path::Path) -> std::io::Result<()> {
        self.step()?;
        self.inner.sync_dir(dir)
    }
}

/// A crash at every step of a pass (each file created, removed or renamed, each directory
/// fsync), losing what was not synced: the reopened log is the old one or the cleaned one,
/// never less, and a pass after it finishes the job.
#[test]
fn a_crash_at_any_step_of_a_pass_leaves_the_old_or_the_cleaned_log() {
    let ops: Vec<Op> = (0..240u16).map(|i| ((i % 5) as u8, Some(i))).collect();
    let (mut finished, mut swaps_finished) = (false, 0);
    for n in 1..400 {
        let inner = FaultyStorage::new();
        let dies = Arc::new(DiesAt {
            inner: inner.clone(),
            left: std::sync::atomic::AtomicI64::new(i64::MAX),
        });
        let clock = Arc::new(ManualClock::new(T0));
        let (log, _) = PartitionLog::open_with(
            &crate::tests::dir(),
            config(Duration::ZERO),
            dies.clone(),
            clock.clone(),
        )
        .unwrap();
        let mut appended = BTreeMap::new();
        append_all(&log, &ops, 2, Compression::None, &mut appended);
        let before = records(&log);
        dies.left.store(n, std::sync::atomic::Ordering::SeqCst);
        let end = log.log_end_offset();
        let outcome = log.clean(T0, end, &CleanLimits::default(), &mut |_| {});
        drop(log);
        inner.crash(crate::fault::CrashMode::LoseUnsynced);
        let (reopened, report) = open_at(&inner, config(Duration::ZERO), clock);
        assert!(report.truncations.is_empty(), "step {n}: {report:?}");
        swaps_finished += report.swaps_finished;
        let after = records(&reopened);
        check_against_model(&reopened, &appended, true);
        if outcome.is_ok() {
            finished = true;
            assert!(after.len() < before.len());
            break;
        }
        reopened
            .clean(T0, end, &CleanLimits::default(), &mut |_| {})
            .unwrap();
        check_against_model(&reopened, &appended, true);
        let active = reopened.state.read().active().base_offset;
        let cleaned: Vec<_> = records(&reopened)
            .into_iter()
            .filter(|r| r.0 < active)
            .collect();
        assert!(
            cleaned.len() <= 5,
            "step {n}: one record per key after a pass: {cleaned:?}"
        );
    }
    assert!(finished, "a pass with no crash finishes");
    assert!(
        swaps_finished > 0,
        "some crashes fell between a swap's decision and its end"
    );
}

/// Replicas clean their own copies: a follower that copied its leader byte for byte and then
/// cleans with the same bound ends with the same records at the same offsets, and a follower
/// that starts from nothing after the leader cleaned copies the gaps and reads the same.
#[test]
fn replicas_cleaning_on_their_own_end_equal_and_a_late_follower_copies_the_gaps() {
    let clock = Arc::new(ManualClock::new(T0));
    let leader_fs = FaultyStorage::new();
    let (leader, _) = open_at(&leader_fs, config(Duration::ZERO), clock.clone());
    let mut appended = BTreeMap::new();
    let ops: Vec<Op> = (0..500u16)
        .map(|i| ((i % 9) as u8, (i % 11 != 0).then_some(i)))
        .collect();
    append_all(&leader, &ops, 3, Compression::Lz4, &mut appended);
    let fetched = |log: &PartitionLog, from: i64| -> Vec<u8> {
        let mut bytes = Vec::new();
        let mut offset = from;
        while offset < log.log_end_offset() {
            let read = log.read(offset, 1 << 16, None).unwrap();
            for batch in BatchIter::new(read.records.clone()) {
                offset = batch.unwrap().next_offset();
            }
            bytes.extend_from_slice(&read.records);
        }
        bytes
    };
    let follower_fs = FaultyStorage::new();
    let (follower, _) = open_at(&follower_fs, config(Duration::ZERO), clock.clone());
    follower.append_replicated(&fetched(&leader, 0)).unwrap();
    let bound = leader.log_end_offset();
    clean(&leader, T0, bound, 1 << 20);
    clean(&follower, T0, bound, 1 << 20);
    assert_eq!(
        records(&follower),
        records(&leader),
        "same records at the same offsets"
    );
    check_against_model(&leader, &appended, true);

    let late_fs = FaultyStorage::new();
    let (late, _) = open_at(&late_fs, config(Duration::ZERO), clock.clone());
    late.append_replicated(&fetched(&leader, 0)).unwrap();
    assert_eq!(records(&late), records(&leader));
    assert_eq!(late.log_end_offset(), leader.log_end_offset());
    late.close().unwrap();
    let (reopened, report) = open_at(&late_fs, config(Duration::ZERO), clock);
    assert!(report.truncations.is_empty(), "{report:?}");
    assert_eq!(records(&reopened), records(&leader));
}
