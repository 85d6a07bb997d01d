//! A message's format (part 3.2): a run of sections, each a described
//! value, in this order: header, delivery annotations, message
//! annotations, properties, application properties, the body (one or more
//! `data`, one or more `amqp-sequence`, or one `amqp-value`) and a footer.
//! Every section may be left out.

use bytes::{BufMut, Bytes};

use super::fields::{composite, descriptor_code, opt, Fields};
use super::types::Value;
use super::AmqpError;

const HEADER: (u64, &str) = (0x70, "amqp:header:list");
const DELIVERY_ANNOTATIONS: (u64, &str) = (0x71, "amqp:delivery-annotations:map");
const MESSAGE_ANNOTATIONS: (u64, &str) = (0x72, "amqp:message-annotations:map");
const PROPERTIES: (u64, &str) = (0x73, "amqp:properties:list");
const APPLICATION_PROPERTIES: (u64, &str) = (0x74, "amqp:application-properties:map");
const DATA: (u64, &str) = (0x75, "amqp:data:binary");
const SEQUENCE: (u64, &str) = (0x76, "amqp:amqp-sequence:list");
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
#[derive(Debug, Clone, PartialEq)]
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

/// A message id or correlation id: a ulong, uuid, binary or string.
fn message_id(v: Value, field: &str) -> Result<Option<Value>, AmqpError> {
    match v {
        Value::Null => Ok(None),
        v @ (Value::Ulong(_) | Value::Uuid(_) | Value::Binary(_) | Value::String(_)) => Ok(Some(v)),
        v => Err(AmqpError::Invalid(format!(
            "properties.{field} is {v:?}, not a ulong, uuid, binary or string"
        ))),
    }
}

/// The map a map section holds.
fn map(v: Value, section: &str) -> Result<Vec<(Value, Value)>, AmqpError> {
    match v {
        Value::Map(pairs) => Ok(pairs),
        Value::Null => Ok(Vec::new()),
        v => Err(AmqpError::Invalid(format!("{section} is {v:?}, not a map"))),
    }
}

/// A string field that may come as a symbol (some clients send addresses
/// so).
fn address(f: &Fields, i: usize, field: &str) -> Result<Option<String>, AmqpError> {
    match f.value(i) {
        Value::Null => Ok(None),
        Value::String(s) | Value::Symbol(s) => Ok(Some(s)),
        v => Err(AmqpError::Invalid(format!(
            "properties.{field} is {v:?}, not a string"
        ))),
    }
}

/// A timestamp field.
fn timestamp(f: &Fields, i: usize, field: &str) -> Result<Option<i64>, AmqpError> {
    match f.value(i) {
        Value::Null => Ok(None),
        Value::Timestamp(t) => Ok(Some(t)),
        v => Err(AmqpError::Invalid(format!(
            "properties.{field} is {v:?}, not a timestamp"
        ))),
    }
}

/// Application properties: names that are strings, values that are
/// simple (no maps, lists, arrays or described values).
fn application_properties(v: Value) -> Result<Vec<(String, Value)>, AmqpError> {
    map(v, "application-properties")?
        .into_iter()
        .map(|(k, v)| match (k, v) {
            (_, v @ (Value::Map(_) | Value::List(_) | Value::Array(_) | Value::Described(..))) => {
                Err(AmqpError::Invalid(format!(
                    "an application property's value is {v:?}, not a simple value"
                )))
            }
            (Value::String(k), v) => Ok((k, v)),
            (k, _) => Err(AmqpError::Invalid(format!(
                "an application property's name is {k:?}, not a string"
            ))),
        })
        .collect()
}

impl Header {
    fn from_fields(f: &Fields) -> Result<Header, AmqpError> {
        Ok(Header {
            durable: f.bool(0, "durable")?.unwrap_or(false),
            priority: f.ubyte(1, "priority")?.unwrap_or(DEFAULT_PRIORITY),
            ttl: f.uint(2, "ttl")?,
            first_acquirer: f.bool(3, "first-acquirer")?.unwrap_or(false),
            delivery_count: f.uint(4, "delivery-count")?.unwrap_or(0),
        })
    }

