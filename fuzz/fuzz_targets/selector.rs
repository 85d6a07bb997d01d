//! Parses arbitrary text as a selector and evaluates whatever parses
//! against a message: any input must give a selector or an error within
//! the limits, never a panic, a hang or unbounded memory.
#![no_main]

use bytes::BytesMut;
use herald_protocol::message::MessageRef;
use herald_protocol::selector::Selector;
use herald_protocol::{Destination, Message, Value};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(selector) = Selector::parse(&text) else {
        return;
    };
    let mut m = Message::text("body")
        .with_property("a", Value::I32(7))
        .with_property("b", Value::String("ab%_".into()))
        .with_property("s", Value::String("x".repeat(1000)));
    m.set_destination(Some(Destination::topic("t")));
    let mut block = BytesMut::new();
    m.encode(&mut block).expect("encodes");
    selector.matches(&MessageRef::parse(&block).expect("parses"));
});
