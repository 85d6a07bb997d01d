//! Message selectors, evaluated on the server for topics and queues.

use herald_client::{ConsumerOptions, Destination, Error, ErrorCode, Message};
use herald_tests::*;

fn sale(region: &str, units: i32) -> Message {
    Message::text(format!("{region}:{units}"))
        .with_property("region", region)
        .with_property("units", units)
}

#[test]
fn topic_subscribers_receive_only_what_their_selector_selects() {
    let server = start();
    let (_c, s) = connect(&server);
    let big_eu = s
        .create_consumer_with_selector(
            &Destination::topic("sales.#"),
            "region = 'EU' AND units >= 10",
        )
        .unwrap();
    let americas = s
        .create_consumer_with_selector(&Destination::topic("sales.#"), "region MATCHES '^(NA|SA)$'")
        .unwrap();
    let all = subscribe(&s, "sales.#");
    let p = s
        .create_producer(&Destination::topic("sales.phones"))
        .unwrap();
    for (region, units) in [("EU", 3), ("EU", 12), ("NA", 1), ("ASIA", 50), ("SA", 9)] {
        p.send_with_receipt(sale(region, units)).unwrap();
    }
    assert_eq!(next(&big_eu).body_text(), Some("EU:12"));
    assert_nothing(&big_eu);
    assert_eq!(next(&americas).body_text(), Some("NA:1"));
    assert_eq!(next(&americas).body_text(), Some("SA:9"));
    assert_nothing(&americas);
    for _ in 0..5 {
        next(&all);
    }
    assert_eq!(
        server.stats().messages_out,
        8,
        "unselected messages never crossed the network"
    );
}

#[test]
fn subscribers_selecting_one_value_each_get_exactly_their_messages() {
    // Selectors of the form `device = N` are indexed by the value: each
    // message meets only its own, however many there are. The index must
    // keep JMS's semantics: 7.0 equals 7, the string '7' does not.
    let server = start();
    let (_c, s) = connect(&server);
    let topic = Destination::topic("telemetry");
    let devices: Vec<_> = (0..100)
        .map(|i| {
            let selector = format!("device = {i} AND reading >= 0");
            s.create_consumer_with_selector(&topic, &selector).unwrap()
        })
        .collect();
    let (_c2, s2) = connect(&server);
    let also_seven = s2
        .create_consumer_with_selector(&topic, "device = 7")
        .unwrap();
    let unindexed = s2
        .create_consumer_with_selector(&topic, "device > 97")
        .unwrap();
    let p = s.create_producer(&topic).unwrap();
    let reading = |device: Message| device.with_property("reading", 1);
    for i in 0..100 {
        p.send(reading(
            Message::text(format!("{i}")).with_property("device", i),
        ))
        .unwrap();
    }
    for odd in [
        Message::text("7.0").with_property("device", 7.0f64),
        Message::text("'7'").with_property("device", "7"),
        Message::text("none"),
    ] {
        p.send(reading(odd)).unwrap();
    }
    p.send_with_receipt(Message::text("end")).unwrap();
    for (i, device) in devices.iter().enumerate() {
        assert_eq!(next(device).body_text(), Some(format!("{i}").as_str()));
        if i == 7 {
            assert_eq!(next(device).body_text(), Some("7.0"));
        }
    }
    assert_eq!(next(&also_seven).body_text(), Some("7"));
    assert_eq!(next(&also_seven).body_text(), Some("7.0"));
    assert_eq!(next(&unindexed).body_text(), Some("98"));
    assert_eq!(next(&unindexed).body_text(), Some("99"));
    assert_nothing(&unindexed);
    assert_eq!(
        server.stats().messages_out,
        105,
        "no message reached a subscriber that does not select it"
    );
    // Ending subscriptions takes them out of the index.
    for device in devices.into_iter().take(50) {
        device.close().unwrap();
    }
    p.send_with_receipt(Message::text("7 again").with_property("device", 7))
        .unwrap();
    assert_eq!(next(&also_seven).body_text(), Some("7 again"));
}

