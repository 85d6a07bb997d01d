//! Acknowledgement modes, redelivery and the dead-letter queue.

use std::sync::mpsc;
use std::time::Duration;

use herald_client::{AckMode, ConsumerOptions, Destination, Error, ErrorCode, Message};
use herald_tests::*;

fn session(
    server: &herald_server::ServerHandle,
    mode: AckMode,
) -> (herald_client::Connection, herald_client::Session) {
    let c = factory(server).create_connection().unwrap();
    let s = c.create_session(mode).unwrap();
    (c, s)
}

fn fill(server: &herald_server::ServerHandle, queue: &str, n: i32) {
    fill_through(&factory(server), queue, n);
}

fn fill_through(factory: &herald_client::ConnectionFactory, queue: &str, n: i32) {
    let c = factory.create_connection().unwrap();
    let s = c.create_session(AckMode::Auto).unwrap();
    let p = s.create_producer(&Destination::queue(queue)).unwrap();
    for i in 0..n {
        p.send_with_receipt(Message::text(i.to_string())).unwrap();
    }
}

#[test]
fn client_mode_redelivers_unacknowledged_messages_when_the_consumer_closes() {
    let server = start();
    fill(&server, "q", 3);
    let (_c, s) = session(&server, AckMode::Client);
    let consumer = s.create_consumer(&Destination::queue("q")).unwrap();
    assert_eq!(next(&consumer).body_text(), Some("0"));
    s.acknowledge().unwrap();
    let m1 = next(&consumer);
    assert!(!m1.redelivered);
    next(&consumer);
    consumer.close().unwrap();
    let (_c2, s2) = connect(&server);
    let other = s2.create_consumer(&Destination::queue("q")).unwrap();
    let again = next(&other);
    assert_eq!(again.body_text(), Some("1"));
    assert!(again.redelivered);
    assert_eq!(again.delivery_count, 2);
    assert_eq!(next(&other).body_text(), Some("2"));
    assert_nothing(&other);
}

#[test]
fn a_killed_connection_gives_its_unacknowledged_messages_to_another_consumer() {
    let server = start();
    fill(&server, "jobs", 2);
    let mut raw = RawClient::connected(&server, 0);
    raw.send(
        &herald_protocol::Frame::Subscribe(herald_protocol::frame::Subscribe {
            acknowledged: true,
            ..herald_protocol::frame::Subscribe::new(
                1,
                herald_protocol::DestinationKind::Queue,
                "jobs",
            )
        }),
        1,
    );
    let mut messages = 0;
    while messages < 2 {
        if let Some((herald_protocol::Frame::Message(_), _)) = raw.read_frame() {
            messages += 1;
        }
    }
    drop(raw);
    let (_c, s) = connect(&server);
    let consumer = s.create_consumer(&Destination::queue("jobs")).unwrap();
    for expected in ["0", "1"] {
        let m = next(&consumer);
        assert_eq!((m.body_text(), m.redelivered), (Some(expected), true));
    }
}

#[test]
fn individual_mode_acknowledges_one_message_at_a_time() {
    let server = start();
    fill(&server, "ind", 3);
    let (_c, s) = session(&server, AckMode::Individual);
    let consumer = s.create_consumer(&Destination::queue("ind")).unwrap();
    let m0 = next(&consumer);
    let m1 = next(&consumer);
    let m2 = next(&consumer);
    s.acknowledge_message(&m1).unwrap();
    assert!(s.acknowledge_message(&m1).is_err(), "not twice");
    s.recover().unwrap();
    let again: Vec<_> = (0..2).map(|_| next(&consumer)).collect();
    assert_eq!(
        again
            .iter()
            .map(|m| m.body_text().unwrap())
            .collect::<Vec<_>>(),
        ["0", "2"]
    );
    assert!(again.iter().all(|m| m.redelivered));
    drop((m0, m2));
}

#[test]
fn recover_redelivers_in_order_including_unread_prefetched_messages() {
    let server = start();
    fill(&server, "rec", 4);
    let (_c, s) = session(&server, AckMode::Client);
    let consumer = s.create_consumer(&Destination::queue("rec")).unwrap();
    next(&consumer);
    next(&consumer);
    wait_until("all four prefetched", || server.stats().messages_out == 4);
    s.recover().unwrap();
    let again: Vec<_> = (0..4).map(|_| next(&consumer)).collect();
    assert_eq!(
        again
            .iter()
            .map(|m| m.body_text().unwrap())
            .collect::<Vec<_>>(),
        ["0", "1", "2", "3"]
    );
    assert_eq!(
        again.iter().map(|m| m.redelivered).collect::<Vec<_>>(),
        [true, true, true, true]
    );
}

