//! A message's format (part 3.2): a run of sections, each a described
//! value, in this order: header, delivery annotations, message
//! annotations, properties, application properties, the body (one or more
//! `data`, one or more `amqp-sequence`, or one `amqp-value`) and a footer.
//! Every section may be left out.

use bytes::{BufMut, Bytes};

use super::fields::{composite, opt, RawFields};
use super::types::{Raw, Value};
use super::AmqpError;

const HEADER: (u64, &str) = (0x70, "amqp:header:list");
const DELIVERY_ANNOTATIONS: (u64, &str) = (0x71, "amqp:delivery-annotations:map");
const MESSAGE_ANNOTATIONS: (u64, &str) = (0x72, "amqp:message-annotations:map");
const PROPERTIES: (u64, &str) = (0x73, "amqp:properties:list");
const APPLICATION_PROPERTIES: (u64, &str) = (0x74, "amqp:application-properties:map");
const DATA: (u64, &str) = (0x75, "amqp:data:binary");
const SEQUENCE: (u64, &str) = (0x76, "amqp:amqp-sequence:list");
const SEQUENCE_CODE: u64 = SEQUENCE.0;
const DATA_CODE: u64 = DATA.0;
const AMQP_VALUE: (u64, &str) = (0x77, "amqp:value:*");
const FOOTER: (u64, &str) = (0x78, "amqp:footer:map");

const SECTIONS: [(u64, &str); 9] = [
    HEADER,
    DELIVERY_ANNOTATIONS,
    MESSAGE_ANNOTATIONS,
    PROPERTIES,
    APPLICATION_PROPERTIES,
    DATA,
    SEQUENCE,
    AMQP_VALUE,
    FOOTER,
];

/// The default priority (`header.priority`).
pub const DEFAULT_PRIORITY: u8 = 4;

/// `header`: how the message is to be delivered.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Header {
    /// Kept across a restart: a persistent message.
    pub durable: bool,
    /// 0 (lowest) to 255; 4 by default.
    pub priority: u8,
    /// Milliseconds it lives.
    pub ttl: Option<u32>,
    /// No one has taken it before.
    pub first_acquirer: bool,
    /// Failed deliveries before this one.
    pub delivery_count: u32,
}

impl Default for Header {
    fn default() -> Header {
        Header {
            durable: false,
            priority: DEFAULT_PRIORITY,
            ttl: None,
            first_acquirer: false,
            delivery_count: 0,
        }
    }
}

/// `properties`: the standard properties.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Properties {
    /// A ulong, uuid, binary or string.
    pub message_id: Option<Value>,
    /// Who sent it, as the sender says.
    pub user_id: Option<Bytes>,
    /// Where it goes (the anonymous relay reads it).
    pub to: Option<String>,
    /// What it is about (MQTT's and NATS's subject, JMSType for Qpid JMS).
    pub subject: Option<String>,
    /// Where answers go.
    pub reply_to: Option<String>,
    /// A ulong, uuid, binary or string.
    pub correlation_id: Option<Value>,
    /// A MIME type.
    pub content_type: Option<String>,
    /// How the content is encoded (`gzip`...).
    pub content_encoding: Option<String>,
    /// When it expires, in ms since the epoch.
    pub absolute_expiry_time: Option<i64>,
    /// When it was made, in ms since the epoch.
    pub creation_time: Option<i64>,
    /// Its group (JMSXGroupID).
    pub group_id: Option<String>,
    /// Its place in the group (JMSXGroupSeq).
    pub group_sequence: Option<u32>,
    /// Where answers for the group go.
    pub reply_to_group_id: Option<String>,
}

/// The body.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Body {
    /// None at all.
    #[default]
    Empty,
    /// `data` sections: opaque bytes (one, almost always).
    Data(Vec<Bytes>),
    /// `amqp-sequence` sections: lists of values.
    Sequence(Vec<Vec<Value>>),
    /// One `amqp-value`: any value (a string, a map...).
    Value(Value),
}

