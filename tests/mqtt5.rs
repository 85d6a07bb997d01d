//! MQTT 5.0's server-side features, each against the normative statements
//! of the OASIS standard it is quoted by: Subscription Identifiers, topic
//! aliases from the server, and the Server Keep Alive. A real server on
//! ephemeral ports, MQTT spoken over real sockets.

use bytes::Bytes;
use herald_protocol::mqtt::{
    Packet, Properties, Property, Publish, QoS, Subscribe, SubscribeOptions, Version,
};
use herald_tests::{start, start_with, test_config, MqttClient};

fn options(qos: QoS) -> SubscribeOptions {
    SubscribeOptions {
        qos,
        no_local: false,
        retain_as_published: false,
        retain_handling: 0,
    }
}

/// Subscribes to `filter` with `properties`; the SUBACK's code.
fn subscribe(c: &mut MqttClient, filter: &str, properties: Vec<Property>) -> u8 {
    let packet_id = c.packet_id();
    c.send(&Packet::Subscribe(Subscribe {
        packet_id,
        properties: Properties(properties),
        filters: vec![(filter.to_owned(), options(QoS::AtLeastOnce))],
    }));
    match c.read() {
        Some(Packet::SubAck(ack)) if ack.packet_id == packet_id => ack.codes[0],
        other => panic!("expected SUBACK, got {other:?}"),
    }
}

/// The Subscription Identifiers a PUBLISH carries.
fn identifiers(p: &Publish) -> Vec<u32> {
    p.properties
        .0
        .iter()
        .filter_map(|p| match p {
            Property::SubscriptionId(id) => Some(*id),
            _ => None,
        })
        .collect()
}

/// The next packet, which must be a PUBLISH, not acknowledged.
fn unacknowledged(c: &mut MqttClient) -> Publish {
    match c.read() {
        Some(Packet::Publish(p)) => p,
        other => panic!("expected PUBLISH, got {other:?}"),
    }
}

fn topic_alias(p: &Publish) -> Option<u16> {
    p.properties.0.iter().find_map(|p| match p {
        Property::TopicAlias(a) => Some(*a),
        _ => None,
    })
}

#[test]
fn subscription_identifiers_go_with_the_messages_of_the_subscriptions_that_have_one() {
    let server = start();
    let (mut sub, ack) =
        MqttClient::connect_with(&server, MqttClient::connect_packet(Version::V5, "sids"));
    // Announced as available (its absence would say so too).
    assert!(
        ack.properties
            .0
            .contains(&Property::SubscriptionIdsAvailable(1)),
        "{ack:?}"
    );
    assert_eq!(
        subscribe(&mut sub, "sid/#", vec![Property::SubscriptionId(7)]),
        1
    );
    assert_eq!(
        subscribe(
            &mut sub,
            "sid/+",
            vec![Property::SubscriptionId(268_435_455)]
        ),
        1
    );
    assert_eq!(subscribe(&mut sub, "sid/x", vec![]), 1);
    let mut publisher = MqttClient::connected(&server, Version::V5, "sid-pub");
    let p = publisher.publish_packet("sid/x", b"one", QoS::AtLeastOnce);
    assert_eq!(publisher.publish(p), 0);
    // [MQTT-3.3.4-3]: the identifiers go "in the message which is published
    // as the result of the subscriptions", and [MQTT-3.3.4-5]: "If the
    // Server sends multiple PUBLISH packets it MUST send, in each of them,
    // the Subscription Identifier of the matching subscription if it has a
    // Subscription Identifier." Herald sends one copy per matching
    // subscription, as 3.3.4 allows (so do Mosquitto and VerneMQ), and
    // none to the subscription that had none.
    let mut got: Vec<Vec<u32>> = (0..3).map(|_| identifiers(&sub.receive())).collect();
    got.sort();
    assert_eq!(got, vec![vec![], vec![7], vec![268_435_455]]);
    // A SUBSCRIBE to the same filter replaces the subscription
    // [MQTT-3.8.4-3], and the identifier "is associated with any
    // subscription created or modified" by it (3.8.2.1.2): the new one, or
    // none.
    assert_eq!(
        subscribe(&mut sub, "sid/#", vec![Property::SubscriptionId(8)]),
        1
    );
    assert_eq!(subscribe(&mut sub, "sid/+", vec![]), 1);
    let p = publisher.publish_packet("sid/y", b"two", QoS::AtMostOnce);
    assert_eq!(publisher.publish(p), 0);
    let mut got: Vec<Vec<u32>> = (0..2).map(|_| identifiers(&sub.receive())).collect();
    got.sort();
    assert_eq!(got, vec![vec![], vec![8]]);

    // A 3.1.1 subscriber of the same topic gets no properties at all.
    let mut old = MqttClient::connected(&server, Version::V311, "sid-311");
    old.subscribe("sid/#", QoS::AtMostOnce);
    let p = publisher.publish_packet("sid/z", b"three", QoS::AtMostOnce);
    assert_eq!(publisher.publish(p), 0);
    assert!(old.receive().properties.0.is_empty());
}

