//! Exactly once across a crash between the append and the `Delivered` mark: the scheduler's
//! replay after a restart (timer log and partition both reopened, the producer state rebuilt
//! from the log) appends only what is not in the partition yet, also when the partition has
//! forgotten the scheduler's producer; and a timer stops once its leadership ends or its disk
//! fails.

use std::path::Path;
use std::sync::Arc;

use tinymq_delay::{Entry, SchedulerStamp};
use tinymq_protocol::batch::craft::CraftedBatch;
use tinymq_protocol::ErrorCode;
use tinymq_storage::fault::{CrashMode, Faults, FaultyStorage};
use tinymq_storage::Storage;

use super::scheduler::append_assigned;
use super::timer::PartitionTimer;
use crate::partition::{now_ms, Partition};
use crate::topic::TopicSettings;

const PRODUCER_ID_END: i64 = 100;
const SCHEDULER_ID: i64 = 42;

fn open(dir: &std::path::Path) -> (Arc<Partition>, PartitionTimer) {
    let settings = TopicSettings::default();
    let partition = Arc::new(Partition::open(dir, "t", 0, &settings, false).unwrap());
    // A partition opened alone leads in epoch 0.
    let timer = PartitionTimer::open(partition.clone(), 0).unwrap();
    (partition, timer)
}

/// Stores `count` batches that are due now; returns their entry ids in deliver-at order.
fn store_due(timer: &PartitionTimer, count: usize) -> Vec<u64> {
    for i in 0..count {
        let batch = CraftedBatch::honest(now_ms(), &[format!("v{i}").as_bytes()]).encode();
        let client = tinymq_delay::ClientIdentity {
            producer_id: -1,
            producer_epoch: -1,
            first_sequence: -1,
            last_sequence: -1,
        };
        timer.store(client, batch, 0).unwrap();
    }
    timer.with_log(|log| {
        log.state()
            .due(now_ms(), usize::MAX)
            .iter()
            .map(|w| w.entry_id)
            .collect()
    })
}

fn assign(timer: &PartitionTimer, ids: &[u64], first_sequence: i32) {
    let scan_from_offset = timer.partition.log.log_end_offset();
    assign_from(timer, ids, first_sequence, scan_from_offset);
}

fn assign_from(timer: &PartitionTimer, ids: &[u64], first_sequence: i32, scan_from_offset: i64) {
    let marks: Vec<Entry> = ids
        .iter()
        .zip(first_sequence..)
        .map(|(&entry_id, sequence)| Entry::Assigned {
            entry_id,
            stamp: SchedulerStamp {
                producer_id: SCHEDULER_ID,
                producer_epoch: 0,
                sequence,
            },
            scan_from_offset,
        })
        .collect();
    let ticket = timer.append(&marks).unwrap();
    timer.sync(ticket).unwrap();
}

#[test]
fn a_replay_after_a_crash_appends_only_what_the_partition_lacks() {
    let tmp = tempfile::tempdir().unwrap();
    let (partition, timer) = open(tmp.path());
    let ids = store_due(&timer, 12);
    // Eight assigned and appended (more than the partition remembers per producer), then a
    // crash before their marks; four more assigned and the crash comes before their append.
    assign(&timer, &ids[..8], 0);
    let appended = append_assigned(PRODUCER_ID_END, &timer).unwrap();
    assert_eq!(appended.done, ids[..8]);
    assign(&timer, &ids[8..], 8);
    drop(timer);
    partition.log.flush().unwrap();
    drop(partition);

    let (partition, timer) = open(tmp.path());
    assert_eq!(partition.log.log_end_offset(), 8);
    let doubt: Vec<u64> =
        timer.with_log(|log| log.state().in_doubt().iter().map(|w| w.entry_id).collect());
    assert_eq!(
        doubt, ids,
        "every assigned entry without its mark is in doubt"
    );
    let replayed = append_assigned(PRODUCER_ID_END, &timer).unwrap();
    assert_eq!(
        replayed.done, ids,
        "all done: eight found written, four appended"
    );
    assert!(!replayed.renew);
    assert_eq!(partition.log.log_end_offset(), 12, "nothing appended twice");
    // A second replay (the marks lost again) finds everything written.
    let again = append_assigned(PRODUCER_ID_END, &timer).unwrap();
    assert_eq!(again.done, ids);
    assert_eq!(partition.log.log_end_offset(), 12);
}

#[test]
fn an_entry_whose_producer_the_partition_forgot_gets_a_new_identity() {
    let tmp = tempfile::tempdir().unwrap();
    let (partition, timer) = open(tmp.path());
    let ids = store_due(&timer, 2);
    // Sequence 5 from a producer the partition never saw: nothing of it can be there.
    assign(&timer, &ids, 5);
    let outcome = append_assigned(PRODUCER_ID_END, &timer).unwrap();
    assert!(outcome.done.is_empty() && outcome.renew);
    assert_eq!(partition.log.log_end_offset(), 0);
    assert!(
        timer.with_log(|log| log.state().in_doubt().is_empty()),
        "unassigned, to be given a new identity"
    );
}

