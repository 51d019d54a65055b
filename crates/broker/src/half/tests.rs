//! The rules of checks and expiry, and the replay of a partition.

use std::sync::Arc;

use bytes::Bytes;
use tinymq_log::{LogConfig, PartitionLog, SystemClock};
use tinymq_protocol::batch::{BatchBuilder, Compression, ProducerStamp, RecordBatch, RecordInput};
use tinymq_protocol::messages as m;
use tinymq_storage::OsStorage;

use super::log::{encode_batch, read_log};
use super::store::{CheckRules, Half, HalfPhase, HalfStore, Outcome, PartitionHalves, Resolved};

const RULES: CheckRules = CheckRules {
    interval_ms: 1_000,
    checks_max: 3,
};

fn records() -> Bytes {
    let mut b = BatchBuilder::new(Compression::None, ProducerStamp::NONE);
    b.push(&RecordInput {
        timestamp_ms: 1,
        key: Some(b"k"),
        value: Some(b"v"),
        headers: &[],
    });
    b.build().unwrap()
}

fn stored(group: &str, first_check_ms: i64) -> m::HalfStored {
    m::HalfStored {
        group: group.into(),
        topic: "t".into(),
        partition: 0,
        records: records(),
        stored_ms: first_check_ms - 100,
        first_check_ms,
        request_id: format!("r{first_check_ms}-{group}"),
        topic_id: 4,
    }
}

fn halves(entries: &[(i64, &str, i64)]) -> PartitionHalves {
    let mut p = PartitionHalves::default();
    for (id, group, first) in entries {
        let mut s = stored(group, *first);
        s.request_id = format!("req-{id}");
        p.insert(*id, Half::stored(group.to_string(), s));
    }
    p
}

#[test]
fn a_half_is_offered_only_to_its_group_when_due_then_every_interval() {
    let mut p = halves(&[(1, "a", 1_000), (2, "b", 1_000), (3, "a", 5_000)]);
    assert!(p.take_due("a", 999, 10, &RULES, |_| true).is_empty());
    let due = p.take_due("a", 1_000, 10, &RULES, |_| true);
    assert_eq!(due.iter().map(|(id, _)| *id).collect::<Vec<_>>(), vec![1]);
    assert_eq!(due[0].1.checks, 1);
    // Not again before the interval passes.
    assert!(p.take_due("a", 1_500, 10, &RULES, |_| true).is_empty());
    assert_eq!(p.next_due_ms("a", &RULES), Some(2_000));
    assert_eq!(p.take_due("a", 2_000, 10, &RULES, |_| true).len(), 1);
    // A member that may not write the topic is not offered it.
    assert!(p.take_due("b", 2_000, 10, &RULES, |_| false).is_empty());
    assert_eq!(p.take_due("b", 2_000, 10, &RULES, |_| true).len(), 1);
}

#[test]
fn unanswered_checks_and_the_deadline_roll_a_half_back() {
    let mut p = halves(&[(1, "a", 1_000), (2, "a", 1_000)]);
    // Half 1 is offered three times; half 2 never (nobody polls for it... it is busy).
    p.get_mut(2).unwrap().busy = true;
    for now in [1_000, 2_000, 3_000] {
        assert_eq!(p.take_due("a", now, 10, &RULES, |_| true).len(), 1);
    }
    assert!(p.take_due("a", 4_000, 10, &RULES, |_| true).is_empty());
    assert!(p.expired(3_999, &RULES).is_empty());
    assert_eq!(p.expired(4_000, &RULES), vec![(1, "checks exhausted")]);
    // Without any check, the deadline: first check + 3 intervals.
    let p = halves(&[(7, "a", 1_000)]);
    assert!(p.expired(3_999, &RULES).is_empty());
    assert_eq!(p.expired(4_000, &RULES), vec![(7, "lifetime")]);
}

#[test]
fn recent_outcomes_are_bounded_and_kept_per_group_and_topic() {
    let mut p = PartitionHalves::default();
    let resolved = |group: &str, outcome| Resolved {
        group: group.into(),
        topic: "t".into(),
        outcome,
    };
    p.remember(1, resolved("a", Outcome::Committed { base_offset: 5 }));
    assert_eq!(
        p.outcome(1, "a", "t"),
        Some(&Outcome::Committed { base_offset: 5 })
    );
    assert_eq!(p.outcome(1, "b", "t"), None);
    assert_eq!(p.outcome(1, "a", "u"), None, "only to writers of its topic");
    for id in 2..(super::store::HALF_RECENT_OUTCOMES_MAX as i64 + 2) {
        p.remember(
            id,
            resolved("a", Outcome::RolledBack { reason: "x".into() }),
        );
    }
    assert_eq!(p.outcome(1, "a", "t"), None);
}

