//! Queues: competing consumers, waiting messages, browsing, credit.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use herald_client::{AckMode, ConsumerOptions, Destination, ErrorCode, Message};
use herald_tests::*;

fn send_numbers(session: &herald_client::Session, queue: &str, range: std::ops::Range<i32>) {
    let producer = session.create_producer(&Destination::queue(queue)).unwrap();
    for i in range {
        producer
            .send(Message::text(i.to_string()).with_property("n", i))
            .unwrap();
    }
    // A receipt after the last send: every earlier one is routed too.
    producer
        .send_with_receipt(Message::text("end").with_property("n", -1))
        .unwrap();
}

#[test]
fn competing_consumers_share_without_duplicates_or_loss() {
    let mut config = test_config();
    config.workers = 3;
    let server = start_with(config);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut consumers = Vec::new();
    for _ in 0..3 {
        let (c, s) = connect(&server);
        let consumer = s.create_consumer(&Destination::queue("orders")).unwrap();
        let seen = seen.clone();
        consumer
            .set_message_listener(move |m| {
                let n = m.property("n").and_then(|v| v.as_i64()).unwrap();
                seen.lock().unwrap().push(n);
            })
            .unwrap();
        consumers.push((c, s, consumer));
    }
    let (_pc, ps) = connect(&server);
    send_numbers(&ps, "orders", 0..3000);
    wait_until("all 3001 consumed", || seen.lock().unwrap().len() == 3001);
    let all = seen.lock().unwrap().clone();
    let unique: HashSet<_> = all.iter().collect();
    assert_eq!(unique.len(), 3001, "no duplicates");
    let (_, _, probe) = &consumers[0];
    assert!(probe.receive(Duration::from_millis(100)).unwrap().is_none());
}

#[test]
fn messages_wait_for_a_consumer_and_are_load_balanced_round_robin() {
    let server = start();
    let (_pc, ps) = connect(&server);
    send_numbers(&ps, "work", 0..10);
    let (_c1, s1) = connect(&server);
    let a = s1
        .create_consumer_with(
            &Destination::queue("work"),
            ConsumerOptions::default().prefetch(1),
        )
        .unwrap();
    // One in flight at a time: the first consumer holds message 0 and
    // nothing else until it has taken it.
    let first = next(&a);
    assert_eq!(first.body_text(), Some("0"));
    let (_c2, s2) = connect(&server);
    let b = s2
        .create_consumer_with(
            &Destination::queue("work"),
            ConsumerOptions::default().prefetch(1),
        )
        .unwrap();
    // The rest (9 and "end") is shared between the two, each holding
    // one at a time.
    let mut got_a = vec![];
    let mut got_b = vec![];
    while got_a.len() + got_b.len() < 10 {
        for (consumer, got) in [(&a, &mut got_a), (&b, &mut got_b)] {
            if let Some(m) = consumer.receive(Duration::from_millis(20)).unwrap() {
                got.push(m.body_text().unwrap().to_owned());
            }
        }
    }
    assert!(
        !got_a.is_empty() && !got_b.is_empty(),
        "both served: {got_a:?} {got_b:?}"
    );
    let all: HashSet<_> = got_a.iter().chain(&got_b).collect();
    assert_eq!(all.len(), 10, "none twice");
    assert_nothing(&a);
    assert_nothing(&b);
}

#[test]
fn prefetch_bounds_what_the_server_sends_ahead() {
    let server = start();
    let (_pc, ps) = connect(&server);
    send_numbers(&ps, "credit", 0..20);
    let (_c, s) = connect(&server);
    let consumer = s
        .create_consumer_with(
            &Destination::queue("credit"),
            ConsumerOptions::default().prefetch(5),
        )
        .unwrap();
    wait_until("5 in flight", || server.stats().messages_out == 5);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        server.stats().messages_out,
        5,
        "no more than the prefetch before any ack"
    );
    for i in 0..21 {
        let m = next(&consumer);
        assert_eq!(
            m.property("n").and_then(|v| v.as_i64()),
            Some(if i == 20 { -1 } else { i })
        );
    }
}

#[test]
fn browsing_shows_waiting_messages_and_leaves_them() {
    let server = start();
    let (_c, s) = connect(&server);
    send_numbers(&s, "inbox", 0..5);
    let all = s
        .create_browser(&Destination::queue("inbox"), "")
        .unwrap()
        .messages()
        .unwrap();
    assert_eq!(all.len(), 6);
    let odd = s
        .create_browser(&Destination::queue("inbox"), "n / 2 * 2 <> n")
        .unwrap()
        .messages()
        .unwrap();
    assert_eq!(
        odd.iter()
            .map(|m| m.body_text().unwrap())
            .collect::<Vec<_>>(),
        ["1", "3", "end"]
    );
    assert!(s
        .create_browser(&Destination::queue("nothing.here"), "")
        .unwrap()
        .messages()
        .unwrap()
        .is_empty());
    let bad = s
        .create_browser(&Destination::queue("inbox"), "n >")
        .unwrap_err();
    assert!(
        matches!(&bad, herald_client::Error::InvalidSelector { reason, .. } if reason.contains("position")),
        "{bad}"
    );
    // The server checks too, for clients that do not.
    let mut raw = RawClient::connected(&server, 0);
    raw.send(
        &herald_protocol::Frame::Browse(herald_protocol::frame::Browse {
            subscription_id: 1,
            queue: "inbox".into(),
            selector: "n >".into(),
        }),
        2,
    );
    let (e, id) = raw.expect_error();
    assert_eq!(
        (e.error_code(), id, e.fatal),
        (Some(ErrorCode::InvalidSelector), 2, false)
    );
    let consumer = s.create_consumer(&Destination::queue("inbox")).unwrap();
    assert_eq!(
        next(&consumer).body_text(),
        Some("0"),
        "browsing consumed nothing"
    );
}

