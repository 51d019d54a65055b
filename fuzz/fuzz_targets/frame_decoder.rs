//! Feeds arbitrary bytes to the frame decoder in arbitrary pieces, as a socket would, under
//! both the pre-handshake and the default limit. It must never panic, never report a frame
//! over its limit, and never ask for more bytes than the limit allows.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tinymq_protocol::frame::{Decoded, FrameDecoder, FRAME_HEADER_BYTES};

fuzz_target!(|data: &[u8]| {
    let Some((&split, stream)) = data.split_first() else { return };
    for decoder in [FrameDecoder::pre_handshake(), FrameDecoder::default()] {
        let limit = decoder.body_bytes_max() as usize;
        let mut buf = BytesMut::new();
        let chunk = usize::from(split).max(1);
        for piece in stream.chunks(chunk) {
            buf.extend_from_slice(piece);
            loop {
                match decoder.peek(&buf) {
                    Ok(Decoded::NeedMore { total_bytes }) => {
                        assert!(total_bytes <= FRAME_HEADER_BYTES + limit);
                        break;
                    }
                    Ok(Decoded::Complete(_)) => {
                        let frame = decoder.decode(&mut buf).unwrap().unwrap();
                        assert!(frame.body.len() <= limit);
                    }
                    Err(_) => return,
                }
            }
        }
    }
});
