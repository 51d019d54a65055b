//! Behaviour of the whole log over the fault-injecting storage: appends, reads, rolling,
//! recovery from torn and corrupt tails, lost unsynced writes, EIO and ENOSPC, truncation and
//! retention.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tinymq_protocol::batch::{BatchBuilder, BatchIter, Compression, ProducerStamp, RecordInput};

use crate::fault::{CrashMode, Faults, FaultyStorage};
use crate::segment::{segment_path, LOG_SUFFIX};
use crate::{Clock, FlushPolicy, LogConfig, LogError, ManualClock, PartitionLog, Storage};

pub(crate) const T0: i64 = 1_700_000_000_000;

pub(crate) fn dir() -> PathBuf {
    PathBuf::from("/data/topic-0")
}

/// A batch of `records` records whose values name the batch, with timestamps from `ts`.
pub(crate) fn batch(id: u32, records: u32, ts: i64) -> BytesMut {
    let mut builder = BatchBuilder::new(Compression::None, ProducerStamp::NONE);
    for r in 0..records {
        let value = format!("batch-{id}-record-{r}");
        builder.push(&RecordInput {
            timestamp_ms: ts + i64::from(r),
            key: None,
            value: Some(value.as_bytes()),
            headers: &[],
        });
    }
    BytesMut::from(&builder.build().unwrap()[..])
}

pub(crate) fn small_segments() -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        index_interval_bytes: 256,
        batch_bytes_max: 4096,
        ..LogConfig::default()
    }
}

pub(crate) fn open(fs: &FaultyStorage, config: LogConfig) -> (PartitionLog, crate::RecoveryReport) {
    open_at(fs, config, Arc::new(ManualClock::new(T0)))
}

pub(crate) fn open_at(
    fs: &FaultyStorage,
    config: LogConfig,
    clock: Arc<dyn Clock>,
) -> (PartitionLog, crate::RecoveryReport) {
    PartitionLog::open_with(&dir(), config, Arc::new(fs.clone()), clock).unwrap()
}

/// Every record value in the log, in order, read batch by batch from the start.
pub(crate) fn all_values(log: &PartitionLog) -> Vec<String> {
    let mut values = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let read = log.read(offset, 1 << 20, None).unwrap();
        assert!(
            !read.records.is_empty(),
            "read at {offset} below the end returns data"
        );
        for batch in BatchIter::new(read.records) {
            for record in batch.unwrap().records(1 << 20).unwrap() {
                // A read from inside a batch returns the whole batch: skip what is below.
                if record.offset >= offset {
                    values.push(String::from_utf8(record.value.unwrap().to_vec()).unwrap());
                    offset = record.offset + 1;
                }
            }
        }
    }
    values
}

pub(crate) fn expected_values(batches: impl IntoIterator<Item = (u32, u32)>) -> Vec<String> {
    batches
        .into_iter()
        .flat_map(|(id, n)| (0..n).map(move |r| format!("batch-{id}-record-{r}")))
        .collect()
}

#[test]
fn append_assigns_offsets_and_reads_return_whole_batches() {
    let fs = FaultyStorage::new();
    let (log, report) = open(&fs, LogConfig::default());
    assert_eq!(report.truncations, vec![]);
    let a = log.append(&mut batch(0, 3, T0), 5).unwrap();
    let b = log.append(&mut batch(1, 2, T0), 5).unwrap();
    assert_eq!((a.base_offset, a.last_offset), (0, 2));
    assert_eq!((b.base_offset, b.last_offset, b.log_end_offset), (3, 4, 5));
    assert_eq!(
        log.durable_offset(),
        5,
        "always: acknowledged means fsynced"
    );

    // Reading from the middle of the first batch returns it whole.
    let read = log.read(1, 1 << 20, None).unwrap();
    let batches: Vec<_> = BatchIter::new(read.records).map(Result::unwrap).collect();
    assert_eq!(batches.len(), 2);
    assert_eq!(batches[0].base_offset(), 0);
    assert_eq!(batches[0].partition_leader_epoch(), 5);
    assert_eq!(batches[1].base_offset(), 3);

    // bytes_max smaller than one batch still returns one batch; the limit cuts the rest.
    let one = log.read(0, 1, None).unwrap();
    assert_eq!(BatchIter::new(one.records).count(), 1);
    // An offset limit (high watermark) hides batches that end at or past it.
    let hidden = log.read(3, 1 << 20, Some(3)).unwrap();
    assert!(hidden.records.is_empty());
    // At the end: empty; past it or before the start: out of range.
    assert!(log.read(5, 1 << 20, None).unwrap().records.is_empty());
    assert!(matches!(
        log.read(6, 100, None),
        Err(LogError::OffsetOutOfRange { log_end: 5, .. })
    ));
    assert!(matches!(
        log.read(-1, 100, None),
        Err(LogError::OffsetOutOfRange { .. })
    ));
}

