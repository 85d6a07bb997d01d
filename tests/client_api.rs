//! The rounder client API: message builders, property accessors, factory
//! settings, the anonymous producer and the blocking iterator, each against
//! a real server.

use std::time::{Duration, Instant};

use herald_client::{AckMode, Body, ConnectionFactory, Destination, FactoryConfig, Message, Value};
use herald_tests::*;

#[test]
fn message_builders_carry_their_headers_to_the_consumer() {
    let server = start();
    let (_c, s) = connect(&server);
    let q = Destination::queue("built");
    let consumer = s.create_consumer(&q).unwrap();
    let replies = Destination::queue("replies");
    s.send(
        &q,
        Message::text("a")
            .with_priority(7)
            .with_reply_to(replies.clone())
            .with_correlation_id("req-1")
            .with_ttl(Duration::from_secs(60)),
    )
    .unwrap();
    let m = consumer.receive(PATIENCE).unwrap().expect("delivered");
    assert_eq!(m.priority, 7);
    assert_eq!(m.reply_to(), Some(&replies));
    assert_eq!(m.correlation_id(), Some("req-1"));
    assert!(m.expiration > m.timestamp, "{m:?}");
}

#[test]
fn producer_defaults_fill_the_headers_a_message_did_not_choose() {
    let server = start();
    let (_c, s) = connect(&server);
    let q = Destination::queue("defaulted");
    let consumer = s.create_consumer(&q).unwrap();
    let mut p = s.create_producer(&q).unwrap();
    p.set_delivery_mode(herald_client::DeliveryMode::NonPersistent);
    p.set_priority(7).unwrap();
    p.set_time_to_live(Duration::from_secs(60));
    let e = p.set_priority(10).unwrap_err();
    assert!(e.to_string().contains("priority 10"), "{e}");
    assert_eq!(p.priority(), 7);
    p.send(Message::text("defaulted")).unwrap();
    p.send(
        Message::text("chosen")
            .with_priority(4)
            .with_ttl(Duration::ZERO)
            .persistent(),
    )
    .unwrap();
    let defaulted = next(&consumer);
    assert_eq!(defaulted.priority, 7);
    let lives = defaulted.expiration - defaulted.timestamp;
    assert!((59_000..=61_000).contains(&lives), "lives {lives} ms");
    assert_eq!(
        defaulted.delivery_mode,
        herald_client::DeliveryMode::NonPersistent
    );
    let chosen = next(&consumer);
    assert_eq!(chosen.body_text(), Some("chosen"));
    assert_eq!((chosen.priority, chosen.expiration), (4, 0));
    assert_eq!(
        chosen.delivery_mode,
        herald_client::DeliveryMode::Persistent
    );
}

#[test]
fn a_message_with_a_short_ttl_expires_and_one_with_a_delay_waits() {
    let server = start();
    let (_c, s) = connect(&server);
    let q = Destination::queue("timed");
    let p = s.create_producer(&q).unwrap();
    p.send_with_receipt(Message::text("stale").with_ttl(Duration::from_millis(50)))
        .unwrap();
    std::thread::sleep(Duration::from_millis(150));
    let sent = Instant::now();
    p.send_with_receipt(Message::text("later").with_delivery_delay(Duration::from_millis(300)))
        .unwrap();
    let consumer = s.create_consumer(&q).unwrap();
    let m = consumer
        .receive(PATIENCE)
        .unwrap()
        .expect("the delayed one");
    assert_eq!(m.body_text(), Some("later"), "the expired one is gone");
    // Not before its delivery time, on the clock (in whole milliseconds)
    // that set it; that time is 300 ms after the send began, less the
    // part of a millisecond the clock's truncation may take.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!(m.delivery_time > 0 && now_ms >= m.delivery_time, "{m:?}");
    assert!(sent.elapsed() >= Duration::from_millis(299));
    assert!(consumer
        .receive(Duration::from_millis(100))
        .unwrap()
        .is_none());
}

#[test]
fn property_values_convert_as_jms_says() {
    assert_eq!(Value::from(2.5f32).as_f64(), Some(2.5));
    assert_eq!(Value::from(2.5f64).as_f64(), Some(2.5));
    assert_eq!(Value::from(3).as_f64(), None, "ints are not doubles in JMS");
    assert_eq!(Value::from(true).as_bool(), Some(true));
    assert_eq!(Value::from("true").as_bool(), None);
    assert_eq!(Value::from(200u8), Value::I16(200));
    assert_eq!(Value::from(60_000u16), Value::I32(60_000));
    assert_eq!(Value::from(4_000_000_000u32), Value::I64(4_000_000_000));
    assert_eq!(Value::from(-5isize), Value::I64(-5));
    assert_eq!(Value::try_from(7u64), Ok(Value::I64(7)));
    assert!(Value::try_from(u64::MAX).is_err());
    assert_eq!(Value::try_from(9usize), Ok(Value::I64(9)));
    let m = Message::text("m")
        .with_property("ratio", 0.5)
        .with_property("ok", true)
        .with_property("small", 7u8);
    assert_eq!(m.property("ratio").and_then(Value::as_f64), Some(0.5));
    assert_eq!(m.property("ok").and_then(Value::as_bool), Some(true));
    assert_eq!(m.property("small").and_then(Value::as_i64), Some(7));
}