#[test]
fn auto_mode_redelivers_what_a_panicking_listener_failed_then_dead_letters_it() {
    let mut config = test_config();
    config.queues.max_deliveries = 3;
    let server = start_with(config);
    fill(&server, "fragile", 1);
    let (_c, s) = session(&server, AckMode::Auto);
    let consumer = s.create_consumer(&Destination::queue("fragile")).unwrap();
    let (tx, rx) = mpsc::channel();
    consumer
        .set_message_listener(move |m| {
            tx.send(m.delivery_count).unwrap();
            panic!("listener failure under test");
        })
        .unwrap();
    let counts: Vec<u32> = (0..3).map(|_| rx.recv_timeout(PATIENCE).unwrap()).collect();
    assert_eq!(counts, [1, 2, 3]);
    let (_c2, s2) = connect(&server);
    let dlq = s2
        .create_consumer(&Destination::queue("DLQ.fragile"))
        .unwrap();
    let dead = next(&dlq);
    assert_eq!(dead.body_text(), Some("0"));
    assert_eq!(
        dead.property("HeraldOriginalDestination")
            .and_then(|v| v.as_str()),
        Some("queue://fragile")
    );
    let reason = dead_letter_reason(&dead);
    assert!(reason.contains("3 deliveries"), "{reason}");
    assert!(
        rx.recv_timeout(Duration::from_millis(200)).is_err(),
        "not delivered a fourth time"
    );
}

#[test]
fn dups_ok_acknowledges_in_batches_and_everything_is_consumed() {
    let server = start();
    fill(&server, "lazy", 200);
    let (_c, s) = session(&server, AckMode::DupsOk);
    let consumer = s
        .create_consumer_with(
            &Destination::queue("lazy"),
            ConsumerOptions::default().prefetch(100),
        )
        .unwrap();
    for i in 0..200 {
        assert_eq!(next(&consumer).body_text(), Some(i.to_string().as_str()));
    }
    assert_nothing(&consumer);
    wait_until("every delivery acknowledged", || {
        server.stats().queues == [("lazy".to_owned(), 0, 0)]
    });
}

#[test]
fn topic_subscriptions_in_client_mode_are_redelivered_on_recover() {
    let server = start();
    let (_c, s) = session(&server, AckMode::Client);
    let consumer = subscribe(&s, "alerts.#");
    let (_pc, ps) = connect(&server);
    publish(&ps, "alerts.fire", "a");
    publish(&ps, "alerts.flood", "b");
    next(&consumer);
    next(&consumer);
    s.recover().unwrap();
    assert!(next(&consumer).redelivered);
    assert!(next(&consumer).redelivered);
    s.acknowledge().unwrap();
    s.recover().unwrap();
    assert_nothing(&consumer);
}

#[test]
fn one_ack_settles_deliveries_of_several_queues_and_names_only_the_unknown() {
    use herald_protocol::frame::{Settle, Subscribe};
    use herald_protocol::{DestinationKind, Frame};
    let server = start();
    let mut raw = RawClient::connected(&server, 0);
    for (id, queue) in [(1, "acks.a"), (2, "acks.b")] {
        let mut subscribe = Subscribe::new(id, DestinationKind::Queue, queue);
        subscribe.acknowledged = true;
        raw.send(&Frame::Subscribe(subscribe), id);
        assert!(matches!(raw.read_frame(), Some((Frame::Receipt, r)) if r == id));
    }
    let (_c, session) = connect(&server);
    for queue in ["acks.a", "acks.b"] {
        let producer = session.create_producer(&Destination::queue(queue)).unwrap();
        for i in 0..3 {
            producer
                .send_with_receipt(Message::text(i.to_string()))
                .unwrap();
        }
    }
    let mut by_queue: [Vec<u64>; 2] = Default::default();
    while by_queue.iter().map(Vec::len).sum::<usize>() < 6 {
        match raw.read_frame() {
            Some((Frame::Message(d), _)) => {
                by_queue[d.subscription_id as usize - 1].push(d.delivery_id)
            }
            other => panic!("expected MESSAGE, got {other:?}"),
        }
    }
    // The two queues' deliveries interleaved, an unknown id among them.
    let [a, b] = &by_queue;
    let delivery_ids = vec![a[0], b[0], a[1], 999, b[1], a[2], b[2]];
    raw.send(&Frame::Ack(Settle { delivery_ids }), 7);
    let (e, id) = raw.expect_error();
    assert_eq!((e.error_code(), id), (Some(ErrorCode::UnknownDelivery), 7));
    assert!(e.message.ends_with(": 999"), "{e:?}");
    assert!(e.message.starts_with("1 delivery"), "{e:?}");
    let queues = server.stats().queues;
    for queue in ["acks.a", "acks.b"] {
        let (_, waiting, unacked) = queues.iter().find(|q| q.0 == queue).unwrap();
        assert_eq!((*waiting, *unacked), (0, 0), "{queue}: {queues:?}");
    }
}

