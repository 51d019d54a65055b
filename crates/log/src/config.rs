//! Per-log settings: segment size and age, index density, flush policy, retention and
//! compaction (the cleanup policy and the cleaner's timing).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use crate::open_files::OpenFiles;

/// Default segment size: roll to a new segment file past 1 GiB.
pub const SEGMENT_BYTES_DEFAULT: u64 = 1 << 30;
/// Segment files are addressed with 32-bit positions in the offset index.
pub const SEGMENT_BYTES_MAX: u64 = u32::MAX as u64;
/// Smallest segment size accepted: one full batch header and a little more.
pub const SEGMENT_BYTES_MIN: u64 = 1024;
/// Default spacing of offset and time index entries.
pub const INDEX_INTERVAL_BYTES_DEFAULT: u32 = 4096;

/// When appended data is forced to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FlushPolicy {
    /// An append returns only after its bytes are fsynced. Appends that arrive while an fsync
    /// runs share the next one (group commit). Survives power loss.
    #[default]
    Always,
    /// fsync at most this long after an append; an append returns before it. A power cut may
    /// lose up to this much; a process crash loses nothing (the page cache survives).
    Interval(Duration),
    /// Never fsync on append; the OS writes back when it likes. Segments are still fsynced when
    /// they roll and when the log closes. For users who rely on replication.
    Os,
}

impl fmt::Display for FlushPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FlushPolicy::Always => write!(f, "always"),
            FlushPolicy::Interval(d) => write!(f, "interval:{}", d.as_millis()),
            FlushPolicy::Os => write!(f, "os"),
        }
    }
}

impl FromStr for FlushPolicy {
    type Err = String;

    /// Parses `always`, `interval:<ms>` or `os`.
    fn from_str(s: &str) -> Result<FlushPolicy, String> {
        match s {
            "always" => Ok(FlushPolicy::Always),
            "os" => Ok(FlushPolicy::Os),
            _ => {
                let ms = s
                    .strip_prefix("interval:")
                    .and_then(|ms| ms.parse::<u64>().ok())
                    .filter(|&ms| ms > 0)
                    .ok_or_else(|| {
                        format!("flush policy {s:?}: expected always, interval:<ms> (ms > 0) or os")
                    })?;
                Ok(FlushPolicy::Interval(Duration::from_millis(ms)))
            }
        }
    }
}

// One definition for the wire, the MetaServer's checks and the log.
pub use tinymq_protocol::names::CleanupPolicy;

/// Default of [`CompactionConfig::delete_retention`]: a day, as Kafka's.
pub const DELETE_RETENTION_DEFAULT: Duration = Duration::from_secs(24 * 3600);
/// Default of [`CompactionConfig::dirty_ratio_min`]: half, as Kafka's.
pub const DIRTY_RATIO_MIN_DEFAULT: f64 = 0.5;

/// When the cleaner may and must clean a compacted log (Kafka's topic settings of the same
/// meaning).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompactionConfig {
    /// A tombstone (a record with a key and no value) stays at least this long after the
    /// cleaner first finds it in a cleaned segment: `delete.retention.ms`.
    pub delete_retention: Duration,
    /// A record is not compacted until it is at least this old (by its timestamp):
    /// `min.compaction.lag.ms`.
    pub compaction_lag_min: Duration,
    /// A log whose oldest uncleaned record is older than this is cleaned whatever its dirty
    /// ratio: `max.compaction.lag.ms`; `None` = no such bound.
    pub compaction_lag_max: Option<Duration>,
    /// A log is cleaned once its uncleaned bytes are at least this share of its cleanable
    /// bytes: `min.cleanable.dirty.ratio`, in [0, 1].
    pub dirty_ratio_min: f64,
}

impl Default for CompactionConfig {
    fn default() -> CompactionConfig {
        CompactionConfig {
            delete_retention: DELETE_RETENTION_DEFAULT,
            compaction_lag_min: Duration::ZERO,
            compaction_lag_max: None,
            dirty_ratio_min: DIRTY_RATIO_MIN_DEFAULT,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    /// Roll to a new segment when the active one would grow past this.
    pub segment_bytes: u64,
    /// Roll when the active segment's first batch is older than this (by its timestamp).
    pub segment_age_max: Option<Duration>,
    /// Write an index entry each time this many log bytes have been appended since the last.
    pub index_interval_bytes: u32,
    pub flush: FlushPolicy,
    /// Whether old segments are deleted, compacted, or both. Retention limits apply only
    /// when it deletes.
    pub cleanup: CleanupPolicy,
    pub compaction: CompactionConfig,
    /// Delete whole segments whose newest record is older than this.
    pub retention_age: Option<Duration>,
    /// Delete the oldest segments while the log would still hold at least this many bytes.
    pub retention_bytes: Option<u64>,
    /// Largest batch accepted by append.
    pub batch_bytes_max: u32,
    /// The cache segments open their log files through; by default the process-wide one
    /// ([`OpenFiles::shared`]), whose limit is the broker's `open_segment_files_max`.
    pub open_files: Arc<OpenFiles>,
}

impl Default for LogConfig {
    fn default() -> LogConfig {
        LogConfig {
            segment_bytes: SEGMENT_BYTES_DEFAULT,
            segment_age_max: None,
            index_interval_bytes: INDEX_INTERVAL_BYTES_DEFAULT,
            flush: FlushPolicy::Always,
            cleanup: CleanupPolicy::Delete,
            compaction: CompactionConfig::default(),
            retention_age: None,
            retention_bytes: None,
            batch_bytes_max: 1 << 20,
            open_files: OpenFiles::shared(),
        }
    }
}

impl LogConfig {
    /// Checks the settings against their limits.
    pub fn validate(&self) -> Result<(), String> {
        if !(SEGMENT_BYTES_MIN..=SEGMENT_BYTES_MAX).contains(&self.segment_bytes) {
            return Err(format!(
                "segment_bytes {} outside [{SEGMENT_BYTES_MIN}, {SEGMENT_BYTES_MAX}]",
                self.segment_bytes
            ));
        }
        if self.index_interval_bytes == 0 {
            return Err("index_interval_bytes must be > 0".into());
        }
        if u64::from(self.batch_bytes_max) > self.segment_bytes {
            return Err(format!(
                "batch_bytes_max {} exceeds segment_bytes {}",
                self.batch_bytes_max, self.segment_bytes
            ));
        }
        let ratio = self.compaction.dirty_ratio_min;
        if !(0.0..=1.0).contains(&ratio) {
            return Err(format!("dirty_ratio_min {ratio} outside [0, 1]"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_policy_parses_and_prints() {
        for text in ["always", "os", "interval:250"] {
            assert_eq!(text.parse::<FlushPolicy>().unwrap().to_string(), text);
        }
        for bad in ["", "sometimes", "interval:", "interval:0", "interval:-5"] {
            assert!(bad.parse::<FlushPolicy>().is_err(), "{bad}");
        }
    }

    #[test]
    fn limits_are_checked() {
        assert!(LogConfig::default().validate().is_ok());
        let tiny = LogConfig {
            segment_bytes: 10,
            ..LogConfig::default()
        };
        assert!(tiny.validate().is_err());
    }
}
