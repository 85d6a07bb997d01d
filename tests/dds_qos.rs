//! DDS-style QoS per subscription: best-effort reliability (dropped rather
//! than slowing anyone down or being disconnected), deadlines (the
//! exception listener hears when nothing came in time), and temporary
//! topics (their owner alone receives, even against wildcards).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use herald_client::{
    AckMode, ConnectionFactory, ConsumerOptions, Destination, Error, ErrorCode, Message,
};
use herald_protocol::frame::Subscribe;
use herald_protocol::{DestinationKind, Frame};
use herald_tests::*;

/// A raw subscriber that never reads, subscribed to `topic`.
fn never_reads(server: &TestServer, topic: &str) -> RawClient {
    let mut raw = RawClient::connected(server, 0);
    let mut subscribe = Subscribe::new(1, DestinationKind::Topic, topic);
    subscribe.best_effort = true;
    raw.send(&Frame::Subscribe(subscribe), 1);
    assert!(matches!(raw.read_frame(), Some((Frame::Receipt, 1))));
    raw
}

#[test]
fn a_best_effort_subscriber_that_never_reads_loses_messages_not_its_connection() {
    // The slow-consumer policy is "disconnect": a plain subscriber that
    // never reads is cut off (tests/lifecycle.rs); a best-effort one is not.
    let mut config = test_config();
    config.max_pending_bytes = 1 << 20;
    config.max_frame_size = 64 * 1024;
    let server = start_with(config);
    let mut stalled = never_reads(&server, "feed");
    let (_c, s) = connect(&server);
    let healthy = subscribe(&s, "feed");
    let (_pc, ps) = connect(&server);
    let p = ps.create_producer(&Destination::topic("feed")).unwrap();
    let body = "x".repeat(16 * 1024);
    // 32 MiB: more than the socket buffers and the limit hold. The
    // publisher stays a few messages ahead of the healthy subscriber.
    const N: usize = 2048;
    const AHEAD: usize = 16;
    for i in 0..N + AHEAD {
        if i < N {
            p.send_with_receipt(Message::text(body.clone()).non_persistent())
                .unwrap();
        }
        if i >= AHEAD {
            assert!(next(&healthy).body_text().is_some());
        }
    }
    assert_eq!(healthy.dropped(), 0);
    assert!(
        server.stats().dropped > 0,
        "the stalled one's messages were dropped"
    );
    // Still connected: it reads what was kept, no ERROR among it.
    let mut got = 0;
    stalled.send(&Frame::Ping, 99);
    loop {
        match stalled.read_frame() {
            Some((Frame::Message(_), _)) => got += 1,
            Some((Frame::Pong, 99)) => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(got > 0 && got < N, "kept {got} of {N}");
}

#[test]
fn best_effort_is_refused_where_it_makes_no_sense() {
    let server = start();
    let (_c, s) = connect(&server);
    let e = s
        .create_consumer_with(
            &Destination::queue("q"),
            ConsumerOptions::default().best_effort(),
        )
        .unwrap_err();
    assert!(e.to_string().contains("best effort"), "{e}");
    let c = factory(&server).create_connection().unwrap();
    let client = c.create_session(AckMode::Client).unwrap();
    assert!(client
        .create_consumer_with(
            &Destination::topic("t"),
            ConsumerOptions::default().best_effort()
        )
        .is_err());
    // The server refuses it too.
    let mut raw = RawClient::connected(&server, 0);
    let mut subscribe = Subscribe::new(1, DestinationKind::Queue, "q");
    subscribe.best_effort = true;
    raw.send(&Frame::Subscribe(subscribe), 5);
    let (e, id) = raw.expect_error();
    assert_eq!(
        (e.code, id, e.fatal),
        (ErrorCode::Malformed as u32, 5, false)
    );
}

#[test]
fn a_missed_deadline_reaches_the_exception_listener() {
    let server = start();
    let c = factory(&server).create_connection().unwrap();
    let missed = Arc::new(Mutex::new(Vec::new()));
    let sink = missed.clone();
    c.set_exception_listener(move |e| {
        if let Error::DeadlineMissed {
            destination,
            period_ms,
        } = e
        {
            sink.lock().unwrap().push((destination, period_ms));
        }
    });
    let s = c.create_session(AckMode::Auto).unwrap();
    let options = ConsumerOptions::default().deadline(Duration::from_millis(1000));
    let ticks = s
        .create_consumer_with(&Destination::topic("ticks"), options)
        .unwrap();
    let quiet = s
        .create_consumer_with(
            &Destination::topic("never"),
            ConsumerOptions::default().deadline(Duration::from_millis(150)),
        )
        .unwrap();
    let (_pc, ps) = connect(&server);
    let p = ps.create_producer(&Destination::topic("ticks")).unwrap();
    // Well inside its deadline, "ticks" is not reported while the silent
    // one is, again each period.
    for _ in 0..12 {
        p.send(Message::text("tick")).unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    let reported = missed.lock().unwrap().clone();
    assert!(reported.iter().all(|(d, _)| d == "never"), "{reported:?}");
    assert!(reported.len() >= 2, "{reported:?}");
    assert_eq!(reported[0].1, 150);
    // Once "ticks" falls silent, it is reported too.
    wait_until("ticks misses its deadline", || {
        missed
            .lock()
            .unwrap()
            .iter()
            .any(|(d, p)| d == "ticks" && *p == 1000)
    });
    assert!(ticks.receive(Duration::ZERO).unwrap().is_some());
    drop(quiet);
    let e = s
        .create_consumer_with(
            &Destination::topic("t"),
            ConsumerOptions::default().deadline(Duration::ZERO),
        )
        .unwrap_err();
    assert!(e.to_string().contains("deadline"), "{e}");
}

#[test]
fn a_temporary_topic_reaches_its_owner_only() {
    let server = start();
    let (_oc, owner) = connect(&server);
    let temp = owner.create_temporary_topic();
    let mine = owner.create_consumer(&temp).unwrap();
    let (_xc, other) = connect(&server);
    // Another connection's wildcard does not see it, nor may it subscribe.
    let everything = subscribe(&other, "#");
    let e = other.create_consumer(&temp).unwrap_err();
    assert_eq!(e.server_code(), Some(ErrorCode::InvalidDestination), "{e}");
    // Anyone may publish to it.
    other
        .create_producer(&temp)
        .unwrap()
        .send_with_receipt(Message::text("for the owner"))
        .unwrap();
    assert_eq!(next(&mine).body_text(), Some("for the owner"));
    assert_nothing(&everything);
    // Nor durably, not even the owner.
    let c = ConnectionFactory::new(&format!("herald://{}", server.local_addr()))
        .unwrap()
        .with_client_id("keeper")
        .create_connection()
        .unwrap();
    let s = c.create_session(AckMode::Auto).unwrap();
    let t = s.create_temporary_topic();
    assert!(s.create_durable_subscriber(&t, "d").is_err());
}
