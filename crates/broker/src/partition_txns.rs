//! The transactions (KIP-98) of one partition, as its log describes them: the producers with
//! an open transaction here (from their first transactional batch to the marker that closes
//! it), and the aborted transactions whose records a read-committed consumer must drop. Pure
//! logic; `producer_state` holds it beside the producers' sequences, the partition applies
//! every batch it writes or replicates to it, and it is rebuilt from the log with them after a
//! restart (there is no transaction index file: the log's batch headers and markers are the
//! record of it).
//!
//! - The **last stable offset** is the high watermark, or the first offset of the oldest open
//!   transaction if that is lower: below it every transaction is decided.
//! - **Aborted transactions** are kept in marker order, each with its first offset and the
//!   offset of its ABORT marker, and answered per fetch range by a binary search and a
//!   min-first-offset index ([`FirstOffsetIndex`]), never a scan of the list.
//! - Bounds: at most [`OPEN_TXNS_PER_PARTITION_MAX`] open transactions and
//!   [`ABORTED_TXNS_PER_PARTITION_MAX`] aborted ones, counting a slot for every open one (so
//!   that closing it always fits). A transactional batch that would open a transaction past
//!   either bound is refused ([`TxnError`]); nothing is ever dropped to make room, except
//!   aborted transactions wholly below the log start (retention), which no fetch can reach.

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use tinymq_protocol::batch::control::MarkerType;

/// Most open transactions per partition: as many as the producers a partition remembers
/// (`producer_state::PRODUCERS_PER_PARTITION_MAX`, checked equal there), since each open one
/// pins its producer in that table.
pub const OPEN_TXNS_PER_PARTITION_MAX: usize = 10_000;

/// Most aborted transactions remembered per partition (24 bytes each, so at most about
/// 24 MiB, plus about 2 bytes each for the index). Open transactions each reserve a slot, so
/// an ABORT marker always fits; a transactional batch opening a transaction when the list is
/// full is refused until retention moves the log start past old markers.
pub const ABORTED_TXNS_PER_PARTITION_MAX: usize = 1_000_000;

/// Aborted transactions per leaf of [`FirstOffsetIndex`]: the index costs 16 bytes per
/// block (a tree of block minima), and a query scans at most one block per hit.
const INDEX_BLOCK_ENTRIES: usize = 16;

/// A producer's open transaction on this partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OngoingTxn {
    pub producer_epoch: i16,
    /// Offset of the transaction's first batch here.
    pub first_offset: i64,
    /// Last offset of its latest batch here.
    pub last_offset: i64,
}

/// An aborted transaction: its records lie in `first_offset..last_offset` (with other
/// producers' records between), and `last_offset` is its ABORT marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
}

/// Why a transactional batch is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TxnError {
    #[error(
        "{open} transactions are open on this partition, the most it keeps \
         ({OPEN_TXNS_PER_PARTITION_MAX}); producer {producer_id} cannot open another until \
         one ends"
    )]
    TooManyOpen { producer_id: i64, open: usize },
    #[error(
        "this partition remembers {aborted} aborted transactions and {open} open ones, the \
         most it keeps ({ABORTED_TXNS_PER_PARTITION_MAX}); producer {producer_id} cannot open \
         a transaction until retention removes old ones"
    )]
    AbortedListFull {
        producer_id: i64,
        aborted: usize,
        open: usize,
    },
    #[error(
        "producer {producer_id} epoch {producer_epoch} has no open transaction on this partition \
         and its coordinator did not confirm the partition is in one (AddPartitionsToTxn comes \
         first; or the transaction ended meanwhile)"
    )]
    NotVerified {
        producer_id: i64,
        producer_epoch: i16,
    },
}

/// What a snapshot stores; the indexes are rebuilt from it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct TxnsOnDisk {
    #[serde(default)]
    ongoing: HashMap<i64, OngoingTxn>,
    #[serde(default)]
    aborted: Vec<AbortedTxn>,
}

/// The transaction state of one partition.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(from = "TxnsOnDisk", into = "TxnsOnDisk")]
pub struct PartitionTxns {
    ongoing: HashMap<i64, OngoingTxn>,
    /// (first offset, producer id) of every open transaction: the oldest first, for the LSO.
    ongoing_by_first: BTreeSet<(i64, i64)>,
    /// In marker (`last_offset`) order.
    aborted: Vec<AbortedTxn>,
    index: FirstOffsetIndex,
    /// Producers whose coordinator confirmed, for the epoch given, that this partition is in
    /// their open transaction (KIP-890's verification), until their next batch here opens it
    /// or a marker for them arrives. Only the leader fills it; it is not saved.
    verified: HashMap<i64, i16>,
}

