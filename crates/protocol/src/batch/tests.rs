use super::*;
use proptest::prelude::*;

type OwnedRecord = (
    i64,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Vec<(String, Option<Vec<u8>>)>,
);

fn record_strategy() -> impl Strategy<Value = OwnedRecord> {
    (
        0i64..1_000_000,
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..200)),
        proptest::collection::vec(
            (
                "[a-z]{0,8}",
                proptest::option::of(proptest::collection::vec(any::<u8>(), 0..10)),
            ),
            0..3,
        ),
    )
}

fn build(records: &[OwnedRecord], compression: Compression, base_ts: i64) -> Bytes {
    let mut builder = BatchBuilder::new(compression, ProducerStamp::NONE);
    for (ts, key, value, headers) in records {
        let headers: Vec<(&str, Option<&[u8]>)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_deref()))
            .collect();
        builder.push(&RecordInput {
            timestamp_ms: base_ts + ts,
            key: key.as_deref(),
            value: value.as_deref(),
            headers: &headers,
        });
    }
    builder.build().unwrap()
}

fn simple_batch(n: usize, compression: Compression) -> Bytes {
    let records: Vec<OwnedRecord> = (0..n)
        .map(|i| {
            (
                i as i64,
                None,
                Some(format!("value-{i}").into_bytes()),
                vec![],
            )
        })
        .collect();
    build(&records, compression, 1_700_000_000_000)
}

