//! Writes the fuzz seed corpora: valid frames and valid record batches (every compression),
//! so fuzzing starts from inputs that reach deep into the decoders.
//!
//! `cargo run -p tinymq-protocol --example write_fuzz_seeds -- fuzz/corpus`

use std::path::Path;

use bytes::BytesMut;
use prost::Message;
use tinymq_protocol::batch::{BatchBuilder, Compression, ProducerStamp, RecordInput};
use tinymq_protocol::frame::{Frame, FrameHeader};
use tinymq_protocol::{messages, OpCode};

fn batch(compression: Compression, records: usize) -> Vec<u8> {
    let mut builder = BatchBuilder::new(
        compression,
        ProducerStamp {
            producer_id: 7,
            producer_epoch: 0,
            base_sequence: 0,
        },
    );
    for i in 0..records {
        let value = format!("value-{i}-{}", "x".repeat(i * 7));
        builder.push(&RecordInput {
            timestamp_ms: 1_700_000_000_000 + i as i64,
            key: (i % 2 == 0).then_some(b"key".as_slice()),
            value: Some(value.as_bytes()),
            headers: &[("trace", Some(b"abc".as_slice())), ("empty", None)],
        });
    }
    builder.build().expect("seed batch").to_vec()
}

fn frame(op: OpCode, id: u32, body: Vec<u8>) -> Vec<u8> {
    let mut out = BytesMut::new();
    Frame {
        header: FrameHeader::request(op.code(), id, body.len() as u32),
        body: body.into(),
    }
    .encode(&mut out);
    out.to_vec()
}

fn main() -> std::io::Result<()> {
    let root = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "fuzz/corpus".into());
    let root = Path::new(&root);
    let batches = root.join("record_batch");
    let frames = root.join("frame_decoder");
    std::fs::create_dir_all(&batches)?;
    std::fs::create_dir_all(&frames)?;
    for (name, codec) in [
        ("none", Compression::None),
        ("lz4", Compression::Lz4),
        ("zstd", Compression::Zstd),
    ] {
        std::fs::write(batches.join(format!("one_{name}")), batch(codec, 1))?;
        let mut two = batch(codec, 5);
        two.extend(batch(codec, 2));
        std::fs::write(batches.join(format!("two_{name}")), two)?;
    }

    let handshake = messages::HandshakeRequest {
        min_version: 1,
        max_version: 1,
        cluster_id: String::new(),
        client_id: "seed".into(),
        ..Default::default()
    };
    let produce = messages::ProduceRequest {
        acks: -1,
        timeout_ms: 30_000,
        partitions: vec![messages::ProducePartition {
            topic: "orders".into(),
            partition: 0,
            records: batch(Compression::None, 3).into(),
        }],
        transactional_id: String::new(),
    };
    // The decoder's first byte of input picks the chunk size the stream is fed in.
    let mut stream = vec![5u8];
    stream.extend(frame(OpCode::Handshake, 1, handshake.encode_to_vec()));
    stream.extend(frame(OpCode::Produce, 2, produce.encode_to_vec()));
    stream.extend(frame(OpCode::Metadata, 3, Vec::new()));
    std::fs::write(frames.join("handshake_produce_metadata"), &stream)?;
    let mut single = vec![255u8];
    single.extend(frame(OpCode::ListTopics, 9, Vec::new()));
    std::fs::write(frames.join("list_topics"), single)?;
    Ok(())
}
