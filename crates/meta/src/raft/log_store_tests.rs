//! The log store against real files: torn tails are cut, damage elsewhere refuses to open and
//! says where, files of earlier versions open, purges rewrite the file, the vote persists;
//! and, on the fault-injecting storage, ENOSPC, torn writes and EIO on fsync are refused and
//! a restart after a power cut keeps what was acknowledged.

use std::path::Path;
use std::sync::Arc;

use tinymq_storage::fault::{CrashMode, Faults, FaultyStorage};
use tinymq_storage::Storage;

use openraft::storage::{RaftLogReader, RaftLogStorage};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Vote};

use super::super::log_file::{Line, LOG_FILE};
use super::{LogStore, DEAD_LINES_MAX};
use crate::raft::TypeConfig;

fn id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn entry(index: u64) -> Entry<TypeConfig> {
    Entry {
        log_id: id(1, index),
        payload: EntryPayload::Blank,
    }
}

async fn store_with(dir: &Path, indexes: std::ops::RangeInclusive<u64>) -> LogStore {
    let store = LogStore::open(dir).unwrap();
    store
        .append_entries(indexes.map(entry).collect())
        .await
        .unwrap();
    store
}

async fn indexes(store: &mut LogStore) -> Vec<u64> {
    let entries = store.try_get_log_entries(..).await.unwrap();
    entries.iter().map(|e| e.log_id.index).collect()
}

fn log_bytes(dir: &Path) -> Vec<u8> {
    std::fs::read(dir.join(LOG_FILE)).unwrap()
}

/// The byte offset at which line `number` (from 1) starts.
fn offset_of_line(bytes: &[u8], number: usize) -> usize {
    bytes
        .split_inclusive(|b| *b == b'\n')
        .take(number - 1)
        .map(<[u8]>::len)
        .sum()
}

#[tokio::test]
async fn a_torn_last_line_is_cut_and_every_earlier_entry_kept() {
    for tail in [
        &b"1a2b3c4d {\"Entry\":{\"log_id\""[..], // no newline: a write cut short
        b"00000000 {\"Truncate\":2}\n",          // complete, but the checksum is wrong
        b"\0\0\0\0\0\0",                         // zeros where the write never landed
    ] {
        let tmp = tempfile::tempdir().unwrap();
        drop(store_with(tmp.path(), 0..=4).await);
        let whole = log_bytes(tmp.path());
        let mut torn = whole.clone();
        torn.extend_from_slice(tail);
        std::fs::write(tmp.path().join(LOG_FILE), &torn).unwrap();

        let mut store = LogStore::open(tmp.path()).unwrap();
        assert_eq!(indexes(&mut store).await, vec![0, 1, 2, 3, 4]);
        assert_eq!(log_bytes(tmp.path()), whole, "the torn tail is cut off");
        // The next append starts on a clean line and survives a reopen.
        store.append_entries(vec![entry(5)]).await.unwrap();
        drop(store);
        let mut store = LogStore::open(tmp.path()).unwrap();
        assert_eq!(indexes(&mut store).await, vec![0, 1, 2, 3, 4, 5]);
    }
}

#[tokio::test]
async fn a_damaged_line_before_the_last_refuses_to_open_and_names_line_and_offset() {
    let tmp = tempfile::tempdir().unwrap();
    drop(store_with(tmp.path(), 0..=4).await);
    let mut bytes = log_bytes(tmp.path());
    let offset = offset_of_line(&bytes, 3);
    // One flipped bit inside the JSON of line 3: still valid-looking text, wrong checksum.
    let in_json = offset + 20;
    bytes[in_json] ^= 0x01;
    std::fs::write(tmp.path().join(LOG_FILE), &bytes).unwrap();

    let error = LogStore::open(tmp.path()).unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidData);
    let message = error.to_string();
    assert!(message.contains(LOG_FILE), "{message}");
    assert!(message.contains("line 3 "), "{message}");
    assert!(
        message.contains(&format!("byte offset {offset})")),
        "{message}"
    );
    assert!(message.contains("checksum mismatch"), "{message}");
    assert!(message.contains("will not start"), "{message}");
    assert!(message.contains("backup"), "{message}");
    assert_eq!(
        log_bytes(tmp.path()),
        bytes,
        "a refused file is left as it was"
    );
}

#[tokio::test]
async fn entries_that_do_not_follow_each_other_refuse_to_open() {
    let tmp = tempfile::tempdir().unwrap();
    let mut lines = Vec::new();
    for line in [Line::Entry(entry(0)), Line::Entry(entry(2))] {
        super::super::log_file::encode(&line, &mut lines).unwrap();
    }
    std::fs::write(tmp.path().join(LOG_FILE), &lines).unwrap();
    let message = LogStore::open(tmp.path()).unwrap_err().to_string();
    assert!(message.contains("line 2 "), "{message}");
    assert!(message.contains("does not follow"), "{message}");
}

