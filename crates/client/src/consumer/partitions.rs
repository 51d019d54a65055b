//! The consumer's per-partition state: the position handed to the application (what a commit
//! stores), records fetched but not yet returned by `poll`, whether a request for it is in
//! flight, whether it is being released from a group, and whether it can be fetched now or
//! waits out a backoff after its leader could not be reached.
//!
//! Two offsets are kept apart on purpose: a fetch may bring more records than one `poll`
//! returns, and committing the fetch position would skip the records still buffered (the
//! group would never deliver them). The position moves only when records are returned.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use tinymq_filter::decode_sparse;
use tinymq_protocol::batch::control::AbortedFilter;
use tinymq_protocol::batch::{BatchIter, BATCH_DECOMPRESSED_BYTES_MAX_DEFAULT};
use tinymq_protocol::messages as m;

use super::ConsumerRecord;
use crate::error::{check, ClientError};
use crate::retry::{RETRY_BACKOFF, RETRY_BACKOFF_MAX};

pub type PartitionKey = (String, u32);

#[derive(Debug, Default)]
struct PartitionState {
    /// Next offset to hand to the application; `None` until resolved (committed offset or
    /// `start_from`).
    position: Option<i64>,
    /// Fetched records not yet returned, in offset order, all at or after `position`.
    buffered: VecDeque<ConsumerRecord>,
    /// Where `position` goes once `buffered` is drained: past the last fetched batch, so
    /// that control batches and records below the position are not fetched again.
    fetched_end: Option<i64>,
    unavailable: Option<Unavailable>,
    /// A fetch or offset lookup for this partition is in flight: start no other.
    busy: bool,
    /// The group took it away and it is released once its position is committed: nothing
    /// more is fetched or returned from it meanwhile.
    revoking: bool,
}

impl PartitionState {
    /// Whether new requests for it may start (not whether it has a position).
    fn idle(&self, now: Instant) -> bool {
        !self.busy
            && !self.revoking
            && self.buffered.is_empty()
            && self.unavailable.as_ref().is_none_or(|u| u.retry_at <= now)
    }
}

/// A partition whose leader could not be reached or has none: skipped until `retry_at`.
#[derive(Debug, Clone)]
struct Unavailable {
    error: String,
    retry_at: Instant,
    backoff: Duration,
}

/// An assigned partition that cannot be read right now, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnavailablePartition {
    pub topic: String,
    pub partition: u32,
    pub error: String,
}

#[derive(Debug, Default)]
pub(crate) struct Partitions {
    states: BTreeMap<PartitionKey, PartitionState>,
}

impl Partitions {
    pub fn keys(&self) -> BTreeSet<PartitionKey> {
        self.states.keys().cloned().collect()
    }

    /// Adds a partition (no-op if already assigned) starting at `position`, if known.
    pub fn add(&mut self, key: PartitionKey, position: Option<i64>) {
        let state = self.states.entry(key).or_default();
        if state.position.is_none() {
            state.position = position;
        }
    }

    /// Sets the position of a partition that has none yet (a start offset looked up).
    pub fn resolve(&mut self, key: &PartitionKey, offset: i64) {
        if let Some(state) = self.states.get_mut(key) {
            state.position.get_or_insert(offset);
        }
    }

    /// Drops a partition and whatever of it was fetched but not returned.
    pub fn remove(&mut self, key: &PartitionKey) {
        self.states.remove(key);
    }

    /// Drops every partition; returns their keys.
    pub fn clear(&mut self) -> Vec<PartitionKey> {
        std::mem::take(&mut self.states).into_keys().collect()
    }

    pub fn position(&self, key: &PartitionKey) -> Option<i64> {
        self.states.get(key).and_then(|s| s.position)
    }

    /// Moves an assigned partition's position, dropping what was fetched from the old one (a
    /// fetch in flight is dropped when it answers, as its offset no longer matches). Returns
    /// false for a partition not assigned.
    pub fn seek(&mut self, key: &PartitionKey, offset: i64) -> bool {
        let Some(state) = self.states.get_mut(key) else {
            return false;
        };
        state.position = Some(offset);
        state.buffered.clear();
        state.fetched_end = None;
        true
    }

    /// Forgets a partition's position (it is resolved again by the start policy).
    pub fn reset(&mut self, key: &PartitionKey) {
        if let Some(state) = self.states.get_mut(key) {
            state.position = None;
            state.buffered.clear();
            state.fetched_end = None;
        }
    }

    /// Marks partitions as being released: nothing more is fetched or returned from them.
    pub fn start_revoking(&mut self, keys: &BTreeSet<PartitionKey>) {
        for key in keys {
            if let Some(state) = self.states.get_mut(key) {
                state.revoking = true;
                state.buffered.clear();
                state.fetched_end = None;
            }
        }
    }

