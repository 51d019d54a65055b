//! The leader's write of one parsed batch ([`PartitionLog::write_batch`] and
//! [`PartitionLog::try_write_batch`]): the bytes it stores are those [`PartitionLog::write`]
//! stores for the same batch, on the fault-injecting storage and through the real `pwritev`;
//! a write that would block is declined with nothing changed; a failed vectored write leaves
//! no trace.

use std::sync::Arc;

use tinymq_protocol::batch::RecordBatch;

use crate::fault::{Faults, FaultyStorage};
use crate::tests::{all_values, batch, expected_values, open, small_segments, T0};
use crate::{LogConfig, LogError, ManualClock, OsStorage, PartitionLog};

fn parsed(id: u32, records: u32) -> RecordBatch {
    RecordBatch::parse(batch(id, records, T0).freeze()).unwrap()
}

/// Every byte of the log, read from offset 0.
fn log_bytes(log: &PartitionLog) -> Vec<u8> {
    log.read(0, 1 << 20, None).unwrap().records.to_vec()
}

#[test]
fn write_batch_stores_what_write_stores() {
    let (a, b) = (FaultyStorage::new(), FaultyStorage::new());
    let ((by_parts, _), (by_bytes, _)) = (
        open(&a, LogConfig::default()),
        open(&b, LogConfig::default()),
    );
    for (id, records, epoch) in [(0, 3, 0), (1, 1, 0), (2, 5, 4)] {
        let info = by_parts.write_batch(&parsed(id, records), epoch).unwrap();
        let same = by_bytes.write(&mut batch(id, records, T0), epoch).unwrap();
        assert_eq!(info, same);
    }
    assert_eq!(log_bytes(&by_parts), log_bytes(&by_bytes));
    assert_eq!(
        all_values(&by_parts),
        expected_values([(0, 3), (1, 1), (2, 5)])
    );
}

/// The real file system's path: header and body in one `pwritev`.
#[test]
fn write_batch_through_pwritev_reads_back_and_recovers() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t-0");
    let (log, _) = PartitionLog::open(&path, LogConfig::default()).unwrap();
    for id in 0..4 {
        log.write_batch(&parsed(id, 10), 1).unwrap();
    }
    assert_eq!(log.log_end_offset(), 40);
    let bytes = log_bytes(&log);
    drop(log);
    let (log, report) = PartitionLog::open_with(
        &path,
        LogConfig::default(),
        Arc::new(OsStorage),
        Arc::new(ManualClock::new(T0)),
    )
    .unwrap();
    assert!(report.truncations.is_empty(), "{report:?}");
    assert_eq!(log_bytes(&log), bytes);
    assert_eq!(all_values(&log), expected_values((0..4).map(|id| (id, 10))));
}

#[test]
fn try_write_batch_declines_slow_work_and_changes_nothing() {
    let fs = FaultyStorage::new();
    let (log, _) = open(&fs, small_segments());
    // The first write under an epoch records it durably: declined.
    assert_eq!(log.try_write_batch(&parsed(0, 2), 3).unwrap(), None);
    assert_eq!(log.log_end_offset(), 0);
    log.write_batch(&parsed(0, 2), 3).unwrap();
    assert!(log.try_write_batch(&parsed(1, 2), 3).unwrap().is_some());
    // A deposed writer is refused outright, not sent to a blocking thread.
    assert!(matches!(
        log.try_write_batch(&parsed(2, 2), 2),
        Err(LogError::StaleLeaderEpoch { .. })
    ));
    // Fill the 4 KiB segment until the next write must roll (fsyncs): declined.
    let mut id = 2;
    while log.segment_count() == 1 {
        match log.try_write_batch(&parsed(id, 2), 3).unwrap() {
            Some(_) => id += 1,
            None => {
                let end = log.log_end_offset();
                log.write_batch(&parsed(id, 2), 3).unwrap();
                assert_eq!(log.segment_count(), 2, "the blocking write rolled");
                assert_eq!(log.log_end_offset(), end + 2);
                id += 1;
            }
        }
    }
    assert_eq!(all_values(&log), expected_values((0..id).map(|id| (id, 2))));
}

#[test]
fn a_failed_vectored_write_leaves_no_trace() {
    let fs = FaultyStorage::new();
    let (log, _) = open(&fs, LogConfig::default());
    log.write_batch(&parsed(0, 2), 0).unwrap();
    // Torn inside the header part; then out of space inside the body part.
    let faults = [
        Faults {
            torn_next_write_bytes: Some(30),
            ..Faults::default()
        },
        Faults {
            space_bytes_left: Some(80),
            ..Faults::default()
        },
    ];
    for (id, faults) in (1..).zip(faults) {
        fs.set_faults(faults);
        assert!(log.write_batch(&parsed(id, 2), 0).is_err());
        fs.set_faults(Faults::default());
    }
    assert_eq!(log.write_batch(&parsed(3, 2), 0).unwrap().base_offset, 2);
    assert_eq!(all_values(&log), expected_values([(0, 2), (3, 2)]));
    drop(log);
    let (log, report) = open(&fs, LogConfig::default());
    assert!(report.truncations.is_empty(), "{report:?}");
    assert_eq!(all_values(&log), expected_values([(0, 2), (3, 2)]));
}

#[test]
fn write_batch_keeps_the_size_limits() {
    let fs = FaultyStorage::new();
    let config = LogConfig {
        batch_bytes_max: 100,
        ..LogConfig::default()
    };
    let (log, _) = open(&fs, config);
    assert!(matches!(
        log.write_batch(&parsed(0, 20), 0),
        Err(LogError::BatchTooLarge { limit: 100, .. })
    ));
    assert!(matches!(
        log.write_batch(&parsed(0, 1), -1),
        Err(LogError::InvalidLeaderEpoch(-1))
    ));
    assert_eq!(log.log_end_offset(), 0);
}
