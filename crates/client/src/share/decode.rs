//! Turning one partition's `ShareFetch` answer into records for the application (pure, no
//! I/O). The answer's batches are whole batches and may hold records acquired by other
//! members; only offsets inside this member's `acquired` ranges are delivered, each with its
//! range's delivery count. Every batch's CRC is checked by the batch iterator first.
//!
//! An acquired offset that no returned record carries is sorted out so it never stays locked
//! for nothing: inside a returned batch's offset range (a record removed by compaction, or a
//! control record) there is nothing to deliver, so it is accepted; beyond every returned batch
//! (an answer cut short) it is released, to be fetched again.

use bytes::Bytes;
use tinymq_protocol::batch::{BatchIter, BATCH_DECOMPRESSED_BYTES_MAX_DEFAULT};
use tinymq_protocol::messages as m;

use super::ShareRecord;
use crate::consumer::ConsumerRecord;
use crate::error::ClientError;

/// Most offsets one partition's answer may say were acquired: the protocol's cap on
/// `ShareFetchRequest.max_records` (10,000). Checked before anything is allocated per offset.
pub const ACQUIRED_RECORDS_PER_PARTITION_MAX: u64 = 10_000;

/// One partition's answer, sorted out.
#[derive(Debug, Default)]
pub(crate) struct Decoded {
    /// Acquired records, in offset order.
    pub records: Vec<ShareRecord>,
    /// Acquired offsets with nothing to deliver: to accept.
    pub nothing_to_deliver: Vec<i64>,
    /// Acquired offsets the answer did not reach: to release.
    pub not_returned: Vec<i64>,
}

/// The acquired ranges, checked (first ≤ last, at most
/// [`ACQUIRED_RECORDS_PER_PARTITION_MAX`] offsets in all) and sorted, overlaps refused.
fn checked_ranges(acquired: &[m::AcquiredRange]) -> Result<Vec<m::AcquiredRange>, ClientError> {
    let mut total: u64 = 0;
    for r in acquired {
        if r.first_offset < 0 || r.last_offset < r.first_offset {
            return Err(ClientError::Protocol(format!(
                "acquired range {}..={} is not a range of offsets",
                r.first_offset, r.last_offset
            )));
        }
        let len = (r.last_offset - r.first_offset) as u64 + 1;
        total = total.saturating_add(len);
        if total > ACQUIRED_RECORDS_PER_PARTITION_MAX {
            return Err(ClientError::Protocol(format!(
                "a partition's answer acquired more than {ACQUIRED_RECORDS_PER_PARTITION_MAX} records"
            )));
        }
    }
    let mut sorted = acquired.to_vec();
    sorted.sort_by_key(|r| r.first_offset);
    if sorted
        .windows(2)
        .any(|pair| pair[1].first_offset <= pair[0].last_offset)
    {
        return Err(ClientError::Protocol("acquired ranges overlap".into()));
    }
    Ok(sorted)
}

/// The delivery count of `offset` if it is inside one of `ranges` (sorted).
fn delivery_count(ranges: &[m::AcquiredRange], offset: i64) -> Option<u32> {
    let i = ranges.partition_point(|r| r.first_offset <= offset);
    let range = ranges.get(i.checked_sub(1)?)?;
    (offset <= range.last_offset).then_some(range.delivery_count)
}

