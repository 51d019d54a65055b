//! Errors of the partition log, each mapped to a stable wire error code.

use std::io;
use std::path::PathBuf;

use tinymq_protocol::batch::BatchError;
use tinymq_protocol::ErrorCode;

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("i/o error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("invalid record batch: {0}")]
    InvalidBatch(#[from] BatchError),
    #[error("batch of {size} bytes exceeds the limit of {limit} bytes")]
    BatchTooLarge { size: usize, limit: u64 },
    #[error("offset {offset} is outside the log's range [{log_start}, {log_end}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start: i64,
        log_end: i64,
    },
    /// One write whose batches claim more offsets (last offset deltas) than one segment's
    /// indexes can address; no real batch does.
    #[error("a write of {offsets} offsets does not fit one segment (at most {limit})")]
    OffsetSpanTooLarge { offsets: u64, limit: u64 },
    /// The write's offsets would pass `i64::MAX`.
    #[error(
        "the log's offsets are exhausted: it ends at {log_end} and the write needs {offsets} more"
    )]
    OffsetsExhausted { log_end: i64, offsets: u64 },
    /// A write under a leader epoch below the latest one in the log (a deposed leader), or
    /// replicated batches whose epochs go back.
    #[error("leader epoch {epoch} is below the log's latest leader epoch {latest}")]
    StaleLeaderEpoch { epoch: i32, latest: i32 },
    #[error("leader epoch {0} is negative")]
    InvalidLeaderEpoch(i32),
    /// A new leader epoch the log's epoch cache refuses: it would start below the latest
    /// epoch's start, which only a cache that disagrees with its own log allows. Nothing was
    /// written.
    #[error("leader-epoch cache: {0}")]
    LeaderEpochs(#[from] tinymq_replication::EpochError),
    /// Replicated batches that do not continue the log: the first does not start at the log
    /// end, or one does not start right after the batch before it. Nothing was written.
    #[error("replicated batch {batch} starts at offset {found}, expected {expected}")]
    NotContiguous {
        batch: usize,
        expected: i64,
        found: i64,
    },
    #[error("invalid log configuration: {0}")]
    InvalidConfig(String),
    /// A write or fsync failed in a way that leaves the on-disk state unknown. The log refuses
    /// writes until it is reopened, which re-reads what is really on disk.
    #[error("log is failed after an unrecoverable storage error ({0}); reopen it to recover")]
    Failed(String),
    #[error("log is closed")]
    Closed,
}

impl LogError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> LogError {
        LogError::Io {
            path: path.into(),
            source,
        }
    }

    /// The wire error code a broker answers with.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            LogError::Io { .. }
            | LogError::Failed(_)
            | LogError::LeaderEpochs(_)
            | LogError::Closed
            | LogError::OffsetsExhausted { .. } => ErrorCode::STORAGE_ERROR,
            LogError::OffsetSpanTooLarge { .. } => ErrorCode::INVALID_RECORD,
            LogError::InvalidBatch(BatchError::UnsupportedCompression(_)) => {
                ErrorCode::UNSUPPORTED_COMPRESSION
            }
            LogError::InvalidBatch(_) => ErrorCode::CORRUPT_MESSAGE,
            LogError::BatchTooLarge { .. } => ErrorCode::MESSAGE_TOO_LARGE,
            LogError::OffsetOutOfRange { .. } | LogError::NotContiguous { .. } => {
                ErrorCode::OFFSET_OUT_OF_RANGE
            }
            // The writer's epoch is older than its own log's: it is not the leader any more.
            LogError::StaleLeaderEpoch { .. } => ErrorCode::NOT_LEADER,
            LogError::InvalidLeaderEpoch(_) => ErrorCode::INVALID_REQUEST,
            LogError::InvalidConfig(_) => ErrorCode::INVALID_CONFIG,
        }
    }
}
