//! A partition on this broker: its log, its idempotent-producer and transaction state, and
//! the high watermark that consumers wait on. Methods that touch the disk block (call them
//! from blocking threads), except [`Partition::try_append`] and the async ones, which are for
//! async tasks. Transaction markers and read-committed bounds are in [`txn`].

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tinymq_log::{FlushPolicy, LogError, PartitionLog, SystemClock};
use tinymq_protocol::batch::{
    field, BatchError, BatchHeader, BatchIter, Compression, RecordBatch, ATTR_COMPRESSION_MASK,
    BATCH_DECOMPRESSED_BYTES_MAX_DEFAULT,
};
use tinymq_protocol::ErrorCode;
use tinymq_storage::{OsStorage, Storage};
use tokio::sync::watch;

use crate::partition_txns::TxnError;
use crate::producer_state::{BatchIdentity, ProducerStateTable, SequenceCheck, SequenceError};
use crate::topic::TopicSettings;

pub mod txn;
pub use txn::MarkerWrite;

/// File beside the segments holding the producer state as of a clean close.
const PRODUCER_STATE_FILE: &str = "producer-state.json";
/// A producer state snapshot longer than this is not read (the table it would hold is bounded
/// far below: `producer_state`'s limits); the state is rebuilt from the log instead.
const PRODUCER_STATE_BYTES_MAX: u64 = 64 << 20;

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
            SequenceError::UnknownProducer { .. } => ErrorCode::UNKNOWN_PRODUCER_ID,
        };
        PartitionError::new(code, e.to_string())
    }
}

impl From<TxnError> for PartitionError {
    fn from(e: TxnError) -> PartitionError {
        let code = match e {
            TxnError::NotVerified { .. } => ErrorCode::INVALID_TXN_STATE,
            TxnError::TooManyOpen { .. } | TxnError::AbortedListFull { .. } => {
                ErrorCode::LIMIT_EXCEEDED
            }
        };
        PartitionError::new(code, e.to_string())
    }
}

impl From<BatchError> for PartitionError {
    fn from(e: BatchError) -> PartitionError {
        let code = match e {
            BatchError::UnsupportedCompression(_) => ErrorCode::UNSUPPORTED_COMPRESSION,
            BatchError::InvalidHeader(_) | BatchError::RecordCountMismatch { .. } => {
                ErrorCode::INVALID_RECORD
            }
            _ => ErrorCode::CORRUPT_MESSAGE,
        };
        PartitionError::new(code, e.to_string())
    }
}

/// What a produce to one partition is checked against besides the batch itself.
#[derive(Debug, Clone, Copy)]
pub struct ProduceContext {
    /// The leader epoch stamped into the batch.
    pub leader_epoch: u32,
    /// Producer ids below this have been handed out by the MetaServer; others are refused.
    pub producer_id_end: i64,
    /// The broker's wall clock, for timestamp bounds and producer expiry.
    pub now_ms: i64,
}

/// A write that still has to meet the flush policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingAppend {
    pub base_offset: i64,
    pub end_offset: i64,
    /// The leader epoch the write was taken in: an `acks=all` answer needs this broker to
    /// still lead in it once the high watermark passes `end_offset`.
    pub leader_epoch: u32,
}

#[derive(Serialize, Deserialize)]
struct ProducerStateSnapshot {
    /// The log end offset the table covers.
    offset: i64,
    /// The CRC of the batch that ended at `offset`: the snapshot is used only while the log
    /// still holds that very batch there (recovery may have cut below it and new batches
    /// filled the same offsets since). `None` for an empty log, or a snapshot from before.
    #[serde(default)]
    last_batch_crc: Option<u32>,
    table: ProducerStateTable,
}

/// The CRC of the batch of `log` that ends right before `offset`, if there is one.
fn crc_of_batch_ending_at(log: &PartitionLog, offset: i64) -> Option<u32> {
    let last = offset
        .checked_sub(1)
        .filter(|&o| o >= log.log_start_offset())?;
    let read = log.read(last, 1, None).ok()?;
    let batch = BatchIter::new(read.records).next()?.ok()?;
    (batch.next_offset() == offset).then(|| batch.crc())
}

