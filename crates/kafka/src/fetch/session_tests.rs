//! The session bookkeeping without a broker: what each kind of request reads and answers.

use kafka_protocol::protocol::StrBytes;

use super::*;

fn alice() -> Principal {
    "User:alice".parse().unwrap()
}

fn key(index: i32) -> Key {
    Key {
        topic: TopicRef::Name(TopicName(StrBytes::from_static_str("t"))),
        index,
    }
}

fn wanted(index: i32, fetch_offset: i64) -> Wanted {
    Wanted {
        key: key(index),
        fetch_offset,
        partition_max_bytes: 1 << 20,
    }
}

fn request(session_id: i32, epoch: i32, partitions: Vec<Wanted>) -> SessionRequest {
    SessionRequest {
        session_id,
        epoch,
        topic_ids: false,
        partitions,
        forgotten: vec![],
    }
}

fn quiet(high_watermark: i64) -> Outcome {
    Outcome {
        told: Told {
            high_watermark,
            last_stable_offset: high_watermark,
            log_start_offset: 0,
        },
        error: false,
        has_records: false,
    }
}

fn with_records(high_watermark: i64) -> Outcome {
    Outcome {
        has_records: true,
        ..quiet(high_watermark)
    }
}

/// A session of partitions 0..count, all at high watermark 10; its id.
fn created(sessions: &FetchSessions, count: i32, now: Instant) -> i32 {
    let partitions = (0..count).map(|i| wanted(i, 10)).collect();
    let opened = sessions
        .open(&alice(), request(0, 0, partitions), now)
        .unwrap();
    assert_eq!(opened.kind, Kind::Create);
    let outcomes = vec![quiet(10); count as usize];
    let (id, include) = sessions.finish(&alice(), &opened, &all(&opened), &outcomes, now);
    assert!(
        include.iter().all(|i| *i),
        "a full fetch answers every partition"
    );
    id
}

/// Every partition of `opened`, as read indexes.
fn all(opened: &Opened) -> Vec<usize> {
    (0..opened.partitions.len()).collect()
}

fn indexes(opened: &Opened) -> Vec<i32> {
    opened.partitions.iter().map(|w| w.key.index).collect()
}

#[test]
fn an_incremental_fetch_reads_the_session_and_answers_only_news() {
    let sessions = FetchSessions::new(FETCH_SESSIONS_MAX);
    let now = Instant::now();
    let id = created(&sessions, 3, now);
    assert!(id > 0);
    // Partition 1 moved on; 0 and 2 are not named.
    let opened = sessions
        .open(&alice(), request(id, 1, vec![wanted(1, 12)]), now)
        .unwrap();
    assert_eq!(opened.kind, Kind::Incremental { id });
    assert_eq!(indexes(&opened), vec![0, 1, 2]);
    assert_eq!(opened.partitions[1].fetch_offset, 12);
    assert_eq!(opened.partitions[0].fetch_offset, 10, "kept from before");
    // 0 is unchanged, 1 has records, 2's high watermark moved.
    let outcomes = [quiet(10), with_records(15), quiet(11)];
    let (answered_id, include) = sessions.finish(&alice(), &opened, &all(&opened), &outcomes, now);
    assert_eq!(answered_id, id);
    assert_eq!(include, vec![false, true, true]);
    // The partition that returned records is read last next time.
    let opened = sessions
        .open(&alice(), request(id, 2, vec![]), now)
        .unwrap();
    assert_eq!(indexes(&opened), vec![0, 2, 1]);
    let outcomes = [quiet(10), quiet(11), quiet(15)];
    let (_, include) = sessions.finish(&alice(), &opened, &all(&opened), &outcomes, now);
    assert_eq!(include, vec![false, false, false], "nothing moved");
}