#[test]
fn counts_bytes_and_request_ids_follow_inserts_and_removes() {
    let mut p = halves(&[(1, "a", 1_000), (2, "a", 1_000), (3, "b", 1_000)]);
    let one = records().len();
    assert_eq!((p.len(), p.bytes()), (3, 3 * one));
    assert_eq!(p.group_usage("a"), (2, 2 * one));
    assert_eq!(p.request("a", "req-2"), Some(2));
    assert_eq!(p.request("b", "req-2"), None, "request ids are per group");
    assert_eq!(p.request("a", ""), None, "an empty request id is none");
    p.remove(2).unwrap();
    assert_eq!(p.group_usage("a"), (1, one));
    assert_eq!(p.group_usage("b"), (1, one));
    // A retry after the half was resolved still finds which half it stored.
    assert_eq!(p.request("a", "req-2"), Some(2));
    p.remove(1);
    p.remove(3);
    assert_eq!((p.len(), p.bytes(), p.group_usage("a")), (0, 0, (0, 0)));
}

#[test]
fn the_store_answers_only_for_loaded_partitions_in_their_epoch() {
    let store = HalfStore::default();
    assert!(store.with(0, None, |_| ()).is_err());
    assert!(store.begin_load(0, 3));
    assert!(!store.begin_load(0, 3));
    assert!(store.with(0, None, |_| ()).is_err());
    assert!(store.finish_load(0, 3, Default::default()));
    assert!(store.with(0, Some(3), |_| ()).is_ok());
    assert!(store.with(0, Some(4), |_| ()).is_err());
    // A load of an older epoch does not replace a newer one.
    assert!(store.begin_load(0, 5));
    assert!(!store.finish_load(0, 3, Default::default()));
}

#[test]
fn replay_keeps_what_is_unresolved() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = PartitionLog::open_with(
        dir.path(),
        LogConfig::default(),
        Arc::new(OsStorage),
        Arc::new(SystemClock),
    )
    .unwrap();
    use m::half_log_record::Entry;
    let resolved = |id, commit| {
        Entry::Resolved(m::HalfResolved {
            half_id: id,
            commit,
            reason: "producer".into(),
            scan_from: 9,
            topic_id: 4,
            nonce: 77,
        })
    };
    let writes = [
        Entry::Stored(stored("g", 10)), // 0: rolled back
        Entry::Stored(stored("g", 10)), // 1: delivered
        Entry::Stored(stored("g", 10)), // 2: committing
        Entry::Stored(stored("g", 10)), // 3: pending
        resolved(0, false),
        resolved(1, true),
        resolved(2, true),
        Entry::Delivered(m::HalfDelivered {
            half_id: 1,
            base_offset: 77,
        }),
    ];
    for entry in writes {
        let batch = RecordBatch::parse(encode_batch("g", entry, 7).unwrap()).unwrap();
        log.write_batch(&batch, 0).unwrap();
    }
    let loaded = read_log(&log).unwrap();
    assert_eq!(
        loaded.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        vec![2, 3]
    );
    assert_eq!(
        loaded.get(2).unwrap().phase,
        HalfPhase::Committing {
            scan_from: 9,
            topic_id: 4,
            nonce: 77
        }
    );
    assert_eq!(loaded.get(3).unwrap().phase, HalfPhase::Pending);
    assert_eq!(loaded.get(3).unwrap().record_count, 1);
    assert_eq!(
        loaded.outcome(0, "g", "t"),
        Some(&Outcome::RolledBack {
            reason: "producer".into()
        })
    );
    assert_eq!(
        loaded.outcome(1, "g", "t"),
        Some(&Outcome::Committed { base_offset: 77 })
    );
    // Every stored half's request id is known again (retries after a failover).
    assert_eq!(
        loaded.request("g", "r10-g"),
        Some(3),
        "the last with that id"
    );
}
