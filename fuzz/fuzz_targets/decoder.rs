//! Feeds arbitrary bytes to the frame decoder and every body decoder, in
//! arbitrary chunks: any input must give frames or errors, never a panic,
//! and a decoded frame must re-encode to bytes that decode to it again.
#![no_main]

use bytes::BytesMut;
use herald_protocol::{Decoder, Frame, Message};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&split, data)) = data.split_first() else {
        return;
    };
    let decoder = Decoder::new(1 << 16);
    let mut buf = BytesMut::new();
    // Deliver the input in two reads at a fuzzer-chosen point.
    let cut = usize::from(split) % (data.len() + 1);
    for chunk in [&data[..cut], &data[cut..]] {
        buf.extend_from_slice(chunk);
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(raw)) => {
                    let request_id = raw.header.request_id;
                    if let Ok(frame) = Frame::decode(raw) {
                        if let Frame::Message(d) = &frame {
                            if let Ok(m) = Message::decode(&d.message, d.delivery_count) {
                                // Read from the block when asked for.
                                let _ = (m.message_id(), m.destination(), m.correlation_id());
                                let _ = (m.reply_to(), m.message_type());
                            }
                        }
                        let mut again = BytesMut::new();
                        frame.encode(request_id, &mut again).expect("a decoded frame re-encodes");
                        let raw = decoder.decode(&mut again).expect("re-encoded frame decodes").expect("whole");
                        Frame::decode(raw).expect("re-encoded body decodes");
                    }
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
});
