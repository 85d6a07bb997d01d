//! Prefetched messages that no application read are not deliveries: a
//! consumer that comes and goes leaves their delivery count and
//! redelivered flag as they were, and never pushes them towards the
//! dead-letter queue. Only a message the application received, and did
//! not acknowledge, counts.

use std::time::Duration;

use herald_client::{AckMode, ConsumerOptions, Destination, Message};
use herald_protocol::frame::{Settle, Subscribe, Unsubscribe};
use herald_protocol::{DestinationKind, Frame};
use herald_tests::*;

/// Sends `n` persistent messages, numbered, to `queue`.
fn fill(server: &TestServer, queue: &str, n: i64) {
    let (_c, s) = connect(server);
    let p = s.create_producer(&Destination::queue(queue)).unwrap();
    for i in 0..n {
        p.send_with_receipt(Message::text("job").with_property("n", i).persistent())
            .unwrap();
    }
}

/// How a short-lived worker ends.
#[derive(Clone, Copy, Debug)]
enum Ending {
    Consumer,
    Session,
    Connection,
    Dropped,
}

/// Connects, consumes `queue` with `prefetch` in CLIENT mode without
/// reading, and ends as `ending` says.
fn come_and_go(server: &TestServer, queue: &str, prefetch: u32, ending: Ending) {
    let c = factory(server).create_connection().unwrap();
    let s = c.create_session(AckMode::Client).unwrap();
    let consumer = s
        .create_consumer_with(
            &Destination::queue(queue),
            ConsumerOptions::default().prefetch(prefetch),
        )
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    match ending {
        Ending::Consumer => consumer.close().unwrap(),
        Ending::Session => s.close().unwrap(),
        Ending::Connection => c.close().unwrap(),
        Ending::Dropped => drop((consumer, s, c)),
    }
}

/// The messages waiting in `queue`, received one by one and acknowledged.
fn take_all(server: &TestServer, queue: &str) -> Vec<Message> {
    let (_c, s) = connect(server);
    let consumer = s.create_consumer(&Destination::queue(queue)).unwrap();
    std::iter::from_fn(|| consumer.receive(Duration::from_millis(300)).unwrap()).collect()
}

/// A raw connection subscribed (as subscription 1) to `queue`, which
/// holds `n` new messages.
fn raw_consumer(server: &TestServer, queue: &str, n: i64) -> RawClient {
    fill(server, queue, n);
    let mut raw = RawClient::connected(server, 0);
    let subscribe = Subscribe::new(1, DestinationKind::Queue, queue);
    raw.send(&Frame::Subscribe(subscribe), 1);
    raw
}

/// Each message's delivery count and redelivered flag.
fn counts(messages: &[Message]) -> Vec<(u32, bool)> {
    messages
        .iter()
        .map(|m| (m.delivery_count, m.redelivered))
        .collect()
}

#[test]
fn consumers_that_open_and_close_without_reading_leave_the_message_as_it_was() {
    let server = start();
    for (prefetch, ending) in [
        (1, Ending::Connection),
        (1000, Ending::Connection),
        (1, Ending::Session),
        (1000, Ending::Consumer),
        (1000, Ending::Dropped),
    ] {
        let queue = format!("redel.{prefetch}.{ending:?}");
        fill(&server, &queue, 1);
        for _ in 0..12 {
            come_and_go(&server, &queue, prefetch, ending);
        }
        let got = take_all(&server, &queue);
        assert_eq!(got.len(), 1, "{queue}: the message is still there");
        assert_eq!(got[0].delivery_count, 1, "{queue}");
        assert!(!got[0].redelivered, "{queue}");
        assert!(
            take_all(&server, &format!("DLQ.{queue}")).is_empty(),
            "{queue}: nothing dead-lettered"
        );
    }
}

#[test]
fn short_lived_workers_each_get_a_fresh_job() {
    let server = start();
    fill(&server, "jobs", 15);
    for _ in 0..14 {
        let c = factory(&server).create_connection().unwrap();
        let s = c.create_session(AckMode::Client).unwrap();
        let consumer = s.create_consumer(&Destination::queue("jobs")).unwrap();
        let job = consumer.receive(PATIENCE).unwrap().expect("a job");
        assert_eq!(job.delivery_count, 1, "{job:?}");
        assert!(!job.redelivered);
        s.acknowledge().unwrap();
        c.close().unwrap();
    }
    let left = take_all(&server, "jobs");
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].delivery_count, 1);
    assert!(take_all(&server, "DLQ.jobs").is_empty());
}

