//! Reading a partition: whole batches from an offset below the high watermark (below the last
//! stable offset for a read-committed consumer, with the aborted transactions of what was
//! read; below the log end for a follower: `crate::replica::serve`), and the offset for a
//! timestamp.
//! Batches are located by walking headers from the nearest index entry; no per-record work
//! (a filtered read, `crate::filtered_fetch`, is the one that looks at every record).

use std::sync::Arc;

use bytes::Bytes;
use tinymq_protocol::{messages as m, ErrorCode};

use super::leader_hint;
use crate::fetch_frame::{read_records, Records};
use crate::partition::Partition;
use crate::state::BrokerState;

/// One partition's answer to a fetch and its records (`records` of the result stays empty).
pub(crate) type PartitionRead = (m::FetchPartitionResult, Records);

/// Which records a consumer may read (KIP-98's isolation level).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Isolation {
    /// Below the high watermark, undecided and aborted transactions included.
    ReadUncommitted,
    /// Below the last stable offset, with the aborted transactions of the range.
    ReadCommitted,
}

impl Isolation {
    /// The isolation a request's `isolation_level` names: 0 or 1, else `INVALID_REQUEST`.
    pub(crate) fn of(level: u32) -> Result<Isolation, m::Error> {
        match level {
            0 => Ok(Isolation::ReadUncommitted),
            1 => Ok(Isolation::ReadCommitted),
            other => Err(ErrorCode::INVALID_REQUEST.with_message(format!(
                "isolation_level {other}: 0 (read uncommitted) or 1 (read committed)"
            ))),
        }
    }

    /// The offset a consumer of this isolation reads below, from a result's head.
    pub(crate) fn limit(self, result: &m::FetchPartitionResult) -> i64 {
        match self {
            Isolation::ReadUncommitted => result.high_watermark,
            Isolation::ReadCommitted => result.last_stable_offset,
        }
    }
}

/// The fetch path of one partition once its leadership is checked: whole batches from
/// `offset` below the high watermark, within `bytes_max` (one batch at least).
pub(crate) fn read_partition(
    partition: &Partition,
    offset: i64,
    bytes_max: usize,
) -> Result<Bytes, m::Error> {
    read_partition_below(partition, offset, bytes_max, partition.high_watermark())
}

/// [`read_partition`] below `limit` (the high watermark, or a last stable offset below it).
pub(crate) fn read_partition_below(
    partition: &Partition,
    offset: i64,
    bytes_max: usize,
    limit: i64,
) -> Result<Bytes, m::Error> {
    // The fetch path's own read (`fetch_frame::read_records`) without its `sendfile` form,
    // which needs the partition shared.
    let limit = Some(limit.min(partition.high_watermark()));
    let read = partition
        .log
        .read_slice(offset, bytes_max, limit)
        .map_err(|e| e.error_code().with_message(e.to_string()))?;
    match read.slice {
        Some(slice) => crate::fetch_frame::copy_slice(partition, &slice, offset, bytes_max, limit),
        None => Ok(Bytes::new()),
    }
}

/// The list-offsets path of one partition: `-1` latest (the high watermark; the last stable
/// offset under read committed), `-2` earliest, otherwise the first record at or after the
/// timestamp, with its timestamp (`-1, -1` when none is visible). Other negative timestamps
/// are refused.
pub(crate) fn list_partition_offset(
    partition: &Partition,
    timestamp: i64,
    isolation: Isolation,
) -> Result<(i64, i64), m::Error> {
    let visible = || match isolation {
        Isolation::ReadUncommitted => partition.high_watermark(),
        Isolation::ReadCommitted => partition.last_stable_offset(),
    };
    // A lookup may decompress a batch: it takes one of the broker's decompression slots.
    let found = match timestamp {
        -1 => return Ok((visible(), -1)),
        -2 => return Ok((partition.log.log_start_offset(), -1)),
        MAX_TIMESTAMP => crate::partition::with_decompression_slot(|| {
            partition.log.offset_of_max_timestamp()
        }),
        // Kafka gives the other negative values meanings tinymq does not have (-4: the
        // earliest local offset of tiered storage, …): refused rather than searched for.
        ts if ts < 0 => {
            return Err(ErrorCode::INVALID_REQUEST.with_message(format!(
                "timestamp {ts}: the negative timestamps are -1 (latest), -2 (earliest) and -3 (the record with the largest timestamp)"
            )))
        }
        ts => crate::partition::with_decompression_slot(|| partition.log.offset_for_timestamp(ts)),
    };
    match found {
        // A record at or above what this isolation may see is not shown, as Kafka does.
        Ok(Some((offset, timestamp))) if offset < visible() => Ok((offset, timestamp)),
        Ok(_) => Ok((-1, -1)),
        Err(e) => Err(e.error_code().with_message(e.to_string())),
    }
}

