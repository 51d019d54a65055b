//! A batch in two parts: the 61-byte header, built last, and the records section, encoded once
//! as records arrive. A producer appends each record to a buffer with [`encode_record`] as it
//! is sent, and writes the header (stamped with its producer id and sequence, which may change
//! on a retry) beside the untouched records when it puts the batch on the wire, so the records
//! are never copied into a second buffer.
//!
//! [`encode_record`]: super::encode_record

use bytes::BufMut;

use super::{
    field, BatchError, Compression, ProducerStamp, BATCH_HEADER_BYTES, BATCH_LENGTH_PREFIX_BYTES,
    BATCH_MAGIC,
};

/// What the header says about the records that follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeaderFields {
    pub compression: Compression,
    pub record_count: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer: ProducerStamp,
    /// Sets the transactional attribute bit (a transactional producer's data batch).
    pub transactional: bool,
}

/// The header of a batch whose records section (compressed as `fields.compression` says) is
/// `records`, CRC included: `header ++ records` is the batch [`super::BatchBuilder`] would
/// build from the same records. Fails only for a batch over 2 GiB.
pub fn encode_batch_header(
    fields: &BatchHeaderFields,
    records: &[u8],
) -> Result<[u8; BATCH_HEADER_BYTES], BatchError> {
    let total = BATCH_HEADER_BYTES
        .checked_add(records.len())
        .ok_or_else(|| BatchError::Compression("batch larger than 2 GiB".into()))?;
    let batch_length = i32::try_from(total - BATCH_LENGTH_PREFIX_BYTES)
        .map_err(|_| BatchError::Compression("batch larger than 2 GiB".into()))?;
    let mut header = [0u8; BATCH_HEADER_BYTES];
    let mut out = &mut header[..];
    out.put_i64(0);
    out.put_i32(batch_length);
    out.put_i32(-1); // partition leader epoch: stamped by the leader
    out.put_i8(BATCH_MAGIC);
    out.put_u32(0); // CRC: filled in below
    let transactional = if fields.transactional {
        super::ATTR_TRANSACTIONAL
    } else {
        0
    };
    out.put_i16(fields.compression.attribute_bits() | transactional);
    out.put_i32(fields.record_count - 1);
    out.put_i64(fields.base_timestamp);
    out.put_i64(fields.max_timestamp);
    out.put_i64(fields.producer.producer_id);
    out.put_i16(fields.producer.producer_epoch);
    out.put_i32(fields.producer.base_sequence);
    out.put_i32(fields.record_count);
    let crc = crc32c::crc32c_append(crc32c::crc32c(&header[field::ATTRIBUTES..]), records);
    header[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(header)
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;

    use super::super::{encode_record, BatchBuilder, RecordBatch, RecordInput};
    use super::*;

    #[test]
    fn header_and_records_are_the_batch_the_builder_builds() {
        let stamp = ProducerStamp {
            producer_id: 7,
            producer_epoch: 2,
            base_sequence: 40,
        };
        let inputs = [
            (1_000, Some(&b"k"[..]), &b"first"[..]),
            (1_003, None, &b"second"[..]),
        ];
        let mut builder = BatchBuilder::new(Compression::None, stamp);
        let mut records = BytesMut::new();
        for (i, (ts, key, value)) in inputs.iter().enumerate() {
            let input = RecordInput {
                timestamp_ms: *ts,
                key: *key,
                value: Some(value),
                headers: &[("h", Some(&b"v"[..]))],
            };
            builder.push(&input);
            encode_record(&mut records, &input, i as i32, ts - 1_000);
        }
        let fields = BatchHeaderFields {
            compression: Compression::None,
            record_count: 2,
            base_timestamp: 1_000,
            max_timestamp: 1_003,
            producer: stamp,
            transactional: false,
        };
        let header = encode_batch_header(&fields, &records).unwrap();
        let mut joined = header.to_vec();
        joined.extend_from_slice(&records);
        let built = builder.build().unwrap();
        assert_eq!(joined, built.to_vec());
        let parsed = RecordBatch::parse(built).unwrap();
        assert_eq!(parsed.base_sequence(), 40);
    }
}
