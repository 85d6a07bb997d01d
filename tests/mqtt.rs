//! The MQTT listener, end to end: a real server on ephemeral ports, MQTT
//! 3.1.1 and 5.0 spoken over real sockets, the native client beside it.

use std::time::Duration;

use bytes::Bytes;
use herald_client::{Destination, Message};
use herald_protocol::mqtt::{
    Ack, Packet, Properties, Property, QoS, SubscribeOptions, Unsubscribe, Version,
};
use herald_server::auth::hash_password;
use herald_server::config::{RoleEntry, UserEntry};
use herald_tests::{
    call, connect, start, start_with, test_config, wait_until, MqttClient, TestServer, PATIENCE,
};

const BOTH: [Version; 2] = [Version::V311, Version::V5];

/// The names of a client id's durable subscriptions, as the management
/// interface lists them.
fn durables_of(server: &TestServer, client_id: &str) -> Vec<String> {
    let list = call(server, "GET", "/api/subscriptions", None, None).json();
    let mut names: Vec<String> = list
        .as_array()
        .expect("a list")
        .iter()
        .filter(|s| s["durable"] == true && s["client_id"] == client_id)
        .map(|s| s["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn qos_0_1_and_2_reach_a_subscriber_at_the_lesser_qos_in_both_versions() {
    let server = start();
    for version in BOTH {
        let mut sub = MqttClient::connected(&server, version, "sub");
        sub.subscribe("q/+", QoS::ExactlyOnce);
        let mut low = MqttClient::connected(&server, version, "low");
        low.subscribe("q/#", QoS::AtLeastOnce);
        let mut publisher = MqttClient::connected(&server, version, "pub");
        for (i, qos) in [QoS::AtMostOnce, QoS::AtLeastOnce, QoS::ExactlyOnce]
            .into_iter()
            .enumerate()
        {
            let p = publisher.publish_packet("q/x", format!("m{i}").as_bytes(), qos);
            assert_eq!(publisher.publish(p), 0);
            let got = sub.receive();
            assert_eq!((got.topic.as_str(), got.qos), ("q/x", qos));
            assert_eq!(got.payload, format!("m{i}").as_bytes());
            let got = low.receive();
            assert_eq!(got.qos, qos.min(QoS::AtLeastOnce));
        }
        for c in [sub, low, publisher] {
            c.disconnect();
        }
    }
}

#[test]
fn mqtt_and_native_clients_share_topics_both_ways() {
    let server = start();
    let (_native, session) = connect(&server);
    let consumer = session
        .create_consumer(&Destination::topic("home.*.temp"))
        .unwrap();
    let mut m = MqttClient::connected(&server, Version::V5, "bridge");
    m.subscribe("alerts/#", QoS::AtLeastOnce);
    // MQTT → native: the topic's levels become words.
    let p = m.publish_packet("home/kitchen/temp", b"21.5", QoS::AtLeastOnce);
    assert_eq!(m.publish(p), 0);
    let got = consumer.receive(PATIENCE).unwrap().expect("delivered");
    assert_eq!(
        got.destination().map(|d| d.name.as_str()),
        Some("home.kitchen.temp")
    );
    assert!(got.delivery_mode == herald_protocol::DeliveryMode::Persistent);
    // native → MQTT, with a property and a text body.
    let producer = session
        .create_producer(&Destination::topic("alerts.fire"))
        .unwrap();
    producer
        .send_with_receipt(
            Message::text("smoke")
                .with_property("room", "kitchen")
                .persistent(),
        )
        .unwrap();
    let got = m.receive();
    assert_eq!(got.topic, "alerts/fire");
    assert_eq!(got.payload, "smoke");
    assert_eq!(got.qos, QoS::AtLeastOnce);
    assert_eq!(MqttClient::user_property(&got, "room"), Some("kitchen"));
    assert!(got.properties.0.contains(&Property::PayloadFormat(1)));
}

#[test]
fn a_qos_2_publish_sent_twice_before_pubrel_is_routed_once() {
    let server = start();
    let mut sub = MqttClient::connected(&server, Version::V311, "s");
    sub.subscribe("once", QoS::AtMostOnce);
    let mut p = MqttClient::connected(&server, Version::V311, "p");
    let publish = p.publish_packet("once", b"x", QoS::ExactlyOnce);
    let id = publish.packet_id.unwrap();
    for dup in [false, true] {
        p.send(&Packet::Publish(herald_protocol::mqtt::Publish {
            dup,
            ..publish.clone()
        }));
        assert!(matches!(p.read(), Some(Packet::PubRec(a)) if a.packet_id == id));
    }
    p.send(&Packet::PubRel(Ack::ok(id)));
    assert!(matches!(p.read(), Some(Packet::PubComp(a)) if a.packet_id == id));
    assert_eq!(sub.receive().payload, "x");
    assert!(
        sub.read_within(Duration::from_millis(300)).is_none(),
        "only once"
    );
    // A PUBREL for an id nobody holds is answered, not fatal (5.0 says
    // which: 0x92).
    let mut v5 = MqttClient::connected(&server, Version::V5, "v5");
    v5.send(&Packet::PubRel(Ack::ok(77)));
    assert!(matches!(v5.read(), Some(Packet::PubComp(a)) if a.packet_id == 77 && a.reason == 0x92));
}

#[test]
fn a_persistent_session_keeps_its_subscriptions_and_their_messages_while_away() {
    let server = start();
    for version in BOTH {
        let mut connect = MqttClient::connect_packet(version, "keeper");
        connect.clean = false;
        if version == Version::V5 {
            connect.clean = true;
            connect.properties = Properties(vec![Property::SessionExpiry(3600)]);
        }
        let (mut c, ack) = MqttClient::connect_with(&server, connect.clone());
        assert!(!ack.session_present);
        // Subscribing again with other options replaces the subscription.
        c.subscribe("kept/#", QoS::ExactlyOnce);
        c.subscribe("kept/#", QoS::AtLeastOnce);
        assert_eq!(durables_of(&server, "keeper"), ["mqtt:100:kept/#"]);
        c.disconnect();
        let mut p = MqttClient::connected(&server, version, "p");
        for i in 0..5 {
            let publish = p.publish_packet("kept/a", format!("{i}").as_bytes(), QoS::AtLeastOnce);
            assert_eq!(p.publish(publish), 0);
        }
        let publish = p.publish_packet("kept/a", b"qos0", QoS::AtMostOnce);
        p.publish(publish);
        connect.clean = false;
        let (mut c, ack) = MqttClient::connect_with(&server, connect.clone());
        assert!(ack.session_present, "{version:?}");
        for i in 0..5 {
            assert_eq!(c.receive().payload, format!("{i}"));
        }
        // QoS 0 was kept too (as the specification allows), and goes at 0.
        let got = c.receive();
        assert_eq!((&got.payload[..], got.qos), (&b"qos0"[..], QoS::AtMostOnce));
        assert!(c.read_within(Duration::from_millis(300)).is_none());
        // A clean start ends the session.
        c.disconnect();
        connect.clean = true;
        connect.properties = Properties::default();
        let (c, ack) = MqttClient::connect_with(&server, connect);
        assert!(!ack.session_present);
        c.disconnect();
        let publish = p.publish_packet("kept/a", b"after", QoS::AtLeastOnce);
        assert_eq!(p.publish(publish), 0);
        assert!(durables_of(&server, "keeper").is_empty());
        p.disconnect();
    }
}

#[test]
fn subscribing_again_on_a_resumed_session_delivers_what_it_kept_once() {
    let server = start();
    for (version, qos) in [
        (Version::V311, QoS::ExactlyOnce),
        (Version::V5, QoS::ExactlyOnce),
        (Version::V311, QoS::AtLeastOnce),
        (Version::V5, QoS::AtLeastOnce),
    ] {
        let mut connect = MqttClient::connect_packet(version, "dev3");
        connect.clean = false;
        if version == Version::V5 {
            connect.properties = Properties(vec![Property::SessionExpiry(3600)]);
        }
        let (mut c, _) = MqttClient::connect_with(&server, connect.clone());
        c.subscribe("plant3/#", qos);
        c.disconnect();
        let mut p = MqttClient::connected(&server, version, "p");
        for i in 0..3 {
            let publish = p.publish_packet("plant3/a", format!("{i}").as_bytes(), qos);
            assert_eq!(p.publish(publish), 0);
        }
        // What mosquitto_sub -c and paho's on_connect do: subscribe again
        // at once, while the kept messages come.
        let (mut c, ack) = MqttClient::connect_with(&server, connect.clone());
        assert!(ack.session_present);
        c.subscribe("plant3/#", qos);
        for i in 0..3 {
            let got = c.receive();
            assert_eq!(got.payload, format!("{i}"), "{version:?} {qos:?}");
            assert!(!got.dup, "{version:?} {qos:?}: {got:?}");
        }
        assert!(
            c.read_within(Duration::from_millis(500)).is_none(),
            "{version:?} {qos:?}: a message came twice"
        );
        // A clean start ends the session for the next round.
        c.disconnect();
        connect.clean = true;
        connect.properties = Properties::default();
        MqttClient::connect_with(&server, connect).0.disconnect();
        p.disconnect();
    }
}

#[test]
fn retained_messages_go_to_new_subscribers_flagged_and_an_empty_one_deletes() {
    let server = start();
    let mut p = MqttClient::connected(&server, Version::V5, "p");
    let mut publish = p.publish_packet("status/door", b"open", QoS::AtLeastOnce);
    publish.retain = true;
    assert_eq!(p.publish(publish), 0);
    let mut live = MqttClient::connected(&server, Version::V5, "live");
    live.subscribe("status/+", QoS::AtLeastOnce);
    let got = live.receive();
    assert!(got.retain, "from the store: flagged");
    assert_eq!(got.payload, "open");
    let mut publish = p.publish_packet("status/door", b"closed", QoS::AtLeastOnce);
    publish.retain = true;
    assert_eq!(p.publish(publish), 0);
    let got = live.receive();
    assert!(!got.retain, "live: not flagged");
    // Retain as published keeps the flag on live messages.
    let mut rap = MqttClient::connected(&server, Version::V5, "rap");
    let options = SubscribeOptions {
        qos: QoS::AtMostOnce,
        no_local: false,
        retain_as_published: true,
        retain_handling: 2,
    };
    assert_eq!(rap.subscribe_with("status/door", options), 0);
    assert!(
        rap.read_within(Duration::from_millis(300)).is_none(),
        "handling 2: none"
    );
    let mut publish = p.publish_packet("status/door", b"ajar", QoS::AtMostOnce);
    publish.retain = true;
    p.publish(publish);
    assert!(rap.receive().retain);
    assert_eq!(live.receive().payload, "ajar");
    // An empty retained message deletes the topic's.
    let mut publish = p.publish_packet("status/door", b"", QoS::AtLeastOnce);
    publish.retain = true;
    assert_eq!(p.publish(publish), 0);
    assert_eq!(live.receive().payload, "");
    let mut late = MqttClient::connected(&server, Version::V311, "late");
    late.subscribe("status/#", QoS::AtLeastOnce);
    assert!(late.read_within(Duration::from_millis(300)).is_none());
}

#[test]
fn the_will_goes_out_when_a_connection_drops_and_not_after_disconnect() {
    let server = start();
    let mut watcher = MqttClient::connected(&server, Version::V5, "watcher");
    watcher.subscribe("wills/#", QoS::AtLeastOnce);
    for version in BOTH {
        let mut connect = MqttClient::connect_packet(version, "mortal");
        connect.will = Some(MqttClient::will("wills/mortal", b"gone", QoS::AtLeastOnce));
        let (c, _) = MqttClient::connect_with(&server, connect.clone());
        drop(c);
        let got = watcher.receive();
        assert_eq!(
            (got.topic.as_str(), &got.payload[..]),
            ("wills/mortal", &b"gone"[..])
        );
        let (c, _) = MqttClient::connect_with(&server, connect);
        c.disconnect();
        assert!(watcher.read_within(Duration::from_millis(300)).is_none());
    }
}

#[test]
fn a_silent_client_is_closed_after_one_and_a_half_keep_alives() {
    let server = start();
    let mut connect = MqttClient::connect_packet(Version::V5, "quiet");
    connect.keep_alive = 1;
    let (mut c, _) = MqttClient::connect_with(&server, connect);
    c.send(&Packet::PingReq);
    assert_eq!(c.read(), Some(Packet::PingResp));
    let before = c.expect_closed();
    assert!(
        matches!(before.as_slice(), [Packet::Disconnect(d)] if d.reason == 0x8D),
        "{before:?}"
    );
}

#[test]
fn shared_subscriptions_split_the_messages_between_their_members() {
    let server = start();
    let mut a = MqttClient::connected(&server, Version::V5, "a");
    let mut b = MqttClient::connected(&server, Version::V5, "b");
    a.subscribe("$share/workers/jobs/#", QoS::AtLeastOnce);
    b.subscribe("$share/workers/jobs/#", QoS::AtLeastOnce);
    let mut p = MqttClient::connected(&server, Version::V5, "p");
    for i in 0..20 {
        let publish = p.publish_packet("jobs/new", format!("{i}").as_bytes(), QoS::AtLeastOnce);
        assert_eq!(p.publish(publish), 0);
    }
    let mut seen = Vec::new();
    for c in [&mut a, &mut b] {
        while let Some(packet) = c.read_within(Duration::from_millis(500)) {
            let Packet::Publish(got) = packet else {
                panic!("{packet:?}")
            };
            c.acknowledge(&got);
            seen.push(String::from_utf8(got.payload.to_vec()).unwrap());
        }
    }
    seen.sort_by_key(|s| s.parse::<u32>().unwrap());
    let all: Vec<String> = (0..20).map(|i| i.to_string()).collect();
    assert_eq!(seen, all, "each once, between them");
}

#[test]
fn a_second_connection_with_a_client_id_takes_the_session_over() {
    let server = start();
    let mut connect = MqttClient::connect_packet(Version::V5, "twin");
    connect.properties = Properties(vec![Property::SessionExpiry(60)]);
    let (mut first, _) = MqttClient::connect_with(&server, connect.clone());
    first.subscribe("twin/#", QoS::AtLeastOnce);
    connect.clean = false;
    let (mut second, ack) = MqttClient::connect_with(&server, connect);
    assert!(ack.session_present, "the session, taken over whole");
    let before = first.expect_closed();
    assert!(
        matches!(before.as_slice(), [Packet::Disconnect(d)] if d.reason == 0x8E),
        "session taken over: {before:?}"
    );
    let p = second.publish_packet("twin/x", b"mine now", QoS::AtLeastOnce);
    assert_eq!(second.publish(p), 0);
    assert_eq!(second.receive().payload, "mine now");
    // A native connection's client id is not an MQTT session to take.
    let _native = herald_tests::as_client(&server, "jms-app");
    let (mut c, ack) =
        MqttClient::connect_with(&server, MqttClient::connect_packet(Version::V5, "jms-app"));
    assert_eq!(ack.code, 0x85);
    assert!(c.expect_closed().is_empty());
}

#[test]
fn a_reconnect_racing_its_predecessors_close_is_admitted() {
    // The old connection's socket is dropped, not DISCONNECTed: its worker
    // may release the id between the new CONNECT's admission and its
    // takeover, which must then admit it, not refuse the id as in use.
    let server = start();
    let mut connect = MqttClient::connect_packet(Version::V5, "hasty");
    connect.properties = Properties(vec![Property::SessionExpiry(60)]);
    for round in 0..5000 {
        let (c, ack) = MqttClient::connect_with(&server, connect.clone());
        assert_eq!(ack.code, 0, "round {round}");
        drop(c);
    }
}

#[test]
fn dollar_topics_are_not_matched_by_a_leading_wildcard() {
    let server = start();
    let mut all = MqttClient::connected(&server, Version::V311, "all");
    all.subscribe("#", QoS::AtMostOnce);
    let mut sys = MqttClient::connected(&server, Version::V311, "sys");
    sys.subscribe("$SYS/#", QoS::AtMostOnce);
    let mut p = MqttClient::connected(&server, Version::V311, "p");
    let publish = p.publish_packet("$SYS/load", b"1", QoS::AtMostOnce);
    p.publish(publish);
    assert_eq!(sys.receive().topic, "$SYS/load");
    let publish = p.publish_packet("plain", b"2", QoS::AtMostOnce);
    p.publish(publish);
    assert_eq!(all.receive().topic, "plain", "not $SYS/load first");
}

#[test]
fn topics_map_faithfully_with_dots_and_empty_levels() {
    let server = start();
    let mut s = MqttClient::connected(&server, Version::V5, "s");
    s.subscribe("#", QoS::AtMostOnce);
    let mut p = MqttClient::connected(&server, Version::V5, "p");
    for topic in ["/a", "a//b", "v1.2/x", "a b/c", "trailing/"] {
        let publish = p.publish_packet(topic, b"t", QoS::AtMostOnce);
        p.publish(publish);
        assert_eq!(s.receive().topic, topic);
    }
}

#[test]
fn users_are_checked_and_denials_have_their_reason_codes() {
    let mut config = test_config();
    config.auth.required = true;
    config.auth.failed_login_delay_ms = 10;
    config.auth.roles.insert(
        "open".into(),
        RoleEntry {
            publish: vec!["open.#".into(), "queue:jobs".into()],
            consume: vec!["open.#".into()],
            ..RoleEntry::default()
        },
    );
    config.auth.users = vec![UserEntry {
        name: "alice".into(),
        password: hash_password("secret").unwrap(),
        roles: vec!["open".into()],
    }];
    let server = start_with(config);
    for (version, refused) in [(Version::V311, 4), (Version::V5, 0x86)] {
        let mut connect = MqttClient::connect_packet(version, "x");
        connect.username = Some("alice".into());
        connect.password = Some(Bytes::from_static(b"wrong"));
        let (mut c, ack) = MqttClient::connect_with(&server, connect);
        assert_eq!(ack.code, refused);
        assert!(c.expect_closed().is_empty());
    }
    let mut connect = MqttClient::connect_packet(Version::V5, "alice");
    connect.username = Some("alice".into());
    connect.password = Some(Bytes::from_static(b"secret"));
    let (mut c, ack) = MqttClient::connect_with(&server, connect.clone());
    assert_eq!(ack.code, 0);
    let options = SubscribeOptions {
        qos: QoS::AtLeastOnce,
        no_local: false,
        retain_as_published: false,
        retain_handling: 0,
    };
    assert_eq!(c.subscribe_with("secret/#", options), 0x87);
    assert_eq!(c.subscribe_with("open/#", options), 1);
    let publish = c.publish_packet("secret/x", b"no", QoS::AtLeastOnce);
    assert_eq!(c.publish(publish), 0x87);
    let publish = c.publish_packet("secret/x", b"no", QoS::ExactlyOnce);
    assert_eq!(c.publish(publish), 0x87);
    let publish = c.publish_packet("open/x", b"yes", QoS::AtLeastOnce);
    assert_eq!(c.publish(publish), 0);
    assert_eq!(c.receive().payload, "yes");
    // A `$queue/` topic is a send to the queue, checked as one: the queue
    // `jobs` may be sent to, the queue `secret` not, nor the topic `jobs`.
    for (topic, code) in [("$queue/jobs", 0), ("$queue/secret", 0x87), ("jobs", 0x87)] {
        let publish = c.publish_packet(topic, b"job", QoS::AtLeastOnce);
        assert_eq!(c.publish(publish), code, "{topic}");
    }
    // 3.1.1: a failure return code for the subscription; a denied publish
    // cannot be answered, so the connection closes.
    connect.version = Version::V311;
    connect.client_id = "alice311".into();
    let (mut c, _) = MqttClient::connect_with(&server, connect);
    assert_eq!(c.subscribe_with("secret/#", options), 0x80);
    let publish = c.publish_packet("secret/x", b"no", QoS::AtLeastOnce);
    c.send(&Packet::Publish(publish));
    assert!(c.expect_closed().is_empty());
}

#[test]
fn unsubscribe_ends_a_subscription_and_says_which_existed() {
    let server = start();
    let mut c = MqttClient::connected(&server, Version::V5, "u");
    c.subscribe("u/#", QoS::AtLeastOnce);
    c.send(&Packet::Unsubscribe(Unsubscribe {
        packet_id: 9,
        properties: Properties::default(),
        filters: vec!["u/#".into(), "never".into()],
    }));
    match c.read() {
        Some(Packet::UnsubAck(a)) => assert_eq!((a.packet_id, a.codes), (9, vec![0, 0x11])),
        other => panic!("{other:?}"),
    }
    let publish = c.publish_packet("u/x", b"x", QoS::AtLeastOnce);
    assert_eq!(c.publish(publish), 0);
    assert!(c.read_within(Duration::from_millis(300)).is_none());
}

/// Sends `bytes` on a fresh connection (after a CONNECT if `connected`)
/// and returns what the server said before it closed.
fn closes_on(
    server: &herald_server::ServerHandle,
    version: Version,
    connected: bool,
    bytes: &[u8],
) -> Vec<Packet> {
    let mut c = match connected {
        true => MqttClient::connected(server, version, "bad"),
        false => MqttClient::open(server, version),
    };
    c.write(bytes);
    c.expect_closed()
}

#[test]
fn bad_input_closes_that_one_connection_with_its_reason() {
    let server = start();
    let mut bystander = MqttClient::connected(&server, Version::V5, "bystander");
    bystander.subscribe("calm", QoS::AtMostOnce);
    let disconnect =
        |reason: u8| move |p: &[Packet]| matches!(p, [Packet::Disconnect(d)] if d.reason == reason);
    // A remaining length of five bytes.
    let said = closes_on(
        &server,
        Version::V5,
        true,
        &[0x30, 0xff, 0xff, 0xff, 0xff, 0x01],
    );
    assert!(disconnect(0x81)(&said), "{said:?}");
    // Over the packet size limit (a PUBLISH may be larger: its payload,
    // a large message's, is read on its own).
    let said = closes_on(&server, Version::V5, true, &[0x82, 0xff, 0xff, 0xff, 0x7f]);
    assert!(disconnect(0x95)(&said), "{said:?}");
    // A topic that is not UTF-8.
    let said = closes_on(
        &server,
        Version::V5,
        true,
        &[0x30, 0x04, 0x00, 0x01, 0xff, 0x00],
    );
    assert!(disconnect(0x81)(&said), "{said:?}");
    // A wildcard in a PUBLISH topic.
    let said = closes_on(
        &server,
        Version::V5,
        true,
        &[0x30, 0x05, 0x00, 0x02, b'a', b'+', 0x00],
    );
    assert!(disconnect(0x90)(&said), "{said:?}");
    // A second CONNECT.
    let mut again = bytes::BytesMut::new();
    herald_protocol::mqtt::encode(
        &Packet::Connect(Box::new(MqttClient::connect_packet(Version::V5, "bad"))),
        Version::V5,
        &mut again,
    );
    let said = closes_on(&server, Version::V5, true, &again);
    assert!(disconnect(0x82)(&said), "{said:?}");
    // A subscription at QoS 3.
    let said = closes_on(
        &server,
        Version::V5,
        true,
        &[0x82, 0x07, 0x00, 0x01, 0x00, 0x00, 0x01, b'a', 0x03],
    );
    assert!(disconnect(0x81)(&said), "{said:?}");
    // 3.1.1 says nothing: it only closes.
    let said = closes_on(
        &server,
        Version::V311,
        true,
        &[0x30, 0x05, 0x00, 0x02, b'a', b'#', 0x00],
    );
    assert!(said.is_empty(), "{said:?}");
    // A packet before CONNECT, and a wrong protocol level.
    assert!(closes_on(&server, Version::V311, false, &[0xc0, 0x00]).is_empty());
    let level_3 = [
        0x10, 0x0c, 0x00, 0x04, b'M', b'Q', b'T', b'T', 0x03, 0x02, 0x00, 0x3c, 0x00, 0x00,
    ];
    let said = closes_on(&server, Version::V311, false, &level_3);
    assert!(
        matches!(said.as_slice(), [Packet::ConnAck(a)] if a.code == 1),
        "3.1.1's unacceptable protocol version: {said:?}"
    );
    // Nobody else noticed.
    let mut p = MqttClient::connected(&server, Version::V5, "p");
    let publish = p.publish_packet("calm", b"still here", QoS::AtMostOnce);
    p.publish(publish);
    assert_eq!(bystander.receive().payload, "still here");
}

#[test]
fn mqtt_rides_in_websocket_messages_and_other_subprotocols_are_refused() {
    let server = start();
    let (_, answer) = MqttClient::open_websocket(&server, Version::V5, "v12.stomp");
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    let (mut ws, answer) = MqttClient::open_websocket(&server, Version::V5, "mqtt");
    assert!(answer.starts_with("HTTP/1.1 101"), "{answer}");
    assert!(answer.contains("Sec-WebSocket-Protocol: mqtt"), "{answer}");
    ws.send(&Packet::Connect(Box::new(MqttClient::connect_packet(
        Version::V5,
        "browser",
    ))));
    assert!(matches!(ws.read(), Some(Packet::ConnAck(a)) if a.code == 0));
    ws.subscribe("web/#", QoS::ExactlyOnce);
    let mut tcp = MqttClient::connected(&server, Version::V311, "tcp");
    let big = vec![7u8; 100_000];
    for (payload, qos) in [(&b"hi"[..], QoS::AtMostOnce), (&big[..], QoS::ExactlyOnce)] {
        let p = tcp.publish_packet("web/page", payload, qos);
        assert_eq!(tcp.publish(p), 0);
        let got = ws.receive();
        assert_eq!((&got.payload[..], got.qos), (payload, qos));
    }
    // And the other way.
    tcp.subscribe("back", QoS::AtLeastOnce);
    let p = ws.publish_packet("back", b"from the page", QoS::AtLeastOnce);
    assert_eq!(ws.publish(p), 0);
    assert_eq!(tcp.receive().payload, "from the page");
    ws.disconnect();
}

/// Runs one of Debian's mosquitto-clients, its output captured.
fn mosquitto(program: &str, args: &[&str]) -> std::process::Child {
    std::process::Command::new(program)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("{program} runs (Debian's mosquitto-clients; scripts/test.sh installs it): {e}")
        })
}