#[derive(Debug)]
pub struct Partition {
    pub topic: String,
    pub index: u32,
    pub log: PartitionLog,
    pub(crate) dir: PathBuf,
    /// What every file in `dir` goes through: the log's, the producer state's, the share
    /// state logs' and the timer log's (the real file system but in fault tests).
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) flush: FlushPolicy,
    /// Behind a lock: a topic's settings change while it is open ([`Partition::apply_settings`]).
    timestamps: Mutex<TimestampBounds>,
    pub(crate) producers: Mutex<ProducerStateTable>,
    /// The first offset of the oldest open transaction (`i64::MAX` when none), published
    /// under the producer-state lock after every change, so that fetches compute the last
    /// stable offset without taking that lock (a writer holds it across its log write).
    pub(crate) first_unstable: std::sync::atomic::AtomicI64,
    pub(crate) high_watermark: watch::Sender<i64>,
    /// The log end, published after every write: what followers' long polls wait on.
    pub(crate) log_end: watch::Sender<i64>,
    /// The durable offset as of the last fsync [`Partition::await_durable`] ran: what
    /// produces under `always` wait on.
    durable: watch::Sender<i64>,
    /// Set while such an fsync runs: one at a time per partition.
    flushing: AtomicBool,
    /// Leader or follower, and the leader's view of its followers.
    pub(crate) role: Mutex<crate::role::Role>,
    /// Records and bytes produced to and fetched from this partition here, for metrics.
    pub traffic: crate::stats::Traffic,
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
        replicated: bool,
    ) -> Result<Partition, LogError> {
        Partition::open_with(
            data_dir,
            topic,
            index,
            settings,
            replicated,
            Arc::new(OsStorage),
        )
    }

    /// [`Partition::open`] with every file of the partition going through `storage`.
    pub fn open_with(
        data_dir: &Path,
        topic: &str,
        index: u32,
        settings: &TopicSettings,
        replicated: bool,
        storage: Arc<dyn Storage>,
    ) -> Result<Partition, LogError> {
        let dir = Partition::dir_for(data_dir, topic, index);
        let (log, report) = PartitionLog::open_with(
            &dir,
            settings.log_config(),
            storage.clone(),
            Arc::new(SystemClock),
        )?;
        if !report.truncations.is_empty() {
            tracing::warn!(
                topic,
                partition = index,
                bytes_cut = report.bytes_cut(),
                "partition recovered with a torn tail cut"
            );
        }
        let producers = rebuild_producer_state(&*storage, &log, &dir)?;
        let flush = settings.flush_policy();
        // A replicated partition's records past the high watermark may exist on this broker
        // only: they become visible once the replicas say they hold them. One replica alone
        // is its own ISR.
        let hw = if replicated {
            log.log_start_offset()
        } else {
            visible_end(&log, flush)
        };
        let (log_end, durable) = (log.log_end_offset(), log.durable_offset());
        Ok(Partition {
            topic: topic.into(),
            index,
            log,
            dir,
            storage,
            flush,
            timestamps: Mutex::new(TimestampBounds::of(settings)),
            first_unstable: std::sync::atomic::AtomicI64::new(
                producers.txns().last_stable_offset(i64::MAX),
            ),
            producers: Mutex::new(producers),
            high_watermark: watch::Sender::new(hw),
            log_end: watch::Sender::new(log_end),
            durable: watch::Sender::new(durable),
            flushing: AtomicBool::new(false),
            role: Mutex::new(crate::role::Role::default()),
            traffic: Default::default(),
        })
    }

    /// Applies changed topic settings to the open partition (size, age and retention limits,
    /// the batch limit, timestamp bounds); the flush policy cannot change while it is open.
    /// Changed retention limits are applied at once rather than at the next periodic pass.
    /// Blocks on disk I/O then (segment removal): call it on a blocking thread.
    pub(crate) fn apply_settings(&self, settings: &TopicSettings) -> Result<(), LogError> {
        let (was, wanted) = (self.log.config(), settings.log_config());
        if was == wanted {
            *self.timestamps.lock() = TimestampBounds::of(settings);
            return Ok(());
        }
        // The log first: a refused change leaves the partition wholly as it was.
        self.log.set_config(wanted.clone())?;
        *self.timestamps.lock() = TimestampBounds::of(settings);
        if (was.retention_age, was.retention_bytes)
            != (wanted.retention_age, wanted.retention_bytes)
        {
            self.apply_retention()?;
        }
        Ok(())
    }

    /// Deletes segments past the retention limits, and forgets the aborted transactions whose
    /// markers went with them. Blocks on disk I/O.
    pub fn apply_retention(&self) -> Result<tinymq_log::RetentionReport, LogError> {
        let report = self.log.apply_retention()?;
        let start = self.log.log_start_offset();
        self.producers.lock().trim_txns_below(start);
        Ok(report)
    }

    /// The end of what consumers may read: under `always`, what is fsynced; otherwise what is
    /// written (a process crash cannot lose it).
    pub fn high_watermark(&self) -> i64 {
        *self.high_watermark.borrow()
    }

    pub fn watch_high_watermark(&self) -> watch::Receiver<i64> {
        self.high_watermark.subscribe()
    }

    /// Raises the high watermark to what the replicas support (this broker's durable end when
    /// it is the only one in sync); never lowers it.
    pub(crate) fn publish_high_watermark(&self) {
        let own = visible_end(&self.log, self.flush);
        let current = self.high_watermark();
        let hw = match &*self.role.lock() {
            crate::role::Role::Leader(leader) => leader.high_watermark(current, own),
            // A follower learns its high watermark from the leader's answers.
            crate::role::Role::Follower { .. } => return,
        };
        self.raise_high_watermark(hw);
    }

    /// Raises the published high watermark to `hw` if that is higher.
    pub(crate) fn raise_high_watermark(&self, hw: i64) {
        self.high_watermark.send_if_modified(|current| {
            let grew = hw > *current;
            *current = hw.max(*current);
            grew
        });
    }

    /// Validates and writes the batch in `records`, with idempotence, without waiting for the
    /// flush policy; [`Partition::finish`] does that. Every check runs before anything is
    /// written, so a refused batch leaves the partition unchanged. Returns the base offset
    /// given to the first record (the original one for a retried duplicate). Blocks: it is
    /// [`Partition::check`] then [`Partition::append`].
    pub fn write(
        &self,
        records: Bytes,
        batch_bytes_max: u32,
        context: ProduceContext,
    ) -> Result<PendingAppend, PartitionError> {
        let checked = self.check(records, batch_bytes_max, &context)?;
        self.append(&checked, context)
    }

    /// Every check of a produced batch that needs no lock (see `validate_batch`); the batch's
    /// one CRC pass on this broker is here. Blocks on a decompression slot for a compressed
    /// batch ([`check_may_block`] says which do); otherwise only costs CPU.
    pub fn check(
        &self,
        records: Bytes,
        batch_bytes_max: u32,
        context: &ProduceContext,
    ) -> Result<CheckedProduce, PartitionError> {
        let timestamps = *self.timestamps.lock();
        let keys_required = self.log.cleanup_policy().compacts();
        let (batch, identity) = validate_batch(
            records,
            batch_bytes_max,
            &timestamps,
            keys_required,
            context,
        )?;
        Ok(CheckedProduce { batch, identity })
    }

    /// The idempotence check and the write of a checked batch. May block on slow disk work
    /// (a segment roll's fsync); [`Partition::try_append`] does not.
    pub fn append(
        &self,
        checked: &CheckedProduce,
        context: ProduceContext,
    ) -> Result<PendingAppend, PartitionError> {
        match self.append_with(checked, context, true)? {
            Some(pending) => Ok(pending),
            None => Err(PartitionError::new(
                ErrorCode::UNKNOWN_SERVER_ERROR,
                "a write allowed to block did not write",
            )),
        }
    }

    /// [`Partition::append`] for an async task: `Ok(None)`, with nothing changed, when the
    /// write would have to wait for slow disk work or for a writer doing some; the caller
    /// then runs [`Partition::append`] on a blocking thread.
    pub fn try_append(
        &self,
        checked: &CheckedProduce,
        context: ProduceContext,
    ) -> Result<Option<PendingAppend>, PartitionError> {
        self.append_with(checked, context, false)
    }

    fn append_with(
        &self,
        checked: &CheckedProduce,
        context: ProduceContext,
        may_block: bool,
    ) -> Result<Option<PendingAppend>, PartitionError> {
        let identity = &checked.identity;
        // Held across the log write (by a blocking writer, across a roll's fsyncs too), so an
        // async writer waits for it no longer than for the log's writer lock.
        let mut producers = if may_block {
            self.producers.lock()
        } else {
            match self.producers.try_lock_for(PRODUCERS_WAIT_INLINE_MAX) {
                Some(producers) => producers,
                None => return Ok(None),
            }
        };
        if let SequenceCheck::Duplicate {
            base_offset,
            last_offset,
        } = producers.check(identity)?
        {
            return Ok(Some(PendingAppend {
                base_offset,
                end_offset: last_offset + 1,
                leader_epoch: context.leader_epoch,
            }));
        }
        let transactional = checked.batch.is_transactional();
        if transactional {
            producers
                .txns()
                .check_leader_data(identity.producer_id, identity.producer_epoch)?;
        }
        let epoch = context.leader_epoch as i32;
        let info = if may_block {
            self.log.write_batch(&checked.batch, epoch)?
        } else {
            match self.log.try_write_batch(&checked.batch, epoch)? {
                Some(info) => info,
                None => return Ok(None),
            }
        };
        producers.record_batch(
            identity,
            transactional,
            info.base_offset,
            info.last_offset,
            context.now_ms,
        );
        if transactional {
            self.publish_unstable(&producers);
        }
        drop(producers);
        // Commits written to the offsets topic are not produced records.
        if !tinymq_meta::image::is_internal_topic(&self.topic) {
            let records = u64::try_from(checked.batch.record_count()).unwrap_or(0);
            let bytes = checked.batch.size_bytes() as u64;
            crate::stats::produced(&self.traffic, bytes, records);
        }
        self.log_end.send_replace(info.log_end_offset);
        Ok(Some(PendingAppend {
            base_offset: info.base_offset,
            end_offset: info.log_end_offset,
            leader_epoch: context.leader_epoch,
        }))
    }

    /// Waits for the flush policy to cover a write (sharing fsyncs with every other writer),
    /// then raises the high watermark. Returns the base offset. Blocks; async callers use
    /// [`Partition::finish_async`].
    pub fn finish(&self, pending: PendingAppend) -> Result<i64, PartitionError> {
        self.log.await_flush_policy(pending.end_offset)?;
        self.publish_high_watermark();
        Ok(pending.base_offset)
    }

    /// [`Partition::finish`] without parking a thread while it waits: under `os` (and
    /// `interval` when no fsync is due) nothing waits; under `always` the fsync runs on the
    /// blocking pool (see [`Partition::await_durable`]); a due `interval` fsync takes a
    /// blocking thread as the timer's does.
    pub async fn finish_async(
        self: &Arc<Self>,
        pending: PendingAppend,
    ) -> Result<i64, PartitionError> {
        match self.log.flush_policy() {
            FlushPolicy::Os => {}
            FlushPolicy::Interval(_) if !self.log.flush_due() => {}
            FlushPolicy::Interval(_) => {
                let p = self.clone();
                run_blocking(move || p.log.flush_if_due()).await??;
            }
            FlushPolicy::Always => self.await_durable(pending.end_offset).await?,
        }
        self.publish_high_watermark();
        Ok(pending.base_offset)
    }

    /// Waits until every offset below `end_offset` is fsynced, parking no thread: group
    /// commit across async tasks. At most one fsync per partition is in flight, started by
    /// whichever waiter finds none running and run on the blocking pool; it covers every
    /// write made before it started, and its end is published on the `durable` watch, which
    /// the other waiters await. The fsync's task clears the flag and publishes itself, so a
    /// waiter that gives up (a timed-out request) never leaves the partition without one.
    pub async fn await_durable(self: &Arc<Self>, end_offset: i64) -> Result<(), PartitionError> {
        let mut durable = self.durable.subscribe();
        loop {
            // Marked seen before the check, so a publish after it wakes `changed` below.
            durable.borrow_and_update();
            if self.log.durable_offset() >= end_offset {
                return Ok(());
            }
            if self.log.log_end_offset() < end_offset {
                // Only a truncation shortens the log: no fsync can cover this write any more,
                // and waiting would only run fsyncs until the request times out.
                return Err(PartitionError::new(
                    ErrorCode::NOT_LEADER,
                    format!(
                        "{}/{}: the write was cut by a truncation (this broker stopped leading) \
                         before it was fsynced; retry",
                        self.topic, self.index
                    ),
                ));
            }
            if self.flushing.swap(true, Ordering::AcqRel) {
                // Another waiter's fsync is running; it publishes when done. The sender lives
                // in `self`, so `changed` cannot fail while this runs.
                let _ = durable.changed().await;
                continue;
            }
            let p = self.clone();
            run_blocking(move || {
                let outcome = p.log.flush();
                // Cleared before publishing: a waiter woken by the publish may start the next.
                p.flushing.store(false, Ordering::Release);
                let now = p.log.durable_offset();
                p.durable.send_modify(|d| *d = (*d).max(now));
                outcome
            })
            .await??;
        }
    }

    /// Flushes if the interval policy says so, and publishes what became visible.
    pub fn flush_if_due(&self) -> Result<(), LogError> {
        self.log.flush_if_due()?;
        self.publish_high_watermark();
        Ok(())
    }

    /// Refuses further appends, flushing nothing and saving no producer state: the partition is
    /// deleted, and its directory is about to be renamed for removal (a snapshot written later
    /// would land in whatever directory then has the old name).
    pub fn abandon(&self) {
        self.log.abandon();
    }

    /// The producer state as of the log's end, for [`save_snapshot`].
    fn producer_snapshot(&self) -> ProducerStateSnapshot {
        let offset = self.log.log_end_offset();
        ProducerStateSnapshot {
            offset,
            last_batch_crc: crc_of_batch_ending_at(&self.log, offset),
            table: self.producers.lock().clone(),
        }
    }

    /// Flushes everything and saves the producer state, so the next open need not rescan.
    pub fn close(&self) -> Result<(), LogError> {
        self.log.close()?;
        let snapshot = self.producer_snapshot();
        if let Err(e) = save_snapshot(&*self.storage, &self.dir, &snapshot) {
            tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "could not save producer state; it will be rebuilt from the log");
        }
        Ok(())
    }
}

