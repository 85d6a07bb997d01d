//! Connections coming and going: heart-beats, graceful and abrupt ends,
//! server shutdown, limits.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use herald_client::{Destination, Error, ErrorCode, Message};
use herald_protocol::Frame;
use herald_tests::*;

#[test]
fn a_silent_connection_is_closed_after_its_heartbeat_interval() {
    let server = start();
    // Before CONNECT: the server's silence clock starts after this.
    let started = Instant::now();
    let mut raw = RawClient::connected(&server, 200);
    let e = raw.expect_fatal(ErrorCode::HeartbeatTimeout);
    assert!(e.message.contains("200 ms"), "{e:?}");
    assert!(started.elapsed() >= Duration::from_millis(200));
}

#[test]
fn a_silent_connection_that_never_connects_is_closed() {
    let mut config = test_config();
    config.connect_timeout_ms = 150;
    let server = start_with(config);
    let mut raw = RawClient::open(&server);
    raw.expect_fatal(ErrorCode::HeartbeatTimeout);
}

/// A connection with a 150 ms heart-beat whose exception listener's
/// reports arrive on the receiver, and a session of it.
fn heartbeating(
    server: &TestServer,
) -> (
    herald_client::Connection,
    mpsc::Receiver<String>,
    herald_client::Session,
) {
    let factory = factory(server).with_heartbeat(Duration::from_millis(150));
    let connection = factory.create_connection().unwrap();
    let (tx, rx) = mpsc::channel();
    connection.set_exception_listener(move |e| {
        let _ = tx.send(e.to_string());
    });
    let session = connection
        .create_session(herald_client::AckMode::Auto)
        .unwrap();
    (connection, rx, session)
}

#[test]
fn the_client_heartbeat_keeps_an_idle_connection_alive() {
    let server = start();
    let (connection, rx, session) = heartbeating(&server);
    assert_eq!(connection.heartbeat(), Duration::from_millis(150));
    let consumer = subscribe(&session, "quiet");
    // Ten intervals of idleness.
    assert!(
        rx.recv_timeout(Duration::from_millis(1500)).is_err(),
        "no error while idle"
    );
    assert!(!connection.is_closed());
    let (_c2, s2) = connect(&server);
    publish(&s2, "quiet", "still here");
    assert_eq!(next(&consumer).body_text(), Some("still here"));
}