/// Waits for a mosquitto client to end well; its standard output.
fn finished(child: std::process::Child) -> String {
    let out = child.wait_with_output().expect("it ends");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {err}", out.status);
    String::from_utf8(out.stdout).expect("text")
}

#[test]
fn mosquitto_clients_publish_and_subscribe_over_tcp_and_tls() {
    let mut config = test_config();
    let (ca, cert, key) = herald_tests::tls_files(&config.data_dir.join("tls"), &["localhost"]);
    config.mqtt.tls_enabled = true;
    config.tls.cert = cert;
    config.tls.key = key;
    let server = start_with(config);
    let mqtt = server.mqtt();
    let port = mqtt.tcp.unwrap().port().to_string();
    let tls_port = mqtt.tls.unwrap().port().to_string();
    let ca = ca.display().to_string();
    let tcp = ["-h", "127.0.0.1", "-p", &port];
    let tls = ["-h", "localhost", "-p", &tls_port, "--cafile", &ca];
    // A retained message first: each subscriber gets it on subscribing.
    let retained = [&tcp[..], &["-t", "m/status", "-m", "up", "-r", "-q", "1"]].concat();
    finished(mosquitto("mosquitto_pub", &retained));
    let sub_args = ["-t", "m/#", "-v", "-q", "2", "-C", "4", "-W", "20"];
    let plain = mosquitto(
        "mosquitto_sub",
        &[&tcp[..], &sub_args, &["-V", "mqttv311"]].concat(),
    );
    let secure = mosquitto(
        "mosquitto_sub",
        &[&tls[..], &sub_args, &["-V", "mqttv5"]].concat(),
    );
    // Each has the retained message once it has subscribed.
    wait_until("both subscribed", || server.stats().subscriptions >= 2);
    for (how, topic, qos) in [
        (&tcp[..], "m/a", "0"),
        (&tls[..], "m/b", "1"),
        (&tcp[..], "m/c", "2"),
    ] {
        let args = [
            how,
            &[
                "-t",
                topic,
                "-m",
                "hello from mosquitto_pub",
                "-q",
                qos,
                "-V",
                "mqttv5",
            ],
        ]
        .concat();
        finished(mosquitto("mosquitto_pub", &args));
    }
    let expected = "m/status up\nm/a hello from mosquitto_pub\nm/b hello from mosquitto_pub\nm/c hello from mosquitto_pub\n";
    assert_eq!(finished(plain), expected);
    assert_eq!(finished(secure), expected);
}

