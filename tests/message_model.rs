//! One message model across protocols: native, STOMP, MQTT 5.0 and AMQP
//! 1.0 publishers × native, STOMP, MQTT and AMQP subscribers, and every
//! field each protocol has survives every path: text and binary bodies
//! (NUL and non-UTF-8 bytes included), properties (typed where both ends
//! are native or AMQP, as text where STOMP or MQTT carries them), the
//! content type, correlation id and reply-to, priority and expiry. MQTT
//! has no priority, and states expiry in whole seconds from now.

use std::time::{SystemTime, UNIX_EPOCH};

use herald_client::{Body, Destination, Message, Value};
use herald_protocol::amqp::message::{
    Body as AmqpBody, Header, Message as AmqpMessage, Properties as AmqpProperties,
};
use herald_protocol::amqp::{Performative, Value as AmqpValue};
use herald_protocol::mqtt::{Properties, Property, Publish, QoS, Version};
use herald_protocol::stomp::StompFrame;
use herald_tests::*;

const TOPIC: &str = "model.x";
const CONTENT_TYPE: &str = "application/json;charset=utf-8";

/// What every path must deliver, in the form both protocols can state.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    body: Vec<u8>,
    /// (name, value as text), sorted.
    properties: Vec<(String, String)>,
    content_type: Option<String>,
    correlation_id: Option<String>,
    reply_to: Option<String>,
    priority: u8,
    expiration: i64,
}

fn bodies() -> [(&'static str, Body); 2] {
    [
        ("text", Body::Text("héllo ☃ \u{1F600}".into())),
        (
            "binary",
            Body::Bytes(bytes::Bytes::from_static(b"\0\xff\xfe\0not utf-8\x80")),
        ),
    ]
}

fn body_bytes(body: &Body) -> Vec<u8> {
    match body {
        Body::Text(t) => t.as_bytes().to_vec(),
        Body::Bytes(b) => b.to_vec(),
        other => panic!("unexpected body {other:?}"),
    }
}

fn expiration() -> i64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    now.as_millis() as i64 + 600_000
}

fn expected(body: &Body, expiration: i64) -> Seen {
    let mut properties = vec![
        ("flag".to_owned(), "true".to_owned()),
        ("region".to_owned(), "EU".to_owned()),
        ("units".to_owned(), "3".to_owned()),
    ];
    properties.sort();
    Seen {
        body: body_bytes(body),
        properties,
        content_type: Some(CONTENT_TYPE.into()),
        correlation_id: Some("c-1".into()),
        reply_to: Some("topic://replies".into()),
        priority: 7,
        expiration,
    }
}

fn native_message(body: &Body, expiration: i64) -> Message {
    let mut m = Message::new(body.clone())
        .with_property("region", "EU")
        .with_property("units", 3)
        .with_property("flag", true)
        .with_property("HeraldContentType", CONTENT_TYPE);
    m.set_correlation_id(Some("c-1".into()));
    m.set_reply_to(Some(Destination::topic("replies")));
    m.priority = 7;
    m.expiration = expiration;
    m
}

fn stomp_send(body: &Body, expiration: i64) -> StompFrame {
    StompFrame::new("SEND")
        .header("destination", format!("/topic/{TOPIC}"))
        .header("region", "EU")
        .header("units", "3")
        .header("flag", "true")
        .header("content-type", CONTENT_TYPE)
        .header("correlation-id", "c-1")
        .header("reply-to", "/topic/replies")
        .header("priority", "7")
        .header("expires", expiration.to_string())
        .header("receipt", "sent")
        .body(body_bytes(body))
}

fn seen_native(m: &Message) -> Seen {
    let mut properties: Vec<(String, String)> = m
        .properties()
        .iter()
        .filter(|(name, _)| name != "HeraldContentType")
        .map(|(name, value)| (name.clone(), value.to_string()))
        .collect();
    properties.sort();
    let content_type = match m.property("HeraldContentType") {
        Some(Value::String(ct)) => Some(ct.clone()),
        _ => None,
    };
    Seen {
        body: body_bytes(&m.body),
        properties,
        content_type,
        correlation_id: m.correlation_id().map(str::to_owned),
        reply_to: m.reply_to().map(|d| d.to_string()),
        priority: m.priority,
        expiration: m.expiration,
    }
}

/// STOMP's own headers and the JMS ones it maps, not properties.
const STOMP_HEADERS: [&str; 16] = [
    "subscription",
    "message-id",
    "destination",
    "herald-message-id",
    "persistent",
    "priority",
    "timestamp",
    "expires",
    "correlation-id",
    "reply-to",
    "type",
    "redelivered",
    "content-type",
    "content-length",
    "ack",
    "receipt",
];