pub(crate) fn visible_end(log: &PartitionLog, flush: FlushPolicy) -> i64 {
    match flush {
        FlushPolicy::Always => log.durable_offset().min(log.log_end_offset()),
        _ => log.log_end_offset(),
    }
}

/// Compressed batches checked at once, broker-wide. Checking one may decompress up to
/// `BATCH_DECOMPRESSED_BYTES_MAX_DEFAULT` (64 MiB), so this bounds what hostile
/// compressed batches can make the broker allocate (4 × 64 MiB) however many connections send
/// them; the others wait on their blocking thread.
pub const DECOMPRESSIONS_IN_FLIGHT_MAX: usize = 4;

static DECOMPRESSIONS: (parking_lot::Mutex<usize>, parking_lot::Condvar) =
    (parking_lot::Mutex::new(0), parking_lot::Condvar::new());

/// One of the [`DECOMPRESSIONS_IN_FLIGHT_MAX`] slots, released when dropped.
struct DecompressionSlot;

impl DecompressionSlot {
    /// Blocks (call it on a blocking thread) until a slot is free.
    fn take() -> DecompressionSlot {
        let (count, freed) = &DECOMPRESSIONS;
        let mut count = count.lock();
        while *count >= DECOMPRESSIONS_IN_FLIGHT_MAX {
            freed.wait(&mut count);
        }
        *count += 1;
        DecompressionSlot
    }
}

