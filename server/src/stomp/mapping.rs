//! STOMP frames ↔ Herald messages: the one place that knows which STOMP
//! header is which JMS header. Every other header travels as a string
//! property and comes back as a header.

use bytes::{Bytes, BytesMut};
use herald_protocol::message::CONTENT_TYPE_PROPERTY;
use herald_protocol::stomp::StompFrame;
use herald_protocol::{
    Body, DeliveryMode, Destination, DestinationKind, Message, MessageView, Value,
};
use thiserror::Error;

/// Headers that are STOMP's own, not the message's.
const FRAME_HEADERS: [&str; 8] = [
    "destination",
    "content-length",
    "content-type",
    "receipt",
    "transaction",
    "subscription",
    "ack",
    "message-id",
];

/// Why a STOMP frame does not map onto a Herald message, or back.
#[derive(Debug, Error)]
pub enum MappingError {
    /// A destination that is neither `/topic/...` nor `/queue/...`.
    #[error("destination '{0}' is neither /topic/<name> nor /queue/<name>")]
    Destination(String),
    /// A SEND without a destination header.
    #[error("SEND needs a destination header")]
    NoDestination,
    /// A priority header that is not 0 to 9.
    #[error("priority '{0}' is not 0 to 9")]
    Priority(String),
    /// An expires header that is not a number.
    #[error("expires '{0}' is not a number")]
    Expires(String),
    /// The message the headers make is not a valid one (a name, a size),
    /// or a stored one does not decode.
    #[error(transparent)]
    Message(#[from] herald_protocol::Error),
}

/// `/topic/a.b` or `/queue/a.b` → a destination.
pub fn destination(text: &str) -> Result<Destination, MappingError> {
    let d = if let Some(name) = text.strip_prefix("/topic/") {
        Destination::topic(name)
    } else if let Some(name) = text.strip_prefix("/queue/") {
        Destination::queue(name)
    } else {
        return Err(MappingError::Destination(text.to_owned()));
    };
    Ok(d)
}

/// A destination as STOMP names it.
pub fn stomp_name(d: &Destination) -> String {
    match d.kind {
        DestinationKind::Topic => format!("/topic/{}", d.name),
        DestinationKind::Queue => format!("/queue/{}", d.name),
    }
}

/// Builds the message block of a STOMP SEND, validated as a native SEND
/// would be.
pub fn message_from(
    frame: &StompFrame,
    message_id: String,
    now_ms: i64,
) -> Result<MessageView, MappingError> {
    let dest = frame
        .get("destination")
        .ok_or(MappingError::NoDestination)?;
    let text_body = match frame.get("content-type") {
        Some(ct) => ct.starts_with("text/"),
        None => std::str::from_utf8(&frame.body).is_ok(),
    };
    let body = match std::str::from_utf8(&frame.body) {
        Ok(t) if text_body => Body::Text(t.to_owned()),
        _ if frame.body.is_empty() => Body::Empty,
        _ => Body::Bytes(frame.body.clone()),
    };
    let mut m = Message::new(body);
    if let Some(ct) = frame.get("content-type") {
        m.set_property(CONTENT_TYPE_PROPERTY, ct);
    }
    m.set_destination(Some(destination(dest)?));
    m.set_message_id(message_id);
    m.timestamp = now_ms;
    let mut seen: Vec<&str> = Vec::new();
    for (name, value) in &frame.headers {
        // The first value of a repeated header counts.
        if seen.contains(&name.as_str()) {
            continue;
        }
        seen.push(name);
        match name.as_str() {
            "persistent" => {
                if value == "true" {
                    m.delivery_mode = DeliveryMode::Persistent;
                }
            }
            "priority" => {
                m.priority = value
                    .parse()
                    .ok()
                    .filter(|p| *p <= 9)
                    .ok_or_else(|| MappingError::Priority(value.clone()))?
            }
            "expires" => {
                m.expiration = value
                    .parse()
                    .map_err(|_| MappingError::Expires(value.clone()))?
            }
            "correlation-id" => m.set_correlation_id(Some(value.clone())),
            "reply-to" => m.set_reply_to(Some(destination(value)?)),
            "type" => m.set_message_type(Some(value.clone())),
            n if FRAME_HEADERS.contains(&n) => {}
            n => m.set_property(n, value.as_str()),
        }
    }
    let mut block = BytesMut::new();
    m.encode(&mut block)?;
    Ok(MessageView::parse(block.freeze())?)
}

/// A MESSAGE frame for one delivery of a message block.
pub fn frame_from(
    block: &Bytes,
    subscription: &str,
    ack: Option<u64>,
    delivery_count: u32,
) -> Result<StompFrame, MappingError> {
    let m = Message::decode(block, delivery_count)?;
    let mut f = StompFrame::new("MESSAGE").header("subscription", subscription);
    let id = ack.map_or_else(|| m.message_id().to_owned(), |a| a.to_string());
    f = f.header("message-id", id.clone());
    if ack.is_some() {
        f = f.header("ack", id);
    }
    if let Some(d) = m.destination() {
        f = f.header("destination", stomp_name(d));
    }
    f = f.header("herald-message-id", m.message_id());
    if m.delivery_mode == DeliveryMode::Persistent {
        f = f.header("persistent", "true");
    }
    f = f
        .header("priority", m.priority.to_string())
        .header("timestamp", m.timestamp.to_string());
    if m.expiration != 0 {
        f = f.header("expires", m.expiration.to_string());
    }
    if let Some(c) = m.correlation_id() {
        f = f.header("correlation-id", c);
    }
    if let Some(r) = m.reply_to() {
        f = f.header("reply-to", stomp_name(r));
    }
    if let Some(t) = m.message_type() {
        f = f.header("type", t);
    }
    if m.redelivered {
        f = f.header("redelivered", "true");
    }
    let mut sent_type = None;
    for (name, value) in m.properties() {
        match (name.as_str(), value) {
            // The publisher's content type, as it gave it.
            (CONTENT_TYPE_PROPERTY, Value::String(ct)) => sent_type = Some(ct.clone()),
            _ => f = f.header(name.clone(), value.to_string()),
        }
    }
    let (content_type, body) = match m.body {
        Body::Empty => (None, None),
        // Its bytes follow the frame's head from the body's file
        // (`StompSession::message`).
        Body::Stream(_) => (Some("application/octet-stream"), None),
        Body::Text(t) => (Some("text/plain;charset=utf-8"), Some(Bytes::from(t))),
        Body::Bytes(b) => (Some("application/octet-stream"), Some(b)),
        Body::Map(entries) => {
            let text: String = entries.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
            (Some("text/plain;charset=utf-8"), Some(Bytes::from(text)))
        }
    };
    if let Some(ct) = sent_type.or(content_type.map(str::to_owned)) {
        f = f.header("content-type", ct);
    }
    Ok(match body {
        Some(body) => f.body(body),
        None => f,
    })
}
