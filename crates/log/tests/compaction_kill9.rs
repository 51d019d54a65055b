//! A real process appends keyed records to a compacted log and cleans it in a loop, and is
//! killed with SIGKILL at a random moment, again and again on the same directory; after each
//! kill the reopened log must hold, for every key, its latest acknowledged record (or a later
//! one of that key), every record at the offset it was written at, and nothing recovery had
//! to cut from a cleaned segment. Cleaning passes are swapping segments most of the time, so
//! kills land before, during and after swaps.
//!
//! The child is this same test binary re-run with `--ignored --exact append_and_clean`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tinymq_log::{
    CleanLimits, CleanupPolicy, CompactionConfig, FlushPolicy, LogConfig, PartitionLog,
};
use tinymq_protocol::batch::{BatchBuilder, BatchIter, Compression, ProducerStamp, RecordInput};

const DIR_ENV: &str = "TINYMQ_COMPACTION_KILL9_DIR";
const KEYS: u64 = 40;
const ROUNDS: u32 = 6;

fn config() -> LogConfig {
    LogConfig {
        flush: FlushPolicy::Always,
        segment_bytes: 4 * 1024,
        index_interval_bytes: 256,
        batch_bytes_max: 4 * 1024,
        cleanup: CleanupPolicy::Compact,
        compaction: CompactionConfig {
            delete_retention: Duration::ZERO,
            ..CompactionConfig::default()
        },
        ..LogConfig::default()
    }
}

/// Two records with keys `id % KEYS` and `(id + 1) % KEYS`, valued `key-id`.
fn batch(id: u64) -> BytesMut {
    let mut builder = BatchBuilder::new(Compression::Lz4, ProducerStamp::NONE);
    for key in [id % KEYS, (id + 1) % KEYS] {
        let (k, v) = (format!("{key}"), format!("{key}-{id}"));
        builder.push(&RecordInput {
            timestamp_ms: 1_700_000_000_000,
            key: Some(k.as_bytes()),
            value: Some(v.as_bytes()),
            headers: &[],
        });
    }
    BytesMut::from(&builder.build().unwrap()[..])
}

/// The child: one thread appends and prints each acknowledgement, one cleans without pause.
#[test]
#[ignore = "run by the compaction kill9 test as a child process"]
fn append_and_clean() {
    let dir = std::env::var(DIR_ENV).expect("child needs a directory");
    let (log, _) = PartitionLog::open(Path::new(&dir), config()).unwrap();
    let log = Arc::new(log);
    let start: u64 = std::env::var("TINYMQ_COMPACTION_KILL9_FIRST_ID")
        .unwrap()
        .parse()
        .unwrap();
    let cleaner = {
        let log = log.clone();
        std::thread::spawn(move || loop {
            let report = log
                .clean(
                    i64::MAX,
                    log.log_end_offset(),
                    &CleanLimits::default(),
                    &mut |_| {},
                )
                .unwrap();
            if report.segments_written > 0 {
                println!("cleaned {}", report.segments_written);
            }
        })
    };
    for id in start.. {
        let info = log.append(&mut batch(id), 0).unwrap();
        let mut out = std::io::stdout().lock();
        writeln!(out, "ack {} {id}", info.base_offset).unwrap();
        out.flush().unwrap();
    }
    cleaner.join().unwrap();
}

/// Every record of the log as offset → (key, value), crossing gaps as a consumer does.
fn read_all(log: &PartitionLog) -> BTreeMap<i64, (String, String)> {
    let mut found = BTreeMap::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let read = log.read(offset, 1 << 20, None).unwrap();
        for batch in BatchIter::new(read.records) {
            let batch = batch.unwrap();
            for r in batch.records(1 << 20).unwrap() {
                let text =
                    |b: Option<bytes::Bytes>| String::from_utf8(b.unwrap().to_vec()).unwrap();
                found.insert(r.offset, (text(r.key), text(r.value)));
            }
            offset = batch.next_offset();
        }
    }
    found
}

