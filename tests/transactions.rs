//! Transacted sessions: sends and acknowledgements held until commit,
//! rollback, connection death, a panicking listener, refused commits, and
//! committed persistent work across a restart.

use herald_client::{AckMode, Connection, Consumer, Destination, ErrorCode, Message, Session};
use herald_protocol::frame::{Commit, Settle, TxSend};
use herald_protocol::{Frame, FrameKind, MessageView};
use herald_tests::*;
use std::sync::{Arc, Mutex};

fn transacted(server: &TestServer) -> (Connection, Session) {
    let c = factory(server).create_connection().unwrap();
    let s = c.create_session(AckMode::Transacted).unwrap();
    (c, s)
}

fn queue_consumer(s: &Session, name: &str) -> Consumer {
    s.create_consumer(&Destination::queue(name)).unwrap()
}

fn fill(server: &TestServer, queue: &str, n: usize) {
    let (_c, s) = connect(server);
    let p = s.create_producer(&Destination::queue(queue)).unwrap();
    for i in 0..n {
        p.send_with_receipt(Message::text(format!("m{i}"))).unwrap();
    }
}

#[test]
fn sends_are_invisible_until_commit() {
    let server = start();
    let (_c, s) = transacted(&server);
    let (_oc, observer) = connect(&server);
    let orders = queue_consumer(&observer, "orders");
    let events = subscribe(&observer, "events.#");
    let q = s.create_producer(&Destination::queue("orders")).unwrap();
    let t = s
        .create_producer(&Destination::topic("events.new"))
        .unwrap();
    for i in 0..3 {
        q.send(Message::text(format!("order {i}"))).unwrap();
        t.send(Message::text(format!("event {i}")).persistent())
            .unwrap();
    }
    assert_nothing(&orders);
    assert_nothing(&events);
    s.commit().unwrap();
    for i in 0..3 {
        assert_eq!(next(&orders).body_text(), Some(&*format!("order {i}")));
        assert_eq!(next(&events).body_text(), Some(&*format!("event {i}")));
    }
    // The next transaction starts empty.
    s.commit().unwrap();
    assert_nothing(&orders);
}

#[test]
fn rollback_drops_sends_and_redelivers_what_was_received() {
    let server = start();
    fill(&server, "in", 3);
    let (_c, s) = transacted(&server);
    let input = queue_consumer(&s, "in");
    let out = s.create_producer(&Destination::queue("out")).unwrap();
    for _ in 0..3 {
        let m = next(&input);
        assert!(!m.redelivered);
        out.send(Message::text("derived")).unwrap();
    }
    s.rollback().unwrap();
    for i in 0..3 {
        let m = next(&input);
        assert_eq!(m.body_text(), Some(&*format!("m{i}")), "order kept");
        assert!(m.redelivered);
        assert_eq!(m.delivery_count, 2);
    }
    s.commit().unwrap();
    let (_oc, observer) = connect(&server);
    assert_nothing(&queue_consumer(&observer, "out"));
    assert_nothing(&queue_consumer(&observer, "in"));
}

#[test]
fn a_connection_that_dies_mid_transaction_rolls_it_back() {
    let server = start();
    fill(&server, "in", 2);
    {
        let (c, s) = transacted(&server);
        let input = queue_consumer(&s, "in");
        let out = s.create_producer(&Destination::queue("out")).unwrap();
        next(&input);
        out.send(Message::text("never")).unwrap();
        drop(input);
        drop(c);
    }
    let (_c, s) = connect(&server);
    let input = queue_consumer(&s, "in");
    let first = next(&input);
    assert_eq!(first.body_text(), Some("m0"));
    assert!(first.redelivered);
    assert_eq!(next(&input).body_text(), Some("m1"));
    assert_nothing(&queue_consumer(&s, "out"));
}

#[test]
fn a_listener_that_panics_inside_a_transaction_rolls_it_back() {
    let server = start();
    fill(&server, "in", 1);
    let (_c, s) = transacted(&server);
    let s = Arc::new(s);
    let out = s.create_producer(&Destination::queue("out")).unwrap();
    let input = queue_consumer(&s, "in");
    let seen = Arc::new(Mutex::new(Vec::new()));
    {
        let (s, seen) = (s.clone(), seen.clone());
        input
            .set_message_listener(move |m| {
                seen.lock().unwrap().push(m.delivery_count);
                out.send(Message::text(format!("processed #{}", m.delivery_count)))
                    .unwrap();
                if !m.redelivered {
                    panic!("the first attempt fails halfway");
                }
                s.commit().unwrap();
            })
            .unwrap();
    }
    let (_oc, observer) = connect(&server);
    let results = queue_consumer(&observer, "out");
    let only = next(&results);
    assert_eq!(
        only.body_text(),
        Some("processed #2"),
        "the first send was rolled back"
    );
    assert_nothing(&results);
    assert_eq!(*seen.lock().unwrap(), [1, 2]);
}

