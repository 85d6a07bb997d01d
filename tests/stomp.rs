//! The STOMP listener: standard frames on the same broker as the native
//! protocol, both ways, and STOMP's error cases.

use herald_client::{Destination, Message, Value};
use herald_protocol::stomp::StompFrame;
use herald_tests::*;

fn frame(command: &str) -> StompFrame {
    StompFrame::new(command)
}

#[test]
fn version_negotiation_and_heart_beats() {
    let server = start();
    let mut c = StompClient::open(&server);
    c.send(
        &frame("STOMP")
            .header("accept-version", "1.0,1.1")
            .header("heart-beat", "200,0"),
    );
    let connected = c.expect("CONNECTED");
    assert_eq!(connected.get("version"), Some("1.1"));
    assert_eq!(connected.get("heart-beat"), Some("0,200"));
    assert!(connected.get("server").unwrap().starts_with("herald/"));
    let mut old = StompClient::open(&server);
    old.send(&frame("CONNECT"));
    assert_eq!(old.expect("CONNECTED").get("version"), Some("1.0"));
    let mut none = StompClient::open(&server);
    none.send(&frame("CONNECT").header("accept-version", "2.0"));
    let e = none.expect_error();
    assert!(e.get("message").unwrap().contains("1.0,1.1,1.2"), "{e:?}");
    // Heart-beating as promised keeps it open; silence closes it.
    for _ in 0..3 {
        std::thread::sleep(std::time::Duration::from_millis(150));
        c.write(b"\n");
    }
    c.send(
        &frame("SUBSCRIBE")
            .header("id", "0")
            .header("destination", "/topic/t")
            .header("receipt", "r"),
    );
    assert_eq!(c.expect("RECEIPT").get("receipt-id"), Some("r"));
    let e = c.expect_error();
    assert!(
        e.get("message").unwrap().contains("nothing received"),
        "{e:?}"
    );
}

#[test]
fn a_native_publish_reaches_a_stomp_subscriber_with_headers_and_properties() {
    let server = start();
    let mut s = StompClient::connected(&server, &[]);
    s.send(
        &frame("SUBSCRIBE")
            .header("id", "sub-1")
            .header("destination", "/topic/sales.#")
            .header("selector", "units > 2")
            .header("receipt", "subscribed"),
    );
    s.expect("RECEIPT");
    let (_c, session) = connect(&server);
    let p = session
        .create_producer(&Destination::topic("sales.eu"))
        .unwrap();
    p.send(Message::text("few").with_property("units", 1))
        .unwrap();
    let mut m = Message::text("sold 3")
        .with_property("region", "EU")
        .with_property("units", 3);
    m.set_correlation_id(Some("c-1".into()));
    m.priority = 7;
    p.send_with_receipt(m.persistent()).unwrap();
    let got = s.expect("MESSAGE");
    assert_eq!(got.get("subscription"), Some("sub-1"));
    assert_eq!(got.get("destination"), Some("/topic/sales.eu"));
    assert_eq!(got.get("region"), Some("EU"));
    assert_eq!(got.get("units"), Some("3"));
    assert_eq!(got.get("correlation-id"), Some("c-1"));
    assert_eq!(got.get("priority"), Some("7"));
    assert_eq!(got.get("persistent"), Some("true"));
    assert_eq!(&got.body[..], b"sold 3");
}

#[test]
fn a_stomp_publish_reaches_a_native_consumer_with_properties_and_a_binary_body() {
    let server = start();
    let (_c, session) = connect(&server);
    let consumer = session
        .create_consumer(&Destination::queue("orders"))
        .unwrap();
    let mut s = StompClient::connected(&server, &[]);
    s.send(
        &frame("SEND")
            .header("destination", "/queue/orders")
            .header("content-type", "application/octet-stream")
            .header("region", "EU:west\nline")
            .header("reply-to", "/queue/replies")
            .header("receipt", "sent")
            .body(&b"\0bin\0ary"[..]),
    );
    assert_eq!(s.expect("RECEIPT").get("receipt-id"), Some("sent"));
    let m = next(&consumer);
    assert_eq!(
        m.property("region"),
        Some(&Value::String("EU:west\nline".into())),
        "escaped header round trip"
    );
    assert_eq!(m.reply_to(), Some(&Destination::queue("replies")));
    assert_eq!(
        m.body,
        herald_client::Body::Bytes(bytes::Bytes::from_static(b"\0bin\0ary"))
    );
    assert!(m.message_id().starts_with("ID:stomp-"));
}

