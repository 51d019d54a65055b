//! What a follower's log does to survive SIGKILL: a real process appending replicated batches
//! (or truncating and appending again) is killed mid-stream, and the reopened log must be a
//! prefix of what it wrote, never hold a truncated tail again, and have a leader-epoch
//! checkpoint that agrees with its batch headers; a damaged or missing checkpoint is rebuilt.
//!
//! The children are this same test binary re-run with `--ignored --exact <child>` and the
//! directory in an environment variable.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Lines, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

use tinymq_log::{FlushPolicy, LogConfig, PartitionLog};
use tinymq_protocol::batch::{
    stamp_base_offset, stamp_partition_leader_epoch, BatchBuilder, BatchIter, Compression,
    ProducerStamp, RecordInput,
};

const DIR_ENV: &str = "TINYMQ_REPLICA_KILL9_DIR";
const FLUSH_ENV: &str = "TINYMQ_REPLICA_KILL9_FLUSH";
const RECORDS_PER_BATCH: i64 = 3;
/// The leader epoch changes every this many batches of the replicated stream.
const BATCHES_PER_EPOCH: u64 = 40;

fn config(flush: FlushPolicy) -> LogConfig {
    LogConfig {
        flush,
        segment_bytes: 8 * 1024,
        batch_bytes_max: 8 * 1024,
        ..LogConfig::default()
    }
}

/// A batch of three records whose values are `<label>/<r>`.
fn batch(label: &str) -> Vec<u8> {
    let mut builder = BatchBuilder::new(Compression::None, ProducerStamp::NONE);
    for r in 0..RECORDS_PER_BATCH {
        let value = format!("{label}/{r}");
        builder.push(&RecordInput {
            timestamp_ms: 1_700_000_000_000,
            key: None,
            value: Some(value.as_bytes()),
            headers: &[],
        });
    }
    builder.build().unwrap().to_vec()
}

fn env_dir() -> String {
    std::env::var(DIR_ENV).expect("child needs a directory")
}

fn spawn(child: &str, dir: &Path, flush: &str) -> (Child, Lines<BufReader<ChildStdout>>) {
    let mut process = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            child,
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DIR_ENV, dir)
        .env(FLUSH_ENV, flush)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = BufReader::new(process.stdout.take().unwrap()).lines();
    (process, lines)
}

fn say(line: String) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

/// A child's message in a line of its output: the test harness prints its own words before
/// the first one on the same line.
fn message(line: &str) -> &str {
    let at = ["ack ", "trunc "].iter().filter_map(|m| line.find(m)).min();
    at.map_or("", |at| &line[at..])
}

/// Every batch in the log: (base offset, leader epoch, label of its records).
fn batches(log: &PartitionLog) -> Vec<(i64, i32, String)> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let read = log.read(offset, 1 << 20, None).unwrap();
        for b in BatchIter::new(read.records) {
            let b = b.unwrap();
            let records = b.records(1 << 20).unwrap();
            let value = String::from_utf8(records[0].value.clone().unwrap().to_vec()).unwrap();
            let label = value.rsplit_once('/').unwrap().0.to_string();
            out.push((b.base_offset(), b.partition_leader_epoch(), label));
            offset = b.next_offset();
        }
    }
    out
}

/// The epoch entries the batch headers imply: an entry wherever the epoch grows.
fn epochs_of(batches: &[(i64, i32, String)]) -> Vec<(i32, i64)> {
    let mut entries: Vec<(i32, i64)> = Vec::new();
    for &(base, epoch, _) in batches {
        if entries.last().is_none_or(|&(latest, _)| epoch > latest) {
            entries.push((epoch, base));
        }
    }
    entries
}

/// Child: a follower appending its leader's stream, 1 to 3 batches per call, the epoch
/// growing every `BATCHES_PER_EPOCH` batches, printing `ack <base offset> <id>` per batch.
#[test]
#[ignore = "run by replication kill9 tests as a child process"]
fn replicate_until_killed() {
    let flush: FlushPolicy = std::env::var(FLUSH_ENV).unwrap().parse().unwrap();
    let (log, _) = PartitionLog::open(Path::new(&env_dir()), config(flush)).unwrap();
    let mut id: u64 = 0;
    for call in 0u64.. {
        let mut bytes = Vec::new();
        let mut offset = log.log_end_offset();
        let first = id;
        for _ in 0..1 + call % 3 {
            let mut b = batch(&id.to_string());
            stamp_base_offset(&mut b, offset);
            stamp_partition_leader_epoch(&mut b, (1 + id / BATCHES_PER_EPOCH) as i32);
            offset += RECORDS_PER_BATCH;
            bytes.extend_from_slice(&b);
            id += 1;
        }
        let info = log.append_replicated(&bytes).unwrap();
        for (k, acked) in (first..id).enumerate() {
            say(format!(
                "ack {} {acked}",
                info.base_offset + k as i64 * RECORDS_PER_BATCH
            ));
        }
    }
}

