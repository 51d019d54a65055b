//! The open timers of the partitions led here, one per leadership (`Delays`), opened by
//! whichever of a `ProduceDelayed` or the leader scan needs one first, and stopped when their
//! leadership ends.
//!
//! Stopping a timer takes its log's lock, which a compaction or a large store may hold for a
//! while, so it is never done on a runtime thread nor under `Delays.timers` (review finding
//! 11): the atomic flag is set at once (the scheduler and new stores see it), and the locked
//! stop runs on a blocking thread — for a replaced slot inside the new slot's open, before
//! the file is read, so a store of the old timer still under way is in the file the new one
//! reads.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tinymq_protocol::messages as m;
use tinymq_protocol::ErrorCode;

use super::timer::PartitionTimer;
use crate::partition::Partition;

/// The open timers of the partitions led here, one per leadership.
#[derive(Debug, Default)]
pub struct Delays {
    timers: Mutex<HashMap<(String, u32), Arc<TimerSlot>>>,
}

/// A leadership's timer, opened by whichever of the handler or the scan needs it first.
#[derive(Debug)]
struct TimerSlot {
    partition: Arc<Partition>,
    leader_epoch: u32,
    timer: tokio::sync::OnceCell<Arc<PartitionTimer>>,
    /// The slots this one replaced (the one before it, and those that one replaced and had
    /// not stopped yet), stopped under their logs' locks before this one opens.
    replaced: Mutex<Vec<Arc<TimerSlot>>>,
}

impl TimerSlot {
    /// Blocks on the log's lock: on a blocking thread only.
    fn stop(&self) {
        if let Some(timer) = self.timer.get() {
            timer.stop();
        }
    }

    /// Marks the timer stopped without its log's lock (see the module's comment).
    fn mark_stopped(&self) {
        if let Some(timer) = self.timer.get() {
            timer.mark_stopped();
        }
    }
}

/// Stops `slots` on a blocking thread and waits for it.
async fn stop_blocking(slots: Vec<Arc<TimerSlot>>) {
    if slots.is_empty() {
        return;
    }
    let _ = tokio::task::spawn_blocking(move || slots.iter().for_each(|s| s.stop())).await;
}

pub(super) fn key(partition: &Partition) -> (String, u32) {
    (partition.topic.clone(), partition.index)
}

impl Delays {
    /// The timer of `partition`, led here in `leader_epoch`: opened (read whole, on a blocking
    /// thread) with its scheduler started by `start_scheduler` the first time.
    pub(super) async fn timer(
        &self,
        partition: &Arc<Partition>,
        leader_epoch: u32,
        start_scheduler: impl FnOnce(Arc<PartitionTimer>),
    ) -> Result<Arc<PartitionTimer>, m::Error> {
        let ended = || {
            ErrorCode::NOT_LEADER.with_message(format!(
                "{}/{}: leadership changed; retry",
                partition.topic, partition.index
            ))
        };
        // A request that read an older epoch must not replace the current leadership's timer.
        if partition.leading_epoch() != Some(leader_epoch) {
            return Err(ended());
        }
        let slot = {
            let mut timers = self.timers.lock();
            match timers.get(&key(partition)) {
                // (A timer that stopped itself after a disk error is opened again.)
                Some(s)
                    if Arc::ptr_eq(&s.partition, partition)
                        && s.leader_epoch == leader_epoch
                        && !s.timer.get().is_some_and(|t| t.stopped_itself()) =>
                {
                    s.clone()
                }
                Some(s)
                    if Arc::ptr_eq(&s.partition, partition) && s.leader_epoch > leader_epoch =>
                {
                    return Err(ended());
                }
                _ => {
                    let slot = Arc::new(TimerSlot {
                        partition: partition.clone(),
                        leader_epoch,
                        timer: tokio::sync::OnceCell::new(),
                        replaced: Mutex::new(Vec::new()),
                    });
                    if let Some(old) = timers.insert(key(partition), slot.clone()) {
                        old.mark_stopped();
                        let mut chain = std::mem::take(&mut *old.replaced.lock());
                        chain.push(old);
                        *slot.replaced.lock() = chain;
                    }
                    slot
                }
            }
        };
        let is_current = || {
            let timers = self.timers.lock();
            timers
                .get(&key(partition))
                .is_some_and(|s| Arc::ptr_eq(s, &slot))
        };
        let open = || async {
            if !is_current() {
                return Err(ended());
            }
            // Taken only once stopped, so an open cancelled meanwhile stops it again.
            let replaced = slot.replaced.lock().clone();
            stop_blocking(replaced).await;
            slot.replaced.lock().clear();
            let p = partition.clone();
            let opened = tokio::task::spawn_blocking(move || PartitionTimer::open(p, leader_epoch))
                .await
                .map_err(|e| ErrorCode::UNKNOWN_SERVER_ERROR.with_message(e.to_string()))?;
            opened.map(Arc::new).map_err(|e| {
                ErrorCode::STORAGE_ERROR.with_message(format!(
                    "{}/{}: cannot open the timer log: {e}",
                    partition.topic, partition.index
                ))
            })
        };
        let timer = slot.timer.get_or_try_init(open).await?.clone();
        // Replaced while opening: the leadership it was opened for is over.
        if !is_current() || timer.is_stopped() {
            timer.mark_stopped();
            let t = timer.clone();
            let _ = tokio::task::spawn_blocking(move || t.stop()).await;
            return Err(ended());
        }
        if timer.claim_scheduler() {
            start_scheduler(timer.clone());
        }
        Ok(timer)
    }

    /// Stops the timers of leaderships that ended (or of partitions no longer open here, as
    /// `open_here` tells). The slots stay in the map until stopped, so a new leadership's slot
    /// replaces them and stops them too before it opens (see the module's comment).
    pub(super) async fn retire_ended(
        &self,
        open_here: impl Fn(&str, u32) -> Option<Arc<Partition>>,
    ) {
        let ended: Vec<Arc<TimerSlot>> = {
            let timers = self.timers.lock();
            timers
                .iter()
                .filter(|((topic, index), slot)| {
                    let open = open_here(topic, *index);
                    let led = open.is_some_and(|p| Arc::ptr_eq(&p, &slot.partition))
                        && slot.partition.leading_epoch() == Some(slot.leader_epoch);
                    !led
                })
                .map(|(_, slot)| slot.clone())
                .collect()
        };
        ended.iter().for_each(|s| s.mark_stopped());
        stop_blocking(ended.clone()).await;
        let mut timers = self.timers.lock();
        for slot in ended {
            let k = key(&slot.partition);
            if timers.get(&k).is_some_and(|s| Arc::ptr_eq(s, &slot)) {
                timers.remove(&k);
            }
        }
    }

    /// Whether the leadership of `partition` in `leader_epoch` has its timer running.
    pub(super) fn is_running(&self, partition: &Arc<Partition>, leader_epoch: u32) -> bool {
        let timers = self.timers.lock();
        timers.get(&key(partition)).is_some_and(|s| {
            Arc::ptr_eq(&s.partition, partition)
                && s.leader_epoch == leader_epoch
                && s.timer.get().is_some_and(|t| !t.is_stopped())
        })
    }

    pub(super) async fn stop_all(&self) {
        let slots: Vec<Arc<TimerSlot>> = self.timers.lock().drain().map(|(_, s)| s).collect();
        slots.iter().for_each(|s| s.mark_stopped());
        stop_blocking(slots).await;
    }
}