#[test]
fn a_bad_subscription_identifier_is_a_protocol_error() {
    let server = start();
    // "It is a Protocol Error if the Subscription Identifier has a value
    // of 0" and "to include the Subscription Identifier more than once"
    // (3.8.2.1.2).
    for properties in [
        vec![Property::SubscriptionId(0)],
        vec![Property::SubscriptionId(1), Property::SubscriptionId(2)],
    ] {
        let mut c = MqttClient::connected(&server, Version::V5, "bad-sid");
        c.send(&Packet::Subscribe(Subscribe {
            packet_id: 1,
            properties: Properties(properties.clone()),
            filters: vec![("x".into(), options(QoS::AtMostOnce))],
        }));
        let said = c.expect_closed();
        assert!(
            matches!(said.as_slice(), [Packet::Disconnect(d)] if d.reason == 0x82),
            "{properties:?}: {said:?}"
        );
    }
    // [MQTT-3.3.4-6]: "A PUBLISH packet sent from a Client to a Server MUST
    // NOT contain a Subscription Identifier."
    let mut c = MqttClient::connected(&server, Version::V5, "bad-pub");
    let mut p = c.publish_packet("x", b"x", QoS::AtMostOnce);
    p.properties.0.push(Property::SubscriptionId(3));
    c.send(&Packet::Publish(p));
    let said = c.expect_closed();
    assert!(
        matches!(said.as_slice(), [Packet::Disconnect(d)] if d.reason == 0x82),
        "{said:?}"
    );
}

#[test]
fn a_persistent_sessions_subscriptions_keep_their_identifiers() {
    let server = start();
    let persistent = || {
        let mut connect = MqttClient::connect_packet(Version::V5, "sid-kept");
        connect.clean = false;
        connect.properties = Properties(vec![Property::SessionExpiry(600)]);
        connect
    };
    let (mut c, _) = MqttClient::connect_with(&server, persistent());
    assert_eq!(
        subscribe(&mut c, "kept/#", vec![Property::SubscriptionId(42)]),
        1
    );
    c.disconnect();
    let mut publisher = MqttClient::connected(&server, Version::V5, "sid-kept-pub");
    let p = publisher.publish_packet("kept/a", b"while away", QoS::AtLeastOnce);
    assert_eq!(publisher.publish(p), 0);
    let (mut c, ack) = MqttClient::connect_with(&server, persistent());
    assert!(ack.session_present);
    let kept = c.receive();
    assert_eq!(
        (kept.payload.as_ref(), identifiers(&kept)),
        (&b"while away"[..], vec![42])
    );
    let p = publisher.publish_packet("kept/b", b"after", QoS::AtLeastOnce);
    assert_eq!(publisher.publish(p), 0);
    assert_eq!(identifiers(&c.receive()), vec![42]);
}

