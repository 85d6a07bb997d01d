//! Feeds arbitrary bytes to the AMQP 1.0 decoders (protocol header, frame
//! header, values): any input must give a value or an error, never a
//! panic or an allocation beyond its size, and a decoded value must encode
//! to bytes that decode to a value that encodes the same.
#![no_main]

use herald_protocol::amqp::{FrameHeader, ProtocolHeader, Value};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ProtocolHeader::read(data);
    let _ = FrameHeader::read(data, 1 << 16);
    if let Ok((value, used)) = Value::decode(data) {
        assert!(used <= data.len());
        let mut again = Vec::new();
        value.encode(&mut again);
        let (back, _) = Value::decode(&again).expect("its own encoding decodes");
        let mut twice = Vec::new();
        back.encode(&mut twice);
        assert_eq!(again, twice);
    }
});
