//! AMQP 1.0 messages ↔ Herald messages: the one place that knows which
//! AMQP field is which JMS header, as Qpid JMS maps them (JMSType is the
//! subject, JMSXGroupID the group id, the JMS annotations say a
//! destination's kind and the body's type).

use bytes::BytesMut;
use herald_protocol::amqp::message::{Body as AmqpBody, Message as AmqpMessage};
use herald_protocol::amqp::Value as AmqpValue;
use herald_protocol::message::CONTENT_TYPE_PROPERTY;
use herald_protocol::{
    Body, DeliveryMode, Destination, DestinationKind, Message, MessageId, MessageView, Stamp, Value,
};

/// Qpid JMS's annotation of a destination's kind (`x-opt-jms-dest`, and
/// `x-opt-jms-reply-type` for the reply-to): 0 queue, 1 topic, 2 a
/// temporary queue, 3 a temporary topic.
pub const JMS_DEST: &str = "x-opt-jms-dest";
/// See [`JMS_DEST`].
pub const JMS_REPLY_TYPE: &str = "x-opt-jms-reply-type";
/// When the message is to be delivered (ms since the epoch).
pub const DELIVERY_TIME: &str = "x-opt-delivery-time";
/// How long after it was sent it is to be delivered (ms).
pub const DELIVERY_DELAY: &str = "x-opt-delivery-delay";
/// The property that keeps a body Herald has no type for (an
/// `amqp-sequence`, an `amqp-value` other than text, bytes or a map), as
/// its AMQP encoding, so that an AMQP consumer gets it as it was sent.
pub const AMQP_BODY_PROPERTY: &str = "HeraldAmqpBody";

