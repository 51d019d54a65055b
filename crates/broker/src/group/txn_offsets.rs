//! Offsets committed inside a transaction (TxnOffsetCommit) that its marker has not resolved
//! yet: they are in the offsets partition's log (records whose value names the producer id,
//! `"x"`), but become the group's committed offsets only when that producer's COMMIT marker
//! reaches the same partition; an ABORT marker drops them. Kept per producer id, bounded by
//! [`PENDING_TXN_OFFSETS_MAX`].

use std::collections::HashMap;

use super::offsets::Change;

/// Most offsets waiting for their transaction's marker on one broker (about 200 B each).
pub const PENDING_TXN_OFFSETS_MAX: usize = 100_000;

/// One TxnOffsetCommit: its offsets partition, group, changes and time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingCommit {
    pub partition: u32,
    /// The producer epoch of the TxnOffsetCommit: only a COMMIT marker of this very epoch
    /// commits it (a fenced instance's offsets never do).
    pub producer_epoch: i16,
    pub group: String,
    pub changes: Vec<Change>,
    pub timestamp_ms: i64,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PendingTxnOffsets {
    by_producer: HashMap<i64, Vec<PendingCommit>>,
    offsets: usize,
}

impl PendingTxnOffsets {
    /// How many more offsets fit.
    pub fn room(&self) -> usize {
        PENDING_TXN_OFFSETS_MAX.saturating_sub(self.offsets)
    }

    pub fn add(&mut self, producer_id: i64, commit: PendingCommit) {
        self.offsets += commit.changes.len();
        self.by_producer
            .entry(producer_id)
            .or_default()
            .push(commit);
    }

    /// The commits of `producer_id` on offsets partition `partition`, in the order written,
    /// now resolved by its marker there.
    pub fn take(&mut self, producer_id: i64, partition: u32) -> Vec<PendingCommit> {
        let Some(all) = self.by_producer.get_mut(&producer_id) else {
            return Vec::new();
        };
        let (taken, kept): (Vec<_>, Vec<_>) = all.drain(..).partition(|c| c.partition == partition);
        *all = kept;
        if all.is_empty() {
            self.by_producer.remove(&producer_id);
        }
        self.offsets -= taken.iter().map(|c| c.changes.len()).sum::<usize>();
        taken
    }

    /// Forgets what waits on offsets partition `partition` (no longer led here).
    pub fn drop_partition(&mut self, partition: u32) {
        let producers: Vec<i64> = self.by_producer.keys().copied().collect();
        for producer_id in producers {
            self.take(producer_id, partition);
        }
    }

    /// Merges what a load found.
    pub fn extend(&mut self, other: PendingTxnOffsets) {
        for (producer_id, commits) in other.by_producer {
            for commit in commits {
                self.add(producer_id, commit);
            }
        }
    }

    /// Whether an open transaction holds an offset of `group` for `tp` (OffsetFetch's
    /// `require_stable`).
    pub fn holds(&self, group: &str, tp: &super::assignment::Tp) -> bool {
        self.by_producer
            .values()
            .flatten()
            .any(|c| c.group == group && c.changes.iter().any(|(t, _)| t == tp))
    }
}

/// For a transaction marker (a control batch), whether it commits; None for any other batch.
/// A control batch that is not a readable marker counts as an abort (never commits offsets
/// nobody decided to commit).
pub fn marker_commits(batch: &tinymq_protocol::batch::RecordBatch) -> Option<bool> {
    if batch.attributes() & tinymq_protocol::batch::ATTR_CONTROL == 0 {
        return None;
    }
    Some(
        tinymq_protocol::batch::control::parse_marker(batch)
            .is_ok_and(|m| m.marker == tinymq_protocol::batch::control::MarkerType::Commit),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit(partition: u32, group: &str) -> PendingCommit {
        PendingCommit {
            partition,
            producer_epoch: 0,
            group: group.into(),
            changes: vec![(("t".into(), 0), None)],
            timestamp_ms: 1,
        }
    }

    #[test]
    fn a_marker_takes_only_its_partitions_commits_and_the_count_follows() {
        let mut pending = PendingTxnOffsets::default();
        pending.add(7, commit(1, "a"));
        pending.add(7, commit(2, "b"));
        pending.add(8, commit(1, "c"));
        assert_eq!(pending.room(), PENDING_TXN_OFFSETS_MAX - 3);
        assert!(pending.holds("b", &("t".into(), 0)));
        assert_eq!(pending.take(7, 1), vec![commit(1, "a")]);
        assert_eq!(pending.take(7, 1), vec![]);
        pending.drop_partition(1);
        assert_eq!(pending.take(8, 1), vec![]);
        assert_eq!(pending.room(), PENDING_TXN_OFFSETS_MAX - 1);
        assert!(!pending.holds("a", &("t".into(), 0)));
    }
}
