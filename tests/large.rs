//! Large messages: bodies streamed in CHUNK frames through a real server,
//! kept in files under data_dir/large and never whole in memory.

use std::io::Read;
use std::path::Path;

use herald_client::{Destination, Error, Message};
use herald_protocol::frame::Chunk;
use herald_protocol::{Body, ErrorCode, Frame, MessageView, Streamed};
use herald_tests::*;

/// A deterministic stream of `len` bytes, different for each `seed`.
struct Pattern {
    state: u64,
    left: u64,
}

impl Pattern {
    fn new(seed: u64, len: u64) -> Pattern {
        Pattern {
            state: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            left: len,
        }
    }
}

impl Read for Pattern {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.left as usize);
        for b in &mut buf[..n] {
            self.state ^= self.state << 13;
            self.state ^= self.state >> 7;
            self.state ^= self.state << 17;
            *b = self.state as u8;
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// Reads `body` through, comparing it with pattern `seed`; the bytes read.
fn check(mut body: impl Read, seed: u64, len: u64) -> u64 {
    let mut expected = Pattern::new(seed, len);
    let (mut got, mut want) = (vec![0; 100_000], vec![0; 100_000]);
    let mut total = 0;
    loop {
        let n = body.read(&mut got).expect("the body reads");
        if n == 0 {
            return total;
        }
        expected
            .read_exact(&mut want[..n])
            .expect("not past the pattern");
        assert!(got[..n] == want[..n], "bytes {total}.. differ");
        total += n as u64;
    }
}

/// A server taking frames of 1 MiB and bodies of 4 MiB, and its data
/// directory.
fn small_frames() -> (TestServer, std::path::PathBuf) {
    let mut config = test_config();
    config.max_frame_size = 1 << 20;
    config.max_large_message_bytes = 4 << 20;
    let dir = config.data_dir.clone();
    (start_with(config), dir)
}

/// Body files in the server's data directory.
fn body_files(data_dir: &Path) -> usize {
    std::fs::read_dir(data_dir.join("large")).map_or(0, |d| d.count())
}

#[test]
fn a_large_message_streams_through_a_queue_byte_for_byte_and_its_file_goes_when_acknowledged() {
    const LEN: u64 = 40 << 20;
    let config = test_config();
    let dir = config.data_dir.clone();
    let server = start_with(config);
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("big")).unwrap();
    let m = Message::new(Body::Empty)
        .with_property("name", "film.mp4")
        .non_persistent();
    p.send_stream(m, LEN, Pattern::new(7, LEN)).unwrap();
    assert_eq!(body_files(&dir), 1);
    let metrics = call(&server, "GET", "/metrics", None, None).body;
    for line in ["herald_large_bodies 1", "herald_large_body_bytes 41943040"] {
        assert!(metrics.contains(line), "{line}: {metrics}");
    }
    let q = call(&server, "GET", "/api/queues/big", None, None).json();
    assert!(
        q["bytes"].as_u64().unwrap() < 4096,
        "the queue holds the headers only: {q}"
    );
    let consumer = s.create_consumer(&Destination::queue("big")).unwrap();
    let m = next(&consumer);
    assert_eq!(
        m.property("name").and_then(|v| v.as_str()),
        Some("film.mp4")
    );
    let Body::Stream(Streamed { len, .. }) = m.body else {
        panic!("a streamed body: {:?}", m.body);
    };
    assert_eq!(len, LEN);
    assert_eq!(check(consumer.body(&m).unwrap(), 7, LEN), LEN);
    assert!(consumer.body(&m).is_err(), "a body is taken once");
    wait_until("the body's file goes", || body_files(&dir) == 0);
}

