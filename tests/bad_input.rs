//! Bad input is normal input: each malformed frame gets an ERROR with its
//! code and a closed connection, while other clients carry on.

use bytes::{BufMut, BytesMut};
use herald_client::ErrorCode;
use herald_protocol::frame::{Connect, Delivery};
use herald_protocol::header::Header;
use herald_protocol::{Frame, FrameKind};
use herald_tests::*;

fn header(kind: u8, request_id: u32, len: u32) -> Vec<u8> {
    let mut h = Header {
        kind: FrameKind::Ping,
        request_id,
        len,
    }
    .encode()
    .to_vec();
    h[3] = kind;
    h
}

/// Runs `bad` against a fresh raw connection while a real subscriber and
/// publisher keep working on another.
fn check(bad: impl FnOnce(&mut RawClient)) {
    let server = start();
    let (_c, session) = connect(&server);
    let consumer = subscribe(&session, "canary");
    publish(&session, "canary", "before");
    let mut raw = RawClient::connected(&server, 0);
    bad(&mut raw);
    publish(&session, "canary", "after");
    assert_eq!(next(&consumer).body_text(), Some("before"));
    assert_eq!(next(&consumer).body_text(), Some("after"));
}

#[test]
fn wrong_magic() {
    check(|raw| {
        raw.write(b"GET / HTTP/1.1\r\n\r\n");
        raw.expect_fatal(ErrorCode::BadMagic);
    });
}

#[test]
fn wrong_version() {
    check(|raw| {
        raw.write(b"HR\x07\x09\0\0\0\0\0\0\0\0");
        raw.expect_fatal(ErrorCode::UnsupportedVersion);
    });
}

#[test]
fn unknown_kind_reports_the_request_id() {
    check(|raw| {
        raw.write(&header(200, 77, 0));
        let (e, id) = raw.expect_error();
        assert_eq!((e.error_code(), id), (Some(ErrorCode::UnknownKind), 77));
        assert!(raw.read_frame().is_none());
    });
}

#[test]
fn oversized_length() {
    check(|raw| {
        raw.write(&header(FrameKind::Send as u8, 5, u32::MAX));
        let e = raw.expect_fatal(ErrorCode::FrameTooLarge);
        assert!(e.message.contains("4294967295"), "{e:?}");
    });
}

#[test]
fn truncated_body() {
    check(|raw| {
        // A SUBSCRIBE whose body stops inside its pattern.
        let mut frame = header(FrameKind::Subscribe as u8, 3, 9);
        frame.extend_from_slice(&[0, 0, 0, 1, 0, 0, 10, b'a', b'b']);
        raw.write(&frame);
        let e = raw.expect_fatal(ErrorCode::Malformed);
        assert!(e.message.contains("pattern"), "{e:?}");
    });
}

#[test]
fn garbage_after_a_valid_frame() {
    check(|raw| {
        let mut b = BytesMut::new();
        Frame::Ping.encode(1, &mut b).unwrap();
        b.put_slice(b"\xde\xad\xbe\xef garbage");
        raw.write(&b);
        assert!(
            matches!(raw.read_frame(), Some((Frame::Pong, 1))),
            "the valid frame is served"
        );
        raw.expect_fatal(ErrorCode::BadMagic);
    });
}

#[test]
fn frame_before_connect() {
    let server = start();
    let mut raw = RawClient::open(&server);
    raw.send(&Frame::Ping, 1);
    raw.expect_fatal(ErrorCode::NotConnected);
}

#[test]
fn connect_twice() {
    check(|raw| {
        raw.send(&Frame::Connect(Connect::default()), 0);
        raw.expect_fatal(ErrorCode::AlreadyConnected);
    });
}

#[test]
fn a_server_only_frame_from_a_client() {
    check(|raw| {
        let mut b = BytesMut::new();
        b.put_slice(&Delivery::encode_head(0, 1, 1, 1, 0));
        raw.write(&b);
        raw.expect_fatal(ErrorCode::Malformed);
        // A well-formed server frame is refused for what it is.
    });
    check(|raw| {
        raw.send(&Frame::Receipt, 4);
        let (e, id) = raw.expect_error();
        assert_eq!((e.error_code(), id), (Some(ErrorCode::UnexpectedFrame), 4));
    });
}

