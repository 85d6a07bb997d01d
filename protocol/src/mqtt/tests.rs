//! Round trips of every packet in both versions, and the bad input the
//! server must refuse with the right reason.

use bytes::{BufMut, Bytes, BytesMut};

use super::*;

const MAX: usize = 1 << 20;

fn round_trip(packet: Packet, version: Version) {
    let mut wire = BytesMut::new();
    encode(&packet, version, &mut wire);
    let mut d = match packet {
        Packet::Connect(_) => Decoder::new(MAX),
        _ => Decoder::with_version(version, MAX),
    };
    let whole = wire.len();
    // Byte by byte: nothing comes out until the packet is all there.
    let mut buf = BytesMut::new();
    for (i, b) in wire.iter().enumerate() {
        buf.put_u8(*b);
        let got = d.decode(&mut buf).unwrap();
        match i + 1 == whole {
            false => assert_eq!(got, None, "{packet:?} after {} bytes", i + 1),
            true => assert_eq!(got.as_ref(), Some(&packet), "{version:?}"),
        }
    }
    assert!(buf.is_empty());
}

fn props() -> Properties {
    Properties(vec![
        Property::User("region".into(), "eu".into()),
        Property::ContentType("application/json; charset=utf-8".into()),
        Property::MessageExpiry(30),
        Property::CorrelationData(Bytes::from_static(b"\0\xffid")),
    ])
}

/// What an acknowledgement may carry: a reason string and user
/// properties.
fn ack_props() -> Properties {
    Properties(vec![
        Property::ReasonString("why".into()),
        Property::User("a".into(), "1".into()),
        Property::User("a".into(), "2".into()),
    ])
}

fn each_version(packet: impl Fn(Version) -> Packet) {
    for v in [Version::V311, Version::V5] {
        round_trip(packet(v), v);
    }
}

fn v5_only(v: Version, p: Properties) -> Properties {
    match v {
        Version::V5 => p,
        Version::V311 => Properties::default(),
    }
}

#[test]
fn every_packet_round_trips_in_both_versions() {
    each_version(|v| {
        Packet::Connect(Box::new(Connect {
            version: v,
            clean: true,
            keep_alive: 30,
            properties: v5_only(v, Properties(vec![Property::SessionExpiry(3600)])),
            client_id: "sensor-1".into(),
            will: Some(Will {
                topic: "status/sensor-1".into(),
                payload: Bytes::from_static(b"gone\0"),
                qos: QoS::AtLeastOnce,
                retain: true,
                properties: v5_only(v, Properties(vec![Property::WillDelay(5)])),
            }),
            username: Some("alice".into()),
            password: Some(Bytes::from_static(b"s3cret")),
        }))
    });
    each_version(|v| {
        Packet::ConnAck(ConnAck {
            session_present: true,
            code: 0,
            properties: v5_only(v, Properties(vec![Property::ReceiveMaximum(100)])),
        })
    });
    for qos in [QoS::AtMostOnce, QoS::AtLeastOnce, QoS::ExactlyOnce] {
        each_version(|v| {
            Packet::Publish(Publish {
                dup: qos != QoS::AtMostOnce,
                qos,
                retain: true,
                topic: "a/b/c".into(),
                packet_id: (qos != QoS::AtMostOnce).then_some(7),
                properties: v5_only(v, props()),
                payload: Bytes::from_static(b"\0\x01\xfe not utf-8 \xff"),
            })
        });
    }
    for make in [
        Packet::PubAck,
        Packet::PubRec,
        Packet::PubRel,
        Packet::PubComp,
    ] {
        each_version(|_| make(Ack::ok(9)));
        round_trip(
            make(Ack {
                packet_id: 9,
                reason: 0x87,
                properties: Properties(vec![Property::ReasonString("no".into())]),
            }),
            Version::V5,
        );
    }
    each_version(|v| {
        let options = |qos| SubscribeOptions {
            qos,
            no_local: v == Version::V5,
            retain_as_published: v == Version::V5,
            retain_handling: if v == Version::V5 { 2 } else { 0 },
        };
        Packet::Subscribe(Subscribe {
            packet_id: 3,
            properties: v5_only(v, Properties(vec![Property::SubscriptionId(12)])),
            filters: vec![
                ("a/+/c".into(), options(QoS::ExactlyOnce)),
                ("$share/g/x/#".into(), options(QoS::AtMostOnce)),
            ],
        })
    });
    each_version(|v| {
        Packet::SubAck(SubAck {
            packet_id: 3,
            properties: v5_only(v, ack_props()),
            codes: vec![2, 0x80],
        })
    });
    each_version(|v| {
        Packet::Unsubscribe(Unsubscribe {
            packet_id: 4,
            properties: v5_only(v, Properties(vec![Property::User("k".into(), "v".into())])),
            filters: vec!["a/#".into()],
        })
    });
    each_version(|v| {
        Packet::UnsubAck(UnsubAck {
            packet_id: 4,
            properties: v5_only(v, ack_props()),
            codes: match v {
                Version::V5 => vec![0, 0x11],
                Version::V311 => vec![],
            },
        })
    });
    each_version(|_| Packet::PingReq);
    each_version(|_| Packet::PingResp);
    each_version(|_| Packet::Disconnect(Disconnect::default()));
    round_trip(
        Packet::Disconnect(Disconnect {
            reason: 0x8e,
            properties: Properties(vec![Property::ReasonString("taken over".into())]),
        }),
        Version::V5,
    );
    let auth = Properties(vec![
        Property::AuthMethod("SCRAM-SHA-1".into()),
        Property::AuthData(Bytes::from_static(b"\0\xff")),
        Property::ReasonString("go on".into()),
    ]);
    round_trip(Packet::Auth(0x18, auth), Version::V5);
}

