//! Feeds arbitrary bytes to the MQTT decoder, as a server's (CONNECT
//! first) and as 3.1.1's and 5.0's after CONNECT: any input must give
//! packets or errors, never a panic, and a decoded packet must encode to
//! bytes that decode to the same packet. Decoded with a threshold for
//! large PUBLISHes, a head's payload is left to be read on its own.
#![no_main]

use bytes::BytesMut;
use herald_protocol::mqtt::{encode, Decoded, Decoder, Packet, Version};
use libfuzzer_sys::fuzz_target;

const MAX: usize = 1 << 16;

fuzz_target!(|data: &[u8]| {
    for start in [None, Some(Version::V311), Some(Version::V5)] {
        let mut decoder = match start {
            None => Decoder::new(MAX),
            Some(v) => Decoder::with_version(v, MAX),
        };
        let mut buf = BytesMut::from(data);
        while let Ok(Some(packet)) = decoder.decode(&mut buf) {
            let version = match &packet {
                Packet::Connect(c) => c.version,
                _ => decoder.version().expect("known after a packet"),
            };
            let mut wire = BytesMut::new();
            encode(&packet, version, &mut wire);
            let mut again = match &packet {
                Packet::Connect(_) => Decoder::new(MAX),
                _ => Decoder::with_version(version, MAX),
            };
            assert_eq!(again.decode(&mut wire), Ok(Some(packet)));
            assert!(wire.is_empty());
        }
        let Some(version) = start else {
            continue;
        };
        let mut decoder = Decoder::with_version(version, MAX);
        let mut buf = BytesMut::from(data);
        while let Ok(Some(decoded)) = decoder.decode_or_head(&mut buf, 16) {
            if let Decoded::Head { publish, payload_len } = decoded {
                assert!(publish.payload.is_empty() && payload_len > 16);
                // The payload, as the server takes it.
                let _ = buf.split_to(payload_len.min(buf.len()));
            }
        }
    }
});