#[test]
fn a_replay_after_the_partition_forgot_the_producer_finds_the_batches_in_the_log() {
    let tmp = tempfile::tempdir().unwrap();
    let (partition, timer) = open(tmp.path());
    let ids = store_due(&timer, 6);
    // Four assigned and appended, then the marks are lost; two more assigned, not appended.
    assign(&timer, &ids[..4], 0);
    let appended = append_assigned(PRODUCER_ID_END, &timer).unwrap();
    assert_eq!(appended.done, ids[..4]);
    assign(&timer, &ids[4..], 4);
    // A day later the partition no longer knows the producer (expiry at open, or followers'
    // replication).
    let day_later = now_ms() + crate::producer_state::PRODUCER_ID_EXPIRATION_MS + 60_000;
    partition.producers.lock().expire(day_later);
    assert!(partition.producers.lock().is_empty());

    let replayed = append_assigned(PRODUCER_ID_END, &timer).unwrap();
    assert_eq!(
        replayed.done,
        ids[..4],
        "the four written are found in the log, not appended again"
    );
    assert_eq!(partition.log.log_end_offset(), 4, "nothing appended twice");
    assert!(replayed.renew, "the two not written get a new identity");
    let doubt: Vec<u64> =
        timer.with_log(|log| log.state().in_doubt().iter().map(|w| w.entry_id).collect());
    assert_eq!(doubt, ids[..4], "only the unwritten two were unassigned");
}

#[test]
fn a_first_sequence_of_a_forgotten_producer_is_found_in_the_log_too() {
    let tmp = tempfile::tempdir().unwrap();
    let (partition, timer) = open(tmp.path());
    let ids = store_due(&timer, 1);
    assign(&timer, &ids, 0);
    assert_eq!(append_assigned(PRODUCER_ID_END, &timer).unwrap().done, ids);
    partition.producers.lock().expire(i64::MAX / 2);
    // Sequence 0 of an unknown producer is "append" to the producer state: only the log
    // tells it was written.
    let replayed = append_assigned(PRODUCER_ID_END, &timer).unwrap();
    assert_eq!(replayed.done, ids);
    assert_eq!(partition.log.log_end_offset(), 1, "nothing appended twice");
}

#[test]
fn a_round_stops_appending_once_the_timer_is_stopped() {
    let tmp = tempfile::tempdir().unwrap();
    let (partition, timer) = open(tmp.path());
    let ids = store_due(&timer, 3);
    assign(&timer, &ids, 0);
    timer.stop();
    let outcome = append_assigned(PRODUCER_ID_END, &timer).unwrap();
    assert!(outcome.done.is_empty() && outcome.last.is_none());
    assert_eq!(
        partition.log.log_end_offset(),
        0,
        "no leader batch after the end"
    );
}

/// A timer on a partition whose files all go through `storage`.
fn open_on(storage: &FaultyStorage) -> (Arc<Partition>, PartitionTimer) {
    let settings = TopicSettings::default();
    let storage: Arc<dyn Storage> = Arc::new(storage.clone());
    let partition =
        Partition::open_with(Path::new("/data"), "t", 0, &settings, false, storage).unwrap();
    let partition = Arc::new(partition);
    let timer = PartitionTimer::open(partition.clone(), 0).unwrap();
    (partition, timer)
}

fn a_client() -> tinymq_delay::ClientIdentity {
    tinymq_delay::ClientIdentity {
        producer_id: -1,
        producer_epoch: -1,
        first_sequence: -1,
        last_sequence: -1,
    }
}

/// Issue 28: a failing disk (ENOSPC, a torn write, EIO on the fsync) refuses the store with
/// `STORAGE_ERROR` (no panic), stops the timer, and a restart after a power cut has every
/// store acknowledged before.
#[test]
fn a_timer_whose_log_write_or_fsync_fails_stops_and_its_log_reopens_whole() {
    for fault in Faults::each_write_fault(5) {
        let fs = FaultyStorage::new();
        let (partition, timer) = open_on(&fs);
        let ids = store_due(&timer, 2);
        // Acknowledged: a delayed produce is answered after this fsync.
        timer.sync(timer.append(&[]).unwrap()).unwrap();
        fs.set_faults(fault.clone());
        let batch = CraftedBatch::honest(now_ms(), &[b"x".as_slice()]).encode();
        let failed = timer.store(a_client(), batch, 0).and_then(|(_, ticket)| {
            timer
                .sync(ticket)
                .map_err(|e| (ErrorCode::STORAGE_ERROR, e.to_string()))
        });
        let (code, message) = failed.unwrap_err();
        assert_eq!(code, ErrorCode::STORAGE_ERROR, "{fault:?}: {message}");
        assert!(
            timer.stopped_itself(),
            "{fault:?}: a failed write stops the timer"
        );
        assert!(
            timer.append(&[]).is_err(),
            "nothing more is written through it"
        );
        fs.set_faults(Faults::default());
        drop(timer);
        drop(partition);
        fs.crash(CrashMode::LoseUnsynced);
        let (_partition, timer) = open_on(&fs);
        let waiting: Vec<u64> =
            timer.with_log(|log| log.state().index().iter().map(|w| w.entry_id).collect());
        assert_eq!(
            waiting, ids,
            "{fault:?}: the reopened log has what was acknowledged"
        );
    }
}

#[test]
fn a_recorded_offset_above_the_log_end_means_not_written() {
    let tmp = tempfile::tempdir().unwrap();
    let (partition, timer) = open(tmp.path());
    let ids = store_due(&timer, 2);
    // Recorded on a log since truncated below it: the scan must not stall the round.
    assign_from(&timer, &ids, 0, 1_000);
    let outcome = append_assigned(PRODUCER_ID_END, &timer).unwrap();
    assert_eq!(outcome.done, ids, "appended");
    assert_eq!(partition.log.log_end_offset(), 2);
}