/// Decodes `bytes` with a server's decoder that has seen a CONNECT of
/// `version` (or none).
fn refuse(version: Option<Version>, bytes: &[u8]) -> MqttError {
    let mut d = match version {
        Some(v) => Decoder::with_version(v, 64),
        None => Decoder::new(64),
    };
    let mut buf = BytesMut::from(bytes);
    let e = d.decode(&mut buf).expect_err("refused");
    assert_eq!(buf.as_ref(), bytes, "an error takes nothing off");
    e
}

#[test]
fn bad_input_is_refused_with_its_reason() {
    let v5 = Some(Version::V5);
    // A remaining length of five bytes.
    let e = refuse(v5, &[0x30, 0xff, 0xff, 0xff, 0xff, 0x01]);
    assert_eq!(e.reason(), 0x81, "{e}");
    // Over the limit, said from the fixed header alone.
    let e = refuse(v5, &[0x30, 0xff, 0x7f]);
    assert!(
        matches!(
            e,
            MqttError::TooLarge {
                size: 16_386,
                max: 64
            }
        ),
        "{e}"
    );
    assert_eq!(e.reason(), 0x95);
    // A topic that is not UTF-8.
    let e = refuse(v5, &[0x30, 0x05, 0x00, 0x02, 0xc3, 0x28, 0x00]);
    assert_eq!(e.reason(), 0x81, "{e}");
    // A wildcard in a PUBLISH topic.
    let e = refuse(v5, &[0x30, 0x06, 0x00, 0x03, b'a', b'/', b'#', 0x00]);
    assert_eq!(e.reason(), 0x90, "{e}");
    // QoS 3 on a PUBLISH, and in a subscription.
    let e = refuse(v5, &[0x36, 0x06, 0x00, 0x01, b'a', 0x00, 0x01, 0x00]);
    assert_eq!(e.reason(), 0x81, "{e}");
    let e = refuse(
        Some(Version::V311),
        &[0x82, 0x06, 0x00, 0x01, 0x00, 0x01, b'a', 0x03],
    );
    assert_eq!(e.reason(), 0x81, "{e}");
    // A protocol level other than 4 and 5.
    let mut connect = vec![0x10, 0x0c, 0x00, 0x04];
    connect.extend_from_slice(b"MQTT");
    connect.extend_from_slice(&[0x03, 0x02, 0x00, 0x3c, 0x00, 0x00]);
    let e = refuse(None, &connect);
    assert_eq!(e, MqttError::UnsupportedVersion(3));
    assert_eq!(e.reason(), 0x84);
    // A packet before CONNECT.
    assert_eq!(refuse(None, &[0xc0, 0x00]).reason(), 0x82);
    // Wrong fixed-header flags, and an unknown packet type.
    assert_eq!(refuse(v5, &[0x61, 0x02, 0x00, 0x01]).reason(), 0x81);
    assert_eq!(refuse(Some(Version::V311), &[0xf0, 0x00]).reason(), 0x81);
    // A SUBSCRIBE without a filter, and bytes past a packet's end.
    assert_eq!(refuse(v5, &[0x82, 0x03, 0x00, 0x01, 0x00]).reason(), 0x82);
    assert_eq!(refuse(v5, &[0xc0, 0x01, 0x00]).reason(), 0x81);
    // An unknown property.
    assert_eq!(refuse(v5, &[0xe0, 0x03, 0x00, 0x01, 0x7f]).reason(), 0x81);
    // A property this kind of packet may not carry (§2.2.2.2): Server
    // Keep Alive on a PUBLISH, a Topic Alias on a DISCONNECT.
    let e = refuse(v5, &[0x30, 0x07, 0x00, 0x01, b'a', 0x03, 0x13, 0x00, 0x0a]);
    assert_eq!(e.reason(), 0x81, "{e}");
    let e = refuse(v5, &[0xe0, 0x05, 0x00, 0x03, 0x23, 0x00, 0x01]);
    assert_eq!(e.reason(), 0x81, "{e}");
    // A property twice (a Protocol Error), where user properties may repeat.
    let twice = [
        0x30, 0x09, 0x00, 0x01, b'a', 0x04, 0x01, 0x01, 0x01, 0x00, b'x',
    ];
    assert_eq!(refuse(v5, &twice).reason(), 0x82);
    // A wildcard in a Response Topic [MQTT-3.3.2-14].
    let e = refuse(
        v5,
        &[
            0x30, 0x09, 0x00, 0x01, b'a', 0x05, 0x08, 0x00, 0x02, b'r', b'#',
        ],
    );
    assert_eq!(e.reason(), 0x82, "{e}");
}