/// A message, its sections decoded.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Message {
    /// Its header, if it has one.
    pub header: Option<Header>,
    /// For the next hop only.
    pub delivery_annotations: Vec<(Value, Value)>,
    /// For the infrastructure (`x-opt-jms-msg-type`, ...).
    pub message_annotations: Vec<(Value, Value)>,
    /// Its standard properties, if it has them.
    pub properties: Option<Properties>,
    /// The application's properties: names and simple values.
    pub application_properties: Vec<(String, Value)>,
    /// The body.
    pub body: Body,
    /// After the body (checksums, signatures).
    pub footer: Vec<(Value, Value)>,
}

/// Checks application properties: names that are strings, values that
/// are simple (no maps, lists, arrays or described values).
fn check_application_properties(map: Raw<'_>) -> Result<(), AmqpError> {
    let mut items = map_items(map, "application-properties")?;
    while let (Some(k), Some(v)) = (items.next(), items.next()) {
        match (k, v) {
            (_, v @ Raw::Encoded(_)) => {
                return Err(AmqpError::Invalid(format!(
                    "an application property's value is {:?}, not a simple value",
                    v.to_value()
                )))
            }
            (Raw::String(_), _) => {}
            (k, _) => {
                return Err(AmqpError::Invalid(format!(
                    "an application property's name is {:?}, not a string",
                    k.to_value()
                )))
            }
        }
    }
    Ok(())
}

/// Checks that a map section holds a map (or null).
fn check_map(raw: Raw<'_>, section: &str) -> Result<(), AmqpError> {
    map_items(raw, section).map(drop)
}

/// The keys and values of a map section, one after the other (none for
/// a null).
fn map_items<'a>(raw: Raw<'a>, section: &str) -> Result<impl Iterator<Item = Raw<'a>>, AmqpError> {
    match raw {
        Raw::Null => Ok(None.into_iter().flatten()),
        raw if raw.is_map() => Ok(raw.items().into_iter().flatten()),
        v => Err(AmqpError::Invalid(format!(
            "{section} is {:?}, not a map",
            v.to_value()
        ))),
    }
}

impl Header {
    fn from_fields(f: &RawFields<'_>) -> Result<Header, AmqpError> {
        Ok(Header {
            durable: f.bool(0, "durable")?.unwrap_or(false),
            priority: f.ubyte(1, "priority")?.unwrap_or(DEFAULT_PRIORITY),
            ttl: f.uint(2, "ttl")?,
            first_acquirer: f.bool(3, "first-acquirer")?.unwrap_or(false),
            delivery_count: f.uint(4, "delivery-count")?.unwrap_or(0),
        })
    }

    fn to_value(self) -> Value {
        composite(
            HEADER.0,
            vec![
                opt(Some(true).filter(|_| self.durable), Value::Bool),
                opt(
                    Some(self.priority).filter(|p| *p != DEFAULT_PRIORITY),
                    Value::Ubyte,
                ),
                opt(self.ttl, Value::Uint),
                opt(Some(true).filter(|_| self.first_acquirer), Value::Bool),
                opt(Some(self.delivery_count).filter(|n| *n != 0), Value::Uint),
            ],
        )
    }
}

impl Properties {
    fn to_value(&self) -> Value {
        let s = |v: &Option<String>| opt(v.clone(), Value::String);
        composite(
            PROPERTIES.0,
            vec![
                self.message_id.clone().unwrap_or(Value::Null),
                opt(self.user_id.clone(), Value::Binary),
                s(&self.to),
                s(&self.subject),
                s(&self.reply_to),
                self.correlation_id.clone().unwrap_or(Value::Null),
                opt(self.content_type.clone(), Value::Symbol),
                opt(self.content_encoding.clone(), Value::Symbol),
                opt(self.absolute_expiry_time, Value::Timestamp),
                opt(self.creation_time, Value::Timestamp),
                s(&self.group_id),
                opt(self.group_sequence, Value::Uint),
                s(&self.reply_to_group_id),
            ],
        )
    }
}

/// A message id or correlation id read in place: a ulong, uuid, binary
/// or string (or null).
fn raw_id<'a>(v: Raw<'a>, field: &str) -> Result<Raw<'a>, AmqpError> {
    match v {
        Raw::Null | Raw::Ulong(_) | Raw::Uuid(_) | Raw::Binary(_) | Raw::String(_) => Ok(v),
        v => Err(AmqpError::Invalid(format!(
            "properties.{field} is {:?}, not a ulong, uuid, binary or string",
            v.to_value()
        ))),
    }
}

