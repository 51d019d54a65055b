//! Control batches: the transaction markers (KIP-98) a partition's leader writes to close a
//! producer's transaction, in Kafka's format exactly, so Kafka clients read them as they read
//! Kafka's.
//!
//! ```text
//! batch header   attributes = transactional | control (0x30), no compression
//!                producerId, producerEpoch = the transaction's; baseSequence = -1
//!                recordCount = 1, lastOffsetDelta = 0
//! the record     key   = version i16 (0) | type i16 (0 = ABORT, 1 = COMMIT)
//!                value = version i16 (0) | coordinator_epoch i32
//!                no headers; integers big-endian
//! ```
//!
//! Producers may not send control batches (`RecordBatch::check_producer_fields`); clients
//! never hand their record to applications.

use bytes::Bytes;

use super::{
    BatchBuilder, BatchError, Compression, ProducerStamp, RecordBatch, RecordInput, ATTR_CONTROL,
    ATTR_TRANSACTIONAL, NO_SEQUENCE,
};

/// The only version of the marker's key and value.
pub const MARKER_VERSION: i16 = 0;
/// The attributes of every control batch.
pub const CONTROL_ATTRIBUTES: i16 = ATTR_TRANSACTIONAL | ATTR_CONTROL;
/// Bytes of the marker record's key (version, type) and value (version, coordinator epoch).
const MARKER_KEY_BYTES: usize = 4;
const MARKER_VALUE_BYTES: usize = 6;

/// How a transaction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MarkerType {
    Abort,
    Commit,
}

impl MarkerType {
    /// The type's code in the marker's key.
    pub fn code(self) -> i16 {
        match self {
            MarkerType::Abort => 0,
            MarkerType::Commit => 1,
        }
    }

    /// The type of `code`, or `None` for a type this version does not know.
    pub fn from_code(code: i16) -> Option<MarkerType> {
        match code {
            0 => Some(MarkerType::Abort),
            1 => Some(MarkerType::Commit),
            _ => None,
        }
    }
}

/// A transaction marker, as read back from its control batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub marker: MarkerType,
    pub coordinator_epoch: i32,
    pub timestamp_ms: i64,
}

/// The control batch of a marker: a whole batch, CRC included, at base offset 0 (the log
/// stamps its real offset and leader epoch).
pub fn encode_marker(
    producer_id: i64,
    producer_epoch: i16,
    marker: MarkerType,
    coordinator_epoch: i32,
    timestamp_ms: i64,
) -> Bytes {
    let mut key = [0u8; MARKER_KEY_BYTES];
    key[..2].copy_from_slice(&MARKER_VERSION.to_be_bytes());
    key[2..].copy_from_slice(&marker.code().to_be_bytes());
    let mut value = [0u8; MARKER_VALUE_BYTES];
    value[..2].copy_from_slice(&MARKER_VERSION.to_be_bytes());
    value[2..].copy_from_slice(&coordinator_epoch.to_be_bytes());
    let stamp = ProducerStamp {
        producer_id,
        producer_epoch,
        base_sequence: NO_SEQUENCE,
    };
    let mut builder =
        BatchBuilder::new(Compression::None, stamp).with_attributes(CONTROL_ATTRIBUTES);
    builder.push(&RecordInput {
        timestamp_ms,
        key: Some(&key),
        value: Some(&value),
        headers: &[],
    });
    // One tiny uncompressed record: building cannot fail (only compression or a batch over
    // 2 GiB can).
    builder.build().unwrap_or_default()
}

/// Reads the marker of a control batch, checking every field: the transactional and control
/// bits, exactly one record, a 4-byte key and a value of at least 6 bytes with version 0, and
/// a known type. Anything else, an unknown type included, is an error.
pub fn parse_marker(batch: &RecordBatch) -> Result<Marker, BatchError> {
    let invalid = |what: String| Err(BatchError::InvalidHeader(format!("control batch: {what}")));
    if batch.attributes() & CONTROL_ATTRIBUTES != CONTROL_ATTRIBUTES {
        return invalid(format!(
            "attributes 0x{:04X} lack the transactional and control bits",
            batch.attributes()
        ));
    }
    if batch.record_count() != 1 {
        return invalid(format!(
            "{} records, a marker has one",
            batch.record_count()
        ));
    }
    // A marker is a few dozen bytes; the bound only keeps a compressed lie small.
    let records = batch.records(MARKER_DECOMPRESSED_BYTES_MAX)?;
    let [record] = &records[..] else {
        return invalid(format!("{} records, a marker has one", records.len()));
    };
    let key = record.key.as_deref().unwrap_or_default();
    let [kv0, kv1, t0, t1] = key else {
        return invalid(format!("key of {} bytes, a marker's has 4", key.len()));
    };
    let key_version = i16::from_be_bytes([*kv0, *kv1]);
    if key_version != MARKER_VERSION {
        return invalid(format!("key version {key_version}"));
    }
    let code = i16::from_be_bytes([*t0, *t1]);
    let Some(marker) = MarkerType::from_code(code) else {
        return invalid(format!("unknown control type {code}"));
    };
    let value = record.value.as_deref().unwrap_or_default();
    let Some(value) = value.first_chunk::<MARKER_VALUE_BYTES>() else {
        return invalid(format!("value of {} bytes, a marker's has 6", value.len()));
    };
    let value_version = i16::from_be_bytes([value[0], value[1]]);
    if value_version != MARKER_VERSION {
        return invalid(format!("value version {value_version}"));
    }
    Ok(Marker {
        producer_id: batch.producer_id(),
        producer_epoch: batch.producer_epoch(),
        marker,
        coordinator_epoch: i32::from_be_bytes([value[2], value[3], value[4], value[5]]),
        timestamp_ms: record.timestamp_ms,
    })
}

