//! Transactions on a real partition: markers, the last stable offset and aborted list, and
//! that every way the state is rebuilt (a clean close, a crash, a damaged snapshot, a
//! follower's appends, a truncation, retention) gives what the writes gave.

use std::path::Path;

use tinymq_protocol::batch::craft::CraftedBatch;
use tinymq_protocol::batch::ATTR_TRANSACTIONAL;

use super::super::{Partition, ProduceContext, PRODUCER_STATE_FILE};
use super::*;
use crate::partition_txns::PartitionTxns;
use crate::topic::TopicSettings;

fn data(producer: i64, epoch: i16, sequence: i32, transactional: bool) -> Bytes {
    let mut b = CraftedBatch::honest(now_ms(), &[b"a", b"b"]);
    (b.producer_id, b.producer_epoch, b.base_sequence) = (producer, epoch, sequence);
    if transactional {
        b.attributes = ATTR_TRANSACTIONAL;
    }
    b.encode()
}

fn context() -> ProduceContext {
    ProduceContext {
        leader_epoch: 1,
        producer_id_end: 1_000,
        now_ms: now_ms(),
    }
}

/// Writes and finishes a batch; its base offset. A transactional batch that would open a
/// transaction is marked verified first, as its coordinator's confirmation would.
fn write(p: &Partition, records: Bytes) -> Result<i64, PartitionError> {
    let header = tinymq_protocol::batch::BatchHeader::new(&records).unwrap();
    if header.is_transactional() {
        p.txn_verified(header.producer_id(), header.producer_epoch())?;
    }
    write_unverified(p, records)
}

fn write_unverified(p: &Partition, records: Bytes) -> Result<i64, PartitionError> {
    let pending = p.write(records, 1 << 20, context())?;
    p.finish(pending)
}

fn mark(
    p: &Partition,
    producer: i64,
    epoch: i16,
    marker: MarkerType,
) -> Result<i64, PartitionError> {
    let write = MarkerWrite {
        producer_id: producer,
        producer_epoch: epoch,
        marker,
        coordinator_epoch: 3,
    };
    let pending = p.append_marker(&write, 1)?;
    p.finish(pending)
}

fn open(dir: &Path) -> Partition {
    Partition::open(dir, "t", 0, &TopicSettings::default(), false).unwrap()
}

fn txns(p: &Partition) -> PartitionTxns {
    p.producers.lock().txns().clone()
}

/// Producer 1 commits 0..=1, producer 2 aborts 2..=3 and 6..=7 around producer 1's open
/// transaction at 5..: offsets 0-1 p1, 2-3 p2, 4 p1 COMMIT, 5-6 p1 (open), 7-8 p2, 9 p2
/// ABORT, 10-11 plain.
fn scenario(p: &Partition) {
    assert_eq!(write(p, data(1, 0, 0, true)).unwrap(), 0);
    assert_eq!(write(p, data(2, 0, 0, true)).unwrap(), 2);
    assert_eq!(p.last_stable_offset(), 0, "two open transactions");
    assert_eq!(mark(p, 1, 0, MarkerType::Commit).unwrap(), 4);
    assert_eq!(p.last_stable_offset(), 2);
    assert_eq!(write(p, data(1, 0, 2, true)).unwrap(), 5);
    assert_eq!(write(p, data(2, 0, 2, true)).unwrap(), 7);
    assert_eq!(mark(p, 2, 0, MarkerType::Abort).unwrap(), 9);
    assert_eq!(write(p, data(-1, -1, -1, false)).unwrap(), 10);
}

fn check_scenario(p: &Partition) {
    assert_eq!(p.high_watermark(), 12);
    assert_eq!(
        p.last_stable_offset(),
        5,
        "producer 1's transaction is open at 5"
    );
    assert_eq!(p.aborted_in_range(0, 12), vec![(2, 2)]);
    assert_eq!(
        p.aborted_in_range(0, 2),
        vec![],
        "the aborted records start at 2"
    );
    assert_eq!(
        p.aborted_in_range(10, 12),
        vec![],
        "its marker is below the fetch"
    );
    let t = txns(p);
    assert_eq!(
        t.ongoing(1).map(|o| (o.first_offset, o.last_offset)),
        Some((5, 6))
    );
    assert!(!t.is_open(2));
}

#[test]
fn markers_close_transactions_and_bound_read_committed() {
    let tmp = tempfile::tempdir().unwrap();
    let p = open(tmp.path());
    scenario(&p);
    check_scenario(&p);
    // Closing the last one lets everything below the high watermark be read.
    assert_eq!(mark(&p, 1, 0, MarkerType::Commit).unwrap(), 12);
    assert_eq!(p.last_stable_offset(), 13);
}

