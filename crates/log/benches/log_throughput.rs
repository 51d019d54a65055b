//! Append and read throughput of one partition log on the real file system: 1 KiB records in
//! 64 KiB batches, flush `os` and `always`, 1 and 4 concurrent appenders.
//!
//! Run: `cargo bench -p tinymq-log --bench log_throughput` (data goes to a temporary directory
//! under `TINYMQ_BENCH_DIR`, default the system temp dir; point it at the disk you measure).
//! `-- --quick` (or CI's `--test`) gives a fast smoke run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tinymq_log::{FlushPolicy, LogConfig, PartitionLog};
use tinymq_protocol::batch::{BatchBuilder, Compression, ProducerStamp, RecordInput};

const RECORD_BYTES: usize = 1024;
const BATCH_BYTES: usize = 64 * 1024;

/// One batch of 1 KiB records totalling about 64 KiB.
fn batch() -> Vec<u8> {
    let value = vec![b'x'; RECORD_BYTES];
    let mut builder = BatchBuilder::new(Compression::None, ProducerStamp::NONE);
    while builder.uncompressed_bytes() + RECORD_BYTES + 16 <= BATCH_BYTES {
        builder.push(&RecordInput {
            timestamp_ms: 1_700_000_000_000,
            key: None,
            value: Some(&value),
            headers: &[],
        });
    }
    builder.build().unwrap().to_vec()
}

fn bench_dir() -> tempfile::TempDir {
    match std::env::var_os("TINYMQ_BENCH_DIR") {
        Some(dir) => tempfile::tempdir_in(dir).unwrap(),
        None => tempfile::tempdir().unwrap(),
    }
}

fn config(flush: FlushPolicy) -> LogConfig {
    LogConfig {
        flush,
        segment_bytes: 128 << 20,
        // Keep the disk footprint bounded however long criterion runs.
        retention_bytes: Some(512 << 20),
        ..LogConfig::default()
    }
}

/// Appends `total` batches split over `appenders` threads; returns the wall time.
fn append_concurrently(log: &Arc<PartitionLog>, appenders: u64, total: u64) -> Duration {
    let start = Instant::now();
    let threads: Vec<_> = (0..appenders)
        .map(|t| {
            let log = log.clone();
            let share = total / appenders + u64::from(t < total % appenders);
            std::thread::spawn(move || {
                let mut buf = batch();
                for _ in 0..share {
                    log.append(&mut buf, 0).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let elapsed = start.elapsed();
    log.apply_retention().unwrap();
    elapsed
}

fn append(c: &mut Criterion) {
    let mut group = c.benchmark_group("append_1KiB_records_64KiB_batches");
    group.throughput(Throughput::Bytes(batch().len() as u64));
    group.measurement_time(Duration::from_secs(8));
    for (name, flush) in [("os", FlushPolicy::Os), ("always", FlushPolicy::Always)] {
        for appenders in [1u64, 4] {
            let dir = bench_dir();
            let (log, _) = PartitionLog::open(&dir.path().join("bench-0"), config(flush)).unwrap();
            let log = Arc::new(log);
            group.bench_function(
                BenchmarkId::new(name, format!("{appenders}_appenders")),
                |b| b.iter_custom(|iters| append_concurrently(&log, appenders, iters)),
            );
        }
    }
    group.finish();
}

fn read(c: &mut Criterion) {
    let dir = bench_dir();
    let (log, _) =
        PartitionLog::open(&dir.path().join("bench-0"), config(FlushPolicy::Os)).unwrap();
    let mut buf = batch();
    let batches = (256 << 20) / buf.len();
    for _ in 0..batches {
        log.append(&mut buf, 0).unwrap();
    }
    log.flush().unwrap();
    let end = log.log_end_offset();
    let mut group = c.benchmark_group("read_1MiB_from_page_cache");
    let mut offset = 0;
    let mut bytes_read = 0u64;
    group.throughput(Throughput::Bytes(1 << 20));
    group.bench_function("sequential", |b| {
        b.iter(|| {
            let result = log.read(offset, 1 << 20, None).unwrap();
            bytes_read += result.records.len() as u64;
            // Advance past what was returned; wrap at the end.
            let last = tinymq_protocol::batch::BatchIter::new(result.records)
                .last()
                .map(|b| b.unwrap().next_offset())
                .unwrap_or(end);
            offset = if last >= end { 0 } else { last };
        })
    });
    group.finish();
    assert!(bytes_read > 0);
}

criterion_group!(benches, append, read);
criterion_main!(benches);