/// `properties` read in place.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PropertiesRef<'a> {
    /// A ulong, uuid, binary or string; null if none.
    pub message_id: Raw<'a>,
    /// Who sent it, as the sender says.
    pub user_id: Option<&'a [u8]>,
    /// Where it goes.
    pub to: Option<&'a str>,
    /// What it is about.
    pub subject: Option<&'a str>,
    /// Where answers go.
    pub reply_to: Option<&'a str>,
    /// A ulong, uuid, binary or string; null if none.
    pub correlation_id: Raw<'a>,
    /// A MIME type.
    pub content_type: Option<&'a str>,
    /// How the content is encoded.
    pub content_encoding: Option<&'a str>,
    /// When it expires (ms since the epoch).
    pub absolute_expiry_time: Option<i64>,
    /// When it was made (ms since the epoch).
    pub creation_time: Option<i64>,
    /// Its group.
    pub group_id: Option<&'a str>,
    /// Its place in the group.
    pub group_sequence: Option<u32>,
    /// Where answers for the group go.
    pub reply_to_group_id: Option<&'a str>,
}

impl<'a> PropertiesRef<'a> {
    fn read(f: &RawFields<'a>) -> Result<PropertiesRef<'a>, AmqpError> {
        Ok(PropertiesRef {
            message_id: raw_id(f.value(0), "message-id")?,
            user_id: f.binary(1, "user-id")?,
            to: f.address(2, "to")?,
            subject: f.string(3, "subject")?,
            reply_to: f.address(4, "reply-to")?,
            correlation_id: raw_id(f.value(5), "correlation-id")?,
            content_type: f.symbol(6, "content-type")?,
            content_encoding: f.symbol(7, "content-encoding")?,
            absolute_expiry_time: f.timestamp(8, "absolute-expiry-time")?,
            creation_time: f.timestamp(9, "creation-time")?,
            group_id: f.string(10, "group-id")?,
            group_sequence: f.uint(11, "group-sequence")?,
            reply_to_group_id: f.string(12, "reply-to-group-id")?,
        })
    }

    /// The properties, owned.
    pub fn owned(self) -> Properties {
        let id = |v: Raw<'_>| Some(v.to_value()).filter(|v| *v != Value::Null);
        let text = |v: Option<&str>| v.map(str::to_owned);
        Properties {
            message_id: id(self.message_id),
            user_id: self.user_id.map(Bytes::copy_from_slice),
            to: text(self.to),
            subject: text(self.subject),
            reply_to: text(self.reply_to),
            correlation_id: id(self.correlation_id),
            content_type: text(self.content_type),
            content_encoding: text(self.content_encoding),
            absolute_expiry_time: self.absolute_expiry_time,
            creation_time: self.creation_time,
            group_id: text(self.group_id),
            group_sequence: self.group_sequence,
            reply_to_group_id: text(self.reply_to_group_id),
        }
    }
}

/// What a message's body is, read in place.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum BodyKind<'a> {
    /// No body section.
    #[default]
    Empty,
    /// One `data` section: these bytes.
    Data(&'a [u8]),
    /// An `amqp-value`.
    Value(Raw<'a>),
    /// Several `data` sections, or `amqp-sequence` ones.
    Other,
}

/// A message's sections read in place, checked as [`Message::decode`]
/// checks them, nothing allocated: how a broker reads the message that
/// comes with every transfer.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Sections<'a> {
    /// Its header, if it has one.
    pub header: Option<Header>,
    /// The delivery annotations: a map, or null.
    pub delivery_annotations: Raw<'a>,
    /// The message annotations: a map, or null.
    pub message_annotations: Raw<'a>,
    /// Its standard properties, if it has them.
    pub properties: Option<PropertiesRef<'a>>,
    /// The application properties: a map (of string names and simple
    /// values), or null.
    pub application_properties: Raw<'a>,
    /// The message annotations, properties and application properties
    /// sections, as they came: the part of the message after the header
    /// and delivery annotations and before the body, which a broker
    /// passes on unchanged.
    pub middle: &'a [u8],
    /// The message annotations section as it came, the start of
    /// `middle` (empty if there is none).
    pub annotations_section: &'a [u8],
    /// The body's sections, as they came.
    pub body: &'a [u8],
    /// What the body is.
    pub body_kind: BodyKind<'a>,
    /// The footer: a map, or null.
    pub footer: Raw<'a>,
}

/// A section's code, and what it describes.
fn section(raw: Raw<'_>) -> Option<(u64, Raw<'_>)> {
    let (descriptor, inner) = raw.described()?;
    let code = match descriptor {
        Raw::Ulong(c) => c,
        Raw::Symbol(name) => SECTIONS.iter().find(|(_, n)| *n == name)?.0,
        _ => return None,
    };
    SECTIONS
        .iter()
        .any(|s| s.0 == code)
        .then_some((code, inner))
}

/// Where a message's body begins, as far as the first of its transfers
/// show: for a large message, taken in as it comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyStart {
    /// The sections before the body, or the start of the body's, have not
    /// all come yet (or do not read: the whole message will say why).
    NotYet,
    /// The body is not one binary of a 4-byte length (a vbin32) in a
    /// `data` or `amqp-value` section, or there is none.
    Other,
    /// It is: the sections before it are the first `head` bytes, and its
    /// `len` bytes begin at `content`; in an `amqp-value` if `value`.
    Binary {
        /// Bytes of the sections before the body's.
        head: usize,
        /// Where the binary's bytes begin.
        content: usize,
        /// The binary's length.
        len: u64,
        /// Whether it is an `amqp-value`'s rather than a `data` section's.
        value: bool,
    },
}

