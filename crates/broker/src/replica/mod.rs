//! Replication on the broker. Each partition placed here is led here or followed from its
//! leader ([`Role`]): followers fetch the leader's batches ([`fetcher`]) and append them byte
//! for byte; the leader answers those fetches ([`serve`]), keeps what each follower holds
//! ([`leader`]), raises the high watermark to the lowest durable end among the in-sync
//! replicas, and proposes ISR changes to the MetaServer ([`isr`]). Which role a partition has
//! comes only from the metadata image (leader and leader epoch).

pub mod fetcher;
pub mod fetchers;
pub mod isr;

pub mod serve;
#[cfg(test)]
mod sim;

// Where the role types lived before `crate::role` held them for the partition.
pub use crate::role::{leader, Role};

use bytes::Bytes;
use tinymq_log::LogError;

use crate::partition::{now_ms, visible_end, Partition, PartitionError};
use crate::role::leader::LeaderState;

/// What a follower fetch needs to know about the follower's side of a partition.
#[derive(Debug, Clone, Copy)]
pub struct FollowerPosition {
    pub log_end: i64,
    pub durable_end: i64,
    pub last_epoch: Option<i32>,
}

impl Partition {
    /// Takes the role the image (or the MetaServer's answer to an ISR proposal) gives this
    /// broker for `record`: leader in its leader epoch with its ISR, or a follower of its
    /// leader. A leader keeping its epoch only takes the new ISR and partition epoch.
    pub fn assume_role(&self, me: u32, record: &tinymq_meta::PartitionRecord) {
        self.assume_role_at(me, record, now_ms());
    }

    /// [`Partition::assume_role`] at `now` (the simulation's clock, `replica::sim`).
    pub(crate) fn assume_role_at(&self, me: u32, record: &tinymq_meta::PartitionRecord, now: i64) {
        let (leader, leader_epoch, isr) = (record.leader, record.leader_epoch, &record.isr);
        let mut role = self.role.lock();
        let known_epoch = match &*role {
            Role::Leader(state) => state.leader_epoch,
            Role::Follower { leader_epoch, .. } => *leader_epoch,
        };
        if leader_epoch < known_epoch {
            // An answer older than the image already taken (they race): it must not bring back
            // a leadership that has moved on.
            return;
        }
        match (&mut *role, leader) {
            (Role::Leader(state), Some(l)) if l == me && state.is(me, leader_epoch) => {
                let before = state.isr();
                let removed = before.iter().any(|b| !isr.contains(b));
                let added = isr.iter().any(|r| !before.contains(r));
                crate::stats::isr_changed(removed, added);
                state.set_isr(isr, record.partition_epoch, now);
            }
            (_, Some(l)) if l == me => {
                let log_end = self.log.log_end_offset();
                *role = Role::Leader(LeaderState::new(
                    me,
                    leader_epoch,
                    record.partition_epoch,
                    isr,
                    log_end,
                    now,
                ));
                tracing::info!(topic = %self.topic, partition = self.index, leader_epoch, "leading");
            }
            (_, leader) => {
                *role = Role::Follower {
                    leader,
                    leader_epoch,
                };
            }
        }
        drop(role);
        // The ISR may have shrunk to those that hold more.
        self.publish_high_watermark();
    }

    /// The leader epoch, if this broker leads the partition.
    pub fn leading_epoch(&self) -> Option<u32> {
        match &*self.role.lock() {
            Role::Leader(state) => Some(state.leader_epoch),
            Role::Follower { .. } => None,
        }
    }

    /// Where this replica's log stands, for its next fetch from the leader.
    pub fn follower_position(&self) -> FollowerPosition {
        FollowerPosition {
            log_end: self.log.log_end_offset(),
            durable_end: visible_end(&self.log, self.flush),
            last_epoch: self.log.latest_epoch(),
        }
    }

    /// Appends batches fetched from the leader as they are, records their producers and
    /// transactions (so retries stay exactly-once and read-committed fetches bounded if this
    /// replica leads later), waits for the flush policy,
    /// and takes the leader's high watermark as far as this log reaches. Blocks.
    pub fn append_from_leader(&self, records: Bytes, leader_hw: i64) -> Result<(), PartitionError> {
        if !records.is_empty() {
            let info = self.log.append_replicated(&records)?;
            // Producers and transactions as the leader had them, so retries stay exactly-once
            // and read-committed bounds stay right if this replica leads later.
            self.record_replicated(records)?;
            self.log_end.send_replace(info.log_end_offset);
            self.log.await_flush_policy(info.log_end_offset)?;
        }
        let reach = visible_end(&self.log, self.flush);
        self.raise_high_watermark(leader_hw.min(reach));
        Ok(())
    }

    /// Cuts the log to `offset` (a follower whose tail diverged from the leader's), rebuilds
    /// the producer and transaction state from what is left, and lowers the high watermark to the new end if
    /// it was past it. Blocks.
    pub fn truncate_for_leader(&self, offset: i64) -> Result<(), LogError> {
        let before = self.log.log_end_offset();
        self.log.truncate_to(offset)?;
        let after = self.log.log_end_offset();
        tracing::warn!(topic = %self.topic, partition = self.index, from = before, to = after, "truncated a tail that diverged from the leader's log");
        let rebuilt =
            crate::partition::rebuild_producer_state(&*self.storage, &self.log, &self.dir)?;
        let mut producers = self.producers.lock();
        *producers = rebuilt;
        self.publish_unstable(&producers);
        drop(producers);
        self.high_watermark.send_if_modified(|hw| {
            let lower = *hw > after;
            *hw = (*hw).min(after);
            lower
        });
        self.log_end.send_replace(after);
        Ok(())
    }

    /// Empties the log and restarts it at `offset`: the leader no longer has this replica's
    /// next offset (its log start moved past it). Blocks.
    pub fn restart_at(&self, offset: i64) -> Result<(), LogError> {
        self.log.truncate_fully_and_start_at(offset)?;
        let rebuilt =
            crate::partition::rebuild_producer_state(&*self.storage, &self.log, &self.dir)?;
        let mut producers = self.producers.lock();
        *producers = rebuilt;
        self.publish_unstable(&producers);
        drop(producers);
        self.high_watermark.send_replace(offset);
        self.log_end.send_replace(offset);
        Ok(())
    }

    pub fn watch_log_end(&self) -> tokio::sync::watch::Receiver<i64> {
        self.log_end.subscribe()
    }
}