#[test]
fn a_commit_that_cannot_succeed_does_nothing_and_says_why() {
    let mut config = test_config();
    config.queues.max_messages = 2;
    config.queues.full_policy = herald_server::config::FullPolicy::Fail;
    let server = start_with(config);
    fill(&server, "in", 1);
    let (_c, s) = transacted(&server);
    let input = queue_consumer(&s, "in");
    next(&input);
    let out = s.create_producer(&Destination::queue("small")).unwrap();
    for _ in 0..3 {
        out.send(Message::text("too many")).unwrap();
    }
    let e = s.commit().unwrap_err();
    assert_eq!(
        e.server_code(),
        Some(ErrorCode::TransactionRolledBack),
        "{e}"
    );
    assert!(e.to_string().contains("small"), "{e}");
    // Rolled back: the consumed message comes again, nothing was sent.
    let again = next(&input);
    assert!(again.redelivered);
    let (_oc, observer) = connect(&server);
    assert_nothing(&queue_consumer(&observer, "small"));
    // The session goes on: a transaction that fits commits.
    out.send(Message::text("fits")).unwrap();
    s.commit().unwrap();
    assert_eq!(
        next(&queue_consumer(&observer, "small")).body_text(),
        Some("fits")
    );
}

#[test]
fn a_transaction_over_the_byte_limit_is_rolled_back() {
    let mut config = test_config();
    config.max_frame_size = 1 << 20;
    config.max_transaction_bytes = config.max_frame_size as usize;
    let server = start_with(config);
    let (c, s) = transacted(&server);
    let errors = Arc::new(Mutex::new(Vec::new()));
    let sink = errors.clone();
    c.set_exception_listener(move |e| sink.lock().unwrap().push(e.to_string()));
    let p = s.create_producer(&Destination::queue("big")).unwrap();
    let body = "x".repeat(200_000);
    for _ in 0..10 {
        p.send(Message::text(body.clone())).unwrap();
    }
    let e = s.commit().unwrap_err();
    assert_eq!(
        e.server_code(),
        Some(ErrorCode::TransactionRolledBack),
        "{e}"
    );
    assert!(e.to_string().contains("max_transaction_bytes"), "{e}");
    wait_until("the limit is reported", || {
        !errors.lock().unwrap().is_empty()
    });
    let (_oc, observer) = connect(&server);
    assert_nothing(&queue_consumer(&observer, "big"));
    // The connection is still usable.
    p.send(Message::text("small")).unwrap();
    s.commit().unwrap();
    assert_eq!(
        next(&queue_consumer(&observer, "big")).body_text(),
        Some("small")
    );
}

#[test]
fn commit_and_rollback_need_a_transacted_session() {
    let server = start();
    let (_c, s) = connect(&server);
    for result in [s.commit(), s.rollback()] {
        let e = result.unwrap_err();
        assert!(e.to_string().contains("not transacted"), "{e}");
    }
}

#[test]
fn committed_persistent_work_survives_a_restart() {
    let config = test_config();
    let dir = config.data_dir.clone();
    let server = start_with(config);
    {
        let (_c, s) = connect(&server);
        let p = s.create_producer(&Destination::queue("in")).unwrap();
        for i in 0..4 {
            p.send(Message::text(format!("in {i}")).persistent())
                .unwrap();
        }
        let (_tc, t) = transacted(&server);
        let input = queue_consumer(&t, "in");
        let out = t.create_producer(&Destination::queue("out")).unwrap();
        for _ in 0..2 {
            let m = next(&input);
            out.send(Message::text(format!("from {}", m.body_text().unwrap())).persistent())
                .unwrap();
        }
        t.commit().unwrap();
        // A second transaction, never committed.
        next(&input);
        out.send(Message::text("uncommitted").persistent()).unwrap();
    }
    server.stop_keeping_data();
    let mut config = test_config();
    config.data_dir = dir;
    let server = start_with(config);
    let (_c, s) = connect(&server);
    let input = queue_consumer(&s, "in");
    assert_eq!(next(&input).body_text(), Some("in 2"));
    assert_eq!(next(&input).body_text(), Some("in 3"));
    assert_nothing(&input);
    let out = queue_consumer(&s, "out");
    assert_eq!(next(&out).body_text(), Some("from in 0"));
    assert_eq!(next(&out).body_text(), Some("from in 1"));
    assert_nothing(&out);
}

#[test]
fn malformed_transaction_frames_are_refused() {
    let server = start();
    let mut raw = RawClient::connected(&server, 0);
    // A TX_SEND too short to hold its transaction id.
    let mut bytes = bytes::BytesMut::new();
    herald_protocol::codec::encode_frame(&mut bytes, FrameKind::TxSend, 1, |d| {
        d.extend_from_slice(&[0, 0]);
        Ok(())
    })
    .unwrap();
    raw.write(&bytes);
    raw.expect_fatal(herald_protocol::ErrorCode::Malformed);

    // A COMMIT listing a delivery this connection does not hold: the
    // transaction is refused, the connection stays usable.
    let mut raw = RawClient::connected(&server, 0);
    let mut block = bytes::BytesMut::new();
    let mut m = Message::text("held");
    m.set_destination(Some(Destination::queue("q")));
    m.encode(&mut block).unwrap();
    let message = MessageView::parse(block.freeze()).unwrap();
    raw.send(
        &Frame::TxSend(TxSend {
            transaction_id: 5,
            message,
        }),
        0,
    );
    raw.send(
        &Frame::Commit(Commit {
            transaction_id: 5,
            consumed: Settle {
                delivery_ids: vec![u64::MAX],
            },
        }),
        7,
    );
    let (f, id) = raw.expect_error();
    assert_eq!(id, 7);
    assert_eq!(f.code, ErrorCode::TransactionRolledBack as u32, "{f:?}");
    assert!(!f.fatal);
    raw.send(&Frame::Ping, 8);
    assert!(matches!(raw.read_frame(), Some((Frame::Pong, 8))));
}