#[test]
fn a_delayed_will_waits_and_a_return_in_time_cancels_it() {
    let server = start();
    let mut watcher = MqttClient::connected(&server, Version::V5, "watcher");
    watcher.subscribe("late/#", QoS::AtLeastOnce);
    let mut connect = MqttClient::connect_packet(Version::V5, "slow");
    connect.properties = Properties(vec![Property::SessionExpiry(60)]);
    let mut will = MqttClient::will("late/slow", b"gone for good", QoS::AtLeastOnce);
    will.properties = Properties(vec![Property::WillDelay(1)]);
    connect.will = Some(will);
    let (c, _) = MqttClient::connect_with(&server, connect.clone());
    drop(c);
    assert!(
        watcher.read_within(Duration::from_millis(500)).is_none(),
        "not yet"
    );
    assert_eq!(watcher.receive().payload, "gone for good");
    // Back within the delay: no will.
    let (c, _) = MqttClient::connect_with(&server, connect.clone());
    drop(c);
    let (back, ack) = MqttClient::connect_with(&server, connect);
    assert_eq!(ack.code, 0);
    assert!(
        watcher.read_within(Duration::from_millis(1500)).is_none(),
        "cancelled"
    );
    back.disconnect();
    // A session that ends before the will's delay is over publishes it
    // then (3.1.3.2.2: "until the Will Delay Interval has passed or the
    // Session ends, whichever happens first"): not at once, and not a
    // minute later.
    let mut connect = MqttClient::connect_packet(Version::V5, "brief-session");
    connect.properties = Properties(vec![Property::SessionExpiry(1)]);
    let mut will = MqttClient::will("late/brief", b"session over", QoS::AtLeastOnce);
    will.properties = Properties(vec![Property::WillDelay(60)]);
    connect.will = Some(will);
    let (c, _) = MqttClient::connect_with(&server, connect);
    drop(c);
    assert!(
        watcher.read_within(Duration::from_millis(500)).is_none(),
        "not before the session ends"
    );
    assert_eq!(watcher.receive().payload, "session over");
}