impl PartialEq for PartitionTxns {
    fn eq(&self, other: &PartitionTxns) -> bool {
        self.ongoing == other.ongoing && self.aborted == other.aborted
    }
}
impl Eq for PartitionTxns {}

impl From<TxnsOnDisk> for PartitionTxns {
    fn from(disk: TxnsOnDisk) -> PartitionTxns {
        let mut txns = PartitionTxns {
            ongoing_by_first: disk
                .ongoing
                .iter()
                .map(|(id, t)| (t.first_offset, *id))
                .collect(),
            ongoing: disk.ongoing,
            aborted: disk.aborted,
            index: FirstOffsetIndex::default(),
            verified: HashMap::new(),
        };
        // A hand-edited or damaged snapshot must not break the binary search.
        txns.aborted.sort_by_key(|a| a.last_offset);
        txns.index.rebuild(&txns.aborted);
        txns
    }
}

impl From<PartitionTxns> for TxnsOnDisk {
    fn from(txns: PartitionTxns) -> TxnsOnDisk {
        TxnsOnDisk {
            ongoing: txns.ongoing,
            aborted: txns.aborted,
        }
    }
}

impl PartitionTxns {
    /// Whether `producer_id` has an open transaction here (such a producer is never expired
    /// or evicted from the producer table).
    pub fn is_open(&self, producer_id: i64) -> bool {
        self.ongoing.contains_key(&producer_id)
    }

    pub fn ongoing(&self, producer_id: i64) -> Option<OngoingTxn> {
        self.ongoing.get(&producer_id).copied()
    }

    pub fn open_count(&self) -> usize {
        self.ongoing.len()
    }

    pub fn aborted_count(&self) -> usize {
        self.aborted.len()
    }

    /// Every aborted transaction remembered, in marker order.
    pub fn aborted(&self) -> &[AbortedTxn] {
        &self.aborted
    }

    /// Whether a transactional batch of `producer_id` may be written: it extends its open
    /// transaction, or there is room to open one.
    pub fn check_data(&self, producer_id: i64) -> Result<(), TxnError> {
        if self.is_open(producer_id) {
            return Ok(());
        }
        self.check_room(producer_id)
    }

    /// [`PartitionTxns::check_data`] for a leader's write: a batch that would open a
    /// transaction must also have been verified with its coordinator in `producer_epoch`
    /// ([`PartitionTxns::verified`]), so a late or stray transactional batch cannot open a
    /// transaction nobody will end.
    pub fn check_leader_data(&self, producer_id: i64, producer_epoch: i16) -> Result<(), TxnError> {
        if self.is_open(producer_id) {
            return Ok(());
        }
        if self.verified.get(&producer_id) != Some(&producer_epoch) {
            return Err(TxnError::NotVerified {
                producer_id,
                producer_epoch,
            });
        }
        self.check_room(producer_id)
    }

    /// Whether `producer_id` needs a verification before its batch of `producer_epoch`: it
    /// has no open transaction here and none verified in that epoch.
    pub fn needs_verification(&self, producer_id: i64, producer_epoch: i16) -> bool {
        !self.is_open(producer_id) && self.verified.get(&producer_id) != Some(&producer_epoch)
    }

    /// The coordinator confirmed that this partition is in `producer_id`'s open transaction
    /// of `producer_epoch`. Bounded like the open transactions.
    pub fn verified(&mut self, producer_id: i64, producer_epoch: i16) -> Result<(), TxnError> {
        if !self.verified.contains_key(&producer_id)
            && self.verified.len() >= OPEN_TXNS_PER_PARTITION_MAX
        {
            return Err(TxnError::TooManyOpen {
                producer_id,
                open: self.verified.len(),
            });
        }
        self.verified.insert(producer_id, producer_epoch);
        Ok(())
    }

