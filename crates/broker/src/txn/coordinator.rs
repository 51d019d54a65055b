//! The transactional ids this broker coordinates, in memory: for each partition of
//! `__transaction_state` led here, whether it is loaded in the current leader epoch, and each
//! id's last durable state. A state change is made one at a time per id: [`TxnStore::begin`]
//! marks the id busy (a second request meanwhile is answered CONCURRENT_TRANSACTIONS), the
//! caller writes the new state to the log, and [`TxnStore::finish`] applies it once every
//! in-sync replica holds it (or just clears the mark when the write failed), so memory
//! never runs ahead of the log.

use std::collections::{BTreeMap, HashMap};

use parking_lot::Mutex;
use tinymq_protocol::{messages as m, ErrorCode};

use super::state::TxnMetadata;
use tinymq_meta::command::TRANSACTION_TOPIC;

/// Partitions of `__transaction_state` (Kafka's `transaction.state.log.num.partitions` is 50;
/// four spread the coordinators of a small cluster and keep each replay short).
pub const TRANSACTION_PARTITIONS: u32 = 4;

/// The partition of `__transaction_state` holding `transactional_id`, and so its coordinator.
pub fn partition_for_txn(transactional_id: &str) -> u32 {
    tinymq_protocol::hash::murmur2_positive(transactional_id.as_bytes()) % TRANSACTION_PARTITIONS
}

/// Most transactional ids one broker coordinates (about 1 KiB each with their partitions).
pub const TRANSACTIONAL_IDS_MAX: usize = 100_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Load {
    Loading,
    Loaded,
}

#[derive(Debug, Default)]
struct Entry {
    /// None while the first state of a new id is being written.
    metadata: Option<TxnMetadata>,
    /// A state change is being made durable.
    busy: bool,
}

#[derive(Debug, Default)]
struct Inner {
    ids: HashMap<String, Entry>,
    /// Partition → (leader epoch, load).
    led: BTreeMap<u32, (u32, Load)>,
}

/// A state change under way for one id: the coordinator epoch it was begun in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    pub partition: u32,
    pub coordinator_epoch: u32,
}

#[derive(Debug, Default)]
pub struct TxnStore {
    inner: Mutex<Inner>,
    /// Woken after every change made durable: requests that found their id between states
    /// wait on it instead of being refused at once.
    changed: tokio::sync::Notify,
}

fn not_coordinator(partition: u32) -> m::Error {
    ErrorCode::NOT_COORDINATOR.with_message(format!(
        "{TRANSACTION_TOPIC}/{partition} is not led here; find the transaction coordinator again"
    ))
}

impl TxnStore {
    /// The partitions led here and their leader epochs.
    pub fn led(&self) -> BTreeMap<u32, u32> {
        let inner = self.inner.lock();
        inner.led.iter().map(|(p, (e, _))| (*p, *e)).collect()
    }

    /// Whether `partition` is loaded here in `epoch`.
    pub fn is_loaded(&self, partition: u32, epoch: u32) -> bool {
        self.inner.lock().led.get(&partition) == Some(&(epoch, Load::Loaded))
    }

    /// Starts leading `partition` in `epoch`: forgets its ids and marks it loading. False
    /// (and nothing changes) when it already is in that epoch.
    pub fn begin_load(&self, partition: u32, epoch: u32) -> bool {
        let mut inner = self.inner.lock();
        if inner.led.get(&partition).is_some_and(|(e, _)| *e == epoch) {
            return false;
        }
        inner.ids.retain(|id, _| partition_for_txn(id) != partition);
        inner.led.insert(partition, (epoch, Load::Loading));
        true
    }

    /// Serves `loaded` for `partition` if it is still loading in `epoch`.
    pub fn finish_load(
        &self,
        partition: u32,
        epoch: u32,
        loaded: HashMap<String, TxnMetadata>,
    ) -> bool {
        let mut inner = self.inner.lock();
        match inner.led.get_mut(&partition) {
            Some((e, load)) if *e == epoch && *load == Load::Loading => *load = Load::Loaded,
            _ => return false,
        }
        for (id, metadata) in loaded {
            inner.ids.insert(
                id,
                Entry {
                    metadata: Some(metadata),
                    busy: false,
                },
            );
        }
        true
    }

    /// Stops leading `partition`: forgets its ids.
    pub fn drop_partition(&self, partition: u32) {
        let mut inner = self.inner.lock();
        inner.led.remove(&partition);
        inner.ids.retain(|id, _| partition_for_txn(id) != partition);
    }

