//! What replication relies on, over the fault-injecting storage: the leader-epoch cache and
//! its checkpoint through appends, crashes and damage; a follower appending its leader's
//! batches byte for byte (and refusing what does not continue its log); truncation and
//! restarting the log, durable across a crash; reads racing truncation.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use tinymq_protocol::batch::{compute_crc, field, BatchIter};

use crate::epoch::checkpoint_path;
use crate::fault::{CrashMode, FaultyStorage};
use crate::tests::{all_values, batch, dir, expected_values, open, small_segments, T0};
use crate::{FlushPolicy, LogConfig, LogError, PartitionLog, Storage};

fn checkpoint() -> PathBuf {
    checkpoint_path(&dir())
}

/// A leader log on its own storage with batches `(id, records, epoch)` appended in order.
fn leader(batches: &[(u32, u32, i32)]) -> PartitionLog {
    let fs = FaultyStorage::new();
    let (log, _) = open(&fs, small_segments());
    for &(id, n, epoch) in batches {
        log.append(&mut batch(id, n, T0), epoch).unwrap();
    }
    log
}

/// Every byte of the log from `from` on, as a follower would fetch it.
fn fetch_all(log: &PartitionLog, from: i64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut offset = from;
    while offset < log.log_end_offset() {
        let read = log.read(offset, 1 << 20, None).unwrap();
        for b in BatchIter::new(read.records) {
            let b = b.unwrap();
            out.extend_from_slice(b.as_bytes());
            offset = b.next_offset();
        }
    }
    out
}

/// The leader's batches split into whole batches: (base offset, bytes).
fn split(bytes: &[u8]) -> Vec<(i64, Vec<u8>)> {
    BatchIter::new(Bytes::copy_from_slice(bytes))
        .map(|b| {
            let b = b.unwrap();
            (b.base_offset(), b.as_bytes().to_vec())
        })
        .collect()
}

/// What a log shows: end offset, bytes and epoch entries.
fn snapshot(log: &PartitionLog) -> (i64, Vec<u8>, Vec<(i32, i64)>) {
    (
        log.log_end_offset(),
        fetch_all(log, log.log_start_offset()),
        log.epoch_entries(),
    )
}

#[test]
fn appends_record_each_new_epoch_durably_and_refuse_older_ones() {
    let fs = FaultyStorage::new();
    let (log, _) = open(&fs, small_segments());
    assert_eq!(log.latest_epoch(), None);
    assert_eq!(
        log.end_offset_for_epoch(5),
        None,
        "an empty log has no epochs"
    );
    assert!(
        fs.contents(&checkpoint()).is_none(),
        "nothing to record yet"
    );
    for (id, epoch) in [(0, 1), (1, 1), (2, 3), (3, 3), (4, 7)] {
        log.append(&mut batch(id, 2, T0), epoch).unwrap();
    }
    assert_eq!(log.epoch_entries(), vec![(1, 0), (3, 4), (7, 8)]);
    assert_eq!(log.latest_epoch(), Some(7));
    let on_disk = crate::epoch::decode(&fs.contents(&checkpoint()).unwrap()).unwrap();
    assert_eq!(on_disk.entries(), log.epoch_entries().as_slice());

    assert_eq!(log.end_offset_for_epoch(0), None, "below the first epoch");
    assert_eq!(log.end_offset_for_epoch(1), Some((1, 4)));
    assert_eq!(
        log.end_offset_for_epoch(2),
        Some((1, 4)),
        "an epoch that never wrote"
    );
    assert_eq!(log.end_offset_for_epoch(3), Some((3, 8)));
    assert_eq!(
        log.end_offset_for_epoch(7),
        Some((7, 10)),
        "the latest ends at the log end"
    );
    assert_eq!(log.end_offset_for_epoch(9), Some((7, 10)));

    let before = snapshot(&log);
    assert!(matches!(
        log.append(&mut batch(9, 1, T0), 6),
        Err(LogError::StaleLeaderEpoch {
            epoch: 6,
            latest: 7
        })
    ));
    assert!(matches!(
        log.append(&mut batch(9, 1, T0), -1),
        Err(LogError::InvalidLeaderEpoch(-1))
    ));
    assert_eq!(snapshot(&log), before, "a refused append changes nothing");

    // A leader assigns its epoch before writing; reopening forgets it (nothing written).
    log.assign_epoch(9).unwrap();
    assert_eq!(log.end_offset_for_epoch(8), Some((7, 10)));
    assert_eq!(log.end_offset_for_epoch(9), Some((9, 10)));
    drop(log);
    let (log, report) = open(&fs, small_segments());
    assert_eq!(report.leader_epochs_rebuilt, None);
    assert_eq!(log.epoch_entries(), vec![(1, 0), (3, 4), (7, 8)]);
}

