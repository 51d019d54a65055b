//! One partition's timer state: the index of waiting batches, the client identities it
//! answers retries by, and the next entry id. It is a function of the timer log: applying the
//! log's entries in order ([`TimerState::apply`]) rebuilds it, which is how a broker that
//! starts leading a partition gets it back.

use std::collections::{HashMap, VecDeque};

use crate::entry::{ClientIdentity, Entry};
use crate::index::{Slot, TimerIndex, Waiting};

/// Longest delay accepted: a deliver-at time more than this after the broker's clock is
/// refused with `INVALID_DELIVERY_TIME` (7 days).
pub const DELAY_MS_MAX: i64 = 7 * 24 * 3600 * 1000;
/// Most batches waiting in one partition's timer log; past it a delayed produce is refused
/// with `LIMIT_EXCEEDED` until some are delivered.
pub const TIMER_ENTRIES_PER_PARTITION_MAX: usize = 100_000;
/// Most batch bytes waiting in one partition's timer log (1 GiB).
pub const TIMER_BYTES_PER_PARTITION_MAX: u64 = 1 << 30;
/// Identities of delivered batches remembered per partition, so that a retry arriving after
/// its batch was delivered is still answered as a duplicate (the oldest are forgotten).
pub const DELIVERED_IDENTITIES_REMEMBERED_MAX: usize = 10_000;

/// The limits one timer state is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub delay_ms_max: i64,
    pub entries_max: usize,
    pub bytes_max: u64,
    pub remembered_max: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            delay_ms_max: DELAY_MS_MAX,
            entries_max: TIMER_ENTRIES_PER_PARTITION_MAX,
            bytes_max: TIMER_BYTES_PER_PARTITION_MAX,
            remembered_max: DELIVERED_IDENTITIES_REMEMBERED_MAX,
        }
    }
}

/// What to do with a delayed batch offered to the timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Store it as `entry_id`, due at `deliver_at_ms` (the request's, or now if earlier).
    Store { entry_id: u64, deliver_at_ms: i64 },
    /// A retry of a batch stored (or delivered) already: answer with its time, store nothing.
    Duplicate { deliver_at_ms: i64 },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmitError {
    #[error("deliver-at {deliver_at_ms} is more than delay_ms_max = {delay_ms_max} ms after the broker's clock ({now_ms})")]
    TooLate {
        deliver_at_ms: i64,
        now_ms: i64,
        delay_ms_max: i64,
    },
    #[error("the partition's timer log holds {entries} batches of {bytes} bytes; at most {entries_max} and {bytes_max} (TIMER_ENTRIES_PER_PARTITION_MAX, TIMER_BYTES_PER_PARTITION_MAX): retry once some are delivered")]
    Full {
        entries: usize,
        bytes: u64,
        entries_max: usize,
        bytes_max: u64,
    },
}

/// The record count in a batch's header (at least 1: a batch the broker stored was checked
/// to hold records, and a header that cannot be read makes the append refuse it anyway).
fn record_count_of(batch: &[u8]) -> i32 {
    tinymq_protocol::batch::BatchHeader::new(batch).map_or(1, |h| h.record_count().max(1))
}

#[derive(Debug, Clone)]
pub struct TimerState {
    limits: Limits,
    index: TimerIndex,
    /// Waiting entries by client identity (idempotent batches only).
    waiting_by_client: HashMap<ClientIdentity, (u64, i64)>,
    /// Delivered entries' identities, oldest first, at most `limits.remembered_max`.
    remembered: HashMap<ClientIdentity, (u64, i64)>,
    remembered_order: VecDeque<ClientIdentity>,
    next_entry_id: u64,
}

impl TimerState {
    pub fn new(limits: Limits) -> TimerState {
        TimerState {
            limits,
            index: TimerIndex::default(),
            waiting_by_client: HashMap::new(),
            remembered: HashMap::new(),
            remembered_order: VecDeque::new(),
            next_entry_id: 1,
        }
    }

    pub fn index(&self) -> &TimerIndex {
        &self.index
    }

    pub fn next_entry_id(&self) -> u64 {
        self.next_entry_id
    }

    /// Decides about a batch `batch_bytes` long with `client`'s identity, asked for at
    /// `deliver_at_ms`, at the broker's `now_ms`. Nothing changes until its `Stored` entry is
    /// applied.
    pub fn admit(
        &self,
        client: &ClientIdentity,
        batch_bytes: usize,
        deliver_at_ms: i64,
        now_ms: i64,
    ) -> Result<Admission, AdmitError> {
        if client.is_idempotent() {
            let known = self.waiting_by_client.get(client);
            if let Some(&(_, at)) = known.or_else(|| self.remembered.get(client)) {
                return Ok(Admission::Duplicate { deliver_at_ms: at });
            }
        }
        if deliver_at_ms.saturating_sub(now_ms) > self.limits.delay_ms_max {
            return Err(AdmitError::TooLate {
                deliver_at_ms,
                now_ms,
                delay_ms_max: self.limits.delay_ms_max,
            });
        }
        let (entries, bytes) = (self.index.len(), self.index.bytes());
        if entries >= self.limits.entries_max
            || bytes.saturating_add(batch_bytes as u64) > self.limits.bytes_max
        {
            return Err(AdmitError::Full {
                entries,
                bytes,
                entries_max: self.limits.entries_max,
                bytes_max: self.limits.bytes_max,
            });
        }
        Ok(Admission::Store {
            entry_id: self.next_entry_id,
            deliver_at_ms: deliver_at_ms.max(now_ms),
        })
    }

