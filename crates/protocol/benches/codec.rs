//! Hot paths of the protocol: decoding frames from a buffer, building a 64 KiB batch of 1 KiB
//! records, and parsing plus fully validating it (what the broker does on every produce).
//!
//! `cargo bench -p tinymq-protocol --bench codec`

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tinymq_protocol::batch::{BatchBuilder, Compression, ProducerStamp, RecordBatch, RecordInput};
use tinymq_protocol::frame::{Frame, FrameDecoder, FrameHeader};

fn batch_64k(compression: Compression) -> Bytes {
    let value = vec![b'v'; 1024];
    let mut builder = BatchBuilder::new(compression, ProducerStamp::NONE);
    for i in 0..63 {
        builder.push(&RecordInput {
            timestamp_ms: 1_700_000_000_000 + i,
            key: None,
            value: Some(&value),
            headers: &[],
        });
    }
    builder.build().unwrap()
}

fn frames(c: &mut Criterion) {
    let mut stream = BytesMut::new();
    for id in 0..1000u32 {
        let body = Bytes::from(vec![0u8; 100]);
        Frame {
            header: FrameHeader::request(8, id, 100),
            body,
        }
        .encode(&mut stream);
    }
    let stream = stream.freeze();
    let mut group = c.benchmark_group("frame");
    group.throughput(Throughput::Elements(1000));
    group.bench_function("decode_1000_frames_of_100B", |b| {
        let decoder = FrameDecoder::default();
        b.iter(|| {
            let mut buf = BytesMut::from(&stream[..]);
            let mut n = 0;
            while let Some(frame) = decoder.decode(&mut buf).unwrap() {
                n += frame.body.len();
            }
            n
        })
    });
    group.finish();
}

fn batches(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch_64KiB_of_1KiB_records");
    group.throughput(Throughput::Bytes(batch_64k(Compression::None).len() as u64));
    group.bench_function("build", |b| b.iter(|| batch_64k(Compression::None)));
    for codec in [Compression::None, Compression::Lz4, Compression::Zstd] {
        let bytes = batch_64k(codec);
        group.bench_function(format!("parse_and_validate_{}", codec.name()), |b| {
            b.iter(|| {
                let batch = RecordBatch::parse(bytes.clone()).unwrap();
                batch.validate_records(1 << 20).unwrap();
            })
        });
    }
    group.finish();
}

criterion_group!(benches, frames, batches);
criterion_main!(benches);