    fn check_room(&self, producer_id: i64) -> Result<(), TxnError> {
        let open = self.ongoing.len();
        if open >= OPEN_TXNS_PER_PARTITION_MAX {
            return Err(TxnError::TooManyOpen { producer_id, open });
        }
        let aborted = self.aborted.len();
        if aborted + open >= ABORTED_TXNS_PER_PARTITION_MAX {
            return Err(TxnError::AbortedListFull {
                producer_id,
                aborted,
                open,
            });
        }
        Ok(())
    }

    /// A transactional data batch of `producer_id` written at `base_offset..=last_offset`:
    /// opens its transaction there, or extends the open one.
    pub fn apply_data(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        base_offset: i64,
        last_offset: i64,
    ) {
        self.verified.remove(&producer_id);
        match self.ongoing.get_mut(&producer_id) {
            Some(txn) => {
                txn.last_offset = txn.last_offset.max(last_offset);
                txn.producer_epoch = txn.producer_epoch.max(producer_epoch);
            }
            None => {
                self.ongoing.insert(
                    producer_id,
                    OngoingTxn {
                        producer_epoch,
                        first_offset: base_offset,
                        last_offset,
                    },
                );
                self.ongoing_by_first.insert((base_offset, producer_id));
            }
        }
    }

    /// A marker of `producer_id` written at `offset`: closes its open transaction, and an
    /// ABORT remembers it. An ABORT with nothing open here hides no record and is not kept.
    pub fn apply_marker(&mut self, producer_id: i64, offset: i64, marker: MarkerType) {
        // A verification from before the marker is for a transaction that just ended.
        self.verified.remove(&producer_id);
        let Some(open) = self.ongoing.remove(&producer_id) else {
            return;
        };
        self.ongoing_by_first
            .remove(&(open.first_offset, producer_id));
        if marker == MarkerType::Commit {
            return;
        }
        let aborted = AbortedTxn {
            producer_id,
            first_offset: open.first_offset,
            last_offset: offset,
        };
        if self
            .aborted
            .last()
            .is_none_or(|last| last.last_offset <= offset)
        {
            self.aborted.push(aborted);
            self.index.push(&self.aborted);
        } else {
            // Markers are applied in log order, so this does not happen; kept sorted anyway.
            let at = self.aborted.partition_point(|a| a.last_offset <= offset);
            self.aborted.insert(at, aborted);
            self.index.rebuild(&self.aborted);
        }
    }

    /// The last stable offset given the high watermark: below it, no transaction is open.
    pub fn last_stable_offset(&self, high_watermark: i64) -> i64 {
        match self.ongoing_by_first.first() {
            Some(&(first, _)) => first.min(high_watermark),
            None => high_watermark,
        }
    }

    /// The aborted transactions a read-committed fetch returning the records in
    /// `fetch_offset..upper_offset` must carry, as (producer id, first offset) in marker
    /// order: those whose marker is at or after `fetch_offset` and whose first offset is
    /// below `upper_offset`. A binary search finds the first marker at or after the fetch, and
    /// the index visits only blocks holding a first offset below the upper bound.
    pub fn aborted_in_range(&self, fetch_offset: i64, upper_offset: i64) -> Vec<(i64, i64)> {
        let from = self
            .aborted
            .partition_point(|a| a.last_offset < fetch_offset);
        let mut found = Vec::new();
        self.index
            .collect(&self.aborted, from, upper_offset, &mut found);
        found
            .into_iter()
            .map(|i| (self.aborted[i].producer_id, self.aborted[i].first_offset))
            .collect()
    }

    /// Forgets aborted transactions whose marker is below the log start (retention removed
    /// them with their records: no fetch can reach them).
    pub fn trim_below(&mut self, log_start_offset: i64) {
        let gone = self
            .aborted
            .partition_point(|a| a.last_offset < log_start_offset);
        if gone > 0 {
            self.aborted.drain(..gone);
            self.index.rebuild(&self.aborted);
        }
    }
}

/// The smallest first offset of each block of [`INDEX_BLOCK_ENTRIES`] aborted transactions,
/// in a segment tree over the blocks: "which entries from position `from` on start below
/// `upper`" is answered by descending only into subtrees whose minimum is below `upper`.
#[derive(Debug, Clone, Default)]
struct FirstOffsetIndex {
    /// Leaves (blocks) the tree has room for: a power of two.
    capacity: usize,
    /// `tree[1]` is the root, `tree[capacity + b]` block `b`'s minimum (i64::MAX if empty).
    tree: Vec<i64>,
    /// Entries indexed.
    len: usize,
}

