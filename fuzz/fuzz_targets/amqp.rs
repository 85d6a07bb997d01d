//! Feeds arbitrary bytes to the AMQP 1.0 decoders (protocol header, frame
//! header, values, performatives, SASL frames): any input must give a
//! value or an error, never a panic or an allocation beyond its size; a
//! decoded value must encode to bytes that decode to a value that encodes
//! the same, and a performative or SASL frame must survive being written
//! and read again.
#![no_main]

use herald_protocol::amqp::{FrameHeader, Performative, ProtocolHeader, Sasl, Value};
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
        // A performative or SASL frame that reads writes what it read.
        if let Ok(p) = Performative::from_value(value.clone()) {
            assert_eq!(Performative::from_value(p.to_value()).ok(), Some(p));
        }
        if let Ok(s) = Sasl::from_value(value) {
            assert_eq!(Sasl::from_value(s.to_value()).ok(), Some(s));
        }
    }
});