    /// The current state of `id` (None: unknown), if its partition is loaded here in its
    /// current epoch `epoch`.
    pub fn get(&self, id: &str, epoch: u32) -> Result<Option<TxnMetadata>, m::Error> {
        let partition = partition_for_txn(id);
        let inner = self.inner.lock();
        check_loaded(&inner, partition, epoch)?;
        Ok(inner.ids.get(id).and_then(|e| e.metadata.clone()))
    }

    /// Runs `decide` on `id`'s current state and, when it returns a new state, marks the id
    /// busy and returns the ticket to [`TxnStore::finish`] it with. Refused with
    /// CONCURRENT_TRANSACTIONS while another change of the id is being made durable.
    pub fn begin<T>(
        &self,
        id: &str,
        epoch: u32,
        decide: impl FnOnce(Option<&TxnMetadata>) -> Result<(Option<TxnMetadata>, T), m::Error>,
    ) -> Result<(Option<(Ticket, TxnMetadata)>, T), m::Error> {
        let partition = partition_for_txn(id);
        let mut inner = self.inner.lock();
        check_loaded(&inner, partition, epoch)?;
        let known = inner.ids.len();
        let entry = inner.ids.get(id);
        if entry.is_some_and(|e| e.busy) {
            return Err(ErrorCode::CONCURRENT_TRANSACTIONS.with_message(format!(
                "another request for transactional id {id} is being made durable; retry"
            )));
        }
        let (next, answer) = decide(entry.and_then(|e| e.metadata.as_ref()))?;
        let Some(next) = next else {
            return Ok((None, answer));
        };
        if entry.is_none() && known >= TRANSACTIONAL_IDS_MAX {
            return Err(ErrorCode::LIMIT_EXCEEDED.with_message(format!(
                "this broker coordinates transactional_ids_max = {TRANSACTIONAL_IDS_MAX} \
                 transactional ids"
            )));
        }
        inner.ids.entry(id.to_string()).or_default().busy = true;
        let ticket = Ticket {
            partition,
            coordinator_epoch: epoch,
        };
        Ok((Some((ticket, next)), answer))
    }

    /// Ends the change begun with `ticket`: applies `durable` (the state now held by every
    /// in-sync replica) or, when the write failed, only clears the busy mark. Does nothing
    /// when the partition moved meanwhile (its ids were dropped with it).
    pub fn finish(&self, id: &str, ticket: Ticket, durable: Option<TxnMetadata>) {
        self.finish_locked(id, ticket, durable);
        self.changed.notify_waiters();
    }

    /// A future that completes at the next [`TxnStore::finish`] (create it before looking at
    /// the state it waits to change, so no change is missed).
    pub fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.changed.notified()
    }

    fn finish_locked(&self, id: &str, ticket: Ticket, durable: Option<TxnMetadata>) {
        let mut inner = self.inner.lock();
        if inner.led.get(&ticket.partition) != Some(&(ticket.coordinator_epoch, Load::Loaded)) {
            return;
        }
        let Some(entry) = inner.ids.get_mut(id) else {
            return;
        };
        entry.busy = false;
        if let Some(m) = durable {
            entry.metadata = Some(m);
        } else if entry.metadata.is_none() {
            inner.ids.remove(id);
        }
    }

    /// Forgets `id` (its tombstone is durable).
    pub fn forget(&self, id: &str, ticket: Ticket) {
        let mut inner = self.inner.lock();
        if inner.led.get(&ticket.partition) == Some(&(ticket.coordinator_epoch, Load::Loaded)) {
            inner.ids.remove(id);
        }
    }

    /// Every id of the loaded partitions with its state and coordinator epoch (for the
    /// timer, listing and the markers a new coordinator must finish).
    pub fn all(&self) -> Vec<(String, TxnMetadata, u32)> {
        let inner = self.inner.lock();
        inner
            .ids
            .iter()
            .filter_map(|(id, e)| {
                let (epoch, load) = inner.led.get(&partition_for_txn(id))?;
                let m = e.metadata.clone()?;
                (*load == Load::Loaded && !e.busy).then(|| (id.clone(), m, *epoch))
            })
            .collect()
    }
}

fn check_loaded(inner: &Inner, partition: u32, epoch: u32) -> Result<(), m::Error> {
    match inner.led.get(&partition) {
        Some((e, Load::Loaded)) if *e == epoch => Ok(()),
        Some((e, Load::Loading)) if *e == epoch => Err(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
            .with_message(format!(
                "loading the transactions of {TRANSACTION_TOPIC}/{partition}; retry"
            ))),
        _ => Err(not_coordinator(partition)),
    }
}
