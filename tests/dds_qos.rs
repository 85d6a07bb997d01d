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

/// A server whose topics `sensors.#` are keyed by `sensor_id` and keep
/// each instance's last two samples for late readers, under
/// `durability`, three instances at most; its data in `data_dir` if
/// given.
fn keyed(
    durability: herald_server::addresses::Durability,
    data_dir: Option<std::path::PathBuf>,
) -> TestServer {
    let mut config = test_config();
    config.addresses = vec![herald_server::config::AddressRule {
        pattern: "topic://sensors.#".into(),
        key: Some(vec!["sensor_id".into()]),
        history_depth: Some(2),
        durability: Some(durability),
        max_instances: Some(3),
        ..Default::default()
    }];
    if let Some(dir) = data_dir {
        config.data_dir = dir;
    }
    start_with(config)
}

/// Sample `n` of sensor `id`.
fn reading(id: i64, n: i64) -> Message {
    Message::text(format!("{id}:{n}")).with_property("sensor_id", id)
}

/// Publishes three samples of sensors 1 to 3, then disposes of sensor 2.
fn three_sensors(p: &herald_client::Producer) {
    for n in 0..3 {
        for id in 1..=3 {
            p.send_with_receipt(reading(id, n).persistent()).unwrap();
        }
    }
    let dispose = Message::text("")
        .with_property("sensor_id", 2i64)
        .with_property("HeraldInstance", "dispose");
    p.send_with_receipt(dispose).unwrap();
}

/// What a late reader of `sensors.#` gets of the kept samples, then
/// nothing more.
fn late_reader_gets(server: &TestServer) -> Vec<String> {
    let (_c, s) = connect(server);
    let late = subscribe(&s, "sensors.#");
    let mut got = Vec::new();
    while let Some(m) = late.receive(Duration::from_millis(500)).unwrap() {
        got.push(m.body_text().unwrap().to_owned());
    }
    got
}

/// Each live instance's last two samples, in the order they came.
const KEPT: [&str; 4] = ["1:1", "3:1", "1:2", "3:2"];