#[test]
fn a_persistent_large_message_survives_a_restart_and_a_topic_fans_it_out() {
    const LEN: u64 = 3 << 20;
    let config = test_config();
    let dir = config.data_dir.clone();
    let server = start_with(config.clone());
    let (_c, s) = connect(&server);
    let a = subscribe(&s, "films.#");
    let b = subscribe(&s, "films.new");
    let kept = s.create_producer(&Destination::queue("kept")).unwrap();
    kept.send_stream(Message::new(Body::Empty), LEN, Pattern::new(1, LEN))
        .unwrap();
    let topic = s.create_producer(&Destination::topic("films.new")).unwrap();
    topic
        .send_stream(
            Message::new(Body::Empty).non_persistent(),
            LEN,
            Pattern::new(2, LEN),
        )
        .unwrap();
    for c in [&a, &b] {
        let m = next(c);
        assert_eq!(check(c.body(&m).unwrap(), 2, LEN), LEN);
    }
    drop((a, b, kept, topic, s, _c));
    server.stop_keeping_data();
    let server = start_with(config);
    let (_c, s) = connect(&server);
    let consumer = s.create_consumer(&Destination::queue("kept")).unwrap();
    let m = next(&consumer);
    assert_eq!(check(consumer.body(&m).unwrap(), 1, LEN), LEN);
    wait_until("the body's file goes", || body_files(&dir) == 0);
}

#[test]
fn a_body_that_fails_midway_is_dropped_and_leaves_no_file() {
    struct Failing(Pattern);
    impl Read for Failing {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            match self.0.left {
                0..=1_000_000 => Err(std::io::Error::other("the disk went away")),
                _ => self.0.read(buf),
            }
        }
    }
    let config = test_config();
    let dir = config.data_dir.clone();
    let server = start_with(config);
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("half")).unwrap();
    let e = p
        .send_stream(
            Message::new(Body::Empty),
            3_000_000,
            Failing(Pattern::new(1, 3_000_000)),
        )
        .unwrap_err();
    assert!(e.to_string().contains("the disk went away"), "{e}");
    // A short one too.
    let e = p
        .send_stream(Message::new(Body::Empty), 3_000_000, Pattern::new(1, 10))
        .unwrap_err();
    assert!(e.to_string().contains("ended after 10"), "{e}");
    // The connection goes on.
    p.send_with_receipt(Message::text("small")).unwrap();
    let consumer = s.create_consumer(&Destination::queue("half")).unwrap();
    assert_eq!(next(&consumer).body_text(), Some("small"));
    assert_nothing(&consumer);
    assert_eq!(body_files(&dir), 0);
}

/// A SEND of a large message's headers, by hand.
fn streamed_send(stream: u64, len: u64) -> Frame {
    let mut m = Message::new(Body::Stream(Streamed { len, stream }));
    m.set_destination(Some(Destination::queue("raw")));
    let mut block = bytes::BytesMut::new();
    m.encode(&mut block).unwrap();
    Frame::Send(MessageView::parse(block.freeze()).unwrap())
}

fn chunk(stream: u64, data: &'static [u8]) -> Frame {
    Frame::Chunk(Chunk {
        stream,
        data: bytes::Bytes::from_static(data),
    })
}

#[test]
fn a_client_that_goes_midway_leaves_no_file_and_bad_streams_are_refused() {
    let config = test_config();
    let data_dir = config.data_dir.clone();
    let server = start_with(config);
    let mut raw = RawClient::connected(&server, 0);
    raw.send(&streamed_send(5, 1000), 1);
    raw.send(&chunk(5, b"part of it"), 0);
    wait_until("the body's file is made", || body_files(&data_dir) == 1);
    drop(raw);
    wait_until("the body's file goes with its client", || {
        body_files(&data_dir) == 0
    });
    // More than the body said it had: the connection is closed.
    let mut raw = RawClient::connected(&server, 0);
    raw.send(&streamed_send(1, 4), 7);
    raw.send(&chunk(1, b"too long"), 0);
    let e = raw.expect_fatal(ErrorCode::Malformed);
    assert!(e.message.contains("8 more bytes, 4 were left"), "{e:?}");
    // A chunk no SEND opened.
    let mut raw = RawClient::connected(&server, 0);
    raw.send(&chunk(9, b"whose?"), 0);
    let e = raw.expect_fatal(ErrorCode::UnexpectedFrame);
    assert!(e.message.contains("no SEND opened"), "{e:?}");
    assert_eq!(body_files(&data_dir), 0);
}

