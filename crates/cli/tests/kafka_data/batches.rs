//! Record batches for the data-path tests, built and read with tinymq-protocol's batch codec
//! (Kafka's RecordBatch v2).

use bytes::Bytes;
use tinymq_protocol::batch::{
    BatchBuilder, BatchIter, Compression, ProducerStamp, Record, RecordInput,
};

/// A record to put in a batch: key, value, headers, timestamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rec {
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    pub timestamp_ms: i64,
}

impl Rec {
    pub fn new(key: &str, value: &str, timestamp_ms: i64) -> Rec {
        Rec {
            key: Some(key.as_bytes().to_vec()),
            value: Some(value.as_bytes().to_vec()),
            headers: vec![("h".into(), Some(format!("of {key}").into_bytes()))],
            timestamp_ms,
        }
    }

    pub fn of(record: &Record) -> Rec {
        Rec {
            key: record.key.as_ref().map(|b| b.to_vec()),
            value: record.value.as_ref().map(|b| b.to_vec()),
            headers: record
                .headers
                .iter()
                .map(|h| (h.key.clone(), h.value.as_ref().map(|b| b.to_vec())))
                .collect(),
            timestamp_ms: record.timestamp_ms,
        }
    }
}

/// One RecordBatch v2 holding `records`.
pub fn batch(records: &[Rec], compression: Compression, producer: ProducerStamp) -> Bytes {
    build(records, BatchBuilder::new(compression, producer))
}

/// A transactional producer's batch (attribute bit 4) of `records`, uncompressed.
pub fn transactional_batch(records: &[Rec], producer: ProducerStamp) -> Bytes {
    let builder = BatchBuilder::new(Compression::None, producer)
        .with_attributes(tinymq_protocol::batch::ATTR_TRANSACTIONAL);
    build(records, builder)
}

fn build(records: &[Rec], mut builder: BatchBuilder) -> Bytes {
    for r in records {
        let headers: Vec<(&str, Option<&[u8]>)> = r
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_deref()))
            .collect();
        builder.push(&RecordInput {
            timestamp_ms: r.timestamp_ms,
            key: r.key.as_deref(),
            value: r.value.as_deref(),
            headers: &headers,
        });
    }
    builder.build().unwrap()
}

/// Every record of the whole batches in `records`, with its offset, and the batches' base
/// offsets.
pub fn read_records(records: &Bytes) -> (Vec<(i64, Rec)>, Vec<i64>) {
    let mut out = Vec::new();
    let mut bases = Vec::new();
    for batch in BatchIter::new(records.clone()) {
        let batch = batch.unwrap();
        bases.push(batch.base_offset());
        for record in batch.records(64 << 20).unwrap() {
            out.push((record.offset, Rec::of(&record)));
        }
    }
    (out, bases)
}