#[test]
fn a_session_ends_at_its_expiry_with_what_it_kept() {
    let server = start();
    let mut connect = MqttClient::connect_packet(Version::V5, "brief");
    connect.properties = Properties(vec![Property::SessionExpiry(1)]);
    let (mut c, _) = MqttClient::connect_with(&server, connect.clone());
    c.subscribe("brief/#", QoS::AtLeastOnce);
    c.disconnect();
    let mut p = MqttClient::connected(&server, Version::V5, "p");
    let publish = p.publish_packet("brief/x", b"kept a while", QoS::AtLeastOnce);
    assert_eq!(p.publish(publish), 0);
    assert_eq!(durables_of(&server, "brief"), ["mqtt:100:brief/#"]);
    wait_until("the session expires", || {
        durables_of(&server, "brief").is_empty()
    });
    connect.clean = false;
    let (mut c, ack) = MqttClient::connect_with(&server, connect.clone());
    assert!(!ack.session_present);
    // Resumed without an expiry, a session ends with its connection.
    c.subscribe("brief/#", QoS::AtLeastOnce);
    c.disconnect();
    connect.properties = Properties::default();
    let (c, ack) = MqttClient::connect_with(&server, connect);
    assert!(ack.session_present);
    c.disconnect();
    assert!(durables_of(&server, "brief").is_empty());
}

