//! AMQP 1.0 messages ↔ Herald messages: the one place that knows which
//! AMQP field is which JMS header, as Qpid JMS maps them (JMSType is the
//! subject, JMSXGroupID the group id, the JMS annotations say a
//! destination's kind and the body's type).

use bytes::{BufMut, Bytes, BytesMut};
use herald_protocol::amqp::message::{
    Body as AmqpBody, BodyKind, Message as AmqpMessage, Sections,
};
use herald_protocol::amqp::put::{self, Compound};
use herald_protocol::amqp::types::Raw;
use herald_protocol::message::{BodyRef, MessageRef, CONTENT_TYPE_PROPERTY};
use herald_protocol::value::ValueRef;

use crate::frontend::chunks::Chunks;
use crate::frontend::correlation::{hex, set_correlation_data, unhex, CORRELATION_HEX_PROPERTY};
use herald_protocol::{
    Body, DeliveryMode, Destination, DestinationKind, Message, MessageId, MessageView, Origin,
    Stamp, Streamed, Value,
};

/// Qpid JMS's annotation of a destination's kind (`x-opt-jms-dest`, and
/// `x-opt-jms-reply-to` for the reply-to, as its `AmqpDestinationHelper`
/// names them): a byte, 0 queue, 1 topic, 2 a temporary queue, 3 a
/// temporary topic.
pub const JMS_DEST: &str = "x-opt-jms-dest";
/// See [`JMS_DEST`].
pub const JMS_REPLY_TO: &str = "x-opt-jms-reply-to";
/// The string annotations older JMS clients wrote instead
/// (`"queue"`, `"topic"`, `"temporary"`, comma-separated), still read.
const LEGACY_DEST: &str = "x-opt-to-type";
/// See [`LEGACY_DEST`].
const LEGACY_REPLY_TO: &str = "x-opt-reply-type";
/// When the message is to be delivered (ms since the epoch).
pub const DELIVERY_TIME: &str = "x-opt-delivery-time";
/// How long after it was sent it is to be delivered (ms).
pub const DELIVERY_DELAY: &str = "x-opt-delivery-delay";
/// The property that marks a bytes body as the AMQP encoding of a body
/// Herald has no type for (an `amqp-sequence`, an `amqp-value` other than
/// text, bytes or a map of JMS values), which AMQP consumers get as it
/// was sent and others as those bytes.
pub const AMQP_BODY_PROPERTY: &str = "HeraldAmqpBody";

/// What the broker adds to a message, kept in Herald properties, and the
/// message annotations that carry them to an AMQP consumer of a message
/// an AMQP client sent (whose application properties are the sender's).
/// A group's first message for a consumer is not marked so: the marker
/// is per delivery, and an AMQP receiver gets a message it may compare
/// with what was sent (Qpid JMS does not read the marker either).
const BROKER_ANNOTATIONS: [(&str, &str); 3] = [
    (
        "HeraldOriginalDestination",
        "x-opt-herald-original-destination",
    ),
    ("HeraldDeadLetterReason", "x-opt-herald-dead-letter-reason"),
    ("HeraldDivertedFrom", "x-opt-herald-diverted-from"),
];

/// How the origin of a message an AMQP client sent ([`Origin::AMQP`])
/// holds its body: the origin's first byte. Its layout is
/// `u8 kept body | u32 annotations length | u32 middle length | middle |
/// body sections` (the body only if [`KeptBody::AsSent`]), the middle
/// being the message annotations, properties and application properties
/// as they came, the message annotations first: read by the lengths at
/// each delivery, checked whole where a client may have written it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum KeptBody {
    /// The body's sections follow, as they came (none if none came).
    AsSent = 0,
    /// One `data` section of the Herald body's bytes.
    Data = 1,
    /// An `amqp-value` of the Herald body: binary, a string or null.
    Value = 2,
    /// The Herald body's bytes are the body's sections.
    InBody = 3,
}