#[test]
fn a_marker_below_the_known_epoch_is_fenced_and_a_higher_one_restarts_sequences() {
    let tmp = tempfile::tempdir().unwrap();
    let p = open(tmp.path());
    write(&p, data(1, 2, 0, true)).unwrap();
    let fenced = mark(&p, 1, 1, MarkerType::Abort).unwrap_err();
    assert_eq!(
        fenced.code,
        ErrorCode::INVALID_PRODUCER_EPOCH,
        "{}",
        fenced.message
    );
    assert_eq!(p.log.log_end_offset(), 2, "nothing written");
    assert_eq!(mark(&p, 1, 3, MarkerType::Abort).unwrap(), 2);
    let stale = write(&p, data(1, 2, 2, true)).unwrap_err();
    assert_eq!(stale.code, ErrorCode::INVALID_PRODUCER_EPOCH);
    let gap = write(&p, data(1, 3, 2, true)).unwrap_err();
    assert_eq!(gap.code, ErrorCode::OUT_OF_ORDER_SEQUENCE);
    assert_eq!(write(&p, data(1, 3, 0, true)).unwrap(), 3);
}

#[test]
fn producers_may_not_send_control_batches_or_transactions_without_idempotence() {
    let tmp = tempfile::tempdir().unwrap();
    let p = open(tmp.path());
    let marker = encode_marker(1, 0, MarkerType::Commit, 0, now_ms());
    assert_eq!(
        write(&p, marker).unwrap_err().code,
        ErrorCode::INVALID_RECORD
    );
    let plain_txn = data(-1, -1, -1, true);
    assert_eq!(
        write(&p, plain_txn).unwrap_err().code,
        ErrorCode::INVALID_RECORD
    );
    assert_eq!(p.log.log_end_offset(), 0);
}

#[test]
fn the_state_survives_a_clean_close_a_crash_and_a_damaged_snapshot() {
    let tmp = tempfile::tempdir().unwrap();
    let p = open(tmp.path());
    scenario(&p);
    let expected = txns(&p);
    p.close().unwrap();
    drop(p);
    let snapshot = tmp.path().join("t-0").join(PRODUCER_STATE_FILE);
    assert!(std::fs::read_to_string(&snapshot)
        .unwrap()
        .contains("aborted"));
    let p = open(tmp.path());
    assert_eq!(txns(&p), expected, "from the snapshot");
    check_scenario(&p);
    // More after the snapshot, then a crash (no close): the snapshot plus a replay.
    assert_eq!(write(&p, data(3, 0, 0, true)).unwrap(), 12);
    assert_eq!(mark(&p, 3, 0, MarkerType::Abort).unwrap(), 14);
    let expected = txns(&p);
    drop(p);
    let p = open(tmp.path());
    assert_eq!(txns(&p), expected, "snapshot and replay");
    drop(p);
    // A damaged snapshot: the whole log is replayed, to the same state.
    let mut bytes = std::fs::read(&snapshot).unwrap();
    let last = bytes.len() - 2;
    bytes[last] ^= 0x55;
    std::fs::write(&snapshot, bytes).unwrap();
    let p = open(tmp.path());
    assert_eq!(txns(&p), expected, "replayed whole");
    assert_eq!(p.aborted_in_range(0, 15), vec![(2, 2), (3, 12)]);
    drop(p);
    std::fs::remove_file(&snapshot).unwrap();
    let p = open(tmp.path());
    assert_eq!(txns(&p), expected, "no snapshot at all");
}

#[test]
fn a_snapshot_from_before_transactions_loads() {
    let tmp = tempfile::tempdir().unwrap();
    let p = open(tmp.path());
    write(&p, data(5, 0, 0, false)).unwrap();
    p.close().unwrap();
    drop(p);
    // The format written before transactions: no `txns` field in the table.
    let json = format!(
        r#"{{"offset":2,"last_batch_crc":{},"table":{{"producers":{{"5":{{"epoch":0,"batches":[{{"first_sequence":0,"last_sequence":1,"base_offset":0,"last_offset":1}}],"last_write_ms":{}}}}}}}}}"#,
        crc_of(&open_log(tmp.path())),
        now_ms()
    );
    let mut file = format!("{:08x}\n", crc32c::crc32c(json.as_bytes())).into_bytes();
    file.extend_from_slice(json.as_bytes());
    std::fs::write(tmp.path().join("t-0").join(PRODUCER_STATE_FILE), file).unwrap();
    let p = open(tmp.path());
    assert_eq!(txns(&p), PartitionTxns::default());
    // The snapshot was used: a retry of the batch is a duplicate.
    assert_eq!(write(&p, data(5, 0, 0, false)).unwrap(), 0);
}

fn open_log(dir: &Path) -> Partition {
    open(dir)
}