/// Finds where the body of the message whose first bytes are `buf`
/// begins, reading only the sections before it.
pub fn body_start(buf: &[u8]) -> BodyStart {
    let mut pos = 0;
    while pos < buf.len() {
        // A section: a described value, 0x00 then the descriptor.
        if buf[pos] != 0 {
            return BodyStart::Other;
        }
        let Ok((descriptor, used)) = Raw::read(&buf[pos + 1..]) else {
            return BodyStart::NotYet;
        };
        let code = match descriptor {
            Raw::Ulong(c) => Some(c),
            Raw::Symbol(name) => SECTIONS.iter().find(|(_, n)| *n == name).map(|s| s.0),
            _ => None,
        };
        let Some(code) = code else {
            return BodyStart::Other;
        };
        if (DATA_CODE..=AMQP_VALUE.0).contains(&code) {
            let at = pos + 1 + used;
            let Some(constructor) = buf.get(at..at + 5) else {
                return BodyStart::NotYet;
            };
            if code == SEQUENCE_CODE || constructor[0] != 0xb0 {
                return BodyStart::Other;
            }
            let len = u32::from_be_bytes([
                constructor[1],
                constructor[2],
                constructor[3],
                constructor[4],
            ]);
            return BodyStart::Binary {
                head: pos,
                content: at + 5,
                len: len.into(),
                value: code == AMQP_VALUE.0,
            };
        }
        if code > AMQP_VALUE.0 {
            // A footer: no body.
            return BodyStart::Other;
        }
        let Ok((_, used)) = Raw::read(&buf[pos..]) else {
            return BodyStart::NotYet;
        };
        pos += used;
    }
    BodyStart::NotYet
}