fn seen_stomp(f: &StompFrame) -> Seen {
    let mut properties: Vec<(String, String)> = f
        .headers
        .iter()
        .filter(|(name, _)| !STOMP_HEADERS.contains(&name.as_str()))
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect();
    properties.sort();
    let reply_to = f.get("reply-to").map(|r| match r.strip_prefix("/topic/") {
        Some(t) => format!("topic://{t}"),
        None => r.to_owned(),
    });
    Seen {
        body: f.body.to_vec(),
        properties,
        content_type: f.get("content-type").map(str::to_owned),
        correlation_id: f.get("correlation-id").map(str::to_owned),
        reply_to,
        priority: f.get("priority").and_then(|p| p.parse().ok()).unwrap_or(0),
        expiration: f.get("expires").and_then(|e| e.parse().ok()).unwrap_or(0),
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn mqtt_publish(body: &Body, expiration: i64) -> Publish {
    let mut properties = vec![
        Property::User("region".into(), "EU".into()),
        Property::User("units".into(), "3".into()),
        Property::User("flag".into(), "true".into()),
        Property::ContentType(CONTENT_TYPE.into()),
        Property::CorrelationData(bytes::Bytes::from_static(b"c-1")),
        Property::ResponseTopic("replies".into()),
        Property::MessageExpiry(((expiration - now_ms()) / 1000) as u32),
    ];
    if let Body::Text(_) = body {
        properties.push(Property::PayloadFormat(1));
    }
    Publish {
        dup: false,
        qos: QoS::AtLeastOnce,
        retain: false,
        topic: TOPIC.replace('.', "/"),
        packet_id: Some(1),
        properties: Properties(properties),
        payload: body_bytes(body).into(),
    }
}

fn seen_mqtt(p: &Publish) -> Seen {
    let mut seen = Seen {
        body: p.payload.to_vec(),
        properties: Vec::new(),
        content_type: None,
        correlation_id: None,
        reply_to: None,
        priority: 0,
        expiration: 0,
    };
    for property in &p.properties.0 {
        match property {
            Property::User(n, v) => seen.properties.push((n.clone(), v.clone())),
            Property::ContentType(ct) => seen.content_type = Some(ct.clone()),
            Property::CorrelationData(c) => {
                seen.correlation_id = Some(String::from_utf8(c.to_vec()).unwrap())
            }
            Property::ResponseTopic(t) => seen.reply_to = Some(format!("topic://{t}")),
            Property::MessageExpiry(secs) => seen.expiration = now_ms() + i64::from(*secs) * 1000,
            _ => {}
        }
    }
    seen.properties.sort();
    seen
}

fn amqp_message(body: &Body, expiration: i64) -> AmqpMessage {
    AmqpMessage {
        header: Some(Header {
            priority: 7,
            ..Header::default()
        }),
        properties: Some(AmqpProperties {
            correlation_id: Some(AmqpValue::String("c-1".into())),
            reply_to: Some("topic://replies".into()),
            content_type: Some(CONTENT_TYPE.into()),
            absolute_expiry_time: Some(expiration),
            ..AmqpProperties::default()
        }),
        application_properties: vec![
            ("region".into(), AmqpValue::String("EU".into())),
            ("units".into(), AmqpValue::Int(3)),
            ("flag".into(), AmqpValue::Bool(true)),
        ],
        body: match body {
            Body::Text(t) => AmqpBody::Value(AmqpValue::String(t.clone())),
            other => AmqpBody::Data(vec![body_bytes(other).into()]),
        },
        ..AmqpMessage::default()
    }
}

/// An AMQP application property's value as text.
fn amqp_text_of(v: &AmqpValue) -> String {
    match v {
        AmqpValue::String(s) => s.clone(),
        AmqpValue::Bool(b) => b.to_string(),
        AmqpValue::Int(n) => n.to_string(),
        AmqpValue::Long(n) => n.to_string(),
        other => panic!("unexpected property value {other:?}"),
    }
}

fn seen_amqp(m: &AmqpMessage) -> Seen {
    let mut properties: Vec<(String, String)> = m
        .application_properties
        .iter()
        .map(|(name, value)| (name.clone(), amqp_text_of(value)))
        .collect();
    properties.sort();
    let props = m.properties.clone().unwrap_or_default();
    Seen {
        body: match &m.body {
            AmqpBody::Value(AmqpValue::String(t)) => t.as_bytes().to_vec(),
            AmqpBody::Data(parts) => parts.concat(),
            other => panic!("unexpected body {other:?}"),
        },
        properties,
        content_type: props.content_type,
        correlation_id: props.correlation_id.map(|c| amqp_text_of(&c)),
        reply_to: props.reply_to,
        priority: m.header.as_ref().map_or(4, |h| h.priority),
        expiration: props.absolute_expiry_time.unwrap_or(0),
    }
}

/// Checks what a path delivered against what was sent: exactly, or where
/// MQTT is at either end, without priority and to within two seconds of
/// expiry.
fn check(mut got: Seen, mut want: Seen, mqtt: bool, path: &str) {
    if mqtt {
        assert!(
            (got.expiration - want.expiration).abs() <= 2000,
            "{path}: expiry {} vs {}",
            got.expiration,
            want.expiration
        );
        (got.priority, got.expiration) = (0, 0);
        (want.priority, want.expiration) = (0, 0);
    }
    assert_eq!(got, want, "{path}");
}

#[test]
fn every_field_survives_every_path_between_native_stomp_mqtt_and_amqp() {
    let server = start();
    let (_c, session) = connect(&server);
    let native = session.create_consumer(&Destination::topic(TOPIC)).unwrap();
    let producer = session.create_producer(&Destination::topic(TOPIC)).unwrap();
    let mut stomp_sub = StompClient::connected(&server, &[]);
    stomp_sub.send(
        &StompFrame::new("SUBSCRIBE")
            .header("id", "1")
            .header("destination", format!("/topic/{TOPIC}"))
            .header("receipt", "subscribed"),
    );
    stomp_sub.expect("RECEIPT");
    let mut stomp_pub = StompClient::connected(&server, &[]);
    let mut mqtt_sub = MqttClient::connected(&server, Version::V5, "model-sub");
    mqtt_sub.subscribe(&TOPIC.replace('.', "/"), QoS::AtLeastOnce);
    let mut mqtt_pub = MqttClient::connected(&server, Version::V5, "model-pub");
    let mut amqp_sub = AmqpClient::opened(&server, "model-amqp-sub");
    amqp_sub.attach_receiver(0, &format!("topic://{TOPIC}"));
    assert!(matches!(
        amqp_sub.next(false),
        Got::Amqp(0, Performative::Attach(_))
    ));
    amqp_sub.credit(0, 0, 100);
    let mut amqp_pub = AmqpClient::opened(&server, "model-amqp-pub");
    amqp_pub.attach_sender(0, &format!("topic://{TOPIC}"));
    assert!(matches!(
        amqp_pub.next(false),
        Got::Amqp(0, Performative::Attach(_))
    ));
    let mut amqp_sent = 0;
    for (label, body) in bodies() {
        let expiration = expiration();
        let want = expected(&body, expiration);
        for publisher in ["native", "stomp", "mqtt", "amqp"] {
            match publisher {
                "native" => producer
                    .send_with_receipt(native_message(&body, expiration))
                    .unwrap(),
                "stomp" => {
                    stomp_pub.send(&stomp_send(&body, expiration));
                    stomp_pub.expect("RECEIPT");
                }
                "mqtt" => {
                    let reason = mqtt_pub.publish(mqtt_publish(&body, expiration));
                    assert_eq!(reason, 0);
                }
                _ => {
                    // Unsettled: the disposition says it was routed.
                    amqp_pub.transfer(0, amqp_sent, false, &amqp_message(&body, expiration));
                    loop {
                        match amqp_pub.next(false) {
                            Got::Amqp(_, Performative::Disposition(d)) if d.first == amqp_sent => {
                                break
                            }
                            Got::Closed => panic!("closed"),
                            _ => {}
                        }
                    }
                    amqp_sent += 1;
                }
            }
            let from_mqtt = publisher == "mqtt";
            let path = |to: &str| format!("{label} body, {publisher} -> {to}");
            let got = next(&native);
            let mut want_here = want.clone();
            if from_mqtt {
                // MQTT has no priority: the JMS default.
                want_here.priority = 4;
            }
            check(
                seen_native(&got),
                want_here.clone(),
                from_mqtt,
                &path("native"),
            );
            if publisher == "native" || publisher == "amqp" {
                // Typed both ends: the types come through too.
                assert_eq!(got.property("units"), Some(&Value::I32(3)));
                assert_eq!(got.property("flag"), Some(&Value::Bool(true)));
            }
            let frame = stomp_sub.expect("MESSAGE");
            check(
                seen_stomp(&frame),
                want_here.clone(),
                from_mqtt,
                &path("stomp"),
            );
            let got = mqtt_sub.receive();
            check(seen_mqtt(&got), want.clone(), true, &path("mqtt"));
            let (_, got, _) = amqp_sub.delivery(512);
            check(seen_amqp(&got), want_here, from_mqtt, &path("amqp"));
            if publisher == "native" || publisher == "amqp" {
                // Typed both ends: the types come through too.
                assert!(got
                    .application_properties
                    .contains(&("units".into(), AmqpValue::Int(3))));
                assert!(got
                    .application_properties
                    .contains(&("flag".into(), AmqpValue::Bool(true))));
            }
        }
    }
}
