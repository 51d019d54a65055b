//! A partition on this broker: its log, its idempotent-producer state, and the high watermark
//! that consumers wait on. Methods that touch the disk block; call them from blocking threads.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tinymq_log::{FlushPolicy, LogError, PartitionLog};
use tinymq_protocol::batch::{BatchIter, RecordBatch, BATCH_DECOMPRESSED_BYTES_MAX_DEFAULT};
use tinymq_protocol::ErrorCode;
use tokio::sync::watch;

use crate::producer_state::{BatchIdentity, ProducerStateTable, SequenceCheck, SequenceError};
use crate::topic::TopicSettings;

/// File beside the segments holding the producer state as of a clean close.
const PRODUCER_STATE_FILE: &str = "producer-state.json";
/// Bytes read at a time when rebuilding producer state from the log.
const REBUILD_READ_BYTES: usize = 8 << 20;

/// A failed produce or fetch, as the client will see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionError {
    pub code: ErrorCode,
    pub message: String,
}

impl PartitionError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> PartitionError {
        PartitionError {
            code,
            message: message.into(),
        }
    }
}

impl From<LogError> for PartitionError {
    fn from(e: LogError) -> PartitionError {
        PartitionError::new(e.error_code(), e.to_string())
    }
}

impl From<SequenceError> for PartitionError {
    fn from(e: SequenceError) -> PartitionError {
        let code = match e {
            SequenceError::StaleEpoch { .. } => ErrorCode::INVALID_PRODUCER_EPOCH,
            SequenceError::OutOfOrder { .. } => ErrorCode::OUT_OF_ORDER_SEQUENCE,
        };
        PartitionError::new(code, e.to_string())
    }
}

/// A write that still has to meet the flush policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingAppend {
    pub base_offset: i64,
    end_offset: i64,
}

#[derive(Serialize, Deserialize)]
struct ProducerStateSnapshot {
    /// The log end offset the table covers.
    offset: i64,
    table: ProducerStateTable,
}

#[derive(Debug)]
pub struct Partition {
    pub topic: String,
    pub index: u32,
    pub log: PartitionLog,
    dir: PathBuf,
    flush: FlushPolicy,
    producers: Mutex<ProducerStateTable>,
    high_watermark: watch::Sender<i64>,
}

impl Partition {
    pub fn dir_for(data_dir: &Path, topic: &str, index: u32) -> PathBuf {
        data_dir.join(format!("{topic}-{index}"))
    }

    /// Opens (recovering if needed) the partition's log and rebuilds its producer state.
    pub fn open(
        data_dir: &Path,
        topic: &str,
        index: u32,
        settings: &TopicSettings,
    ) -> Result<Partition, LogError> {
        let dir = Partition::dir_for(data_dir, topic, index);
        let (log, report) = PartitionLog::open(&dir, settings.log_config())?;
        if !report.truncations.is_empty() {
            tracing::warn!(
                topic,
                partition = index,
                bytes_cut = report.bytes_cut(),
                "partition recovered with a torn tail cut"
            );
        }
        let producers = rebuild_producer_state(&log, &dir)?;
        let flush = settings.flush_policy();
        let hw = visible_end(&log, flush);
        Ok(Partition {
            topic: topic.into(),
            index,
            log,
            dir,
            flush,
            producers: Mutex::new(producers),
            high_watermark: watch::Sender::new(hw),
        })
    }

    /// The end of what consumers may read: under `always`, what is fsynced; otherwise what is
    /// written (a process crash cannot lose it).
    pub fn high_watermark(&self) -> i64 {
        *self.high_watermark.borrow()
    }

    pub fn watch_high_watermark(&self) -> watch::Receiver<i64> {
        self.high_watermark.subscribe()
    }

    fn publish_high_watermark(&self) {
        let hw = visible_end(&self.log, self.flush);
        self.high_watermark.send_if_modified(|current| {
            let grew = hw > *current;
            *current = hw.max(*current);
            grew
        });
    }

    /// Validates and writes the batches in `records`, with idempotence, without waiting for
    /// the flush policy; [`Partition::finish`] does that. Returns the base offset given to the
    /// first record (the original one for a retried duplicate).
    pub fn write(
        &self,
        records: Bytes,
        batch_bytes_max: u32,
        leader_epoch: u32,
    ) -> Result<PendingAppend, PartitionError> {
        let identities = validate_batches(&records, batch_bytes_max)?;
        let mut producers = self.producers.lock();
        let mut duplicate = None;
        for identity in &identities {
            if let SequenceCheck::Duplicate {
                base_offset,
                last_offset,
            } = producers.check(identity)?
            {
                duplicate = Some(PendingAppend {
                    base_offset,
                    end_offset: last_offset + 1,
                });
            }
        }
        if let Some(pending) = duplicate {
            if identities.len() != 1 {
                return Err(PartitionError::new(
                    ErrorCode::INVALID_REQUEST,
                    "an idempotent produce carries one batch per partition",
                ));
            }
            return Ok(pending);
        }
        let mut buf = records.to_vec();
        let info = self.log.write(&mut buf, leader_epoch as i32)?;
        let mut base = info.base_offset;
        for (identity, batch) in identities.iter().zip(BatchIter::new(Bytes::from(buf))) {
            let batch = batch
                .map_err(|e| PartitionError::new(ErrorCode::CORRUPT_MESSAGE, e.to_string()))?;
            let last = base + i64::from(batch.last_offset_delta());
            producers.record(identity, base, last);
            base = last + 1;
        }
        Ok(PendingAppend {
            base_offset: info.base_offset,
            end_offset: info.log_end_offset,
        })
    }