/// Milliseconds since the epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Why a transfer does not make a message.
#[derive(Debug, thiserror::Error)]
pub enum MappingError {
    /// It says nowhere where it goes (the anonymous relay needs `to`).
    #[error("the message has no 'to' address, and its link no target")]
    NoAddress,
    /// Its address or a field does not make a Herald message.
    #[error(transparent)]
    Message(#[from] herald_protocol::Error),
}

/// The destination an AMQP address names: `queue://x`, `topic://x`, or a
/// bare name of the kind `capabilities` say (`queue` or `topic`, as Qpid
/// JMS and Artemis give), a queue without one.
pub fn destination(
    address: &str,
    capabilities: &[String],
) -> Result<Destination, herald_protocol::Error> {
    let bare = match capabilities
        .iter()
        .any(|c| c == "topic" || c == "temporary-topic")
    {
        true => DestinationKind::Topic,
        false => DestinationKind::Queue,
    };
    let d = Destination::from_uri_or(address, bare)?;
    herald_protocol::destination::validate_name(&d.name)?;
    Ok(d)
}

/// The kind a JMS annotation gives (0 or 2 a queue, 1 or 3 a topic).
fn annotated_kind(v: Option<&AmqpValue>) -> Option<DestinationKind> {
    let n = match v? {
        AmqpValue::Byte(n) => i64::from(*n),
        AmqpValue::Ubyte(n) => i64::from(*n),
        AmqpValue::Int(n) => i64::from(*n),
        AmqpValue::Long(n) => *n,
        _ => return None,
    };
    match n {
        0 | 2 => Some(DestinationKind::Queue),
        1 | 3 => Some(DestinationKind::Topic),
        _ => None,
    }
}

/// A message id or correlation id as text: a string as it is, a number
/// in decimal, a uuid in its usual form, bytes in hex.
fn id_text(v: &AmqpValue) -> Option<String> {
    match v {
        AmqpValue::String(s) => Some(s.clone()),
        AmqpValue::Ulong(n) => Some(n.to_string()),
        AmqpValue::Uuid(u) => Some(uuid_text(u)),
        AmqpValue::Binary(b) => Some(hex(b)),
        _ => None,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn uuid_text(u: &[u8; 16]) -> String {
    let h = hex(u);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// An application property's value as a Herald value; `None` for a null.
/// Unsigned kinds widen to the next signed one, and what has no JMS type
/// (a timestamp, a uuid, a symbol, bytes) becomes a long or a string.
fn property(v: &AmqpValue) -> Option<Value> {
    Some(match v {
        AmqpValue::Null => return None,
        AmqpValue::Bool(b) => Value::Bool(*b),
        AmqpValue::Byte(n) => Value::I8(*n),
        AmqpValue::Short(n) => Value::I16(*n),
        AmqpValue::Int(n) => Value::I32(*n),
        AmqpValue::Long(n) | AmqpValue::Timestamp(n) => Value::I64(*n),
        AmqpValue::Ubyte(n) => Value::I16(i16::from(*n)),
        AmqpValue::Ushort(n) => Value::I32(i32::from(*n)),
        AmqpValue::Uint(n) => Value::I64(i64::from(*n)),
        AmqpValue::Ulong(n) => match i64::try_from(*n) {
            Ok(n) => Value::I64(n),
            Err(_) => Value::String(n.to_string()),
        },
        AmqpValue::Float(f) => Value::F32(*f),
        AmqpValue::Double(f) => Value::F64(*f),
        AmqpValue::Char(c) => Value::String(c.to_string()),
        AmqpValue::String(s) | AmqpValue::Symbol(s) => Value::String(s.clone()),
        AmqpValue::Uuid(u) => Value::String(uuid_text(u)),
        AmqpValue::Binary(b) => Value::String(hex(b)),
        other => Value::String(format!("{other:?}")),
    })
}

/// A map body with string keys and simple values, as a JMS MapMessage;
/// `None` if it is not one.
fn map_body(pairs: &[(AmqpValue, AmqpValue)]) -> Option<Vec<(String, Value)>> {
    pairs
        .iter()
        .map(|(k, v)| match (k, v) {
            (
                _,
                AmqpValue::Map(_)
                | AmqpValue::List(_)
                | AmqpValue::Array(_)
                | AmqpValue::Described(..)
                | AmqpValue::Binary(_)
                | AmqpValue::Null,
            ) => None,
            (AmqpValue::String(k), v) => property(v).map(|v| (k.clone(), v)),
            _ => None,
        })
        .collect()
}

/// What an AMQP message becomes: the Herald message, its block encoded
/// with destination `to` (the link's target, else the message's `to`),
/// id `id` unless it has one of its own, at `now` (ms since the epoch).
pub fn message_from(
    m: &AmqpMessage,
    to: Option<&Destination>,
    id: (&str, u64),
    now: i64,
) -> Result<MessageView, MappingError> {
    let none = herald_protocol::amqp::message::Properties::default();
    let props = m.properties.as_ref().unwrap_or(&none);
    let target = match (to, &props.to) {
        (Some(d), _) => d.clone(),
        (None, Some(address)) => {
            let kind = annotated_kind(m.annotation(JMS_DEST));
            let caps: Vec<String> = kind
                .map(|k| vec![k.as_str().to_owned()])
                .unwrap_or_default();
            destination(address, &caps)?
        }
        (None, None) => return Err(MappingError::NoAddress),
    };
    let mut h = Message::new(Body::Empty);
    if let Some(header) = &m.header {
        if header.durable {
            h.delivery_mode = DeliveryMode::Persistent;
        }
        h.priority = header.priority.min(herald_protocol::message::MAX_PRIORITY);
        if let Some(ttl) = header.ttl {
            h.expiration = now.saturating_add(i64::from(ttl));
        }
    }
    if let Some(at) = props.absolute_expiry_time.filter(|t| *t > 0) {
        h.expiration = at;
    }
    h.correlation_id = props.correlation_id.as_ref().and_then(id_text);
    if let Some(reply) = &props.reply_to {
        let kind = annotated_kind(m.annotation(JMS_REPLY_TYPE));
        let caps: Vec<String> = kind
            .map(|k| vec![k.as_str().to_owned()])
            .unwrap_or_default();
        h.reply_to = Some(destination(reply, &caps)?);
    }
    h.message_type = props.subject.clone();
    h.delivery_time = match (m.annotation(DELIVERY_TIME), m.annotation(DELIVERY_DELAY)) {
        (Some(AmqpValue::Timestamp(t) | AmqpValue::Long(t)), _) => *t,
        (_, Some(AmqpValue::Long(d))) => now.saturating_add(*d),
        _ => 0,
    };
    for (name, value) in &m.application_properties {
        if let Some(v) = property(value) {
            h.set_property(name.as_str(), v);
        }
    }
    if let Some(ct) = &props.content_type {
        h.set_property(CONTENT_TYPE_PROPERTY, ct.as_str());
    }
    if let Some(group) = &props.group_id {
        h.set_property("JMSXGroupID", group.as_str());
    }
    if let Some(seq) = props.group_sequence {
        h.set_property("JMSXGroupSeq", i64::from(seq));
    }
    h.body = match &m.body {
        AmqpBody::Empty | AmqpBody::Value(AmqpValue::Null) => Body::Empty,
        AmqpBody::Data(parts) if parts.len() == 1 => Body::Bytes(parts[0].clone()),
        AmqpBody::Data(parts) => Body::Bytes(parts.concat().into()),
        AmqpBody::Value(AmqpValue::String(s)) => Body::Text(s.clone()),
        AmqpBody::Value(AmqpValue::Binary(b)) => Body::Bytes(b.clone()),
        other => match other {
            AmqpBody::Value(AmqpValue::Map(pairs)) => map_body(pairs),
            _ => None,
        }
        .map_or_else(
            || {
                // Kept whole, for AMQP consumers; others see its bytes.
                let kept = AmqpMessage {
                    body: other.clone(),
                    ..AmqpMessage::default()
                };
                let mut bytes = BytesMut::new();
                kept.encode(&mut bytes);
                h.set_property(AMQP_BODY_PROPERTY, true);
                Body::Bytes(bytes.freeze())
            },
            Body::Map,
        ),
    };
    let own_id = props.message_id.as_ref().and_then(id_text);
    let message_id = match &own_id {
        Some(given) => MessageId::Whole(given),
        None => MessageId::Numbered(id.0, id.1),
    };
    let creation = props.creation_time.filter(|t| *t > 0).unwrap_or(now);
    let stamp = Stamp {
        destination: &target,
        message_id,
        timestamp: creation,
        delivery_time: h.delivery_time,
    };
    let mut block = BytesMut::new();
    h.encode_stamped(&stamp, &mut block)?;
    Ok(MessageView::parse(block.freeze())?)
}

/// Qpid JMS's annotation of a body's JMS type (`x-opt-jms-msg-type`):
/// 0 Message, 2 MapMessage, 3 BytesMessage, 5 TextMessage.
pub const JMS_MSG_TYPE: &str = "x-opt-jms-msg-type";

fn symbol(name: &str) -> AmqpValue {
    AmqpValue::Symbol(name.to_owned())
}

/// A destination as an AMQP address: Herald's URI, so that a client
/// without the JMS annotations can send back to it.
fn address(kind: DestinationKind, name: &str) -> String {
    format!("{}://{name}", kind.as_str())
}

/// The JMS annotation of a destination's kind.
fn kind_annotation(kind: DestinationKind, name: &str) -> AmqpValue {
    let temporary = herald_protocol::destination::is_temporary(name);
    AmqpValue::Byte(match (kind, temporary) {
        (DestinationKind::Queue, false) => 0,
        (DestinationKind::Topic, false) => 1,
        (DestinationKind::Queue, true) => 2,
        (DestinationKind::Topic, true) => 3,
    })
}

fn value_of(v: herald_protocol::value::ValueRef<'_>) -> AmqpValue {
    use herald_protocol::value::ValueRef;
    match v {
        ValueRef::Bool(b) => AmqpValue::Bool(b),
        ValueRef::I8(n) => AmqpValue::Byte(n),
        ValueRef::I16(n) => AmqpValue::Short(n),
        ValueRef::I32(n) => AmqpValue::Int(n),
        ValueRef::I64(n) => AmqpValue::Long(n),
        ValueRef::F32(f) => AmqpValue::Float(f),
        ValueRef::F64(f) => AmqpValue::Double(f),
        ValueRef::String(s) => AmqpValue::String(s.to_owned()),
    }
}

/// What a Herald message is to an AMQP receiver, delivered for the
/// `count`th time (1 the first), at `now`.
pub fn message_to(
    m: &herald_protocol::message::MessageRef<'_>,
    block: &bytes::Bytes,
    count: u32,
    now: i64,
) -> AmqpMessage {
    use herald_protocol::amqp::message::{Header, Properties};
    use herald_protocol::message::BodyRef;
    let mut props = Properties {
        message_id: Some(AmqpValue::String(m.message_id.to_owned())),
        to: Some(address(m.destination_kind, m.destination)),
        correlation_id: m.correlation_id.map(|c| AmqpValue::String(c.to_owned())),
        reply_to: m.reply_to.map(|(kind, name)| address(kind, name)),
        subject: m.message_type.map(str::to_owned),
        creation_time: Some(m.timestamp).filter(|t| *t > 0),
        absolute_expiry_time: Some(m.expiration).filter(|t| *t != 0),
        ..Properties::default()
    };
    let mut annotations = vec![(
        symbol(JMS_DEST),
        kind_annotation(m.destination_kind, m.destination),
    )];
    if let Some((kind, name)) = m.reply_to {
        annotations.push((symbol(JMS_REPLY_TYPE), kind_annotation(kind, name)));
    }
    if m.delivery_time > 0 {
        annotations.push((symbol(DELIVERY_TIME), AmqpValue::Timestamp(m.delivery_time)));
    }
    let mut application = Vec::new();
    let mut kept_body = false;
    for (name, value) in m.properties.clone() {
        use herald_protocol::value::ValueRef;
        match (name, value) {
            (CONTENT_TYPE_PROPERTY, ValueRef::String(ct)) => {
                props.content_type = Some(ct.to_owned())
            }
            ("JMSXGroupID", ValueRef::String(g)) => props.group_id = Some(g.to_owned()),
            ("JMSXGroupSeq", ValueRef::I64(n)) => props.group_sequence = u32::try_from(n).ok(),
            (AMQP_BODY_PROPERTY, ValueRef::Bool(b)) => kept_body = b,
            (name, value) => application.push((name.to_owned(), value_of(value))),
        }
    }
    let (body, jms_type) = match &m.body {
        BodyRef::Empty => (AmqpBody::Value(AmqpValue::Null), 0),
        BodyRef::Text(t) => (AmqpBody::Value(AmqpValue::String((*t).to_owned())), 5),
        BodyRef::Bytes(range) => {
            let bytes = block.slice(range.clone());
            match kept_body
                .then(|| AmqpMessage::decode(&bytes).ok())
                .flatten()
            {
                Some(kept) => (kept.body, 0),
                None => (AmqpBody::Data(vec![bytes]), 3),
            }
        }
        BodyRef::Map(entries) => {
            let pairs = entries
                .clone()
                .map(|(k, v)| (AmqpValue::String(k.to_owned()), value_of(v)))
                .collect();
            (AmqpBody::Value(AmqpValue::Map(pairs)), 2)
        }
    };
    if !kept_body {
        annotations.push((symbol(JMS_MSG_TYPE), AmqpValue::Byte(jms_type)));
    }
    let ttl =
        (m.expiration != 0).then(|| u32::try_from((m.expiration - now).max(1)).unwrap_or(u32::MAX));
    AmqpMessage {
        header: Some(Header {
            durable: m.delivery_mode() == DeliveryMode::Persistent,
            priority: m.priority,
            ttl,
            first_acquirer: count <= 1,
            delivery_count: count.saturating_sub(1),
        }),
        delivery_annotations: Vec::new(),
        message_annotations: annotations,
        properties: Some(props),
        application_properties: application,
        body,
        footer: Vec::new(),
    }
}
