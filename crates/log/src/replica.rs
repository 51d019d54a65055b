//! What replication needs from the log besides truncation (in `maintenance.rs`): a follower
//! appending its leader's batches byte for byte, and the leader-epoch queries both sides ask
//! (OffsetsForLeaderEpoch).

use tinymq_protocol::batch::BatchError;
use tinymq_replication::LeaderEpochCache;

use crate::error::LogError;
use crate::log::{AppendInfo, PartitionLog, Span};
use crate::segment::{BatchMeta, SEGMENT_OFFSETS_MAX};

impl PartitionLog {
    /// The newest leader epoch that wrote to the log (or was assigned), if any.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.state.read().epochs.latest_epoch()
    }

    /// Kafka's OffsetsForLeaderEpoch, as the leader answers it: the largest epoch ≤
    /// `requested` that this log has, and its end offset — the start offset of the next
    /// higher epoch, or the log end offset for the latest epoch. `None` when every epoch the
    /// log has is above `requested`, or it has none (an empty log). Unlike Kafka, a
    /// `requested` above the latest epoch answers the latest epoch and the log end.
    pub fn end_offset_for_epoch(&self, requested: i32) -> Option<(i32, i64)> {
        let state = self.state.read();
        state
            .epochs
            .end_offset_for(requested, state.log_end_offset())
            .map(|answer| (answer.epoch, answer.end_offset))
    }

    /// Runs `f` on the leader-epoch cache together with the log start and end offsets it
    /// describes, read under one lock so they agree: what `tinymq_replication`'s
    /// `fetch_divergence` (on a leader) and `truncation_point` (on a follower) take. `f` runs
    /// with the log's state locked for reading; keep it short (those are pure functions).
    pub fn with_epochs<T>(&self, f: impl FnOnce(&LeaderEpochCache, i64, i64) -> T) -> T {
        let state = self.state.read();
        f(
            &state.epochs,
            state.log_start_offset(),
            state.log_end_offset(),
        )
    }

    /// The `(epoch, start_offset)` entries of the leader-epoch cache, both strictly
    /// increasing: what `leader-epoch-checkpoint` holds.
    pub fn epoch_entries(&self) -> Vec<(i32, i64)> {
        self.state.read().epochs.entries().to_vec()
    }

    /// Records that `epoch` starts at the current log end, before any batch of it is
    /// appended: what a broker does when it becomes leader, so that OffsetsForLeaderEpoch
    /// answers for its epoch at once. Durable when it returns. A no-op for the latest epoch;
    /// an older one is refused ([`LogError::StaleLeaderEpoch`]). Optional: the first
    /// append under a new epoch records it anyway. An epoch that wrote nothing is forgotten
    /// when the log is reopened (its entry would start at the log end), as in Kafka.
    pub fn assign_epoch(&self, epoch: i32) -> Result<(), LogError> {
        if epoch < 0 {
            return Err(LogError::InvalidLeaderEpoch(epoch));
        }
        let _writer = self.writer.lock();
        self.enter_epoch(epoch)
    }

    /// A follower's append: `batches` are whole batches fetched from the leader, with their
    /// offsets, leader epochs, producer fields and CRCs, and are written unchanged. Returns
    /// once the flush policy is satisfied, like [`PartitionLog::append`]: under `always`,
    /// after they are fsynced ([`PartitionLog::durable_offset`] then covers them).
    ///
    /// Refused, with the log unchanged: a batch whose length, magic or CRC is wrong, or that
    /// is larger than a segment (`InvalidBatch`, `BatchTooLarge`); a first batch that starts
    /// below the log end offset, or a batch that starts before the end of the one before
    /// (`NotContiguous`) — a batch may start later, where a compacted leader removed batches,
    /// and the gap is made acceptable to recovery (`cleaner_checkpoint.rs`) before it is
    /// written; a negative epoch, or epochs that go back, within the batches or
    /// below the log's latest epoch (`StaleLeaderEpoch`): the follower must truncate first.
    /// `batch_bytes_max` does not apply (the leader accepted them). An I/O error may leave a
    /// prefix of whole batches appended; [`PartitionLog::log_end_offset`] says where it ends.
    pub fn append_replicated(&self, batches: &[u8]) -> Result<AppendInfo, LogError> {
        let info = self.write_replicated(batches)?;
        self.await_flush_policy(info.log_end_offset)?;
        Ok(info)
    }

    /// The first half of [`PartitionLog::append_replicated`]: checks and writes, without
    /// waiting for any fsync (call [`PartitionLog::await_flush_policy`] after).
    pub fn write_replicated(&self, batches: &[u8]) -> Result<AppendInfo, LogError> {
        // Copied out first: `check_batches` reads the settings too, and a read lock held across
        // it would wait behind a queued `set_config`.
        let segment_bytes = self.config.read().segment_bytes;
        let (spans, _) = self.check_batches(batches, segment_bytes, false)?;
        let metas = replicated_metas(batches, &spans)?;
        let _writer = self.writer.lock();
        let (end, mut epochs) = {
            let state = self.state.read();
            state.check_writable()?;
            (state.log_end_offset(), state.epochs.clone())
        };
        let first = metas[0];
        if first.base_offset < end {
            return Err(LogError::NotContiguous {
                batch: 0,
                expected: end,
                found: first.base_offset,
            });
        }
        // A compacted leader's batches leave gaps; recovery must accept them once written.
        let gapped = first.base_offset > end
            || metas
                .windows(2)
                .any(|w| w[1].base_offset != w[0].next_offset());
        if gapped {
            let last = metas[metas.len() - 1];
            self.allow_gaps_below(last.next_offset())?;
        }
        if let Some(latest) = epochs.latest_epoch().filter(|&l| first.leader_epoch < l) {
            return Err(LogError::StaleLeaderEpoch {
                epoch: first.leader_epoch,
                latest,
            });
        }
        // Every new epoch is in the checkpoint before any byte of its batches is written.
        let before = epochs.clone();
        for meta in &metas {
            crate::epoch::observe(&mut epochs, meta.leader_epoch, meta.base_offset)?;
        }
        if epochs != before {
            self.update_epochs(|cache| *cache = epochs)?;
        }
        let written = self.write_groups(batches, &metas);
        if written.is_err() {
            self.forget_unwritten_epochs()?;
        }
        written
    }

    /// Writes the checked batches in groups that each fit one segment, rolling between them
    /// as appends do.
    fn write_groups(&self, batches: &[u8], metas: &[BatchMeta]) -> Result<AppendInfo, LogError> {
        let mut info: Option<AppendInfo> = None;
        let mut rest = metas;
        while let Some(first) = rest.first() {
            let segment_bytes = self.config.read().segment_bytes;
            let count = group_len(rest, segment_bytes);
            let (group, later) = rest.split_at(count);
            rest = later;
            let last = group[count - 1];
            let (from, to) = (first.position, last.end_position());
            let offsets = (last.next_offset() - first.base_offset) as u64;
            let target = self.prepare_write(offsets, to - from)?;
            let placed: Vec<BatchMeta> = group
                .iter()
                .map(|m| BatchMeta {
                    position: target.position + (m.position - from),
                    ..*m
                })
                .collect();
            // Positions came from spans of `batches`, so they index it.
            let bytes = &batches[from as usize..to as usize];
            let done = self.commit_write(&target, &[bytes], &placed)?;
            info = Some(match info {
                None => done,
                Some(so_far) => AppendInfo {
                    last_offset: done.last_offset,
                    log_end_offset: done.log_end_offset,
                    batch_count: so_far.batch_count + done.batch_count,
                    max_timestamp: so_far.max_timestamp.max(done.max_timestamp),
                    ..so_far
                },
            });
        }
        info.ok_or_else(|| BatchError::Corrupt("no batches".into()).into())
    }

    /// After a failed replicated write: drops the epochs whose batches did not get written
    /// (those starting past the log end), from memory and the checkpoint, so a retry of the
    /// same batches is not refused as going back in epochs.
    fn forget_unwritten_epochs(&self) -> Result<(), LogError> {
        let (end, stale) = {
            let state = self.state.read();
            let end = state.log_end_offset();
            let mut trimmed: LeaderEpochCache = state.epochs.clone();
            (end, trimmed.truncate_from_end(end.saturating_add(1)))
        };
        if stale {
            self.update_epochs(|cache| {
                cache.truncate_from_end(end.saturating_add(1));
            })?;
        }
        Ok(())
    }
}