#[test]
fn corrupt_or_oversized_batches_are_refused_and_change_nothing() {
    let fs = FaultyStorage::new();
    let (log, _) = open(&fs, small_segments());
    let mut corrupt = batch(0, 2, T0);
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xFF;
    assert!(matches!(
        log.append(&mut corrupt, 0),
        Err(LogError::InvalidBatch(
            tinymq_protocol::batch::BatchError::CrcMismatch { .. }
        ))
    ));
    let mut huge = batch(1, 300, T0);
    assert!(matches!(
        log.append(&mut huge, 0),
        Err(LogError::BatchTooLarge { .. })
    ));
    let mut torn = batch(2, 2, T0);
    torn.truncate(torn.len() - 3);
    assert!(matches!(
        log.append(&mut torn, 0),
        Err(LogError::InvalidBatch(_))
    ));
    assert!(matches!(
        log.append(&mut [], 0),
        Err(LogError::InvalidBatch(_))
    ));
    assert_eq!(log.log_end_offset(), 0);
    log.append(&mut batch(3, 1, T0), 0).unwrap();
    assert_eq!(all_values(&log), expected_values([(3, 1)]));
}

#[test]
fn segments_roll_by_size_and_reopen_from_their_indexes() {
    let fs = FaultyStorage::new();
    let (log, _) = open(&fs, small_segments());
    let ids: Vec<(u32, u32)> = (0..100).map(|i| (i, 5)).collect();
    for &(id, n) in &ids {
        log.append(&mut batch(id, n, T0 + i64::from(id) * 10), 0)
            .unwrap();
    }
    assert!(log.segment_count() >= 4, "4 KiB segments roll often");
    assert_eq!(all_values(&log), expected_values(ids.clone()));
    let end = log.log_end_offset();
    log.close().unwrap();
    assert!(matches!(
        log.append(&mut batch(99, 1, T0), 0),
        Err(LogError::Closed)
    ));
    drop(log);

    let (log, report) = open(&fs, small_segments());
    assert_eq!(report.truncations, vec![]);
    assert_eq!(
        report.indexes_rebuilt, 0,
        "indexes of rolled segments are trusted"
    );
    assert_eq!(
        report.segments_fully_checked, 1,
        "only the active segment is scanned"
    );
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(all_values(&log), expected_values(ids));
}

#[test]
fn lost_or_garbled_index_files_are_rebuilt() {
    let fs = FaultyStorage::new();
    let (log, _) = open(&fs, small_segments());
    for id in 0..100 {
        log.append(&mut batch(id, 5, T0), 0).unwrap();
    }
    log.close().unwrap();
    drop(log);
    let first_index = segment_path(&dir(), 0, "index");
    fs.remove(&first_index).unwrap();
    let second_base = fs
        .list(&dir())
        .unwrap()
        .iter()
        .filter_map(|p| crate::segment::parse_segment_path(p, LOG_SUFFIX))
        .nth(1)
        .unwrap();
    let second_index = segment_path(&dir(), second_base, "index");
    fs.open(&second_index, false)
        .unwrap()
        .write_all_at(&[0xFF; 5], 0)
        .unwrap();

    let (log, report) = open(&fs, small_segments());
    assert_eq!(report.indexes_rebuilt, 2, "{report:?}");
    assert_eq!(report.truncations, vec![]);
    assert_eq!(all_values(&log), expected_values((0..100).map(|i| (i, 5))));
}