impl KeptBody {
    fn from_u8(code: u8) -> Option<KeptBody> {
        [
            KeptBody::AsSent,
            KeptBody::Data,
            KeptBody::Value,
            KeptBody::InBody,
        ]
        .into_iter()
        .find(|k| *k as u8 == code)
    }
}

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

/// The kind a JMS annotation gives: 0 or 2 a queue, 1 or 3 a topic; or,
/// in the legacy string form, `queue` or `topic` among its attributes.
fn annotated_kind(v: Option<Raw<'_>>) -> Option<DestinationKind> {
    let n = match v? {
        Raw::Byte(n) => i64::from(n),
        Raw::Ubyte(n) => i64::from(n),
        Raw::Int(n) => i64::from(n),
        Raw::Long(n) => n,
        Raw::String(s) | Raw::Symbol(s) => {
            let has = |a: &str| s.split(',').any(|x| x.trim() == a);
            return match (has("queue"), has("topic")) {
                (true, _) => Some(DestinationKind::Queue),
                (_, true) => Some(DestinationKind::Topic),
                _ => None,
            };
        }
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

/// A map body with string keys (not empty) and simple values, as a JMS
/// MapMessage; `None` if it is not one.
fn map_body(map: Raw<'_>) -> Option<Vec<(String, Value)>> {
    if !map.is_map() {
        return None;
    }
    let mut items = map.items()?;
    let mut entries = Vec::new();
    while let (Some(k), Some(v)) = (items.next(), items.next()) {
        match (k, v) {
            (_, Raw::Encoded(_) | Raw::Binary(_) | Raw::Null) => return None,
            (Raw::String(k), v) if !k.is_empty() => entries.push((k.to_owned(), property(v)?)),
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
/// its block cut from `chunks`. The block keeps, as its origin, what the
/// mapped fields do not say exactly (the bare message, less a body the
/// Herald body holds as it came), for AMQP consumers.
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
            let kind = m.annotation(JMS_DEST).or(m.annotation(LEGACY_DEST));
            addressed = annotated(address, kind)?;
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
    match props.correlation_id {
        Raw::Binary(data) => set_correlation_data(&mut h, data),
        id => h.set_correlation_id(id_text(id)),
    }
    if let Some(reply) = props.reply_to {
        let kind = m.annotation(JMS_REPLY_TO).or(m.annotation(LEGACY_REPLY_TO));
        h.set_reply_to(Some(annotated(reply, kind)?));
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
    let in_body = |h: &mut Message| {
        h.set_property(AMQP_BODY_PROPERTY, true);
        (
            Body::Bytes(Bytes::copy_from_slice(m.body)),
            KeptBody::InBody,
        )
    };
    let copy = |bytes: &[u8]| Body::Bytes(Bytes::copy_from_slice(bytes));
    let kept;
    (h.body, kept) = match m.body_kind {
        BodyKind::Empty => (Body::Empty, KeptBody::AsSent),
        BodyKind::Value(Raw::Null) => (Body::Empty, KeptBody::Value),
        BodyKind::Data(bytes) => (copy(bytes), KeptBody::Data),
        BodyKind::Value(Raw::Binary(bytes)) => (copy(bytes), KeptBody::Value),
        BodyKind::Value(Raw::String(s)) => (Body::Text(s.to_owned()), KeptBody::Value),
        BodyKind::Value(map) => match map_body(map) {
            Some(entries) => (Body::Map(entries), KeptBody::AsSent),
            None => in_body(&mut h),
        },
        BodyKind::Other => match AmqpMessage::decode(m.body) {
            Ok(AmqpMessage {
                body: AmqpBody::Data(parts),
                ..
            }) => (Body::Bytes(parts.concat().into()), KeptBody::AsSent),
            _ => in_body(&mut h),
        },
    };
    let as_sent = match kept {
        KeptBody::AsSent => m.body,
        _ => &[],
    };
    let origin = chunks.room(ORIGIN_HEAD + m.middle.len() + as_sent.len());
    origin.put_u8(kept as u8);
    // Within a frame of at most 4 GiB.
    origin.put_u32(m.annotations_section.len() as u32);
    origin.put_u32(m.middle.len() as u32);
    origin.extend_from_slice(m.middle);
    origin.extend_from_slice(as_sent);
    h.set_origin(Some(Origin {
        protocol: Origin::AMQP,
        bytes: chunks.cut(),
    }));
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
    // Room for the headers and the origin as well as the body.
    let block = chunks.room(2 * (m.body.len() + m.middle.len() + target.name.len()) + 256);
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
    /// Correlation data that is not text, in hex.
    correlation_hex: Option<&'a str>,
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
            (CORRELATION_HEX_PROPERTY, ValueRef::String(h)) => self.correlation_hex = Some(h),
            // An AMQP body kept in bytes: what it is says so.
            (AMQP_BODY_PROPERTY, _) => {}
            _ => return false,
        }
        true
    }
}

/// The sections after the header of a Herald message to an AMQP
/// receiver (the same for every delivery of it), written straight from
/// the message block: as an AMQP client sent them if one did, else
/// mapped from Herald's fields.
pub fn sections_to(m: &MessageRef<'_>, block: &Bytes, out: &mut BytesMut) {
    if let Some((Origin::AMQP, origin)) = m.origin {
        let at = out.len();
        if as_sent(m, origin, block, out) {
            return;
        }
        out.truncate(at);
        // Checked where a client could write it: only damaged stored
        // data gets here.
        log::debug!(
            "message {}: its AMQP sections do not read, so they are mapped from its fields",
            m.message_id
        );
    }
    mapped(m, block, out);
}

/// The bytes before an AMQP origin's sections: the kept body's code and
/// two lengths.
const ORIGIN_HEAD: usize = 9;

/// An AMQP origin, split by its lengths (bounds checked, nothing else).
struct Kept<'a> {
    body: KeptBody,
    /// The message annotations section, if the sender wrote one.
    annotations: &'a [u8],
    /// The properties and application properties sections.
    after_annotations: &'a [u8],
    /// The body's sections, for [`KeptBody::AsSent`].
    body_sections: &'a [u8],
}

impl<'a> Kept<'a> {
    fn split(origin: &'a [u8]) -> Option<Kept<'a>> {
        let body = KeptBody::from_u8(*origin.first()?)?;
        let length = |at: usize| -> Option<usize> {
            let b: [u8; 4] = origin.get(at..at + 4)?.try_into().ok()?;
            Some(u32::from_be_bytes(b) as usize)
        };
        let (annotations, middle) = (length(1)?, length(5)?);
        let rest = origin.get(ORIGIN_HEAD..)?;
        let (middle, body_sections) = (rest.get(..middle)?, rest.get(middle..)?);
        let (annotations, after_annotations) =
            (middle.get(..annotations)?, middle.get(annotations..)?);
        Some(Kept {
            body,
            annotations,
            after_annotations,
            body_sections,
        })
    }

    /// Whether the kept body fits the Herald body: checked at each
    /// delivery, since it costs nothing.
    fn fits(&self, m: &MessageRef<'_>) -> bool {
        let bytes = matches!(m.body, BodyRef::Bytes(_));
        // A large message's body is a data section's or a binary value's.
        let streamed = matches!(m.body, BodyRef::Stream(_));
        match self.body {
            KeptBody::AsSent => true,
            KeptBody::InBody => self.body_sections.is_empty() && bytes,
            KeptBody::Data => self.body_sections.is_empty() && (bytes || streamed),
            KeptBody::Value => self.body_sections.is_empty() && !matches!(m.body, BodyRef::Map(_)),
        }
    }

    /// Whether each part reads as the AMQP sections its place says: the
    /// message annotations alone, then properties and application
    /// properties, then body sections (in the Herald body for
    /// [`KeptBody::InBody`]).
    fn reads(&self, m: &MessageRef<'_>, block: &[u8]) -> bool {
        let read = |b: &[u8], ok: &dyn Fn(&Sections<'_>) -> bool| {
            b.is_empty() || Sections::read(b).is_ok_and(|s| ok(&s))
        };
        let body = match (&m.body, self.body) {
            (BodyRef::Bytes(range), KeptBody::InBody) => &block[range.clone()],
            _ => self.body_sections,
        };
        self.fits(m)
            && read(self.annotations, &|s| {
                s.annotations_section.len() == self.annotations.len()
            })
            && read(self.after_annotations, &|s| {
                s.annotations_section.is_empty() && s.middle.len() == self.after_annotations.len()
            })
            && read(body, &|s| s.body.len() == body.len())
            && (self.body != KeptBody::InBody || !body.is_empty())
    }
}

/// Whether the AMQP origin of `m`, which a client gave in a native SEND
/// (forwarding a message it received, or writing one), reads as the AMQP
/// front-end writes one: deliveries to AMQP receivers copy it unchecked.
pub fn origin_reads(m: &MessageRef<'_>, block: &[u8]) -> bool {
    match m.origin {
        Some((Origin::AMQP, origin)) => Kept::split(origin).is_some_and(|k| k.reads(m, block)),
        _ => true,
    }
}

/// The sections an AMQP client sent (the `origin` it left, and the
/// Herald body where that holds its body), and in message annotations
/// of the broker's own what the broker added since ([`BROKER_ANNOTATIONS`]);
/// `false` if the origin does not fit the message.
fn as_sent(m: &MessageRef<'_>, origin: &[u8], block: &Bytes, out: &mut BytesMut) -> bool {
    let Some(kept) = Kept::split(origin).filter(|k| k.fits(m)) else {
        return false;
    };
    let bytes = match &m.body {
        BodyRef::Bytes(range) => Some(&block[range.clone()]),
        _ => None,
    };
    let added: Vec<(&str, ValueRef<'_>)> = m
        .properties
        .clone()
        .filter_map(|(name, value)| {
            let (_, annotation) = BROKER_ANNOTATIONS.iter().find(|(p, _)| *p == name)?;
            Some((*annotation, value))
        })
        .collect();
    if added.is_empty() {
        out.extend_from_slice(kept.annotations);
    } else {
        // The sender's annotations with the broker's after them: a
        // dead letter's, a diverted copy's.
        let sender = Raw::read(kept.annotations)
            .ok()
            .and_then(|(section, _)| section.described())
            .map(|(_, map)| map);
        put::described(out, 0x72);
        let mut a = Compound::map(out);
        let mut items = sender.and_then(Raw::items).into_iter().flatten();
        while let (Some(k), Some(v)) = (items.next(), items.next()) {
            a.put(out, |o| k.to_value().encode(o));
            a.put(out, |o| v.to_value().encode(o));
        }
        for (name, value) in added {
            a.put(out, |o| put::symbol(o, name));
            a.put(out, |o| put_value(o, value));
        }
        a.close(out);
    }
    out.extend_from_slice(kept.after_annotations);
    match (kept.body, &m.body, bytes) {
        (KeptBody::AsSent, _, _) => out.extend_from_slice(kept.body_sections),
        (KeptBody::InBody, _, Some(sections)) => out.extend_from_slice(sections),
        (KeptBody::Data, _, Some(b)) => {
            put::described(out, 0x75);
            put::binary(out, b);
        }
        // Its bytes follow from the body's file, as a streamed body's do
        // for every AMQP receiver (see `mapped`).
        (kept, BodyRef::Stream(s), _) => {
            let section = match kept {
                KeptBody::Data => 0x75,
                _ => 0x77,
            };
            streamed_head(out, section, s);
        }
        (_, _, Some(b)) => {
            put::described(out, 0x77);
            put::binary(out, b);
        }
        (_, BodyRef::Text(t), _) => {
            put::described(out, 0x77);
            put::string(out, t);
        }
        _ => {
            put::described(out, 0x77);
            put::null(out);
        }
    }
    true
}

/// The start of a body `section` (data, or amqp-value) that holds a
/// binary of a large message's bytes, which follow it in the frames of
/// `AmqpSession::transfer_out`; up to 4 GiB (a larger body was read in or
/// left out before).
fn streamed_head(out: &mut BytesMut, section: u64, s: &Streamed) {
    put::described(out, section);
    out.put_u8(0xb0);
    out.put_u32(u32::try_from(s.len).unwrap_or(u32::MAX));
}

/// The sections of a message no AMQP client sent, mapped from its
/// fields: message annotations (the JMS ones), properties, application
/// properties and the body.
fn mapped(m: &MessageRef<'_>, block: &Bytes, out: &mut BytesMut) {
    let mut special = Special::default();
    for (name, value) in m.properties.clone() {
        if !special.take(name, value) {
            special.others += 1;
        }
    }
    let jms_type = match &m.body {
        BodyRef::Empty => 0,
        BodyRef::Stream(_) => 3,
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
        annotate(out, JMS_REPLY_TO, &|o| put::byte(o, reply));
    }
    if m.delivery_time > 0 {
        annotate(out, DELIVERY_TIME, &|o| put::timestamp(o, m.delivery_time));
    }
    annotate(out, JMS_MSG_TYPE, &|o| put::byte(o, jms_type));
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
    match (m.correlation_id, special.correlation_hex.and_then(unhex)) {
        (Some(c), _) => p.put(out, |o| put::string(o, c)),
        (None, Some(data)) => p.put(out, |o| put::binary(o, &data)),
        (None, None) => p.skip(out),
    }
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
    match &m.body {
        BodyRef::Empty => {
            put::described(out, 0x77);
            put::null(out);
        }
        BodyRef::Text(t) => {
            put::described(out, 0x77);
            put::string(out, t);
        }
        BodyRef::Bytes(range) => {
            put::described(out, 0x75);
            put::binary(out, &block[range.clone()]);
        }
        // A large message's: one data section.
        BodyRef::Stream(s) => streamed_head(out, 0x75, s),
        BodyRef::Map(entries) => {
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

#[cfg(test)]
mod tests {
    use super::*;
    use herald_protocol::amqp::message::{Header, Properties};
    use herald_protocol::amqp::types::Value as V;
    use herald_protocol::message::MessageRef;

    fn sym(s: &str) -> V {
        V::Symbol(s.into())
    }

    /// The message block an AMQP client's `amqp` makes, sent to `to`
    /// (else to its own `to`).
    fn taken(amqp: &AmqpMessage, to: Option<&Destination>) -> MessageView {
        let mut wire = Vec::new();
        amqp.encode(&mut wire);
        let sections = Sections::read(&wire).unwrap();
        message_from(&sections, to, ("ID:n-", 1), 1_000, &mut Chunks::default()).unwrap()
    }

    /// The sections after the header that an AMQP receiver of `block` is
    /// sent.
    fn given(block: &[u8]) -> Vec<u8> {
        let block = Bytes::copy_from_slice(block);
        let mut out = BytesMut::new();
        sections_to(&MessageRef::read(&block).unwrap(), &block, &mut out);
        out.to_vec()
    }

    /// The block of `m`, encoded.
    fn block_of(m: &Message) -> Bytes {
        let mut block = BytesMut::new();
        m.encode(&mut block).unwrap();
        block.freeze()
    }

    /// What a message sent as `amqp` gives its AMQP receivers after the
    /// header, and the Herald message others get.
    fn through(amqp: &AmqpMessage) -> (Vec<u8>, Message) {
        let view = taken(amqp, Some(&Destination::queue("q")));
        (
            given(view.block()),
            Message::decode(view.block(), 1).unwrap(),
        )
    }

    /// The message's bytes from its message annotations on.
    fn bare(amqp: &AmqpMessage) -> Vec<u8> {
        let mut wire = Vec::new();
        AmqpMessage {
            header: None,
            delivery_annotations: Vec::new(),
            footer: Vec::new(),
            ..amqp.clone()
        }
        .encode(&mut wire);
        wire
    }

    fn with_body(body: AmqpBody) -> AmqpMessage {
        AmqpMessage {
            body,
            ..AmqpMessage::default()
        }
    }

    #[test]
    fn an_amqp_message_reaches_amqp_receivers_byte_for_byte() {
        let uuid = *b"0123456789abcdef";
        let every_kind = vec![
            ("null", V::Null),
            ("bool", V::Bool(true)),
            ("ubyte", V::Ubyte(200)),
            ("ushort", V::Ushort(60_000)),
            ("uint", V::Uint(4_000_000_000)),
            ("ulong", V::Ulong(u64::MAX)),
            ("byte", V::Byte(-1)),
            ("short", V::Short(-2)),
            ("int", V::Int(-3)),
            ("long", V::Long(-4)),
            ("float", V::Float(1.5)),
            ("double", V::Double(-2.5)),
            ("decimal32", V::Decimal32([1, 2, 3, 4])),
            ("decimal64", V::Decimal64([1; 8])),
            ("decimal128", V::Decimal128([2; 16])),
            ("char", V::Char('é')),
            ("timestamp", V::Timestamp(1_700_000_000_000)),
            ("uuid", V::Uuid(uuid)),
            ("binary", V::Binary(Bytes::from_static(&[0, 0xff]))),
            ("string", V::String("s".into())),
            ("symbol", sym("y")),
        ];
        let full = AmqpMessage {
            header: Some(Header {
                durable: true,
                ..Header::default()
            }),
            delivery_annotations: vec![(sym("x-hop"), V::Int(1))],
            message_annotations: vec![
                (sym("x-opt-jms-msg-type"), V::Byte(2)),
                (sym("x-opt-app"), V::List(vec![V::Int(1)])),
            ],
            properties: Some(Properties {
                message_id: Some(V::Ulong(1)),
                reply_to: Some("t_aaa".into()),
                correlation_id: Some(V::Binary(Bytes::from_static(&[0, 0xff]))),
                ..Properties::default()
            }),
            application_properties: every_kind
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            body: AmqpBody::Value(V::Binary(Bytes::from_static(&[1, 2]))),
            footer: vec![(sym("x-crc"), V::Uint(7))],
        };
        let bodies = [
            AmqpBody::Empty,
            AmqpBody::Data(vec![Bytes::from_static(b"bytes")]),
            AmqpBody::Data(vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")]),
            AmqpBody::Sequence(vec![vec![V::Int(1)], vec![]]),
            AmqpBody::Value(V::Null),
            AmqpBody::Value(V::String("text".into())),
            AmqpBody::Value(V::Map(vec![(V::String("k".into()), V::Char('c'))])),
            AmqpBody::Value(V::Map(vec![(V::String(String::new()), V::Int(1))])),
            AmqpBody::Value(V::Map(vec![(V::Int(1), V::Binary(Bytes::new()))])),
            AmqpBody::Value(V::Map(Vec::new())),
            AmqpBody::Value(V::Array(Vec::new())),
            AmqpBody::Value(V::List(Vec::new())),
            AmqpBody::Value(V::Ulong(7)),
        ];
        for body in bodies
            .into_iter()
            .chain(every_kind.into_iter().map(|(_, v)| AmqpBody::Value(v)))
        {
            for m in [
                with_body(body.clone()),
                AmqpMessage {
                    body: body.clone(),
                    ..full.clone()
                },
            ] {
                let (out, _) = through(&m);
                assert_eq!(out, bare(&m), "{m:?}");
            }
        }
    }

    #[test]
    fn others_get_the_mapped_fields() {
        let m = AmqpMessage {
            properties: Some(Properties {
                message_id: Some(V::Ulong(1)),
                correlation_id: Some(V::Binary(Bytes::from_static(&[0, 0xff]))),
                reply_to: Some("t_aaa".into()),
                ..Properties::default()
            }),
            application_properties: vec![("u".into(), V::Ubyte(200))],
            ..with_body(AmqpBody::Value(V::Map(vec![(
                V::String("k".into()),
                V::Char('c'),
            )])))
        };
        let (_, h) = through(&m);
        assert_eq!(h.message_id(), "1");
        assert_eq!(h.correlation_id(), None);
        let hex = h
            .property(CORRELATION_HEX_PROPERTY)
            .and_then(|v| v.as_str());
        assert_eq!(hex, Some("00ff"));
        assert_eq!(h.reply_to(), Some(&Destination::queue("t_aaa")));
        assert_eq!(h.property("u"), Some(&Value::I16(200)));
        assert_eq!(
            h.body,
            Body::Map(vec![("k".into(), Value::String("c".into()))])
        );
        // A map that is no JMS map: its AMQP encoding, marked.
        let (_, h) = through(&with_body(AmqpBody::Value(V::Map(vec![(
            V::String(String::new()),
            V::Int(1),
        )]))));
        assert_eq!(h.property(AMQP_BODY_PROPERTY), Some(&Value::Bool(true)));
        assert!(matches!(h.body, Body::Bytes(_)));
    }

    #[test]
    fn what_the_broker_adds_goes_in_its_own_annotations() {
        let sent = AmqpMessage {
            message_annotations: vec![(sym("x-opt-jms-msg-type"), V::Byte(5))],
            properties: Some(Properties {
                message_id: Some(V::Ulong(1)),
                ..Properties::default()
            }),
            application_properties: vec![("k".into(), V::Int(1))],
            ..with_body(AmqpBody::Value(V::String("text".into())))
        };
        let view = taken(&sent, Some(&Destination::queue("q")));
        // Dead-lettered, as the broker's refile does.
        let mut dead = Message::decode(view.block(), 1).unwrap();
        dead.set_property("HeraldOriginalDestination", "queue://q");
        dead.set_property("HeraldDeadLetterReason", "rejected");
        dead.set_destination(Some(Destination::queue("DLQ.q")));
        let got = AmqpMessage::decode(&given(&block_of(&dead))).unwrap();
        assert_eq!(got.properties, sent.properties);
        assert_eq!(got.application_properties, sent.application_properties);
        assert_eq!(got.body, sent.body);
        assert_eq!(
            got.message_annotations,
            vec![
                (sym("x-opt-jms-msg-type"), V::Byte(5)),
                (
                    sym("x-opt-herald-original-destination"),
                    V::String("queue://q".into())
                ),
                (
                    sym("x-opt-herald-dead-letter-reason"),
                    V::String("rejected".into())
                ),
            ]
        );
    }

    #[test]
    fn destinations_are_named_and_typed_as_qpid_jms_writes_and_reads_them() {
        let sym_byte = |name: &str, kind: i8| (sym(name), V::Byte(kind));
        // What Qpid JMS sends, with the server's prefixes: the anonymous
        // relay's `to`, its kind, a reply-to of a bare name typed topic.
        let sent = AmqpMessage {
            message_annotations: vec![sym_byte(JMS_DEST, 1), sym_byte(JMS_REPLY_TO, 1)],
            properties: Some(Properties {
                to: Some("topic://prices".into()),
                reply_to: Some("answers".into()),
                ..Properties::default()
            }),
            ..with_body(AmqpBody::Value(V::String("x".into())))
        };
        let h = Message::decode(taken(&sent, None).block(), 1).unwrap();
        assert_eq!(h.destination(), Some(&Destination::topic("prices")));
        assert_eq!(h.reply_to(), Some(&Destination::topic("answers")));
        // The legacy string annotations of older clients.
        let legacy = AmqpMessage {
            message_annotations: vec![
                (sym(LEGACY_DEST), V::String("topic".into())),
                (sym(LEGACY_REPLY_TO), V::Symbol("temporary, topic".into())),
            ],
            properties: Some(Properties {
                to: Some("news".into()),
                reply_to: Some("back".into()),
                ..Properties::default()
            }),
            ..AmqpMessage::default()
        };
        let h = Message::decode(taken(&legacy, None).block(), 1).unwrap();
        assert_eq!(h.destination(), Some(&Destination::topic("news")));
        assert_eq!(h.reply_to(), Some(&Destination::topic("back")));
        // What a native message gives an AMQP receiver: prefixed names
        // and their kinds, under the names Qpid JMS reads.
        let mut native = Message::text("x").with_destination(Destination::queue("orders"));
        native.set_message_id("ID:1");
        native.set_reply_to(Some(Destination::topic("replies")));
        let got = AmqpMessage::decode(&given(&block_of(&native))).unwrap();
        let p = got.properties.clone().unwrap();
        assert_eq!(p.to.as_deref(), Some("queue://orders"));
        assert_eq!(p.reply_to.as_deref(), Some("topic://replies"));
        assert_eq!(got.annotation(JMS_DEST), Some(&V::Byte(0)));
        assert_eq!(got.annotation(JMS_REPLY_TO), Some(&V::Byte(1)));
        assert_eq!(got.annotation(JMS_MSG_TYPE), Some(&V::Byte(5)));
    }

    #[test]
    fn an_origin_a_client_writes_is_checked_whole() {
        let sent = AmqpMessage {
            message_annotations: vec![(sym("x-opt-a"), V::Int(1))],
            application_properties: vec![("k".into(), V::Int(1))],
            ..with_body(AmqpBody::Sequence(vec![vec![V::Int(1)]]))
        };
        let view = taken(&sent, Some(&Destination::queue("q")));
        let good = MessageRef::read(view.block()).unwrap();
        assert!(origin_reads(&good, view.block()));
        let text = Message::text("x").with_destination(Destination::queue("q"));
        let bytes = Message::bytes(&b"not sections"[..]).with_destination(Destination::queue("q"));
        let mut annotations_last = vec![KeptBody::AsSent as u8, 0, 0, 0, 3, 0, 0, 0, 3];
        annotations_last.extend([0x00, 0x53, 0x74, 0xc1, 0x01, 0x00]);
        for (m, origin) in [
            // Lengths past the end, a code of no kept body.
            (&text, vec![KeptBody::Value as u8, 0, 0, 0, 9, 0, 0, 0, 9]),
            (&text, vec![7, 0, 0, 0, 0, 0, 0, 0, 0]),
            // Not sections; a header where the middle goes.
            (
                &text,
                vec![KeptBody::Value as u8, 0, 0, 0, 0, 0, 0, 0, 1, 0x40],
            ),
            (
                &text,
                vec![
                    KeptBody::Value as u8,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    4,
                    0x00,
                    0x53,
                    0x70,
                    0x45,
                ],
            ),
            // Application properties said to be the annotations.
            (&text, annotations_last),
            // A data body kept for a text one; a body kept in bytes that
            // are no sections.
            (&text, vec![KeptBody::Data as u8, 0, 0, 0, 0, 0, 0, 0, 0]),
            (&bytes, vec![KeptBody::InBody as u8, 0, 0, 0, 0, 0, 0, 0, 0]),
        ] {
            let mut m = m.clone();
            m.set_origin(Some(Origin {
                protocol: Origin::AMQP,
                bytes: Bytes::from(origin.clone()),
            }));
            let block = block_of(&m);
            let r = MessageRef::read(&block).unwrap();
            assert!(!origin_reads(&r, &block), "{origin:02x?}");
        }
    }

    #[test]
    fn an_origin_that_does_not_read_is_mapped_instead() {
        let mut m = Message::text("hello").with_destination(Destination::queue("q"));
        m.set_message_id("ID:1");
        for bad in [
            &b""[..],
            b"\x09",
            b"\x00\x40",
            b"\x01",
            b"\x00\x00\x53\x77\xa1",
        ] {
            m.set_origin(Some(Origin {
                protocol: Origin::AMQP,
                bytes: Bytes::copy_from_slice(bad),
            }));
            let got = AmqpMessage::decode(&given(&block_of(&m))).unwrap();
            assert_eq!(
                got.body,
                AmqpBody::Value(V::String("hello".into())),
                "{bad:?}"
            );
            let id = got.properties.and_then(|p| p.message_id);
            assert_eq!(id, Some(V::String("ID:1".into())));
        }
    }
}