#[test]
fn kill9_during_cleaning_loses_no_latest_acknowledged_record() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("compacted-0");
    // offset → id of every acknowledged batch (its two records are at offset and offset + 1).
    let mut acked: BTreeMap<i64, u64> = BTreeMap::new();
    let mut next_id = 0u64;
    let mut cleaned_total = 0;
    for round in 0..ROUNDS {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "append_and_clean",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(DIR_ENV, &dir)
            .env("TINYMQ_COMPACTION_KILL9_FIRST_ID", next_id.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let record = |line: String, acked: &mut BTreeMap<i64, u64>, cleaned: &mut u32| {
            if let Some(rest) = line.strip_prefix("ack ") {
                let (offset, id) = rest.split_once(' ').unwrap();
                acked.insert(offset.parse().unwrap(), id.parse().unwrap());
            } else if line.starts_with("cleaned ") {
                *cleaned += 1;
            }
        };
        // Run until the cleaner has swapped a few times, then a little longer by a
        // round-dependent count of acknowledgements, so kills land at varied moments.
        let (mut cleaned, mut acks_after) = (0u32, 0u64);
        let wanted_after = 50 + u64::from(round) * 37;
        while cleaned < 3 || acks_after < wanted_after {
            let line = lines.next().expect("the child keeps going").unwrap();
            let was = acked.len();
            record(line, &mut acked, &mut cleaned);
            if cleaned >= 3 && acked.len() > was {
                acks_after += 1;
            }
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        for line in lines {
            record(line.unwrap(), &mut acked, &mut cleaned);
        }
        cleaned_total += cleaned;
        next_id = acked.values().max().map_or(0, |&id| id + 1) + 1_000_000;

        let (log, report) = PartitionLog::open(&dir, config()).unwrap();
        // Only the active (last) segment may lose a torn tail; a cleaned segment is never cut.
        let active_base = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| {
                let name = e.ok()?.file_name();
                name.to_str()?.strip_suffix(".log")?.parse::<i64>().ok()
            })
            .max()
            .unwrap();
        for t in &report.truncations {
            assert_eq!(
                t.segment_base_offset, active_base,
                "round {round}: {report:?}"
            );
        }
        assert!(
            report.segments_deleted.is_empty(),
            "round {round}: {report:?}"
        );
        println!(
            "round {round}: {} acknowledged, {cleaned} passes swapped, reopening finished {} \
             swaps and removed {} leftover files",
            acked.len(),
            report.swaps_finished,
            report.stray_files_removed
        );
        let found = read_all(&log);
        // What each acknowledged batch wrote: offset → (key, value).
        let mut written: BTreeMap<i64, (String, String)> = BTreeMap::new();
        for (&offset, &id) in &acked {
            for (i, key) in [id % KEYS, (id + 1) % KEYS].into_iter().enumerate() {
                written.insert(offset + i as i64, (key.to_string(), format!("{key}-{id}")));
            }
        }
        for (offset, record) in &found {
            match written.get(offset) {
                Some(w) => assert_eq!(record, w, "round {round}: the record at {offset}"),
                // Written but not yet acknowledged when the child died: a whole record.
                None => assert!(
                    record.1.starts_with(&format!("{}-", record.0)),
                    "{record:?}"
                ),
            }
        }
        // For every key: its latest acknowledged record, or a later record of that key.
        let mut latest: BTreeMap<&str, i64> = BTreeMap::new();
        for (offset, (key, _)) in &written {
            latest.insert(key, *offset);
        }
        for (key, offset) in &latest {
            let kept = found.range(offset..).any(|(_, (k, _))| k == key);
            assert!(
                kept,
                "round {round}: key {key}'s record at {offset} or a later one; {report:?}"
            );
        }
        log.close().unwrap();
    }
    assert!(
        cleaned_total >= 3 * ROUNDS,
        "the cleaner swapped segments in every round"
    );
}