#[test]
fn the_server_sets_topic_aliases_up_to_the_clients_maximum() {
    let mut config = test_config();
    config.mqtt.topic_alias_maximum = 3;
    let server = start_with(config);
    let subscriber = |name: &str, max: Option<u16>| {
        let mut connect = MqttClient::connect_packet(Version::V5, name);
        connect.properties = Properties(max.map(Property::TopicAliasMaximum).into_iter().collect());
        let (mut c, ack) = MqttClient::connect_with(&server, connect);
        assert_eq!(ack.code, 0);
        c.subscribe("al/#", QoS::AtMostOnce);
        c
    };
    // Two aliases for this one; three (the server's own maximum) for the
    // one that asks for ten; none for the one that sets no maximum.
    // [MQTT-3.3.2-11]: "A Server MUST NOT send a PUBLISH packet with a
    // Topic Alias greater than the Topic Alias Maximum value sent by the
    // Client in the CONNECT packet"; [MQTT-3.1.2-27]: "If Topic Alias
    // Maximum is absent or zero, the Server MUST NOT send any Topic
    // Aliases to the Client."
    let mut two = subscriber("al-two", Some(2));
    let mut ten = subscriber("al-ten", Some(10));
    let mut none = subscriber("al-none", None);
    let mut publisher = MqttClient::connected(&server, Version::V5, "al-pub");
    let topics = [
        "al/a", "al/b", "al/c", "al/d", "al/a", "al/b", "al/c", "al/d",
    ];
    for (i, topic) in topics.iter().enumerate() {
        let p = publisher.publish_packet(topic, format!("{i}").as_bytes(), QoS::AtMostOnce);
        assert_eq!(publisher.publish(p), 0);
    }
    let wire = |c: &mut MqttClient| -> Vec<(String, Option<u16>)> {
        (0..topics.len())
            .map(|_| {
                let p = c.receive();
                (p.topic.clone(), topic_alias(&p))
            })
            .collect()
    };
    let (a, b, c, d) = ("al/a", "al/b", "al/c", "al/d");
    let set = |t: &str, n| (t.to_owned(), Some(n));
    let alone = |n| (String::new(), Some(n));
    let plain = |t: &str| (t.to_owned(), None);
    // The topic with a new alias, then the alias alone (3.3.2.3.4); a topic
    // past the maximum goes as itself.
    assert_eq!(
        wire(&mut two),
        vec![
            set(a, 1),
            set(b, 2),
            plain(c),
            plain(d),
            alone(1),
            alone(2),
            plain(c),
            plain(d)
        ]
    );
    assert_eq!(
        wire(&mut ten),
        vec![
            set(a, 1),
            set(b, 2),
            set(c, 3),
            plain(d),
            alone(1),
            alone(2),
            alone(3),
            plain(d)
        ]
    );
    assert_eq!(
        wire(&mut none),
        [a, b, c, d, a, b, c, d].map(plain).to_vec()
    );
    // "A receiver MUST NOT carry forward any Topic Alias mappings from one
    // Network Connection to another" [MQTT-3.3.2-7]: a new one starts over.
    drop(two);
    let mut again = subscriber("al-two", Some(2));
    let p = publisher.publish_packet("al/c", b"x", QoS::AtMostOnce);
    assert_eq!(publisher.publish(p), 0);
    let p = again.receive();
    assert_eq!((p.topic.as_str(), topic_alias(&p)), ("al/c", Some(1)));
}

#[test]
fn the_server_keep_alive_holds_a_client_to_the_configured_maximum() {
    let mut config = test_config();
    config.mqtt.max_keep_alive = 1;
    let server = start_with(config);
    // [MQTT-3.2.2-21]: "If the Server sends a Server Keep Alive on the
    // CONNACK packet, the Client MUST use this value instead of the Keep
    // Alive value the Client sent on CONNECT", and [MQTT-3.2.2-22]: without
    // one, "the Server MUST use the Keep Alive value set by the Client".
    // Sent when the client asks for more, or for none (0); not when it
    // asks for no more than the maximum.
    for (asked, told) in [(60, Some(1)), (0, Some(1)), (1, None)] {
        let mut connect = MqttClient::connect_packet(Version::V5, "ka");
        connect.keep_alive = asked;
        let (mut c, ack) = MqttClient::connect_with(&server, connect);
        assert_eq!(ack.code, 0);
        let server_keep_alive = ack.properties.0.iter().find_map(|p| match p {
            Property::ServerKeepAlive(s) => Some(*s),
            _ => None,
        });
        assert_eq!(server_keep_alive, told, "asked for {asked}");
        // And held to it (3.1.2.10): silent for one and a half keep-alives,
        // closed with 0x8D (keep alive timeout).
        let said = c.expect_closed();
        assert!(
            matches!(said.as_slice(), [Packet::Disconnect(d)] if d.reason == 0x8D),
            "asked for {asked}: {said:?}"
        );
    }
    // A 3.1.1 client cannot be told: refused, as Mosquitto's
    // max_keepalive refuses it (return code 2).
    let mut connect = MqttClient::connect_packet(Version::V311, "ka-311");
    connect.keep_alive = 60;
    let (mut c, ack) = MqttClient::connect_with(&server, connect);
    assert_eq!(ack.code, 2);
    assert!(c.expect_closed().is_empty());
    let mut connect = MqttClient::connect_packet(Version::V311, "ka-311");
    connect.keep_alive = 1;
    let (_c, ack) = MqttClient::connect_with(&server, connect);
    assert_eq!(ack.code, 0);
}