#[test]
fn large_messages_are_bounded_by_size_and_per_connection() {
    let mut config = test_config();
    config.max_large_message_bytes = 1000;
    config.max_streams_per_connection = 1;
    let server = start_with(config);
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("q")).unwrap();
    let e = p
        .send_stream(Message::new(Body::Empty), 1001, Pattern::new(1, 1001))
        .unwrap_err();
    assert!(
        matches!(&e, Error::Server { code, .. } if *code == ErrorCode::LimitExceeded as u32),
        "{e}"
    );
    assert!(
        e.to_string().contains("max_large_message_bytes (1000)"),
        "{e}"
    );
    // One open stream at a time: a second SEND before the first's body.
    let mut raw = RawClient::connected(&server, 0);
    raw.send(&streamed_send(1, 10), 1);
    raw.send(&streamed_send(2, 10), 2);
    let (e, request_id) = raw.expect_error();
    assert_eq!(
        (e.code, request_id),
        (ErrorCode::LimitExceeded as u32, 2),
        "{e:?}"
    );
    assert!(e.message.contains("max_streams_per_connection"), "{e:?}");
    // The refused one's chunks are dropped; the first goes on.
    raw.send(&chunk(2, b"0123456789"), 0);
    raw.send(&chunk(1, b"0123456789"), 0);
    assert!(
        matches!(raw.read_frame(), Some((Frame::Receipt, 1))),
        "the first is receipted"
    );
    let consumer = s.create_consumer(&Destination::queue("raw")).unwrap();
    let m = next(&consumer);
    let mut body = Vec::new();
    consumer.body(&m).unwrap().read_to_end(&mut body).unwrap();
    assert_eq!(body, b"0123456789");
    // At the limit, a body goes.
    p.send_stream(Message::new(Body::Empty), 1000, Pattern::new(3, 1000))
        .unwrap();
    let consumer = s.create_consumer(&Destination::queue("q")).unwrap();
    let m = next(&consumer);
    assert!(matches!(m.body, Body::Bytes(_)), "a frame holds it: whole");
    assert_eq!(check(consumer.body(&m).unwrap(), 3, 1000), 1000);
}

#[test]
fn large_messages_page_die_and_wait_in_transactions_with_their_bodies() {
    const LEN: u64 = 2 << 20;
    let mut config = test_config();
    config.addresses = vec![herald_server::config::AddressRule {
        pattern: "queue://paged".into(),
        max_messages: Some(1),
        max_deliveries: Some(1),
        ..Default::default()
    }];
    let dir = config.data_dir.clone();
    let server = start_with(config);
    let (_c, s) = connect(&server);
    // Over its bound of one message, the queue pages the next ones: their
    // blocks leave memory and their bodies stay.
    let p = s.create_producer(&Destination::queue("paged")).unwrap();
    for seed in 1..=3 {
        let m = Message::new(Body::Empty).with_property("n", seed as i64);
        p.send_stream(m.non_persistent(), LEN, Pattern::new(seed, LEN))
            .unwrap();
    }
    let q = call(&server, "GET", "/api/queues/paged", None, None).json();
    assert_eq!(q["paged"], 2, "{q}");
    let t = factory(&server).create_connection().unwrap();
    let ts = t.create_session(herald_client::AckMode::Client).unwrap();
    let consumer = ts.create_consumer(&Destination::queue("paged")).unwrap();
    for seed in 1..=3 {
        let m = next(&consumer);
        assert_eq!(m.property("n").and_then(|v| v.as_i64()), Some(seed as i64));
        assert_eq!(check(consumer.body(&m).unwrap(), seed, LEN), LEN);
    }
    // Recovered once, past max_deliveries: each dies, body and all.
    ts.recover().unwrap();
    drop(consumer);
    let dead = s.create_consumer(&Destination::queue("DLQ.paged")).unwrap();
    for seed in 1..=3 {
        let m = next(&dead);
        assert!(!dead_letter_reason(&m).is_empty());
        assert_eq!(check(dead.body(&m).unwrap(), seed, LEN), LEN);
    }
    // In a transaction: nothing until the commit, nothing left after a
    // rollback.
    let tx = t
        .create_session(herald_client::AckMode::Transacted)
        .unwrap();
    let tp = tx.create_producer(&Destination::queue("tx")).unwrap();
    tp.send_stream(Message::new(Body::Empty), LEN, Pattern::new(8, LEN))
        .unwrap();
    tx.rollback().unwrap();
    tp.send_stream(Message::new(Body::Empty), LEN, Pattern::new(9, LEN))
        .unwrap();
    let got = s.create_consumer(&Destination::queue("tx")).unwrap();
    assert_nothing(&got);
    tx.commit().unwrap();
    let m = next(&got);
    assert_eq!(check(got.body(&m).unwrap(), 9, LEN), LEN);
    drop((got, dead));
    wait_until("every body's file goes", || body_files(&dir) == 0);
}