/// A CONNECT of 5.0 with `properties` (their bytes, after the length)
/// and, if `will` is given, a will of those properties and that topic.
fn connect_bytes(properties: &[u8], will: Option<(&[u8], &str)>) -> Vec<u8> {
    let mut body = vec![0x00, 0x04, b'M', b'Q', b'T', b'T', 0x05];
    body.push(if will.is_some() { 0x06 } else { 0x02 });
    body.extend_from_slice(&[0x00, 0x3c, properties.len() as u8]);
    body.extend_from_slice(properties);
    body.extend_from_slice(&[0x00, 0x01, b'c']);
    if let Some((props, topic)) = will {
        body.push(props.len() as u8);
        body.extend_from_slice(props);
        body.extend_from_slice(&[0x00, topic.len() as u8]);
        body.extend_from_slice(topic.as_bytes());
        body.extend_from_slice(&[0x00, 0x00]);
    }
    let mut packet = vec![0x10, body.len() as u8];
    packet.extend_from_slice(&body);
    packet
}

#[test]
fn a_connects_request_flags_will_and_response_topics_are_checked() {
    let good = connect_bytes(
        &[0x19, 0x01, 0x17, 0x00],
        Some((&[0x08, 0x00, 0x01, b'r'], "w")),
    );
    let mut d = Decoder::new(1024);
    let got = d.decode(&mut BytesMut::from(&good[..])).unwrap();
    let Some(Packet::Connect(c)) = got else {
        panic!("{got:?}")
    };
    assert_eq!(
        c.properties.0,
        vec![
            Property::RequestResponseInfo(1),
            Property::RequestProblemInfo(0)
        ]
    );
    // Request Response Information and Request Problem Information other
    // than 0 or 1 (3.1.2.11.6, 3.1.2.11.7), or twice: Protocol Errors.
    for props in [&[0x19, 0x02][..], &[0x17, 0x05], &[0x19, 0x01, 0x19, 0x01]] {
        let e = refuse(None, &connect_bytes(props, None));
        assert_eq!(e.reason(), 0x82, "{props:?}: {e}");
    }
    // A will that names a wildcard topic, or a wildcard response topic;
    // a will property outside the will (Will Delay in CONNECT's own).
    let e = refuse(None, &connect_bytes(&[], Some((&[], "w/#"))));
    assert_eq!(e.reason(), 0x90, "{e}");
    let e = refuse(
        None,
        &connect_bytes(&[], Some((&[0x08, 0x00, 0x01, b'+'], "w"))),
    );
    assert_eq!(e.reason(), 0x82, "{e}");
    let e = refuse(None, &connect_bytes(&[0x18, 0, 0, 0, 1], None));
    assert_eq!(e.reason(), 0x81, "{e}");
}