impl FirstOffsetIndex {
    fn rebuild(&mut self, entries: &[AbortedTxn]) {
        let blocks = entries.len().div_ceil(INDEX_BLOCK_ENTRIES);
        self.capacity = blocks.next_power_of_two().max(1);
        self.tree = vec![i64::MAX; 2 * self.capacity];
        for (b, block) in entries.chunks(INDEX_BLOCK_ENTRIES).enumerate() {
            let min = block.iter().map(|a| a.first_offset).min();
            self.tree[self.capacity + b] = min.unwrap_or(i64::MAX);
        }
        for node in (1..self.capacity).rev() {
            self.tree[node] = self.tree[2 * node].min(self.tree[2 * node + 1]);
        }
        self.len = entries.len();
    }

    /// Indexes the entry just pushed onto `entries`.
    fn push(&mut self, entries: &[AbortedTxn]) {
        let block = entries.len().saturating_sub(1) / INDEX_BLOCK_ENTRIES;
        let Some(last) = entries.last() else {
            return self.rebuild(entries);
        };
        if entries.len() != self.len + 1 || block >= self.capacity {
            return self.rebuild(entries);
        }
        self.len = entries.len();
        let mut node = self.capacity + block;
        while node >= 1 && self.tree[node] > last.first_offset {
            self.tree[node] = last.first_offset;
            node /= 2;
        }
    }

    /// Pushes onto `out`, in order, the positions `>= from` of entries whose first offset is
    /// below `upper`.
    fn collect(&self, entries: &[AbortedTxn], from: usize, upper: i64, out: &mut Vec<usize>) {
        if from >= entries.len() || self.len != entries.len() {
            if self.len != entries.len() {
                // Not reachable (every change re-indexes); answered by a scan rather than
                // wrongly.
                out.extend((from..entries.len()).filter(|&i| entries[i].first_offset < upper));
            }
            return;
        }
        self.descend(entries, 1, 0, self.capacity, from, upper, out);
    }

