//! Feeds arbitrary bytes to the AMQP 1.0 decoders (protocol header, frame
//! header, values, performatives, SASL frames, termini, delivery states,
//! transaction controls, messages): any input must give a value or an
//! error, never a panic or an allocation beyond its size; a decoded value
//! must encode to bytes that decode to a value that encodes the same, and
//! anything else decoded must survive being written and read again. What
//! is read in place (values, transfers, message sections) reads exactly
//! what decodes, as the same thing.
#![no_main]

use herald_protocol::amqp::delivery::{DeliveryState, TxnControl};
use herald_protocol::amqp::message::{Message, Sections};
use herald_protocol::amqp::performative::Transfer;
use herald_protocol::amqp::types::Raw;
use herald_protocol::amqp::terminus::{LinkTarget, Source};
use herald_protocol::amqp::{FrameHeader, Performative, ProtocolHeader, Sasl, Value};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ProtocolHeader::read(data);
    let _ = FrameHeader::read(data, 1 << 16);
    let decoded = Value::decode(data);
    match (&decoded, Raw::read(data)) {
        // Compared by their encodings: a NaN is not equal to itself.
        (Ok((v, n)), Ok((raw, m))) => {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            raw.to_value().encode(&mut a);
            v.encode(&mut b);
            assert_eq!((a, m), (b, *n));
        }
        (Err(_), Err(_)) => {}
        (d, r) => panic!("decoded {d:?}, read in place {r:?}"),
    }
    let bytes = bytes::Bytes::copy_from_slice(data);
    if let Ok(Some((t, used))) = Transfer::read(&bytes) {
        let (value, n) = decoded.clone().expect("a transfer read in place decodes");
        assert_eq!(used, n);
        let Ok(Performative::Transfer(from_value)) = Performative::from_value(value) else {
            panic!("a transfer read in place is no transfer as a value");
        };
        let (mut a, mut b) = (Vec::new(), Vec::new());
        Performative::Transfer(t).to_value().encode(&mut a);
        Performative::Transfer(from_value).to_value().encode(&mut b);
        assert_eq!(a, b);
    }
    assert_eq!(Sections::read(data).is_ok(), Message::decode(data).is_ok());
    if let Ok((value, used)) = decoded {
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
        if let Ok(s) = Sasl::from_value(value.clone()) {
            assert_eq!(Sasl::from_value(s.to_value()).ok(), Some(s));
        }
        if let Ok(Some(s)) = Source::from_value(value.clone()) {
            assert_eq!(Source::from_value(s.to_value()).ok(), Some(Some(s)));
        }
        if let Ok(Some(t)) = LinkTarget::from_value(value.clone()) {
            assert_eq!(LinkTarget::from_value(t.to_value()).ok(), Some(Some(t)));
        }
        if let Ok(Some(d)) = DeliveryState::from_value(value.clone()) {
            assert_eq!(DeliveryState::from_value(d.to_value()).ok(), Some(Some(d)));
        }
        if let Ok(c) = TxnControl::from_value(value) {
            assert_eq!(TxnControl::from_value(c.to_value()).ok(), Some(c));
        }
    }
    if let Ok(m) = Message::decode(data) {
        let mut again = Vec::new();
        m.encode(&mut again);
        assert_eq!(Message::decode(&again).ok(), Some(m));
    }
});