#[test]
fn aliases_and_identifiers_ride_together_on_a_queued_qos_1_delivery() {
    // A QoS 1 delivery waits for room in the client's Receive Maximum; its
    // alias is given when it is sent, so a later QoS 0 message that
    // overtakes it never uses an alias the client has not yet been told.
    let server = start();
    let mut connect = MqttClient::connect_packet(Version::V5, "mix");
    connect.properties = Properties(vec![
        Property::TopicAliasMaximum(4),
        Property::ReceiveMaximum(1),
    ]);
    let (mut c, _) = MqttClient::connect_with(&server, connect);
    c.send(&Packet::Subscribe(Subscribe {
        packet_id: 1,
        properties: Properties(vec![Property::SubscriptionId(5)]),
        filters: vec![
            ("mix/q".into(), options(QoS::AtLeastOnce)),
            ("mix/z".into(), options(QoS::AtMostOnce)),
        ],
    }));
    assert!(matches!(c.read(), Some(Packet::SubAck(a)) if a.codes == vec![1, 0]));
    let mut publisher = MqttClient::connected(&server, Version::V5, "mix-pub");
    for (topic, qos) in [
        ("mix/q", QoS::AtLeastOnce),
        ("mix/q", QoS::AtLeastOnce),
        ("mix/z", QoS::AtMostOnce),
    ] {
        let p = publisher.publish_packet(topic, b"m", qos);
        assert_eq!(publisher.publish(p), 0);
    }
    let first = unacknowledged(&mut c);
    assert_eq!(
        (first.topic.as_str(), topic_alias(&first)),
        ("mix/q", Some(1))
    );
    assert_eq!(identifiers(&first), vec![5]);
    // The second QoS 1 waits for the first's PUBACK; the QoS 0 passes.
    let z = unacknowledged(&mut c);
    assert_eq!(
        (z.topic.as_str(), topic_alias(&z), z.qos),
        ("mix/z", Some(2), QoS::AtMostOnce)
    );
    c.acknowledge(&first);
    let second = unacknowledged(&mut c);
    assert_eq!((second.topic.as_str(), topic_alias(&second)), ("", Some(1)));
    assert_eq!(second.payload, Bytes::from_static(b"m"));
}