#[tokio::test]
async fn a_file_of_an_earlier_version_without_checksums_opens_and_is_rewritten_with_them() {
    let tmp = tempfile::tempdir().unwrap();
    let mut legacy = Vec::new();
    let lines = (0..=5)
        .map(|i| Line::Entry(entry(i)))
        .chain([Line::Truncate(5), Line::Purge(id(1, 1))])
        .chain([Line::Committed(id(1, 3))]);
    for line in lines {
        serde_json::to_writer(&mut legacy, &line).unwrap();
        legacy.push(b'\n');
    }
    std::fs::write(tmp.path().join(LOG_FILE), &legacy).unwrap();

    let mut store = LogStore::open(tmp.path()).unwrap();
    assert_eq!(indexes(&mut store).await, vec![2, 3, 4]);
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(id(1, 1)));
    assert_eq!(store.read_committed().await.unwrap(), Some(id(1, 3)));
    let rewritten = String::from_utf8(log_bytes(tmp.path())).unwrap();
    assert_eq!(rewritten.lines().count(), 5, "purge, 3 entries, committed");
    for line in rewritten.lines() {
        let (crc, json) = line.split_at(8);
        assert!(crc.bytes().all(|b| b.is_ascii_hexdigit()), "{line}");
        assert!(json.starts_with(" {"), "{line}");
    }
    drop(store);
    let mut store = LogStore::open(tmp.path()).unwrap();
    assert_eq!(indexes(&mut store).await, vec![2, 3, 4]);
}

#[tokio::test]
async fn a_purge_rewrites_the_file_to_the_live_entries_and_a_reopen_recovers_them() {
    let tmp = tempfile::tempdir().unwrap();
    let mut store = store_with(tmp.path(), 0..=99).await;
    for i in 0..=50 {
        store.save_committed(Some(id(1, i))).await.unwrap();
    }
    store.truncate(id(1, 90)).await.unwrap();
    store
        .append_entries((90..=99).map(entry).collect())
        .await
        .unwrap();
    let before = log_bytes(tmp.path()).len();
    assert_eq!(store.file_lines(), 100 + 51 + 1 + 10);

    store.purge(id(1, 59)).await.unwrap();
    // The purge line, entries 60..=99, the committed hint.
    assert_eq!(store.file_lines(), 1 + 40 + 1);
    let after = log_bytes(tmp.path());
    assert_eq!(after.iter().filter(|b| **b == b'\n').count(), 42);
    assert!(
        after.len() < before / 3,
        "{} of {before} bytes",
        after.len()
    );
    assert!(
        !tmp.path().join(format!("{LOG_FILE}.tmp")).exists(),
        "the temp file is renamed"
    );

    // Appends continue on the rewritten file.
    store.append_entries(vec![entry(100)]).await.unwrap();
    drop(store);
    let mut store = LogStore::open(tmp.path()).unwrap();
    assert_eq!(indexes(&mut store).await, (60..=100).collect::<Vec<_>>());
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(id(1, 59)));
    assert_eq!(state.last_log_id, Some(id(1, 100)));
    assert_eq!(store.read_committed().await.unwrap(), Some(id(1, 50)));
}

#[tokio::test]
async fn committed_hints_alone_never_grow_the_file_past_its_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let mut store = store_with(tmp.path(), 0..=9).await;
    let mut most = 0;
    for round in 0..(2 * DEAD_LINES_MAX + 10) {
        store.save_committed(Some(id(1, round % 10))).await.unwrap();
        most = most.max(store.file_lines());
    }
    assert_eq!(most, 10 + 1 + DEAD_LINES_MAX, "live lines + DEAD_LINES_MAX");
    let lines = log_bytes(tmp.path())
        .iter()
        .filter(|b| **b == b'\n')
        .count() as u64;
    assert!(lines <= 10 + 1 + DEAD_LINES_MAX, "{lines} lines");
    drop(store);
    let mut store = LogStore::open(tmp.path()).unwrap();
    assert_eq!(indexes(&mut store).await, (0..=9).collect::<Vec<_>>());
    let last_hint = (2 * DEAD_LINES_MAX + 9) % 10;
    assert_eq!(
        store.read_committed().await.unwrap(),
        Some(id(1, last_hint))
    );
}

#[tokio::test]
async fn a_vote_survives_a_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let mut store = LogStore::open(tmp.path()).unwrap();
    assert_eq!(store.read_vote().await.unwrap(), None);
    let vote = Vote::new_committed(7, 2);
    store.save_vote(&vote).await.unwrap();
    drop(store);
    let mut store = LogStore::open(tmp.path()).unwrap();
    assert_eq!(store.read_vote().await.unwrap(), Some(vote));
}

