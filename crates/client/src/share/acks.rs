//! A share-group member's bookkeeping of acknowledgements (pure, no I/O): the records handed
//! to the application and not yet acknowledged (so that `close` can release them, and an
//! acknowledgement of a record this member does not hold is refused at once), and the
//! acknowledgements queued for the next request, coalesced into ranges of consecutive offsets
//! acknowledged the same way (one `ShareAcknowledgement` covers a whole run).
//!
//! Both are bounded without a limit of their own: an entry exists only for a record the broker
//! handed to this member, which holds at most `share_in_flight_records_max` (10,000) offsets
//! per partition in flight, and a handed-out record is forgotten once its lock has expired
//! (plus [`HANDED_OUT_GRACE`]), since the broker has given it to someone else by then.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A (topic, partition).
pub type PartitionKey = (String, u32);

/// How long past its lock's expiry (by this member's clock, counted from when the fetch was
/// sent, so never later than the broker's) a handed-out record is remembered; an
/// acknowledgement sent meanwhile lets the broker decide (`INVALID_RECORD_STATE` if the record
/// went to someone else).
pub const HANDED_OUT_GRACE: Duration = Duration::from_secs(10);

/// How a record is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AckKind {
    /// Done: never delivered again.
    Accept,
    /// Deliver again (to any member); dead-lettered once it has been delivered
    /// `max_delivery_attempts` times.
    Release,
    /// Dead-letter it now.
    Reject,
    /// Deliver again (to any member) without counting this delivery: for a record `poll`
    /// returned that the application never looked at (taken beyond what it wanted, or left
    /// when it shut down). Never dead-letters the record. A broker older than this kind
    /// refuses it (`INVALID_REQUEST`); the record then comes back when its lock expires.
    ReleaseUnseen,
}

impl AckKind {
    /// The wire value of `ShareAcknowledgement.kind`.
    pub fn wire(self) -> u32 {
        match self {
            AckKind::Accept => 1,
            AckKind::Release => 2,
            AckKind::Reject => 3,
            AckKind::ReleaseUnseen => 4,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            AckKind::Accept => "accept",
            AckKind::Release => "release",
            AckKind::Reject => "reject",
            AckKind::ReleaseUnseen => "release-unseen",
        }
    }
}

/// Consecutive offsets of one partition acknowledged the same way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckRange {
    pub topic: String,
    pub partition: u32,
    pub first_offset: i64,
    pub last_offset: i64,
    pub kind: AckKind,
}

impl AckRange {
    pub fn key(&self) -> PartitionKey {
        (self.topic.clone(), self.partition)
    }

    /// How many offsets the range covers.
    pub fn offset_count(&self) -> u64 {
        self.last_offset.saturating_sub(self.first_offset).max(0) as u64 + 1
    }
}

/// Acknowledgements not yet sent: per partition, ranges keyed by their first offset, never
/// overlapping, neighbours of the same kind merged.
#[derive(Debug, Default)]
pub(crate) struct AckQueue {
    partitions: BTreeMap<PartitionKey, BTreeMap<i64, (i64, AckKind)>>,
}

impl AckQueue {
    /// Queues one offset. An offset already queued keeps its first acknowledgement (the
    /// caller hands each record out once, so this only guards against misuse).
    pub fn push(&mut self, key: &PartitionKey, offset: i64, kind: AckKind) {
        let ranges = self.partitions.entry(key.clone()).or_default();
        let below = ranges
            .range(..=offset)
            .next_back()
            .map(|(first, (last, kind))| (*first, *last, *kind));
        if below.is_some_and(|(_, last, _)| offset <= last) {
            return;
        }
        let (mut first, mut last) = (offset, offset);
        if let Some((below_first, below_last, below_kind)) = below {
            if below_kind == kind && below_last.checked_add(1) == Some(offset) {
                ranges.remove(&below_first);
                first = below_first;
            }
        }
        if let Some(next) = offset.checked_add(1) {
            if let Some(&(above_last, above_kind)) = ranges.get(&next) {
                if above_kind == kind {
                    ranges.remove(&next);
                    last = above_last;
                }
            }
        }
        ranges.insert(first, (last, kind));
    }

    pub fn is_empty(&self) -> bool {
        self.partitions.values().all(BTreeMap::is_empty)
    }

    /// Takes the queued ranges of the partitions `wanted` accepts, in partition and offset
    /// order.
    pub fn take(&mut self, wanted: impl Fn(&PartitionKey) -> bool) -> Vec<AckRange> {
        let keys: Vec<PartitionKey> = self
            .partitions
            .keys()
            .filter(|k| wanted(k))
            .cloned()
            .collect();
        let mut out = Vec::new();
        for key in keys {
            let Some(ranges) = self.partitions.remove(&key) else {
                continue;
            };
            out.extend(ranges.into_iter().map(|(first, (last, kind))| AckRange {
                topic: key.0.clone(),
                partition: key.1,
                first_offset: first,
                last_offset: last,
                kind,
            }));
        }
        out
    }

    pub fn take_all(&mut self) -> Vec<AckRange> {
        self.take(|_| true)
    }
}

/// Records returned by `poll` and not yet acknowledged, each with the time after which it is
/// forgotten (its lock expired, plus [`HANDED_OUT_GRACE`]).
#[derive(Debug, Default)]
pub(crate) struct HandedOut {
    partitions: BTreeMap<PartitionKey, BTreeMap<i64, Instant>>,
}

impl HandedOut {
    pub fn insert(&mut self, key: &PartitionKey, offset: i64, forget_at: Instant) {
        self.partitions
            .entry(key.clone())
            .or_default()
            .insert(offset, forget_at);
    }

