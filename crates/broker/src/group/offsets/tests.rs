use super::*;

fn c(offset: i64) -> Committed {
    Committed {
        offset,
        metadata: "m".into(),
    }
}

fn tp(p: u32) -> Tp {
    ("t".into(), p)
}

/// A group whose offsets partition is `partition`.
fn group_on(partition: u32) -> String {
    (0..)
        .map(|i| format!("g{i}"))
        .find(|g| partition_for_group(g) == partition)
        .unwrap()
}

/// Appends a commit to `log` the way the offsets partitions were written before they were
/// replicated (`OffsetStore` owned `<data>/__consumer_offsets-N`, leader epoch 0).
fn append(log: &PartitionLog, group: &str, changes: &[Change]) {
    let mut batch = encode_batch(group, changes, now_ms()).unwrap().to_vec();
    log.append(&mut batch, 0).unwrap();
}

#[test]
fn the_log_replays_to_the_last_value_per_key_and_tombstones_delete() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(format!("{OFFSETS_TOPIC}-0"));
    let (log, _) = PartitionLog::open(&dir, topic_settings(4, 1).log_config()).unwrap();
    append(&log, "g1", &[(tp(0), Some(c(5))), (tp(1), Some(c(7)))]);
    append(&log, "g1", &[(tp(0), Some(c(9)))]);
    append(&log, "g2", &[(tp(0), Some(c(1)))]);
    append(&log, "g2", &[(tp(0), None)]);
    log.close().unwrap();
    drop(log);
    let (log, _) = PartitionLog::open(&dir, topic_settings(4, 1).log_config()).unwrap();
    let loaded = read_log(&log).unwrap();
    assert_eq!(
        loaded.len(),
        1,
        "a group whose offsets are all deleted is gone"
    );
    let g1 = &loaded["g1"].offsets;
    assert_eq!(g1[&tp(0)], c(9));
    assert_eq!(g1[&tp(1)], c(7));
}

#[test]
fn the_offsets_topic_is_not_compacted() {
    // Offsets committed in a transaction are plain records; see `topic_settings`.
    assert!(!topic_settings(4, 1).log_config().cleanup.compacts());
}

#[test]
fn offsets_are_served_only_once_loaded_and_only_in_the_epoch_loaded() {
    let store = OffsetStore::default();
    let g = group_on(2);
    assert_eq!(store.loaded_since(2, 5), None);
    assert!(store.begin_load(2, 5));
    assert!(!store.begin_load(2, 5), "already loading in this epoch");
    assert_eq!(store.loaded_since(2, 5), None, "still loading");
    let refused = store.append(&g, 5, vec![], || Ok(((), 1))).unwrap_err();
    assert_eq!(refused.error_code(), ErrorCode::NOT_COORDINATOR);

    let mut loaded = LoadedOffsets::new();
    loaded
        .entry(g.clone())
        .or_default()
        .offsets
        .insert(tp(0), c(3));
    assert!(
        !store.finish_load(2, 4, loaded.clone()),
        "a load of an older epoch is dropped"
    );
    assert!(store.finish_load(2, 5, loaded));
    assert!(store.loaded_since(2, 5).is_some());
    assert_eq!(
        store.loaded_since(2, 6),
        None,
        "another epoch is not loaded"
    );
    assert_eq!(store.all(&g)[&tp(0)], c(3));
    assert_eq!(store.led(), [(2, 5)].into());
    let (bytes, _) = store.growth(&g, &[]);
    assert!(bytes > 0);

    // A new epoch (leadership lost and regained) starts from the log again.
    assert!(store.begin_load(2, 6));
    assert!(store.all(&g).is_empty());
    assert_eq!(store.growth(&g, &[]).0, 0);
}

#[test]
fn losing_leadership_drops_only_that_partitions_groups() {
    let store = OffsetStore::default();
    let (a, b) = (group_on(0), group_on(1));
    for (p, g) in [(0, &a), (1, &b)] {
        store.begin_load(p, 1);
        let mut loaded = LoadedOffsets::new();
        loaded
            .entry(g.clone())
            .or_default()
            .offsets
            .insert(tp(0), c(1));
        store.finish_load(p, 1, loaded);
    }
    store.drop_partition(0);
    assert!(store.all(&a).is_empty());
    assert!(!store.has_offsets(&a));
    assert_eq!(store.all(&b)[&tp(0)], c(1));
    assert_eq!(store.groups(), vec![b.clone()]);
    assert_eq!(store.led(), [(1, 1)].into());
    let refused = store.append(&a, 1, vec![], || Ok(((), 1))).unwrap_err();
    assert_eq!(refused.error_code(), ErrorCode::NOT_COORDINATOR);
}

#[test]
fn staged_commits_reach_memory_in_log_order_once_the_high_watermark_passes_them() {
    let store = OffsetStore::default();
    let g = group_on(3);
    store.begin_load(3, 1);
    store.finish_load(3, 1, LoadedOffsets::new());
    store
        .append(&g, 1, vec![(tp(0), Some(c(10)))], || Ok(((), 1)))
        .unwrap();
    store
        .append(&g, 1, vec![(tp(0), Some(c(20)))], || Ok(((), 2)))
        .unwrap();
    store
        .append(&g, 1, vec![(tp(0), None)], || Ok(((), 3)))
        .unwrap();
    let failed = store.append(&g, 1, vec![(tp(0), Some(c(99)))], || {
        Err::<((), i64), _>(ErrorCode::STORAGE_ERROR.to_wire())
    });
    assert!(failed.is_err(), "a failed write stages nothing");
    assert!(
        store.all(&g).is_empty(),
        "nothing is visible below the high watermark"
    );
    // The waiter of the second write is woken first: the first still applies before it.
    store.apply_up_to(3, 1, 2);
    assert_eq!(store.all(&g)[&tp(0)], c(20));
    store.apply_up_to(3, 1, 1);
    assert_eq!(
        store.all(&g)[&tp(0)],
        c(20),
        "an applied write is not applied again"
    );
    store.apply_up_to(3, 2, 3);
    assert_eq!(
        store.all(&g)[&tp(0)],
        c(20),
        "another epoch's high watermark is ignored"
    );
    store.apply_up_to(3, 1, 3);
    assert!(store.all(&g).is_empty(), "the tombstone applies last");
    assert_eq!(store.growth(&g, &[]).0, 0, "its bytes are freed");
}