    /// Applies one entry of the log. `batch_position` is where a `Stored` entry's batch is in
    /// the file (ignored for the other kinds). Marks naming an entry that is not waiting (one
    /// compaction removed) change nothing, so applying a log again is harmless.
    pub fn apply(&mut self, entry: &Entry, batch_position: u64) {
        match entry {
            Entry::Checkpoint { next_entry_id } => {
                self.next_entry_id = self.next_entry_id.max(*next_entry_id);
            }
            Entry::Stored {
                entry_id,
                deliver_at_ms,
                stored_at_ms,
                client,
                batch,
            } => {
                self.next_entry_id = self.next_entry_id.max(entry_id.saturating_add(1));
                let slot = Slot {
                    position: batch_position,
                    length: u32::try_from(batch.len()).unwrap_or(u32::MAX),
                    record_count: record_count_of(batch),
                    stored_at_ms: *stored_at_ms,
                    client: *client,
                    assigned: None,
                    scan_from_offset: -1,
                };
                if self.index.insert(*entry_id, *deliver_at_ms, slot) && client.is_idempotent() {
                    self.waiting_by_client
                        .insert(*client, (*entry_id, *deliver_at_ms));
                }
            }
            Entry::Assigned {
                entry_id,
                stamp,
                scan_from_offset,
            } => {
                if let Some(slot) = self.index.get_mut(*entry_id) {
                    slot.assigned = Some(*stamp);
                    slot.scan_from_offset = *scan_from_offset;
                }
            }
            Entry::Delivered { entry_id, .. } => {
                if let Some(done) = self.index.remove(*entry_id) {
                    let client = done.slot.client;
                    if client.is_idempotent() {
                        self.waiting_by_client.remove(&client);
                        self.remember(client, done.entry_id, done.deliver_at_ms);
                    }
                }
            }
            Entry::Remembered {
                client,
                entry_id,
                deliver_at_ms,
            } => self.remember(*client, *entry_id, *deliver_at_ms),
        }
    }

    fn remember(&mut self, client: ClientIdentity, entry_id: u64, deliver_at_ms: i64) {
        if self
            .remembered
            .insert(client, (entry_id, deliver_at_ms))
            .is_none()
        {
            self.remembered_order.push_back(client);
        }
        while self.remembered_order.len() > self.limits.remembered_max {
            if let Some(oldest) = self.remembered_order.pop_front() {
                self.remembered.remove(&oldest);
            }
        }
    }

    /// Drops an entry's scheduler identity in memory: the partition has no trace of it (the
    /// producer was forgotten), so the entry is given a new one, whose `Assigned` entry then
    /// supersedes the old in the log.
    pub fn unassign(&mut self, entry_id: u64) {
        if let Some(slot) = self.index.get_mut(entry_id) {
            slot.assigned = None;
            slot.scan_from_offset = -1;
        }
    }

    /// Up to `max` entries due at `now_ms`, in deliver-at order (ties by arrival).
    pub fn due(&self, now_ms: i64, max: usize) -> Vec<Waiting> {
        self.index.due(now_ms, max)
    }

    /// Entries given a scheduler identity and not marked delivered (a crash came between),
    /// in the order of their sequence: replayed first, under the same identity.
    pub fn in_doubt(&self) -> Vec<Waiting> {
        let mut doubtful: Vec<Waiting> = self
            .index
            .iter()
            .filter(|w| w.slot.assigned.is_some())
            .collect();
        doubtful.sort_by_key(|w| w.slot.assigned.map(|s| (s.producer_id, s.sequence)));
        doubtful
    }

    /// The entries a compacted log starts with (before the waiting batches, which the caller
    /// copies from the old file as `Stored` entries followed by their `Assigned` marks): the
    /// checkpoint and the remembered identities, oldest first.
    pub fn compacted_head(&self) -> Vec<Entry> {
        let mut head = vec![Entry::Checkpoint {
            next_entry_id: self.next_entry_id,
        }];
        head.extend(self.remembered_order.iter().filter_map(|client| {
            let &(entry_id, deliver_at_ms) = self.remembered.get(client)?;
            Some(Entry::Remembered {
                client: *client,
                entry_id,
                deliver_at_ms,
            })
        }));
        head
    }

    /// How many remembered identities there are (for sizing compaction).
    pub fn remembered_len(&self) -> usize {
        self.remembered_order.len()
    }
}