#[test]
fn a_full_queue_refuses_sends_and_the_connection_goes_on() {
    let mut config = test_config();
    config.queues.max_messages = 3;
    config.queues.full_policy = herald_server::config::FullPolicy::Fail;
    let server = start_with(config);
    let (_c, s) = connect(&server);
    let producer = s.create_producer(&Destination::queue("small")).unwrap();
    for _ in 0..3 {
        producer.send_with_receipt(Message::text("x")).unwrap();
    }
    let e = producer.send_with_receipt(Message::text("x")).unwrap_err();
    assert_eq!(e.server_code(), Some(ErrorCode::QueueFull), "{e}");
    assert!(e.to_string().contains('3'));
    let consumer = s.create_consumer(&Destination::queue("small")).unwrap();
    next(&consumer);
    wait_until("room again", || {
        producer.send_with_receipt(Message::text("y")).is_ok()
    });
}

#[test]
fn a_queue_consumer_in_client_mode_holds_its_credit_until_it_acknowledges() {
    let server = start();
    let connection = factory(&server).create_connection().unwrap();
    let s = connection.create_session(AckMode::Client).unwrap();
    send_numbers(&s, "held", 0..4);
    let consumer = s
        .create_consumer_with(
            &Destination::queue("held"),
            ConsumerOptions::default().prefetch(2),
        )
        .unwrap();
    next(&consumer);
    next(&consumer);
    assert!(
        consumer
            .receive(Duration::from_millis(200))
            .unwrap()
            .is_none(),
        "credit used up"
    );
    s.acknowledge().unwrap();
    assert_eq!(next(&consumer).body_text(), Some("2"));
}

#[test]
fn a_send_to_a_full_queue_waits_for_room_when_blocking() {
    let mut config = test_config();
    config.queues.max_messages = 2;
    config.queues.full_policy = herald_server::config::FullPolicy::Block;
    let server = start_with(config);
    let (_c, s) = connect(&server);
    let producer = s.create_producer(&Destination::queue("narrow")).unwrap();
    for i in 0..2 {
        producer
            .send_with_receipt(Message::text(i.to_string()))
            .unwrap();
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let url = format!("herald://{}", server.local_addr());
    let blocked = std::thread::spawn(move || {
        let f = herald_client::ConnectionFactory::new(&url).unwrap();
        let c = f.create_connection().unwrap();
        let s = c.create_session(AckMode::Auto).unwrap();
        let p = s.create_producer(&Destination::queue("narrow")).unwrap();
        let r = p.send_with_receipt(Message::text("third"));
        tx.send(r.is_ok()).unwrap();
        // Later frames on the same connection wait behind it, in order.
        p.send_with_receipt(Message::text("fourth")).unwrap();
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "held back while the queue is full"
    );
    let consumer = s.create_consumer(&Destination::queue("narrow")).unwrap();
    let got: Vec<_> = (0..4)
        .map(|_| next(&consumer).body_text().unwrap().to_owned())
        .collect();
    assert_eq!(got, ["0", "1", "third", "fourth"]);
    assert!(rx.recv_timeout(PATIENCE).unwrap());
    blocked.join().unwrap();
}

#[test]
fn a_blocked_send_fails_after_the_block_timeout_and_the_connection_goes_on() {
    let mut config = test_config();
    config.queues.max_messages = 1;
    config.queues.block_timeout_ms = 200;
    config.queues.full_policy = herald_server::config::FullPolicy::Block;
    let server = start_with(config);
    let (_c, s) = connect(&server);
    let producer = s.create_producer(&Destination::queue("stuck")).unwrap();
    producer.send_with_receipt(Message::text("only")).unwrap();
    let e = producer
        .send_with_receipt(Message::text("too many"))
        .unwrap_err();
    assert_eq!(e.server_code(), Some(ErrorCode::QueueFull), "{e}");
    // The same connection consumes: no deadlock, its frames are read again.
    let consumer = s.create_consumer(&Destination::queue("stuck")).unwrap();
    assert_eq!(next(&consumer).body_text(), Some("only"));
    assert_nothing(&consumer);
}
