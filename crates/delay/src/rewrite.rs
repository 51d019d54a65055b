//! The batch a due entry becomes in the partition: its records as produced, each with the
//! header [`DELIVER_AT_HEADER`] (the deliver-at time, ms since the epoch, decimal) so consumers
//! can measure lateness, timestamped at delivery (so time-based retention counts from when
//! the records became visible), under the scheduler's own producer identity (so a replay
//! after a crash is recognised by the partition's idempotence), in the producer's codec.

use bytes::Bytes;
use tinymq_protocol::batch::{BatchBuilder, BatchError, ProducerStamp, RecordBatch, RecordInput};

use crate::entry::SchedulerStamp;

/// The header a delivered record carries (issue 18's contract).
pub const DELIVER_AT_HEADER: &str = "tinymq.deliver-at";

/// Re-encodes the stored batch `stored` for delivery at `now_ms`. A `tinymq.deliver-at` header
/// the producer set itself is replaced, so each record carries exactly one.
pub fn deliverable_batch(
    stored: Bytes,
    stamp: SchedulerStamp,
    deliver_at_ms: i64,
    now_ms: i64,
    decompressed_bytes_max: usize,
) -> Result<Bytes, BatchError> {
    let batch = RecordBatch::parse(stored)?;
    let records = batch.records(decompressed_bytes_max)?;
    if records.is_empty() {
        return Err(BatchError::InvalidHeader(
            "a delayed batch holds no record".into(),
        ));
    }
    let producer = ProducerStamp {
        producer_id: stamp.producer_id,
        producer_epoch: stamp.producer_epoch,
        base_sequence: stamp.sequence,
    };
    let mut builder = BatchBuilder::new(batch.compression(), producer);
    let deliver_at = deliver_at_ms.to_string();
    for record in &records {
        let mut headers: Vec<(&str, Option<&[u8]>)> = record
            .headers
            .iter()
            .filter(|h| h.key != DELIVER_AT_HEADER)
            .map(|h| (h.key.as_str(), h.value.as_deref()))
            .collect();
        headers.push((DELIVER_AT_HEADER, Some(deliver_at.as_bytes())));
        builder.push(&RecordInput {
            timestamp_ms: now_ms,
            key: record.key.as_deref(),
            value: record.value.as_deref(),
            headers: &headers,
        });
    }
    builder.build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tinymq_protocol::batch::Compression;

    #[test]
    fn records_keep_key_value_and_headers_and_gain_one_deliver_at_header() {
        let mut b = BatchBuilder::new(Compression::None, ProducerStamp::NONE);
        for (key, value) in [("k1", "v1"), ("k2", "v2")] {
            b.push(&RecordInput {
                timestamp_ms: 10,
                key: Some(key.as_bytes()),
                value: Some(value.as_bytes()),
                headers: &[("tag", Some(b"red")), (DELIVER_AT_HEADER, Some(b"1"))],
            });
        }
        let stamp = SchedulerStamp {
            producer_id: 4,
            producer_epoch: 0,
            sequence: 9,
        };
        let out = deliverable_batch(b.build().unwrap(), stamp, 777, 1000, 1 << 20).unwrap();
        let batch = RecordBatch::parse(out).unwrap();
        assert_eq!((batch.producer_id(), batch.base_sequence()), (4, 9));
        assert_eq!(batch.last_sequence(), 10);
        let records = batch.records(1 << 20).unwrap();
        assert_eq!(records.len(), 2);
        for (r, key) in records.iter().zip(["k1", "k2"]) {
            assert_eq!(r.key.as_deref(), Some(key.as_bytes()));
            assert_eq!(r.timestamp_ms, 1000);
            let headers: Vec<(&str, Option<&[u8]>)> = r
                .headers
                .iter()
                .map(|h| (h.key.as_str(), h.value.as_deref()))
                .collect();
            assert_eq!(
                headers,
                vec![
                    ("tag", Some(&b"red"[..])),
                    (DELIVER_AT_HEADER, Some(&b"777"[..]))
                ]
            );
        }
    }

    #[test]
    fn a_damaged_batch_is_refused() {
        let stamp = SchedulerStamp {
            producer_id: 4,
            producer_epoch: 0,
            sequence: 0,
        };
        let junk = Bytes::from_static(&[0u8; 70]);
        assert!(deliverable_batch(junk, stamp, 1, 1, 1 << 20).is_err());
    }
}