#[test]
fn a_message_the_application_received_and_did_not_acknowledge_counts() {
    let server = start();
    fill(&server, "seen", 3);
    for ending in [Ending::Consumer, Ending::Session, Ending::Connection] {
        let c = factory(&server).create_connection().unwrap();
        let s = c.create_session(AckMode::Client).unwrap();
        let consumer = s.create_consumer(&Destination::queue("seen")).unwrap();
        let first = consumer.receive(PATIENCE).unwrap().expect("a message");
        assert_eq!(first.property("n").and_then(|v| v.as_i64()), Some(0));
        match ending {
            Ending::Consumer => consumer.close().unwrap(),
            Ending::Session => s.close().unwrap(),
            _ => c.close().unwrap(),
        }
    }
    // Message 0 was read three times; 1 and 2, prefetched, never.
    let got = take_all(&server, "seen");
    let counts: Vec<(i64, u32, bool)> = got
        .iter()
        .map(|m| {
            let n = m.property("n").and_then(|v| v.as_i64()).unwrap();
            (n, m.delivery_count, m.redelivered)
        })
        .collect();
    assert_eq!(counts, [(0, 4, true), (1, 1, false), (2, 1, false)]);
}

#[test]
fn a_transacted_session_closed_counts_only_what_it_received() {
    let server = start();
    fill(&server, "tx", 2);
    let c = factory(&server).create_connection().unwrap();
    let s = c.create_session(AckMode::Transacted).unwrap();
    let consumer = s.create_consumer(&Destination::queue("tx")).unwrap();
    consumer.receive(PATIENCE).unwrap().expect("a message");
    s.close().unwrap();
    assert_eq!(counts(&take_all(&server, "tx")), [(2, true), (1, false)]);
}

#[test]
fn a_killed_connection_counts_every_delivery_it_held() {
    // The server cannot tell what a client that vanished had read.
    let server = start();
    let mut raw = raw_consumer(&server, "killed", 1);
    while !matches!(raw.read_frame(), Some((Frame::Message(_), _))) {}
    drop(raw);
    assert_eq!(counts(&take_all(&server, "killed")), [(2, true)]);
}

#[test]
fn an_unsubscribe_naming_what_was_read_returns_the_rest_uncounted() {
    let server = start();
    let mut raw = raw_consumer(&server, "raw", 2);
    let mut ids = Vec::new();
    while ids.len() < 2 {
        if let Some((Frame::Message(d), _)) = raw.read_frame() {
            ids.push(d.delivery_id);
        }
    }
    raw.send(
        &Frame::Unsubscribe(Unsubscribe {
            subscription_id: 1,
            seen: Some(Settle {
                delivery_ids: vec![ids[1]],
            }),
        }),
        2,
    );
    assert!(matches!(raw.read_frame(), Some((Frame::Receipt, 2))));
    assert_eq!(counts(&take_all(&server, "raw")), [(1, false), (2, true)]);
}

#[test]
fn a_stomp_client_that_says_goodbye_returns_what_it_did_not_acknowledge_uncounted() {
    let server = start();
    fill(&server, "st", 1);
    for goodbye in ["UNSUBSCRIBE\nid:s\n\n\0", "DISCONNECT\n\n\0"] {
        for _ in 0..12 {
            let mut stomp = StompClient::connected(&server, &[]);
            stomp.write(b"SUBSCRIBE\nid:s\ndestination:/queue/st\nack:client\n\n\0");
            let m = stomp.expect("MESSAGE");
            assert_eq!(m.get("redelivered"), None, "{goodbye}");
            stomp.write(goodbye.as_bytes());
        }
    }
    // A connection that drops without a goodbye counts (a consumer that
    // crashes on a message must still get it dead-lettered in the end).
    let mut stomp = StompClient::connected(&server, &[]);
    stomp.write(b"SUBSCRIBE\nid:s\ndestination:/queue/st\nack:client\n\n\0");
    stomp.expect("MESSAGE");
    drop(stomp);
    assert_eq!(counts(&take_all(&server, "st")), [(2, true)]);
}
