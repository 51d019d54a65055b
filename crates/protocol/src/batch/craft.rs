//! Batches with every header field chosen by the caller, lies included, and a correct CRC: what
//! a hostile or buggy producer could send. For tests and fuzzing of the checks that refuse
//! them; a real producer uses [`super::BatchBuilder`].

use bytes::{BufMut, Bytes, BytesMut};

use super::{compute_crc, field, Compression, RecordInput, BATCH_HEADER_BYTES, BATCH_MAGIC};

/// One record as it is encoded, with its deltas given rather than computed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CraftedRecord {
    pub offset_delta: i32,
    pub timestamp_delta: i64,
    pub value: Vec<u8>,
}

/// The header fields of a crafted batch. [`CraftedBatch::honest`] fills them as a real
/// producer would for the records given; change any field afterwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CraftedBatch {
    pub magic: i8,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub record_count: i32,
    pub records: Vec<CraftedRecord>,
}

impl CraftedBatch {
    /// A non-idempotent, uncompressed batch of `values` at timestamp `timestamp_ms`, with a
    /// header that tells the truth.
    pub fn honest(timestamp_ms: i64, values: &[&[u8]]) -> CraftedBatch {
        let count = values.len() as i32;
        CraftedBatch {
            magic: BATCH_MAGIC,
            attributes: 0,
            last_offset_delta: count - 1,
            base_timestamp: timestamp_ms,
            max_timestamp: timestamp_ms,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            record_count: count,
            records: values
                .iter()
                .enumerate()
                .map(|(i, v)| CraftedRecord {
                    offset_delta: i as i32,
                    timestamp_delta: 0,
                    value: v.to_vec(),
                })
                .collect(),
        }
    }

    /// Encodes the batch (records compressed with the codec named by bits 0-2 of
    /// `attributes` when it is a known one) and computes its CRC.
    pub fn encode(&self) -> Bytes {
        let mut records = BytesMut::new();
        for r in &self.records {
            let input = RecordInput {
                timestamp_ms: 0,
                key: None,
                value: Some(&r.value),
                headers: &[],
            };
            super::record::encode_record(&mut records, &input, r.offset_delta, r.timestamp_delta);
        }
        let payload = match Compression::from_attributes(self.attributes) {
            Ok(Compression::None) | Err(_) => records.to_vec(),
            Ok(codec) => codec
                .compress(&records)
                .unwrap_or_else(|_| records.to_vec()),
        };
        let mut out = BytesMut::with_capacity(BATCH_HEADER_BYTES + payload.len());
        out.put_i64(0);
        out.put_i32((BATCH_HEADER_BYTES - 12 + payload.len()) as i32);
        out.put_i32(-1);
        out.put_i8(self.magic);
        out.put_u32(0);
        out.put_i16(self.attributes);
        out.put_i32(self.last_offset_delta);
        out.put_i64(self.base_timestamp);
        out.put_i64(self.max_timestamp);
        out.put_i64(self.producer_id);
        out.put_i16(self.producer_epoch);
        out.put_i32(self.base_sequence);
        out.put_i32(self.record_count);
        out.put_slice(&payload);
        let crc = compute_crc(&out);
        out[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
        out.freeze()
    }
}
