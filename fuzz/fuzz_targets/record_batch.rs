//! Parses arbitrary bytes as back-to-back record batches and decodes every batch that passes
//! its CRC, with a small decompression limit. Nothing may panic; decoded records must agree
//! with the batch header.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use tinymq_protocol::batch::{BatchIter, RecordBatch};

fuzz_target!(|data: &[u8]| {
    let bytes = Bytes::copy_from_slice(data);
    for batch in BatchIter::new(bytes.clone()).flatten() {
        if let Ok(records) = batch.records(1 << 20) {
            assert_eq!(records.len(), batch.record_count() as usize);
        }
    }
    let _ = RecordBatch::parse(bytes);
});