#[test]
fn the_checkpoint_is_durable_before_the_batch_that_needs_it() {
    // Under `os` nothing is fsynced on append, so a power cut loses the batches; the
    // checkpoint then holds entries past the log end, which opening drops. It never lacks
    // the epoch of a batch that survived.
    for keep in [0, 30, 100, 100_000] {
        let fs = FaultyStorage::new();
        let config = LogConfig {
            flush: FlushPolicy::Os,
            ..small_segments()
        };
        let (log, _) = open(&fs, config.clone());
        for (id, epoch) in [(0, 1), (1, 2), (2, 2), (3, 5)] {
            log.append(&mut batch(id, 3, T0), epoch).unwrap();
        }
        drop(log);
        fs.crash(CrashMode::KeepUnsyncedPrefix(keep));
        let (log, report) = open(&fs, config);
        assert_eq!(report.leader_epochs_rebuilt, None, "keep {keep}");
        let expected: Vec<(i32, i64)> = [(1, 0), (2, 3), (5, 9)]
            .into_iter()
            .filter(|&(_, start)| start < log.log_end_offset())
            .collect();
        assert_eq!(log.epoch_entries(), expected, "keep {keep}");
        let on_disk = crate::epoch::decode(&fs.contents(&checkpoint()).unwrap()).unwrap();
        assert_eq!(on_disk.entries(), expected.as_slice(), "rewritten at open");
    }
}

#[test]
fn a_data_directory_with_a_format_1_checkpoint_opens_unchanged() {
    // A partition directory as tinymq wrote it before the epoch cache moved to
    // tinymq-replication: the checkpoint's bytes are fixed here (not produced by today's
    // encoder), and opening must take them as they are, without a rebuild or a rewrite.
    const FORMAT_1: &[u8] = b"1afd8cc8\n1\n3\n2 0\n4 6\n9 12\n";
    let fs = FaultyStorage::new();
    let (log, _) = open(&fs, small_segments());
    for (id, epoch) in [(0, 2), (1, 2), (2, 4), (3, 4), (4, 9)] {
        log.append(&mut batch(id, 3, T0), epoch).unwrap();
    }
    drop(log);
    let file = fs.open(&checkpoint(), false).unwrap();
    file.set_len(0).unwrap();
    file.write_all_at(FORMAT_1, 0).unwrap();
    let (log, report) = open(&fs, small_segments());
    assert_eq!(report.leader_epochs_rebuilt, None, "{report:?}");
    assert_eq!(log.epoch_entries(), vec![(2, 0), (4, 6), (9, 12)]);
    assert_eq!(fs.contents(&checkpoint()).as_deref(), Some(FORMAT_1));
    assert_eq!(log.end_offset_for_epoch(3), Some((2, 6)));
    assert_eq!(log.end_offset_for_epoch(9), Some((9, 15)));
    // And it goes on as before: a new epoch is appended to the same file.
    log.append(&mut batch(5, 1, T0), 11).unwrap();
    assert_eq!(log.epoch_entries(), vec![(2, 0), (4, 6), (9, 12), (11, 15)]);
    let on_disk = crate::epoch::decode(&fs.contents(&checkpoint()).unwrap()).unwrap();
    assert_eq!(on_disk.entries(), log.epoch_entries().as_slice());
}

