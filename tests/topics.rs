//! Publish/subscribe over real sockets: properties, bodies, wildcards,
//! receipts, strict mode, listeners.

use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use herald_client::{Body, ConnectionFactory, Destination, Error, ErrorCode, Message, Value};
use herald_server::Config;
use herald_tests::*;

#[test]
fn every_property_type_and_body_kind_arrives_intact() {
    let server = start();
    let (_c, session) = connect(&server);
    let consumer = subscribe(&session, "sales.europe.smartphone");
    let producer = session
        .create_producer(&Destination::topic("sales.europe.smartphone"))
        .unwrap();
    let mut sent = Message::text("sold 3")
        .with_property("region", "EU")
        .with_property("units", 3)
        .with_property("flag", true)
        .with_property("byte", -7i8)
        .with_property("short", 1234i16)
        .with_property("long", 1i64 << 50)
        .with_property("float", 1.5f32)
        .with_property("double", -0.125f64)
        .with_property("empty", "");
    sent.set_correlation_id(Some("corr-1".into()));
    sent.set_message_type(Some("sale".into()));
    sent.priority = 7;
    producer.send(sent.clone()).unwrap();
    let got = next(&consumer);
    assert_eq!(got.properties(), sent.properties());
    assert_eq!(got.body_text(), Some("sold 3"));
    assert_eq!(got.correlation_id(), Some("corr-1"));
    assert_eq!(got.message_type(), Some("sale"));
    assert_eq!(got.priority, 7);
    assert_eq!(
        got.destination(),
        Some(&Destination::topic("sales.europe.smartphone"))
    );
    assert!(got.message_id().starts_with("ID:"));
    assert!(got.timestamp > 0);
    assert_eq!((got.delivery_count, got.redelivered), (1, false));

    let bodies = [
        Body::Empty,
        Body::Bytes(Bytes::from_static(b"\0binary\xff\0")),
        Body::Map(vec![
            ("k".into(), Value::I64(9)),
            ("s".into(), Value::String("v".into())),
        ]),
        Body::Text("ünïcødé".into()),
    ];
    for body in bodies {
        producer.send(Message::new(body.clone())).unwrap();
        assert_eq!(next(&consumer).body, body);
    }
}

#[test]
fn wildcards_follow_the_topic_tree() {
    let server = start();
    let (_c, session) = connect(&server);
    let europe = subscribe(&session, "sales.europe.#");
    let phones = subscribe(&session, "sales.*.smartphone");
    let exact = subscribe(&session, "sales.asia.laptop");
    let everything = subscribe(&session, "#");

    publish(&session, "sales.europe.smartphone", "1");
    publish(&session, "sales.europe", "2");
    publish(&session, "sales.asia.smartphone", "3");
    publish(&session, "sales.asia.laptop", "4");
    publish(&session, "weather.paris", "5");

    let texts = |c: &herald_client::Consumer, n: usize| -> Vec<String> {
        let v = (0..n)
            .map(|_| next(c).body_text().unwrap().to_owned())
            .collect();
        assert_nothing(c);
        v
    };
    assert_eq!(texts(&europe, 2), ["1", "2"]);
    assert_eq!(texts(&phones, 2), ["1", "3"]);
    assert_eq!(texts(&exact, 1), ["4"]);
    assert_eq!(texts(&everything, 5), ["1", "2", "3", "4", "5"]);
}

#[test]
fn overlapping_subscriptions_each_get_one_copy_and_unsubscribe_stops_delivery() {
    let server = start();
    let (_c, session) = connect(&server);
    let a = subscribe(&session, "#.b.#");
    let b = subscribe(&session, "a.#");
    publish(&session, "a.b.b", "x");
    next(&a);
    next(&b);
    assert_nothing(&a);
    assert_nothing(&b);
    a.close().unwrap();
    publish(&session, "a.b.b", "y");
    assert_eq!(next(&b).body_text(), Some("y"));
    assert!(
        a.receive(Duration::from_millis(100)).is_err(),
        "a closed consumer reports closed"
    );
    wait_until("the server dropped the subscription", || {
        server.stats().subscriptions == 1
    });
}

#[test]
fn listeners_receive_in_order_and_survive_a_panic() {
    let server = start();
    let (_c, session) = connect(&server);
    let consumer = subscribe(&session, "events");
    let (tx, rx) = mpsc::channel();
    consumer
        .set_message_listener(move |m| {
            let text = m.body_text().unwrap().to_owned();
            if text == "boom" {
                panic!("listener failure under test");
            }
            tx.send(text).unwrap();
        })
        .unwrap();
    let producer = session
        .create_producer(&Destination::topic("events"))
        .unwrap();
    for text in ["1", "boom", "2", "3"] {
        producer.send(Message::text(text)).unwrap();
    }
    let got: Vec<String> = (0..3).map(|_| rx.recv_timeout(PATIENCE).unwrap()).collect();
    assert_eq!(got, ["1", "2", "3"]);
}