#[test]
fn a_log_cut_at_every_byte_of_its_last_batch_reopens_with_the_batches_before_it() {
    let mut sizes = Vec::new();
    let build = || {
        let fs = FaultyStorage::new();
        let (log, _) = open(&fs, LogConfig::default());
        for id in 0..3 {
            log.append(&mut batch(id, 2, T0), 0).unwrap();
        }
        (fs, log.size_bytes())
    };
    let (_, full_size) = build();
    let last_batch_bytes = batch(2, 2, T0).len() as u64;
    let last_start = full_size - last_batch_bytes;
    for cut in last_start..full_size {
        let (fs, _) = build();
        let log_path = segment_path(&dir(), 0, LOG_SUFFIX);
        fs.open(&log_path, false).unwrap().set_len(cut).unwrap();
        let (log, report) = open(&fs, LogConfig::default());
        assert_eq!(
            log.log_end_offset(),
            4,
            "cut at {cut}: two whole batches remain"
        );
        assert_eq!(all_values(&log), expected_values([(0, 2), (1, 2)]));
        let cut_bytes = cut - last_start;
        assert_eq!(report.bytes_cut(), cut_bytes, "cut at {cut}");
        sizes.push(report.truncations.len());
        // The reopened log appends right after the last whole batch.
        assert_eq!(log.append(&mut batch(7, 1, T0), 0).unwrap().base_offset, 4);
    }
    assert_eq!(
        sizes[0], 0,
        "a cut exactly at a batch boundary needs no truncation"
    );
    assert!(sizes[1..].iter().all(|&n| n == 1));
}

#[test]
fn a_flipped_bit_in_a_middle_batch_cuts_the_log_there() {
    let fs = FaultyStorage::new();
    let (log, _) = open(&fs, LogConfig::default());
    let mut positions = Vec::new();
    for id in 0..5 {
        positions.push(log.size_bytes());
        log.append(&mut batch(id, 2, T0), 0).unwrap();
    }
    drop(log);
    // Flip one bit inside the value of batch 2's first record.
    let log_path = segment_path(&dir(), 0, LOG_SUFFIX);
    let at = positions[2] as usize + 70;
    let byte = fs.contents(&log_path).unwrap()[at];
    fs.poke(&log_path, at, &[byte ^ 0x10]);

    let (log, report) = open(&fs, LogConfig::default());
    // What a user sees: the log ends before the corrupt batch (offsets 0..4 remain), the
    // report (and a WARN log line) names the segment, the byte position and the CRC mismatch,
    // and the next append reuses offset 4.
    assert_eq!(report.truncations.len(), 1);
    let cut = &report.truncations[0];
    assert_eq!(cut.position, positions[2]);
    assert_eq!(cut.next_offset, 4);
    assert!(cut.reason.contains("CRC mismatch"), "{}", cut.reason);
    assert_eq!(all_values(&log), expected_values([(0, 2), (1, 2)]));
    assert_eq!(log.append(&mut batch(9, 1, T0), 0).unwrap().base_offset, 4);
}

#[test]
fn a_cut_in_an_older_segment_deletes_the_later_ones() {
    let fs = FaultyStorage::new();
    let (log, _) = open(&fs, small_segments());
    for id in 0..100 {
        log.append(&mut batch(id, 5, T0), 0).unwrap();
    }
    let segments = log.segment_count();
    assert!(segments > 2);
    drop(log);
    // Garbage after the last batch of the first segment: its tail walk fails.
    let log_path = segment_path(&dir(), 0, LOG_SUFFIX);
    let file = fs.open(&log_path, false).unwrap();
    file.write_all_at(&[0xAB; 40], file.byte_len().unwrap())
        .unwrap();
    file.sync_data().unwrap();
    let (log, report) = open(&fs, small_segments());
    assert_eq!(report.truncations.len(), 1);
    assert_eq!(report.segments_deleted.len(), segments - 1);
    assert_eq!(log.segment_count(), 1);
    let end = log.log_end_offset();
    assert_eq!(all_values(&log).len() as i64, end);
}