#[test]
fn a_missing_damaged_or_disagreeing_checkpoint_is_rebuilt_from_the_log() {
    let epochs = [(0, 2), (1, 2), (2, 4), (3, 4), (4, 9)];
    let expected = vec![(2, 0), (4, 6), (9, 12)];
    let body = |entries: &str| {
        let count = entries.lines().count();
        let body = format!("1\n{count}\n{entries}");
        format!("{:08x}\n{body}", crc32c::crc32c(body.as_bytes())).into_bytes()
    };
    let damages: Vec<(&str, Option<Vec<u8>>)> = vec![
        ("missing", None),
        ("garbage", Some(b"\xff\x00 not a checkpoint".to_vec())),
        ("empty", Some(Vec::new())),
        ("bad crc", Some(b"00000000\n1\n1\n2 0\n".to_vec())),
        ("lacks an epoch", Some(body("2 0\n9 12\n"))),
        ("an extra epoch", Some(body("2 0\n4 6\n5 8\n9 12\n"))),
        ("a wrong start", Some(body("2 0\n4 5\n9 12\n"))),
    ];
    for (what, damage) in damages {
        let fs = FaultyStorage::new();
        let (log, _) = open(&fs, small_segments());
        for &(id, epoch) in &epochs {
            log.append(&mut batch(id, 3, T0), epoch).unwrap();
        }
        drop(log);
        match &damage {
            None => fs.remove(&checkpoint()).unwrap(),
            Some(bytes) => {
                let file = fs.open(&checkpoint(), false).unwrap();
                file.set_len(0).unwrap();
                file.write_all_at(bytes, 0).unwrap();
            }
        }
        let (log, report) = open(&fs, small_segments());
        assert!(report.leader_epochs_rebuilt.is_some(), "{what}: {report:?}");
        assert_eq!(log.epoch_entries(), expected, "{what}");
        let on_disk = crate::epoch::decode(&fs.contents(&checkpoint()).unwrap()).unwrap();
        assert_eq!(on_disk.entries(), expected.as_slice(), "{what}: rewritten");
        drop(log);
        let (_, report) = open(&fs, small_segments());
        assert_eq!(report.leader_epochs_rebuilt, None, "{what}: once is enough");
    }
}

#[test]
fn a_follower_replicates_byte_for_byte_across_its_own_segments() {
    let epochs: Vec<(u32, u32, i32)> = (0..60)
        .map(|i| (i, 1 + i % 4, (i / 20) as i32 * 2))
        .collect();
    let leader = leader(&epochs);
    let fetched = fetch_all(&leader, 0);
    assert!(
        fetched.len() as u64 > small_segments().segment_bytes,
        "spans segments"
    );

    let fs = FaultyStorage::new();
    let (follower, _) = open(&fs, small_segments());
    // One big fetch (larger than a segment), then the same in small pieces on another one.
    let info = follower.append_replicated(&fetched).unwrap();
    assert_eq!(info.base_offset, 0);
    assert_eq!(info.log_end_offset, leader.log_end_offset());
    assert_eq!(info.batch_count, 60);
    assert_eq!(
        follower.durable_offset(),
        info.log_end_offset,
        "always: fsynced"
    );
    assert!(follower.segment_count() > 1);
    assert_eq!(fetch_all(&follower, 0), fetched, "byte for byte");
    assert_eq!(follower.epoch_entries(), leader.epoch_entries());
    assert_eq!(follower.epoch_entries(), vec![(0, 0), (2, 50), (4, 100)]);

    let fs2 = FaultyStorage::new();
    let (second, _) = open(&fs2, small_segments());
    for chunk in split(&fetched).chunks(7) {
        let bytes: Vec<u8> = chunk.iter().flat_map(|(_, b)| b.clone()).collect();
        second.append_replicated(&bytes).unwrap();
    }
    assert_eq!(fetch_all(&second, 0), fetched);
    drop(second);
    let (second, report) = open(&fs2, small_segments());
    assert_eq!(report.truncations, vec![]);
    assert_eq!(report.leader_epochs_rebuilt, None);
    assert_eq!(fetch_all(&second, 0), fetched);
    assert_eq!(second.epoch_entries(), leader.epoch_entries());
    // A follower that becomes leader appends after what it replicated, in a newer epoch.
    assert!(matches!(
        second.append(&mut batch(99, 1, T0), 3),
        Err(LogError::StaleLeaderEpoch { .. })
    ));
    let next = second.append(&mut batch(99, 1, T0), 5).unwrap();
    assert_eq!(next.base_offset, leader.log_end_offset());
}

