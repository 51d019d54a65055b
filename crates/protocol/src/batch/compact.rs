//! What log compaction does to one batch: list its records' keys, and rewrite it keeping only
//! some records. A rewritten batch keeps everything the header says about the batch as a
//! whole — base offset, last offset delta (so the batch still ends where it ended), base
//! timestamp, producer fields, leader epoch, attributes — and the kept records' bytes
//! unchanged (their offset and timestamp deltas are relative to the unchanged base). Only the
//! record count, the max timestamp, the length and the CRC change; a batch that keeps no
//! record is written with no records and no compression, as Kafka's cleaner writes the
//! batches it keeps for their offsets.

use super::{
    field, record, BatchError, Compression, RecordBatch, ATTR_COMPRESSION_MASK, BATCH_HEADER_BYTES,
    BATCH_LENGTH_PREFIX_BYTES,
};

/// One record as compaction sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyedRecord<'a> {
    pub offset: i64,
    pub timestamp_ms: i64,
    /// `None` for a record without a key (never superseded).
    pub key: Option<&'a [u8]>,
    /// A record with a key and no value: the key's deletion.
    pub tombstone: bool,
}

/// Calls `f` for every record of `batch`, in order, decompressing at most
/// `decompressed_bytes_max` bytes.
pub fn for_each_record(
    batch: &RecordBatch,
    decompressed_bytes_max: usize,
    mut f: impl FnMut(&KeyedRecord<'_>),
) -> Result<(), BatchError> {
    walk(batch, decompressed_bytes_max, |r, _| f(r))
}

/// The outcome of [`filter_records`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filtered {
    /// Every record was kept: the batch stays as it is.
    Unchanged,
    /// The batch rewritten with `kept` of its records (maybe none).
    Rewritten { bytes: Vec<u8>, kept: i32 },
}