#[test]
fn acknowledged_appends_survive_lost_unsynced_writes() {
    for keep in [0usize, 1, 17, 61, 200, 10_000] {
        let fs = FaultyStorage::new();
        let (log, _) = open(&fs, small_segments());
        let mut acked = Vec::new();
        for id in 0..50 {
            log.append(&mut batch(id, 3, T0), 0).unwrap();
            acked.push((id, 3));
        }
        // The next append is written but its fsync fails: it is not acknowledged.
        fs.set_faults(Faults {
            fail_sync: true,
            ..Faults::default()
        });
        assert!(log.append(&mut batch(50, 3, T0), 0).is_err());
        drop(log);
        fs.crash(CrashMode::KeepUnsyncedPrefix(keep));
        fs.set_faults(Faults::default());

        let (log, _) = open(&fs, small_segments());
        let values = all_values(&log);
        let want = expected_values(acked.clone());
        assert_eq!(
            &values[..want.len()],
            &want[..],
            "keep {keep}: acknowledged data intact"
        );
        // The unacknowledged batch is either wholly there or wholly gone.
        let extra = values.len() - want.len();
        assert!(
            extra == 0 || extra == 3,
            "keep {keep}: {extra} extra records"
        );
    }
}

#[test]
fn concurrent_appenders_under_always_lose_nothing_acknowledged_in_a_crash() {
    let fs = FaultyStorage::new();
    let (log, _) = open(&fs, small_segments());
    let log = Arc::new(log);
    let threads: Vec<_> = (0..4u32)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                (0..40u32)
                    .map(|i| {
                        let id = t * 1000 + i;
                        let info = log.append(&mut batch(id, 2, T0), 0).unwrap();
                        (info.base_offset, id)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut acked: Vec<(i64, u32)> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    acked.sort();
    drop(log);
    fs.crash(CrashMode::LoseUnsynced);
    let (log, report) = open(&fs, small_segments());
    assert_eq!(report.truncations, vec![]);
    let want: Vec<String> = expected_values(acked.iter().map(|&(_, id)| (id, 2)));
    assert_eq!(
        all_values(&log),
        want,
        "every acknowledged batch, at its acknowledged offset"
    );
}

#[test]
fn eio_on_fsync_fails_the_append_and_the_log_refuses_writes_until_reopened() {
    let fs = FaultyStorage::new();
    let (log, _) = open(&fs, LogConfig::default());
    log.append(&mut batch(0, 2, T0), 0).unwrap();
    fs.set_faults(Faults {
        fail_sync: true,
        ..Faults::default()
    });
    assert!(matches!(
        log.append(&mut batch(1, 2, T0), 0),
        Err(LogError::Io { .. })
    ));
    fs.set_faults(Faults::default());
    // Even with the disk healthy again the log refuses writes: the kernel may have dropped
    // the pages the failed fsync covered, so only a reopen knows what is on disk.
    let err = log.append(&mut batch(2, 2, T0), 0).unwrap_err();
    assert!(matches!(err, LogError::Failed(_)), "{err}");
    assert_eq!(err.error_code(), tinymq_protocol::ErrorCode::STORAGE_ERROR);
    // Reads keep working.
    assert_eq!(all_values(&log)[..2], expected_values([(0, 2)])[..]);
    drop(log);
    fs.crash(CrashMode::LoseUnsynced);
    let (log, _) = open(&fs, LogConfig::default());
    assert_eq!(all_values(&log), expected_values([(0, 2)]));
    log.append(&mut batch(3, 1, T0), 0).unwrap();
}

#[test]
fn enospc_and_torn_writes_fail_the_append_and_the_log_stays_usable() {
    let fs = FaultyStorage::new();
    let (log, _) = open(&fs, LogConfig::default());
    log.append(&mut batch(0, 2, T0), 0).unwrap();
    fs.set_faults(Faults {
        space_bytes_left: Some(30),
        ..Faults::default()
    });
    let err = log.append(&mut batch(1, 2, T0), 0).unwrap_err();
    assert!(err.to_string().contains("No space left"), "{err}");
    fs.set_faults(Faults {
        torn_next_write_bytes: Some(40),
        ..Faults::default()
    });
    assert!(log.append(&mut batch(2, 2, T0), 0).is_err());
    fs.set_faults(Faults::default());
    // No gap, no garbage: the next append lands right after the last good one.
    assert_eq!(log.append(&mut batch(3, 2, T0), 0).unwrap().base_offset, 2);
    assert_eq!(all_values(&log), expected_values([(0, 2), (3, 2)]));
    drop(log);
    let (log, report) = open(&fs, LogConfig::default());
    assert_eq!(report.truncations, vec![]);
    assert_eq!(all_values(&log), expected_values([(0, 2), (3, 2)]));
}

#[test]
fn offsets_are_found_by_timestamp_across_segments() {
    let fs = FaultyStorage::new();
    let (log, _) = open(&fs, small_segments());
    for id in 0..40u32 {
        // Batch id holds records at T0 + id*100 + 0..5.
        log.append(&mut batch(id, 5, T0 + i64::from(id) * 100), 0)
            .unwrap();
    }
    assert_eq!(log.offset_for_timestamp(0).unwrap(), Some((0, T0)));
    assert_eq!(
        log.offset_for_timestamp(T0 + 1203).unwrap(),
        Some((63, T0 + 1203))
    );
    // Between batches: the first record of the next batch.
    assert_eq!(
        log.offset_for_timestamp(T0 + 1250).unwrap(),
        Some((65, T0 + 1300))
    );
    assert_eq!(log.offset_for_timestamp(T0 + 100_000).unwrap(), None);
}

#[test]
fn the_record_with_the_largest_timestamp_is_found_in_whichever_segment_holds_it() {
    let fs = FaultyStorage::new();
    let (log, _) = open(&fs, small_segments());
    assert_eq!(log.offset_of_max_timestamp().unwrap(), None);
    // Batch 7 holds the largest timestamps (its records at T0 + 10_000 + 0..20); later
    // batches are older, so the answer is in an earlier segment than the active one.
    for id in 0..60u32 {
        let base = if id == 7 {
            T0 + 10_000
        } else {
            T0 + i64::from(id) * 100
        };
        log.append(&mut batch(id, 20, base), 0).unwrap();
    }
    assert!(log.segment_count() > 2, "{} segments", log.segment_count());
    assert_eq!(
        log.offset_of_max_timestamp().unwrap(),
        Some((159, T0 + 10_019))
    );
}

#[test]
fn segments_roll_by_age() {
    let fs = FaultyStorage::new();
    let clock = Arc::new(ManualClock::new(T0));
    let config = LogConfig {
        segment_age_max: Some(Duration::from_secs(60)),
        ..LogConfig::default()
    };
    let (log, _) = open_at(&fs, config, clock.clone());
    log.append(&mut batch(0, 1, T0), 0).unwrap();
    log.append(&mut batch(1, 1, T0), 0).unwrap();
    assert_eq!(log.segment_count(), 1);
    clock.set(T0 + 60_000);
    log.append(&mut batch(2, 1, T0 + 60_000), 0).unwrap();
    assert_eq!(log.segment_count(), 2);
    // Batches with ancient timestamps do not make every write roll: a segment created here
    // rolls by age only its age limit after its creation.
    for id in 3..10 {
        log.append(&mut batch(id, 1, T0 - 1_000_000), 0).unwrap();
    }
    assert_eq!(log.segment_count(), 2, "no roll before the limit");
    clock.set(T0 + 120_000);
    log.append(&mut batch(10, 1, T0 - 1_000_000), 0).unwrap();
    assert_eq!(log.segment_count(), 3);
    // The new segment's first batch is ancient; it still does not roll at once.
    for id in 11..15 {
        log.append(&mut batch(id, 1, T0 - 9_000_000), 0).unwrap();
    }
    assert_eq!(log.segment_count(), 3);
}

#[test]
fn truncation_removes_whole_batches_and_later_segments() {
    let fs = FaultyStorage::new();
    let (log, _) = open(&fs, small_segments());
    for id in 0..40 {
        log.append(&mut batch(id, 5, T0), 0).unwrap();
    }
    // Offset 102 is inside batch 20 (offsets 100..105): the whole batch goes.
    assert_eq!(log.truncate_to(102).unwrap(), 100);
    assert_eq!(log.log_end_offset(), 100);
    assert_eq!(all_values(&log), expected_values((0..20).map(|i| (i, 5))));
    assert_eq!(
        log.append(&mut batch(77, 1, T0), 0).unwrap().base_offset,
        100
    );
    assert_eq!(
        log.truncate_to(1000).unwrap(),
        101,
        "past the end: nothing to do"
    );
    drop(log);
    let (log, report) = open(&fs, small_segments());
    assert_eq!(report.truncations, vec![]);
    assert_eq!(log.log_end_offset(), 101);
    // Below the start: the log restarts empty at the given offset.
    assert_eq!(log.truncate_to(0).unwrap(), 0);
    assert_eq!(log.segment_count(), 1);
    assert_eq!(log.append(&mut batch(5, 1, T0), 0).unwrap().base_offset, 0);
}

#[test]
fn retention_deletes_whole_old_segments_but_never_the_active_one() {
    let fs = FaultyStorage::new();
    let clock = Arc::new(ManualClock::new(T0));
    let config = LogConfig {
        retention_age: Some(Duration::from_secs(3600)),
        retention_bytes: Some(16 * 1024),
        ..small_segments()
    };
    let (log, _) = open_at(&fs, config, clock.clone());
    for id in 0..200u32 {
        log.append(&mut batch(id, 5, T0 + i64::from(id)), 0)
            .unwrap();
    }
    let before = log.size_bytes();
    let report = log.apply_retention().unwrap();
    assert!(report.segments_deleted > 0);
    assert!(
        log.size_bytes() >= 16 * 1024,
        "keeps at least retention_bytes"
    );
    assert!(
        log.size_bytes() - 4096 < 16 * 1024,
        "and not a segment more"
    );
    assert_eq!(before - log.size_bytes(), report.bytes_deleted);
    assert_eq!(log.log_start_offset(), report.log_start_offset);
    assert!(matches!(
        log.read(0, 100, None),
        Err(LogError::OffsetOutOfRange { .. })
    ));

    clock.set(T0 + 3_600_000 + 1_000);
    log.apply_retention().unwrap();
    assert_eq!(
        log.segment_count(),
        1,
        "everything expired but the active segment"
    );
    let end = log.log_end_offset();
    drop(log);
    let (log, _) = open_at(&fs, small_segments(), clock);
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(
        log.log_start_offset(),
        log.read(log.log_start_offset(), 1, None)
            .unwrap()
            .log_start_offset
    );
}

#[test]
fn interval_and_os_policies_acknowledge_before_fsync() {
    for flush in [
        FlushPolicy::Os,
        FlushPolicy::Interval(Duration::from_secs(3600)),
    ] {
        let fs = FaultyStorage::new();
        let config = LogConfig {
            flush,
            ..LogConfig::default()
        };
        let (log, _) = open(&fs, config.clone());
        log.append(&mut batch(0, 2, T0), 0).unwrap();
        assert_eq!(log.durable_offset(), 0, "{flush}: not yet fsynced");
        log.flush().unwrap();
        assert_eq!(log.durable_offset(), 2);
        log.append(&mut batch(1, 2, T0), 0).unwrap();
        drop(log);
        // A power cut loses what was not fsynced: the documented cost of these policies.
        fs.crash(CrashMode::LoseUnsynced);
        let (log, _) = open(&fs, config);
        assert_eq!(all_values(&log), expected_values([(0, 2)]), "{flush}");
    }
}

#[test]
fn stray_files_are_removed_on_open() {
    let fs = FaultyStorage::new();
    let (log, _) = open(&fs, LogConfig::default());
    log.append(&mut batch(0, 1, T0), 0).unwrap();
    drop(log);
    for name in [
        "00000000000000000500.index",
        "x.tmp",
        "00000000000000000000.log.deleted",
    ] {
        fs.open(&dir().join(name), true).unwrap();
    }
    let (log, report) = open(&fs, LogConfig::default());
    assert_eq!(report.stray_files_removed, 3);
    assert_eq!(log.log_end_offset(), 1);
    assert!(!fs.exists(Path::new("/data/topic-0/x.tmp")));
}

#[test]
fn the_real_file_system_round_trips() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t-0");
    let (log, _) = PartitionLog::open(&path, small_segments()).unwrap();
    for id in 0..30 {
        log.append(&mut batch(id, 4, T0), 0).unwrap();
    }
    log.close().unwrap();
    drop(log);
    let (log, report) = PartitionLog::open(&path, small_segments()).unwrap();
    assert_eq!(report.truncations, vec![]);
    assert_eq!(all_values(&log), expected_values((0..30).map(|i| (i, 4))));
    let read = log.read(0, 1 << 20, None).unwrap();
    let first: Bytes = read.records;
    assert!(!first.is_empty());
}

#[test]
fn logs_sharing_a_small_cache_of_open_files_read_every_segment_and_stay_under_its_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = Arc::new(crate::OpenFiles::new(3));
    let config = LogConfig {
        open_files: cache.clone(),
        ..small_segments()
    };
    let logs: Vec<PartitionLog> = (0..4)
        .map(|p| {
            let path = tmp.path().join(format!("t-{p}"));
            let (log, _) = PartitionLog::open(&path, config.clone()).unwrap();
            for id in 0..100 {
                log.append(&mut batch(id, 4, T0), 0).unwrap();
                assert!(cache.open_count() <= 3, "{}", cache.open_count());
            }
            assert!(log.segment_count() >= 4, "segments to evict");
            log
        })
        .collect();
    for log in &logs {
        assert_eq!(all_values(log), expected_values((0..100).map(|i| (i, 4))));
        assert!(cache.open_count() <= 3);
    }
    // Closed and reopened through the same small cache: old segments still read.
    for log in &logs {
        log.close().unwrap();
    }
    let dirs: Vec<PathBuf> = logs.iter().map(|l| l.dir().to_path_buf()).collect();
    drop(logs);
    assert_eq!(cache.open_count(), 0, "a dropped log closes its files");
    for dir in dirs {
        let (log, report) = PartitionLog::open(&dir, config.clone()).unwrap();
        assert_eq!(report.indexes_rebuilt, 0, "{report:?}");
        assert_eq!(all_values(&log), expected_values((0..100).map(|i| (i, 4))));
        assert!(cache.open_count() <= 3);
    }
}