#[test]
fn messages_queued_before_a_listener_is_set_reach_it_first() {
    let server = start();
    let (_c, session) = connect(&server);
    let consumer = subscribe(&session, "t");
    publish(&session, "t", "early");
    wait_until("the early message is queued", || {
        server.stats().messages_out == 1
    });
    // Give the reader thread time to queue it client-side.
    std::thread::sleep(Duration::from_millis(50));
    let (tx, rx) = mpsc::channel();
    consumer
        .set_message_listener(move |m| tx.send(m.body_text().unwrap().to_owned()).unwrap())
        .unwrap();
    publish(&session, "t", "late");
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), "early");
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), "late");
}

#[test]
fn strict_mode_refuses_undeclared_topics_and_the_connection_goes_on() {
    let mut config = test_config();
    config.topics.strict = true;
    config.topics.declared = vec!["sales.europe.smartphone".into(), "sales.asia".into()];
    let server = start_with(config);
    let (_c, session) = connect(&server);
    let consumer = subscribe(&session, "sales.#");
    let refused = session
        .create_producer(&Destination::topic("sales.africa.smartphone"))
        .unwrap()
        .send_with_receipt(Message::text("x"))
        .unwrap_err();
    assert_eq!(
        refused.server_code(),
        Some(ErrorCode::UndeclaredTopic),
        "{refused}"
    );
    let text = refused.to_string();
    assert!(
        text.contains("'africa'") && text.contains("'sales'"),
        "{text}"
    );
    publish(&session, "sales.europe", "declared prefix");
    publish(&session, "sales.asia", "declared leaf");
    assert_eq!(next(&consumer).body_text(), Some("declared prefix"));
    assert_eq!(next(&consumer).body_text(), Some("declared leaf"));
}

#[test]
fn refused_subscriptions_are_errors_naming_the_problem() {
    let mut config = test_config();
    config.max_subscriptions_per_connection = 2;
    let server = start_with(config);
    let (_c, session) = connect(&server);
    let bad = session.create_consumer(&Destination::topic("a.b*"));
    assert!(
        matches!(bad, Err(Error::InvalidDestination { .. })),
        "checked client-side first"
    );
    let _one = subscribe(&session, "a");
    let _two = subscribe(&session, "b");
    let third = session
        .create_consumer(&Destination::topic("c"))
        .unwrap_err();
    assert_eq!(
        third.server_code(),
        Some(ErrorCode::LimitExceeded),
        "{third}"
    );
    publish(&session, "a", "still usable");
}

#[test]
fn a_named_factory_from_a_config_file_connects() {
    let server = start();
    let dir = std::env::temp_dir().join(format!("herald-factory-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("client.toml");
    std::fs::write(
        &path,
        format!(
            "[factories.test]\nurl = \"herald://{}\"\nclient_id = \"named\"\nheartbeat_ms = 1000\n",
            server.local_addr()
        ),
    )
    .unwrap();
    let connection = ConnectionFactory::lookup(&path, "test")
        .unwrap()
        .create_connection()
        .unwrap();
    assert_eq!(connection.client_id(), "named");
    assert_eq!(connection.heartbeat(), Duration::from_millis(1000));
    connection.ping().unwrap();
    connection.close().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn default_config_values_are_the_documented_ones() {
    assert_eq!(Config::default().listen.port(), 7777);
}

/// A worker keeps the matches of topics it published to; a subscription
/// made or ended meanwhile, by a connection on any worker, counts from
/// the next message on.
#[test]
fn subscriptions_made_and_ended_between_publishes_count_at_once() {
    let server = start();
    let (_pc, ps) = connect(&server);
    let producer = ps.create_producer(&Destination::topic("cache.t")).unwrap();
    let (_sc, ss) = connect(&server);
    let first = subscribe(&ss, "cache.t");
    let send = |text: &str| producer.send_with_receipt(Message::text(text)).unwrap();
    send("1");
    send("2");
    assert_eq!(next(&first).body_text(), Some("1"));
    assert_eq!(next(&first).body_text(), Some("2"));
    let (_tc, ts) = connect(&server);
    let second = subscribe(&ts, "cache.*");
    send("3");
    assert_eq!(next(&first).body_text(), Some("3"));
    assert_eq!(next(&second).body_text(), Some("3"));
    first.close().unwrap();
    send("4");
    assert_eq!(next(&second).body_text(), Some("4"));
    wait_until("one subscription left", || {
        server.stats().subscriptions == 1
    });
    second.close().unwrap();
    wait_until("none left", || server.stats().subscriptions == 0);
    send("5");
    assert_eq!(server.stats().messages_out, 5);
}
