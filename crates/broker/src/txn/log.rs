//! The records of `__transaction_state`: one batch per state change of a transactional id,
//! with one record whose key is `{"x":transactional_id}` and whose value is the id's
//! [`TxnMetadata`] as JSON (no value: the id expired and is forgotten). A coordinator loads a
//! partition by replaying it whole, the last record per id winning ([`read_log`]).

use std::collections::HashMap;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tinymq_log::{LogError, PartitionLog};
use tinymq_protocol::batch::RecordInput;
use tinymq_protocol::batch::{BatchBuilder, BatchError, Compression, ProducerStamp};

use super::state::TxnMetadata;

/// Most decompressed bytes of one batch when loading a partition (a state record is small;
/// the partition's batches are at most 8 MiB).
const RECORD_BYTES_MAX: usize = 8 << 20;

#[derive(Serialize, Deserialize)]
struct Key {
    x: String,
}

/// The batch recording `metadata` (None: forget the id) for `transactional_id`.
pub fn encode_batch(
    transactional_id: &str,
    metadata: Option<&TxnMetadata>,
    now_ms: i64,
) -> Result<Bytes, BatchError> {
    let key = serde_json::to_vec(&Key {
        x: transactional_id.into(),
    })
    .map_err(|e| BatchError::Corrupt(e.to_string()))?;
    let value = metadata
        .map(serde_json::to_vec)
        .transpose()
        .map_err(|e| BatchError::Corrupt(e.to_string()))?;
    let mut builder = BatchBuilder::new(Compression::None, ProducerStamp::NONE);
    builder.push(&RecordInput {
        timestamp_ms: now_ms,
        key: Some(&key),
        value: value.as_deref(),
        headers: &[],
    });
    builder.build()
}

/// Replays one partition of `__transaction_state` into the state of its ids. Blocks.
pub fn read_log(log: &PartitionLog) -> Result<HashMap<String, TxnMetadata>, LogError> {
    let mut ids = HashMap::new();
    crate::group::offsets::for_each_batch(log, "transaction state", |batch| {
        for record in batch.records(RECORD_BYTES_MAX)? {
            replay(&mut ids, record.key, record.value);
        }
        Ok(())
    })?;
    Ok(ids)
}

fn replay(ids: &mut HashMap<String, TxnMetadata>, key: Option<Bytes>, value: Option<Bytes>) {
    let Some(Ok(key)) = key.map(|k| serde_json::from_slice::<Key>(&k)) else {
        tracing::warn!("skipping an unreadable transaction state record");
        return;
    };
    match value.map(|v| serde_json::from_slice::<TxnMetadata>(&v)) {
        Some(Ok(m)) => {
            ids.insert(key.x, m);
        }
        None => {
            ids.remove(&key.x);
        }
        Some(Err(e)) => {
            tracing::warn!(transactional_id = %key.x, error = %e, "skipping an unreadable transaction state value")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::state::TxnState;
    use std::sync::Arc;
    use tinymq_log::{LogConfig, SystemClock};
    use tinymq_storage::OsStorage;

    fn metadata(epoch: i16, state: TxnState) -> TxnMetadata {
        TxnMetadata {
            producer_id: 3,
            producer_epoch: epoch,
            timeout_ms: 1000,
            state,
            partitions: [("t".to_string(), 1)].into(),
            start_ms: 5,
            update_ms: 6,
        }
    }

    #[test]
    fn the_last_record_per_id_wins_and_a_tombstone_forgets() {
        let dir = tempfile::tempdir().unwrap();
        let (log, _) = PartitionLog::open_with(
            dir.path(),
            LogConfig::default(),
            Arc::new(OsStorage),
            Arc::new(SystemClock),
        )
        .unwrap();
        let writes = [
            ("a", Some(metadata(0, TxnState::Empty))),
            ("b", Some(metadata(0, TxnState::Ongoing))),
            ("a", Some(metadata(1, TxnState::PrepareCommit))),
            ("b", None),
        ];
        for (id, m) in &writes {
            let batch = encode_batch(id, m.as_ref(), 7).unwrap();
            let batch = tinymq_protocol::batch::RecordBatch::parse(batch).unwrap();
            log.write_batch(&batch, 0).unwrap();
        }
        let ids = read_log(&log).unwrap();
        assert_eq!(ids.len(), 1);
        assert_eq!(ids["a"], metadata(1, TxnState::PrepareCommit));
    }

    /// `__transaction_state` is compacted: a pass over many state changes of a few ids keeps
    /// what a replay needs (the same states load before and after, from far fewer records).
    #[test]
    fn a_compacted_partition_replays_to_the_same_states() {
        let dir = tempfile::tempdir().unwrap();
        let settings = crate::group::offsets::compacted_topic_settings(4, 1);
        let mut config = settings.log_config();
        assert!(config.cleanup.compacts());
        config.segment_bytes = 4096;
        config.batch_bytes_max = 1024;
        let (log, _) = PartitionLog::open_with(
            dir.path(),
            config,
            Arc::new(OsStorage),
            Arc::new(SystemClock),
        )
        .unwrap();
        let states = [TxnState::Ongoing, TxnState::PrepareCommit, TxnState::Empty];
        for i in 0..300usize {
            for id in ["a", "b", "c"] {
                let m = metadata((i / 3) as i16, states[i % 3]);
                let batch = encode_batch(id, Some(&m), 7).unwrap();
                let batch = tinymq_protocol::batch::RecordBatch::parse(batch).unwrap();
                log.write_batch(&batch, 0).unwrap();
            }
        }
        let forget = encode_batch("c", None, 7).unwrap();
        log.write_batch(
            &tinymq_protocol::batch::RecordBatch::parse(forget).unwrap(),
            0,
        )
        .unwrap();
        let before = read_log(&log).unwrap();
        let end = log.log_end_offset();
        let limits = tinymq_log::CleanLimits::default();
        let report = log.clean(7, end, &limits, &mut |_| {}).unwrap();
        assert!(report.records_removed > 800, "{report:?}");
        let after = read_log(&log).unwrap();
        assert_eq!(after, before);
        assert_eq!(after.len(), 2, "c stays forgotten");
        assert_eq!(after["a"], metadata(99, TxnState::Empty));
    }
}