#[test]
fn queue_consumers_share_and_client_acks_redeliver_after_disconnect() {
    let server = start();
    let (_c, session) = connect(&server);
    let p = session
        .create_producer(&Destination::queue("jobs"))
        .unwrap();
    for i in 0..4 {
        p.send_with_receipt(Message::text(i.to_string())).unwrap();
    }
    let mut a = StompClient::connected(&server, &[]);
    a.send(
        &frame("SUBSCRIBE")
            .header("id", "a")
            .header("destination", "/queue/jobs")
            .header("ack", "client-individual"),
    );
    let first = a.expect("MESSAGE");
    let ack_id = first.get("ack").unwrap().to_owned();
    a.send(
        &frame("ACK")
            .header("id", ack_id.as_str())
            .header("receipt", "acked"),
    );
    // The other three come too; none is acknowledged before the close.
    let (mut unacked, mut receipted) = (0, false);
    while unacked < 3 || !receipted {
        let f = a.read().unwrap();
        match f.command.as_str() {
            "MESSAGE" => unacked += 1,
            "RECEIPT" => receipted = true,
            other => panic!("{other}"),
        }
    }
    a.send(&frame("DISCONNECT").header("receipt", "bye"));
    assert_eq!(a.expect("RECEIPT").get("receipt-id"), Some("bye"));
    let consumer = session
        .create_consumer(&Destination::queue("jobs"))
        .unwrap();
    let again: Vec<_> = (0..3).map(|_| next(&consumer)).collect();
    // A goodbye is not a crash: STOMP cannot say which messages the
    // application read, so what was not acknowledged returns as it was.
    assert!(again
        .iter()
        .all(|m| !m.redelivered && m.delivery_count == 1));
    assert_eq!(
        again
            .iter()
            .map(|m| m.body_text().unwrap())
            .collect::<Vec<_>>(),
        ["1", "2", "3"]
    );
}

#[test]
fn client_mode_acks_cumulatively_and_nack_redelivers() {
    let server = start();
    let mut s = StompClient::connected(&server, &[]);
    s.send(
        &frame("SUBSCRIBE")
            .header("id", "q")
            .header("destination", "/queue/work")
            .header("ack", "client"),
    );
    let (_c, session) = connect(&server);
    let p = session
        .create_producer(&Destination::queue("work"))
        .unwrap();
    for i in 0..3 {
        p.send(Message::text(i.to_string())).unwrap();
    }
    let ms: Vec<_> = (0..3).map(|_| s.expect("MESSAGE")).collect();
    s.send(
        &frame("NACK")
            .header("id", ms[2].get("ack").unwrap())
            .header("receipt", "n"),
    );
    s.expect("RECEIPT");
    // NACK in client mode covers every earlier delivery too: all three
    // come again, in order.
    let again: Vec<_> = (0..3).map(|_| s.expect("MESSAGE")).collect();
    assert_eq!(
        again.iter().map(|m| m.body.clone()).collect::<Vec<_>>(),
        ms.iter().map(|m| m.body.clone()).collect::<Vec<_>>()
    );
    assert!(again.iter().all(|m| m.get("redelivered") == Some("true")));
    s.send(
        &frame("ACK")
            .header("id", again[2].get("ack").unwrap())
            .header("receipt", "a"),
    );
    s.expect("RECEIPT");
    wait_until("all settled", || {
        server.stats().queues == [("work".to_owned(), 0, 0)]
    });
}