#[test]
fn no_more_publishes_in_flight_to_a_client_than_its_receive_maximum() {
    let server = start();
    let mut connect = MqttClient::connect_packet(Version::V5, "rm");
    connect.properties = Properties(vec![Property::ReceiveMaximum(2)]);
    let (mut c, ack) = MqttClient::connect_with(&server, connect);
    // The server's own, announced (3.2.2.3.3).
    assert!(
        ack.properties.0.contains(&Property::ReceiveMaximum(1024)),
        "{ack:?}"
    );
    c.subscribe("rm/one", QoS::AtLeastOnce);
    c.subscribe("rm/two", QoS::ExactlyOnce);
    let mut publisher = MqttClient::connected(&server, Version::V5, "rm-pub");
    let mut publish = |topic: &str, qos, count| {
        for i in 0..count {
            let p = publisher.publish_packet(topic, format!("{i}").as_bytes(), qos);
            assert_eq!(publisher.publish(p), 0);
        }
    };
    let quiet = |c: &mut MqttClient| {
        let more = c.read_within(std::time::Duration::from_millis(300));
        assert!(
            more.is_none(),
            "more than the receive maximum in flight: {more:?}"
        );
    };
    let next = |c: &mut MqttClient, expected: &str| {
        let p = unacknowledged(c);
        assert_eq!(String::from_utf8_lossy(&p.payload), expected);
        p
    };
    // [MQTT-3.3.4-9]: "The Server MUST NOT send more than Receive Maximum
    // QoS 1 and QoS 2 PUBLISH packets for which it has not received PUBACK,
    // PUBCOMP, or PUBREC with a Reason Code of 128 or greater from the
    // Client." The rest wait, in order.
    publish("rm/one", QoS::AtLeastOnce, 4);
    let (zero, one) = (next(&mut c, "0"), next(&mut c, "1"));
    quiet(&mut c);
    c.acknowledge(&zero);
    let two = next(&mut c, "2");
    quiet(&mut c);
    c.acknowledge(&one);
    c.acknowledge(&two);
    let three = next(&mut c, "3");
    c.acknowledge(&three);
    // A QoS 2 delivery holds its place until PUBCOMP: PUBREC is not
    // enough. A PUBREC that refuses (0x80 or above) frees it at once.
    publish("rm/two", QoS::ExactlyOnce, 4);
    let (zero, one) = (next(&mut c, "0"), next(&mut c, "1"));
    quiet(&mut c);
    let zero_id = zero.packet_id.unwrap();
    c.send(&Packet::PubRec(herald_protocol::mqtt::Ack::ok(zero_id)));
    assert!(matches!(c.read(), Some(Packet::PubRel(a)) if a.packet_id == zero_id));
    quiet(&mut c);
    c.send(&Packet::PubComp(herald_protocol::mqtt::Ack::ok(zero_id)));
    next(&mut c, "2");
    quiet(&mut c);
    c.send(&Packet::PubRec(herald_protocol::mqtt::Ack {
        packet_id: one.packet_id.unwrap(),
        reason: 0x80,
        properties: Properties::default(),
    }));
    next(&mut c, "3");
    quiet(&mut c);
}

#[test]
fn a_client_past_the_servers_receive_maximum_is_disconnected_with_0x93() {
    let mut config = test_config();
    config.mqtt.receive_maximum = 2;
    let server = start_with(config);
    // A persistent session's subscription: its messages go to the journal,
    // so each publish waits there for its answer.
    let mut connect = MqttClient::connect_packet(Version::V5, "rm-keeper");
    connect.clean = false;
    connect.properties = Properties(vec![Property::SessionExpiry(600)]);
    let (mut keeper, _) = MqttClient::connect_with(&server, connect);
    keeper.subscribe("rmx/#", QoS::AtLeastOnce);
    // A QoS 2 publish counts once from its arrival to its PUBREL, not once
    // as owed a PUBREC and again as received: with it and a QoS 1 in
    // flight the client is at 2, not past it.
    let mut c = MqttClient::connected(&server, Version::V5, "rm-over");
    let mut batch = bytes::BytesMut::new();
    for (i, qos) in [QoS::ExactlyOnce, QoS::AtLeastOnce, QoS::AtLeastOnce]
        .into_iter()
        .enumerate()
    {
        let p = c.publish_packet(&format!("rmx/{i}"), b"x", qos);
        herald_protocol::mqtt::encode(&Packet::Publish(p), Version::V5, &mut batch);
    }
    // In one write, so that all three are there before the journal has
    // answered the first: the third is one too many. [MQTT-3.3.4-7] forbids
    // the client that, and a receiver that gets more "uses DISCONNECT with
    // Reason Code 0x93 (Receive Maximum exceeded)" (3.3.4).
    c.write(&batch);
    let said = c.expect_closed();
    let reasons: Vec<u8> = said
        .iter()
        .filter_map(|p| match p {
            Packet::Disconnect(d) => Some(d.reason),
            _ => None,
        })
        .collect();
    assert_eq!(reasons, vec![0x93], "{said:?}");
    assert!(
        !said
            .iter()
            .any(|p| matches!(p, Packet::PubAck(a) if a.packet_id == 3)),
        "the one past the maximum is not taken: {said:?}"
    );
    // Two in flight, then answered: the client goes on.
    let mut c = MqttClient::connected(&server, Version::V5, "rm-within");
    let mut batch = bytes::BytesMut::new();
    for (i, qos) in [QoS::ExactlyOnce, QoS::AtLeastOnce].into_iter().enumerate() {
        let p = c.publish_packet(&format!("rmx/w{i}"), b"x", qos);
        herald_protocol::mqtt::encode(&Packet::Publish(p), Version::V5, &mut batch);
    }
    c.write(&batch);
    let mut answers = Vec::new();
    while answers.len() < 2 {
        match c.read() {
            Some(Packet::PubRec(a)) => answers.push(("PUBREC", a.packet_id, a.reason)),
            Some(Packet::PubAck(a)) => answers.push(("PUBACK", a.packet_id, a.reason)),
            other => panic!("{other:?}"),
        }
    }
    answers.sort();
    assert_eq!(answers, vec![("PUBACK", 2, 0), ("PUBREC", 1, 0)]);
}

