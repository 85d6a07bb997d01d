//! AMQP 1.0 messages ↔ Herald messages: the one place that knows which
//! AMQP field is which JMS header, as Qpid JMS maps them (JMSType is the
//! subject, JMSXGroupID the group id, the JMS annotations say a
//! destination's kind and the body's type).

use bytes::{Bytes, BytesMut};
use herald_protocol::amqp::message::{
    Body as AmqpBody, BodyKind, Message as AmqpMessage, Sections,
};
use herald_protocol::amqp::put::{self, Compound};
use herald_protocol::amqp::types::Raw;
use herald_protocol::message::{BodyRef, MessageRef, CONTENT_TYPE_PROPERTY};
use herald_protocol::value::ValueRef;

use crate::frontend::chunks::Chunks;
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
    let d = named(address, capabilities)?;
    herald_protocol::destination::validate_name(&d.name)?;
    Ok(d)
}

/// What a receiving link's source names: as [`destination`], but a topic
/// may be a pattern (`topic://sales.#`), since a receiver of a topic is a
/// subscription, as on every other front-end.
pub fn source(
    address: &str,
    capabilities: &[String],
) -> Result<Destination, herald_protocol::Error> {
    let d = named(address, capabilities)?;
    match d.kind {
        DestinationKind::Topic => herald_protocol::Pattern::parse(&d.name).map(drop)?,
        DestinationKind::Queue => herald_protocol::destination::validate_name(&d.name)?,
    }
    Ok(d)
}

fn named(address: &str, capabilities: &[String]) -> Result<Destination, herald_protocol::Error> {
    let bare = match capabilities
        .iter()
        .any(|c| c == "topic" || c == "temporary-topic")
    {
        true => DestinationKind::Topic,
        false => DestinationKind::Queue,
    };
    Destination::from_uri_or(address, bare)
}

