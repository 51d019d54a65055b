//! The record batch of a half: checked when it is stored, decoded when it is appended.

use tinymq_protocol::batch::{BatchError, Compression, Record};
use tinymq_protocol::{messages as m, ErrorCode};

/// Most records of one half (`half_records_max`).
pub const HALF_RECORDS_MAX: i32 = 1_000;
/// Most decompressed bytes of one half's records (`half_decompressed_bytes_max`).
pub const HALF_DECOMPRESSED_BYTES_MAX: usize = 16 << 20;
/// The records of a half's batch, checked as a Produce checks it (CRC, the header against the
/// records, producer fields, not transactional), decompressing at most [`HALF_DECOMPRESSED_BYTES_MAX`] and one compressed
/// batch at a time per the broker's decompression slots. Blocks.
pub fn decode_half(records: bytes::Bytes) -> Result<Vec<Record>, m::Error> {
    // The codes a Produce of the same batch would get.
    let wire = |e: crate::partition::PartitionError| e.code.with_message(e.message);
    let invalid = |e: BatchError| wire(e.into());
    let batch = crate::partition::one_batch(records).map_err(wire)?;
    batch.check_producer_fields().map_err(invalid)?;
    if batch.is_transactional() {
        return Err(ErrorCode::INVALID_RECORD
            .with_message("a half is not part of a Kafka transaction: clear attribute bit 4"));
    }
    let count = batch.record_count();
    if !(1..=HALF_RECORDS_MAX).contains(&count) {
        return Err(ErrorCode::INVALID_RECORD.with_message(format!(
            "a half holds 1 to {HALF_RECORDS_MAX} records, not {count}"
        )));
    }
    let decode = || {
        batch.verify(HALF_DECOMPRESSED_BYTES_MAX).map_err(invalid)?;
        batch.records(HALF_DECOMPRESSED_BYTES_MAX).map_err(invalid)
    };
    if batch.compression() == Compression::None {
        decode()
    } else {
        crate::partition::with_decompression_slot(decode)
    }
}

/// The longest value of the `tinymq.half-id` header: three 20-digit numbers, a 20-digit
/// nonce and their dots.
pub const HALF_ID_VALUE_BYTES_MAX: usize = 4 * 20 + 3;

/// Bytes of the batch a commit of `records` appends: uncompressed (the half producer's
/// codec), each record with the longest `tinymq.half-id` header.
pub fn committed_batch_bytes(records: &[Record]) -> usize {
    let marker = [b'0'; HALF_ID_VALUE_BYTES_MAX];
    let mut builder = tinymq_protocol::batch::BatchBuilder::new(
        Compression::None,
        tinymq_protocol::batch::ProducerStamp::NONE,
    );
    for r in records {
        let mut headers: Vec<(&str, Option<&[u8]>)> = r
            .headers
            .iter()
            .filter(|h| h.key != super::HALF_ID_HEADER)
            .map(|h| (h.key.as_str(), h.value.as_deref()))
            .collect();
        headers.push((super::HALF_ID_HEADER, Some(&marker)));
        builder.push(&tinymq_protocol::batch::RecordInput {
            timestamp_ms: r.timestamp_ms,
            key: r.key.as_deref(),
            value: r.value.as_deref(),
            headers: &headers,
        });
    }
    builder.build().map_or(usize::MAX, |b| b.len())
}