/// Subscribes `s` to durable subscription "daily" on `news.#`, named by
/// `header`; returns the messages that arrive before the RECEIPT: it
/// comes once the subscription is kept, and what it kept may be
/// delivered before.
fn subscribe_durable(s: &mut StompClient, header: &str) -> Vec<bytes::Bytes> {
    s.send(
        &frame("SUBSCRIBE")
            .header("id", "d")
            .header("destination", "/topic/news.#")
            .header(header, "daily")
            .header("receipt", "made"),
    );
    let mut before = Vec::new();
    loop {
        let f = s.read().expect("a RECEIPT");
        match f.command.as_str() {
            "RECEIPT" => return before,
            "MESSAGE" => before.push(f.body),
            other => panic!("{other}: {f:?}"),
        }
    }
}

#[test]
fn a_durable_subscription_by_activemq_name_keeps_messages_while_away() {
    let server = start();
    let subscribe = |s: &mut StompClient| subscribe_durable(s, "activemq.subscriptionName");
    let mut s = StompClient::connected(&server, &[("client-id", "stomp-app")]);
    assert!(subscribe(&mut s).is_empty());
    s.send(&frame("DISCONNECT").header("receipt", "bye"));
    s.expect("RECEIPT");
    let (_c, session) = connect(&server);
    publish(&session, "news.sport", "while away");
    let mut s = StompClient::connected(&server, &[("client-id", "stomp-app")]);
    let mut got = subscribe(&mut s);
    if got.is_empty() {
        got.push(s.expect("MESSAGE").body);
    }
    assert_eq!(got, [&b"while away"[..]]);
}

/// Artemis's header names a durable subscription too; UNSUBSCRIBE naming
/// it deletes it (with or without the subscription open on this
/// connection), so what is published after is kept for nobody.
#[test]
fn unsubscribe_naming_a_durable_subscription_deletes_it() {
    let server = start();
    // Each time a new one, empty.
    let subscribe = |s: &mut StompClient| {
        assert!(subscribe_durable(s, "durable-subscription-name").is_empty());
    };
    let unsubscribe = |s: &mut StompClient, id: Option<&str>| {
        let mut f = frame("UNSUBSCRIBE")
            .header("durable-subscription-name", "daily")
            .header("receipt", "gone");
        if let Some(id) = id {
            f = f.header("id", id);
        }
        s.send(&f);
        assert_eq!(s.expect("RECEIPT").get("receipt-id"), Some("gone"));
    };
    let (_c, session) = connect(&server);
    let app = [("client-id", "stomp-app")];

    // Open, then deleted by the connection that has it open.
    let mut s = StompClient::connected(&server, &app);
    subscribe(&mut s);
    unsubscribe(&mut s, Some("d"));
    publish(&session, "news.sport", "after the first deletion");
    subscribe(&mut s);
    publish(&session, "news.sport", "kept");
    assert_eq!(&s.expect("MESSAGE").body[..], b"kept");
    s.send(&frame("DISCONNECT").header("receipt", "bye"));
    s.expect("RECEIPT");

    // Away, then deleted by a connection that never opened it.
    publish(&session, "news.sport", "while away");
    let mut s = StompClient::connected(&server, &app);
    unsubscribe(&mut s, None);
    subscribe(&mut s);
    publish(&session, "news.sport", "fresh");
    assert_eq!(&s.expect("MESSAGE").body[..], b"fresh");

    // A name that is not there any more is an error, as in Artemis.
    let mut other = StompClient::connected(&server, &[("client-id", "stranger")]);
    other.send(
        &frame("UNSUBSCRIBE")
            .header("activemq.subscriptionName", "daily")
            .header("receipt", "r"),
    );
    other.expect_error_saying("daily");
}