#[test]
fn replicated_batches_that_go_back_are_refused_and_change_nothing() {
    let leader = leader(&[(0, 2, 1), (1, 2, 1), (2, 2, 3), (3, 2, 3), (4, 2, 4)]);
    let batches = split(&fetch_all(&leader, 0));
    let join = |parts: &[&[u8]]| parts.concat();
    let fs = FaultyStorage::new();
    let (follower, _) = open(&fs, small_segments());
    follower
        .append_replicated(&join(&[&batches[0].1, &batches[1].1, &batches[2].1]))
        .unwrap();
    assert_eq!(follower.epoch_entries(), vec![(1, 0), (3, 4)]);
    let before = snapshot(&follower);

    // Starts below the log end (already have it).
    let err = follower.append_replicated(&batches[2].1).unwrap_err();
    assert!(
        matches!(
            err,
            LogError::NotContiguous {
                expected: 6,
                found: 4,
                ..
            }
        ),
        "{err}"
    );
    // A gap between two batches of one fetch.
    let err = follower
        .append_replicated(&join(&[&batches[3].1, &batches[3].1]))
        .unwrap_err();
    assert!(
        matches!(
            err,
            LogError::NotContiguous {
                batch: 1,
                expected: 8,
                found: 6
            }
        ),
        "{err}"
    );
    // An epoch below the log's latest.
    let mut old_epoch = batches[3].1.clone();
    old_epoch[field::PARTITION_LEADER_EPOCH..field::PARTITION_LEADER_EPOCH + 4]
        .copy_from_slice(&2i32.to_be_bytes());
    let err = follower.append_replicated(&old_epoch).unwrap_err();
    assert!(
        matches!(
            err,
            LogError::StaleLeaderEpoch {
                epoch: 2,
                latest: 3
            }
        ),
        "{err}"
    );
    // Epochs going back within the batches.
    let mut going_back = batches[4].1.clone();
    going_back[field::PARTITION_LEADER_EPOCH..field::PARTITION_LEADER_EPOCH + 4]
        .copy_from_slice(&3i32.to_be_bytes());
    let mut newer = batches[3].1.clone();
    newer[field::PARTITION_LEADER_EPOCH..field::PARTITION_LEADER_EPOCH + 4]
        .copy_from_slice(&4i32.to_be_bytes());
    let err = follower
        .append_replicated(&join(&[&newer, &going_back]))
        .unwrap_err();
    assert!(
        matches!(
            err,
            LogError::StaleLeaderEpoch {
                epoch: 3,
                latest: 4
            }
        ),
        "{err}"
    );
    // A negative epoch.
    let mut negative = batches[3].1.clone();
    negative[field::PARTITION_LEADER_EPOCH..field::PARTITION_LEADER_EPOCH + 4]
        .copy_from_slice(&(-1i32).to_be_bytes());
    let err = follower.append_replicated(&negative).unwrap_err();
    assert!(matches!(err, LogError::InvalidLeaderEpoch(-1)), "{err}");
    // A flipped bit in the records, a wrong CRC, a torn batch: corrupt, whatever follows.
    let mut flipped = batches[3].1.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    let mut torn = batches[4].1.clone();
    torn.truncate(torn.len() - 1);
    for (what, bad) in [
        ("flipped", join(&[&flipped, &batches[4].1])),
        ("torn", join(&[&batches[3].1, &torn])),
    ] {
        let err = follower.append_replicated(&bad).unwrap_err();
        assert!(matches!(err, LogError::InvalidBatch(_)), "{what}: {err}");
    }
    assert!(follower.append_replicated(&[]).is_err());
    assert_eq!(snapshot(&follower), before, "nothing changed");

    // The right batches still go on, and the CRC was never touched.
    follower
        .append_replicated(&join(&[&batches[3].1, &batches[4].1]))
        .unwrap();
    assert_eq!(fetch_all(&follower, 0), fetch_all(&leader, 0));
    let all = fetch_all(&follower, 0);
    for (_, b) in split(&all) {
        assert_eq!(compute_crc(&b).to_be_bytes(), b[field::CRC..field::CRC + 4]);
    }
}

