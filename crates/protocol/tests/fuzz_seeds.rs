//! The committed fuzz seed corpora are valid inputs: every frame seed decodes into whole
//! frames with known operations and decodable bodies, and every batch seed into batches whose
//! records decode. This keeps the seeds (and the decoders) honest in every test run, not only
//! when someone fuzzes.

use std::path::PathBuf;

use bytes::{Bytes, BytesMut};
use prost::Message;
use tinymq_protocol::batch::BatchIter;
use tinymq_protocol::{messages, FrameDecoder, OpCode};

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut seeds: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap().path();
            (path.display().to_string(), std::fs::read(&path).unwrap())
        })
        .collect();
    seeds.sort();
    assert!(!seeds.is_empty(), "no seeds in {}", dir.display());
    seeds
}

#[test]
fn frame_seeds_decode_into_known_operations() {
    for (name, seed) in corpus("frame_decoder") {
        let mut buf = BytesMut::from(&seed[1..]);
        let decoder = FrameDecoder::default();
        let mut count = 0;
        while let Some(frame) = decoder.decode(&mut buf).unwrap() {
            let op = OpCode::from_code(frame.header.op_code()).expect("known operation");
            if op == OpCode::Produce {
                let produce = messages::ProduceRequest::decode(frame.body).unwrap();
                let records = produce.partitions[0].records.clone();
                assert!(BatchIter::new(records).all(|b| b.is_ok()), "{name}");
            }
            count += 1;
        }
        assert!(buf.is_empty(), "{name}: no trailing bytes");
        assert!(count > 0, "{name}");
    }
}

#[test]
fn batch_seeds_decode_with_their_records() {
    for (name, seed) in corpus("record_batch") {
        let mut batches = 0;
        for batch in BatchIter::new(Bytes::from(seed)) {
            let batch = batch.unwrap_or_else(|e| panic!("{name}: {e}"));
            let records = batch.records(1 << 20).unwrap();
            assert_eq!(records.len(), batch.record_count() as usize);
            batches += 1;
        }
        assert!(batches > 0, "{name}");
    }
}
