//! One led partition's open timer: its [`TimerLog`] behind a lock, the group commit that
//! shares fsyncs between concurrent delayed produces, and the wake-up of its scheduler.
//! Belongs to one leadership (partition object and leader epoch); a new leadership opens the
//! log again and rebuilds from it. The methods that touch the disk block.
//!
//! A failed write or fsync, or a compaction that fails after its rename, stops the timer for
//! good (review findings 8 and 9): the state in memory (applied before the fsync) or the open
//! file (renamed over by the compaction) may then not match what is on disk, and acting on it
//! could acknowledge a store that is not durable, append under an identity that is not, or
//! write into an unlinked file. The failing store gets `STORAGE_ERROR`, the scheduler ends,
//! and the next store (or `super::Delays`' scan, every 250 ms) opens the log again from disk.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use tinymq_delay::{Admission, AdmitError, ClientIdentity, Entry};
use tinymq_protocol::ErrorCode;
use tinymq_storage::StorageFile;
use tokio::sync::Notify;

use super::timer_log::TimerLog;
use crate::partition::Partition;

#[derive(Debug)]
pub struct PartitionTimer {
    pub partition: Arc<Partition>,
    pub leader_epoch: u32,
    log: Mutex<TimerLog>,
    /// The file handle fsyncs go through (replaced by compaction), and the generation of the
    /// file: a compaction fsyncs everything it copies, so a wait from before it is over.
    sync: Mutex<SyncState>,
    /// Bytes written to the current file, read by the group commit without the log's lock.
    written: AtomicU64,
    generation: AtomicU64,
    /// Set when this leadership ends: the scheduler stops and no produce uses it any more.
    stopped: AtomicBool,
    /// Set by whoever starts the scheduler (one per timer).
    scheduler_claimed: AtomicBool,
    /// Wakes the scheduler when an entry is stored (it may be due before the one it sleeps
    /// for).
    pub wake: Notify,
}

#[derive(Debug)]
struct SyncState {
    file: Arc<dyn StorageFile>,
    generation: u64,
    synced: u64,
}

/// Where a write ended: what [`PartitionTimer::sync`] must cover.
#[derive(Debug, Clone, Copy)]
pub struct SyncTicket {
    generation: u64,
    end: u64,
}

/// A delayed produce the timer could not take, as the client will see it.
pub fn admit_error(e: AdmitError) -> (ErrorCode, String) {
    let code = match e {
        AdmitError::TooLate { .. } => ErrorCode::INVALID_DELIVERY_TIME,
        AdmitError::Full { .. } => ErrorCode::LIMIT_EXCEEDED,
    };
    (code, e.to_string())
}

fn io_error(what: &str, e: std::io::Error) -> (ErrorCode, String) {
    (ErrorCode::STORAGE_ERROR, format!("timer log {what}: {e}"))
}

impl PartitionTimer {
    /// Opens the partition's timer log (blocks: it is read whole).
    pub fn open(partition: Arc<Partition>, leader_epoch: u32) -> std::io::Result<PartitionTimer> {
        let log = TimerLog::open(partition.storage.clone(), &partition.dir)?;
        let sync = SyncState {
            file: log.file_handle(),
            generation: 0,
            synced: log.len(),
        };
        Ok(PartitionTimer {
            written: AtomicU64::new(log.len()),
            partition,
            leader_epoch,
            log: Mutex::new(log),
            sync: Mutex::new(sync),
            generation: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
            scheduler_claimed: AtomicBool::new(false),
            wake: Notify::new(),
        })
    }

    /// True for the one caller that is to start this timer's scheduler.
    pub fn claim_scheduler(&self) -> bool {
        !self.scheduler_claimed.swap(true, Ordering::AcqRel)
    }

    /// Ends this leadership's use of the log. Taken under the log's lock, so once it returns
    /// nothing more is written through this timer (every write checks under the lock): the
    /// next leadership may open the file. A round of this timer's scheduler still under way
    /// can only append batches under identities already in the log, which the next
    /// leadership's replay uses too, so the partition's idempotence keeps them single.
    pub fn stop(&self) {
        let _log = self.log.lock();
        self.stop_locked();
    }

    /// Marks the timer stopped without waiting for its log's lock: the scheduler and every
    /// later write see it, but a write under way may still finish (only [`Self::stop`]
    /// waits for that).
    pub fn mark_stopped(&self) {
        self.stop_locked();
    }