#[test]
fn a_late_reader_gets_each_live_instances_last_samples_on_every_protocol() {
    use herald_server::addresses::Durability;
    let server = keyed(Durability::TransientLocal, None);
    let (_c, s) = connect(&server);
    let live = subscribe(&s, "sensors.#");
    let p = s
        .create_producer(&Destination::topic("sensors.hall"))
        .unwrap();
    three_sensors(&p);
    // A reader already there got every sample, and the dispose as the
    // instance's change.
    let mut got = Vec::new();
    for _ in 0..10 {
        got.push(next(&live));
    }
    let dispose = got.last().unwrap();
    assert_eq!(
        dispose.property("HeraldInstance").and_then(|v| v.as_str()),
        Some("dispose")
    );
    assert_eq!(
        dispose.property("sensor_id").and_then(|v| v.as_i64()),
        Some(2)
    );
    assert_eq!(late_reader_gets(&server), KEPT);
    // Through STOMP the same.
    let mut stomp = StompClient::connected(&server, &[]);
    stomp.send(
        &herald_protocol::stomp::StompFrame::new("SUBSCRIBE")
            .header("id", "0")
            .header("destination", "/topic/sensors.#"),
    );
    let bodies: Vec<String> = (0..4)
        .map(|_| String::from_utf8(stomp.expect("MESSAGE").body.to_vec()).unwrap())
        .collect();
    assert_eq!(bodies, KEPT);

    // Refused, naming why: a sample without its key; a fourth instance
    // takes the disposed one's place, a fifth finds none.
    let refused = p.send_with_receipt(Message::text("no key")).unwrap_err();
    assert_eq!(
        refused.server_code(),
        Some(ErrorCode::SampleRejected),
        "{refused}"
    );
    assert!(
        refused.to_string().contains("no property 'sensor_id'"),
        "{refused}"
    );
    p.send_with_receipt(reading(4, 0)).unwrap();
    let full = p.send_with_receipt(reading(5, 0)).unwrap_err();
    assert_eq!(
        full.server_code(),
        Some(ErrorCode::SampleRejected),
        "{full}"
    );
    assert!(full.to_string().contains("max_instances (3)"), "{full}");

    let view = call(
        &server,
        "GET",
        "/api/topics/sensors.hall/instances",
        None,
        None,
    )
    .json();
    assert_eq!(view["key"], serde_json::json!(["sensor_id"]), "{view}");
    assert_eq!(view["durability"], "transient_local");
    let instances: Vec<(String, String, u64)> = view["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["key"].as_str().unwrap().to_owned(),
                i["state"].as_str().unwrap().to_owned(),
                i["samples"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        instances,
        [
            ("sensor_id=1".into(), "alive".into(), 2),
            ("sensor_id=3".into(), "alive".into(), 2),
            ("sensor_id=4".into(), "alive".into(), 1),
        ]
    );
}

#[test]
fn a_persistent_keyed_topic_keeps_its_samples_across_a_restart() {
    use herald_server::addresses::Durability;
    let server = keyed(Durability::Persistent, None);
    let dir = server.data_dir().to_owned();
    let (c, s) = connect(&server);
    let p = s
        .create_producer(&Destination::topic("sensors.hall"))
        .unwrap();
    three_sensors(&p);
    // A non-persistent sample is kept in the journal too: the topic's
    // durability is the contract.
    p.send_with_receipt(reading(3, 3)).unwrap();
    drop((p, s, c));
    server.stop_keeping_data();
    let server = keyed(Durability::Persistent, Some(dir));
    assert_eq!(late_reader_gets(&server), ["1:1", "1:2", "3:2", "3:3"]);
}

/// A SEND of sample `n` of sensor `id` on `sensors.hall` with source
/// timestamp `at`, by hand (the client stamps the time it sends).
fn stamped(id: i64, n: i64, at: i64) -> Frame {
    let mut m = reading(id, n).with_property("n", n);
    m.set_destination(Some(Destination::topic("sensors.hall")));
    m.timestamp = at;
    let mut block = bytes::BytesMut::new();
    m.encode(&mut block).unwrap();
    Frame::Send(herald_protocol::MessageView::parse(block.freeze()).unwrap())
}

/// What `consumer` gets until nothing comes for a while, as
/// (sensor, body).
fn drained(consumer: &herald_client::Consumer) -> Vec<(i64, String)> {
    let mut got = Vec::new();
    while let Some(m) = consumer.receive(Duration::from_millis(1000)).unwrap() {
        let id = m.property("sensor_id").and_then(|v| v.as_i64()).unwrap();
        got.push((id, m.body_text().unwrap().to_owned()));
    }
    got
}

#[test]
fn a_time_filter_passes_one_sample_per_instance_and_window_and_always_the_last() {
    use herald_server::addresses::Durability;
    let server = keyed(Durability::Volatile, None);
    let (_c, s) = connect(&server);
    let topic = Destination::topic("sensors.#");
    let options = ConsumerOptions::default().time_filter(Duration::from_millis(400));
    let filtered = s.create_consumer_with(&topic, options).unwrap();
    let all = subscribe(&s, "sensors.#");
    let p = s
        .create_producer(&Destination::topic("sensors.hall"))
        .unwrap();
    for n in 0..20 {
        for id in 1..=2 {
            p.send(reading(id, n)).unwrap();
        }
    }
    p.send_with_receipt(reading(1, 20)).unwrap();
    assert_eq!(drained(&all).len(), 41);
    let got = drained(&filtered);
    for id in 1..=2 {
        let of: Vec<&str> = got
            .iter()
            .filter(|(s, _)| *s == id)
            .map(|(_, b)| b.as_str())
            .collect();
        let last = if id == 1 { "1:20" } else { "2:19" };
        assert_eq!(of.first(), Some(&format!("{id}:0").as_str()), "{of:?}");
        assert_eq!(
            of.last(),
            Some(&last),
            "the last value always comes: {of:?}"
        );
        // 21 samples sent in less than the 20 windows they would fill.
        assert!(of.len() < 20, "{of:?}");
    }
    // Only for plain subscriptions.
    let (c2, _s2) = connect(&server);
    let acked = c2.create_session(AckMode::Client).unwrap();
    let options = ConsumerOptions::default().time_filter(Duration::from_millis(400));
    assert!(acked.create_consumer_with(&topic, options).is_err());
}

#[test]
fn ordered_by_source_timestamp_a_reader_drops_a_sample_older_than_one_it_had() {
    use herald_server::addresses::Durability;
    let server = keyed(Durability::Volatile, None);
    let (_c, s) = connect(&server);
    let topic = Destination::topic("sensors.#");
    let options = ConsumerOptions::default().order_by_source_timestamp();
    let ordered = s.create_consumer_with(&topic, options).unwrap();
    let all = subscribe(&s, "sensors.#");
    // Through STOMP too.
    let mut stomp = StompClient::connected(&server, &[]);
    stomp.send(
        &herald_protocol::stomp::StompFrame::new("SUBSCRIBE")
            .header("id", "0")
            .header("destination", "/topic/sensors.#")
            .header("destination-order", "source-timestamp")
            .header("receipt", "r"),
    );
    stomp.expect("RECEIPT");
    // And MQTT 5, as a user property.
    let mut mqtt = MqttClient::connected(&server, herald_protocol::mqtt::Version::V5, "ordered");
    let order = herald_protocol::mqtt::Property::User(
        "destination-order".into(),
        "source-timestamp".into(),
    );
    let options = herald_protocol::mqtt::SubscribeOptions {
        qos: herald_protocol::mqtt::QoS::AtMostOnce,
        no_local: false,
        retain_as_published: false,
        retain_handling: 0,
    };
    let granted = mqtt.subscribe_with_properties(
        "sensors/#",
        options,
        herald_protocol::mqtt::Properties(vec![order]),
    );
    assert_eq!(granted, 0);
    let mut raw = RawClient::connected(&server, 0);
    for (id, n, at) in [
        (1, 0, 100),
        (1, 1, 300),
        (2, 0, 50),
        (1, 2, 200),
        (1, 3, 400),
    ] {
        raw.send(&stamped(id, n, at), 0);
    }
    raw.send(&stamped(2, 1, 10), 9);
    assert!(matches!(raw.read_frame(), Some((Frame::Receipt, 9))));
    assert_eq!(drained(&all).len(), 6);
    let bodies = |got: Vec<(i64, String)>| got.into_iter().map(|(_, b)| b).collect::<Vec<_>>();
    let kept = ["1:0", "1:1", "2:0", "1:3"];
    assert_eq!(bodies(drained(&ordered)), kept);
    let over_stomp: Vec<String> = (0..4)
        .map(|_| String::from_utf8(stomp.expect("MESSAGE").body.to_vec()).unwrap())
        .collect();
    assert_eq!(over_stomp, kept);
    let over_mqtt: Vec<String> = (0..4)
        .map(|_| String::from_utf8(mqtt.receive().payload.to_vec()).unwrap())
        .collect();
    assert_eq!(over_mqtt, kept);
    // Each reader counted the two it dropped.
    let subs = call(&server, "GET", "/api/subscriptions", None, None).json();
    let dropped: Vec<u64> = subs
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["dropped"].as_u64())
        .filter(|d| *d > 0)
        .collect();
    assert_eq!(dropped, [2, 2, 2], "{subs}");
    // A header that says nothing it knows is refused.
    stomp.send(
        &herald_protocol::stomp::StompFrame::new("SUBSCRIBE")
            .header("id", "1")
            .header("destination", "/topic/sensors.#")
            .header("destination-order", "alphabetical"),
    );
    stomp.expect_error_saying("destination-order");
}