#[test]
fn connect_sets_the_version_and_a_second_packet_follows_in_the_same_buffer() {
    let mut wire = BytesMut::new();
    let connect = Connect {
        version: Version::V5,
        clean: false,
        keep_alive: 0,
        properties: Properties::default(),
        client_id: String::new(),
        will: None,
        username: None,
        password: None,
    };
    encode(&Packet::Connect(Box::new(connect)), Version::V5, &mut wire);
    encode(&Packet::PingReq, Version::V5, &mut wire);
    let mut d = Decoder::new(MAX);
    assert!(matches!(d.decode(&mut wire), Ok(Some(Packet::Connect(_)))));
    assert_eq!(d.version(), Some(Version::V5));
    assert_eq!(d.decode(&mut wire), Ok(Some(Packet::PingReq)));
    assert_eq!(d.decode(&mut wire), Ok(None));
}

#[test]
fn a_publish_head_counts_the_payload_that_follows_it() {
    for (version, len) in [(Version::V311, 100), (Version::V5, 200_000)] {
        let publish = |payload: Bytes| {
            Packet::Publish(Publish {
                dup: false,
                qos: QoS::AtLeastOnce,
                retain: false,
                topic: "films/new".into(),
                packet_id: Some(3),
                properties: v5_only(version, props()),
                payload,
            })
        };
        let mut whole = BytesMut::new();
        encode(&publish(Bytes::from(vec![9u8; len])), version, &mut whole);
        let mut head = BytesMut::new();
        encode_head(&publish(Bytes::new()), version, len, &mut head);
        head.extend_from_slice(&vec![9u8; len]);
        assert_eq!(head, whole, "{version:?}");
    }
}

#[test]
fn a_large_publish_gives_its_head_and_leaves_its_payload() {
    for version in [Version::V311, Version::V5] {
        let mut wire = BytesMut::new();
        let publish = Publish {
            dup: false,
            qos: QoS::ExactlyOnce,
            retain: false,
            topic: "films/new".into(),
            packet_id: Some(9),
            properties: v5_only(version, props()),
            payload: Bytes::from(vec![7u8; 5000]),
        };
        encode(&Packet::Publish(publish.clone()), version, &mut wire);
        let mut d = Decoder::with_version(version, 1024);
        // Every prefix short of the head waits.
        let head_len = wire.len() - 5000;
        for cut in 0..head_len {
            let mut part = BytesMut::from(&wire[..cut]);
            assert!(d.decode_or_head(&mut part, 100).unwrap().is_none(), "{cut}");
        }
        let mut buf = wire.clone();
        let Some(Decoded::Head {
            publish: head,
            payload_len,
        }) = d.decode_or_head(&mut buf, 100).unwrap()
        else {
            panic!("a head");
        };
        assert_eq!(payload_len, 5000);
        assert_eq!(
            head,
            Publish {
                payload: Bytes::new(),
                ..publish.clone()
            }
        );
        assert_eq!(&buf[..], &[7u8; 5000][..], "the payload stays");
        // At or under `large`: whole, or too large for the decoder.
        let mut buf = wire.clone();
        assert!(matches!(
            d.decode_or_head(&mut buf, 5000),
            Err(MqttError::TooLarge { .. })
        ));
    }
}
