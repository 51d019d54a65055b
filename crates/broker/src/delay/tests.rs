//! Exactly once across a crash between the append and the `Delivered` mark: the scheduler's
//! replay after a restart (timer log and partition both reopened, the producer state rebuilt
//! from the log) appends only what is not in the partition yet.

use std::sync::Arc;

use tinymq_delay::{Entry, SchedulerStamp};
use tinymq_protocol::batch::craft::CraftedBatch;

use super::scheduler::append_assigned;
use super::timer::PartitionTimer;
use crate::partition::{now_ms, Partition};
use crate::topic::TopicSettings;

const PRODUCER_ID_END: i64 = 100;
const SCHEDULER_ID: i64 = 42;

fn open(dir: &std::path::Path) -> (Arc<Partition>, PartitionTimer) {
    let settings = TopicSettings::default();
    let partition = Arc::new(Partition::open(dir, "t", 0, &settings, false).unwrap());
    let timer = PartitionTimer::open(partition.clone(), 1).unwrap();
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
