//! Measures the cleaner on a real disk: writes a compacted log of `--mib` MiB of 1 KiB
//! records over `--keys` keys (flush policy `os`, 64 MiB segments, uncompressed batches
//! of 100 records), then times one pass over everything before the active segment and prints what
//! it read, wrote and removed, and MB/s read.
//!
//! `cargo run --release -p tinymq-log --example clean_throughput -- [DIR] [MIB] [KEYS]`

use std::time::{Duration, Instant};

use bytes::BytesMut;
use tinymq_log::{
    CleanLimits, CleanupPolicy, CompactionConfig, FlushPolicy, LogConfig, PartitionLog,
};
use tinymq_protocol::batch::{BatchBuilder, Compression, ProducerStamp, RecordInput};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = args.get(1).map_or("clean-bench", String::as_str);
    let mib: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(512);
    let keys: u64 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let _ = std::fs::remove_dir_all(dir);
    let config = LogConfig {
        flush: FlushPolicy::Os,
        segment_bytes: 64 << 20,
        cleanup: CleanupPolicy::Compact,
        compaction: CompactionConfig {
            delete_retention: Duration::ZERO,
            ..CompactionConfig::default()
        },
        ..LogConfig::default()
    };
    let (log, _) = PartitionLog::open(dir.as_ref(), config).expect("open");
    let value = vec![b'x'; 1000];
    let records = mib * 1024;
    let mut i = 0u64;
    let written = Instant::now();
    while i < records {
        let mut builder = BatchBuilder::new(Compression::None, ProducerStamp::NONE);
        for _ in 0..100 {
            let key = format!("key-{:08}", (i.wrapping_mul(2_654_435_761)) % keys);
            let mut v = value.clone();
            v[..8].copy_from_slice(&i.to_be_bytes());
            builder.push(&RecordInput {
                timestamp_ms: 1_700_000_000_000,
                key: Some(key.as_bytes()),
                value: Some(&v),
                headers: &[],
            });
            i += 1;
        }
        let mut batch = BytesMut::from(&builder.build().expect("batch")[..]);
        log.append(&mut batch, 0).expect("append");
    }
    log.flush().expect("flush");
    let size = log.size_bytes();
    println!(
        "wrote {records} records ({:.0} MiB on disk) in {:.1} s",
        size as f64 / (1 << 20) as f64,
        written.elapsed().as_secs_f64()
    );
    let started = Instant::now();
    let report = log
        .clean(
            i64::MAX,
            log.log_end_offset(),
            &CleanLimits::default(),
            &mut |_| {},
        )
        .expect("clean");
    let secs = started.elapsed().as_secs_f64();
    println!(
        "pass: {:.2} s, read {:.0} MiB ({:.0} MB/s), wrote {:.0} MiB, removed {} records, \
         {} keys mapped, map full: {}, segments {} -> {}",
        secs,
        report.bytes_read as f64 / (1 << 20) as f64,
        report.bytes_read as f64 / 1e6 / secs,
        report.bytes_written as f64 / (1 << 20) as f64,
        report.records_removed,
        report.keys_mapped,
        report.key_map_full,
        report.segments_replaced,
        report.segments_written
    );
    println!(
        "log after: {:.0} MiB",
        log.size_bytes() as f64 / (1 << 20) as f64
    );
}