impl Drop for DecompressionSlot {
    fn drop(&mut self) {
        let (count, freed) = &DECOMPRESSIONS;
        *count.lock() -= 1;
        freed.notify_one();
    }
}

/// Runs `f` (on a blocking thread) holding one of the [`DECOMPRESSIONS_IN_FLIGHT_MAX`]
/// slots.
pub(crate) fn with_decompression_slot<T>(f: impl FnOnce() -> T) -> T {
    let _slot = DecompressionSlot::take();
    f()
}

/// How far record timestamps may stray from the broker's clock (Kafka's
/// `message.timestamp.after.max.ms` / `before.max.ms`; `None` = no bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TimestampBounds {
    after_max_ms: Option<i64>,
    before_max_ms: Option<i64>,
}

impl TimestampBounds {
    fn of(settings: &TopicSettings) -> TimestampBounds {
        let bound = |ms: i64| (ms >= 0).then_some(ms);
        TimestampBounds {
            after_max_ms: bound(settings.message_timestamp_after_max_ms),
            before_max_ms: bound(settings.message_timestamp_before_max_ms),
        }
    }

    fn check(&self, min: i64, max: i64, now_ms: i64) -> Result<(), PartitionError> {
        let refuse = |what: String| Err(PartitionError::new(ErrorCode::INVALID_TIMESTAMP, what));
        if let Some(after) = self.after_max_ms {
            if max.saturating_sub(now_ms) > after {
                return refuse(format!(
                    "timestamp {max} is more than message_timestamp_after_max_ms = {after} \
                     ahead of the broker's clock ({now_ms})"
                ));
            }
        }
        if let Some(before) = self.before_max_ms {
            if now_ms.saturating_sub(min) > before {
                return refuse(format!(
                    "timestamp {min} is more than message_timestamp_before_max_ms = {before} \
                     behind the broker's clock ({now_ms})"
                ));
            }
        }
        Ok(())
    }
}