#[test]
fn a_message_with_a_bad_block_is_refused_and_not_forwarded() {
    check(|raw| {
        // A SEND whose destination is a wildcard: forwarding it would hand
        // subscribers something they must not see.
        let mut block = BytesMut::new();
        block.put_slice(&[0, 4, 0, 0, 3]);
        block.put_slice(b"a.#");
        let mut frame = header(FrameKind::Send as u8, 6, block.len() as u32);
        frame.extend_from_slice(&block);
        raw.write(&frame);
        let (e, id) = raw.expect_error();
        assert_eq!((e.error_code(), id), (Some(ErrorCode::Malformed), 6));
    });
}

#[test]
fn a_destination_right_after_a_good_one_is_still_checked() {
    // The server does not check a destination again while a burst
    // repeats one it routed; a name that differs, however alike, is.
    let server = start();
    let (_c, session) = connect(&server);
    let consumer = subscribe(&session, "a.#");
    for bad in [&b"a.*"[..], b"a.\xff", b"a.."] {
        let mut raw = RawClient::connected(&server, 0);
        let mut burst = Vec::new();
        for (id, name) in [(1, &b"a.b"[..]), (2, b"a.b"), (3, bad)] {
            let mut m = herald_client::Message::text(id.to_string());
            m.set_destination(Some(herald_client::Destination::topic("a.b")));
            let mut block = BytesMut::new();
            m.encode(&mut block).unwrap();
            // flags, priority, kind, the name's length, then the name.
            assert_eq!(&block[3..8], b"\0\x03a.b");
            block[5..8].copy_from_slice(name);
            burst.extend(header(FrameKind::Send as u8, id, block.len() as u32));
            burst.extend_from_slice(&block);
        }
        // One write: the three are read and handled in one burst.
        raw.write(&burst);
        for id in [1, 2] {
            assert!(matches!(raw.read_frame(), Some((Frame::Receipt, rid)) if rid == id));
        }
        let (e, id) = raw.expect_error();
        assert_eq!(
            (e.error_code(), id, e.fatal),
            (Some(ErrorCode::Malformed), 3, true)
        );
    }
    for _ in 0..3 {
        assert_eq!(next(&consumer).body_text(), Some("1"));
        assert_eq!(next(&consumer).body_text(), Some("2"));
    }
    assert_nothing(&consumer);
}

#[test]
fn a_header_that_is_not_utf8_is_refused_and_not_forwarded() {
    // The server checks a SEND's message id and reply-to as UTF-8 (ASCII
    // at a glance, the full check otherwise): beyond ASCII they pass, a
    // broken byte is refused.
    let server = start();
    let (_c, session) = connect(&server);
    let consumer = subscribe(&session, "a.#");
    let block = |id: &str, reply_to: &str| {
        let mut m = herald_client::Message::text(format!("{id} {reply_to}"))
            .with_destination(herald_client::Destination::topic("a.b"))
            .with_reply_to(herald_client::Destination::topic(reply_to));
        m.set_message_id(id);
        let mut block = BytesMut::new();
        m.encode(&mut block).unwrap();
        block
    };
    let send = |raw: &mut RawClient, request: u32, block: &[u8]| {
        let mut frame = header(FrameKind::Send as u8, request, block.len() as u32);
        frame.extend_from_slice(block);
        raw.write(&frame);
    };
    for (id, reply_to) in [("ID:\u{e9}", "r"), ("ID:1", "r.\u{e9}")] {
        let good = block(id, reply_to);
        // The é's first byte made a lone continuation byte.
        let mut bad = good.clone();
        let at = bad.iter().position(|&b| b == 0xc3).unwrap();
        bad[at] = 0xa9;
        let mut raw = RawClient::connected(&server, 0);
        send(&mut raw, 1, &good);
        assert!(matches!(raw.read_frame(), Some((Frame::Receipt, 1))));
        send(&mut raw, 2, &bad);
        let (e, rid) = raw.expect_error();
        assert_eq!((e.error_code(), rid), (Some(ErrorCode::Malformed), 2));
        assert_eq!(
            next(&consumer).body_text(),
            Some(format!("{id} {reply_to}").as_str())
        );
    }
    assert_nothing(&consumer);
}

#[test]
fn a_socket_closed_mid_frame_is_cleaned_up() {
    let server = start();
    let mut raw = RawClient::connected(&server, 0);
    raw.write(&header(FrameKind::Send as u8, 1, 1000)[..]);
    raw.write(&[0u8; 10]);
    drop(raw);
    wait_until("the half-sent connection is closed", || {
        server.stats().connections_per_worker.iter().sum::<usize>() == 0
    });
}