    /// Takes back partitions the group granted again while they were being released.
    pub fn stop_revoking(&mut self, keys: &BTreeSet<PartitionKey>) {
        for key in keys {
            if let Some(state) = self.states.get_mut(key) {
                state.revoking = false;
            }
        }
    }

    /// Marks whether a request for a partition is in flight.
    pub fn set_busy(&mut self, key: &PartitionKey, busy: bool) {
        if let Some(state) = self.states.get_mut(key) {
            state.busy = busy;
        }
    }

    /// Positions of `keys` (those known), as offsets to commit.
    pub fn commit_offsets(&self, keys: &BTreeSet<PartitionKey>) -> Vec<m::CommittedOffset> {
        keys.iter()
            .filter_map(|k| {
                Some(m::CommittedOffset {
                    topic: k.0.clone(),
                    partition: k.1,
                    offset: self.position(k)?,
                    metadata: String::new(),
                    error: None,
                })
            })
            .collect()
    }

    /// Assigned partitions without a position yet, not in flight or backing off.
    pub fn unresolved(&self, now: Instant) -> Vec<PartitionKey> {
        self.states
            .iter()
            .filter(|(_, s)| s.position.is_none() && s.idle(now))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Partitions to fetch now and their positions: resolved, not paused, nothing buffered,
    /// not in flight, not being released, and not waiting out an unavailability backoff.
    pub fn fetchable(
        &self,
        paused: &BTreeSet<PartitionKey>,
        now: Instant,
    ) -> Vec<(PartitionKey, i64)> {
        self.states
            .iter()
            .filter(|(k, s)| !paused.contains(*k) && s.idle(now))
            .filter_map(|(k, s)| Some((k.clone(), s.position?)))
            .collect()
    }

    pub fn has_buffered(&self, paused: &BTreeSet<PartitionKey>) -> bool {
        self.states
            .iter()
            .any(|(k, s)| !s.buffered.is_empty() && !paused.contains(k))
    }

    /// Records that `poll` may return: up to `max`, partition by partition, moving each
    /// partition's position past what is returned.
    pub fn drain(&mut self, max: usize, paused: &BTreeSet<PartitionKey>) -> Vec<ConsumerRecord> {
        let mut out = Vec::new();
        for (key, state) in self.states.iter_mut() {
            if paused.contains(key) {
                continue;
            }
            while out.len() < max {
                let Some(record) = state.buffered.pop_front() else {
                    break;
                };
                state.position = Some(record.offset.saturating_add(1));
                out.push(record);
            }
            if state.buffered.is_empty() {
                if let Some(end) = state.fetched_end.take() {
                    state.position = Some(state.position.map_or(end, |p| p.max(end)));
                }
            }
        }
        out
    }

    /// Marks a partition unreachable: skipped until a backoff (doubling per failure) passes.
    /// Returns true if it was available until now (worth a warning).
    pub fn mark_unavailable(
        &mut self,
        key: &PartitionKey,
        error: &ClientError,
        now: Instant,
    ) -> bool {
        let Some(state) = self.states.get_mut(key) else {
            return false;
        };
        let backoff = state
            .unavailable
            .as_ref()
            .map_or(RETRY_BACKOFF, |u| (u.backoff * 2).min(RETRY_BACKOFF_MAX));
        let was_available = state.unavailable.is_none();
        state.unavailable = Some(Unavailable {
            error: error.to_string(),
            retry_at: now + backoff,
            backoff,
        });
        was_available
    }

    /// Marks a partition readable again; returns true if it was unavailable.
    pub fn mark_available(&mut self, key: &PartitionKey) -> bool {
        self.states
            .get_mut(key)
            .is_some_and(|s| s.unavailable.take().is_some())
    }

    pub fn unavailable(&self) -> Vec<UnavailablePartition> {
        self.states
            .iter()
            .filter_map(|((topic, partition), s)| {
                Some(UnavailablePartition {
                    topic: topic.clone(),
                    partition: *partition,
                    error: s.unavailable.as_ref()?.error.clone(),
                })
            })
            .collect()
    }

    /// Buffers one partition's fetch result, sent for offset `requested`: records at or after
    /// it, in order. Dropped if the partition was revoked, moved (seek, reset) or already has
    /// records since the fetch was sent. Every batch's CRC is checked by the batch iterator
    /// before its records are read. A filtered fetch (`sparse`) brings batches with offset
    /// gaps and a `next_offset` past the records the broker skipped: the position moves there
    /// once what was buffered is returned, or at once when nothing matched (so the next fetch
    /// and a commit are past the skipped records). Control batches are never buffered; under
    /// read committed (`committed`) neither are the batches of the aborted transactions the
    /// result lists (Kafka's consumer rule); the position moves past both.
    pub fn buffer(
        &mut self,
        p: m::FetchPartitionResult,
        requested: i64,
        sparse: bool,
        committed: bool,
    ) -> Result<(), ClientError> {
        check(p.error.as_ref())?;
        let key = (p.topic.clone(), p.partition);
        let Some(state) = self.states.get_mut(&key) else {
            return Ok(());
        };
        if state.position != Some(requested) || state.revoking || !state.buffered.is_empty() {
            return Ok(());
        }
        let mut end = if sparse {
            requested.max(p.next_offset)
        } else {
            requested
        };
        let mut aborted = committed.then(|| {
            let listed = p.aborted_transactions.iter();
            AbortedFilter::new(listed.map(|a| (a.producer_id, a.first_offset)))
        });
        for batch in BatchIter::new(p.records) {
            let batch = batch?;
            end = end.max(batch.next_offset());
            // Called for every batch, markers included: an ABORT ends its producer's drop.
            let shown = aborted.as_mut().is_none_or(|a| a.keep(&batch));
            if batch.is_control() || !shown {
                continue;
            }
            let records = if sparse {
                decode_sparse(&batch, BATCH_DECOMPRESSED_BYTES_MAX_DEFAULT)?
            } else {
                batch.records(BATCH_DECOMPRESSED_BYTES_MAX_DEFAULT)?
            };
            for record in records {
                if record.offset < requested {
                    continue;
                }
                state.buffered.push_back(ConsumerRecord {
                    topic: p.topic.clone(),
                    partition: p.partition,
                    offset: record.offset,
                    timestamp_ms: record.timestamp_ms,
                    key: record.key,
                    value: record.value,
                    headers: record
                        .headers
                        .into_iter()
                        .map(|h| (h.key, h.value))
                        .collect(),
                });
            }
        }
        if state.buffered.is_empty() {
            // Nothing to hand out: the position moves now, so the next fetch starts past what
            // was read (and a commit stores that).
            state.position = Some(end);
        } else {
            state.fetched_end = Some(end);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(offset: i64) -> ConsumerRecord {
        ConsumerRecord {
            topic: "t".into(),
            partition: 0,
            offset,
            timestamp_ms: 0,
            key: None,
            value: None,
            headers: Vec::new(),
        }
    }

    fn key() -> PartitionKey {
        ("t".into(), 0)
    }

    #[test]
    fn the_position_moves_only_past_records_returned() {
        let mut parts = Partitions::default();
        parts.add(key(), Some(0));
        let state = parts.states.get_mut(&key()).unwrap();
        state.buffered.extend((0..10).map(record));
        state.fetched_end = Some(12); // a control batch after the records
        let none = BTreeSet::new();
        assert_eq!(parts.drain(3, &none).len(), 3);
        assert_eq!(parts.position(&key()), Some(3));
        assert_eq!(parts.commit_offsets(&parts.keys())[0].offset, 3);
        assert!(
            parts.fetchable(&none, Instant::now()).is_empty(),
            "buffered: not fetched"
        );
        assert_eq!(parts.drain(100, &none).len(), 7);
        assert_eq!(
            parts.position(&key()),
            Some(12),
            "past the control batch once drained"
        );
        assert_eq!(parts.fetchable(&none, Instant::now()), vec![(key(), 12)]);
    }

    #[test]
    fn seek_and_pause_and_backoff() {
        let mut parts = Partitions::default();
        parts.add(key(), Some(5));
        parts
            .states
            .get_mut(&key())
            .unwrap()
            .buffered
            .push_back(record(5));
        let paused = BTreeSet::from([key()]);
        assert!(
            parts.drain(10, &paused).is_empty(),
            "a paused partition returns nothing"
        );
        assert!(parts.seek(&key(), 1));
        assert!(!parts.seek(&("other".into(), 0), 1), "not assigned");
        assert!(!parts.has_buffered(&BTreeSet::new()));
        parts.set_busy(&key(), true);
        assert!(
            parts.fetchable(&BTreeSet::new(), Instant::now()).is_empty(),
            "in flight"
        );
        parts.set_busy(&key(), false);
        parts.start_revoking(&BTreeSet::from([key()]));
        assert!(
            parts.fetchable(&BTreeSet::new(), Instant::now()).is_empty(),
            "revoking"
        );
        parts.remove(&key());
        parts.add(key(), Some(1));
        let now = Instant::now();
        let error = ClientError::ConnectionClosed("x".into());
        assert!(parts.mark_unavailable(&key(), &error, now));
        assert!(!parts.mark_unavailable(&key(), &error, now), "warned once");
        assert!(parts.fetchable(&BTreeSet::new(), now).is_empty());
        assert_eq!(
            parts
                .fetchable(&BTreeSet::new(), now + RETRY_BACKOFF_MAX)
                .len(),
            1
        );
        assert_eq!(parts.unavailable().len(), 1);
        assert!(parts.mark_available(&key()));
        assert!(parts.unavailable().is_empty());
    }

    /// A filtered fetch's result over offsets 0..6 tagged red, blue, red, …, keeping red.
    fn filtered_result(tag_kept: &str) -> m::FetchPartitionResult {
        use tinymq_protocol::batch::{BatchBuilder, Compression, ProducerStamp, RecordInput};
        let mut builder = BatchBuilder::new(Compression::Lz4, ProducerStamp::NONE);
        for i in 0..6 {
            let tag: &[u8] = if i % 2 == 0 { b"red" } else { b"blue" };
            builder.push(&RecordInput {
                timestamp_ms: 7,
                key: None,
                value: Some(b"v"),
                headers: &[("tag", Some(tag))],
            });
        }
        let batch = builder.build().unwrap();
        let options = tinymq_filter::SelectOptions {
            from_offset: 0,
            decompressed_bytes_max: 1 << 20,
        };
        let keep =
            |_, r: &dyn tinymq_filter::RecordFields| r.header("tag") == Some(tag_kept.as_bytes());
        let selection = tinymq_filter::select(&batch, keep, &options).unwrap();
        m::FetchPartitionResult {
            topic: "t".into(),
            partition: 0,
            records: selection.records,
            next_offset: selection.next_offset,
            high_watermark: 6,
            ..Default::default()
        }
    }

    #[test]
    fn a_filtered_fetch_returns_records_with_gaps_and_moves_past_skipped_ones() {
        let mut parts = Partitions::default();
        parts.add(key(), Some(0));
        parts
            .buffer(filtered_result("red"), 0, true, false)
            .unwrap();
        let none = BTreeSet::new();
        let offsets: Vec<i64> = parts.drain(100, &none).iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![0, 2, 4]);
        assert_eq!(parts.position(&key()), Some(6), "past the skipped offset 5");
        assert_eq!(parts.commit_offsets(&parts.keys())[0].offset, 6);
    }

    #[test]
    fn a_filtered_fetch_with_no_match_moves_the_position_at_once() {
        let mut parts = Partitions::default();
        parts.add(key(), Some(0));
        parts
            .buffer(filtered_result("green"), 0, true, false)
            .unwrap();
        assert_eq!(parts.position(&key()), Some(6));
        assert_eq!(
            parts.fetchable(&BTreeSet::new(), Instant::now()),
            vec![(key(), 6)],
            "the next fetch starts past the skipped records"
        );
    }

    /// Offsets 0 p1 (aborted), 1 p2 (committed), 2 p1 ABORT, 3 p2 COMMIT.
    fn transactional_result() -> m::FetchPartitionResult {
        use tinymq_protocol::batch::control::{encode_marker, MarkerType};
        use tinymq_protocol::batch::{
            stamp_base_offset, BatchBuilder, Compression, ProducerStamp, RecordInput,
            ATTR_TRANSACTIONAL,
        };
        let data = |producer: i64| {
            let stamp = ProducerStamp {
                producer_id: producer,
                producer_epoch: 0,
                base_sequence: 0,
            };
            let mut b =
                BatchBuilder::new(Compression::None, stamp).with_attributes(ATTR_TRANSACTIONAL);
            b.push(&RecordInput {
                timestamp_ms: 7,
                key: None,
                value: Some(b"v"),
                headers: &[],
            });
            b.build().unwrap()
        };
        let batches = [
            data(1),
            data(2),
            encode_marker(1, 0, MarkerType::Abort, 0, 7),
            encode_marker(2, 0, MarkerType::Commit, 0, 7),
        ];
        let mut records = Vec::new();
        for (offset, batch) in batches.iter().enumerate() {
            let mut b = batch.to_vec();
            stamp_base_offset(&mut b, offset as i64);
            records.extend_from_slice(&b);
        }
        m::FetchPartitionResult {
            topic: "t".into(),
            partition: 0,
            records: records.into(),
            high_watermark: 4,
            last_stable_offset: 4,
            aborted_transactions: vec![m::AbortedTransaction {
                producer_id: 1,
                first_offset: 0,
            }],
            ..Default::default()
        }
    }

    #[test]
    fn markers_are_never_returned_and_read_committed_drops_aborted_records() {
        let none = BTreeSet::new();
        for (committed, expected) in [(false, vec![0, 1]), (true, vec![1])] {
            let mut parts = Partitions::default();
            parts.add(key(), Some(0));
            parts
                .buffer(transactional_result(), 0, false, committed)
                .unwrap();
            let offsets: Vec<i64> = parts.drain(100, &none).iter().map(|r| r.offset).collect();
            assert_eq!(offsets, expected, "read committed: {committed}");
            assert_eq!(parts.position(&key()), Some(4), "past the markers");
        }
    }
}