    /// [`PartitionTimer::stop`] for a caller that holds the log's lock.
    fn stop_locked(&self) {
        self.stopped.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// Stops the timer after a disk error (see the module's comment); returns the error.
    fn failed(&self, what: &str, e: std::io::Error) -> std::io::Error {
        let p = &self.partition;
        tracing::error!(topic = %p.topic, partition = p.index, what, error = %e, "timer log {what} failed; the timer stops and its log is opened again from disk");
        self.stop_locked();
        e
    }

    /// Whether the timer was stopped (by a leadership change or a disk error), not asking
    /// the partition: a timer stopped while its leadership goes on is to be opened again.
    pub fn stopped_itself(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// Whether this leadership is over (stopped, or the partition is led in another epoch).
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
            || self.partition.leading_epoch() != Some(self.leader_epoch)
    }

    /// Runs `f` on the log under its lock.
    pub fn with_log<T>(&self, f: impl FnOnce(&mut TimerLog) -> T) -> T {
        f(&mut self.log.lock())
    }

    /// Stores a checked batch (or recognises a retry), not yet fsynced: the caller then waits
    /// for [`PartitionTimer::sync`]. Returns the deliver-at time the broker will use: the
    /// one asked for, or the clock read under the lock if that is later — so an entry never
    /// goes in below one the scheduler has already delivered (which was due by then), and
    /// the partition stays in deliver-at order.
    pub fn store(
        &self,
        client: ClientIdentity,
        batch: Bytes,
        deliver_at_ms: i64,
    ) -> Result<(i64, SyncTicket), (ErrorCode, String)> {
        let mut log = self.log.lock();
        if self.stopped.load(Ordering::Acquire) {
            return Err((ErrorCode::NOT_LEADER, self.ended()));
        }
        let now_ms = crate::partition::now_ms();
        let admission = log
            .state()
            .admit(&client, batch.len(), deliver_at_ms, now_ms)
            .map_err(admit_error)?;
        let at = match admission {
            // A retry's first copy may not be fsynced yet: the ticket covers all written.
            Admission::Duplicate { deliver_at_ms } => deliver_at_ms,
            Admission::Store {
                entry_id,
                deliver_at_ms,
            } => {
                let stored = Entry::Stored {
                    entry_id,
                    deliver_at_ms,
                    stored_at_ms: now_ms,
                    client,
                    batch,
                };
                log.append(&[stored])
                    .map_err(|e| io_error("write", self.failed("write", e)))?;
                deliver_at_ms
            }
        };
        Ok((at, self.written_ticket(&log)))
    }

    /// Appends scheduler entries (`Assigned`, `Delivered`) and returns what to sync.
    pub fn append(&self, entries: &[Entry]) -> std::io::Result<SyncTicket> {
        let mut log = self.log.lock();
        if self.stopped.load(Ordering::Acquire) {
            return Err(std::io::Error::other(self.ended()));
        }
        log.append(entries).map_err(|e| self.failed("write", e))?;
        Ok(self.written_ticket(&log))
    }

    fn ended(&self) -> String {
        let p = &self.partition;
        format!(
            "{}/{}: this broker's leadership of it ended; retry",
            p.topic, p.index
        )
    }

    fn written_ticket(&self, log: &TimerLog) -> SyncTicket {
        self.written.store(log.len(), Ordering::Release);
        SyncTicket {
            generation: self.generation.load(Ordering::Acquire),
            end: log.len(),
        }
    }

    /// Returns once everything the ticket covers is fsynced, sharing the fsync with every
    /// writer waiting at the same time (one fsync covers all written before it started).
    pub fn sync(&self, ticket: SyncTicket) -> std::io::Result<()> {
        let mut sync = self.sync.lock();
        if sync.generation != ticket.generation || sync.synced >= ticket.end {
            return Ok(());
        }
        let target = self.written.load(Ordering::Acquire);
        if let Err(e) = sync.file.sync_data() {
            // The log's lock is taken before the sync state's everywhere else.
            drop(sync);
            let _log = self.log.lock();
            return Err(self.failed("fsync", e));
        }
        sync.synced = sync.synced.max(target);
        Ok(())
    }

    /// Compacts the log if that is worth it (see [`TimerLog::compaction_due`]).
    pub fn compact_if_due(&self) -> std::io::Result<()> {
        let mut log = self.log.lock();
        if self.stopped.load(Ordering::Acquire) || !log.compaction_due() {
            return Ok(());
        }
        let before = log.len();
        // After its rename the old handle names an unlinked file: nothing may be written
        // through it. Before the rename the old file is whole and still the log's, so the
        // timer goes on (and the next round tries again).
        match log.compact() {
            Ok(()) => {}
            Err(e) if e.renamed => return Err(self.failed("compaction", e.source)),
            Err(e) => return Err(e.source),
        }
        let file = log.file_handle();
        let mut sync = self.sync.lock();
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        *sync = SyncState {
            file,
            generation,
            synced: log.len(),
        };
        self.written.store(log.len(), Ordering::Release);
        tracing::info!(topic = %self.partition.topic, partition = self.partition.index, before, after = log.len(), "timer log compacted");
        Ok(())
    }
}