#[test]
fn a_stomp_subscriber_gets_a_large_body_whole_and_past_max_frame_size_streamed() {
    use herald_protocol::stomp::StompFrame;
    let mut config = test_config();
    config.max_frame_size = 1 << 20;
    let server = start_with(config);
    let mut stomp = StompClient::connected(&server, &[]);
    stomp.send(
        &StompFrame::new("SUBSCRIBE")
            .header("id", "0")
            .header("destination", "/topic/files")
            .header("receipt", "r"),
    );
    stomp.expect("RECEIPT");
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::topic("files")).unwrap();
    let small = 300_000;
    p.send_stream(
        Message::new(Body::Empty).non_persistent(),
        small,
        Pattern::new(1, small),
    )
    .unwrap();
    let m = stomp.expect("MESSAGE");
    assert_eq!(m.body.len() as u64, small);
    assert_eq!(check(&m.body[..], 1, small), small);
    // Past the server's max_frame_size, its bytes follow the frame's head
    // from the body's file, and what was sent after it comes after it.
    let big = 3 << 20;
    p.send_stream(
        Message::new(Body::Empty).non_persistent(),
        big,
        Pattern::new(2, big),
    )
    .unwrap();
    p.send_with_receipt(Message::text("after").non_persistent())
        .unwrap();
    let m = stomp.expect("MESSAGE");
    assert_eq!(m.get("content-type"), Some("application/octet-stream"));
    assert_eq!(check(&m.body[..], 2, big), big);
    assert!(m.get("HeraldBodyNotCarried").is_none());
    assert_eq!(&stomp.expect("MESSAGE").body[..], b"after");
}

#[test]
fn a_failover_midway_fails_the_large_send_and_the_resumed_connection_goes_on() {
    /// A body that comes slowly, and says when half of it has gone.
    struct Slow(Pattern, std::sync::mpsc::Sender<()>, bool);
    impl Read for Slow {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.0.left < 2_000_000 && !self.2 {
                self.2 = true;
                let _ = self.1.send(());
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
            let n = buf.len().min(64 * 1024);
            self.0.read(&mut buf[..n])
        }
    }
    let config = test_config();
    let dir = config.data_dir.clone();
    let server = start_with(config);
    let c = herald_client::ConnectionFactory::new(&format!("herald://{}", server.local_addr()))
        .unwrap()
        .with_reconnect(100, std::time::Duration::from_millis(20))
        .create_connection()
        .unwrap();
    let s = c.create_session(herald_client::AckMode::Auto).unwrap();
    let p = s.create_producer(&Destination::queue("moved")).unwrap();
    let (half, halfway) = std::sync::mpsc::channel();
    let sending = std::thread::spawn(move || {
        let body = Slow(Pattern::new(1, 4_000_000), half, false);
        let sent = p.send_stream(Message::new(Body::Empty), 4_000_000, body);
        (p, sent)
    });
    halfway.recv().unwrap();
    close_all_connections(&server);
    let (p, sent) = sending.join().unwrap();
    let e = sent.unwrap_err();
    assert!(
        matches!(e, Error::ConnectionLost(_)),
        "the send fails, and says it may not have gone: {e}"
    );
    // The resumed connection was not closed by chunks of a stream it
    // never opened, and it carries sends as before.
    wait_until("the connection is back", || {
        p.send_with_receipt(Message::text("after")).is_ok()
    });
    let consumer = s.create_consumer(&Destination::queue("moved")).unwrap();
    assert_eq!(next(&consumer).body_text(), Some("after"));
    assert_nothing(&consumer);
    assert!(!c.is_closed());
    wait_until("no body is left", || body_files(&dir) == 0);
}