#[test]
fn a_reader_that_joins_asks_for_fewer_of_each_instances_kept_samples() {
    use herald_server::addresses::Durability;
    let server = keyed(Durability::TransientLocal, None);
    let (_c, s) = connect(&server);
    let p = s
        .create_producer(&Destination::topic("sensors.hall"))
        .unwrap();
    three_sensors(&p);
    let (_c2, s2) = connect(&server);
    let options = ConsumerOptions::default().history(1);
    let late = s2
        .create_consumer_with(&Destination::topic("sensors.#"), options)
        .unwrap();
    let got: Vec<String> = drained(&late).into_iter().map(|(_, b)| b).collect();
    assert_eq!(got, ["1:2", "3:2"]);
}

#[test]
fn reader_policies_that_make_no_sense_are_refused_naming_why() {
    use herald_protocol::frame::{ReaderQos, Subscribe};
    let server = start();
    let mut raw = RawClient::connected(&server, 0);
    // A policy the server does not know: the frame is malformed.
    let mut subscribe = Subscribe::new(1, DestinationKind::Topic, "t");
    subscribe.reader.time_filter_ms = 10;
    let mut wire = bytes::BytesMut::new();
    Frame::Subscribe(subscribe).encode(3, &mut wire).unwrap();
    // The last policy's number, 1 (time filter), becomes 9.
    let at = wire.len() - 9;
    assert_eq!(wire[at], 1);
    wire[at] = 9;
    raw.write(&wire);
    let e = raw.expect_fatal(ErrorCode::Malformed);
    assert!(e.message.contains("unknown policy 9"), "{e:?}");
    // A filter of a hundred years; a filter on a queue: refused, the
    // connection goes on.
    let mut raw = RawClient::connected(&server, 0);
    let mut long = Subscribe::new(2, DestinationKind::Topic, "t");
    long.reader = ReaderQos {
        time_filter_ms: 100 * 365 * 86_400_000,
        ..ReaderQos::default()
    };
    raw.send(&Frame::Subscribe(long), 4);
    let (e, id) = raw.expect_error();
    assert_eq!(
        (e.error_code(), id),
        (Some(ErrorCode::LimitExceeded), 4),
        "{e:?}"
    );
    let mut on_queue = Subscribe::new(3, DestinationKind::Queue, "q");
    on_queue.acknowledged = true;
    on_queue.reader.by_source_timestamp = true;
    raw.send(&Frame::Subscribe(on_queue), 5);
    let (e, id) = raw.expect_error();
    assert_eq!(
        (e.error_code(), id),
        (Some(ErrorCode::LimitExceeded), 5),
        "{e:?}"
    );
    raw.send(
        &Frame::Subscribe(Subscribe::new(4, DestinationKind::Topic, "t")),
        6,
    );
    assert!(matches!(raw.read_frame(), Some((Frame::Receipt, 6))));
}