#[test]
fn truncation_cuts_batches_segments_and_epochs_and_appends_go_on_from_there() {
    let fs = FaultyStorage::new();
    let config = LogConfig {
        segment_bytes: 1024,
        batch_bytes_max: 1024,
        ..small_segments()
    };
    let (log, _) = open(&fs, config.clone());
    // 40 batches of 5 records, epochs 1 (0..100), 2 (100..150), 4 (150..200).
    for id in 0..40u32 {
        let epoch = match id {
            0..=19 => 1,
            20..=29 => 2,
            _ => 4,
        };
        log.append(&mut batch(id, 5, T0), epoch).unwrap();
    }
    let segments = log.segment_count();
    assert!(segments > 3);
    assert_eq!(log.epoch_entries(), vec![(1, 0), (2, 100), (4, 150)]);

    // Inside a batch of epoch 2: the batch goes whole, so does epoch 4.
    assert_eq!(log.truncate_to(127).unwrap(), 125);
    assert_eq!(log.log_end_offset(), 125);
    assert!(log.segment_count() < segments);
    assert_eq!(log.epoch_entries(), vec![(1, 0), (2, 100)]);
    assert_eq!(log.end_offset_for_epoch(4), Some((2, 125)));
    assert_eq!(log.durable_offset(), 125);
    assert_eq!(all_values(&log), expected_values((0..25).map(|i| (i, 5))));
    // At an epoch's first offset: the epoch goes.
    assert_eq!(log.truncate_to(100).unwrap(), 100);
    assert_eq!(log.epoch_entries(), vec![(1, 0)]);
    assert_eq!(
        log.truncate_to(500).unwrap(),
        100,
        "past the end: nothing to do"
    );

    // Power cut right after: nothing of the tail comes back.
    fs.crash(CrashMode::LoseUnsynced);
    let (log, report) = open(&fs, config.clone());
    assert_eq!(report.truncations, vec![]);
    assert_eq!(report.leader_epochs_rebuilt, None);
    assert_eq!(log.log_end_offset(), 100);
    assert_eq!(log.epoch_entries(), vec![(1, 0)]);
    assert_eq!(all_values(&log), expected_values((0..20).map(|i| (i, 5))));

    // Round trip: the new leader's batches go where the old tail was.
    assert_eq!(
        log.append(&mut batch(70, 5, T0), 6).unwrap().base_offset,
        100
    );
    assert_eq!(log.epoch_entries(), vec![(1, 0), (6, 100)]);
    let mut expected: Vec<(u32, u32)> = (0..20).map(|i| (i, 5)).collect();
    expected.push((70, 5));
    assert_eq!(all_values(&log), expected_values(expected.clone()));
    drop(log);
    let (log, _) = open(&fs, config.clone());
    assert_eq!(all_values(&log), expected_values(expected));
    assert_eq!(log.epoch_entries(), vec![(1, 0), (6, 100)]);

    // To the log start: empty, but at the same offsets.
    assert_eq!(log.truncate_to(0).unwrap(), 0);
    assert_eq!(log.epoch_entries(), vec![]);
    assert_eq!(log.segment_count(), 1);
}