#[test]
fn a_listener_hands_large_bodies_to_another_thread_and_one_it_leaves_is_dropped() {
    const LEN: u64 = 6 << 20;
    let mut config = test_config();
    config.max_frame_size = 1 << 20;
    let server = start_with(config);
    let (c, s) = connect(&server);
    let (tx, rx) = std::sync::mpsc::channel();
    // Any session of the connection reaches its bodies.
    let bodies = c.create_session(herald_client::AckMode::Auto).unwrap();
    let consumer = s.create_consumer(&Destination::queue("heard")).unwrap();
    consumer
        .set_message_listener(move |m| {
            // The first is taken and read elsewhere, the second left.
            let tx = tx.clone();
            match (&m.body, m.property("take").is_some()) {
                (Body::Stream(_), true) => {
                    let body = bodies.body(&m).unwrap();
                    std::thread::spawn(move || tx.send(check(body, 1, LEN)).unwrap());
                }
                (Body::Stream(_), false) => {}
                _ => tx.send(0).unwrap(),
            }
        })
        .unwrap();
    let p = s.create_producer(&Destination::queue("heard")).unwrap();
    let taken = Message::new(Body::Empty).with_property("take", true);
    p.send_stream(taken.non_persistent(), LEN, Pattern::new(1, LEN))
        .unwrap();
    p.send_stream(
        Message::new(Body::Empty).non_persistent(),
        LEN,
        Pattern::new(2, LEN),
    )
    .unwrap();
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), LEN);
    // The connection still carries messages after the body left unread.
    p.send_with_receipt(Message::text("after")).unwrap();
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), 0);
}

#[test]
fn an_amqp_receiver_gets_a_large_body_in_transfers_past_max_frame_size_and_then_what_followed() {
    use herald_protocol::amqp::message::Body as AmqpBody;
    use herald_protocol::amqp::{Performative, Value};
    const LEN: u64 = 3 << 20;
    let mut config = test_config();
    config.max_frame_size = 1 << 20;
    let server = start_with(config);
    let mut amqp = AmqpClient::opened(&server, "films");
    amqp.attach_receiver(0, "topic://films");
    match amqp.next(false) {
        Got::Amqp(0, Performative::Attach(a)) => assert!(!a.role_receiver),
        other => panic!("{other:?}"),
    }
    amqp.credit(0, 0, 10);
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::topic("films")).unwrap();
    let film = Message::new(Body::Empty)
        .with_property("name", "a.mp4")
        .non_persistent();
    p.send_stream(film, LEN, Pattern::new(4, LEN)).unwrap();
    p.send_with_receipt(Message::text("after").non_persistent())
        .unwrap();
    // In frames of the client's 512 bytes, 3 MiB past the server's
    // max_frame_size of 1 MiB.
    let (_, m, frames) = amqp.delivery(512);
    assert!(frames > 6000, "{frames} frames");
    let AmqpBody::Data(parts) = &m.body else {
        panic!("{:?}", m.body);
    };
    let body: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
    assert_eq!(check(&body[..], 4, LEN), LEN);
    let (_, after, _) = amqp.delivery(512);
    assert!(
        matches!(&after.body, AmqpBody::Value(Value::String(t)) if t == "after"),
        "{:?}",
        after.body
    );
}

/// A message an AMQP client sends, its body `body`.
fn amqp_wire(body: herald_protocol::amqp::message::Body) -> Vec<u8> {
    use herald_protocol::amqp::message::Message as AmqpMessage;
    use herald_protocol::amqp::Value;
    let mut wire = Vec::new();
    AmqpMessage {
        application_properties: vec![("reel".into(), Value::String("one".into()))],
        body,
        ..AmqpMessage::default()
    }
    .encode(&mut wire);
    wire
}