#[test]
fn a_refused_subscription_is_a_failure_code_in_suback_and_the_session_goes_on() {
    let server = start();
    for (version, failure) in [(Version::V5, 0x8F), (Version::V311, 0x80)] {
        let mut c = MqttClient::connected(&server, version, "refused");
        // Shared subscription filters that are not (4.8.2): no filter, an
        // empty share name, wildcards in it. 5.0 says 0x8F (Topic Filter
        // invalid), 3.1.1 has 0x80 only; Herald takes shared subscriptions,
        // so 0x9E (not supported) never applies.
        for filter in [
            "$share/g",
            "$share//x",
            "$share/g+/x",
            "$share/g#/x",
            "a/#/b",
        ] {
            assert_eq!(
                c.subscribe_with(filter, options(QoS::AtLeastOnce)),
                failure,
                "{version:?} {filter}"
            );
        }
        // The session goes on, the others' subscriptions with it.
        c.subscribe("$share/g/ok", QoS::AtLeastOnce);
        let p = c.publish_packet("ok", b"fine", QoS::AtLeastOnce);
        assert_eq!(c.publish(p), 0);
        assert_eq!(c.receive().payload, "fine");
        c.disconnect();
    }
    // [MQTT-3.8.3-4]: "It is a Protocol Error to set the No Local bit to 1
    // on a Shared Subscription": not a SUBACK code, a DISCONNECT.
    let mut c = MqttClient::connected(&server, Version::V5, "shared-no-local");
    c.send(&Packet::Subscribe(Subscribe {
        packet_id: 1,
        properties: Properties::default(),
        filters: vec![(
            "$share/g/x".into(),
            SubscribeOptions {
                no_local: true,
                ..options(QoS::AtMostOnce)
            },
        )],
    }));
    let said = c.expect_closed();
    assert!(
        matches!(said.as_slice(), [Packet::Disconnect(d)] if d.reason == 0x82),
        "{said:?}"
    );
}

/// The Response Information in a CONNACK.
fn response_information(ack: &herald_protocol::mqtt::ConnAck) -> Option<&str> {
    ack.properties.0.iter().find_map(|p| match p {
        Property::ResponseInfo(r) => Some(r.as_str()),
        _ => None,
    })
}

/// The Response Topic and Correlation Data of a PUBLISH.
fn response_topic_and_correlation(p: &Publish) -> (Option<&str>, Option<&[u8]>) {
    let topic = p.properties.0.iter().find_map(|p| match p {
        Property::ResponseTopic(t) => Some(t.as_str()),
        _ => None,
    });
    let data = p.properties.0.iter().find_map(|p| match p {
        Property::CorrelationData(d) => Some(d.as_ref()),
        _ => None,
    });
    (topic, data)
}