/// Runs `replicate_until_killed` until it acknowledged `count` batches, kills it with
/// SIGKILL, and returns the directory's parent (kept alive) and the acknowledgements.
fn replicate_then_kill(flush: &str, count: usize) -> (tempfile::TempDir, BTreeMap<i64, u64>) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("topic-0");
    let (mut child, mut lines) = spawn("replicate_until_killed", &dir, flush);
    let mut acked = BTreeMap::new();
    let record = |acked: &mut BTreeMap<i64, u64>, line: String| {
        if let Some((offset, id)) = message(&line)
            .strip_prefix("ack ")
            .and_then(|r| r.split_once(' '))
        {
            acked.insert(offset.parse::<i64>().unwrap(), id.parse::<u64>().unwrap());
        }
    };
    while acked.len() < count {
        let line = lines.next().expect("the child acknowledges").unwrap();
        record(&mut acked, line);
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    for line in lines {
        record(&mut acked, line.unwrap());
    }
    (tmp, acked)
}

fn kill_replication_and_check(flush: &str) {
    let (tmp, acked) = replicate_then_kill(flush, 600);
    let dir = tmp.path().join("topic-0");
    let (log, report) = PartitionLog::open(&dir, config(flush.parse().unwrap())).unwrap();
    let found = batches(&log);
    // A prefix of the stream: batch k is id k at offset 3k, epochs as the leader stamped them.
    for (k, (base, epoch, label)) in found.iter().enumerate() {
        let k = k as u64;
        assert_eq!(*base, k as i64 * RECORDS_PER_BATCH, "{flush}: contiguous");
        assert_eq!(label, &k.to_string(), "{flush}: batch {k} in order");
        assert_eq!(*epoch, (1 + k / BATCHES_PER_EPOCH) as i32);
    }
    for (offset, id) in &acked {
        let k = (*offset / RECORDS_PER_BATCH) as usize;
        assert_eq!(
            found.get(k).map(|b| b.2.clone()),
            Some(id.to_string()),
            "{flush}: acknowledged batch {id} at {offset}; {report:?}"
        );
    }
    assert_eq!(
        log.epoch_entries(),
        epochs_of(&found),
        "{flush}: {report:?}"
    );
    assert!(
        log.epoch_entries().len() > 5,
        "several epochs were replicated"
    );
    assert_eq!(
        report.leader_epochs_rebuilt, None,
        "{flush}: the checkpoint held"
    );
    // The follower goes on from where it stopped.
    let mut next = batch("next");
    stamp_base_offset(&mut next, log.log_end_offset());
    stamp_partition_leader_epoch(&mut next, log.latest_epoch().unwrap());
    let info = log.append_replicated(&next).unwrap();
    assert_eq!(info.base_offset, found.len() as i64 * RECORDS_PER_BATCH);
}

#[test]
fn kill9_during_replicated_appends_leaves_a_prefix_and_a_consistent_checkpoint_always() {
    kill_replication_and_check("always");
}

#[test]
fn kill9_during_replicated_appends_leaves_a_prefix_and_a_consistent_checkpoint_os() {
    kill_replication_and_check("os");
}

/// Child: appends 30 batches under epoch 1, then in rounds r = 1, 2, …: truncates 7 to 11
/// offsets off the end (often inside a batch) and prints `trunc <r> <new end>`, then appends
/// 10 batches labelled `r-<i>` under epoch r + 1, printing `ack <r> <base offset>`.
#[test]
#[ignore = "run by replication kill9 tests as a child process"]
fn truncate_and_append_until_killed() {
    let flush: FlushPolicy = std::env::var(FLUSH_ENV).unwrap().parse().unwrap();
    let (log, _) = PartitionLog::open(Path::new(&env_dir()), config(flush)).unwrap();
    for i in 0..30 {
        log.append(&mut batch(&format!("0-{i}")), 1).unwrap();
    }
    for round in 1i64.. {
        let end = log
            .truncate_to(log.log_end_offset() - 7 - round % 5)
            .unwrap();
        say(format!("trunc {round} {end}"));
        for i in 0..10 {
            let epoch = i32::try_from(round + 1).unwrap();
            let info = log
                .append(&mut batch(&format!("{round}-{i}")), epoch)
                .unwrap();
            say(format!("ack {round} {}", info.base_offset));
        }
    }
}