#[test]
fn an_amqp_sender_s_large_message_goes_to_a_file_as_its_transfers_come() {
    use herald_protocol::amqp::message::Body as AmqpBody;
    use herald_protocol::amqp::performative::Performative;
    use herald_protocol::amqp::Value;
    const LEN: usize = 3 << 20;
    let (server, dir) = small_frames();
    let mut amqp = AmqpClient::opened(&server, "reels");
    amqp.attach_sender(0, "queue://reels");
    // A sender is told it may send a large message, not only a frame.
    match amqp.next(false) {
        Got::Amqp(0, Performative::Attach(a)) => {
            assert_eq!(a.max_message_size, (4 << 20) + (1 << 20));
        }
        other => panic!("{other:?}"),
    }
    let mut body = vec![0; LEN];
    Pattern::new(5, LEN as u64).read_exact(&mut body).unwrap();
    let body = bytes::Bytes::from(body);
    // Past max_frame_size, in a data section and in a binary amqp-value.
    let data = amqp_wire(AmqpBody::Data(vec![body.clone()]));
    amqp.transfer_pieces((0, 0), &data, 64 << 10, false);
    assert!(amqp.outcome().contains("36"), "accepted");
    let value = amqp_wire(AmqpBody::Value(Value::Binary(body.slice(..LEN / 2))));
    amqp.transfer_pieces((0, 1), &value, 64 << 10, false);
    assert!(amqp.outcome().contains("36"), "accepted");
    assert_eq!(body_files(&dir), 2);
    let q = call(&server, "GET", "/api/queues/reels", None, None).json();
    assert!(q["bytes"].as_u64().unwrap() < 4096, "headers only: {q}");
    // One that ends short of its body's length, one past
    // max_large_message_bytes, and one aborted leave nothing.
    amqp.transfer_pieces((0, 2), &data[..data.len() - 100], 64 << 10, false);
    let short = amqp.outcome();
    assert!(
        short.contains("decode-error") && short.contains("100 bytes short"),
        "{short}"
    );
    let huge = amqp_wire(AmqpBody::Data(vec![bytes::Bytes::from(vec![1; 5 << 20])]));
    amqp.transfer_pieces((0, 3), &huge, 64 << 10, false);
    let limit = amqp.outcome();
    assert!(limit.contains("max_large_message_bytes"), "{limit}");
    amqp.transfer_pieces((0, 4), &data[..2 << 20], 64 << 10, true);
    amqp.transfer_pieces((0, 5), &amqp_wire(AmqpBody::Empty), 64 << 10, false);
    assert!(amqp.outcome().contains("36"), "the next goes on");
    assert_eq!(body_files(&dir), 2);
    // An AMQP receiver gets each as it was sent.
    amqp.attach_receiver(1, "queue://reels");
    assert!(matches!(
        amqp.next(false),
        Got::Amqp(0, Performative::Attach(_))
    ));
    amqp.credit(1, 0, 10);
    for expected in [
        AmqpBody::Data(vec![body.clone()]),
        AmqpBody::Value(Value::Binary(body.slice(..LEN / 2))),
    ] {
        let (_, m, _) = amqp.delivery(512);
        assert_eq!(m.application_properties[0].1, Value::String("one".into()));
        let got = match m.body {
            AmqpBody::Data(parts) => AmqpBody::Data(vec![parts.concat().into()]),
            other => other,
        };
        assert!(got == expected, "the body as sent");
    }
}

#[test]
fn a_body_sent_whole_past_its_address_threshold_is_kept_in_a_file() {
    const LEN: usize = 300_000;
    let mut config = test_config();
    config.max_frame_size = 4 << 20;
    config.addresses = vec![herald_server::config::AddressRule {
        pattern: "queue://spill.#".into(),
        large_message_threshold: Some(100_000),
        ..Default::default()
    }];
    let dir = config.data_dir.clone();
    let server = start_with(config);
    let settings = call(
        &server,
        "GET",
        "/api/addresses?destination=queue://spill.a",
        None,
        None,
    )
    .json();
    assert_eq!(settings["settings"]["large_message_threshold"], 100_000);
    let (c, s) = connect(&server);
    let mut body = vec![0; LEN];
    Pattern::new(9, LEN as u64).read_exact(&mut body).unwrap();
    let whole = |len: usize| Message::new(Body::Bytes(bytes::Bytes::copy_from_slice(&body[..len])));
    let spilled = s.create_producer(&Destination::queue("spill.a")).unwrap();
    spilled.send_with_receipt(whole(LEN)).unwrap();
    assert_eq!(body_files(&dir), 1, "past the threshold: a file");
    spilled.send_with_receipt(whole(50_000)).unwrap();
    let other = s.create_producer(&Destination::queue("other")).unwrap();
    other.send_with_receipt(whole(LEN)).unwrap();
    // In a transaction too.
    let tx = c
        .create_session(herald_client::AckMode::Transacted)
        .unwrap();
    tx.create_producer(&Destination::queue("spill.a"))
        .unwrap()
        .send(whole(LEN))
        .unwrap();
    tx.commit().unwrap();
    assert_eq!(body_files(&dir), 2, "only the two past spill.#'s threshold");
    // A native consumer gets a body a frame may hold whole, kept in a
    // file or not.
    let consumer = s.create_consumer(&Destination::queue("spill.a")).unwrap();
    for len in [LEN, 50_000, LEN] {
        let m = next(&consumer);
        assert!(matches!(&m.body, Body::Bytes(b) if b.len() == len));
        assert_eq!(check(consumer.body(&m).unwrap(), 9, len as u64), len as u64);
    }
    let m = next(&s.create_consumer(&Destination::queue("other")).unwrap());
    assert!(matches!(m.body, Body::Bytes(_)), "under its threshold");
    wait_until("the files go", || body_files(&dir) == 0);
}