/// The headers of replicated batches, checked to follow each other: each starts after the
/// one before (right after it, unless the leader's cleaner removed batches between), with an
/// epoch ≥ 0 and not below the one before. Positions are within `batches`.
fn replicated_metas(batches: &[u8], spans: &[Span]) -> Result<Vec<BatchMeta>, LogError> {
    let mut metas: Vec<BatchMeta> = Vec::with_capacity(spans.len());
    for (i, span) in spans.iter().enumerate() {
        let bytes = &batches[span.start..span.start + span.len];
        let meta = BatchMeta::from_header(span.start as u64, bytes).map_err(BatchError::Corrupt)?;
        if meta.leader_epoch < 0 {
            return Err(LogError::InvalidLeaderEpoch(meta.leader_epoch));
        }
        if let Some(previous) = metas.last() {
            if meta.base_offset < previous.next_offset() {
                return Err(LogError::NotContiguous {
                    batch: i,
                    expected: previous.next_offset(),
                    found: meta.base_offset,
                });
            }
            if meta.leader_epoch < previous.leader_epoch {
                return Err(LogError::StaleLeaderEpoch {
                    epoch: meta.leader_epoch,
                    latest: previous.leader_epoch,
                });
            }
        }
        metas.push(meta);
    }
    Ok(metas)
}

/// How many of `metas` (at least one) go into one write: as many as fit `segment_bytes`
/// bytes and the offsets one segment can index.
fn group_len(metas: &[BatchMeta], segment_bytes: u64) -> usize {
    let first = metas[0];
    let fits = |m: &BatchMeta| {
        m.end_position() - first.position <= segment_bytes
            && ((m.next_offset() - first.base_offset) as u64) <= SEGMENT_OFFSETS_MAX
    };
    metas.iter().take_while(|m| fits(m)).count().max(1)
}
