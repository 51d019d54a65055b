//! The time-bucketed index of one partition's waiting batches: buckets of [`BUCKET_MS`] by
//! deliver-at time, each holding its entries ordered by (deliver-at, arrival). Finding what is
//! due walks only the buckets at or before now; the batches themselves stay on disk, the index
//! holds where each one is (about 100 bytes per entry with the map overhead).

use std::collections::{BTreeMap, HashMap};

use crate::entry::{ClientIdentity, SchedulerStamp};

/// Width of a bucket, ms.
pub const BUCKET_MS: i64 = 1000;

/// Where a waiting batch is and what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Byte position of the batch in the timer log file.
    pub position: u64,
    pub length: u32,
    /// Records in the batch: the scheduler's sequence advances by this much per batch.
    pub record_count: i32,
    pub stored_at_ms: i64,
    pub client: ClientIdentity,
    /// Set once the scheduler gave the entry its producer identity (it may be in the
    /// partition already: see the crate's exactly-once argument).
    pub assigned: Option<SchedulerStamp>,
    /// With `assigned`: the partition's log end offset when it was given, where a replay
    /// looks for the batch (-1: not known).
    pub scan_from_offset: i64,
}

/// An entry in deliver-at order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waiting {
    pub entry_id: u64,
    pub deliver_at_ms: i64,
    pub slot: Slot,
}

fn bucket_of(deliver_at_ms: i64) -> i64 {
    deliver_at_ms.div_euclid(BUCKET_MS)
}

#[derive(Debug, Clone, Default)]
pub struct TimerIndex {
    buckets: BTreeMap<i64, BTreeMap<(i64, u64), Slot>>,
    /// Each entry's deliver-at time, to find it by id (its marks name only the id).
    deliver_at_of: HashMap<u64, i64>,
    bytes: u64,
}

impl TimerIndex {
    pub fn len(&self) -> usize {
        self.deliver_at_of.len()
    }

    pub fn is_empty(&self) -> bool {
        self.deliver_at_of.is_empty()
    }

    /// Batch bytes of every entry.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Adds an entry; false (and nothing changed) if its id is there already.
    pub fn insert(&mut self, entry_id: u64, deliver_at_ms: i64, slot: Slot) -> bool {
        if self.deliver_at_of.contains_key(&entry_id) {
            return false;
        }
        self.deliver_at_of.insert(entry_id, deliver_at_ms);
        self.bytes += u64::from(slot.length);
        self.buckets
            .entry(bucket_of(deliver_at_ms))
            .or_default()
            .insert((deliver_at_ms, entry_id), slot);
        true
    }

    pub fn remove(&mut self, entry_id: u64) -> Option<Waiting> {
        let deliver_at_ms = self.deliver_at_of.remove(&entry_id)?;
        let bucket = bucket_of(deliver_at_ms);
        let entries = self.buckets.get_mut(&bucket)?;
        let slot = entries.remove(&(deliver_at_ms, entry_id))?;
        if entries.is_empty() {
            self.buckets.remove(&bucket);
        }
        self.bytes -= u64::from(slot.length);
        Some(Waiting {
            entry_id,
            deliver_at_ms,
            slot,
        })
    }

    pub fn get_mut(&mut self, entry_id: u64) -> Option<&mut Slot> {
        let deliver_at_ms = *self.deliver_at_of.get(&entry_id)?;
        self.buckets
            .get_mut(&bucket_of(deliver_at_ms))?
            .get_mut(&(deliver_at_ms, entry_id))
    }

    /// Up to `max` entries due at `now_ms` (deliver-at ≤ now), in deliver-at order, ties by
    /// arrival (entry id).
    pub fn due(&self, now_ms: i64, max: usize) -> Vec<Waiting> {
        self.buckets
            .range(..=bucket_of(now_ms))
            .flat_map(|(_, entries)| entries.iter())
            .take_while(|((deliver_at_ms, _), _)| *deliver_at_ms <= now_ms)
            .take(max)
            .map(|(&(deliver_at_ms, entry_id), &slot)| Waiting {
                entry_id,
                deliver_at_ms,
                slot,
            })
            .collect()
    }

    /// The earliest deliver-at time waiting.
    pub fn next_deliver_at_ms(&self) -> Option<i64> {
        let (_, entries) = self.buckets.first_key_value()?;
        entries.first_key_value().map(|((at, _), _)| *at)
    }

    /// Every entry in deliver-at order.
    pub fn iter(&self) -> impl Iterator<Item = Waiting> + '_ {
        self.buckets.values().flat_map(|entries| {
            entries
                .iter()
                .map(|(&(deliver_at_ms, entry_id), &slot)| Waiting {
                    entry_id,
                    deliver_at_ms,
                    slot,
                })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(length: u32) -> Slot {
        Slot {
            position: 0,
            length,
            record_count: 1,
            stored_at_ms: 0,
            client: ClientIdentity {
                producer_id: -1,
                producer_epoch: -1,
                first_sequence: -1,
                last_sequence: -1,
            },
            assigned: None,
            scan_from_offset: -1,
        }
    }

    #[test]
    fn due_entries_come_in_deliver_at_order_then_arrival_across_buckets() {
        let mut index = TimerIndex::default();
        for (id, at) in [
            (1, 2500),
            (2, 900),
            (3, 2500),
            (4, -10),
            (5, 1000),
            (6, 99_999),
        ] {
            assert!(index.insert(id, at, slot(10)));
        }
        assert!(!index.insert(1, 5, slot(10)), "an id is stored once");
        let ids = |w: Vec<Waiting>| w.iter().map(|w| w.entry_id).collect::<Vec<_>>();
        assert_eq!(ids(index.due(2500, 100)), vec![4, 2, 5, 1, 3]);
        assert_eq!(ids(index.due(2499, 100)), vec![4, 2, 5]);
        assert_eq!(ids(index.due(2500, 2)), vec![4, 2]);
        assert_eq!(index.next_deliver_at_ms(), Some(-10));
        assert_eq!(index.bytes(), 60);
        assert_eq!(index.remove(4).map(|w| w.deliver_at_ms), Some(-10));
        assert_eq!(index.remove(4), None);
        assert_eq!(index.next_deliver_at_ms(), Some(900));
        assert_eq!((index.len(), index.bytes()), (5, 50));
    }
}