#[test]
fn qos_1_messages_arrive_in_the_order_they_were_published() {
    // The publisher waits for the journal, so it stays on its worker: the
    // subscription's queue dispatches there (as messages come in) and on
    // the subscriber's worker (as PUBACKs free its window), and the
    // subscriber's worker must still hand them on in order.
    let server = start();
    let mut sub = MqttClient::connected(&server, Version::V311, "ordered-sub");
    sub.subscribe("ordered", QoS::AtLeastOnce);
    let mut p = MqttClient::connected(&server, Version::V311, "ordered-pub");
    let (batches, batch) = (40, 500);
    let reader = std::thread::spawn(move || {
        for i in 0..batches * batch {
            let got = sub.receive();
            assert_eq!(got.payload, i.to_string(), "in order");
        }
    });
    for b in 0..batches {
        for i in 0..batch {
            let publish = p.publish_packet(
                "ordered",
                (b * batch + i).to_string().as_bytes(),
                QoS::AtLeastOnce,
            );
            p.send(&Packet::Publish(publish));
        }
        for _ in 0..batch {
            assert!(matches!(p.read(), Some(Packet::PubAck(a)) if a.reason == 0));
        }
    }
    reader.join().unwrap();
}

#[test]
fn a_qos_2_publish_sent_again_after_a_reconnect_is_routed_once() {
    let server = start();
    let mut sub = MqttClient::connected(&server, Version::V5, "watcher");
    sub.subscribe("exactly", QoS::ExactlyOnce);
    let mut connect = MqttClient::connect_packet(Version::V311, "flaky");
    connect.clean = false;
    let (mut p, _) = MqttClient::connect_with(&server, connect.clone());
    let publish = p.publish_packet("exactly", b"once", QoS::ExactlyOnce);
    let id = publish.packet_id.unwrap();
    p.send(&Packet::Publish(publish.clone()));
    assert!(matches!(p.read(), Some(Packet::PubRec(a)) if a.packet_id == id));
    // The connection drops before PUBREL; the client sends it all again.
    drop(p);
    assert_eq!(sub.receive().payload, "once");
    let (mut p, ack) = MqttClient::connect_with(&server, connect);
    assert!(ack.session_present || ack.code == 0);
    p.send(&Packet::Publish(herald_protocol::mqtt::Publish {
        dup: true,
        ..publish
    }));
    assert!(matches!(p.read(), Some(Packet::PubRec(a)) if a.packet_id == id));
    p.send(&Packet::PubRel(Ack::ok(id)));
    assert!(matches!(p.read(), Some(Packet::PubComp(a)) if a.packet_id == id && a.reason == 0));
    assert!(
        sub.read_within(Duration::from_millis(300)).is_none(),
        "once only"
    );
}

