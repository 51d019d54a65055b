//! A real process appends to a real log on disk and is killed with SIGKILL mid-stream; the
//! reopened log must hold every batch the process saw acknowledged, at the offset it was
//! given, and nothing else but possibly whole unacknowledged batches at the end.
//!
//! The child is this same test binary re-run with `--ignored --exact append_until_killed`
//! and the directory in an environment variable.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use bytes::BytesMut;
use tinymq_log::{FlushPolicy, LogConfig, PartitionLog};
use tinymq_protocol::batch::{BatchBuilder, BatchIter, Compression, ProducerStamp, RecordInput};

const DIR_ENV: &str = "TINYMQ_KILL9_DIR";
const FLUSH_ENV: &str = "TINYMQ_KILL9_FLUSH";
const APPENDERS: u32 = 2;

fn config(flush: FlushPolicy) -> LogConfig {
    LogConfig {
        flush,
        segment_bytes: 8 * 1024,
        batch_bytes_max: 8 * 1024,
        ..LogConfig::default()
    }
}

fn batch(id: u64) -> BytesMut {
    let mut builder = BatchBuilder::new(Compression::None, ProducerStamp::NONE);
    for r in 0..3 {
        let value = format!("{id}-{r}");
        builder.push(&RecordInput {
            timestamp_ms: 1_700_000_000_000,
            key: None,
            value: Some(value.as_bytes()),
            headers: &[],
        });
    }
    BytesMut::from(&builder.build().unwrap()[..])
}

/// The child: append forever from several threads, printing each acknowledgement.
#[test]
#[ignore = "run by kill9 tests as a child process"]
fn append_until_killed() {
    let dir = std::env::var(DIR_ENV).expect("child needs a directory");
    let flush: FlushPolicy = std::env::var(FLUSH_ENV).unwrap().parse().unwrap();
    let (log, _) = PartitionLog::open(Path::new(&dir), config(flush)).unwrap();
    let log = Arc::new(log);
    let out = Arc::new(std::sync::Mutex::new(std::io::stdout()));
    let threads: Vec<_> = (0..APPENDERS)
        .map(|t| {
            let (log, out) = (log.clone(), out.clone());
            std::thread::spawn(move || {
                for i in 0.. {
                    let id = u64::from(t) << 32 | i;
                    let info = log.append(&mut batch(id), 0).unwrap();
                    let mut out = out.lock().unwrap();
                    writeln!(out, "ack {} {id}", info.base_offset).unwrap();
                    out.flush().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

fn kill_mid_stream_and_check(flush: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("topic-0");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "append_until_killed",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DIR_ENV, &dir)
        .env(FLUSH_ENV, flush)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut acked = BTreeMap::new();
    let record = |acked: &mut BTreeMap<i64, u64>, line: String| {
        if let Some(rest) = line.strip_prefix("ack ") {
            let (offset, id) = rest.split_once(' ').unwrap();
            acked.insert(offset.parse::<i64>().unwrap(), id.parse::<u64>().unwrap());
        }
    };
    while acked.len() < 1000 {
        let line = lines.next().expect("child acknowledges appends").unwrap();
        record(&mut acked, line);
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // Acknowledgements already in the pipe were made before the kill: they count too.
    for line in lines {
        record(&mut acked, line.unwrap());
    }

    let (log, report) = PartitionLog::open(&dir, config(flush.parse().unwrap())).unwrap();
    let mut found = BTreeMap::new();
    let mut offset = 0;
    while offset < log.log_end_offset() {
        let read = log.read(offset, 1 << 20, None).unwrap();
        for batch in BatchIter::new(read.records) {
            let batch = batch.unwrap();
            let records = batch.records(1 << 20).unwrap();
            let value = String::from_utf8(records[0].value.clone().unwrap().to_vec()).unwrap();
            let id: u64 = value.split_once('-').unwrap().0.parse().unwrap();
            found.insert(batch.base_offset(), id);
            offset = batch.next_offset();
        }
    }
    for (offset, id) in &acked {
        assert_eq!(
            found.get(offset),
            Some(id),
            "acknowledged batch {id} at {offset} ({flush}); {report:?}"
        );
    }
    // Anything beyond the acknowledged batches is whole batches from the same writers.
    assert!(found.len() >= acked.len());
    assert_eq!(
        found.keys().copied().collect::<Vec<_>>(),
        (0..found.len() as i64).map(|i| i * 3).collect::<Vec<_>>()
    );
}

#[test]
fn kill9_loses_nothing_acknowledged_under_always() {
    kill_mid_stream_and_check("always");
}

#[test]
fn kill9_loses_nothing_acknowledged_under_os() {
    // Without fsync a process crash still loses nothing: the page cache outlives the process.
    kill_mid_stream_and_check("os");
}