#[tokio::test]
async fn the_writer_refuses_an_entry_that_leaves_a_hole() {
    let tmp = tempfile::tempdir().unwrap();
    let mut store = store_with(tmp.path(), 0..=2).await;
    let error = store.append_entries(vec![entry(5)]).await.unwrap_err();
    assert!(error.to_string().contains("does not follow"), "{error}");
    assert_eq!(indexes(&mut store).await, vec![0, 1, 2]);
    drop(store);
    LogStore::open(tmp.path()).expect("nothing unreadable was written");
}

fn faults() -> [Faults; 3] {
    Faults::each_write_fault(20)
}

const META_DIR: &str = "/meta";

fn open_on(fs: &FaultyStorage) -> LogStore {
    LogStore::open_with(Arc::new(fs.clone()), Path::new(META_DIR)).unwrap()
}

/// Issue 28: an append on a failing disk (ENOSPC, a torn write, EIO on its fsync) is refused
/// with an error naming the file (openraft is told, nothing panics), the store refuses every
/// write after it, and a restart after a power cut (keeping or losing the torn bytes) has
/// every acknowledged entry and takes appends again.
#[tokio::test]
async fn a_failed_append_is_refused_and_a_restart_keeps_every_acknowledged_entry() {
    for fault in faults() {
        for mode in [
            CrashMode::KeepUnsyncedPrefix(1 << 20),
            CrashMode::LoseUnsynced,
        ] {
            let fs = FaultyStorage::new();
            let store = open_on(&fs);
            store
                .append_entries((0..=4).map(entry).collect())
                .await
                .unwrap();
            fs.set_faults(fault.clone());
            let error = store
                .append_entries((5..=6).map(entry).collect())
                .await
                .unwrap_err();
            assert!(error.to_string().contains(LOG_FILE), "{fault:?}: {error}");
            fs.set_faults(Faults::default());
            let refused = store.append_entries(vec![entry(5)]).await.unwrap_err();
            assert!(
                refused.to_string().contains("restart the node"),
                "{refused}"
            );
            drop(store);
            fs.crash(mode);
            let mut store = open_on(&fs);
            let kept = indexes(&mut store).await;
            // Every acknowledged entry; the refused ones only if the crash kept them whole
            // (EIO on the fsync, the pages still written): never acknowledged, never a hole.
            let whole_refused = fault.fail_sync && mode != CrashMode::LoseUnsynced;
            let expected: Vec<u64> = if whole_refused {
                (0..=6).collect()
            } else {
                (0..=4).collect()
            };
            assert_eq!(kept, expected, "{fault:?} {mode:?}");
            let next = kept.len() as u64;
            store.append_entries(vec![entry(next)]).await.unwrap();
            drop(store);
            let mut store = open_on(&fs);
            assert_eq!(indexes(&mut store).await, (0..=next).collect::<Vec<_>>());
        }
    }
}

/// A purge whose rewrite fails leaves the old file whole: a restart (after a power cut)
/// replays every entry, and the purge can be done again.
#[tokio::test]
async fn a_failed_purge_rewrite_leaves_the_old_log_whole() {
    for fault in faults() {
        let fs = FaultyStorage::new();
        let mut store = open_on(&fs);
        store
            .append_entries((0..=9).map(entry).collect())
            .await
            .unwrap();
        fs.set_faults(fault.clone());
        let error = store.purge(id(1, 4)).await.unwrap_err();
        assert!(error.to_string().contains(LOG_FILE), "{fault:?}: {error}");
        fs.set_faults(Faults::default());
        drop(store);
        fs.crash(CrashMode::KeepUnsyncedPrefix(1 << 20));
        assert!(!fs.exists(&Path::new(META_DIR).join(format!("{LOG_FILE}.tmp"))));
        let mut store = open_on(&fs);
        assert_eq!(indexes(&mut store).await, (0..=9).collect::<Vec<_>>());
        store.purge(id(1, 4)).await.unwrap();
        drop(store);
        fs.crash(CrashMode::LoseUnsynced);
        let mut store = open_on(&fs);
        assert_eq!(indexes(&mut store).await, (5..=9).collect::<Vec<_>>());
    }
}

/// Saving a vote on a failing disk is refused, and the vote saved before it is what a
/// restart (after a power cut) reads, whole.
#[tokio::test]
async fn a_failed_vote_save_keeps_the_vote_saved_before() {
    for fault in faults() {
        let fs = FaultyStorage::new();
        let mut store = open_on(&fs);
        let before = Vote::new_committed(7, 2);
        store.save_vote(&before).await.unwrap();
        fs.set_faults(fault.clone());
        let error = store.save_vote(&Vote::new(8, 3)).await.unwrap_err();
        assert!(
            error.to_string().contains("raft-vote.json"),
            "{fault:?}: {error}"
        );
        fs.set_faults(Faults::default());
        drop(store);
        fs.crash(CrashMode::KeepUnsyncedPrefix(1 << 20));
        let mut store = open_on(&fs);
        assert_eq!(store.read_vote().await.unwrap(), Some(before), "{fault:?}");
    }
}