    /// Removes a record; false if it was not held (never handed out, already acknowledged,
    /// or forgotten after its lock expired).
    pub fn take(&mut self, key: &PartitionKey, offset: i64) -> bool {
        self.partitions
            .get_mut(key)
            .is_some_and(|offsets| offsets.remove(&offset).is_some())
    }

    /// Forgets records whose time has passed; returns how many.
    pub fn forget_expired(&mut self, now: Instant) -> usize {
        let mut forgotten = 0;
        for offsets in self.partitions.values_mut() {
            let before = offsets.len();
            offsets.retain(|_, forget_at| *forget_at > now);
            forgotten += before - offsets.len();
        }
        self.partitions.retain(|_, offsets| !offsets.is_empty());
        forgotten
    }

    pub fn len(&self) -> usize {
        self.partitions.values().map(BTreeMap::len).sum()
    }

    /// Takes every record held, in partition and offset order.
    pub fn take_all(&mut self) -> Vec<(PartitionKey, i64)> {
        std::mem::take(&mut self.partitions)
            .into_iter()
            .flat_map(|(key, offsets)| offsets.into_keys().map(move |o| (key.clone(), o)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key() -> PartitionKey {
        ("t".into(), 3)
    }

    fn ranges(queue: &mut AckQueue) -> Vec<(i64, i64, AckKind)> {
        queue
            .take_all()
            .into_iter()
            .map(|r| (r.first_offset, r.last_offset, r.kind))
            .collect()
    }

    #[test]
    fn consecutive_offsets_of_one_kind_make_one_range_in_any_order() {
        let mut queue = AckQueue::default();
        for offset in [5, 7, 6, 3, 4, 10] {
            queue.push(&key(), offset, AckKind::Accept);
        }
        queue.push(&key(), 8, AckKind::Release);
        queue.push(&key(), 9, AckKind::Accept);
        assert_eq!(
            ranges(&mut queue),
            vec![
                (3, 7, AckKind::Accept),
                (8, 8, AckKind::Release),
                (9, 10, AckKind::Accept)
            ]
        );
        assert!(queue.is_empty());
    }

    #[test]
    fn an_offset_queued_twice_keeps_its_first_kind_and_extremes_do_not_overflow() {
        let mut queue = AckQueue::default();
        queue.push(&key(), 1, AckKind::Reject);
        queue.push(&key(), 1, AckKind::Accept);
        queue.push(&key(), i64::MAX, AckKind::Accept);
        queue.push(&key(), i64::MAX - 1, AckKind::Accept);
        assert_eq!(
            ranges(&mut queue),
            vec![
                (1, 1, AckKind::Reject),
                (i64::MAX - 1, i64::MAX, AckKind::Accept)
            ]
        );
    }

    #[test]
    fn a_release_unseen_is_kind_4_and_never_merges_with_a_release() {
        assert_eq!(AckKind::ReleaseUnseen.wire(), 4);
        assert_eq!(AckKind::ReleaseUnseen.name(), "release-unseen");
        let mut queue = AckQueue::default();
        queue.push(&key(), 1, AckKind::Release);
        queue.push(&key(), 2, AckKind::ReleaseUnseen);
        queue.push(&key(), 3, AckKind::ReleaseUnseen);
        assert_eq!(
            ranges(&mut queue),
            vec![(1, 1, AckKind::Release), (2, 3, AckKind::ReleaseUnseen)]
        );
    }

    #[test]
    fn take_picks_partitions() {
        let mut queue = AckQueue::default();
        queue.push(&("a".into(), 0), 1, AckKind::Accept);
        queue.push(&("b".into(), 0), 1, AckKind::Accept);
        let taken = queue.take(|k| k.0 == "b");
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].topic, "b");
        assert_eq!(queue.take_all().len(), 1);
    }

    #[test]
    fn handed_out_records_are_taken_once_and_forgotten_after_their_time() {
        let now = Instant::now();
        let mut held = HandedOut::default();
        held.insert(&key(), 1, now + Duration::from_secs(1));
        held.insert(&key(), 2, now + Duration::from_secs(5));
        assert!(held.take(&key(), 1));
        assert!(!held.take(&key(), 1), "already acknowledged");
        held.insert(&key(), 1, now + Duration::from_secs(1));
        assert_eq!(held.forget_expired(now + Duration::from_secs(2)), 1);
        assert!(!held.take(&key(), 1), "forgotten");
        assert_eq!(held.len(), 1);
        assert_eq!(held.take_all(), vec![(key(), 2)]);
        assert_eq!(held.len(), 0);
    }

    proptest! {
        /// Whatever the order, the ranges cover exactly the offsets pushed, each with the kind
        /// it was first pushed with, without overlap, and no two neighbours could be merged.
        #[test]
        fn ranges_cover_exactly_what_was_pushed(
            pushes in proptest::collection::vec((0i64..60, 0u8..3), 0..120)
        ) {
            let mut queue = AckQueue::default();
            let mut expected = BTreeMap::new();
            for (offset, kind) in &pushes {
                let kind = [AckKind::Accept, AckKind::Release, AckKind::Reject][*kind as usize];
                queue.push(&key(), *offset, kind);
                expected.entry(*offset).or_insert(kind);
            }
            let got = ranges(&mut queue);
            let mut covered = BTreeMap::new();
            for (first, last, kind) in &got {
                prop_assert!(first <= last);
                for o in *first..=*last {
                    prop_assert!(covered.insert(o, *kind).is_none(), "overlap at {}", o);
                }
            }
            prop_assert_eq!(covered, expected);
            for pair in got.windows(2) {
                prop_assert!(!(pair[0].1 + 1 == pair[1].0 && pair[0].2 == pair[1].2));
            }
        }
    }
}