#[test]
fn factory_settings_have_defaults_and_setters() {
    let defaults = FactoryConfig::default();
    assert_eq!(defaults.url, "herald://127.0.0.1:7777");
    assert_eq!(defaults.request_timeout_ms, 10_000);
    let server = start();
    let factory = ConnectionFactory::from_config(FactoryConfig {
        url: format!("herald://{}", server.local_addr()),
        ..FactoryConfig::default()
    })
    .unwrap()
    .with_connect_timeout(Duration::from_millis(1500))
    .with_request_timeout(Duration::from_millis(2500))
    .with_send_timeout(Duration::from_millis(3500));
    let config = factory.config();
    assert_eq!(
        (
            config.connect_timeout_ms,
            config.request_timeout_ms,
            config.send_timeout_ms
        ),
        (1500, 2500, 3500)
    );
    factory.create_connection().unwrap().close().unwrap();
}

#[test]
fn the_blocking_iterator_yields_in_order_and_ends_with_the_connection() {
    let server = start();
    let (_c, s) = connect(&server);
    let q = Destination::queue("iterated");
    for n in 0..5 {
        s.send(&q, Message::text("m").with_property("n", n))
            .unwrap();
    }
    let c = factory(&server).create_connection().unwrap();
    let session = c.create_session(AckMode::Auto).unwrap();
    let consumer = session.create_consumer(&q).unwrap();
    let closer = {
        // A clone is a handle to the same connection.
        let c = c.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            c.close().unwrap();
        })
    };
    let got: Vec<i64> = consumer
        .iter()
        .map(|m| m.property("n").and_then(Value::as_i64).unwrap())
        .collect();
    assert_eq!(got, [0, 1, 2, 3, 4]);
    closer.join().unwrap();
    // A deadline in the past returns at once.
    assert!(consumer.receive_until(Instant::now()).is_err());
}

/// Bodies from a byte to most of a megabyte, back to back: the reader's
/// reads cut frames anywhere, and a connection whose reads fill the first
/// buffer reads more at a time. Every body arrives whole and in order.
#[test]
fn bodies_of_every_size_arrive_whole_and_in_order() {
    let server = start();
    let (_c, s) = connect(&server);
    let topic = Destination::topic("sizes");
    let consumer = s.create_consumer(&topic).unwrap();
    let producer = s.create_producer(&topic).unwrap();
    let sizes = [1, 70_000, 3, 300_000, 65_536, 5_000, 262_100, 900_000, 17];
    let body =
        |n: usize, size: usize| -> Vec<u8> { (0..size).map(|i| (i * 7 + n) as u8).collect() };
    let count = 4 * sizes.len();
    for n in 0..count {
        producer
            .send(Message::bytes(body(n, sizes[n % sizes.len()])))
            .unwrap();
    }
    for n in 0..count {
        let m = next(&consumer);
        let Body::Bytes(got) = &m.body else {
            panic!("message {n}: {:?}", m.body)
        };
        assert!(
            got[..] == body(n, sizes[n % sizes.len()])[..],
            "message {n}: {} bytes",
            got.len()
        );
    }
    assert_nothing(&consumer);
}

/// A consumer nobody reads holds at most `pending_bytes` of bodies (and
/// always one message, however large): the rest is dropped and counted,
/// and what is read makes room again.
#[test]
fn a_consumer_holds_at_most_pending_bytes_of_bodies() {
    let server = start();
    let factory = ConnectionFactory::from_config(FactoryConfig {
        url: format!("herald://{}", server.local_addr()),
        pending_bytes: 100_000,
        ..FactoryConfig::default()
    })
    .unwrap();
    let connection = factory.create_connection().unwrap();
    let s = connection.create_session(AckMode::Auto).unwrap();
    let topic = Destination::topic("heavy");
    let consumer = s.create_consumer(&topic).unwrap();
    let producer = s.create_producer(&topic).unwrap();
    let numbered = |n: u8, size: usize| Message::bytes(vec![n; size]);
    for n in 0..10 {
        producer.send_with_receipt(numbered(n, 30_000)).unwrap();
    }
    // 3 × 30,000 fit in 100,000; the other 7 do not.
    wait_until("seven are dropped", || consumer.dropped() == 7);
    for n in 0..3 {
        let Body::Bytes(b) = next(&consumer).body else {
            panic!()
        };
        assert_eq!((b.len(), b[0]), (30_000, n));
    }
    assert_nothing(&consumer);
    // Emptied, it takes one larger than the whole limit, then nothing more.
    producer.send_with_receipt(numbered(20, 200_000)).unwrap();
    producer.send_with_receipt(numbered(21, 10)).unwrap();
    wait_until("the small one after it is dropped", || {
        consumer.dropped() == 8
    });
    let Body::Bytes(b) = next(&consumer).body else {
        panic!()
    };
    assert_eq!((b.len(), b[0]), (200_000, 20));
    assert_nothing(&consumer);

    let refused = ConnectionFactory::from_config(FactoryConfig {
        pending_bytes: 0,
        ..FactoryConfig::default()
    });
    let Err(e) = refused else {
        panic!("a limit of 0 was taken")
    };
    assert!(
        e.to_string()
            .contains("pending_bytes must be greater than 0"),
        "{e}"
    );
}
