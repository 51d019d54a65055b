//! A regression guard on the hot paths that needs no clock: count heap allocations. Decoding
//! a frame and parsing a batch must not allocate; validating a batch allocates once (the
//! record list), however many records it holds. A change that adds per-record or per-frame
//! allocations fails here, deterministically, on any machine.

use bytes::{Bytes, BytesMut};
use tinymq_protocol::batch::{BatchBuilder, Compression, ProducerStamp, RecordBatch, RecordInput};
use tinymq_protocol::frame::{Frame, FrameDecoder, FrameHeader};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;

use counting_alloc::allocations_during;

fn batch(records: usize) -> Bytes {
    let mut builder = BatchBuilder::new(Compression::None, ProducerStamp::NONE);
    for i in 0..records {
        builder.push(&RecordInput {
            timestamp_ms: i as i64,
            key: Some(b"key"),
            value: Some(b"value"),
            headers: &[],
        });
    }
    builder.build().unwrap()
}

/// Allocations made while decoding `frames` frames from one read buffer.
fn frame_decode_allocations(frames: u32) -> u64 {
    let mut stream = BytesMut::new();
    for id in 0..frames {
        let body = Bytes::from_static(b"abc");
        Frame {
            header: FrameHeader::request(8, id, 3),
            body,
        }
        .encode(&mut stream);
    }
    let decoder = FrameDecoder::default();
    let (count, allocations) = allocations_during(|| {
        let mut n = 0;
        while decoder.decode(&mut stream).unwrap().is_some() {
            n += 1;
        }
        n
    });
    assert_eq!(count, frames);
    allocations
}

#[test]
fn frame_decoding_does_not_allocate_per_frame() {
    // The read buffer becomes shared once (one small allocation); each frame then only
    // borrows a slice of it.
    let one = frame_decode_allocations(1);
    assert!(one <= 1, "{one} allocations for one frame");
    assert_eq!(
        frame_decode_allocations(1000),
        one,
        "no allocation per frame"
    );
}

/// Allocations of parsing, then of validating, a batch of `records` records.
fn batch_allocations(records: usize) -> (u64, u64) {
    let bytes = batch(records);
    let (parsed, parse) = allocations_during(|| RecordBatch::parse(bytes.clone()).unwrap());
    let (result, validate) = allocations_during(|| parsed.validate_records(1 << 20));
    result.unwrap();
    (parse, validate)
}

#[test]
fn batch_parsing_and_validation_do_not_allocate_per_record() {
    let (parse_one, validate_one) = batch_allocations(1);
    assert!(
        parse_one <= 1,
        "parse: {parse_one} allocations (at most making the buffer shared)"
    );
    assert!(
        validate_one <= 1,
        "validate: {validate_one} allocations (the record list)"
    );
    for records in [10, 1000] {
        assert_eq!(
            batch_allocations(records),
            (parse_one, validate_one),
            "{records} records"
        );
    }
}