/// ListOffsets' "the record with the largest timestamp" (Kafka's `-3`, KIP-734).
const MAX_TIMESTAMP: i64 = -3;

/// The head of a consumer's fetch result (high watermark, last stable offset, log start) and
/// the led partition it names; no partition (and the result finished with the error) when it
/// is not led here.
pub(crate) fn consumer_partition(
    state: &BrokerState,
    fp: &m::FetchPartition,
) -> (m::FetchPartitionResult, Option<Arc<Partition>>) {
    let mut result = m::FetchPartitionResult {
        topic: fp.topic.clone(),
        partition: fp.partition,
        error: None,
        high_watermark: -1,
        last_stable_offset: -1,
        log_start_offset: -1,
        records: Bytes::new(),
        current_leader: 0,
        ..Default::default()
    };
    let partition = match state.led_partition(&fp.topic, fp.partition) {
        Ok((partition, _)) => partition,
        Err(e) => {
            result.current_leader = leader_hint(state, &fp.topic, fp.partition, &e);
            result.error = Some(e);
            return (result, None);
        }
    };
    result.high_watermark = partition.high_watermark();
    result.last_stable_offset = partition.last_stable_offset_at(result.high_watermark);
    result.log_start_offset = partition.log.log_start_offset();
    (result, Some(partition))
}

/// One partition of a consumer's fetch: batches below the high watermark (the last stable
/// offset under read committed, with the aborted transactions of what was read), within
/// `budget` and the partition's own bound.
pub(crate) fn read_for_consumer(
    state: &BrokerState,
    fp: &m::FetchPartition,
    budget: usize,
    isolation: Isolation,
) -> PartitionRead {
    let empty = Records::Bytes(Bytes::new());
    let (mut result, partition) = match consumer_partition(state, fp) {
        (result, Some(partition)) => (result, partition),
        (refused, None) => return (refused, empty),
    };
    if budget == 0 {
        return (result, empty);
    }
    let limit = match fp.partition_bytes_max {
        0 => budget,
        asked => (asked as usize).min(budget),
    };
    let below = isolation.limit(&result);
    match read_records(&partition, fp.offset, limit, Some(below)) {
        Ok(records) => {
            if isolation == Isolation::ReadCommitted {
                result.aborted_transactions = aborted_in(&partition, fp.offset, &records);
            }
            (result, records)
        }
        Err(e) => {
            result.error = Some(e);
            (result, empty)
        }
    }
}

/// The aborted transactions a read-committed answer of `records` read from `offset` carries.
pub(crate) fn aborted_in(
    partition: &Partition,
    offset: i64,
    records: &Records,
) -> Vec<m::AbortedTransaction> {
    let Some(end) = records.end_offset() else {
        return Vec::new();
    };
    partition
        .aborted_in_range(offset, end)
        .into_iter()
        .map(|(producer_id, first_offset)| m::AbortedTransaction {
            producer_id,
            first_offset,
        })
        .collect()
}

/// A consumer's fetch answer, for metrics: records and bytes out, and each partition's error.
pub(crate) fn count_consumed(
    state: &BrokerState,
    stats: &tinymq_net::ConnectionStats,
    results: &[PartitionRead],
) {
    for (result, records) in results {
        if let Some(error) = &result.error {
            stats
                .requests
                .record_error(tinymq_protocol::OpCode::Fetch, error.code);
        }
        let bytes = records.len() as u64;
        if bytes > 0 {
            let partition = state.local_partition(&result.topic, result.partition);
            let traffic = partition.as_deref().map(|p| &p.traffic);
            crate::stats::consumed(traffic, bytes, records.record_count());
        }
    }
}
