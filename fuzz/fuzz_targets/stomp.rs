//! Feeds arbitrary bytes to the STOMP decoder in both escape modes: any
//! input must give frames or errors, never a panic, and a decoded frame
//! must encode to bytes that decode to the same frame.
#![no_main]

use bytes::BytesMut;
use herald_protocol::stomp::{StompDecoder, StompLimits};
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
    }
});