#[test]
fn bad_frames_get_an_error_and_a_close_while_others_carry_on() {
    let server = start();
    let (_c, session) = connect(&server);
    let canary = subscribe(&session, "canary");
    for (bad, needle) in [
        (
            &b"SEND\ndestination:/topic/x\n\nbefore connect\0"[..],
            "before CONNECT",
        ),
        (
            &b"CONNECT\naccept-version:1.2\n\n\0SEND\nno colon\n\n\0"[..],
            "':'",
        ),
        (
            &b"CONNECT\naccept-version:1.2\n\n\0FROB\n\n\0"[..],
            "unknown command",
        ),
        (
            &b"CONNECT\naccept-version:1.2\n\n\0SEND\ndestination:/elsewhere/x\n\n\0"[..],
            "neither /topic",
        ),
        (
            &b"CONNECT\naccept-version:1.2\n\n\0SUBSCRIBE\ndestination:/topic/a\n\n\0"[..],
            "id header",
        ),
        (
            &b"CONNECT\naccept-version:1.2\n\n\0BEGIN\n\n\0"[..],
            "transaction header",
        ),
    ] {
        let mut c = StompClient::open(&server);
        c.write(bad);
        let mut f = c.read().unwrap();
        if f.command == "CONNECTED" {
            f = c.read().unwrap();
        }
        assert_eq!(f.command, "ERROR", "{f:?}");
        let text = format!(
            "{} {}",
            f.get("message").unwrap_or_default(),
            String::from_utf8_lossy(&f.body)
        );
        assert!(text.contains(needle), "{needle}: {text}");
        assert!(c.read().is_none());
        publish(&session, "canary", "alive");
        assert_eq!(next(&canary).body_text(), Some("alive"));
    }
    // An oversized frame, and a body past max_large_message_bytes (a
    // SEND past max_frame_size is a large message), refused at its head.
    let mut config = test_config();
    config.max_frame_size = 1 << 20;
    let server = start_with(config);
    let mut c = StompClient::connected(&server, &[]);
    c.write(b"SUBSCRIBE\nid:0\ndestination:/topic/x\nfiller:");
    c.write(&vec![b'f'; 2 << 20]);
    assert!(c
        .expect_error()
        .get("message")
        .unwrap()
        .contains("exceeds max_frame_size"));
    let mut c = StompClient::connected(&server, &[]);
    c.write(b"SEND\ndestination:/topic/x\ncontent-length:99999999999\n\n");
    let e = c.expect_error();
    assert!(
        e.get("message")
            .unwrap()
            .contains("exceeds max_large_message_bytes"),
        "{e:?}"
    );
}

#[test]
fn the_server_heart_beats_when_asked() {
    let server = start();
    let mut c = StompClient::open(&server);
    c.send(
        &frame("CONNECT")
            .header("accept-version", "1.2")
            .header("heart-beat", "0,150"),
    );
    assert_eq!(c.expect("CONNECTED").get("heart-beat"), Some("150,0"));
    // Nothing to say for a while: the server sends bare EOLs, which the
    // decoder skips, so the connection stays readable and quiet. Count
    // them on the raw socket instead.
    let mut raw = [0u8; 16];
    let started = std::time::Instant::now();
    let mut beats = 0;
    while beats < 3 {
        use std::io::Read;
        let n = c.raw_stream().read(&mut raw).unwrap();
        assert!(n > 0);
        beats += raw[..n].iter().filter(|&&b| b == b'\n').count();
    }
    assert!(started.elapsed() >= std::time::Duration::from_millis(250));
}