impl<'a> Sections<'a> {
    /// Reads a whole message: the payload of its transfer frames.
    pub fn read(buf: &'a [u8]) -> Result<Sections<'a>, AmqpError> {
        let mut s = Sections::default();
        // The last section's code: each must come after the one before,
        // but for more `data` or `amqp-sequence` sections of one body.
        let mut last = 0;
        let mut body = None::<(usize, usize)>;
        let mut middle = None::<(usize, usize)>;
        let mut pos = 0;
        while pos < buf.len() {
            let (raw, used) = Raw::read(&buf[pos..])?;
            let Some((code, inner)) = section(raw) else {
                return Err(AmqpError::Invalid("not a message section".into()));
            };
            let is_body = |c: u64| (DATA.0..=AMQP_VALUE.0).contains(&c);
            let again = code == last && (code == DATA.0 || code == SEQUENCE.0);
            if !(code > last || again) || (is_body(code) && is_body(last) && code != last) {
                return Err(AmqpError::Invalid(format!(
                    "section 0x{code:x} out of order (after 0x{last:x})"
                )));
            }
            last = code;
            match code {
                0x70 => s.header = Some(Header::from_fields(&RawFields::list(inner, "header")?)?),
                0x71 => {
                    check_map(inner, "delivery-annotations")?;
                    s.delivery_annotations = inner;
                }
                0x72 => {
                    check_map(inner, "message-annotations")?;
                    s.message_annotations = inner;
                    s.annotations_section = &buf[pos..pos + used];
                }
                0x73 => {
                    let f = RawFields::list(inner, "properties")?;
                    s.properties = Some(PropertiesRef::read(&f)?);
                }
                0x74 => {
                    check_application_properties(inner)?;
                    s.application_properties = inner;
                }
                0x75 => match inner {
                    Raw::Binary(b) if s.body_kind == BodyKind::Empty => {
                        s.body_kind = BodyKind::Data(b)
                    }
                    Raw::Binary(_) => s.body_kind = BodyKind::Other,
                    v => {
                        return Err(AmqpError::Invalid(format!(
                            "a data section holds {:?}, not binary",
                            v.to_value()
                        )))
                    }
                },
                0x76 => match inner.items() {
                    Some(_) if !inner.is_map() => s.body_kind = BodyKind::Other,
                    _ => {
                        return Err(AmqpError::Invalid(format!(
                            "an amqp-sequence section holds {:?}, not a list",
                            inner.to_value()
                        )))
                    }
                },
                0x77 => s.body_kind = BodyKind::Value(inner),
                _ => {
                    check_map(inner, "footer")?;
                    s.footer = inner;
                }
            }
            if is_body(code) {
                body = Some((body.map_or(pos, |(start, _)| start), pos + used));
            }
            if (MESSAGE_ANNOTATIONS.0..=APPLICATION_PROPERTIES.0).contains(&code) {
                middle = Some((middle.map_or(pos, |(start, _)| start), pos + used));
            }
            pos += used;
        }
        if let Some((start, end)) = body {
            s.body = &buf[start..end];
        }
        if let Some((start, end)) = middle {
            s.middle = &buf[start..end];
        }
        Ok(s)
    }

    /// A message annotation by its symbol.
    pub fn annotation(&self, name: &str) -> Option<Raw<'a>> {
        let mut items = map_items(self.message_annotations, "").ok()?;
        while let (Some(k), Some(v)) = (items.next(), items.next()) {
            if k == Raw::Symbol(name) {
                return Some(v);
            }
        }
        None
    }

    /// The application properties: names and simple values.
    pub fn application_properties(&self) -> impl Iterator<Item = (&'a str, Raw<'a>)> {
        let mut items = map_items(self.application_properties, "")
            .into_iter()
            .flatten();
        std::iter::from_fn(move || match (items.next()?, items.next()?) {
            (Raw::String(k), v) => Some((k, v)),
            _ => None,
        })
    }
}

/// A map section, owned.
fn owned_map(raw: Raw<'_>) -> Vec<(Value, Value)> {
    match raw.to_value() {
        Value::Map(pairs) => pairs,
        _ => Vec::new(),
    }
}

impl Message {
    /// Decodes a whole message: the payload of its transfer frames.
    pub fn decode(buf: &[u8]) -> Result<Message, AmqpError> {
        let s = Sections::read(buf)?;
        let mut body = Body::Empty;
        let mut rest = s.body;
        while !rest.is_empty() {
            let (raw, used) = Raw::read(rest)?;
            rest = &rest[used..];
            match (section(raw), &mut body) {
                (Some((DATA_CODE, Raw::Binary(b))), Body::Data(parts)) => {
                    parts.push(Bytes::copy_from_slice(b))
                }
                (Some((DATA_CODE, Raw::Binary(b))), body) => {
                    *body = Body::Data(vec![Bytes::copy_from_slice(b)])
                }
                (Some((SEQUENCE_CODE, list)), body) => {
                    let Value::List(l) = list.to_value() else {
                        continue;
                    };
                    match body {
                        Body::Sequence(parts) => parts.push(l),
                        body => *body = Body::Sequence(vec![l]),
                    }
                }
                (Some((_, value)), body) => *body = Body::Value(value.to_value()),
                (None, _) => {}
            }
        }
        Ok(Message {
            header: s.header,
            delivery_annotations: owned_map(s.delivery_annotations),
            message_annotations: owned_map(s.message_annotations),
            properties: s.properties.map(PropertiesRef::owned),
            application_properties: s
                .application_properties()
                .map(|(k, v)| (k.to_owned(), v.to_value()))
                .collect(),
            body,
            footer: owned_map(s.footer),
        })
    }

