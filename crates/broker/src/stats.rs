//! What the broker counts for metrics beyond what the front end does: records and bytes in
//! (appended by produce) and out (returned to consumers), per partition and for the node,
//! produce batch sizes, and ISR changes. Each is a relaxed atomic add on the path it counts;
//! the HTTP listener reads them at scrape time.

use std::sync::atomic::{AtomicU64, Ordering};

use tinymq_protocol::stats::Histogram;

/// Bounds of the records-per-batch histogram.
pub const BATCH_RECORDS_BOUNDS: &[u64] = &[
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 50_000,
];

/// Bounds of the bytes-per-batch histogram: 128 B to 16 MiB by powers of four.
pub const BATCH_BYTES_BOUNDS: &[u64] = &[
    128, 512, 2_048, 8_192, 32_768, 131_072, 524_288, 2_097_152, 8_388_608, 16_777_216,
];

/// Records and bytes through one partition (or the whole node).
#[derive(Debug, Default)]
pub struct Traffic {
    bytes_in: AtomicU64,
    records_in: AtomicU64,
    bytes_out: AtomicU64,
    records_out: AtomicU64,
}

/// [`Traffic`]'s figures at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrafficSnapshot {
    pub bytes_in: u64,
    pub records_in: u64,
    pub bytes_out: u64,
    pub records_out: u64,
}

impl Traffic {
    pub(crate) fn add_in(&self, bytes: u64, records: u64) {
        self.bytes_in.fetch_add(bytes, Ordering::Relaxed);
        self.records_in.fetch_add(records, Ordering::Relaxed);
    }

    pub(crate) fn add_out(&self, bytes: u64, records: u64) {
        self.bytes_out.fetch_add(bytes, Ordering::Relaxed);
        self.records_out.fetch_add(records, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> TrafficSnapshot {
        TrafficSnapshot {
            bytes_in: self.bytes_in.load(Ordering::Relaxed),
            records_in: self.records_in.load(Ordering::Relaxed),
            bytes_out: self.bytes_out.load(Ordering::Relaxed),
            records_out: self.records_out.load(Ordering::Relaxed),
        }
    }
}

/// The node's figures. One per process (a process runs one broker), so that the counters
/// stay monotonic while partitions come and go.
#[derive(Debug)]
pub struct NodeStats {
    /// Every partition's traffic, including partitions since deleted or moved away.
    pub traffic: Traffic,
    /// Records per produced batch (each batch written, duplicates of a retry not counted).
    pub batch_records: Histogram,
    /// Bytes per produced batch.
    pub batch_bytes: Histogram,
    /// Changes to the ISR of a partition led here (proposed by this leader, or made by the
    /// MetaServer, e.g. fencing a broker) that removed a replica...
    pub isr_shrinks: AtomicU64,
    /// ... and that added one.
    pub isr_expands: AtomicU64,
}

static NODE: NodeStats = NodeStats {
    traffic: Traffic {
        bytes_in: AtomicU64::new(0),
        records_in: AtomicU64::new(0),
        bytes_out: AtomicU64::new(0),
        records_out: AtomicU64::new(0),
    },
    batch_records: Histogram::new(BATCH_RECORDS_BOUNDS),
    batch_bytes: Histogram::new(BATCH_BYTES_BOUNDS),
    isr_shrinks: AtomicU64::new(0),
    isr_expands: AtomicU64::new(0),
};

/// This process's broker figures.
pub fn node() -> &'static NodeStats {
    &NODE
}

/// A batch appended to `partition` by produce.
pub(crate) fn produced(partition: &Traffic, bytes: u64, records: u64) {
    partition.add_in(bytes, records);
    NODE.traffic.add_in(bytes, records);
    NODE.batch_records.record(records);
    NODE.batch_bytes.record(bytes);
}

/// Batches of `partition` (gone meanwhile: `None`) returned to a consumer.
pub(crate) fn consumed(partition: Option<&Traffic>, bytes: u64, records: u64) {
    if let Some(partition) = partition {
        partition.add_out(bytes, records);
    }
    NODE.traffic.add_out(bytes, records);
}

/// A led partition's ISR changed: members `removed` and/or `added`.
pub(crate) fn isr_changed(removed: bool, added: bool) {
    if removed {
        NODE.isr_shrinks.fetch_add(1, Ordering::Relaxed);
    }
    if added {
        NODE.isr_expands.fetch_add(1, Ordering::Relaxed);
    }
}

/// This process's log fsyncs (see [`tinymq_log::fsync_stats`]), timed in nanoseconds.
pub fn fsyncs() -> &'static Histogram {
    tinymq_log::fsync_stats()
}
