//! Selection examples: offsets intact, producer fields and timestamps kept, compressed input.

use tinymq_protocol::batch::{
    stamp_base_offset, BatchBuilder, BatchIter, ProducerStamp, RecordInput,
};

use super::*;
use crate::raw::decode_sparse;

fn batch(base_offset: i64, compression: Compression, tags: &[&str]) -> Bytes {
    let stamp = ProducerStamp {
        producer_id: 9,
        producer_epoch: 1,
        base_sequence: 100,
    };
    let mut builder = BatchBuilder::new(compression, stamp);
    for (i, tag) in tags.iter().enumerate() {
        let value = format!("v{i}");
        builder.push(&RecordInput {
            timestamp_ms: 1_000 + i as i64,
            key: None,
            value: Some(value.as_bytes()),
            headers: &[("tag", Some(tag.as_bytes()))],
        });
    }
    let mut bytes = builder.build().unwrap().to_vec();
    stamp_base_offset(&mut bytes, base_offset);
    Bytes::from(bytes)
}

fn options(from_offset: i64) -> SelectOptions {
    SelectOptions {
        from_offset,
        decompressed_bytes_max: 1 << 20,
    }
}

fn is_red(_: i64, r: &dyn RecordFields) -> bool {
    r.header("tag") == Some(b"red")
}

/// (offset, value) of every record in `selection`, decoded as a consumer does.
fn decoded(selection: &Selection) -> Vec<(i64, String)> {
    BatchIter::new(selection.records.clone())
        .flat_map(|b| decode_sparse(&b.unwrap(), 1 << 20).unwrap())
        .map(|r| {
            let value = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
            (r.offset, value)
        })
        .collect()
}

#[test]
fn keeps_matching_records_with_their_offsets() {
    for codec in [Compression::None, Compression::Zstd, Compression::Gzip] {
        let mut input = batch(10, codec, &["red", "blue", "red", "blue"]).to_vec();
        input.extend_from_slice(&batch(14, codec, &["blue", "blue"]));
        input.extend_from_slice(&batch(16, codec, &["red"]));
        let s = select(&input, is_red, &options(11)).unwrap();
        assert_eq!(
            decoded(&s),
            vec![(12, "v2".into()), (16, "v0".into())],
            "{codec:?}"
        );
        assert_eq!((s.kept, s.dropped, s.next_offset), (2, 4, 17));
        let first = BatchIter::new(s.records.clone()).next().unwrap().unwrap();
        assert_eq!(first.base_offset(), 10);
        assert_eq!(
            first.last_offset_delta(),
            3,
            "the consumer moves past the batch"
        );
        assert_eq!(first.record_count(), 1);
        assert_eq!(first.compression(), Compression::None);
        assert_eq!((first.producer_id(), first.base_sequence()), (9, 100));
        assert_eq!(
            (first.base_timestamp(), first.max_timestamp()),
            (1_000, 1_003)
        );
    }
}

#[test]
fn an_all_kept_plain_batch_is_copied_verbatim() {
    let input = batch(0, Compression::None, &["red", "red"]);
    let s = select(&input, is_red, &options(0)).unwrap();
    assert_eq!(s.records, input);
}

#[test]
fn nothing_kept_still_moves_next_offset_and_a_cut_batch_ends_the_read() {
    let mut input = batch(5, Compression::None, &["blue", "blue"]).to_vec();
    let second = batch(7, Compression::None, &["red"]);
    input.extend_from_slice(&second[..second.len() - 3]);
    let s = select(&input, is_red, &options(5)).unwrap();
    assert!(s.records.is_empty());
    assert_eq!((s.kept, s.dropped, s.next_offset), (0, 2, 7));
    let empty = select(&[], is_red, &options(42)).unwrap();
    assert_eq!(empty.next_offset, 42);
}

#[test]
fn a_corrupt_batch_is_refused() {
    let mut input = batch(0, Compression::None, &["red"]).to_vec();
    let last = input.len() - 1;
    input[last] ^= 0xFF;
    let e = select(&input, is_red, &options(0)).unwrap_err();
    assert!(matches!(
        e,
        SelectError::Batch {
            source: BatchError::CrcMismatch { .. },
            ..
        }
    ));
}