#[test]
fn response_information_is_given_only_when_asked_for() {
    let server = start();
    let ask = |value: Option<u8>, id: &str| {
        let mut connect = MqttClient::connect_packet(Version::V5, id);
        connect
            .properties
            .0
            .extend(value.map(Property::RequestResponseInfo));
        MqttClient::connect_with(&server, connect)
    };
    // 3.1.2.11.7: with 1 "the Server MAY return Response Information";
    // Herald does, the configured prefix and the client id.
    let (mut requester, ack) = ask(Some(1), "rr-asker");
    assert_eq!(response_information(&ack), Some("reply/rr-asker"));
    // [MQTT-3.1.2-28]: "A value of 0 indicates that the Server MUST NOT
    // return Response Information"; absent is 0.
    for (value, id) in [(Some(0), "rr-0"), (None, "rr-none")] {
        let (_c, ack) = ask(value, id);
        assert_eq!(response_information(&ack), None, "{value:?}");
    }
    // A client id that would put a wildcard in the topic gets none.
    let (_c, ack) = ask(Some(1), "rr+#");
    assert_eq!(response_information(&ack), None);
    // The topic works as a response topic: a responder's answer to it
    // reaches the requester, its Response Topic and Correlation Data
    // unaltered [MQTT-3.3.2-15] [MQTT-3.3.2-16].
    requester.subscribe("reply/rr-asker", QoS::AtLeastOnce);
    let mut responder = MqttClient::connected(&server, Version::V5, "rr-responder");
    responder.subscribe("svc/time", QoS::AtLeastOnce);
    let mut request = requester.publish_packet("svc/time", b"now?", QoS::AtLeastOnce);
    let data = Bytes::from_static(&[0, 0xff, 7, b'x']);
    request.properties = Properties(vec![
        Property::ResponseTopic("reply/rr-asker".into()),
        Property::CorrelationData(data.clone()),
    ]);
    assert_eq!(requester.publish(request), 0);
    let got = responder.receive();
    let (topic, correlation) = response_topic_and_correlation(&got);
    assert_eq!(
        (topic, correlation),
        (Some("reply/rr-asker"), Some(&data[..]))
    );
    let mut answer = responder.publish_packet(topic.unwrap(), b"noon", QoS::AtLeastOnce);
    answer.properties = Properties(vec![Property::CorrelationData(data.clone())]);
    assert_eq!(responder.publish(answer), 0);
    let reply = requester.receive();
    assert_eq!(reply.payload, "noon");
    assert_eq!(response_topic_and_correlation(&reply).1, Some(&data[..]));

    // Configured off: none, even when asked.
    let mut config = test_config();
    config.mqtt.response_topic_prefix = String::new();
    let quiet = start_with(config);
    let mut connect = MqttClient::connect_packet(Version::V5, "rr-off");
    connect.properties.0.push(Property::RequestResponseInfo(1));
    let (_c, ack) = MqttClient::connect_with(&quiet, connect);
    assert_eq!(response_information(&ack), None);
}

#[test]
fn response_topic_and_correlation_data_are_jms_reply_to_and_correlation_id() {
    use herald_client::{reply, Destination, Message, Requestor};
    let server = start();
    // An MQTT requester, a JMS responder: the Response Topic is the
    // request's reply-to, UTF-8 Correlation Data its correlation id, and
    // the JMS reply (correlation id copied) reaches the requester with the
    // same Correlation Data.
    let mut requester = MqttClient::connected(&server, Version::V5, "jms-asker");
    requester.subscribe("answers/jms-asker", QoS::AtLeastOnce);
    let (_c, session) = herald_tests::connect(&server);
    let service = session
        .create_consumer(&Destination::topic("questions.time"))
        .unwrap();
    let mut request = requester.publish_packet("questions/time", b"now?", QoS::AtLeastOnce);
    request.properties = Properties(vec![
        Property::ResponseTopic("answers/jms-asker".into()),
        Property::CorrelationData(Bytes::from_static(b"req-1")),
    ]);
    assert_eq!(requester.publish(request), 0);
    let got = herald_tests::next(&service);
    assert_eq!(
        got.reply_to(),
        Some(&Destination::topic("answers.jms-asker"))
    );
    assert_eq!(got.correlation_id(), Some("req-1"));
    reply(&session, &got, Message::text("noon")).unwrap();
    let answer = requester.receive();
    assert_eq!(answer.payload, "noon");
    assert_eq!(
        response_topic_and_correlation(&answer),
        (None, Some(&b"req-1"[..]))
    );

    // A JMS requester, an MQTT responder: the reply-to is a temporary
    // queue, which reaches MQTT as a `$queue/` Response Topic; a PUBLISH
    // to it goes to the queue.
    let mut responder = MqttClient::connected(&server, Version::V5, "mqtt-service");
    responder.subscribe("clock/+", QoS::AtLeastOnce);
    let worker = std::thread::spawn(move || {
        let got = responder.receive();
        let (topic, correlation) = response_topic_and_correlation(&got);
        let (topic, correlation) = (topic.unwrap().to_owned(), correlation.unwrap().to_vec());
        let mut answer = responder.publish_packet(&topic, b"tea time", QoS::AtLeastOnce);
        answer.properties = Properties(vec![Property::CorrelationData(correlation.into())]);
        assert_eq!(responder.publish(answer), 0);
        topic
    });
    let requestor = Requestor::new(&session, &Destination::topic("clock.london")).unwrap();
    let answer = requestor
        .request(Message::text("what time?"), herald_tests::PATIENCE)
        .unwrap();
    // Bytes, as the responder set no payload format indicator.
    assert_eq!(
        answer.body,
        herald_protocol::Body::Bytes(Bytes::from_static(b"tea time"))
    );
    let topic = worker.join().unwrap();
    assert!(topic.starts_with("$queue/temp/"), "{topic}");
}