/// Kafka's read-committed rule for a run of batches in offset order, given the aborted
/// transactions (producer id, first offset) of their range: a transactional batch of a
/// producer whose aborted transaction has begun at or before it is dropped, until that
/// producer's ABORT marker; control batches are never shown. The consumers of both
/// protocols (the native client, the broker's filtered fetch) drop records with it.
#[derive(Debug, Clone, Default)]
pub struct AbortedFilter {
    /// Aborted transactions not reached yet, the latest first offset first (popped from
    /// the end).
    pending: Vec<(i64, i64)>,
    /// Producers inside an aborted transaction at the current batch.
    active: std::collections::HashSet<i64>,
}

impl AbortedFilter {
    pub fn new(aborted: impl IntoIterator<Item = (i64, i64)>) -> AbortedFilter {
        let mut pending: Vec<(i64, i64)> = aborted.into_iter().collect();
        pending.sort_by_key(|&(_, first)| std::cmp::Reverse(first));
        AbortedFilter {
            pending,
            active: Default::default(),
        }
    }

    /// Whether a read-committed reader sees `batch`'s records (call it for every batch, in
    /// order, control batches included: an ABORT marker ends its producer's dropping).
    pub fn keep(&mut self, batch: &RecordBatch) -> bool {
        while let Some(&(producer_id, first)) = self.pending.last() {
            if first > batch.last_offset() {
                break;
            }
            self.active.insert(producer_id);
            self.pending.pop();
        }
        if batch.is_control() {
            if let Ok(m) = parse_marker(batch) {
                if m.marker == MarkerType::Abort {
                    self.active.remove(&m.producer_id);
                }
            }
            return false;
        }
        !(batch.is_transactional() && self.active.contains(&batch.producer_id()))
    }
}