    /// Visits `node`, covering blocks `lo..hi`.
    #[allow(clippy::too_many_arguments)]
    fn descend(
        &self,
        entries: &[AbortedTxn],
        node: usize,
        lo: usize,
        hi: usize,
        from: usize,
        upper: i64,
        out: &mut Vec<usize>,
    ) {
        let first_entry = lo * INDEX_BLOCK_ENTRIES;
        let end_entry = (hi * INDEX_BLOCK_ENTRIES).min(entries.len());
        if end_entry <= from || first_entry >= entries.len() || self.tree[node] >= upper {
            return;
        }
        if hi - lo == 1 {
            let start = first_entry.max(from);
            out.extend((start..end_entry).filter(|&i| entries[i].first_offset < upper));
            return;
        }
        let mid = (lo + hi) / 2;
        self.descend(entries, 2 * node, lo, mid, from, upper, out);
        self.descend(entries, 2 * node + 1, mid, hi, from, upper, out);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn data_opens_and_markers_close() {
        let mut txns = PartitionTxns::default();
        assert_eq!(txns.last_stable_offset(10), 10);
        txns.apply_data(1, 0, 3, 4);
        txns.apply_data(2, 0, 5, 5);
        txns.apply_data(1, 0, 6, 7);
        assert_eq!(
            txns.ongoing(1),
            Some(OngoingTxn {
                producer_epoch: 0,
                first_offset: 3,
                last_offset: 7
            })
        );
        assert_eq!(txns.last_stable_offset(10), 3);
        assert_eq!(
            txns.last_stable_offset(2),
            2,
            "never above the high watermark"
        );
        txns.apply_marker(1, 8, MarkerType::Commit);
        assert_eq!(txns.last_stable_offset(10), 5);
        assert!(txns.aborted().is_empty(), "a commit hides nothing");
        txns.apply_marker(2, 9, MarkerType::Abort);
        assert_eq!(txns.last_stable_offset(10), 10);
        assert_eq!(
            txns.aborted(),
            &[AbortedTxn {
                producer_id: 2,
                first_offset: 5,
                last_offset: 9
            }]
        );
        txns.apply_marker(3, 10, MarkerType::Abort);
        assert_eq!(txns.aborted_count(), 1, "nothing open: nothing to hide");
    }

    #[test]
    fn kafkas_range_rule() {
        let mut txns = PartitionTxns::default();
        // Producer 1: 0..=1 aborted at 4; producer 2: 2..=3 aborted at 5 (interleaved).
        txns.apply_data(1, 0, 0, 1);
        txns.apply_data(2, 0, 2, 3);
        txns.apply_marker(1, 4, MarkerType::Abort);
        txns.apply_marker(2, 5, MarkerType::Abort);
        assert_eq!(txns.aborted_in_range(0, 2), vec![(1, 0)]);
        assert_eq!(txns.aborted_in_range(0, 6), vec![(1, 0), (2, 2)]);
        assert_eq!(txns.aborted_in_range(5, 6), vec![(2, 2)], "marker in range");
        assert_eq!(txns.aborted_in_range(6, 9), vec![]);
        txns.trim_below(5);
        assert_eq!(
            txns.aborted_count(),
            1,
            "the marker at 4 is below the start"
        );
    }

    #[test]
    fn the_lists_are_bounded_and_refuse_rather_than_drop() {
        let mut txns = PartitionTxns::default();
        for p in 0..OPEN_TXNS_PER_PARTITION_MAX as i64 {
            txns.apply_data(p, 0, p, p);
        }
        assert!(txns.check_data(0).is_ok(), "extending an open one");
        assert!(matches!(
            txns.check_data(-5),
            Err(TxnError::TooManyOpen { .. })
        ));
        let mut full = PartitionTxns::default();
        for i in 0..(ABORTED_TXNS_PER_PARTITION_MAX - 1) as i64 {
            full.aborted.push(AbortedTxn {
                producer_id: 1,
                first_offset: 2 * i,
                last_offset: 2 * i + 1,
            });
        }
        full.index.rebuild(&full.aborted);
        let end = 2 * ABORTED_TXNS_PER_PARTITION_MAX as i64;
        assert!(full.check_data(9).is_ok());
        full.apply_data(9, 0, end, end);
        assert!(matches!(
            full.check_data(10),
            Err(TxnError::AbortedListFull { .. })
        ));
        full.apply_marker(9, end + 1, MarkerType::Abort);
        assert_eq!(
            full.aborted_count(),
            ABORTED_TXNS_PER_PARTITION_MAX,
            "the open one's slot"
        );
        assert_eq!(full.aborted_in_range(end, end + 1), vec![(9, end)]);
        full.trim_below(10);
        assert!(full.check_data(10).is_ok(), "retention made room");
    }

    #[test]
    fn a_snapshot_round_trips_and_old_ones_load() {
        let mut txns = PartitionTxns::default();
        txns.apply_data(1, 2, 0, 3);
        txns.apply_data(4, 0, 4, 4);
        txns.apply_marker(4, 5, MarkerType::Abort);
        let json = serde_json::to_string(&txns).unwrap();
        let back: PartitionTxns = serde_json::from_str(&json).unwrap();
        assert_eq!(back, txns);
        assert_eq!(back.last_stable_offset(100), 0);
        assert_eq!(back.aborted_in_range(0, 10), vec![(4, 4)]);
        let empty: PartitionTxns = serde_json::from_str("{}").unwrap();
        assert_eq!(empty, PartitionTxns::default());
    }

    proptest! {
        /// The index answers exactly what a scan of the whole list would.
        #[test]
        fn aborted_in_range_equals_a_scan(
            txns in proptest::collection::vec((0i64..40, 0i64..400), 0..300),
            queries in proptest::collection::vec((0i64..2000, 0i64..2000), 1..20),
        ) {
            let mut state = PartitionTxns::default();
            let mut offset = 0i64;
            for (i, (span, gap)) in txns.iter().enumerate() {
                let pid = i as i64;
                let first = offset + gap % 7;
                state.apply_data(pid, 0, first, first);
                let marker = first + span + 1;
                offset = first + 1;
                // Markers must come in offset order: close earlier-opened ones lazily.
                state.apply_marker(pid, marker.max(state.aborted.last().map_or(0, |a| a.last_offset)), MarkerType::Abort);
            }
            for (a, b) in queries {
                let (fetch, upper) = (a.min(b), a.max(b));
                let scan: Vec<(i64, i64)> = state.aborted.iter()
                    .filter(|t| t.last_offset >= fetch && t.first_offset < upper)
                    .map(|t| (t.producer_id, t.first_offset)).collect();
                prop_assert_eq!(state.aborted_in_range(fetch, upper), scan);
            }
        }
    }
}