#[test]
fn transactions_hold_sends_and_acks_until_commit_and_abort_drops_them() {
    let server = start();
    let (_c, session) = connect(&server);
    let consumer = session.create_consumer(&Destination::queue("tx")).unwrap();
    let mut s = StompClient::connected(&server, &[]);
    s.send(&frame("BEGIN").header("transaction", "t1"));
    s.send(
        &frame("SEND")
            .header("destination", "/queue/tx")
            .header("transaction", "t1")
            .body("one"),
    );
    s.send(
        &frame("SEND")
            .header("destination", "/queue/tx")
            .header("transaction", "t1")
            .body("two"),
    );
    assert_nothing(&consumer);
    s.send(
        &frame("COMMIT")
            .header("transaction", "t1")
            .header("receipt", "c"),
    );
    assert_eq!(s.expect("RECEIPT").get("receipt-id"), Some("c"));
    assert_eq!(next(&consumer).body_text(), Some("one"));
    assert_eq!(next(&consumer).body_text(), Some("two"));

    s.send(&frame("BEGIN").header("transaction", "t2"));
    s.send(
        &frame("SEND")
            .header("destination", "/queue/tx")
            .header("transaction", "t2")
            .body("never"),
    );
    s.send(
        &frame("ABORT")
            .header("transaction", "t2")
            .header("receipt", "a"),
    );
    s.expect("RECEIPT");
    assert_nothing(&consumer);

    // An ACK inside an aborted transaction leaves the message unsettled.
    s.send(
        &frame("SUBSCRIBE")
            .header("id", "q")
            .header("destination", "/queue/acks")
            .header("ack", "client-individual"),
    );
    publish_to_queue(&session, "acks", "m");
    let m = s.expect("MESSAGE");
    s.send(&frame("BEGIN").header("transaction", "t3"));
    s.send(
        &frame("ACK")
            .header("id", m.get("ack").unwrap())
            .header("transaction", "t3"),
    );
    s.send(
        &frame("ABORT")
            .header("transaction", "t3")
            .header("receipt", "a3"),
    );
    s.expect("RECEIPT");
    assert_eq!(
        server
            .stats()
            .queues
            .iter()
            .find(|q| q.0 == "acks")
            .map(|q| q.2),
        Some(1),
        "still in flight"
    );
    s.send(&frame("COMMIT").header("transaction", "nope"));
    assert!(s
        .expect_error()
        .get("message")
        .unwrap()
        .contains("no open transaction"));
}

fn publish_to_queue(session: &herald_client::Session, queue: &str, text: &str) {
    session
        .create_producer(&Destination::queue(queue))
        .unwrap()
        .send_with_receipt(Message::text(text))
        .unwrap();
}

#[test]
fn temp_queue_reply_to_gets_the_reply_back_and_is_private_and_temporary() {
    let server = start();
    let (_c, session) = connect(&server);
    let service = session
        .create_consumer(&Destination::queue("service"))
        .unwrap();
    let mut requester = StompClient::connected(&server, &[]);
    requester.send(
        &frame("SEND")
            .header("destination", "/queue/service")
            .header("reply-to", "/temp-queue/answers")
            .header("correlation-id", "q1")
            .header("receipt", "asked")
            .body("what time is it?"),
    );
    assert_eq!(requester.expect("RECEIPT").get("receipt-id"), Some("asked"));
    let request = next(&service);
    let reply_to = request.reply_to().cloned().expect("a reply-to");
    assert!(
        reply_to.name.starts_with("temp.") && reply_to.name.ends_with(".answers"),
        "{reply_to}"
    );
    let mut reply = Message::text("noon");
    reply.set_correlation_id(request.correlation_id().map(str::to_owned));
    session
        .create_producer(&reply_to)
        .unwrap()
        .send_with_receipt(reply)
        .unwrap();
    let got = requester.expect("MESSAGE");
    assert_eq!(got.get("subscription"), Some("/temp-queue/answers"));
    assert_eq!(got.get("correlation-id"), Some("q1"));
    assert_eq!(&got.body[..], b"noon");

    // Only its connection may consume from it.
    let thief = session.create_consumer(&reply_to).unwrap_err();
    assert_eq!(
        thief.server_code(),
        Some(herald_client::ErrorCode::InvalidDestination),
        "{thief}"
    );
    assert!(server.stats().queues.iter().any(|q| q.0 == reply_to.name));
    requester.send(&frame("DISCONNECT").header("receipt", "bye"));
    requester.expect("RECEIPT");
    wait_until("the temporary queue is gone", || {
        !server.stats().queues.iter().any(|q| q.0 == reply_to.name)
    });
}