fn crc_of(p: &Partition) -> u32 {
    super::super::crc_of_batch_ending_at(&p.log, 2).unwrap()
}

#[test]
fn a_follower_applies_what_its_leader_wrote_and_leads_with_it() {
    let (leader_dir, follower_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let leader = open(leader_dir.path());
    scenario(&leader);
    let follower =
        Partition::open(follower_dir.path(), "t", 0, &TopicSettings::default(), true).unwrap();
    // In two fetches, split between the COMMIT and the ABORT.
    let first = leader.log.read(0, 1 << 20, Some(5)).unwrap().records;
    follower.append_from_leader(first, 5).unwrap();
    assert!(follower.producers.lock().txns().is_open(2));
    let rest = leader.log.read(5, 1 << 20, None).unwrap().records;
    follower.append_from_leader(rest, 12).unwrap();
    assert_eq!(txns(&follower), txns(&leader));
    check_scenario(&follower);
    // Promoted: it closes the open transaction as the old leader would have.
    assert_eq!(mark(&follower, 1, 0, MarkerType::Abort).unwrap(), 12);
    assert_eq!(follower.aborted_in_range(0, 13), vec![(2, 2), (1, 5)]);
}

#[test]
fn a_truncation_rebuilds_the_transactions_of_what_is_left() {
    let tmp = tempfile::tempdir().unwrap();
    let p = Partition::open(tmp.path(), "t", 0, &TopicSettings::default(), false).unwrap();
    scenario(&p);
    // Cut at the ABORT marker: producer 2's transaction is open again.
    p.truncate_for_leader(9).unwrap();
    let t = txns(&p);
    assert_eq!(t.ongoing(2).map(|o| o.first_offset), Some(2));
    assert!(t.aborted().is_empty());
    assert_eq!(p.last_stable_offset(), 2);
    p.restart_at(100).unwrap();
    assert_eq!(txns(&p), PartitionTxns::default());
}

#[test]
fn retention_forgets_aborted_transactions_below_the_log_start() {
    let tmp = tempfile::tempdir().unwrap();
    let settings = TopicSettings {
        segment_bytes: 1024,
        message_bytes_max: 512,
        ..TopicSettings::default()
    };
    let p = Partition::open(tmp.path(), "t", 0, &settings, false).unwrap();
    // Each producer aborts once (offsets 3i-3, 3i-2, marker at 3i-1); enough of them to fill
    // several 1 KiB segments.
    for producer in 1..=20 {
        write(&p, data(producer, 0, 0, true)).unwrap();
        mark(&p, producer, 0, MarkerType::Abort).unwrap();
    }
    assert_eq!(txns(&p).aborted_count(), 20);
    let kept = TopicSettings {
        retention_bytes: 2048,
        ..settings
    };
    p.apply_settings(&kept).unwrap();
    let start = p.log.log_start_offset();
    assert!(start > 0, "retention removed segments");
    let aborted = txns(&p);
    assert!(aborted.aborted_count() < 20);
    assert!(aborted.aborted().iter().all(|a| a.last_offset >= start));
    assert_eq!(
        aborted.aborted().len(),
        (1..=20).filter(|i| 3 * i > start).count(),
        "exactly those whose marker is still in the log"
    );
}

#[test]
fn a_transaction_opens_only_once_verified_and_a_marker_revokes_the_verification() {
    let tmp = tempfile::tempdir().unwrap();
    let p = open(tmp.path());
    let refused = write_unverified(&p, data(1, 0, 0, true)).unwrap_err();
    assert_eq!(refused.code, ErrorCode::INVALID_TXN_STATE, "{refused:?}");
    assert_eq!(p.log.log_end_offset(), 0, "nothing written");
    // Verified, then the transaction ends (say, aborted at its timeout) before the batch
    // arrives: the late batch must not open a transaction nobody will end.
    p.txn_verified(1, 0).unwrap();
    assert!(!p.needs_txn_verification(1, 0));
    mark(&p, 1, 0, MarkerType::Abort).unwrap();
    assert!(p.needs_txn_verification(1, 0));
    let late = write_unverified(&p, data(1, 0, 0, true)).unwrap_err();
    assert_eq!(late.code, ErrorCode::INVALID_TXN_STATE);
    // Verified in another epoch does not count either.
    p.txn_verified(1, 0).unwrap();
    assert!(p.needs_txn_verification(1, 1));
    // Verified and written: the open transaction lets its next batches through.
    assert_eq!(write_unverified(&p, data(1, 0, 0, true)).unwrap(), 1);
    assert!(!p.needs_txn_verification(1, 0));
    assert_eq!(write_unverified(&p, data(1, 0, 2, true)).unwrap(), 3);
    assert_eq!(p.last_stable_offset(), 1);
}