/// Whether [`Partition::check`] of `records` may block: a compressed batch waits for one of
/// the [`DECOMPRESSIONS_IN_FLIGHT_MAX`] slots and may decompress 64 MiB. Reads only the
/// attributes field; bytes too short to have one are refused by the check without blocking.
pub fn check_may_block(records: &[u8]) -> bool {
    records
        .get(field::ATTRIBUTES..field::ATTRIBUTES + 2)
        .is_some_and(|a| i16::from_be_bytes([a[0], a[1]]) & ATTR_COMPRESSION_MASK != 0)
}

/// A produced batch that passed every check of [`Partition::check`]; only
/// [`Partition::append`] (the idempotence check and the write) remains.
#[derive(Debug)]
pub struct CheckedProduce {
    batch: RecordBatch,
    identity: BatchIdentity,
}

/// Runs `f` on the blocking pool, as a produce's slow disk work does.
async fn run_blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, PartitionError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        PartitionError::new(
            ErrorCode::UNKNOWN_SERVER_ERROR,
            format!("worker failed: {e}"),
        )
    })
}

/// How long an async writer waits for the producer-state lock before it gives the write to a
/// blocking thread (see [`Partition::try_append`]); as long as the log's own wait.
const PRODUCERS_WAIT_INLINE_MAX: std::time::Duration = std::time::Duration::from_micros(500);

