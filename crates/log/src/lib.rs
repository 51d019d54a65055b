//! tinymq's partition log: an append-only sequence of record batches in segment files, with
//! sparse offset and time indexes, a flush policy with group commit, crash recovery, and
//! retention. No networking: the broker drives it.
//!
//! ```no_run
//! use tinymq_log::{LogConfig, PartitionLog};
//! # fn main() -> Result<(), tinymq_log::LogError> {
//! let (log, report) = PartitionLog::open("data/orders-0".as_ref(), LogConfig::default())?;
//! assert!(report.truncations.is_empty(), "a clean start cuts nothing");
//! # let mut batch = Vec::new();
//! let appended = log.append(&mut batch, 0)?; // returns after fsync under the default policy
//! let read = log.read(appended.base_offset, 1 << 20, None)?;
//! # Ok(()) }
//! ```
//!
//! The on-disk format and the durability promises are in `docs/storage.md`.

mod checkpoint_text;
mod cleaner;
mod cleaner_checkpoint;
mod clock;
mod config;
mod epoch;
mod error;
mod index;
mod log;
mod log_start;
mod maintenance;
mod open_files;
mod read;
mod recovery;
mod replica;
mod segment;

pub use cleaner::{
    CleanLimits, CleanReport, Cleanable, KEY_MAP_BYTES_MAX_DEFAULT, KEY_MAP_BYTES_MIN,
    KEY_MAP_ENTRY_BYTES,
};
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{
    CleanupPolicy, CompactionConfig, FlushPolicy, LogConfig, DELETE_RETENTION_DEFAULT,
    DIRTY_RATIO_MIN_DEFAULT, INDEX_INTERVAL_BYTES_DEFAULT, SEGMENT_BYTES_DEFAULT,
    SEGMENT_BYTES_MAX, SEGMENT_BYTES_MIN,
};
pub use error::LogError;
pub use log::{AppendInfo, PartitionLog};
pub use maintenance::RetentionReport;
pub use open_files::{OpenFiles, OPEN_SEGMENT_FILES_MAX_DEFAULT};
pub use read::{FileSlice, ReadResult, SliceRead};
pub use recovery::{RecoveryReport, Truncation};
// The storage layer lives in tinymq-storage (shared with every other durable file); these
// re-exports keep `tinymq_log::{Storage, fault, …}` working, and `crate::storage` names it here.
use tinymq_storage as storage;
pub use tinymq_storage::fault;
pub use tinymq_storage::{replace_file, OsStorage, Storage, StorageFile};

/// Every fsync of a segment's log file in this process (the flush policy's and a roll's),
/// timed in nanoseconds, for metrics. One histogram per process, like [`OpenFiles::shared`]:
/// a process runs one broker.
pub fn fsync_stats() -> &'static tinymq_protocol::stats::Histogram {
    &FSYNC
}

static FSYNC: tinymq_protocol::stats::Histogram =
    tinymq_protocol::stats::Histogram::new(tinymq_protocol::stats::LATENCY_BOUNDS_NANOS);

/// Runs one fsync, timing it into [`fsync_stats`].
pub(crate) fn timed_fsync(sync: impl FnOnce() -> std::io::Result<()>) -> std::io::Result<()> {
    let started = std::time::Instant::now();
    let outcome = sync();
    FSYNC.record_duration(started.elapsed());
    outcome
}

#[cfg(test)]
mod cleaner_tests;
#[cfg(test)]
mod hostile_tests;
#[cfg(test)]
mod replica_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod write_batch_tests;