/// Rewrites `batch` with the records `keep` says to keep (see the module doc), decompressing
/// at most `decompressed_bytes_max` bytes.
pub fn filter_records(
    batch: &RecordBatch,
    decompressed_bytes_max: usize,
    mut keep: impl FnMut(&KeyedRecord<'_>) -> bool,
) -> Result<Filtered, BatchError> {
    let mut kept_bytes = Vec::new();
    let (mut kept, mut all) = (0i32, 0i32);
    let mut max_timestamp = i64::MIN;
    walk(batch, decompressed_bytes_max, |r, raw| {
        all += 1;
        if keep(r) {
            kept += 1;
            max_timestamp = max_timestamp.max(r.timestamp_ms);
            kept_bytes.extend_from_slice(raw);
        }
    })?;
    if kept == all {
        return Ok(Filtered::Unchanged);
    }
    let original = batch.as_bytes();
    let mut attributes = batch.attributes();
    let records = if kept == 0 {
        attributes &= !ATTR_COMPRESSION_MASK;
        Vec::new()
    } else {
        batch.compression().compress(&kept_bytes)?
    };
    if kept == 0 || batch.is_log_append_time() {
        max_timestamp = batch.max_timestamp();
    }
    let total = BATCH_HEADER_BYTES + records.len();
    let length = i32::try_from(total - BATCH_LENGTH_PREFIX_BYTES)
        .map_err(|_| BatchError::Compression("batch larger than 2 GiB".into()))?;
    let mut bytes = Vec::with_capacity(total);
    bytes.extend_from_slice(&original[..BATCH_HEADER_BYTES]);
    bytes.extend_from_slice(&records);
    bytes[field::BATCH_LENGTH..field::BATCH_LENGTH + 4].copy_from_slice(&length.to_be_bytes());
    bytes[field::ATTRIBUTES..field::ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
    bytes[field::MAX_TIMESTAMP..field::MAX_TIMESTAMP + 8]
        .copy_from_slice(&max_timestamp.to_be_bytes());
    bytes[field::RECORD_COUNT..field::RECORD_COUNT + 4].copy_from_slice(&kept.to_be_bytes());
    let crc = crc32c::crc32c(&bytes[field::ATTRIBUTES..]);
    bytes[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(Filtered::Rewritten { bytes, kept })
}

/// Walks the records, handing each (as seen by compaction) and its encoded bytes to `f`.
fn walk(
    batch: &RecordBatch,
    decompressed_bytes_max: usize,
    mut f: impl FnMut(&KeyedRecord<'_>, &[u8]),
) -> Result<(), BatchError> {
    let payload = &batch.as_bytes()[field::RECORDS..];
    let decompressed;
    let records = match batch.compression() {
        Compression::None => payload,
        codec => {
            decompressed = codec.decompress(payload, decompressed_bytes_max)?;
            &decompressed[..]
        }
    };
    let (base_offset, base_timestamp) = (batch.base_offset(), batch.base_timestamp());
    let mut cursor = 0;
    while cursor < records.len() {
        let raw = record::parse_record(records, cursor)?;
        let timestamp_ms = if batch.is_log_append_time() {
            batch.max_timestamp()
        } else {
            base_timestamp.saturating_add(raw.timestamp_delta)
        };
        let key = raw.key.clone().map(|k| &records[k]);
        let view = KeyedRecord {
            offset: base_offset.saturating_add(i64::from(raw.offset_delta)),
            timestamp_ms,
            key,
            tombstone: key.is_some() && raw.value.is_none(),
        };
        f(&view, &records[cursor..raw.end]);
        cursor = raw.end;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{BatchBuilder, ProducerStamp, RecordInput};
    use super::*;

    fn batch(compression: Compression) -> RecordBatch {
        let stamp = ProducerStamp {
            producer_id: 9,
            producer_epoch: 1,
            base_sequence: 30,
        };
        let mut builder = BatchBuilder::new(compression, stamp);
        let records: [(&[u8], Option<&[u8]>); 4] = [
            (b"a", Some(b"1")),
            (b"b", Some(b"2")),
            (b"a", None),
            (b"c", Some(b"3")),
        ];
        for (i, (key, value)) in records.iter().enumerate() {
            builder.push(&RecordInput {
                timestamp_ms: 1_000 + i as i64,
                key: Some(key),
                value: *value,
                headers: &[("h", Some(b"v"))],
            });
        }
        let mut bytes = builder.build().unwrap().to_vec();
        super::super::stamp_base_offset(&mut bytes, 100);
        super::super::stamp_partition_leader_epoch(&mut bytes, 4);
        RecordBatch::parse(bytes.into()).unwrap()
    }

    #[test]
    fn a_filtered_batch_keeps_its_offsets_and_producer_fields_and_the_kept_records() {
        for compression in [Compression::None, Compression::Lz4, Compression::Zstd] {
            let original = batch(compression);
            let mut seen = Vec::new();
            for_each_record(&original, 1 << 20, |r| seen.push((r.offset, r.tombstone))).unwrap();
            assert_eq!(
                seen,
                [(100, false), (101, false), (102, true), (103, false)]
            );
            let Filtered::Rewritten { bytes, kept } =
                filter_records(&original, 1 << 20, |r| r.offset % 2 == 1).unwrap()
            else {
                panic!("two records dropped")
            };
            assert_eq!(kept, 2);
            let out = RecordBatch::parse(bytes.into()).unwrap();
            assert_eq!(
                (
                    out.base_offset(),
                    out.last_offset(),
                    out.partition_leader_epoch()
                ),
                (100, 103, 4)
            );
            assert_eq!((out.producer_id(), out.base_sequence()), (9, 30));
            assert_eq!(out.compression(), compression);
            assert_eq!(out.max_timestamp(), 1_003);
            let records = out.records(1 << 20).unwrap();
            let kept: Vec<_> = records.iter().map(|r| (r.offset, r.timestamp_ms)).collect();
            assert_eq!(kept, [(101, 1_001), (103, 1_003)]);
            assert_eq!(records[1].value.as_deref(), Some(&b"3"[..]));
            assert_eq!(records[1].headers.len(), 1);
        }
    }

    #[test]
    fn keeping_everything_changes_nothing_and_keeping_nothing_leaves_an_empty_batch() {
        let original = batch(Compression::Lz4);
        assert_eq!(
            filter_records(&original, 1 << 20, |_| true).unwrap(),
            Filtered::Unchanged
        );
        let Filtered::Rewritten { bytes, kept: 0 } =
            filter_records(&original, 1 << 20, |_| false).unwrap()
        else {
            panic!("every record dropped")
        };
        assert_eq!(bytes.len(), BATCH_HEADER_BYTES);
        let out = RecordBatch::parse(bytes.into()).unwrap();
        assert_eq!((out.base_offset(), out.next_offset()), (100, 104));
        assert_eq!(out.compression(), Compression::None);
        assert!(out.records(1 << 20).unwrap().is_empty());
    }
}