#[test]
fn a_queue_consumer_takes_only_matching_messages_and_leaves_the_rest() {
    let server = start();
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("orders")).unwrap();
    for (region, units) in [("EU", 1), ("NA", 2), ("EU", 3)] {
        p.send_with_receipt(sale(region, units)).unwrap();
    }
    let eu = s
        .create_consumer_with_selector(&Destination::queue("orders"), "region = 'EU'")
        .unwrap();
    assert_eq!(next(&eu).body_text(), Some("EU:1"));
    assert_eq!(next(&eu).body_text(), Some("EU:3"));
    assert_nothing(&eu);
    assert_eq!(
        s.create_browser(&Destination::queue("orders"), "")
            .unwrap()
            .messages()
            .unwrap()
            .len(),
        1,
        "NA stays for others"
    );
    let any = s.create_consumer(&Destination::queue("orders")).unwrap();
    assert_eq!(next(&any).body_text(), Some("NA:2"));
}

#[test]
fn a_selector_on_jmsx_delivery_count_takes_only_redeliveries() {
    let server = start();
    let (c, first) = connect(&server);
    let q = Destination::queue("retries");
    let producer = first.create_producer(&q).unwrap();
    let acking = c.create_session(herald_client::AckMode::Client).unwrap();
    let careless = acking.create_consumer(&q).unwrap();
    producer
        .send_with_receipt(Message::text("failed once"))
        .unwrap();
    assert_eq!(next(&careless).delivery_count, 1);
    // Closed without an acknowledgement: it goes back, delivered once.
    careless.close().unwrap();
    let (_c2, second) = connect(&server);
    let retrier = second
        .create_consumer_with_selector(&q, "JMSXDeliveryCount > 1")
        .unwrap();
    let m = next(&retrier);
    assert_eq!((m.body_text(), m.delivery_count), (Some("failed once"), 2));
    // A first delivery is not for it.
    producer.send_with_receipt(Message::text("new")).unwrap();
    assert_nothing(&retrier);
}

#[test]
fn headers_are_selectable() {
    let server = start();
    let (_c, s) = connect(&server);
    let urgent = s
        .create_consumer_with(
            &Destination::topic("jobs"),
            ConsumerOptions::default().selector("JMSPriority >= 7 OR JMSType = 'urgent'"),
        )
        .unwrap();
    let p = s.create_producer(&Destination::topic("jobs")).unwrap();
    let mut high = Message::text("high");
    high.priority = 9;
    let mut typed = Message::text("typed");
    typed.set_message_type(Some("urgent".into()));
    for m in [Message::text("low"), high, typed] {
        p.send_with_receipt(m).unwrap();
    }
    assert_eq!(next(&urgent).body_text(), Some("high"));
    assert_eq!(next(&urgent).body_text(), Some("typed"));
    assert_nothing(&urgent);
}

#[test]
fn a_bad_selector_is_a_clear_error_naming_the_position() {
    let server = start();
    let (_c, s) = connect(&server);
    match s.create_consumer_with_selector(&Destination::topic("t"), "region = 'EU' AND") {
        Err(Error::InvalidSelector { reason, .. }) => {
            assert!(reason.contains("position 17"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    // The server checks too, for clients that do not.
    let mut raw = RawClient::connected(&server, 0);
    raw.send(
        &herald_protocol::Frame::Subscribe(herald_protocol::frame::Subscribe {
            selector: "units > > 3".into(),
            ..herald_protocol::frame::Subscribe::new(
                1,
                herald_protocol::DestinationKind::Topic,
                "t",
            )
        }),
        5,
    );
    let (e, id) = raw.expect_error();
    assert_eq!(
        (e.error_code(), id, e.fatal),
        (Some(ErrorCode::InvalidSelector), 5, false)
    );
    assert!(e.message.contains("position 8"), "{e:?}");
}