#[test]
fn truncation_below_the_start_is_refused_and_truncate_fully_restarts_the_log() {
    let fs = FaultyStorage::new();
    let config = LogConfig {
        retention_bytes: Some(1),
        ..small_segments()
    };
    let (log, _) = open(&fs, config.clone());
    for id in 0..40u32 {
        log.append(&mut batch(id, 5, T0), if id < 20 { 1 } else { 2 })
            .unwrap();
    }
    let report = log.apply_retention().unwrap();
    let start = report.log_start_offset;
    assert!(
        start > 100,
        "retention moved the start past epoch 2's start"
    );
    assert_eq!(
        log.epoch_entries(),
        vec![(2, start)],
        "trimmed to the log start"
    );
    let before = snapshot(&log);
    let err = log.truncate_to(start - 1).unwrap_err();
    assert!(matches!(err, LogError::OffsetOutOfRange { .. }), "{err}");
    assert_eq!(snapshot(&log), before);

    log.truncate_fully_and_start_at(1000).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (1000, 1000));
    assert_eq!(log.epoch_entries(), vec![]);
    assert_eq!(log.end_offset_for_epoch(2), None);
    assert_eq!(log.segment_count(), 1);
    fs.crash(CrashMode::LoseUnsynced);
    let (log, report) = open(&fs, config.clone());
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (1000, 1000));
    assert_eq!(report.leader_epochs_rebuilt, None);
    assert_eq!(
        log.append(&mut batch(5, 2, T0), 3).unwrap().base_offset,
        1000
    );
    assert_eq!(log.epoch_entries(), vec![(3, 1000)]);
    // Below the start too, and at the start itself.
    log.truncate_fully_and_start_at(10).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (10, 10));
    log.truncate_fully_and_start_at(10).unwrap();
    assert!(log.truncate_fully_and_start_at(-1).is_err());
    // A follower far behind starts where its leader's log does, and replicates from there.
    let leader = leader(&[(0, 4, 1), (1, 6, 1)]);
    let from_leader = fetch_all(&leader, 4);
    assert_eq!(split(&from_leader)[0].0, 4);
    log.truncate_fully_and_start_at(4).unwrap();
    log.append_replicated(&from_leader).unwrap();
    assert_eq!(fetch_all(&log, 4), from_leader);
    assert_eq!(log.epoch_entries(), vec![(1, 4)]);
}

#[test]
fn reads_racing_truncation_never_return_torn_batches() {
    let fs = FaultyStorage::new();
    let config = LogConfig {
        flush: FlushPolicy::Os,
        ..small_segments()
    };
    let (log, _) = open(&fs, config);
    let log = Arc::new(log);
    for id in 0..30u32 {
        log.append(&mut batch(id, 3, T0), 1).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (log, stop) = (log.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut checked = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let read = log.read(30, 1 << 20, None).expect("30 is always in range");
                    for b in BatchIter::new(read.records) {
                        let b = b.expect("every batch read is whole and sound");
                        b.records(1 << 20).expect("records decode");
                        checked += 1;
                    }
                }
                checked
            })
        })
        .collect();
    // Cut back to 30 and write different batches over the same positions, many times.
    for round in 0..200u32 {
        log.truncate_to(30).unwrap();
        for id in 0..10u32 {
            log.append(
                &mut batch(1000 + round * 10 + id, 1 + (round + id) % 4, T0),
                1,
            )
            .unwrap();
        }
    }
    stop.store(true, Ordering::Relaxed);
    let checked: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert!(checked > 0, "the readers read something");
}

/// A compacted leader's log has gaps where its cleaner removed batches: a follower copies
/// them, and reopening the follower (recovery checks that offsets follow on) keeps them.
#[test]
fn replicated_batches_with_gaps_are_written_and_survive_reopening() {
    let leader = leader(&[(0, 2, 1), (1, 2, 1), (2, 2, 3), (3, 2, 3), (4, 2, 4)]);
    let batches = split(&fetch_all(&leader, 0));
    let fs = FaultyStorage::new();
    let (follower, _) = open(&fs, small_segments());
    follower.append_replicated(&batches[0].1).unwrap();
    // Batch 1 missing at the start of the fetch, batch 3 missing between two.
    let gapped = [&batches[2].1[..], &batches[4].1[..]].concat();
    let info = follower.append_replicated(&gapped).unwrap();
    assert_eq!((info.base_offset, info.log_end_offset), (4, 10));
    let kept = fetch_all(&follower, 0);
    follower.close().unwrap();
    let (reopened, report) = open(&fs, small_segments());
    assert_eq!(report.truncations, vec![]);
    assert_eq!(fetch_all(&reopened, 0), kept);
    assert_eq!(reopened.log_end_offset(), 10);
}