/// The kind a JMS annotation gives (0 or 2 a queue, 1 or 3 a topic).
fn annotated_kind(v: Option<Raw<'_>>) -> Option<DestinationKind> {
    let n = match v? {
        Raw::Byte(n) => i64::from(n),
        Raw::Ubyte(n) => i64::from(n),
        Raw::Int(n) => i64::from(n),
        Raw::Long(n) => n,
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
fn id_text(v: Raw<'_>) -> Option<String> {
    match v {
        Raw::String(s) => Some(s.to_owned()),
        Raw::Ulong(n) => Some(n.to_string()),
        Raw::Uuid(u) => Some(uuid_text(&u)),
        Raw::Binary(b) => Some(hex(b)),
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
fn property(v: Raw<'_>) -> Option<Value> {
    Some(match v {
        Raw::Null => return None,
        Raw::Bool(b) => Value::Bool(b),
        Raw::Byte(n) => Value::I8(n),
        Raw::Short(n) => Value::I16(n),
        Raw::Int(n) => Value::I32(n),
        Raw::Long(n) | Raw::Timestamp(n) => Value::I64(n),
        Raw::Ubyte(n) => Value::I16(i16::from(n)),
        Raw::Ushort(n) => Value::I32(i32::from(n)),
        Raw::Uint(n) => Value::I64(i64::from(n)),
        Raw::Ulong(n) => match i64::try_from(n) {
            Ok(n) => Value::I64(n),
            Err(_) => Value::String(n.to_string()),
        },
        Raw::Float(f) => Value::F32(f),
        Raw::Double(f) => Value::F64(f),
        Raw::Char(c) => Value::String(c.to_string()),
        Raw::String(s) | Raw::Symbol(s) => Value::String(s.to_owned()),
        Raw::Uuid(u) => Value::String(uuid_text(&u)),
        Raw::Binary(b) => Value::String(hex(b)),
        other => Value::String(format!("{:?}", other.to_value())),
    })
}

/// A map body with string keys and simple values, as a JMS MapMessage;
/// `None` if it is not one.
fn map_body(map: Raw<'_>) -> Option<Vec<(String, Value)>> {
    if !map.is_map() {
        return None;
    }
    let mut items = map.items()?;
    let mut entries = Vec::new();
    while let (Some(k), Some(v)) = (items.next(), items.next()) {
        match (k, v) {
            (_, Raw::Encoded(_) | Raw::Binary(_) | Raw::Null) => return None,
            (Raw::String(k), v) => entries.push((k.to_owned(), property(v)?)),
            _ => return None,
        }
    }
    Some(entries)
}

/// The destination an address names, of the kind a JMS annotation says.
fn annotated(address: &str, annotation: Option<Raw<'_>>) -> Result<Destination, MappingError> {
    let caps: Vec<String> = annotated_kind(annotation)
        .map(|k| vec![k.as_str().to_owned()])
        .unwrap_or_default();
    Ok(destination(address, &caps)?)
}

/// What an AMQP message becomes: the Herald message, its block encoded
/// with destination `to` (the link's target, else the message's `to`),
/// id `id` unless it has one of its own, at `now` (ms since the epoch),
/// its block cut from `chunks`.
pub fn message_from(
    m: &Sections<'_>,
    to: Option<&Destination>,
    id: (&str, u64),
    now: i64,
    chunks: &mut Chunks,
) -> Result<MessageView, MappingError> {
    let props = m.properties.unwrap_or_default();
    let addressed;
    let target = match (to, props.to) {
        (Some(d), _) => d,
        (None, Some(address)) => {
            addressed = annotated(address, m.annotation(JMS_DEST))?;
            &addressed
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
    h.set_correlation_id(id_text(props.correlation_id));
    if let Some(reply) = props.reply_to {
        h.set_reply_to(Some(annotated(reply, m.annotation(JMS_REPLY_TYPE))?));
    }
    h.set_message_type(props.subject.map(str::to_owned));
    h.delivery_time = match (m.annotation(DELIVERY_TIME), m.annotation(DELIVERY_DELAY)) {
        (Some(Raw::Timestamp(t) | Raw::Long(t)), _) => t,
        (_, Some(Raw::Long(d))) => now.saturating_add(d),
        _ => 0,
    };
    for (name, value) in m.application_properties() {
        if let Some(v) = property(value) {
            h.set_property(name, v);
        }
    }
    if let Some(ct) = props.content_type {
        h.set_property(CONTENT_TYPE_PROPERTY, ct);
    }
    if let Some(group) = props.group_id {
        h.set_property("JMSXGroupID", group);
    }
    if let Some(seq) = props.group_sequence {
        h.set_property("JMSXGroupSeq", i64::from(seq));
    }
    let kept = |h: &mut Message| {
        // Kept whole, for AMQP consumers; others see its bytes.
        h.set_property(AMQP_BODY_PROPERTY, true);
        Body::Bytes(Bytes::copy_from_slice(m.body))
    };
    h.body = match m.body_kind {
        BodyKind::Empty | BodyKind::Value(Raw::Null) => Body::Empty,
        BodyKind::Data(bytes) | BodyKind::Value(Raw::Binary(bytes)) => {
            Body::Bytes(Bytes::copy_from_slice(bytes))
        }
        BodyKind::Value(Raw::String(s)) => Body::Text(s.to_owned()),
        BodyKind::Value(map) => map_body(map).map_or_else(|| kept(&mut h), Body::Map),
        BodyKind::Other => match AmqpMessage::decode(m.body) {
            Ok(AmqpMessage {
                body: AmqpBody::Data(parts),
                ..
            }) => Body::Bytes(parts.concat().into()),
            _ => kept(&mut h),
        },
    };
    let own_id = id_text(props.message_id);
    let message_id = match &own_id {
        Some(given) => MessageId::Whole(given),
        None => MessageId::Numbered(id.0, id.1),
    };
    let creation = props.creation_time.filter(|t| *t > 0).unwrap_or(now);
    let stamp = Stamp {
        destination: target,
        message_id,
        timestamp: creation,
        delivery_time: h.delivery_time,
    };
    // Room for the headers as well as the body.
    let block = chunks.room(m.body.len() + 2 * target.name.len() + 256);
    if let Err(e) = h.encode_stamped(&stamp, block) {
        block.clear();
        return Err(e.into());
    }
    Ok(MessageView::parse(chunks.cut())?)
}

/// Qpid JMS's annotation of a body's JMS type (`x-opt-jms-msg-type`):
/// 0 Message, 2 MapMessage, 3 BytesMessage, 5 TextMessage.
pub const JMS_MSG_TYPE: &str = "x-opt-jms-msg-type";

/// A destination as an AMQP address: Herald's URI, so that a client
/// without the JMS annotations can send back to it.
fn address(out: &mut BytesMut, kind: DestinationKind, name: &str) {
    put::string_of(out, &[kind.as_str(), "://", name]);
}

/// The JMS annotation of a destination's kind.
fn kind_annotation(kind: DestinationKind, name: &str) -> i8 {
    let temporary = herald_protocol::destination::is_temporary(name);
    match (kind, temporary) {
        (DestinationKind::Queue, false) => 0,
        (DestinationKind::Topic, false) => 1,
        (DestinationKind::Queue, true) => 2,
        (DestinationKind::Topic, true) => 3,
    }
}

fn put_value(out: &mut BytesMut, v: ValueRef<'_>) {
    match v {
        ValueRef::Bool(b) => put::boolean(out, b),
        ValueRef::I8(n) => put::byte(out, n),
        ValueRef::I16(n) => put::short(out, n),
        ValueRef::I32(n) => put::int(out, n),
        ValueRef::I64(n) => put::long(out, n),
        ValueRef::F32(f) => put::float(out, f),
        ValueRef::F64(f) => put::double(out, f),
        ValueRef::String(s) => put::string(out, s),
    }
}

/// The header section of a Herald message's `count`th delivery (1 the
/// first) to an AMQP receiver, at `now` (its time to live counts down).
pub fn header_to(m: &MessageRef<'_>, count: u32, now: i64, out: &mut BytesMut) {
    put::described(out, 0x70);
    let mut f = Compound::list(out);
    match m.delivery_mode() == DeliveryMode::Persistent {
        true => f.put(out, |o| put::boolean(o, true)),
        false => f.skip(out),
    }
    match m.priority {
        herald_protocol::amqp::message::DEFAULT_PRIORITY => f.skip(out),
        p => f.put(out, |o| put::ubyte(o, p)),
    }
    match m.expiration {
        0 => f.skip(out),
        at => {
            let ttl = u32::try_from((at - now).max(1)).unwrap_or(u32::MAX);
            f.put(out, |o| put::uint(o, ttl));
        }
    }
    match count <= 1 {
        true => f.put(out, |o| put::boolean(o, true)),
        false => f.skip(out),
    }
    match count.saturating_sub(1) {
        0 => f.skip(out),
        n => f.put(out, |o| put::uint(o, n)),
    }
    f.close(out);
}

/// The properties Herald keeps for AMQP's own fields, found among a
/// message's properties.
#[derive(Default)]
struct Special<'a> {
    content_type: Option<&'a str>,
    group_id: Option<&'a str>,
    group_sequence: Option<u32>,
    /// The body is an AMQP body kept as it came ([`AMQP_BODY_PROPERTY`]).
    kept_body: bool,
    /// Properties that are none of these.
    others: usize,
}

impl<'a> Special<'a> {
    /// What `name` is, if it is one of them.
    fn take(&mut self, name: &str, value: ValueRef<'a>) -> bool {
        match (name, value) {
            (CONTENT_TYPE_PROPERTY, ValueRef::String(ct)) => self.content_type = Some(ct),
            ("JMSXGroupID", ValueRef::String(g)) => self.group_id = Some(g),
            ("JMSXGroupSeq", ValueRef::I64(n)) => self.group_sequence = u32::try_from(n).ok(),
            (AMQP_BODY_PROPERTY, ValueRef::Bool(b)) => self.kept_body = b,
            _ => return false,
        }
        true
    }
}

/// The sections after the header of a Herald message to an AMQP
/// receiver (the same for every delivery of it), written straight from
/// the message block: message annotations (the JMS ones), properties,
/// application properties and the body.
pub fn sections_to(m: &MessageRef<'_>, block: &Bytes, out: &mut BytesMut) {
    let mut special = Special::default();
    for (name, value) in m.properties.clone() {
        if !special.take(name, value) {
            special.others += 1;
        }
    }
    // A kept body is used only if it still reads as AMQP sections.
    let kept = match (&m.body, special.kept_body) {
        (BodyRef::Bytes(range), true) => {
            Some(&block[range.clone()]).filter(|b| Sections::read(b).is_ok())
        }
        _ => None,
    };
    let jms_type = match &m.body {
        BodyRef::Empty => 0,
        BodyRef::Text(_) => 5,
        BodyRef::Bytes(_) => 3,
        BodyRef::Map(_) => 2,
    };
    put::described(out, 0x72);
    let mut a = Compound::map(out);
    let mut annotate = |out: &mut BytesMut, name: &str, write: &dyn Fn(&mut BytesMut)| {
        a.put(out, |o| put::symbol(o, name));
        a.put(out, write);
    };
    let dest = kind_annotation(m.destination_kind, m.destination);
    annotate(out, JMS_DEST, &|o| put::byte(o, dest));
    if let Some((kind, name)) = m.reply_to {
        let reply = kind_annotation(kind, name);
        annotate(out, JMS_REPLY_TYPE, &|o| put::byte(o, reply));
    }
    if m.delivery_time > 0 {
        annotate(out, DELIVERY_TIME, &|o| put::timestamp(o, m.delivery_time));
    }
    if kept.is_none() {
        annotate(out, JMS_MSG_TYPE, &|o| put::byte(o, jms_type));
    }
    a.close(out);
    put::described(out, 0x73);
    let mut p = Compound::list(out);
    let text = |out: &mut BytesMut, p: &mut Compound, v: Option<&str>| match v {
        Some(v) => p.put(out, |o| put::string(o, v)),
        None => p.skip(out),
    };
    text(out, &mut p, Some(m.message_id));
    p.skip(out); // user-id
    p.put(out, |o| address(o, m.destination_kind, m.destination));
    text(out, &mut p, m.message_type);
    match m.reply_to {
        Some((kind, name)) => p.put(out, |o| address(o, kind, name)),
        None => p.skip(out),
    }
    text(out, &mut p, m.correlation_id);
    match special.content_type {
        Some(ct) => p.put(out, |o| put::symbol(o, ct)),
        None => p.skip(out),
    }
    p.skip(out); // content-encoding
    let time = |out: &mut BytesMut, p: &mut Compound, t: i64| match t {
        0 => p.skip(out),
        t => p.put(out, |o| put::timestamp(o, t)),
    };
    time(out, &mut p, m.expiration);
    time(out, &mut p, m.timestamp.max(0));
    text(out, &mut p, special.group_id);
    match special.group_sequence {
        Some(n) => p.put(out, |o| put::uint(o, n)),
        None => p.skip(out),
    }
    p.close(out);
    if special.others > 0 {
        put::described(out, 0x74);
        let mut a = Compound::map(out);
        for (name, value) in m.properties.clone() {
            if !Special::default().take(name, value) {
                a.put(out, |o| put::string(o, name));
                a.put(out, |o| put_value(o, value));
            }
        }
        a.close(out);
    }
    match (&m.body, kept) {
        (_, Some(sections)) => out.extend_from_slice(sections),
        (BodyRef::Empty, _) => {
            put::described(out, 0x77);
            put::null(out);
        }
        (BodyRef::Text(t), _) => {
            put::described(out, 0x77);
            put::string(out, t);
        }
        (BodyRef::Bytes(range), _) => {
            put::described(out, 0x75);
            put::binary(out, &block[range.clone()]);
        }
        (BodyRef::Map(entries), _) => {
            put::described(out, 0x77);
            let mut map = Compound::map(out);
            for (k, v) in entries.clone() {
                map.put(out, |o| put::string(o, k));
                map.put(out, |o| put_value(o, v));
            }
            map.close(out);
        }
    }
}
