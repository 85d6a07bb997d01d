//! One message model across protocols: native and STOMP publishers ×
//! native and STOMP subscribers, and every field each protocol has
//! survives every path: text and binary bodies (NUL and non-UTF-8 bytes
//! included), properties (typed where both ends are native, as text where
//! STOMP carries them), the content type, correlation id and reply-to,
//! priority and expiry. MQTT joins the matrix with its listener.

use std::time::{SystemTime, UNIX_EPOCH};

use herald_client::{Body, Destination, Message, Value};
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
        reply_to: Some("queue://replies".into()),
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
    m.correlation_id = Some("c-1".into());
    m.reply_to = Some(Destination::queue("replies"));
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
        .header("reply-to", "/queue/replies")
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
        correlation_id: m.correlation_id.clone(),
        reply_to: m.reply_to.as_ref().map(|d| d.to_string()),
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
    let reply_to = f.get("reply-to").map(|r| match r.strip_prefix("/queue/") {
        Some(q) => format!("queue://{q}"),
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

#[test]
fn every_field_survives_every_path_between_native_and_stomp() {
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
    for (label, body) in bodies() {
        let expiration = expiration();
        let want = expected(&body, expiration);
        for publisher in ["native", "stomp"] {
            match publisher {
                "native" => producer
                    .send_with_receipt(native_message(&body, expiration))
                    .unwrap(),
                _ => {
                    stomp_pub.send(&stomp_send(&body, expiration));
                    stomp_pub.expect("RECEIPT");
                }
            }
            let path = |to: &str| format!("{label} body, {publisher} -> {to}");
            let got = next(&native);
            assert_eq!(seen_native(&got), want, "{}", path("native"));
            if publisher == "native" {
                // Typed both ends: the types come through too.
                assert_eq!(got.property("units"), Some(&Value::I32(3)));
                assert_eq!(got.property("flag"), Some(&Value::Bool(true)));
            }
            let frame = stomp_sub.expect("MESSAGE");
            assert_eq!(seen_stomp(&frame), want, "{}", path("stomp"));
        }
    }
}
