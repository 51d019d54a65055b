//! The records of `__half_messages`: one batch per event of a half message, with one record
//! whose key is the producer group and whose value is a protobuf [`m::HalfLogRecord`]:
//! `stored` (the half, at the offset that is its id), `resolved` (its outcome decided), and,
//! for a commit, `delivered` (its records appended to their partition). A coordinator loads a
//! partition by replaying it whole ([`read_log`]): what is stored and not resolved is pending,
//! what is resolved as a commit and not delivered is committing.

use bytes::Bytes;
use prost::Message;
use tinymq_log::{LogError, PartitionLog};
use tinymq_protocol::batch::{BatchBuilder, BatchError, Compression, ProducerStamp, RecordInput};
use tinymq_protocol::messages as m;

use super::store::{Half, HalfPhase, Outcome, PartitionHalves, Resolved};

/// Most decompressed bytes of one batch when loading a partition.
const RECORD_BYTES_MAX: usize = 16 << 20;

/// The batch recording `entry` for `group`.
pub fn encode_batch(
    group: &str,
    entry: m::half_log_record::Entry,
    now_ms: i64,
) -> Result<Bytes, BatchError> {
    let value = m::HalfLogRecord { entry: Some(entry) }.encode_to_vec();
    let mut builder = BatchBuilder::new(Compression::None, ProducerStamp::NONE);
    builder.push(&RecordInput {
        timestamp_ms: now_ms,
        key: Some(group.as_bytes()),
        value: Some(&value),
        headers: &[],
    });
    builder.build()
}

/// Replays one partition of `__half_messages` into the halves it holds. Blocks.
pub fn read_log(log: &PartitionLog) -> Result<PartitionHalves, LogError> {
    let mut loaded = PartitionHalves::default();
    crate::group::offsets::for_each_batch(log, "half messages", |batch| {
        for record in batch.records(RECORD_BYTES_MAX)? {
            replay(&mut loaded, record.offset, record.key, record.value);
        }
        Ok(())
    })?;
    Ok(loaded)
}

/// Applies the record at `offset` to `loaded`. Unreadable records are skipped (logged): a
/// record of a newer version this one does not know changes nothing it tracks.
pub fn replay(loaded: &mut PartitionHalves, offset: i64, key: Option<Bytes>, value: Option<Bytes>) {
    let group = key.and_then(|k| String::from_utf8(k.to_vec()).ok());
    let entry = value.and_then(|v| m::HalfLogRecord::decode(v).ok());
    let (Some(group), Some(m::HalfLogRecord { entry: Some(entry) })) = (group, entry) else {
        tracing::warn!(offset, "skipping an unreadable half-message record");
        return;
    };
    use m::half_log_record::Entry;
    match entry {
        Entry::Stored(s) => loaded.insert(offset, Half::stored(group, s)),
        // A rollback after a commit was decided: its append was refused (nothing written).
        Entry::Resolved(r) if !r.commit => {
            if let Some(half) = loaded.remove(r.half_id) {
                let outcome = Outcome::RolledBack { reason: r.reason };
                loaded.remember(r.half_id, resolved(half, outcome));
            }
        }
        Entry::Resolved(r) => {
            if let Some(half) = loaded.get_mut(r.half_id) {
                half.phase = HalfPhase::Committing {
                    scan_from: r.scan_from,
                    topic_id: r.topic_id,
                    nonce: r.nonce,
                };
            }
        }
        Entry::Delivered(d) => {
            if let Some(half) = loaded.remove(d.half_id) {
                let outcome = Outcome::Committed {
                    base_offset: d.base_offset,
                };
                loaded.remember(d.half_id, resolved(half, outcome));
            }
        }
    }
}

fn resolved(half: Half, outcome: Outcome) -> Resolved {
    Resolved {
        group: half.group,
        topic: half.topic,
        outcome,
    }
}