    /// Appends its sections.
    pub fn encode(&self, out: &mut impl BufMut) {
        let section =
            |code: u64, v: Value| Value::Described(Box::new(Value::Ulong(code)), Box::new(v));
        let map_section = |out: &mut dyn FnMut(Value), code: u64, pairs: &[(Value, Value)]| {
            if !pairs.is_empty() {
                out(section(code, Value::Map(pairs.to_vec())));
            }
        };
        let mut put = |v: Value| v.encode(&mut *out);
        if let Some(h) = &self.header {
            put(h.to_value());
        }
        map_section(&mut put, DELIVERY_ANNOTATIONS.0, &self.delivery_annotations);
        map_section(&mut put, MESSAGE_ANNOTATIONS.0, &self.message_annotations);
        if let Some(p) = &self.properties {
            put(p.to_value());
        }
        let application: Vec<(Value, Value)> = self
            .application_properties
            .iter()
            .map(|(k, v)| (Value::String(k.clone()), v.clone()))
            .collect();
        map_section(&mut put, APPLICATION_PROPERTIES.0, &application);
        match &self.body {
            Body::Empty => {}
            Body::Data(parts) => parts
                .iter()
                .for_each(|b| put(section(DATA.0, Value::Binary(b.clone())))),
            Body::Sequence(parts) => parts
                .iter()
                .for_each(|l| put(section(SEQUENCE.0, Value::List(l.clone())))),
            Body::Value(v) => put(section(AMQP_VALUE.0, v.clone())),
        }
        map_section(&mut put, FOOTER.0, &self.footer);
    }