/// Most bytes a marker's records section may decompress to when parsed.
const MARKER_DECOMPRESSED_BYTES_MAX: usize = 4096;

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::batch::craft::CraftedBatch;

    #[test]
    fn a_marker_is_kafkas_control_batch() {
        let bytes = encode_marker(42, 3, MarkerType::Commit, 7, 1_000);
        let batch = RecordBatch::parse(bytes.clone()).unwrap();
        assert_eq!(batch.attributes(), 0x30);
        assert_eq!(batch.base_sequence(), -1);
        assert_eq!((batch.producer_id(), batch.producer_epoch()), (42, 3));
        assert_eq!((batch.record_count(), batch.last_offset_delta()), (1, 0));
        let record = &batch.records(1 << 10).unwrap()[0];
        assert_eq!(record.key.as_deref(), Some(&[0, 0, 0, 1][..]));
        assert_eq!(record.value.as_deref(), Some(&[0, 0, 0, 0, 0, 7][..]));
        assert!(record.headers.is_empty());
        let marker = parse_marker(&batch).unwrap();
        assert_eq!(marker.marker, MarkerType::Commit);
        assert_eq!(marker.coordinator_epoch, 7);
        assert!(
            batch.check_producer_fields().is_err(),
            "never from a producer"
        );
    }

    fn control(key: &[u8], value: &[u8], attributes: i16) -> RecordBatch {
        let mut builder = BatchBuilder::new(
            Compression::None,
            ProducerStamp {
                producer_id: 1,
                producer_epoch: 0,
                base_sequence: -1,
            },
        )
        .with_attributes(attributes);
        builder.push(&RecordInput {
            timestamp_ms: 5,
            key: Some(key),
            value: Some(value),
            headers: &[],
        });
        RecordBatch::parse(builder.build().unwrap()).unwrap()
    }

    #[test]
    fn every_field_is_checked() {
        let value = [0, 0, 0, 0, 0, 1];
        assert!(parse_marker(&control(&[0, 0, 0, 0], &value, 0x30)).is_ok());
        for (key, value, attributes, why) in [
            (&[0u8, 0, 0, 2][..], &value[..], 0x30, "unknown type"),
            (&[0, 0, 0, 0x7f][..], &value[..], 0x30, "unknown type"),
            (&[0, 1, 0, 0][..], &value[..], 0x30, "key version"),
            (&[0, 0, 0][..], &value[..], 0x30, "short key"),
            (&[0, 0, 0, 0, 0][..], &value[..], 0x30, "long key"),
            (&[0, 0, 0, 0][..], &[0, 0, 0][..], 0x30, "short value"),
            (
                &[0, 0, 0, 0][..],
                &[0, 9, 0, 0, 0, 0][..],
                0x30,
                "value version",
            ),
            (&[0, 0, 0, 0][..], &value[..], 0x20, "no transactional bit"),
            (&[0, 0, 0, 0][..], &value[..], 0x10, "no control bit"),
        ] {
            assert!(
                parse_marker(&control(key, value, attributes)).is_err(),
                "{why}"
            );
        }
        let mut two = CraftedBatch::honest(5, &[b"a", b"b"]);
        two.attributes = CONTROL_ATTRIBUTES;
        let two = RecordBatch::parse(two.encode()).unwrap();
        assert!(parse_marker(&two).is_err(), "two records");
    }

    #[test]
    fn the_aborted_filter_drops_aborted_transactions_and_every_marker() {
        use crate::batch::{stamp_base_offset, ATTR_TRANSACTIONAL};
        let at = |bytes: Bytes, offset: i64| {
            let mut b = bytes.to_vec();
            stamp_base_offset(&mut b, offset);
            RecordBatch::parse(Bytes::from(b)).unwrap()
        };
        let data = |producer: i64, transactional: bool| {
            let mut b = CraftedBatch::honest(5, &[b"x"]);
            (b.producer_id, b.producer_epoch, b.base_sequence) = (producer, 0, 0);
            if transactional {
                b.attributes = ATTR_TRANSACTIONAL;
            }
            b.encode()
        };
        // 0 p1 (aborted), 1 p2 (committed), 2 plain, 3 p1 ABORT, 4 p2 COMMIT, 5 p1 (new, kept).
        let log = [
            at(data(1, true), 0),
            at(data(2, true), 1),
            at(data(-1, false), 2),
            at(encode_marker(1, 0, MarkerType::Abort, 0, 5), 3),
            at(encode_marker(2, 0, MarkerType::Commit, 0, 5), 4),
            at(data(1, true), 5),
        ];
        let mut filter = AbortedFilter::new([(1, 0)]);
        let kept: Vec<i64> = log
            .iter()
            .filter(|b| filter.keep(b))
            .map(|b| b.base_offset())
            .collect();
        assert_eq!(kept, vec![1, 2, 5]);
    }

    fn marker_type() -> impl Strategy<Value = MarkerType> {
        prop_oneof![Just(MarkerType::Abort), Just(MarkerType::Commit)]
    }

    proptest! {
        #[test]
        fn parse_inverts_encode(
            producer_id in 0i64..i64::MAX,
            producer_epoch in 0i16..i16::MAX,
            marker in marker_type(),
            coordinator_epoch in any::<i32>(),
            timestamp_ms in 0i64..(1i64 << 50),
        ) {
            let bytes = encode_marker(producer_id, producer_epoch, marker, coordinator_epoch, timestamp_ms);
            let parsed = parse_marker(&RecordBatch::parse(bytes).unwrap()).unwrap();
            prop_assert_eq!(parsed, Marker { producer_id, producer_epoch, marker, coordinator_epoch, timestamp_ms });
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), flip in 0usize..200) {
            let _ = RecordBatch::parse(Bytes::from(bytes)).map(|b| parse_marker(&b));
            // A real marker with one byte changed and its CRC fixed: every field but the CRC
            // may be wrong.
            let mut marker = encode_marker(1, 0, MarkerType::Abort, 0, 0).to_vec();
            let at = super::super::field::ATTRIBUTES + flip % (marker.len() - super::super::field::ATTRIBUTES);
            marker[at] ^= 0xA5;
            let crc = super::super::compute_crc(&marker);
            marker[super::super::field::CRC..super::super::field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
            let _ = RecordBatch::parse(Bytes::from(marker)).map(|b| parse_marker(&b));
        }
    }
}