proptest! {
    #[test]
    fn batches_round_trip_with_every_compression(
        records in proptest::collection::vec(record_strategy(), 1..20),
        codec in prop_oneof![Just(Compression::None), Just(Compression::Lz4), Just(Compression::Zstd)],
        base_offset in 0i64..1 << 40,
    ) {
        let base_ts = 1_700_000_000_000;
        let mut bytes = BytesMut::from(&build(&records, codec, base_ts)[..]);
        stamp_base_offset(&mut bytes, base_offset);
        stamp_partition_leader_epoch(&mut bytes, 7);
        let batch = RecordBatch::parse(bytes.freeze()).unwrap();
        prop_assert_eq!(batch.compression(), codec);
        prop_assert_eq!(batch.base_offset(), base_offset);
        prop_assert_eq!(batch.partition_leader_epoch(), 7);
        prop_assert_eq!(batch.record_count() as usize, records.len());
        prop_assert_eq!(batch.last_offset(), base_offset + records.len() as i64 - 1);
        let max_ts = records.iter().map(|r| r.0).max().unwrap() + base_ts;
        prop_assert_eq!(batch.max_timestamp(), max_ts);
        let decoded = batch.records(1 << 20).unwrap();
        for (i, (want, got)) in records.iter().zip(&decoded).enumerate() {
            prop_assert_eq!(got.offset, base_offset + i as i64);
            prop_assert_eq!(got.timestamp_ms, base_ts + want.0);
            prop_assert_eq!(got.key.as_deref(), want.1.as_deref());
            prop_assert_eq!(got.value.as_deref(), want.2.as_deref());
            prop_assert_eq!(got.headers.len(), want.3.len());
            for (h, (k, v)) in got.headers.iter().zip(&want.3) {
                prop_assert_eq!(&h.key, k);
                prop_assert_eq!(h.value.as_deref(), v.as_deref());
            }
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let bytes = Bytes::from(bytes);
        for batch in BatchIter::new(bytes.clone()).flatten() {
            let _ = batch.records(1 << 16);
        }
        let _ = RecordBatch::parse(bytes);
    }

    /// A valid batch with its CRC fixed up after random corruption of the records section
    /// still never panics in the record decoder.
    #[test]
    fn corrupt_records_with_valid_crc_never_panic(
        flips in proptest::collection::vec((0usize..1000, any::<u8>()), 1..8)
    ) {
        let mut bytes = BytesMut::from(&simple_batch(10, Compression::None)[..]);
        let records_len = bytes.len() - BATCH_HEADER_BYTES;
        for (at, value) in flips {
            bytes[BATCH_HEADER_BYTES + at % records_len] = value;
        }
        let crc = compute_crc(&bytes);
        bytes[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
        let batch = RecordBatch::parse(bytes.freeze()).unwrap();
        let _ = batch.records(1 << 16);
    }
}

#[test]
fn stamping_leaves_the_crc_valid() {
    let mut bytes = BytesMut::from(&simple_batch(3, Compression::None)[..]);
    let crc_before = compute_crc(&bytes);
    stamp_base_offset(&mut bytes, 123_456);
    stamp_partition_leader_epoch(&mut bytes, 9);
    assert_eq!(compute_crc(&bytes), crc_before);
    let batch = RecordBatch::parse(bytes.freeze()).unwrap();
    assert_eq!(batch.base_offset(), 123_456);
    assert_eq!(batch.records(1024).unwrap()[2].offset, 123_458);
}

#[test]
fn every_flipped_bit_after_the_crc_is_detected() {
    let bytes = simple_batch(3, Compression::None);
    for byte in field::ATTRIBUTES..bytes.len() {
        for bit in 0..8 {
            let mut corrupt = BytesMut::from(&bytes[..]);
            corrupt[byte] ^= 1 << bit;
            let err = RecordBatch::parse(corrupt.freeze()).unwrap_err();
            assert!(
                matches!(err, BatchError::CrcMismatch { .. }),
                "flip at byte {byte} bit {bit}: {err}"
            );
        }
    }
}

#[test]
fn wrong_length_magic_and_count_are_rejected() {
    let bytes = simple_batch(3, Compression::None);
    let truncated = bytes.slice(..bytes.len() - 1);
    assert!(matches!(
        RecordBatch::parse(truncated),
        Err(BatchError::Truncated { .. })
    ));

    let mut bad_magic = BytesMut::from(&bytes[..]);
    bad_magic[field::MAGIC] = 1;
    assert_eq!(
        RecordBatch::parse(bad_magic.freeze()),
        Err(BatchError::BadMagic(1))
    );

    let mut tiny = BytesMut::from(&bytes[..]);
    tiny[field::BATCH_LENGTH..field::BATCH_LENGTH + 4].copy_from_slice(&10i32.to_be_bytes());
    assert_eq!(
        RecordBatch::parse(tiny.freeze()),
        Err(BatchError::LengthTooSmall(10))
    );

    // A count that disagrees with the records, with the CRC recomputed so it passes parse.
    let mut miscount = BytesMut::from(&bytes[..]);
    miscount[field::RECORD_COUNT..field::RECORD_COUNT + 4].copy_from_slice(&4i32.to_be_bytes());
    let crc = compute_crc(&miscount);
    miscount[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    let batch = RecordBatch::parse(miscount.clone().freeze()).unwrap();
    assert!(matches!(
        batch.validate_records(1024),
        Err(BatchError::InvalidHeader(_))
    ));
    // The same count with a matching last offset delta: the records themselves disagree.
    miscount[field::LAST_OFFSET_DELTA..field::LAST_OFFSET_DELTA + 4]
        .copy_from_slice(&3i32.to_be_bytes());
    let crc = compute_crc(&miscount);
    miscount[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    let batch = RecordBatch::parse(miscount.freeze()).unwrap();
    assert_eq!(
        batch.validate_records(1024),
        Err(BatchError::RecordCountMismatch {
            header: 4,
            found: 3
        })
    );
}

fn verify(crafted: &craft::CraftedBatch) -> Result<BatchSummary, BatchError> {
    let batch = RecordBatch::parse(crafted.encode())?;
    batch.check_producer_fields()?;
    batch.verify(1 << 20)
}

fn invalid_header(result: Result<BatchSummary, BatchError>) -> bool {
    matches!(result, Err(BatchError::InvalidHeader(_)))
}

#[test]
fn headers_that_lie_about_their_records_are_refused() {
    let honest = craft::CraftedBatch::honest(1_000, &[b"a", b"b", b"c"]);
    assert_eq!(
        verify(&honest),
        Ok(BatchSummary {
            record_count: 3,
            timestamp_min: 1_000,
            timestamp_max: 1_000,
            keyless_records: 3,
        })
    );
    // The case from the field: no records, a count of 0 and a huge last offset delta.
    let mut empty = craft::CraftedBatch::honest(1_000, &[]);
    empty.last_offset_delta = i32::MAX;
    assert!(invalid_header(verify(&empty)));
    empty.last_offset_delta = -1;
    assert!(invalid_header(verify(&empty)));
    let mut delta = honest.clone();
    delta.last_offset_delta = 7;
    assert!(invalid_header(verify(&delta)));
    let mut count = honest.clone();
    count.record_count = 2;
    count.last_offset_delta = 1;
    assert!(matches!(
        verify(&count),
        Err(BatchError::RecordCountMismatch {
            header: 2,
            found: 3
        })
    ));
    let mut order = honest.clone();
    order.records.swap(0, 1);
    assert!(invalid_header(verify(&order)));
    let mut gap = honest.clone();
    gap.records[2].offset_delta = 5;
    assert!(invalid_header(verify(&gap)));
    let mut max_ts = honest.clone();
    max_ts.max_timestamp = i64::MAX;
    assert!(invalid_header(verify(&max_ts)));
    let mut overflow = honest.clone();
    overflow.base_timestamp = i64::MAX;
    overflow.records[1].timestamp_delta = 1;
    assert!(invalid_header(verify(&overflow)));
}

#[test]
fn producers_may_set_only_compression_bits_and_consistent_producer_fields() {
    let honest = craft::CraftedBatch::honest(5, &[b"x"]);
    for bits in [
        ATTR_LOG_APPEND_TIME,
        ATTR_TRANSACTIONAL,
        ATTR_CONTROL,
        ATTR_CONTROL | ATTR_TRANSACTIONAL,
        ATTR_DELETE_HORIZON,
        1 << 7,
        i16::MIN,
    ] {
        let mut b = honest.clone();
        b.attributes = bits;
        assert!(invalid_header(verify(&b)), "attributes {bits:#x}");
    }
    let mut unknown_codec = honest.clone();
    unknown_codec.attributes = 5;
    assert_eq!(
        verify(&unknown_codec),
        Err(BatchError::UnsupportedCompression(5))
    );
    let mut idempotent = honest.clone();
    (
        idempotent.producer_id,
        idempotent.producer_epoch,
        idempotent.base_sequence,
    ) = (7, 0, 0);
    assert!(verify(&idempotent).is_ok());
    let mut transactional = idempotent.clone();
    transactional.attributes = ATTR_TRANSACTIONAL | 1; // with gzip
    assert!(
        verify(&transactional).is_ok(),
        "transactional with idempotence"
    );
    transactional.attributes = ATTR_TRANSACTIONAL | ATTR_CONTROL;
    assert!(
        invalid_header(verify(&transactional)),
        "control: brokers only"
    );
    for (id, epoch, sequence) in [
        (7, -1, 0),
        (7, 0, -1),
        (7, 0, i32::MIN),
        (-1, 0, -1),
        (-2, -1, -1),
    ] {
        let mut b = honest.clone();
        (b.producer_id, b.producer_epoch, b.base_sequence) = (id, epoch, sequence);
        assert!(invalid_header(verify(&b)), "{id} {epoch} {sequence}");
    }
}

#[test]
fn wrong_magic_is_refused_before_anything_else() {
    let mut b = craft::CraftedBatch::honest(5, &[b"x"]);
    b.magic = 1;
    assert_eq!(RecordBatch::parse(b.encode()), Err(BatchError::BadMagic(1)));
}

#[test]
fn decompression_is_bounded() {
    let big_value = vec![b'a'; 1 << 20];
    let records = vec![(0, None, Some(big_value), vec![])];
    for codec in [Compression::Lz4, Compression::Zstd] {
        let batch = RecordBatch::parse(build(&records, codec, 0)).unwrap();
        assert!(batch.size_bytes() < 64 * 1024);
        assert_eq!(
            batch.records(64 * 1024),
            Err(BatchError::DecompressedTooLarge { limit: 64 * 1024 })
        );
        assert!(batch.records(2 << 20).is_ok());
    }
}

#[test]
fn batch_iter_splits_back_to_back_batches_and_stops_at_a_torn_tail() {
    let a = simple_batch(2, Compression::None);
    let b = simple_batch(5, Compression::Lz4);
    let mut stream = BytesMut::new();
    stream.extend_from_slice(&a);
    stream.extend_from_slice(&b);
    stream.extend_from_slice(&a[..20]);
    let items: Vec<_> = BatchIter::new(stream.freeze()).collect();
    assert_eq!(items.len(), 3);
    assert_eq!(items[0].as_ref().unwrap().record_count(), 2);
    assert_eq!(items[1].as_ref().unwrap().record_count(), 5);
    assert!(matches!(items[2], Err(BatchError::Truncated { .. })));
}

/// The exact bytes of a small batch, as shown in docs/protocol.md. If this changes, the
/// format changed: update the doc, and think hard about compatibility.
#[test]
fn documented_example_batch_bytes() {
    let mut builder = BatchBuilder::new(Compression::None, ProducerStamp::NONE);
    builder.push(&RecordInput {
        timestamp_ms: 1_700_000_000_000,
        key: Some(b"k"),
        value: Some(b"hello"),
        headers: &[],
    });
    let bytes = builder.build().unwrap();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        hex,
        concat!(
            "0000000000000000",
            "0000003e",
            "ffffffff",
            "02",
            "36ff4dc3",
            "0000",
            "00000000",
            "0000018bcfe56800",
            "0000018bcfe56800",
            "ffffffffffffffff",
            "ffff",
            "ffffffff",
            "00000001",
            "18",
            "00",
            "00",
            "00",
            "02",
            "6b",
            "0a",
            "68656c6c6f",
            "00"
        )
    );
}

proptest! {
    /// `record_bytes` is what the builder really adds for a record, so a producer can size a
    /// batch before building it.
    #[test]
    fn record_bytes_is_what_the_builder_adds(
        records in proptest::collection::vec(
            (
                -100_000i64..100_000,
                proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300)),
                proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300)),
                proptest::collection::vec(("[a-z]{0,8}", proptest::option::of(proptest::collection::vec(any::<u8>(), 0..20))), 0..3),
            ),
            1..20,
        )
    ) {
        let mut builder = BatchBuilder::new(Compression::None, ProducerStamp::NONE);
        let base = 1_700_000_000_000i64;
        let mut expected = BATCH_HEADER_BYTES;
        for (i, (delta, key, value, headers)) in records.iter().enumerate() {
            let headers: Vec<(&str, Option<&[u8]>)> =
                headers.iter().map(|(k, v)| (k.as_str(), v.as_deref())).collect();
            // The first record's timestamp is the batch's base.
            let timestamp_delta = if i == 0 { 0 } else { *delta };
            let input = RecordInput {
                timestamp_ms: base + timestamp_delta,
                key: key.as_deref(),
                value: value.as_deref(),
                headers: &headers,
            };
            expected += record_bytes(&input, i as i32, timestamp_delta);
            builder.push(&input);
            prop_assert_eq!(builder.uncompressed_bytes(), expected);
        }
    }
}