#[test]
fn websocket_upgrade_carries_stomp_and_bad_upgrades_get_400() {
    use std::io::{Read, Write};
    let server = start();
    let addr = server.stomp_ws_addr().expect("WebSocket listener");
    let mut bad = std::net::TcpStream::connect(addr).unwrap();
    bad.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut answer = String::new();
    bad.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");

    let mut ws = std::net::TcpStream::connect(addr).unwrap();
    ws.set_read_timeout(Some(PATIENCE)).unwrap();
    ws.write_all(
        b"GET /stomp HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
          Sec-WebSocket-Protocol: v12.stomp\r\n\r\n",
    )
    .unwrap();
    // A masked text frame carrying CONNECT.
    let payload = b"CONNECT\naccept-version:1.2\nhost:x\n\n\0";
    let mask = [9u8, 8, 7, 6];
    let mut frame = vec![0x81, 0x80 | payload.len() as u8];
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    ws.write_all(&frame).unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("CONNECTED") {
        let n = ws.read(&mut chunk).unwrap();
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 101"), "{text}");
    assert!(
        text.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
        "{text}"
    );
    assert!(text.contains("Sec-WebSocket-Protocol: v12.stomp"), "{text}");
    // An unmasked client frame is a protocol error: ERROR, then close.
    ws.write_all(&[0x81, 0x01, b'x']).unwrap();
    let mut rest = Vec::new();
    let _ = ws.read_to_end(&mut rest);
    assert!(
        String::from_utf8_lossy(&rest).contains("masked"),
        "{}",
        String::from_utf8_lossy(&rest)
    );
}

#[test]
fn a_stomp_publisher_moves_to_its_subscribers_worker_and_keeps_order() {
    let server = start();
    let (_c, session) = connect(&server);
    let consumer = subscribe(&session, "stomp.moving");
    let mut s = StompClient::connected(&server, &[]);
    assert_eq!(server.stats().connections_per_worker, vec![1, 1]);
    let send = |s: &mut StompClient, i: u32| {
        s.send(
            &frame("SEND")
                .header("destination", "/topic/stomp.moving")
                .body(i.to_string()),
        )
    };
    // Alone on the wire until it moves, then a burst.
    let mut sent = 0;
    let deadline = std::time::Instant::now() + PATIENCE;
    while server.stats().connections_moved == 0 {
        assert!(std::time::Instant::now() < deadline, "never moved");
        send(&mut s, sent);
        sent += 1;
        std::thread::sleep(std::time::Duration::from_micros(300));
    }
    for i in sent..sent + 1000 {
        send(&mut s, i);
    }
    for i in 0..sent + 1000 {
        assert_eq!(next(&consumer).body_text(), Some(i.to_string().as_str()));
    }
    assert_eq!(server.stats().connections_moved, 1);
    s.send(
        &frame("SEND")
            .header("destination", "/topic/stomp.moving")
            .header("receipt", "after the move")
            .body("last"),
    );
    assert_eq!(
        s.expect("RECEIPT").get("receipt-id"),
        Some("after the move")
    );
    assert_eq!(next(&consumer).body_text(), Some("last"));
}

#[test]
fn a_content_type_comes_through_as_sent_with_its_charset() {
    let server = start();
    let (_c, session) = connect(&server);
    let native = session
        .create_consumer(&Destination::topic("docs"))
        .unwrap();
    let mut sub = StompClient::connected(&server, &[]);
    sub.send(
        &frame("SUBSCRIBE")
            .header("id", "1")
            .header("destination", "/topic/docs")
            .header("receipt", "subscribed"),
    );
    sub.expect("RECEIPT");
    let mut publisher = StompClient::connected(&server, &[]);
    for (content_type, body) in [
        ("application/json;charset=utf-8", &br#"{"a":1}"#[..]),
        ("text/csv; charset=ISO-8859-1", &b"caf\xe9;1"[..]),
        ("application/octet-stream", &b"\0\xff"[..]),
    ] {
        publisher.send(
            &frame("SEND")
                .header("destination", "/topic/docs")
                .header("content-type", content_type)
                .body(body),
        );
        let m = sub.expect("MESSAGE");
        assert_eq!(m.get("content-type"), Some(content_type));
        assert_eq!(&m.body[..], body, "{content_type}");
        let n = next(&native);
        assert_eq!(
            n.property("HeraldContentType"),
            Some(&Value::String(content_type.into())),
            "the native client sees it as a property"
        );
    }
    // Without one, a text body is said to be text, bytes to be bytes.
    publisher.send(
        &frame("SEND")
            .header("destination", "/topic/docs")
            .body(&b"plain"[..]),
    );
    let m = sub.expect("MESSAGE");
    assert_eq!(m.get("content-type"), Some("text/plain;charset=utf-8"));
}