    fn to_value(&self) -> Value {
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
    fn from_fields(f: &Fields) -> Result<Properties, AmqpError> {
        Ok(Properties {
            message_id: message_id(f.value(0), "message-id")?,
            user_id: f.binary(1, "user-id")?,
            to: address(f, 2, "to")?,
            subject: f.string(3, "subject")?,
            reply_to: address(f, 4, "reply-to")?,
            correlation_id: message_id(f.value(5), "correlation-id")?,
            content_type: f.symbol(6, "content-type")?,
            content_encoding: f.symbol(7, "content-encoding")?,
            absolute_expiry_time: timestamp(f, 8, "absolute-expiry-time")?,
            creation_time: timestamp(f, 9, "creation-time")?,
            group_id: f.string(10, "group-id")?,
            group_sequence: f.uint(11, "group-sequence")?,
            reply_to_group_id: f.string(12, "reply-to-group-id")?,
        })
    }

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

impl Message {
    /// Decodes a whole message: the payload of its transfer frames.
    pub fn decode(mut buf: &[u8]) -> Result<Message, AmqpError> {
        let mut m = Message::default();
        // The last section's code: each must come after the one before,
        // but for more `data` or `amqp-sequence` sections of one body.
        let mut last = 0;
        while !buf.is_empty() {
            let (section, used) = Value::decode(buf)?;
            buf = &buf[used..];
            let code =
                descriptor_code(&section, &SECTIONS).filter(|c| SECTIONS.iter().any(|s| s.0 == *c));
            let (Some(code), Value::Described(_, inner)) = (code, section) else {
                return Err(AmqpError::Invalid("not a message section".into()));
            };
            let body = |c: u64| (DATA.0..=AMQP_VALUE.0).contains(&c);
            let again = code == last && (code == DATA.0 || code == SEQUENCE.0);
            if !(code > last || again) || (body(code) && body(last) && code != last) {
                return Err(AmqpError::Invalid(format!(
                    "section 0x{code:x} out of order (after 0x{last:x})"
                )));
            }
            last = code;
            match code {
                0x70 => m.header = Some(Header::from_fields(&Fields::list(*inner, "header")?)?),
                0x71 => m.delivery_annotations = map(*inner, "delivery-annotations")?,
                0x72 => m.message_annotations = map(*inner, "message-annotations")?,
                0x73 => {
                    let f = Fields::list(*inner, "properties")?;
                    m.properties = Some(Properties::from_fields(&f)?);
                }
                0x74 => m.application_properties = application_properties(*inner)?,
                0x75 => match (*inner, &mut m.body) {
                    (Value::Binary(b), Body::Data(parts)) => parts.push(b),
                    (Value::Binary(b), body) => *body = Body::Data(vec![b]),
                    (v, _) => {
                        return Err(AmqpError::Invalid(format!(
                            "a data section holds {v:?}, not binary"
                        )))
                    }
                },
                0x76 => match (*inner, &mut m.body) {
                    (Value::List(l), Body::Sequence(parts)) => parts.push(l),
                    (Value::List(l), body) => *body = Body::Sequence(vec![l]),
                    (v, _) => {
                        return Err(AmqpError::Invalid(format!(
                            "an amqp-sequence section holds {v:?}, not a list"
                        )))
                    }
                },
                0x77 => m.body = Body::Value(*inner),
                _ => m.footer = map(*inner, "footer")?,
            }
        }
        Ok(m)
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
    fn messages_round_trip_with_every_body() {
        round_trip(&full());
        round_trip(&Message::default());
        for body in [
            Body::Data(vec![Bytes::from_static(b"a"), Bytes::from_static(b"bc")]),
            Body::Sequence(vec![vec![Value::Int(1)], vec![Value::Null]]),
            Body::Value(Value::Map(vec![(Value::String("k".into()), Value::Int(1))])),
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