#[test]
fn acknowledging_unknown_deliveries_is_an_error_and_harmless() {
    let server = start();
    let mut raw = RawClient::connected(&server, 0);
    raw.send(
        &herald_protocol::Frame::Ack(herald_protocol::frame::Settle {
            delivery_ids: vec![42, 43],
        }),
        9,
    );
    let (e, id) = raw.expect_error();
    assert_eq!(
        (e.error_code(), id, e.fatal),
        (Some(ErrorCode::UnknownDelivery), 9, false)
    );
    assert!(e.message.contains("42"), "{e:?}");
    raw.send(&herald_protocol::Frame::Ping, 10);
    assert!(matches!(
        raw.read_frame(),
        Some((herald_protocol::Frame::Pong, 10))
    ));
    // An ACK whose count disagrees with its length is malformed.
    let mut frame = herald_protocol::header::Header {
        kind: herald_protocol::FrameKind::Ack,
        request_id: 11,
        len: 12,
    }
    .encode()
    .to_vec();
    frame.extend_from_slice(&[0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 1]);
    raw.write(&frame);
    raw.expect_fatal(ErrorCode::Malformed);
    let _ = Error::Closed;
}

#[test]
fn a_recover_with_a_bad_count_is_malformed_and_one_for_nothing_is_harmless() {
    let server = start();
    let mut raw = RawClient::connected(&server, 0);
    raw.send(
        &herald_protocol::Frame::Recover(herald_protocol::frame::Recover {
            subscription_ids: vec![5, 6],
        }),
        3,
    );
    assert!(matches!(
        raw.read_frame(),
        Some((herald_protocol::Frame::Receipt, 3))
    ));
    let mut frame = herald_protocol::header::Header {
        kind: herald_protocol::FrameKind::Recover,
        request_id: 4,
        len: 6,
    }
    .encode()
    .to_vec();
    frame.extend_from_slice(&[0, 0, 0, 9, 0, 1]);
    raw.write(&frame);
    raw.expect_fatal(ErrorCode::Malformed);
}

/// Waits until the server holds nothing of `queue`: nothing waiting, nothing
/// in flight.
fn settled(server: &herald_server::ServerHandle, queue: &str) {
    wait_until("the queue is empty and settled", || {
        server
            .stats()
            .queues
            .iter()
            .any(|(name, depth, in_flight)| name == queue && *depth == 0 && *in_flight == 0)
    });
}

/// JMS: a listener's acknowledge (or commit) covers the message it is
/// handling. Each mode's listener settles in its own way, on messages
/// that waited for the listener (it runs on the thread that sets it,
/// while more arrive for the reader thread to hand it) and on messages
/// that came after (on the reader thread); once its connection has
/// closed, nothing comes back to the queue.
#[test]
fn a_listener_acknowledges_or_commits_the_message_it_is_handling() {
    let server = start();
    for (queue, mode) in [
        ("by.client", AckMode::Client),
        ("by.individual", AckMode::Individual),
        ("by.commit", AckMode::Transacted),
    ] {
        fill(&server, queue, 5);
        let (c, s) = session(&server, mode);
        let s = std::sync::Arc::new(s);
        let consumer = s.create_consumer(&Destination::queue(queue)).unwrap();
        wait_until("the first five are on their way", || {
            server
                .stats()
                .queues
                .iter()
                .any(|(n, _, f)| n == queue && *f == 5)
        });
        // Time to arrive and wait for a listener.
        std::thread::sleep(Duration::from_millis(200));
        let (tx, done) = mpsc::channel();
        let listening = s.clone();
        let (more, mut first) = (factory(&server), true);
        let name = queue.to_owned();
        consumer
            .set_message_listener(move |m| {
                if std::mem::take(&mut first) {
                    // The reader thread gets these while this listener
                    // still runs for the ones that waited.
                    fill_through(&more, &name, 5);
                    std::thread::sleep(Duration::from_millis(100));
                }
                let settled = match mode {
                    // The fifth of each batch of five: the last one is the tenth.
                    AckMode::Client if m.body_text() == Some("4") => listening.acknowledge(),
                    AckMode::Client => Ok(()),
                    AckMode::Individual => listening.acknowledge_message(&m),
                    _ => listening.commit(),
                };
                let _ = tx.send(settled.map_err(|e| e.to_string()));
            })
            .unwrap();
        for _ in 0..10 {
            let settled = done.recv_timeout(PATIENCE).expect("handled");
            assert_eq!(settled, Ok(()), "{mode:?}");
        }
        settled(&server, queue);
        c.close().unwrap();
        // Nothing was left unsettled to come back.
        settled(&server, queue);
        let (_c2, s2) = connect(&server);
        let again = s2.create_consumer(&Destination::queue(queue)).unwrap();
        assert_nothing(&again);
    }
}