/// The one batch of a produce's partition entry, framing, magic and CRC checked.
pub(crate) fn one_batch(records: Bytes) -> Result<RecordBatch, PartitionError> {
    let mut batches = BatchIter::new(records);
    let batch: RecordBatch = match batches.next() {
        Some(batch) => batch?,
        None => {
            return Err(PartitionError::new(
                ErrorCode::CORRUPT_MESSAGE,
                "no record batch in produce",
            ))
        }
    };
    if batches.next().is_some() {
        return Err(PartitionError::new(
            ErrorCode::INVALID_RECORD,
            "a produce carries exactly one record batch per partition",
        ));
    }
    Ok(batch)
}

/// Checks the one batch of a produce fully before anything is written: framing, magic, CRC
/// (the only CRC pass on this broker: the log trusts a parsed [`RecordBatch`]), size, the
/// producer's attribute and id fields, the header against the records (bounded
/// decompression), timestamps, keys when the topic is compacted (a record without one could
/// never be superseded), and that a producer id was handed out by the MetaServer. Returns
/// the batch and its producer identity.
fn validate_batch(
    records: Bytes,
    batch_bytes_max: u32,
    timestamps: &TimestampBounds,
    keys_required: bool,
    context: &ProduceContext,
) -> Result<(RecordBatch, BatchIdentity), PartitionError> {
    let batch = one_batch(records)?;
    if batch.size_bytes() > batch_bytes_max as usize {
        return Err(PartitionError::new(
            ErrorCode::MESSAGE_TOO_LARGE,
            format!(
                "batch of {} bytes exceeds message_bytes_max {batch_bytes_max}",
                batch.size_bytes()
            ),
        ));
    }
    batch.check_producer_fields()?;
    let verify = || batch.verify(BATCH_DECOMPRESSED_BYTES_MAX_DEFAULT);
    let summary = match batch.compression() {
        Compression::None => verify()?,
        _ => with_decompression_slot(verify)?,
    };
    timestamps.check(summary.timestamp_min, summary.timestamp_max, context.now_ms)?;
    if keys_required && summary.keyless_records > 0 {
        return Err(PartitionError::new(
            ErrorCode::INVALID_RECORD,
            format!(
                "{} of the batch's records have no key: a compacted topic                  (cleanup_policy compact) keeps the latest record of each key, and takes only                  records with one",
                summary.keyless_records
            ),
        ));
    }
    let identity = identity_of(&batch);
    if identity.producer_id >= context.producer_id_end {
        return Err(PartitionError::new(
            ErrorCode::UNKNOWN_PRODUCER_ID,
            format!(
                "producer id {} was never handed out by this cluster (InitProducerId gives \
                 ids below {})",
                identity.producer_id, context.producer_id_end
            ),
        ));
    }
    Ok((batch, identity))
}

pub(crate) fn identity_of(batch: &RecordBatch) -> BatchIdentity {
    BatchIdentity {
        producer_id: batch.producer_id(),
        producer_epoch: batch.producer_epoch(),
        first_sequence: batch.base_sequence(),
        last_sequence: batch.last_sequence(),
    }
}

/// The producer fields of a batch header read from the log, with its base and last offsets.
pub(crate) fn identity_of_header(header: BatchHeader<'_>) -> (BatchIdentity, i64, i64) {
    let identity = BatchIdentity {
        producer_id: header.producer_id(),
        producer_epoch: header.producer_epoch(),
        first_sequence: header.base_sequence(),
        last_sequence: header.last_sequence(),
    };
    (identity, header.base_offset(), header.last_offset())
}