#[test]
fn a_stomp_sender_s_large_body_goes_to_a_file_as_it_comes() {
    use herald_protocol::stomp::StompFrame;
    const BIG: usize = 3 << 20;
    let mut config = test_config();
    config.max_frame_size = 1 << 20;
    config.addresses = vec![herald_server::config::AddressRule {
        pattern: "queue://small.#".into(),
        large_message_threshold: Some(100_000),
        ..Default::default()
    }];
    let dir = config.data_dir.clone();
    let server = start_with(config);
    let mut stomp = StompClient::connected(&server, &[]);
    let mut body = vec![0; BIG];
    Pattern::new(6, BIG as u64).read_exact(&mut body).unwrap();
    let send = |to: &str, len: usize, receipt: &str| {
        let mut f = StompFrame::new("SEND")
            .header("destination", to)
            .header("content-type", "application/octet-stream")
            .header("receipt", receipt);
        f.body = bytes::Bytes::copy_from_slice(&body[..len]);
        f
    };
    // Past max_frame_size; past its address's threshold; under it (but
    // past another's); and in a transaction.
    stomp.send(&send("/queue/uploads", BIG, "1"));
    stomp.expect("RECEIPT");
    stomp.send(&send("/queue/small.a", 300_000, "2"));
    stomp.expect("RECEIPT");
    stomp.send(&send("/queue/uploads", 300_000, "3"));
    stomp.expect("RECEIPT");
    stomp.send(&StompFrame::new("BEGIN").header("transaction", "t"));
    stomp.send(&send("/queue/uploads", BIG, "4").header("transaction", "t"));
    stomp.expect("RECEIPT");
    stomp.send(
        &StompFrame::new("COMMIT")
            .header("transaction", "t")
            .header("receipt", "5"),
    );
    stomp.expect("RECEIPT");
    assert_eq!(body_files(&dir), 3);
    let (_c, s) = connect(&server);
    let uploads = s.create_consumer(&Destination::queue("uploads")).unwrap();
    for len in [BIG, 300_000, BIG] {
        let m = next(&uploads);
        assert_eq!(matches!(m.body, Body::Stream(_)), len == BIG, "{len}");
        assert_eq!(check(uploads.body(&m).unwrap(), 6, len as u64), len as u64);
    }
    let small = s.create_consumer(&Destination::queue("small.a")).unwrap();
    let m = next(&small);
    assert!(matches!(&m.body, Body::Bytes(b) if b.len() == 300_000));
    assert_eq!(check(small.body(&m).unwrap(), 6, 300_000), 300_000);
    wait_until("the files go", || body_files(&dir) == 0);
    // A body its NUL does not end is refused, and its file goes.
    let head = format!("SEND\ndestination:/queue/uploads\ncontent-length:{BIG}\n\n");
    stomp.write(head.as_bytes());
    stomp.write(&body);
    stomp.write(b"X");
    stomp.expect_error_saying("not followed by a NUL");
    wait_until("the file goes", || body_files(&dir) == 0);
}