#[test]
fn partitions_are_added_and_forgotten_and_a_new_one_is_always_answered() {
    let sessions = FetchSessions::new(FETCH_SESSIONS_MAX);
    let now = Instant::now();
    let id = created(&sessions, 2, now);
    let mut asked = request(id, 1, vec![wanted(5, 0)]);
    asked.forgotten = vec![key(0)];
    let opened = sessions.open(&alice(), asked, now).unwrap();
    assert_eq!(indexes(&opened), vec![1, 5]);
    assert_eq!(sessions.len(), (1, 2));
    let (_, include) = sessions.finish(&alice(), &opened, &[0, 1], &[quiet(10), quiet(0)], now);
    assert_eq!(include, vec![false, true]);
}

#[test]
fn a_wrong_epoch_an_unknown_session_or_another_user_is_refused() {
    let sessions = FetchSessions::new(FETCH_SESSIONS_MAX);
    let now = Instant::now();
    let id = created(&sessions, 1, now);
    let refused = |session_id, epoch, owner: &Principal| {
        sessions
            .open(owner, request(session_id, epoch, vec![]), now)
            .unwrap_err()
    };
    assert_eq!(refused(id, 2, &alice()), K::InvalidFetchSessionEpoch.code());
    assert_eq!(
        refused(id + 1, 1, &alice()),
        K::FetchSessionIdNotFound.code()
    );
    assert_eq!(refused(0, 1, &alice()), K::FetchSessionIdNotFound.code());
    let bob: Principal = "User:bob".parse().unwrap();
    assert_eq!(refused(id, 1, &bob), K::FetchSessionIdNotFound.code());
    // Bob's full fetch naming alice's session does not close it.
    sessions.open(&bob, request(id, -1, vec![]), now).unwrap();
    let mut by_id = request(id, 1, vec![]);
    by_id.topic_ids = true;
    assert_eq!(
        sessions.open(&alice(), by_id, now).unwrap_err(),
        K::FetchSessionTopicIdError.code()
    );
    assert!(sessions.open(&alice(), request(id, 1, vec![]), now).is_ok());
}

#[test]
fn a_full_fetch_naming_a_session_closes_it() {
    let sessions = FetchSessions::new(FETCH_SESSIONS_MAX);
    let now = Instant::now();
    let id = created(&sessions, 4, now);
    let opened = sessions
        .open(&alice(), request(id, -1, vec![]), now)
        .unwrap();
    assert_eq!(opened.kind, Kind::Sessionless);
    assert_eq!(sessions.len(), (0, 0));
    let (answered, _) = sessions.finish(&alice(), &opened, &[], &[], now);
    assert_eq!(answered, 0);
    let id = created(&sessions, 4, now);
    let opened = sessions
        .open(&alice(), request(id, 0, vec![wanted(0, 0)]), now)
        .unwrap();
    assert_eq!(
        sessions.len(),
        (0, 0),
        "epoch 0 closes the old one and makes another"
    );
    let (new_id, _) = sessions.finish(&alice(), &opened, &[0], &[quiet(0)], now);
    assert!(new_id > 0);
    assert_eq!(sessions.len(), (1, 1));
}

#[test]
fn with_no_slots_no_session_is_made() {
    let sessions = FetchSessions::new(0);
    assert_eq!(created(&sessions, 1, Instant::now()), 0);
}

#[test]
fn a_session_that_forgets_every_partition_ends() {
    let sessions = FetchSessions::new(FETCH_SESSIONS_MAX);
    let now = Instant::now();
    let id = created(&sessions, 1, now);
    let mut forget = request(id, 1, vec![]);
    forget.forgotten = vec![key(0)];
    let opened = sessions.open(&alice(), forget, now).unwrap();
    assert_eq!(opened.kind, Kind::Sessionless);
    assert_eq!(sessions.len(), (0, 0));
}

#[test]
fn the_epoch_wraps_to_one() {
    assert_eq!(next_epoch(1), 2);
    assert_eq!(next_epoch(i32::MAX), 1);
}

#[test]
fn a_full_cache_evicts_only_sessions_long_unused() {
    let sessions = FetchSessions::new(FETCH_SESSIONS_MAX);
    let start = Instant::now();
    for _ in 0..FETCH_SESSIONS_MAX {
        assert!(created(&sessions, 1, start) > 0);
    }
    assert_eq!(
        created(&sessions, 1, start),
        0,
        "no room: a sessionless answer"
    );
    let later = start + FETCH_SESSION_EVICTABLE_AFTER;
    assert!(
        created(&sessions, 1, later) > 0,
        "the oldest unused one made room"
    );
    assert_eq!(sessions.len().0, FETCH_SESSIONS_MAX);
}