#[test]
fn kill9_right_after_truncation_never_brings_the_tail_back() {
    const KILL_AFTER_ROUND: i64 = 6;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("topic-0");
    let (mut child, lines) = spawn("truncate_and_append_until_killed", &dir, "always");
    // The model of the log as the printed operations left it: base offset -> label.
    let mut model: BTreeMap<i64, String> = (0..30)
        .map(|i| (i * RECORDS_PER_BATCH, format!("0-{i}")))
        .collect();
    let mut cut_at = 0;
    for line in lines {
        let line = line.unwrap();
        let words: Vec<&str> = message(&line).split(' ').collect();
        match words[..] {
            ["trunc", round, end] => {
                let (round, end): (i64, i64) = (round.parse().unwrap(), end.parse().unwrap());
                model.retain(|&base, _| base < end);
                cut_at = end;
                if round == KILL_AFTER_ROUND {
                    child.kill().unwrap(); // SIGKILL, right after truncate_to returned
                    break;
                }
            }
            ["ack", round, base] => {
                let i = model.range(cut_at..).count();
                model.insert(base.parse().unwrap(), format!("{round}-{i}"));
            }
            _ => {}
        }
    }
    child.wait().unwrap();

    let (log, report) = PartitionLog::open(&dir, config(FlushPolicy::Always)).unwrap();
    let found = batches(&log);
    let below: Vec<(i64, String)> = found
        .iter()
        .filter(|b| b.0 < cut_at)
        .map(|b| (b.0, b.2.clone()))
        .collect();
    assert_eq!(below, model.into_iter().collect::<Vec<_>>(), "{report:?}");
    // At and past the cut only what the child appended after it: never the old tail.
    let mut expected_base = cut_at;
    for (base, _, label) in found.iter().filter(|b| b.0 >= cut_at) {
        assert_eq!(
            *base, expected_base,
            "appends continue at the truncation point"
        );
        assert!(
            label.starts_with(&format!("{KILL_AFTER_ROUND}-")),
            "batch {label} at {base} is from before the truncation to {cut_at}"
        );
        expected_base += RECORDS_PER_BATCH;
    }
    assert_eq!(log.log_end_offset(), expected_base);
    assert_eq!(log.epoch_entries(), epochs_of(&found), "{report:?}");
    assert_eq!(report.leader_epochs_rebuilt, None);
    let next = log.append(&mut batch("after"), 100).unwrap();
    assert_eq!(next.base_offset, expected_base);
}

#[test]
fn a_damaged_or_missing_checkpoint_left_by_a_killed_follower_is_rebuilt_at_open() {
    let (tmp, _) = replicate_then_kill("always", 300);
    let dir = tmp.path().join("topic-0");
    let checkpoint = dir.join("leader-epoch-checkpoint");
    let expected = {
        let (log, _) = PartitionLog::open(&dir, config(FlushPolicy::Always)).unwrap();
        epochs_of(&batches(&log))
    };
    let good = std::fs::read(&checkpoint).unwrap();
    let damages: [(&str, Option<Vec<u8>>); 4] = [
        ("missing", None),
        ("cut in half", Some(good[..good.len() / 2].to_vec())),
        ("a flipped bit", {
            let mut bad = good.clone();
            let at = bad.len() - 3;
            bad[at] ^= 0x01;
            Some(bad)
        }),
        ("zeros", Some(vec![0u8; 512])),
    ];
    for (what, damage) in damages {
        match damage {
            None => std::fs::remove_file(&checkpoint).unwrap(),
            Some(bytes) => std::fs::write(&checkpoint, bytes).unwrap(),
        }
        let (log, report) = PartitionLog::open(&dir, config(FlushPolicy::Always)).unwrap();
        assert!(report.leader_epochs_rebuilt.is_some(), "{what}: {report:?}");
        assert_eq!(log.epoch_entries(), expected, "{what}");
        assert_eq!(
            std::fs::read(&checkpoint).unwrap(),
            good,
            "{what}: rewritten"
        );
    }
}