#[test]
fn an_mqtt_subscriber_gets_a_large_payload_past_max_frame_size_from_its_file() {
    use herald_protocol::mqtt::{Packet, Property, QoS, Version};
    const LEN: u64 = 3 << 20;
    let mut config = test_config();
    config.max_frame_size = 1 << 20;
    let server = start_with(config);
    let mut whole = MqttClient::connected(&server, Version::V5, "whole");
    whole.subscribe("films/#", QoS::AtLeastOnce);
    // A client that takes packets of 2 MiB at most: the large one is
    // dropped for it (MQTT 5's rule), the next one comes.
    let mut limited = MqttClient::connect_packet(Version::V5, "small");
    limited
        .properties
        .0
        .push(Property::MaximumPacketSize(2 << 20));
    let (mut small, ack) = MqttClient::connect_with(&server, limited);
    assert_eq!(ack.code, 0);
    small.subscribe("films/#", QoS::AtMostOnce);
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::topic("films.new")).unwrap();
    p.send_stream(
        Message::new(Body::Empty).non_persistent(),
        LEN,
        Pattern::new(8, LEN),
    )
    .unwrap();
    p.send_with_receipt(Message::text("after").non_persistent())
        .unwrap();
    let got = whole.receive();
    assert_eq!(got.topic, "films/new");
    assert_eq!(got.payload.len() as u64, LEN);
    assert_eq!(check(&got.payload[..], 8, LEN), LEN);
    whole.acknowledge(&got);
    assert_eq!(&whole.receive().payload[..], b"after");
    match small.read() {
        Some(Packet::Publish(p)) => assert_eq!(&p.payload[..], b"after"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_mqtt_publisher_s_large_payload_goes_to_a_file_as_it_comes() {
    use herald_protocol::mqtt::{Ack, Packet, Property, QoS, Version};
    const LEN: usize = 3 << 20;
    let (server, dir) = small_frames();
    let mut body = vec![0; LEN];
    Pattern::new(11, LEN as u64).read_exact(&mut body).unwrap();
    // A client is told it may send packets past max_frame_size.
    let (mut m, ack) =
        MqttClient::connect_with(&server, MqttClient::connect_packet(Version::V5, "camera"));
    assert!(
        ack.properties
            .0
            .contains(&Property::MaximumPacketSize((4 << 20) + (1 << 20))),
        "{ack:?}"
    );
    // Past max_frame_size, at QoS 1, and at QoS 2 sent twice (its PUBREC
    // lost, say): taken once.
    let p = m.publish_packet("$queue/uploads", &body, QoS::AtLeastOnce);
    assert_eq!(m.publish(p), 0);
    let mut twice = m.publish_packet("$queue/uploads", &body, QoS::ExactlyOnce);
    let id = twice.packet_id.unwrap();
    for dup in [false, true] {
        twice.dup = dup;
        m.send(&Packet::Publish(twice.clone()));
        assert!(matches!(m.read(), Some(Packet::PubRec(a)) if a.packet_id == id && a.reason == 0));
    }
    m.send(&Packet::PubRel(Ack::ok(id)));
    assert!(matches!(m.read(), Some(Packet::PubComp(a)) if a.packet_id == id));
    assert_eq!(body_files(&dir), 2);
    // Past max_large_message_bytes: refused in its PUBACK, and the
    // connection goes on.
    let p = m.publish_packet("$queue/uploads", &vec![1; 5 << 20], QoS::AtLeastOnce);
    assert!(m.publish(p) >= 0x80, "refused");
    let p = m.publish_packet("$queue/uploads", b"after", QoS::AtLeastOnce);
    assert_eq!(m.publish(p), 0);
    assert_eq!(body_files(&dir), 2);
    let (_c, s) = connect(&server);
    let consumer = s.create_consumer(&Destination::queue("uploads")).unwrap();
    for _ in 0..2 {
        let got = next(&consumer);
        assert!(matches!(got.body, Body::Stream(_)));
        assert_eq!(
            check(consumer.body(&got).unwrap(), 11, LEN as u64),
            LEN as u64
        );
    }
    let after = next(&consumer);
    assert!(
        matches!(&after.body, Body::Bytes(b) if &b[..] == b"after"),
        "{:?}",
        after.body
    );
    wait_until("the files go", || body_files(&dir) == 0);
}
