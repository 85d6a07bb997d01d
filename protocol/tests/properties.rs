//! Property tests over everything that reads untrusted input: the native
//! frame decoder, the STOMP decoder, the selector parser and evaluator,
//! and the topic matcher. Each runs a few hundred random cases on every
//! `cargo test`; a failure is shrunk to a small input, which becomes a
//! regression test of its own. `PROPTEST_CASES=100000 cargo test -p
//! herald-protocol --test properties` runs a longer search.

use bytes::BytesMut;
use herald_protocol::destination::PatternWord;
use herald_protocol::message::MessageRef;
use herald_protocol::selector::{Selector, SelectorLimits};
use herald_protocol::stomp::{StompDecoder, StompFrame, StompLimits};
use herald_protocol::{Decoder, Destination, Frame, Message, Pattern, Value};
use proptest::prelude::*;

/// Feeds `data` to the frame decoder in two reads split at `cut`; every
/// frame that decodes must encode again to bytes that decode to a frame
/// that encodes to the same bytes.
fn decode_in_two_reads(data: &[u8], cut: usize) {
    let decoder = Decoder::new(1 << 16);
    let mut buf = BytesMut::new();
    let cut = cut % (data.len() + 1);
    for chunk in [&data[..cut], &data[cut..]] {
        buf.extend_from_slice(chunk);
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(raw)) => {
                    let request_id = raw.header.request_id;
                    let Ok(frame) = Frame::decode(raw) else {
                        continue;
                    };
                    let mut again = BytesMut::new();
                    frame.encode(request_id, &mut again).unwrap();
                    let first = again.clone();
                    let raw = decoder.decode(&mut again).unwrap().unwrap();
                    let mut twice = BytesMut::new();
                    Frame::decode(raw)
                        .unwrap()
                        .encode(request_id, &mut twice)
                        .unwrap();
                    assert_eq!(first, twice);
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
}

/// Frames as bytes: a valid header (magic, version, a kind, a length that
/// fits) followed by random bytes, so that the body decoders are reached.
fn framed() -> impl Strategy<Value = Vec<u8>> {
    (
        1u8..=40,
        any::<u32>(),
        prop::collection::vec(any::<u8>(), 0..200),
    )
        .prop_map(|(kind, request_id, body)| {
            let mut v = vec![0x48, 0x52, 1, kind];
            v.extend_from_slice(&request_id.to_be_bytes());
            v.extend_from_slice(&(body.len() as u32).to_be_bytes());
            v.extend_from_slice(&body);
            v
        })
}

/// Selector-ish text: tokens of the language in random order, so that
/// the parser gets past the lexer, plus random characters.
fn selector_text() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("a".to_owned()),
        Just("b".to_owned()),
        Just("JMSPriority".to_owned()),
        Just("'x'".to_owned()),
        Just("'%a_'".to_owned()),
        Just("3".to_owned()),
        Just("2.5".to_owned()),
        Just("(".to_owned()),
        Just(")".to_owned()),
        Just(",".to_owned()),
        Just("=".to_owned()),
        Just("<>".to_owned()),
        Just("<".to_owned()),
        Just("+".to_owned()),
        Just("-".to_owned()),
        Just("*".to_owned()),
        Just("/".to_owned()),
        Just("AND".to_owned()),
        Just("OR".to_owned()),
        Just("NOT".to_owned()),
        Just("BETWEEN".to_owned()),
        Just("LIKE".to_owned()),
        Just("ESCAPE".to_owned()),
        Just("IN".to_owned()),
        Just("IS".to_owned()),
        Just("NULL".to_owned()),
        Just("TRUE".to_owned()),
        Just("MATCHES".to_owned()),
        Just("'a+'".to_owned()),
        "\\PC{0,3}",
    ];
    prop::collection::vec(token, 0..40).prop_map(|t| t.join(" "))
}

/// A message with properties `a` (an int), `b` (a string) and `s`.
fn message(a: i32, b: &str, s: &str) -> BytesMut {
    let mut m = Message::text("body")
        .with_property("a", Value::I32(a))
        .with_property("b", Value::String(b.to_owned()))
        .with_property("s", Value::String(s.to_owned()));
    m.set_destination(Some(Destination::topic("t")));
    let mut out = BytesMut::new();
    m.encode(&mut out).unwrap();
    out
}

/// Topic words and patterns over a small alphabet, so that they match.
fn word() -> impl Strategy<Value = String> {
    prop_oneof![Just("a"), Just("b"), Just("c")].prop_map(str::to_owned)
}

fn pattern_text() -> impl Strategy<Value = String> {
    let w = prop_oneof![word(), Just("*".to_owned()), Just("#".to_owned())];
    prop::collection::vec(w, 1..8).prop_map(|w| w.join("."))
}

fn topic() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(word(), 1..8)
}