#[test]
fn a_qos_2_delivery_cut_off_after_pubrec_gets_its_pubrel_again_and_no_second_copy() {
    let server = start();
    let mut connect = MqttClient::connect_packet(Version::V311, "receiver");
    connect.clean = false;
    let (mut r, _) = MqttClient::connect_with(&server, connect.clone());
    r.subscribe("exact", QoS::ExactlyOnce);
    let mut p = MqttClient::connected(&server, Version::V311, "sender");
    let publish = p.publish_packet("exact", b"one", QoS::ExactlyOnce);
    assert_eq!(p.publish(publish), 0);
    let got = match r.read() {
        Some(Packet::Publish(got)) => got,
        other => panic!("{other:?}"),
    };
    let id = got.packet_id.unwrap();
    r.send(&Packet::PubRec(Ack::ok(id)));
    assert!(matches!(r.read(), Some(Packet::PubRel(a)) if a.packet_id == id));
    // Gone before its PUBCOMP.
    drop(r);
    let (mut r, ack) = MqttClient::connect_with(&server, connect);
    assert!(ack.session_present);
    assert!(matches!(r.read(), Some(Packet::PubRel(a)) if a.packet_id == id));
    r.send(&Packet::PubComp(Ack::ok(id)));
    assert!(
        r.read_within(Duration::from_millis(300)).is_none(),
        "no second copy"
    );
}