#[test]
fn a_queue_topic_is_sent_to_not_subscribed_to() {
    let server = start();
    let mut c = MqttClient::connected(&server, Version::V5, "to-queue");
    // Retained is meaningless on a queue: the message goes in, once.
    let mut p = c.publish_packet("$queue/work/items", b"job", QoS::AtLeastOnce);
    p.retain = true;
    assert_eq!(c.publish(p), 0);
    let (_c, session) = herald_tests::connect(&server);
    let consumer = session
        .create_consumer(&herald_client::Destination::queue("work.items"))
        .unwrap();
    let got = herald_tests::next(&consumer);
    assert_eq!(
        got.body,
        herald_protocol::Body::Bytes(Bytes::from_static(b"job"))
    );
    herald_tests::assert_nothing(&consumer);
    // A subscription to one is refused with Topic Filter invalid, and the
    // session goes on.
    assert_eq!(
        c.subscribe_with("$queue/work/items", options(QoS::AtLeastOnce)),
        0x8F
    );
    let p = c.publish_packet("still/here", b"x", QoS::AtLeastOnce);
    assert_eq!(c.publish(p), 0);
}

#[test]
fn a_wildcard_response_topic_is_a_protocol_error() {
    let server = start();
    // [MQTT-3.3.2-14]: "The Response Topic MUST NOT contain wildcard
    // characters."
    let mut c = MqttClient::connected(&server, Version::V5, "rt-wild");
    let mut p = c.publish_packet("a/b", b"x", QoS::AtMostOnce);
    p.properties = Properties(vec![Property::ResponseTopic("replies/#".into())]);
    c.send(&Packet::Publish(p));
    let said = c.expect_closed();
    assert!(
        matches!(said.as_slice(), [Packet::Disconnect(d)] if d.reason == 0x82),
        "{said:?}"
    );
    // In a will, the CONNECT is refused: [MQTT-4.13.1-1], the connection
    // is closed (a CONNACK is optional; Herald answers only a CONNECT it
    // could read), and the will never goes out.
    let mut connect = MqttClient::connect_packet(Version::V5, "rt-will");
    let mut will = MqttClient::will("last/words", b"bye", QoS::AtMostOnce);
    will.properties = Properties(vec![Property::ResponseTopic("r/+".into())]);
    connect.will = Some(will);
    let mut watcher = MqttClient::connected(&server, Version::V5, "rt-watcher");
    watcher.subscribe("last/words", QoS::AtMostOnce);
    let mut c = MqttClient::open(&server, Version::V5);
    c.send(&Packet::Connect(Box::new(connect)));
    assert!(c.expect_closed().is_empty());
    assert!(watcher
        .read_within(std::time::Duration::from_millis(300))
        .is_none());
}