    /// Waits for the flush policy to cover a write (sharing fsyncs with every other writer),
    /// then raises the high watermark. Returns the base offset.
    pub fn finish(&self, pending: PendingAppend) -> Result<i64, PartitionError> {
        self.log.await_flush_policy(pending.end_offset)?;
        self.publish_high_watermark();
        Ok(pending.base_offset)
    }

    /// Flushes if the interval policy says so, and publishes what became visible.
    pub fn flush_if_due(&self) -> Result<(), LogError> {
        self.log.flush_if_due()?;
        self.publish_high_watermark();
        Ok(())
    }

    /// Flushes everything and saves the producer state, so the next open need not rescan.
    pub fn close(&self) -> Result<(), LogError> {
        self.log.close()?;
        let snapshot = ProducerStateSnapshot {
            offset: self.log.log_end_offset(),
            table: self.producers.lock().clone(),
        };
        if let Err(e) = save_snapshot(&self.dir, &snapshot) {
            tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "could not save producer state; it will be rebuilt from the log");
        }
        Ok(())
    }
}

fn visible_end(log: &PartitionLog, flush: FlushPolicy) -> i64 {
    match flush {
        FlushPolicy::Always => log.durable_offset().min(log.log_end_offset()),
        _ => log.log_end_offset(),
    }
}

/// Checks every batch fully (framing, CRC, record count, bounded decompression) and returns
/// their producer identities.
fn validate_batches(
    records: &Bytes,
    batch_bytes_max: u32,
) -> Result<Vec<BatchIdentity>, PartitionError> {
    let corrupt = |e: tinymq_protocol::batch::BatchError| {
        let code = match e {
            tinymq_protocol::batch::BatchError::UnsupportedCompression(_) => {
                ErrorCode::UNSUPPORTED_COMPRESSION
            }
            _ => ErrorCode::CORRUPT_MESSAGE,
        };
        PartitionError::new(code, e.to_string())
    };
    let mut identities = Vec::new();
    for batch in BatchIter::new(records.clone()) {
        let batch: RecordBatch = batch.map_err(corrupt)?;
        if batch.size_bytes() > batch_bytes_max as usize {
            return Err(PartitionError::new(
                ErrorCode::MESSAGE_TOO_LARGE,
                format!(
                    "batch of {} bytes exceeds message_bytes_max {batch_bytes_max}",
                    batch.size_bytes()
                ),
            ));
        }
        batch
            .validate_records(BATCH_DECOMPRESSED_BYTES_MAX_DEFAULT)
            .map_err(corrupt)?;
        identities.push(identity_of(&batch));
    }
    if identities.is_empty() {
        return Err(PartitionError::new(
            ErrorCode::CORRUPT_MESSAGE,
            "no record batch in produce",
        ));
    }
    Ok(identities)
}

fn identity_of(batch: &RecordBatch) -> BatchIdentity {
    BatchIdentity {
        producer_id: batch.producer_id(),
        producer_epoch: batch.producer_epoch(),
        first_sequence: batch.base_sequence(),
        last_sequence: batch.last_sequence(),
    }
}

/// Loads the snapshot saved at the last clean close (if it still matches the log) and replays
/// the batch headers written after it.
fn rebuild_producer_state(log: &PartitionLog, dir: &Path) -> Result<ProducerStateTable, LogError> {
    let (start, end) = (log.log_start_offset(), log.log_end_offset());
    let (mut table, mut offset) = match load_snapshot(dir) {
        Some(s) if s.offset <= end => (s.table, s.offset.max(start)),
        _ => (ProducerStateTable::default(), start),
    };
    while offset < end {
        let read = log.read(offset, REBUILD_READ_BYTES, None)?;
        if read.records.is_empty() {
            break;
        }
        for batch in BatchIter::new(read.records) {
            let Ok(batch) = batch else { break };
            if batch.last_offset() >= offset {
                table.record(
                    &identity_of(&batch),
                    batch.base_offset(),
                    batch.last_offset(),
                );
            }
            offset = batch.next_offset();
        }
    }
    Ok(table)
}

fn load_snapshot(dir: &Path) -> Option<ProducerStateSnapshot> {
    let bytes = std::fs::read(dir.join(PRODUCER_STATE_FILE)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

fn save_snapshot(dir: &Path, snapshot: &ProducerStateSnapshot) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(snapshot).map_err(std::io::Error::other)?;
    crate::durable_file::write_atomically(&dir.join(PRODUCER_STATE_FILE), &bytes)
}