#[test]
fn persistent_retained_messages_survive_a_restart_and_so_does_a_deletion() {
    let config = test_config();
    let dir = config.data_dir.clone();
    let server = start_with(config);
    let mut p = MqttClient::connected(&server, Version::V5, "retainer");
    let retain = |p: &mut MqttClient, topic: &str, body: &str, qos: QoS| {
        let mut publish = p.publish_packet(topic, body.as_bytes(), qos);
        publish.retain = true;
        assert_eq!(p.publish(publish), 0, "{topic}");
    };
    // QoS 1: persistent, receipted after the journal.
    retain(&mut p, "home/temp", "21", QoS::AtLeastOnce);
    retain(&mut p, "home/temp", "22", QoS::AtLeastOnce);
    retain(&mut p, "home/door", "open", QoS::ExactlyOnce);
    retain(&mut p, "home/light", "on", QoS::AtLeastOnce);
    // An empty one deletes the topic's, for good.
    retain(&mut p, "home/light", "", QoS::AtLeastOnce);
    // QoS 0 is not persistent: kept while the server runs only.
    retain(&mut p, "home/fan", "off", QoS::AtMostOnce);
    p.disconnect();

    server.stop_keeping_data();
    let mut config = test_config();
    config.data_dir = dir;
    let server = start_with(config);
    let mut c = MqttClient::connected(&server, Version::V5, "reader");
    c.subscribe("home/#", QoS::AtLeastOnce);
    let mut got = Vec::new();
    while let Some(packet) = c.read_within(Duration::from_millis(500)) {
        let Packet::Publish(m) = packet else {
            panic!("{packet:?}")
        };
        assert!(m.retain, "from the store: flagged");
        c.acknowledge(&m);
        got.push((
            m.topic.clone(),
            String::from_utf8(m.payload.to_vec()).unwrap(),
        ));
    }
    got.sort();
    let want = [("home/door", "open"), ("home/temp", "22")];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(t, b)| (t.to_string(), b.to_string()))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn a_persistent_sessions_qos_1_messages_survive_a_restart_each_counted() {
    // The ten the client had and did not acknowledge come again marked
    // DUP. The journal does not record deliveries, so a restarted server
    // cannot tell them from the others: every message it kept is marked.
    let config = test_config();
    let dir = config.data_dir.clone();
    let server = start_with(config);
    let mut connect = MqttClient::connect_packet(Version::V311, "survivor");
    connect.clean = false;
    let (mut c, _) = MqttClient::connect_with(&server, connect.clone());
    c.subscribe("kept/#", QoS::AtLeastOnce);
    c.disconnect();
    let mut p = MqttClient::connected(&server, Version::V311, "p");
    let total = 200;
    for i in 0..total {
        let publish = p.publish_packet("kept/n", i.to_string().as_bytes(), QoS::AtLeastOnce);
        assert_eq!(p.publish(publish), 0, "receipted after the journal");
    }
    p.disconnect();
    // Fifty read and acknowledged, ten read and not, then the client goes.
    let (mut c, _) = MqttClient::connect_with(&server, connect.clone());
    for i in 0..50 {
        assert_eq!(c.receive().payload, i.to_string());
    }
    for i in 50..60 {
        match c.read() {
            Some(Packet::Publish(got)) => assert_eq!(got.payload, i.to_string()),
            other => panic!("{other:?}"),
        }
    }
    drop(c);
    server.stop_keeping_data();
    let mut config = test_config();
    config.data_dir = dir;
    let server = start_with(config);
    let (mut c, ack) = MqttClient::connect_with(&server, connect);
    assert!(ack.session_present, "the session, from the journal");
    let mut seen = vec![0u32; total];
    while let Some(packet) = c.read_within(Duration::from_millis(500)) {
        let Packet::Publish(got) = packet else {
            panic!("{packet:?}")
        };
        c.acknowledge(&got);
        let n: usize = std::str::from_utf8(&got.payload).unwrap().parse().unwrap();
        assert!(n >= 50, "{n} was acknowledged before the restart");
        assert!(got.dup, "{n} may have been delivered before the restart");
        seen[n] += 1;
    }
    let lost: Vec<usize> = (50..total).filter(|n| seen[*n] == 0).collect();
    let twice: Vec<usize> = (50..total).filter(|n| seen[*n] > 1).collect();
    assert!(lost.is_empty(), "lost {lost:?}");
    assert!(
        twice.is_empty(),
        "delivered twice after the restart: {twice:?}"
    );
}