/// Sorts out one partition's answer: `records` (whole batches) and the `acquired` ranges.
pub(crate) fn decode_acquired(
    topic: &str,
    partition: u32,
    records: Bytes,
    acquired: &[m::AcquiredRange],
) -> Result<Decoded, ClientError> {
    let ranges = checked_ranges(acquired)?;
    let mut out = Decoded::default();
    if ranges.is_empty() {
        return Ok(out);
    }
    let mut delivered = std::collections::BTreeSet::new();
    // Offset spans of the returned batches, to tell "nothing there" from "not returned".
    let mut spans: Vec<(i64, i64)> = Vec::new();
    for batch in BatchIter::new(records) {
        let batch = batch?;
        spans.push((batch.base_offset(), batch.last_offset()));
        if batch.is_control() {
            continue;
        }
        // A filtered answer's batches have offset gaps (records dropped by the filter).
        for record in tinymq_filter::decode_sparse(&batch, BATCH_DECOMPRESSED_BYTES_MAX_DEFAULT)? {
            let Some(count) = delivery_count(&ranges, record.offset) else {
                continue; // held by another member, or not acquired at all
            };
            if !delivered.insert(record.offset) {
                continue; // a batch sent twice delivers its records once
            }
            out.records.push(ShareRecord {
                record: ConsumerRecord {
                    topic: topic.to_string(),
                    partition,
                    offset: record.offset,
                    timestamp_ms: record.timestamp_ms,
                    key: record.key,
                    value: record.value,
                    headers: record
                        .headers
                        .into_iter()
                        .map(|h| (h.key, h.value))
                        .collect(),
                },
                delivery_count: count,
            });
        }
    }
    out.records.sort_by_key(|r| r.record.offset);
    for range in &ranges {
        for offset in range.first_offset..=range.last_offset {
            if delivered.contains(&offset) {
                continue;
            }
            if spans
                .iter()
                .any(|(first, last)| (*first..=*last).contains(&offset))
            {
                out.nothing_to_deliver.push(offset);
            } else {
                out.not_returned.push(offset);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use tinymq_protocol::batch::{compute_crc, RecordInput, ATTR_CONTROL};
    use tinymq_protocol::batch::{stamp_base_offset, BatchBuilder, Compression, ProducerStamp};

    /// A batch of `count` records at `base`, values "v<offset>".
    fn batch(base: i64, count: i32) -> Bytes {
        let mut builder = BatchBuilder::new(Compression::None, ProducerStamp::NONE);
        for i in 0..count {
            let value = format!("v{}", base + i64::from(i));
            builder.push(&RecordInput {
                timestamp_ms: 1,
                key: None,
                value: Some(value.as_bytes()),
                headers: &[],
            });
        }
        let mut bytes = BytesMut::from(&builder.build().unwrap()[..]);
        stamp_base_offset(&mut bytes, base);
        let crc = compute_crc(&bytes);
        bytes[17..21].copy_from_slice(&crc.to_be_bytes());
        bytes.freeze()
    }

    fn range(first: i64, last: i64, delivery_count: u32) -> m::AcquiredRange {
        m::AcquiredRange {
            first_offset: first,
            last_offset: last,
            delivery_count,
        }
    }

    #[test]
    fn only_acquired_offsets_are_delivered_with_their_delivery_counts() {
        let mut both = BytesMut::new();
        both.extend_from_slice(&batch(10, 5)); // 10..=14
        both.extend_from_slice(&batch(15, 5)); // 15..=19
        let decoded =
            decode_acquired("t", 2, both.freeze(), &[range(17, 18, 1), range(11, 12, 3)]).unwrap();
        let got: Vec<(i64, u32)> = decoded
            .records
            .iter()
            .map(|r| (r.record.offset, r.delivery_count))
            .collect();
        assert_eq!(got, vec![(11, 3), (12, 3), (17, 1), (18, 1)]);
        assert_eq!(
            decoded.records[0].record.value.as_deref(),
            Some(&b"v11"[..])
        );
        assert_eq!(decoded.records[0].record.partition, 2);
        assert!(decoded.nothing_to_deliver.is_empty());
        assert!(decoded.not_returned.is_empty());
    }

    #[test]
    fn acquired_offsets_without_a_record_are_accepted_inside_a_batch_and_released_beyond() {
        // Offsets 0..=7 were acquired; the answer holds records 0..=2 and stops there.
        let decoded = decode_acquired("t", 0, batch(0, 3), &[range(0, 7, 2)]).unwrap();
        assert_eq!(decoded.records.len(), 3);
        assert_eq!(decoded.records[2].delivery_count, 2);
        assert!(decoded.nothing_to_deliver.is_empty());
        assert_eq!(decoded.not_returned, vec![3, 4, 5, 6, 7]);
        // With a control batch at 3..=4 after them: nothing there to deliver.
        let mut control = BytesMut::from(&batch(3, 2)[..]);
        control[21..23].copy_from_slice(&ATTR_CONTROL.to_be_bytes());
        let crc = compute_crc(&control);
        control[17..21].copy_from_slice(&crc.to_be_bytes());
        let mut both = BytesMut::from(&batch(0, 3)[..]);
        both.extend_from_slice(&control);
        let decoded = decode_acquired("t", 0, both.freeze(), &[range(0, 7, 2)]).unwrap();
        assert_eq!(decoded.records.len(), 3);
        assert_eq!(decoded.nothing_to_deliver, vec![3, 4]);
        assert_eq!(decoded.not_returned, vec![5, 6, 7]);
    }

    #[test]
    fn absurd_ranges_are_refused_before_anything_is_allocated() {
        for bad in [
            vec![range(0, i64::MAX, 1)],
            vec![range(5, 4, 1)],
            vec![range(-3, 1, 1)],
            vec![range(0, 5, 1), range(5, 6, 1)],
        ] {
            let e = decode_acquired("t", 0, Bytes::new(), &bad).unwrap_err();
            assert!(matches!(e, ClientError::Protocol(_)), "{e}");
        }
        let corrupt = Bytes::from_static(&[0u8; 40]);
        assert!(decode_acquired("t", 0, corrupt, &[range(0, 1, 1)]).is_err());
    }
}