    /// A message annotation by its symbol.
    pub fn annotation(&self, name: &str) -> Option<&Value> {
        self.message_annotations
            .iter()
            .find(|(k, _)| matches!(k, Value::Symbol(s) if s == name))
            .map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(m: &Message) {
        let mut wire = Vec::new();
        m.encode(&mut wire);
        assert_eq!(&Message::decode(&wire).unwrap(), m);
    }

    fn full() -> Message {
        Message {
            header: Some(Header {
                durable: true,
                priority: 7,
                ttl: Some(60_000),
                first_acquirer: true,
                delivery_count: 2,
            }),
            delivery_annotations: vec![(Value::Symbol("x-hop".into()), Value::Int(1))],
            message_annotations: vec![(Value::Symbol("x-opt-jms-msg-type".into()), Value::Byte(5))],
            properties: Some(Properties {
                message_id: Some(Value::String("ID:1".into())),
                user_id: Some(Bytes::from_static(b"ann")),
                to: Some("queue://orders".into()),
                subject: Some("order".into()),
                reply_to: Some("temp-queue://x".into()),
                correlation_id: Some(Value::Ulong(9)),
                content_type: Some("text/plain".into()),
                content_encoding: Some("identity".into()),
                absolute_expiry_time: Some(1_800_000_000_000),
                creation_time: Some(1_700_000_000_000),
                group_id: Some("g".into()),
                group_sequence: Some(3),
                reply_to_group_id: Some("rg".into()),
            }),
            application_properties: vec![
                ("color".into(), Value::String("red".into())),
                ("units".into(), Value::Long(3)),
                ("ok".into(), Value::Bool(true)),
            ],
            body: Body::Value(Value::String("hello".into())),
            footer: vec![(Value::Symbol("x-crc".into()), Value::Uint(7))],
        }
    }

    #[test]
    fn a_body_start_is_found_from_the_first_bytes_of_a_message() {
        let big = Bytes::from(vec![7u8; 1000]);
        for (body, value) in [
            (Body::Data(vec![big.clone()]), false),
            (Body::Value(Value::Binary(big.clone())), true),
        ] {
            let mut wire = Vec::new();
            Message { body, ..full() }.encode(&mut wire);
            let start = body_start(&wire);
            let BodyStart::Binary {
                head,
                content,
                len,
                value: v,
            } = start
            else {
                panic!("{start:?}");
            };
            assert_eq!((len, v), (1000, value));
            assert_eq!(&wire[content..content + 1000], &big[..]);
            assert_eq!(wire[head], 0);
            // Every prefix that stops short of the length says not yet.
            for cut in 0..content {
                assert_eq!(body_start(&wire[..cut]), BodyStart::NotYet, "{cut}");
            }
            assert_eq!(body_start(&wire[..content]), start);
        }
        // Small binaries, text, sequences, several data sections' first
        // one small, and no body are not taken in pieces.
        for body in [
            Body::Data(vec![Bytes::from_static(b"abc")]),
            Body::Value(Value::String("x".repeat(1000))),
            Body::Sequence(vec![vec![Value::Int(1)]]),
            Body::Data(vec![Bytes::from_static(b"a"), big.clone()]),
        ] {
            let mut wire = Vec::new();
            Message { body, ..full() }.encode(&mut wire);
            assert_eq!(body_start(&wire), BodyStart::Other);
        }
        let mut wire = Vec::new();
        Message {
            body: Body::Empty,
            ..full()
        }
        .encode(&mut wire);
        assert_eq!(body_start(&wire), BodyStart::Other, "a footer and no body");
        assert_eq!(body_start(b"\x45garbage"), BodyStart::Other);
    }

    #[test]
    fn messages_round_trip_with_every_body() {
        round_trip(&full());
        round_trip(&Message::default());
        for body in [
            Body::Data(vec![Bytes::from_static(b"a"), Bytes::from_static(b"bc")]),
            Body::Sequence(vec![vec![Value::Int(1)], vec![Value::Null]]),
            Body::Value(Value::Map(vec![(Value::String("k".into()), Value::Int(1))])),
            Body::Value(Value::Binary(Bytes::from_static(b"\x01\x02"))),
            Body::Empty,
        ] {
            round_trip(&Message {
                body,
                ..Message::default()
            });
        }
        // Defaults left out.
        let mut wire = Vec::new();
        Message {
            header: Some(Header::default()),
            ..Message::default()
        }
        .encode(&mut wire);
        assert_eq!(wire, [0x00, 0x53, 0x70, 0x45]);
        assert_eq!(
            full().annotation("x-opt-jms-msg-type"),
            Some(&Value::Byte(5))
        );
    }

    fn section(code: u64, v: Value) -> Vec<u8> {
        let mut b = Vec::new();
        Value::Described(Box::new(Value::Ulong(code)), Box::new(v)).encode(&mut b);
        b
    }

    #[test]
    fn bad_messages_are_refused_with_a_reason() {
        let data = section(0x75, Value::Binary(Bytes::from_static(b"x")));
        let value = section(0x77, Value::Null);
        let header = section(0x70, Value::List(vec![]));
        let cases: Vec<Vec<u8>> = vec![
            // Out of order, twice, mixed bodies.
            [data.clone(), header.clone()].concat(),
            [header.clone(), header.clone()].concat(),
            [data.clone(), value.clone()].concat(),
            [value.clone(), value.clone()].concat(),
            // Not sections.
            section(0x99, Value::Null),
            vec![0x40],
            section(0x75, Value::String("text".into())),
            section(0x76, Value::Int(1)),
            section(0x72, Value::Int(1)),
            section(0x74, Value::Map(vec![(Value::Int(1), Value::Int(1))])),
            section(
                0x74,
                Value::Map(vec![(Value::String("k".into()), Value::List(vec![]))]),
            ),
            section(0x73, Value::List(vec![Value::Int(1)])),
            section(
                0x73,
                Value::List(vec![Value::Null, Value::Null, Value::Int(1)]),
            ),
            section(0x70, Value::List(vec![Value::Int(1)])),
            // Truncated.
            data[..data.len() - 1].to_vec(),
        ];
        for bytes in cases {
            assert!(Message::decode(&bytes).is_err(), "{bytes:02x?}");
        }
        // Two data sections are one body.
        let two = Message::decode(&[data.clone(), data].concat()).unwrap();
        assert_eq!(
            two.body,
            Body::Data(vec![Bytes::from_static(b"x"), Bytes::from_static(b"x")])
        );
    }
}