#[test]
fn a_producer_that_never_stops_sending_still_hears_the_server() {
    let server = start();
    let (connection, rx, session) = heartbeating(&server);
    let producer = session
        .create_producer(&herald_client::Destination::topic("busy"))
        .unwrap();
    // Ten intervals of sending without a pause, and with nothing (no
    // receipt, no message) coming back but the answers to its PINGs.
    let until = std::time::Instant::now() + Duration::from_millis(1500);
    while std::time::Instant::now() < until {
        producer.send(herald_client::Message::text("m")).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(rx.try_recv().is_err(), "the connection was not given up");
    assert!(!connection.is_closed());
}

#[test]
fn disconnect_gets_a_receipt_and_removes_subscriptions() {
    let server = start();
    let (connection, session) = connect(&server);
    let _consumer = subscribe(&session, "a.#");
    assert_eq!(server.stats().subscriptions, 1);
    connection.close().unwrap();
    assert!(connection.is_closed());
    wait_until("subscriptions are gone", || {
        server.stats().subscriptions == 0
    });
    let e = session
        .create_producer(&Destination::topic("a"))
        .unwrap()
        .send(Message::text("x"));
    assert!(matches!(e, Err(Error::Closed)), "{e:?}");
}

#[test]
fn an_abruptly_dead_client_is_cleaned_up() {
    let server = start();
    let mut raw = RawClient::connected(&server, 0);
    raw.subscribe(9, "x.#", 1);
    assert!(matches!(raw.read_frame(), Some((Frame::Receipt, 1))));
    assert_eq!(server.stats().subscriptions, 1);
    // Reset, not FIN: the socket is dropped with unread data pending.
    raw.stream.set_linger_for_test();
    drop(raw);
    wait_until("the dead client's subscription is gone", || {
        server.stats().subscriptions == 0
    });
    // Publishing to where it was is harmless.
    let (_c, s) = connect(&server);
    publish(&s, "x.y", "nobody home");
}

/// Dropping a socket whose receive buffer holds unread bytes makes the
/// kernel send RST: the abrupt death of a crashed process.
trait Linger {
    fn set_linger_for_test(&self);
}

impl Linger for std::net::TcpStream {
    fn set_linger_for_test(&self) {
        // Ask for a PONG and never read it.
        use std::io::Write;
        let mut b = bytes::BytesMut::new();
        Frame::Ping.encode(0, &mut b).unwrap();
        (&*self).write_all(&b).unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn server_shutdown_tells_connected_clients() {
    let server = start();
    let (connection, session) = connect(&server);
    let consumer = subscribe(&session, "t");
    let (tx, rx) = mpsc::channel();
    connection.set_exception_listener(move |e| {
        let _ = tx.send(e);
    });
    let mut raw = RawClient::connected(&server, 0);
    server.shutdown();
    let e = raw.expect_fatal(ErrorCode::ServerShutdown);
    assert!(e.message.contains("shutting down"));
    // The server's code stays with the error, for the listener and for
    // every later call.
    let told = rx.recv_timeout(PATIENCE).unwrap();
    assert_eq!(
        told.server_code(),
        Some(ErrorCode::ServerShutdown),
        "{told}"
    );
    assert!(told.to_string().contains("shutting down"), "{told}");
    assert!(matches!(told, Error::Server { fatal: true, .. }));
    let later = consumer.receive(PATIENCE).unwrap_err();
    assert_eq!(
        later.server_code(),
        Some(ErrorCode::ServerShutdown),
        "{later}"
    );
    let send = session
        .create_producer(&herald_client::Destination::topic("t"))
        .unwrap()
        .send(herald_client::Message::text("m"))
        .unwrap_err();
    assert_eq!(
        send.server_code(),
        Some(ErrorCode::ServerShutdown),
        "{send}"
    );
    assert!(connection.is_closed());
    drop(connection);
}

#[test]
fn dropping_a_connection_to_a_dead_server_does_not_hang() {
    let server = start();
    let (connection, session) = connect(&server);
    let consumer = subscribe(&session, "t");
    drop(server);
    let started = Instant::now();
    drop(consumer);
    drop(session);
    drop(connection);
    assert!(started.elapsed() < PATIENCE);
}

#[test]
fn connections_over_the_limit_are_refused_with_a_reason() {
    let mut config = test_config();
    config.max_connections = 2;
    let server = start_with(config);
    let _a = RawClient::connected(&server, 0);
    let _b = RawClient::connected(&server, 0);
    let mut c = RawClient::open(&server);
    let e = c.expect_fatal(ErrorCode::LimitExceeded);
    assert!(e.message.contains('2'), "{e:?}");
    let refused = factory(&server).create_connection();
    assert!(
        matches!(&refused, Err(Error::Server { code, .. }) if *code == ErrorCode::LimitExceeded as u32),
        "{:?}",
        refused.err()
    );
}

#[test]
fn a_subscriber_that_never_reads_is_cut_off_and_others_get_everything() {
    let mut config = test_config();
    config.max_pending_bytes = 4 << 20;
    config.max_frame_size = 64 * 1024;
    let server = start_with(config);
    let mut stalled = RawClient::connected(&server, 0);
    stalled.subscribe(1, "firehose", 1);
    let (_c, session) = connect(&server);
    let healthy = subscribe(&session, "firehose");
    let (_pc, ps) = connect(&server);
    let producer = ps.create_producer(&Destination::topic("firehose")).unwrap();
    let body = "x".repeat(16 * 1024);
    // 64 MiB in all: far more than the socket buffers and the limit hold.
    // The publisher stays at most 16 messages ahead of the healthy
    // subscriber, so however slowly this machine schedules it, the healthy
    // one never has more than 256 KiB waiting while the stalled one's
    // backlog grows past the limit.
    const AHEAD: usize = 16;
    for i in 0..4096 + AHEAD {
        if i < 4096 {
            producer
                .send_with_receipt(Message::text(body.clone()).non_persistent())
                .unwrap();
        }
        if i >= AHEAD {
            assert!(next(&healthy).body_text().is_some());
        }
    }
    let (e, _) = stalled.expect_error();
    assert_eq!(e.error_code(), Some(ErrorCode::SlowConsumer), "{e:?}");
    assert_eq!(healthy.dropped(), 0);
}

/// A subscriber that reads about 16 MB/s gets 32 MiB published as fast as
/// the publisher can, through a server allowed 4 MiB of backlog per
/// connection. Returns what it received in order, the first error its
/// connection reported, and the server's publisher pauses.
fn burst_to_a_slow_reader(grace_ms: u32) -> (u32, Option<Error>, u64) {
    let mut config = test_config();
    config.max_pending_bytes = 4 << 20;
    config.max_frame_size = 64 * 1024;
    config.slow_consumer_grace_ms = grace_ms;
    let server = start_with(config);
    let (sc, session) = connect(&server);
    let (error_tx, errors) = mpsc::channel();
    sc.set_exception_listener(move |e| {
        let _ = error_tx.send(e);
    });
    let consumer = subscribe(&session, "burst");
    let (tx, received) = mpsc::channel();
    let mut n = 0u32;
    consumer
        .set_message_listener(move |m| {
            n += 1;
            if n.is_multiple_of(4) {
                std::thread::sleep(Duration::from_millis(1));
            }
            let _ = tx.send(m.body_text().and_then(|t| t.get(..8)).map(str::to_owned));
        })
        .unwrap();
    let (_pc, ps) = connect(&server);
    let producer = ps.create_producer(&Destination::topic("burst")).unwrap();
    const COUNT: u32 = 8192;
    let pad = "x".repeat(4096);
    for i in 0..COUNT {
        producer
            .send(Message::text(format!("{i:08}{pad}")).non_persistent())
            .unwrap();
    }
    let mut in_order = 0;
    let mut error = None;
    let deadline = Instant::now() + Duration::from_secs(30);
    while in_order < COUNT && error.is_none() && Instant::now() < deadline {
        match received.recv_timeout(Duration::from_millis(100)) {
            Ok(seq) => {
                assert_eq!(seq, Some(format!("{in_order:08}")), "out of order");
                in_order += 1;
            }
            Err(_) => error = errors.try_recv().ok(),
        }
    }
    (in_order, error, server.stats().publisher_pauses)
}

#[test]
fn a_publisher_faster_than_its_subscriber_pauses_and_nothing_is_lost() {
    let (received, error, pauses) = burst_to_a_slow_reader(1000);
    assert_eq!(error.map(|e| e.to_string()), None);
    assert_eq!(received, 8192);
    assert!(pauses > 0);
}

#[test]
fn without_a_grace_period_the_same_burst_cuts_the_subscriber_off() {
    let (received, error, pauses) = burst_to_a_slow_reader(0);
    assert!(received < 8192, "got all {received}");
    // The connection ends with the server's reason.
    let error = error.expect("an error for the subscriber").to_string();
    assert!(error.contains("slow consumer"), "{error}");
    assert_eq!(pauses, 0);
}

/// Resident memory of this process, in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

#[test]
fn with_drop_oldest_a_stalled_subscriber_loses_old_messages_and_memory_stays_bounded() {
    let mut config = test_config();
    config.max_pending_bytes = 2 << 20;
    config.max_frame_size = 64 * 1024;
    config.slow_consumer = herald_server::config::SlowConsumerPolicy::DropOldest;
    let server = start_with(config);
    let mut stalled = RawClient::connected(&server, 0);
    stalled.subscribe(1, "firehose", 1);
    assert!(matches!(stalled.read_frame(), Some((Frame::Receipt, 1))));
    let (_c, session) = connect(&server);
    let healthy = subscribe(&session, "firehose");
    let (_pc, ps) = connect(&server);
    let producer = ps.create_producer(&Destination::topic("firehose")).unwrap();
    let body = "x".repeat(16 * 1024);
    let before = rss();
    // 128 MiB through the server; the healthy subscriber keeps up (the
    // publisher stays a few messages ahead of it), the stalled one never
    // reads.
    const AHEAD: usize = 16;
    for i in 0..8192 + AHEAD {
        if i < 8192 {
            producer
                .send_with_receipt(Message::text(body.clone()).non_persistent())
                .unwrap();
        }
        if i >= AHEAD {
            next(&healthy);
        }
    }
    let grown = rss().saturating_sub(before);
    assert!(
        grown < 48 << 20,
        "memory grew by {grown} bytes for a stalled subscriber"
    );
    assert!(server.stats().dropped > 0);
    // Still connected: it can read what is left and is answered.
    raw_ping(&mut stalled);
}

/// Sends PING and reads until its PONG.
fn raw_ping(c: &mut RawClient) {
    c.send(&Frame::Ping, 77);
    loop {
        match c.read_frame() {
            Some((Frame::Pong, 77)) => return,
            Some((Frame::Message(_), _)) => {}
            other => panic!("expected MESSAGEs then PONG, got {other:?}"),
        }
    }
}