#[test]
fn partitions_past_the_bounds_make_no_session_or_end_one() {
    let sessions = FetchSessions::new(FETCH_SESSIONS_MAX);
    let now = Instant::now();
    let too_many = FETCH_SESSION_PARTITIONS_MAX as i32 + 1;
    assert_eq!(created(&sessions, too_many, now), 0);
    let id = created(&sessions, FETCH_SESSION_PARTITIONS_MAX as i32, now);
    assert!(id > 0);
    let grown = request(id, 1, vec![wanted(too_many, 0)]);
    assert_eq!(
        sessions.open(&alice(), grown, now).unwrap_err(),
        K::FetchSessionIdNotFound.code()
    );
    assert_eq!(
        sessions.len(),
        (0, 0),
        "the session that grew too large is gone"
    );
    let twice = vec![wanted(0, 0), wanted(0, 5)];
    let opened = sessions.open(&alice(), request(0, 0, twice), now).unwrap();
    let (id, _) = sessions.finish(&alice(), &opened, &[0, 1], &[quiet(0), quiet(0)], now);
    assert_eq!(id, 0, "a partition named twice makes no session");
}

#[test]
fn all_sessions_together_hold_a_bounded_number_of_partitions() {
    let sessions = FetchSessions::new(FETCH_SESSIONS_MAX);
    let now = Instant::now();
    let per = FETCH_SESSION_PARTITIONS_MAX as i32;
    let fit = FETCH_SESSION_PARTITIONS_TOTAL_MAX / FETCH_SESSION_PARTITIONS_MAX;
    for _ in 0..fit {
        assert!(created(&sessions, per, now) > 0);
    }
    assert_eq!(created(&sessions, 1, now), 0);
    assert_eq!(sessions.len(), (fit, FETCH_SESSION_PARTITIONS_TOTAL_MAX));
}

#[test]
fn only_partitions_answered_without_error_may_skip_their_read() {
    let sessions = FetchSessions::new(FETCH_SESSIONS_MAX);
    let now = Instant::now();
    let id = created(&sessions, 3, now);
    // 1 is named (its offset moved), 3 is new.
    let opened = sessions
        .open(
            &alice(),
            request(id, 1, vec![wanted(1, 11), wanted(3, 0)]),
            now,
        )
        .unwrap();
    let told = quiet(10).told;
    assert_eq!(
        opened.last_told,
        vec![Some(told), Some(told), Some(told), None]
    );
    // Only 0 and 3 read: 0 fails, 3 answers. 1 and 2 keep what they told.
    let failed = Outcome {
        error: true,
        ..quiet(-1)
    };
    let (_, include) = sessions.finish(&alice(), &opened, &[0, 3], &[failed, quiet(0)], now);
    assert_eq!(include, vec![true, true]);
    let opened = sessions
        .open(&alice(), request(id, 2, vec![]), now)
        .unwrap();
    assert_eq!(
        opened.last_told,
        vec![None, Some(told), Some(told), Some(quiet(0).told)],
        "after an error a partition is read again"
    );
}

#[test]
fn a_partition_named_twice_in_an_incremental_fetch_is_kept_once_with_the_last_offset() {
    let sessions = FetchSessions::new(FETCH_SESSIONS_MAX);
    let now = Instant::now();
    let id = created(&sessions, 1, now);
    let twice = vec![wanted(5, 1), wanted(5, 2), wanted(0, 3), wanted(0, 4)];
    let opened = sessions.open(&alice(), request(id, 1, twice), now).unwrap();
    let offsets: Vec<_> = opened
        .partitions
        .iter()
        .map(|w| (w.key.index, w.fetch_offset))
        .collect();
    assert_eq!(offsets, vec![(0, 4), (5, 2)]);
    assert_eq!(sessions.len(), (1, 2));
}