/// Loads the snapshot saved at the last clean close (if it still matches the log) and replays
/// the batch headers written after it: producers' sequences and epochs, and the transactions
/// their transactional batches open and their markers close.
pub(crate) fn rebuild_producer_state(
    storage: &dyn Storage,
    log: &PartitionLog,
    dir: &Path,
) -> Result<ProducerStateTable, LogError> {
    let (start, end) = (log.log_start_offset(), log.log_end_offset());
    // The snapshot describes the log as of the last clean close; it is used only if the log
    // still holds, at its offset, the batch it was taken after.
    let (mut table, offset) = match load_snapshot(storage, dir) {
        Some(s)
            if s.offset <= end
                && (s.last_batch_crc.is_none()
                    || crc_of_batch_ending_at(log, s.offset) == s.last_batch_crc) =>
        {
            (s.table, s.offset.max(start))
        }
        _ => (ProducerStateTable::default(), start),
    };
    let now = now_ms();
    if offset < end {
        // Headers only: the producer fields are all there, and reading (and CRC-checking)
        // every record of a large log after a crash would make it slow to serve again. A
        // marker's type is in its one record: that batch (a few dozen bytes) is read.
        log.for_each_batch_header(offset, |header| {
            // The time of the write is not in the log (record timestamps are the
            // producer's): a producer found here counts as having written at the restart,
            // so a crash never shortens how long its retries are recognised.
            txn::replay_header(&mut table, log, header, now);
        })?;
    }
    table.trim_txns_below(start);
    table.expire(now);
    Ok(table)
}

/// Milliseconds since the Unix epoch by the broker's clock.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The snapshot saved at the last clean close, if it is there and intact. The file is the
/// CRC-32C of the JSON as 8 hex digits, a newline, then the JSON; a file that fails the check
/// (or is unreadable) is ignored and the state rebuilt from the log, which is always correct,
/// only slower. A file without the checksum line (from an earlier version) is read as is.
fn load_snapshot(storage: &dyn Storage, dir: &Path) -> Option<ProducerStateSnapshot> {
    let path = dir.join(PRODUCER_STATE_FILE);
    let bytes = match tinymq_storage::read_file(storage, &path, PRODUCER_STATE_BYTES_MAX) {
        Ok(bytes) => bytes?,
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "producer state snapshot unreadable; rebuilding it from the log");
            return None;
        }
    };
    let json = match bytes.split_first() {
        Some((b'{', _)) => &bytes[..],
        _ => {
            let (crc, json) = bytes.split_at_checked(9)?;
            let stored = u32::from_str_radix(std::str::from_utf8(crc.get(..8)?).ok()?, 16).ok()?;
            if crc.get(8) != Some(&b'\n') || crc32c::crc32c(json) != stored {
                tracing::warn!(dir = %dir.display(), "producer state snapshot damaged; rebuilding it from the log");
                return None;
            }
            json
        }
    };
    serde_json::from_slice(json).ok()
}