#[test]
fn batch_headers_are_walked_from_the_batch_holding_an_offset_across_segments() {
    let fs = FaultyStorage::new();
    let (log, _) = open(&fs, small_segments());
    // Batches of 1 to 40 records: small ones share a read, large ones are skipped over.
    let mut bases = Vec::new();
    for id in 0..60u32 {
        let appended = log.append(&mut batch(id, 1 + id % 40, T0), 0).unwrap();
        bases.push(appended.base_offset);
    }
    assert!(log.segment_count() > 3);
    for from in [0, bases[7] + 1, bases[59], log.log_end_offset()] {
        let mut seen = Vec::new();
        log.for_each_batch_header(from, |header| seen.push(header.base_offset()))
            .unwrap();
        let expected: Vec<i64> = bases
            .iter()
            .zip(bases.iter().skip(1).chain([&log.log_end_offset()]))
            .filter(|(_, &next)| next > from)
            .map(|(&base, _)| base)
            .collect();
        assert_eq!(seen, expected, "from {from}");
    }
}

#[test]
fn limits_change_while_the_log_is_open_but_the_flush_policy_does_not() {
    let fs = FaultyStorage::new();
    let (log, _) = open(&fs, small_segments());
    let mut medium = batch(0, 20, T0);
    log.append(&mut medium.clone(), 0).unwrap();
    let smaller = LogConfig {
        batch_bytes_max: 64,
        ..small_segments()
    };
    log.set_config(smaller.clone()).unwrap();
    assert_eq!(log.config(), smaller);
    assert!(matches!(
        log.append(&mut medium, 0),
        Err(LogError::BatchTooLarge { .. })
    ));
    for refused in [
        LogConfig {
            flush: FlushPolicy::Os,
            ..small_segments()
        },
        LogConfig {
            batch_bytes_max: 8192,
            ..small_segments()
        },
    ] {
        assert!(matches!(
            log.set_config(refused),
            Err(LogError::InvalidConfig(_))
        ));
        assert_eq!(log.config(), smaller, "a refused change changes nothing");
    }
    log.set_config(small_segments()).unwrap();
    log.append(&mut batch(1, 20, T0), 0).unwrap();
    assert_eq!(log.log_end_offset(), 40);
}