/// The plain recursive definition of matching, exponential but obviously
/// right: the reference the real matcher must agree with.
fn reference(pattern: &[PatternWord], name: &[String]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some((PatternWord::Hash, rest)) => (0..=name.len()).any(|i| reference(rest, &name[i..])),
        Some((PatternWord::Star, rest)) => !name.is_empty() && reference(rest, &name[1..]),
        Some((PatternWord::Literal(w), rest)) => {
            name.first() == Some(w) && reference(rest, &name[1..])
        }
    }
}

proptest! {
    #[test]
    fn the_frame_decoder_never_panics(data in prop::collection::vec(any::<u8>(), 0..300), cut: usize) {
        decode_in_two_reads(&data, cut);
    }

    #[test]
    fn well_framed_garbage_decodes_or_is_refused(data in framed(), cut: usize) {
        decode_in_two_reads(&data, cut);
    }

    #[test]
    fn the_stomp_decoder_never_panics(data in prop::collection::vec(any::<u8>(), 0..300)) {
        for escape in [false, true] {
            let mut d = StompDecoder::new(StompLimits { max_frame_size: 256, max_headers: 8 });
            d.set_escape(escape);
            let mut buf = BytesMut::from(&data[..]);
            while let Ok(Some(_)) = d.decode(&mut buf) {}
        }
    }

    #[test]
    fn stomp_frames_survive_the_wire(
        headers in prop::collection::vec(("[a-z:]{1,6}", "\\PC{0,12}"), 0..6),
        body in prop::collection::vec(any::<u8>(), 0..50),
    ) {
        let mut frame = StompFrame::new("MESSAGE").header("destination", "/topic/t");
        for (name, value) in &headers {
            frame = frame.header(name.as_str(), value.as_str());
        }
        let frame = frame.body(body.clone());
        for escape in [false, true] {
            let mut wire = BytesMut::new();
            frame.encode(escape, &mut wire);
            let mut d = StompDecoder::new(StompLimits { max_frame_size: 1 << 16, max_headers: 16 });
            d.set_escape(escape);
            let back = d.decode(&mut wire).unwrap().unwrap();
            prop_assert!(wire.is_empty(), "exactly one frame");
            prop_assert_eq!(&back.body[..], &body[..]);
            // What arrives is what was sent, less what could not be sent.
            for (name, value) in &back.headers {
                if name != "content-length" {
                    prop_assert!(frame.headers.contains(&(name.clone(), value.clone())));
                }
            }
        }
    }

    #[test]
    fn selectors_parse_or_are_refused_and_evaluate_without_panic(
        text in selector_text(),
        a: i32,
        b in "\\PC{0,8}",
        s in "[ab%_]{0,40}",
    ) {
        if let Ok(selector) = Selector::parse(&text) {
            let block = message(a, &b, &s);
            selector.matches(&MessageRef::parse(&block).unwrap());
        }
    }

    #[test]
    fn arbitrary_text_never_crashes_the_selector_parser(text in "\\PC{0,200}") {
        let _ = Selector::parse(&text);
    }

    #[test]
    fn nesting_past_the_limit_is_refused(depth in 0usize..200) {
        let limits = SelectorLimits::default();
        let text = format!("{}a = 1{}", "(".repeat(depth), ")".repeat(depth));
        prop_assert_eq!(Selector::parse(&text).is_ok(), depth <= limits.max_depth);
    }

    #[test]
    fn like_agrees_with_a_regular_expression(pattern in "[ab%_]{0,8}", s in "[ab]{0,12}") {
        let selector = Selector::parse(&format!("s LIKE '{pattern}'")).unwrap();
        let regex: String = pattern
            .chars()
            .map(|c| match c {
                '%' => ".*".to_owned(),
                '_' => ".".to_owned(),
                c => c.to_string(),
            })
            .collect();
        let expected = Selector::parse(&format!("s MATCHES '^{regex}$'")).unwrap();
        let block = message(0, "", &s);
        let m = MessageRef::parse(&block).unwrap();
        prop_assert_eq!(selector.matches(&m), expected.matches(&m));
    }

    #[test]
    fn topic_matching_agrees_with_the_reference(p in pattern_text(), t in topic()) {
        let pattern = Pattern::parse(&p).unwrap();
        prop_assert_eq!(pattern.matches(&t.join(".")), reference(pattern.words(), &t));
    }

    #[test]
    fn a_covering_pattern_matches_all_the_covered_one_does(
        p in pattern_text(),
        q in pattern_text(),
        topics in prop::collection::vec(topic(), 20),
    ) {
        let (p, q) = (Pattern::parse(&p).unwrap(), Pattern::parse(&q).unwrap());
        if p.covers(&q) {
            for t in topics {
                let name = t.join(".");
                prop_assert!(!q.matches(&name) || p.matches(&name), "{} covers {} but not {}", p, q, name);
            }
        }
    }
}