/// Replaces the snapshot whole (`tinymq_storage::replace_file`): a failure leaves the last
/// one, or none, and the next open rebuilds from the log either way.
fn save_snapshot(
    storage: &dyn Storage,
    dir: &Path,
    snapshot: &ProducerStateSnapshot,
) -> std::io::Result<()> {
    let json = serde_json::to_vec(snapshot).map_err(std::io::Error::other)?;
    let mut bytes = format!("{:08x}\n", crc32c::crc32c(&json)).into_bytes();
    bytes.extend_from_slice(&json);
    tinymq_storage::replace_file(storage, &dir.join(PRODUCER_STATE_FILE), &bytes)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tinymq_protocol::batch::craft::CraftedBatch;

    fn batch(value: &str, producer: (i64, i16, i32)) -> Bytes {
        let mut b = CraftedBatch::honest(now_ms(), &[value.as_bytes()]);
        (b.producer_id, b.producer_epoch, b.base_sequence) = producer;
        b.encode()
    }

    fn write(p: &Partition, records: Bytes) -> Result<i64, PartitionError> {
        let context = ProduceContext {
            leader_epoch: 1,
            producer_id_end: 100,
            now_ms: now_ms(),
        };
        let pending = p.write(records, 1 << 20, context)?;
        p.finish(pending)
    }

    /// Under `always`, many writers awaiting their fsync at once (the async group commit) each
    /// return only once their write is durable, and all of them return.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_async_finishes_each_wait_for_their_own_fsync() {
        let tmp = tempfile::tempdir().unwrap();
        let p = Arc::new(
            Partition::open(tmp.path(), "t", 0, &TopicSettings::default(), false).unwrap(),
        );
        let context = ProduceContext {
            leader_epoch: 1,
            producer_id_end: 100,
            now_ms: now_ms(),
        };
        let writers: Vec<_> = (0..32)
            .map(|i| {
                let p = p.clone();
                tokio::spawn(async move {
                    let checked =
                        p.check(batch(&format!("v{i}"), (-1, -1, -1)), 1 << 20, &context)?;
                    let pending = match p.try_append(&checked, context)? {
                        Some(pending) => pending,
                        None => {
                            let q = p.clone();
                            tokio::task::spawn_blocking(move || q.append(&checked, context))
                                .await
                                .unwrap()?
                        }
                    };
                    p.finish_async(pending).await?;
                    assert!(
                        p.log.durable_offset() >= pending.end_offset,
                        "finished before its write was fsynced"
                    );
                    Ok::<_, PartitionError>(pending.end_offset)
                })
            })
            .collect();
        let mut ends = Vec::new();
        for writer in writers {
            ends.push(writer.await.unwrap().unwrap());
        }
        ends.sort_unstable();
        assert_eq!(
            ends,
            (1..=32).collect::<Vec<i64>>(),
            "one offset each, none lost"
        );
        assert_eq!(p.high_watermark(), 32);
    }

    /// A producer-state snapshot taken before the log was cut and written again up to the same
    /// offset is not reused: a retry of a batch that is gone is not answered as a duplicate.
    #[test]
    fn a_snapshot_of_a_log_that_changed_below_it_is_not_used() {
        let tmp = tempfile::tempdir().unwrap();
        let settings = TopicSettings::default();
        let p = Partition::open(tmp.path(), "t", 0, &settings, false).unwrap();
        for seq in 0..3 {
            assert_eq!(
                write(&p, batch("old", (5, 0, seq))).unwrap(),
                i64::from(seq)
            );
        }
        p.close().unwrap();
        drop(p);
        let p = Partition::open(tmp.path(), "t", 0, &settings, false).unwrap();
        assert_eq!(
            write(&p, batch("old", (5, 0, 2))).unwrap(),
            2,
            "the snapshot answers a retry with its original offset"
        );
        p.log.truncate_to(1).unwrap();
        assert_eq!(write(&p, batch("new", (-1, -1, -1))).unwrap(), 1);
        assert_eq!(write(&p, batch("new", (-1, -1, -1))).unwrap(), 2);
        drop(p); // a crash: no new snapshot
        let p = Partition::open(tmp.path(), "t", 0, &settings, false).unwrap();
        let retry = write(&p, batch("old", (5, 0, 2))).unwrap_err();
        assert_eq!(
            retry.code,
            ErrorCode::OUT_OF_ORDER_SEQUENCE,
            "{}",
            retry.message
        );
    }

    /// Issue 28: saving the producer state on a failing disk (ENOSPC, a torn write, EIO on
    /// its fsync) is refused with an error naming the file, leaves the last snapshot whole,
    /// and a restart after a power cut rebuilds the rest from the log: a retry of a batch
    /// written after the snapshot still gets its original offset.
    #[test]
    fn a_failed_producer_state_save_keeps_the_last_snapshot_and_a_restart_rebuilds_the_rest() {
        use tinymq_storage::fault::{CrashMode, Faults, FaultyStorage};
        for fault in Faults::each_write_fault(10) {
            let fs = FaultyStorage::new();
            let storage: Arc<dyn Storage> = Arc::new(fs.clone());
            let settings = TopicSettings::default();
            let open = || {
                Partition::open_with(
                    Path::new("/data"),
                    "t",
                    0,
                    &settings,
                    false,
                    storage.clone(),
                )
                .unwrap()
            };
            let p = open();
            for seq in 0..3 {
                assert_eq!(write(&p, batch("v", (5, 0, seq))).unwrap(), i64::from(seq));
            }
            p.close().unwrap();
            drop(p);
            let p = open();
            for seq in 3..5 {
                assert_eq!(write(&p, batch("v", (5, 0, seq))).unwrap(), i64::from(seq));
            }
            fs.set_faults(fault.clone());
            let e = save_snapshot(&fs, &p.dir, &p.producer_snapshot()).unwrap_err();
            assert!(
                e.to_string().contains(PRODUCER_STATE_FILE),
                "{fault:?}: {e}"
            );
            // The close itself never panics; it may fail (EIO on the log's fsync).
            let _ = p.close();
            fs.set_faults(Faults::default());
            drop(p);
            fs.crash(CrashMode::KeepUnsyncedPrefix(1 << 20));
            let p = open();
            assert_eq!(
                write(&p, batch("v", (5, 0, 4))).unwrap(),
                4,
                "{fault:?}: the retry is recognised"
            );
            assert_eq!(write(&p, batch("v", (5, 0, 5))).unwrap(), 5, "{fault:?}");
        }
    }
}