#[test]
fn records_deleted_below_an_offset_stay_deleted_through_a_crash() {
    let fs = FaultyStorage::new();
    let (log, _) = open(&fs, small_segments());
    for id in 0..60u32 {
        log.append(&mut batch(id, 20, T0), 0).unwrap();
    }
    log.flush().unwrap();
    let segments_before = log.segment_count();
    assert!(segments_before > 3, "{segments_before} segments");
    // Inside a batch of a later segment: the segments wholly below go at once.
    assert_eq!(log.delete_records_before(505).unwrap(), 505);
    assert_eq!(log.log_start_offset(), 505);
    assert!(log.segment_count() < segments_before);
    assert!(matches!(
        log.read(504, 1 << 20, None),
        Err(LogError::OffsetOutOfRange { log_start: 505, .. })
    ));
    assert_eq!(
        log.offset_for_timestamp(0).unwrap(),
        Some((505, T0 + 5)),
        "a search by time starts at the log start"
    );
    let values = all_values(&log);
    assert_eq!(values.len(), 1200 - 505);
    assert_eq!(values[0], "batch-25-record-5");
    // Never down, never past the end.
    assert_eq!(log.delete_records_before(10).unwrap(), 505);
    assert!(matches!(
        log.delete_records_before(1201),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    assert!(log.delete_records_before(-1).is_err());

    fs.crash(CrashMode::LoseUnsynced);
    drop(log);
    let (log, report) = open(&fs, small_segments());
    assert_eq!(report.log_start_checkpoint_damaged, None);
    assert_eq!(
        log.log_start_offset(),
        505,
        "the deletion is durable when answered"
    );
    assert_eq!(all_values(&log), values);
    // Up to the end: an empty log that goes on at its end.
    assert_eq!(log.delete_records_before(1200).unwrap(), 1200);
    assert_eq!(
        log.append(&mut batch(60, 2, T0), 0).unwrap().base_offset,
        1200
    );
    assert_eq!(all_values(&log), expected_values([(60, 2)]));
}

#[test]
fn a_damaged_log_start_checkpoint_is_reported_and_the_log_still_opens() {
    let fs = FaultyStorage::new();
    let (log, _) = open(&fs, LogConfig::default());
    log.append(&mut batch(0, 10, T0), 0).unwrap();
    log.delete_records_before(4).unwrap();
    drop(log);
    let path = dir().join(crate::log_start::LOG_START_FILE);
    fs.poke(&path, 0, b"garbage!");
    let (log, report) = open(&fs, LogConfig::default());
    assert!(report.log_start_checkpoint_damaged.is_some(), "{report:?}");
    assert_eq!(log.log_start_offset(), 0);
}

#[test]
fn a_log_restarted_past_deleted_records_keeps_no_old_segment() {
    let fs = FaultyStorage::new();
    let (log, _) = open(&fs, small_segments());
    for id in 0..30u32 {
        log.append(&mut batch(id, 20, T0), 0).unwrap();
    }
    log.delete_records_before(250).unwrap();
    // A follower whose leader's log start passed its end starts over there.
    log.truncate_fully_and_start_at(5000).unwrap();
    assert_eq!(log.segment_count(), 1);
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (5000, 5000));
    drop(log);
    let (log, _) = open(&fs, small_segments());
    assert_eq!(
        log.segment_count(),
        1,
        "no segment of the old log is left on disk"
    );
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (5000, 5000));
}

#[test]
fn a_log_ending_below_its_log_start_checkpoint_restarts_there() {
    let fs = FaultyStorage::new();
    let (log, _) = open(&fs, LogConfig::default());
    log.append(&mut batch(0, 10, T0), 0).unwrap();
    log.delete_records_before(4).unwrap();
    drop(log);
    // As if the disk had lost synced records after the checkpoint named offset 50.
    crate::log_start::store(&fs, &dir(), 50).unwrap();
    let (log, _) = open(&fs, LogConfig::default());
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (50, 50));
    assert_eq!(log.append(&mut batch(1, 2, T0), 0).unwrap().base_offset, 50);
    assert_eq!(all_values(&log), expected_values([(1, 2)]));
}
