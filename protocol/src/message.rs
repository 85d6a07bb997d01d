//! The JMS-shaped message and its encoding (the "message block").
//!
//! The same bytes travel in SEND (client → server) and MESSAGE (server →
//! client): the server validates them once with [`MessageView::parse`] and
//! forwards them untouched, sharing one `Bytes` among all subscribers.
//! Per-delivery facts (redelivered, delivery count) travel in the MESSAGE
//! frame's own header, not here. Layout (PROTOCOL.md has the full table):
//!
//! ```text
//! u8 flags | u8 priority | u8 dest kind | str16 destination | str16 message id
//! i64 timestamp | i64 expiration | [str16 correlation id] [u8 kind, str16 reply-to]
//! [str16 type] [i64 delivery time] [u8 protocol, u32 length, origin bytes]
//! u16 property count, (str16 name, value)* | u8 body kind, body
//! ```

use std::ops::Range;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};

use crate::cursor::{put_str16, utf8, Cursor};
use crate::destination::{validate_name, Destination, DestinationKind};
use crate::error::Error;
use crate::value::{Value, ValueRef};

const FLAG_PERSISTENT: u8 = 0x01;
const FLAG_CORRELATION: u8 = 0x02;
const FLAG_REPLY_TO: u8 = 0x04;
const FLAG_TYPE: u8 = 0x08;
const FLAG_DELIVERY_TIME: u8 = 0x10;
/// The publisher asks for the message to be kept as its topic's retained
/// message (MQTT's retain flag).
const FLAG_RETAIN: u8 = 0x20;
/// Set by the server on a copy it delivers from its retained store, not
/// live: MQTT's retain flag on delivery.
const FLAG_KEPT: u8 = 0x40;
/// The block carries the message as its publisher's protocol wrote it
/// ([`Origin`]).
const FLAG_ORIGIN: u8 = 0x80;

/// Highest JMS priority.
pub const MAX_PRIORITY: u8 = 9;
/// JMS's default priority.
pub const DEFAULT_PRIORITY: u8 = 4;
/// The string property that holds a message's content type (a MIME type
/// with its parameters, `application/json; charset=utf-8`), as the
/// publisher gave it: STOMP's `content-type` header, MQTT 5.0's content
/// type. Every protocol hands it on as it came.
pub const CONTENT_TYPE_PROPERTY: &str = "HeraldContentType";

/// The message as the protocol it was published with wrote it, kept
/// beside the fields it maps to, so that consumers of that protocol get
/// it exactly as it was sent (AMQP 1.0's bare message is immutable from
/// sender to receiver). Its bytes are the front-end's business; other
/// consumers read the mapped fields and never see them.
#[derive(Debug, Clone, PartialEq)]
pub struct Origin {
    /// Which protocol wrote it: [`Origin::AMQP`] is the only one so far.
    pub protocol: u8,
    /// What that protocol's front-end kept.
    pub bytes: Bytes,
}

impl Origin {
    /// AMQP 1.0: the server's AMQP front-end keeps the sections of the
    /// bare message it did not map exactly.
    pub const AMQP: u8 = 1;
}

/// Whether the server must keep a message across its own restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeliveryMode {
    /// Lost if the server stops; never touches the disk.
    #[default]
    NonPersistent,
    /// Journalled before the server confirms it.
    Persistent,
}

/// A message body.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Body {
    /// No body.
    #[default]
    Empty,
    /// Opaque bytes.
    Bytes(Bytes),
    /// UTF-8 text.
    Text(String),
    /// Named typed values.
    Map(Vec<(String, Value)>),
    /// A large body that travels after the message, in CHUNK frames.
    Stream(Streamed),
}

/// A body too large to travel in one frame: `len` bytes that follow the
/// message in CHUNK frames of stream `stream` (PROTOCOL.md, "Large
/// messages"). The stream number is the sender's: a client's own in a
/// SEND, the server's in a stored message, the delivery id in a MESSAGE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Streamed {
    /// The body's length in bytes.
    pub len: u64,
    /// Which stream carries it.
    pub stream: u64,
}

impl Streamed {
    /// Bytes a streamed body takes in the block.
    pub const ENCODED_LEN: usize = 16;

    fn read(c: &mut Cursor<'_>) -> Result<Streamed, Error> {
        Ok(Streamed {
            len: c.u64("streamed body length")?,
            stream: c.u64("stream")?,
        })
    }
}

/// A message: JMS headers, typed properties and a body.
///
/// ```
/// use std::time::Duration;
/// use herald_protocol::{Destination, Message, Value};
///
/// let order = Message::text("2 laptops")
///     .with_property("region", "EU")
///     .with_property("units", 2)
///     .with_priority(7)
///     .with_ttl(Duration::from_secs(60))
///     .with_reply_to(Destination::queue("confirmations"))
///     .with_correlation_id("order-17")
///     .persistent();
/// assert_eq!(order.property("units").and_then(Value::as_i64), Some(2));
/// assert_eq!(order.property("region").and_then(Value::as_str), Some("EU"));
/// assert_eq!(order.priority, 7);
/// assert!(order.expiration > 0, "expires a minute from now");
/// ```
#[derive(Clone, Default)]
pub struct Message {
    /// The id, the destination, the correlation id, the reply-to and the
    /// type: see their accessors ([`Message::message_id`] and on).
    names: Names,
    /// Persistent or not.
    pub delivery_mode: DeliveryMode,
    /// 0 (lowest) to 9 (highest); 4 by default.
    pub priority: u8,
    /// Set by the producer on send: milliseconds since the Unix epoch.
    pub timestamp: i64,
    /// Milliseconds since the Unix epoch after which the message is
    /// discarded; 0 = never.
    pub expiration: i64,
    /// Milliseconds since the epoch before which the message is not
    /// delivered (JMS 2.0 delivery delay); 0 = at once.
    pub delivery_time: i64,
    /// Keep it as its topic's one retained message, for subscribers to
    /// come (MQTT's retain); an empty body deletes the topic's.
    pub retain: bool,
    /// Set on receipt: it came from the retained store when its
    /// subscription began, not as it was published.
    pub kept: bool,
    /// Set on receipt: delivered before and not acknowledged.
    pub redelivered: bool,
    /// Set on receipt: how many times this message has been delivered,
    /// this time included.
    pub delivery_count: u32,
    /// Set on receipt: the server's id for this delivery on its
    /// connection (what an acknowledgement names); 0 before.
    pub delivery_id: u64,
    properties: Vec<(String, Value)>,
    /// The body.
    pub body: Body,
    /// As its publisher's protocol wrote it, if a front-end kept that;
    /// boxed, since most messages have none.
    origin: Option<Box<Origin>>,
    /// Which of the headers a producer defaults ([`Message::or_defaults`])
    /// the application chose for this message: `CHOSE_*` bits.
    chosen: u8,
}

/// The application chose the delivery mode.
const CHOSE_MODE: u8 = 1;
/// The application chose the priority.
const CHOSE_PRIORITY: u8 = 2;
/// The application chose the time to live.
const CHOSE_TTL: u8 = 4;

/// A string header: as an application set it, or where it is in the
/// block a delivery brought (checked as UTF-8 when it arrived).
#[derive(Debug, Clone)]
enum Text {
    Owned(String),
    In(Span),
}

/// Where a string is in a block: a str16 (at most 65,535 bytes) of a
/// frame (at most 4 GiB), in 8 bytes where a `Range` takes 16, since a
/// received message is moved a few times on its way to the listener.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: u32,
    len: u16,
}

impl Span {
    /// The span of `at`, which a walk of a block gave.
    fn of(at: Range<usize>) -> Span {
        Span {
            start: u32::try_from(at.start).unwrap_or(u32::MAX),
            len: u16::try_from(at.len()).unwrap_or(0),
        }
    }

    fn range(self) -> Range<usize> {
        let start = self.start as usize;
        start..start + usize::from(self.len)
    }
}

impl Default for Text {
    fn default() -> Text {
        Text::Owned(String::new())
    }
}

/// A destination header: as an application set it, or where its name is
/// in the delivered block, made into a [`Destination`] when first asked
/// for.
#[derive(Debug, Clone)]
enum Dest {
    Owned(Destination),
    In(DestinationKind, Span, OnceLock<Box<Destination>>),
}

/// A message's string headers. A received message reads them from the
/// block it came in when they are asked for instead of copying each into
/// a `String` of its own: most listeners never look at them, and building
/// them was 6-7 % of a subscriber's CPU (docs/performance.md).
#[derive(Debug, Clone, Default)]
struct Names {
    /// The delivered block that the `In` variants point into (empty for a
    /// message made by the application).
    block: Bytes,
    message_id: Text,
    destination: Option<Dest>,
    correlation_id: Option<Text>,
    reply_to: Option<Dest>,
    message_type: Option<Text>,
}

impl Names {
    fn text<'a>(&'a self, text: &'a Text) -> &'a str {
        match text {
            Text::Owned(s) => s,
            // Checked as UTF-8 when the block arrived: the fallback is
            // unreachable.
            Text::In(at) => self
                .block
                .get(at.range())
                .and_then(|b| std::str::from_utf8(b).ok())
                .unwrap_or_default(),
        }
    }

    fn destination<'a>(&'a self, dest: &'a Dest) -> &'a Destination {
        match dest {
            Dest::Owned(d) => d,
            Dest::In(kind, at, made) => made.get_or_init(|| {
                Box::new(Destination {
                    kind: *kind,
                    name: self.text(&Text::In(*at)).to_owned(),
                })
            }),
        }
    }
}

/// Milliseconds since the epoch, `d` from now.
fn from_now(d: Duration) -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |t| t.as_millis());
    i64::try_from(now.saturating_add(d.as_millis())).unwrap_or(i64::MAX)
}

impl Message {
    /// A message with the given body and default headers.
    #[inline]
    pub fn new(body: Body) -> Message {
        // Every field named, not `..Message::default()`: the default was
        // built whole and then copied over, a 296-byte `memcpy` a send.
        Message {
            names: Names::default(),
            delivery_mode: DeliveryMode::default(),
            priority: DEFAULT_PRIORITY,
            timestamp: 0,
            expiration: 0,
            delivery_time: 0,
            retain: false,
            kept: false,
            redelivered: false,
            delivery_count: 0,
            delivery_id: 0,
            properties: Vec::new(),
            body,
            origin: None,
            chosen: 0,
        }
    }

    /// A text message.
    pub fn text(text: impl Into<String>) -> Message {
        Message::new(Body::Text(text.into()))
    }

    /// A bytes message.
    pub fn bytes(bytes: impl Into<Bytes>) -> Message {
        Message::new(Body::Bytes(bytes.into()))
    }

    /// A map message.
    pub fn map(entries: Vec<(String, Value)>) -> Message {
        Message::new(Body::Map(entries))
    }

    /// Sets a property, replacing one of the same name.
    pub fn set_property(&mut self, name: impl Into<String>, value: impl Into<Value>) {
        let (name, value) = (name.into(), value.into());
        match self.properties.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => self.properties.push((name, value)),
        }
    }

    /// Removes a property, returning its value.
    pub fn remove_property(&mut self, name: &str) -> Option<Value> {
        let at = self.properties.iter().position(|(n, _)| n == name)?;
        Some(self.properties.remove(at).1)
    }

    /// Builder form of [`Message::set_property`].
    pub fn with_property(mut self, name: impl Into<String>, value: impl Into<Value>) -> Message {
        self.set_property(name, value);
        self
    }

    /// Builder: persistent delivery, whatever the producer's default.
    pub fn persistent(mut self) -> Message {
        self.delivery_mode = DeliveryMode::Persistent;
        self.chosen |= CHOSE_MODE;
        self
    }

    /// Builder: non-persistent delivery, whatever the producer's default.
    pub fn non_persistent(mut self) -> Message {
        self.delivery_mode = DeliveryMode::NonPersistent;
        self.chosen |= CHOSE_MODE;
        self
    }

    /// Builder: the priority, 0 (lowest) to 9 (highest), whatever the
    /// producer's default; a send of a higher one is refused.
    pub fn with_priority(mut self, priority: u8) -> Message {
        self.priority = priority;
        self.chosen |= CHOSE_PRIORITY;
        self
    }

    /// Builder: the message expires `ttl` from now, and is not delivered
    /// after that, whatever the producer's default; zero means never.
    pub fn with_ttl(mut self, ttl: Duration) -> Message {
        self.expiration = match ttl.is_zero() {
            true => 0,
            false => from_now(ttl),
        };
        self.chosen |= CHOSE_TTL;
        self
    }

    /// Sets the delivery mode, the priority and the expiration that this
    /// message did not choose itself, as a JMS producer does on send with
    /// its own defaults. A header counts as chosen when a builder set it
    /// ([`Message::persistent`], [`Message::non_persistent`],
    /// [`Message::with_priority`], [`Message::with_ttl`]) or when it holds
    /// other than the default value (persistent, a priority other than 4,
    /// an expiration).
    pub fn or_defaults(&mut self, delivery_mode: DeliveryMode, priority: u8, expiration: i64) {
        if self.chosen & CHOSE_MODE == 0 && self.delivery_mode == DeliveryMode::NonPersistent {
            self.delivery_mode = delivery_mode;
        }
        if self.chosen & CHOSE_PRIORITY == 0 && self.priority == DEFAULT_PRIORITY {
            self.priority = priority;
        }
        if self.chosen & CHOSE_TTL == 0 && self.expiration == 0 {
            self.expiration = expiration;
        }
    }

    /// Builder: the message is not delivered sooner than `delay` from now
    /// (JMS 2.0's delivery delay, for this message; a producer's delay, if
    /// it ends later, wins).
    pub fn with_delivery_delay(mut self, delay: Duration) -> Message {
        self.delivery_time = from_now(delay);
        self
    }

    /// Builder: where replies should go.
    pub fn with_reply_to(mut self, reply_to: Destination) -> Message {
        self.set_reply_to(Some(reply_to));
        self
    }

    /// Builder: the correlation id (a reply names its request's).
    pub fn with_correlation_id(mut self, id: impl Into<String>) -> Message {
        self.set_correlation_id(Some(id.into()));
        self
    }

    /// Builder: the application-defined type name.
    pub fn with_message_type(mut self, message_type: impl Into<String>) -> Message {
        self.set_message_type(Some(message_type.into()));
        self
    }

    /// Builder: the destination, which a producer sets on send; a message
    /// encoded with [`Message::encode`] needs one.
    pub fn with_destination(mut self, destination: Destination) -> Message {
        self.set_destination(Some(destination));
        self
    }

    /// Set by the producer on send: unique per message.
    pub fn message_id(&self) -> &str {
        self.names.text(&self.names.message_id)
    }

    /// Sets the message id (a producer sets its own on send).
    pub fn set_message_id(&mut self, id: impl Into<String>) {
        self.names.message_id = Text::Owned(id.into());
    }

    /// Set by the producer on send: where the message was published.
    pub fn destination(&self) -> Option<&Destination> {
        let d = self.names.destination.as_ref()?;
        Some(self.names.destination(d))
    }

    /// Sets or clears the destination.
    pub fn set_destination(&mut self, destination: Option<Destination>) {
        self.names.destination = destination.map(Dest::Owned);
    }

    /// Links a reply to its request.
    pub fn correlation_id(&self) -> Option<&str> {
        let t = self.names.correlation_id.as_ref()?;
        Some(self.names.text(t))
    }

    /// Sets or clears the correlation id.
    pub fn set_correlation_id(&mut self, id: Option<String>) {
        self.names.correlation_id = id.map(Text::Owned);
    }

    /// Where replies should go.
    pub fn reply_to(&self) -> Option<&Destination> {
        let d = self.names.reply_to.as_ref()?;
        Some(self.names.destination(d))
    }

    /// Sets or clears where replies should go.
    pub fn set_reply_to(&mut self, reply_to: Option<Destination>) {
        self.names.reply_to = reply_to.map(Dest::Owned);
    }

    /// An application-defined type name.
    pub fn message_type(&self) -> Option<&str> {
        let t = self.names.message_type.as_ref()?;
        Some(self.names.text(t))
    }

    /// Sets or clears the application-defined type name.
    pub fn set_message_type(&mut self, message_type: Option<String>) {
        self.names.message_type = message_type.map(Text::Owned);
    }

    /// A property by name.
    pub fn property(&self, name: &str) -> Option<&Value> {
        self.properties
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
    }

    /// Every property, in the order they were set.
    pub fn properties(&self) -> &[(String, Value)] {
        &self.properties
    }

    /// The content type the publisher gave (STOMP's `content-type`,
    /// MQTT 5.0's content type), kept in [`CONTENT_TYPE_PROPERTY`].
    pub fn content_type(&self) -> Option<&str> {
        self.property(CONTENT_TYPE_PROPERTY)?.as_str()
    }

    /// Builder: the content type, a MIME type with its parameters
    /// (`application/json; charset=utf-8`), which every protocol hands on.
    pub fn with_content_type(self, content_type: impl Into<String>) -> Message {
        self.with_property(CONTENT_TYPE_PROPERTY, content_type.into())
    }

    /// The message as its publisher's protocol wrote it, if its front-end
    /// kept that.
    pub fn origin(&self) -> Option<&Origin> {
        self.origin.as_deref()
    }

    /// Sets or clears what the publisher's protocol wrote.
    pub fn set_origin(&mut self, origin: Option<Origin>) {
        self.origin = origin.map(Box::new);
    }

    /// The body as text, if it is a text body.
    pub fn body_text(&self) -> Option<&str> {
        match &self.body {
            Body::Text(s) => Some(s),
            _ => None,
        }
    }

    /// Appends the message block. Fails if the destination is unset, a
    /// field is out of range or a string too long.
    pub fn encode(&self, dst: &mut impl BufMut) -> Result<(), Error> {
        let destination = self
            .destination()
            .ok_or_else(|| Error::invalid("destination", "not set"))?;
        let stamp = Stamp {
            destination,
            message_id: MessageId::Whole(self.message_id()),
            timestamp: self.timestamp,
            delivery_time: self.delivery_time,
        };
        self.encode_stamped(&stamp, dst)
    }

    /// Appends the message block with the fields a producer sets on send
    /// taken from `stamp` instead of from the message, which is how a
    /// producer sends without cloning its destination or allocating an id.
    pub fn encode_stamped(&self, stamp: &Stamp<'_>, dst: &mut impl BufMut) -> Result<(), Error> {
        if self.priority > MAX_PRIORITY {
            return Err(Error::invalid(
                "priority",
                format!("{} is above {MAX_PRIORITY}", self.priority),
            ));
        }
        let mut flags = 0;
        if self.delivery_mode == DeliveryMode::Persistent {
            flags |= FLAG_PERSISTENT;
        }
        let (correlation_id, reply_to, message_type) =
            (self.correlation_id(), self.reply_to(), self.message_type());
        if correlation_id.is_some() {
            flags |= FLAG_CORRELATION;
        }
        if reply_to.is_some() {
            flags |= FLAG_REPLY_TO;
        }
        if message_type.is_some() {
            flags |= FLAG_TYPE;
        }
        if stamp.delivery_time != 0 {
            flags |= FLAG_DELIVERY_TIME;
        }
        if self.retain {
            flags |= FLAG_RETAIN;
        }
        if self.origin.is_some() {
            flags |= FLAG_ORIGIN;
        }
        let properties = u16::try_from(self.properties.len()).map_err(|_| {
            Error::invalid(
                "properties",
                format!("{} of them, at most 65535", self.properties.len()),
            )
        })?;
        dst.put_u8(flags);
        dst.put_u8(self.priority);
        dst.put_u8(stamp.destination.kind as u8);
        put_str16(dst, &stamp.destination.name, "destination")?;
        stamp.message_id.encode(dst)?;
        dst.put_i64(stamp.timestamp);
        dst.put_i64(self.expiration);
        if let Some(c) = correlation_id {
            put_str16(dst, c, "correlation id")?;
        }
        if let Some(r) = reply_to {
            dst.put_u8(r.kind as u8);
            put_str16(dst, &r.name, "reply-to")?;
        }
        if let Some(t) = message_type {
            put_str16(dst, t, "type")?;
        }
        if stamp.delivery_time != 0 {
            dst.put_i64(stamp.delivery_time);
        }
        if let Some(origin) = &self.origin {
            let len = u32::try_from(origin.bytes.len())
                .map_err(|_| Error::invalid("origin", "longer than 4 GiB"))?;
            dst.put_u8(origin.protocol);
            dst.put_u32(len);
            dst.put_slice(&origin.bytes);
        }
        dst.put_u16(properties);
        encode_entries(&self.properties, dst)?;
        match &self.body {
            Body::Empty => dst.put_u8(0),
            Body::Bytes(b) => {
                dst.put_u8(1);
                dst.put_slice(b);
            }
            Body::Text(t) => {
                dst.put_u8(2);
                dst.put_slice(t.as_bytes());
            }
            Body::Map(entries) => {
                let n = u16::try_from(entries.len()).map_err(|_| {
                    Error::invalid(
                        "map body",
                        format!("{} entries, at most 65535", entries.len()),
                    )
                })?;
                dst.put_u8(3);
                dst.put_u16(n);
                encode_entries(entries, dst)?;
            }
            Body::Stream(s) => {
                dst.put_u8(4);
                dst.put_u64(s.len);
                dst.put_u64(s.stream);
            }
        }
        Ok(())
    }

    /// Decodes a message block that a server validated (see
    /// [`MessageRef::read`]); `delivery_count` comes from the MESSAGE frame
    /// that carried it.
    pub fn decode(block: &Bytes, delivery_count: u32) -> Result<Message, Error> {
        Message::from_block(block.clone(), delivery_count)
    }

    /// [`Message::decode`], taking the block, which the message keeps:
    /// its string headers are read from it when asked for, and a bytes
    /// body shares it.
    pub fn from_block(block: Bytes, delivery_count: u32) -> Result<Message, Error> {
        let Fields {
            flags,
            priority,
            destination_kind,
            destination,
            message_id,
            timestamp,
            expiration,
            correlation_id,
            reply_to,
            message_type,
            delivery_time,
            origin,
            properties,
            body,
        } = walk(&block, |c| c.str16_at("destination"), Cursor::str16_at)?;
        let origin = origin.map(|(protocol, bytes)| {
            Box::new(Origin {
                protocol,
                bytes: block.slice_ref(bytes),
            })
        });
        let body = match body {
            BodyRef::Empty => Body::Empty,
            BodyRef::Bytes(range) => Body::Bytes(block.slice(range)),
            BodyRef::Text(t) => Body::Text(t.to_owned()),
            BodyRef::Map(m) => Body::Map(m.map(|(k, v)| (k.to_owned(), v.to_owned())).collect()),
            BodyRef::Stream(s) => Body::Stream(s),
        };
        // Most messages have none; collecting none still cost about 80
        // instructions a message.
        let properties = match properties.left {
            0 => Vec::new(),
            _ => properties
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        };
        let names = Names {
            message_id: Text::In(Span::of(message_id)),
            destination: Some(Dest::In(
                destination_kind,
                Span::of(destination),
                OnceLock::new(),
            )),
            correlation_id: correlation_id.map(|at| Text::In(Span::of(at))),
            reply_to: reply_to.map(|(kind, at)| Dest::In(kind, Span::of(at), OnceLock::new())),
            message_type: message_type.map(|at| Text::In(Span::of(at))),
            block,
        };
        Ok(Message {
            names,
            delivery_mode: delivery_mode(flags),
            priority,
            timestamp,
            expiration,
            delivery_time,
            retain: flags & FLAG_RETAIN != 0,
            kept: flags & FLAG_KEPT != 0,
            redelivered: delivery_count > 1,
            delivery_count,
            delivery_id: 0,
            properties,
            body,
            origin,
            chosen: 0,
        })
    }
}

impl PartialEq for Message {
    /// Equal headers, properties and body, however each side holds its
    /// string headers.
    fn eq(&self, other: &Message) -> bool {
        let Message {
            names: _,
            delivery_mode,
            priority,
            timestamp,
            expiration,
            delivery_time,
            retain,
            kept,
            redelivered,
            delivery_count,
            delivery_id,
            properties,
            body,
            origin,
            chosen: _,
        } = self;
        self.message_id() == other.message_id()
            && self.destination() == other.destination()
            && self.correlation_id() == other.correlation_id()
            && self.reply_to() == other.reply_to()
            && self.message_type() == other.message_type()
            && *delivery_mode == other.delivery_mode
            && *priority == other.priority
            && *timestamp == other.timestamp
            && *expiration == other.expiration
            && *delivery_time == other.delivery_time
            && *retain == other.retain
            && *kept == other.kept
            && *redelivered == other.redelivered
            && *delivery_count == other.delivery_count
            && *delivery_id == other.delivery_id
            && *properties == other.properties
            && *body == other.body
            && *origin == other.origin
    }
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Message")
            .field("message_id", &self.message_id())
            .field("destination", &self.destination())
            .field("delivery_mode", &self.delivery_mode)
            .field("priority", &self.priority)
            .field("timestamp", &self.timestamp)
            .field("expiration", &self.expiration)
            .field("correlation_id", &self.correlation_id())
            .field("reply_to", &self.reply_to())
            .field("message_type", &self.message_type())
            .field("delivery_time", &self.delivery_time)
            .field("retain", &self.retain)
            .field("kept", &self.kept)
            .field("redelivered", &self.redelivered)
            .field("delivery_count", &self.delivery_count)
            .field("delivery_id", &self.delivery_id)
            .field("properties", &self.properties)
            .field("body", &self.body)
            .field("origin", &self.origin)
            .finish()
    }
}

/// The fields a producer sets on each message it sends, borrowed.
#[derive(Debug, Clone, Copy)]
pub struct Stamp<'a> {
    /// Where the message goes.
    pub destination: &'a Destination,
    /// Its id.
    pub message_id: MessageId<'a>,
    /// Milliseconds since the Unix epoch.
    pub timestamp: i64,
    /// Not before this (ms since the epoch); 0 = at once.
    pub delivery_time: i64,
}

/// A message id as encoded: a whole string, or a prefix and a sequence
/// number written out in decimal, which needs no allocation.
#[derive(Debug, Clone, Copy)]
pub enum MessageId<'a> {
    /// The id as it is.
    Whole(&'a str),
    /// `prefix` followed by the decimal digits of the number.
    Numbered(&'a str, u64),
    /// `prefix`, the producer's number, `-`, and the sequence number, in
    /// decimal: the id names the producer that sent it.
    Produced(&'a str, u32, u64),
}

/// The decimal digits of 0 to 99, two by two.
const DIGIT_PAIRS: [u8; 200] = {
    let mut pairs = [0u8; 200];
    let mut i = 0;
    while i < 100 {
        pairs[2 * i] = b'0' + (i / 10) as u8;
        pairs[2 * i + 1] = b'0' + (i % 10) as u8;
        i += 1;
    }
    pairs
};

/// 10 to the powers 0 to 19.
const POWERS_OF_TEN: [u64; 20] = {
    let mut powers = [1u64; 20];
    let mut i = 1;
    while i < 20 {
        powers[i] = powers[i - 1] * 10;
        i += 1;
    }
    powers
};

/// How many decimal digits `n` has (1 to 20): the bit length times
/// log10(2) (1233 / 4096) gives the count or one less, and a power of ten
/// tells which. `checked_ilog10` took 24 instructions a call, two calls a
/// message sent. `n | 1` has as many digits as `n` (no power of ten but 1
/// is odd) and makes 0 count as one digit.
fn decimal_len(n: u64) -> usize {
    let n = n | 1;
    let guess = ((u64::BITS - n.leading_zeros()) as usize * 1233) >> 12;
    guess + usize::from(n >= POWERS_OF_TEN[guess])
}

/// Appends the decimal digits of `n` to `out` (at most 20), two at a time
/// and in place: a division per digit and a copy through `memcpy` were
/// 150 instructions of a publisher's 1,100 a message.
fn digits(n: u64, out: &mut ([u8; 41], usize)) {
    let start = out.1;
    let mut at = start + decimal_len(n);
    out.1 = at;
    let mut n = n;
    while n >= 10 {
        let pair = (n % 100) as usize * 2;
        n /= 100;
        at -= 2;
        out.0[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    }
    // An odd number of digits leaves the first.
    if at > start {
        out.0[at - 1] = b'0' + n as u8;
    }
}

impl MessageId<'_> {
    fn encode(self, dst: &mut impl BufMut) -> Result<(), Error> {
        let mut tail = ([0u8; 41], 0);
        let prefix = match self {
            MessageId::Whole(id) => return put_str16(dst, id, "message id"),
            MessageId::Numbered(prefix, n) => {
                digits(n, &mut tail);
                prefix
            }
            MessageId::Produced(prefix, producer, n) => {
                digits(producer.into(), &mut tail);
                tail.0[tail.1] = b'-';
                tail.1 += 1;
                digits(n, &mut tail);
                prefix
            }
        };
        let tail = &tail.0[..tail.1];
        let len = u16::try_from(prefix.len() + tail.len()).map_err(|_| {
            Error::invalid(
                "message id",
                format!("{} bytes long, at most 65535", prefix.len()),
            )
        })?;
        dst.put_u16(len);
        dst.put_slice(prefix.as_bytes());
        dst.put_slice(tail);
        Ok(())
    }
}

fn encode_entries(entries: &[(String, Value)], dst: &mut impl BufMut) -> Result<(), Error> {
    for (name, value) in entries {
        if name.is_empty() {
            return Err(Error::invalid("property name", "empty"));
        }
        put_str16(dst, name, "property name")?;
        value.encode(dst)?;
    }
    Ok(())
}

/// Iterates over validated `(name, value)` entries (properties or a map
/// body) without allocating.
#[derive(Debug, Clone)]
pub struct EntriesRef<'a> {
    cursor: Cursor<'a>,
    left: u16,
}

impl<'a> EntriesRef<'a> {
    /// Reads a u16 count and checks every entry; returns the iterator.
    fn parse(c: &mut Cursor<'a>, field: &'static str) -> Result<EntriesRef<'a>, Error> {
        let left = c.u16(field)?;
        let start = c.clone();
        for _ in 0..left {
            let name = c.str16("property name")?;
            if name.is_empty() {
                return Err(Error::invalid("property name", "empty"));
            }
            ValueRef::decode(c)?;
        }
        Ok(EntriesRef {
            cursor: start,
            left,
        })
    }
}

impl<'a> Iterator for EntriesRef<'a> {
    type Item = (&'a str, ValueRef<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // Validated by `parse`, so these cannot fail.
        let name = self.cursor.str16("property name").ok()?;
        let value = ValueRef::decode(&mut self.cursor).ok()?;
        Some((name, value))
    }
}

/// A body borrowed from a message block.
#[derive(Debug, Clone)]
pub enum BodyRef<'a> {
    /// No body.
    Empty,
    /// Bytes, as a range of the block.
    Bytes(Range<usize>),
    /// Text.
    Text(&'a str),
    /// Map entries.
    Map(EntriesRef<'a>),
    /// A body that travels after the message ([`Streamed`]).
    Stream(Streamed),
}

/// A fully validated message block, borrowed: every field checked, nothing
/// allocated.
#[derive(Debug, Clone)]
pub struct MessageRef<'a> {
    flags: u8,
    /// 0 to 9.
    pub priority: u8,
    /// Topic or queue.
    pub destination_kind: DestinationKind,
    /// The destination name (never a pattern).
    pub destination: &'a str,
    /// Producer-assigned id.
    pub message_id: &'a str,
    /// Milliseconds since the epoch.
    pub timestamp: i64,
    /// Milliseconds since the epoch; 0 = never.
    pub expiration: i64,
    /// Correlation id.
    pub correlation_id: Option<&'a str>,
    /// Reply-to destination.
    pub reply_to: Option<(DestinationKind, &'a str)>,
    /// Application type.
    pub message_type: Option<&'a str>,
    /// Not before this (ms since the epoch); 0 = at once.
    pub delivery_time: i64,
    /// The properties.
    pub properties: EntriesRef<'a>,
    /// The body.
    pub body: BodyRef<'a>,
    /// What its publisher's protocol wrote, if kept: the protocol
    /// ([`Origin::AMQP`]) and the bytes.
    pub origin: Option<(u8, &'a [u8])>,
}

/// A message block's fields, its destination as `D` and its other string
/// headers as `S`: a reader that needs only their places reads them as
/// ranges.
struct Fields<'a, D, S> {
    flags: u8,
    priority: u8,
    destination_kind: DestinationKind,
    destination: D,
    message_id: S,
    timestamp: i64,
    expiration: i64,
    correlation_id: Option<S>,
    reply_to: Option<(DestinationKind, S)>,
    message_type: Option<S>,
    delivery_time: i64,
    origin: Option<(u8, &'a [u8])>,
    properties: EntriesRef<'a>,
    body: BodyRef<'a>,
}

/// Checks a whole block, its destination read by `destination` and its
/// other string headers by `string` (which checks them as UTF-8); the
/// naming rules are the caller's to check.
fn walk<'a, D, S>(
    block: &'a [u8],
    destination: impl FnOnce(&mut Cursor<'a>) -> Result<D, Error>,
    string: impl Fn(&mut Cursor<'a>, &'static str) -> Result<S, Error>,
) -> Result<Fields<'a, D, S>, Error> {
    let mut c = Cursor::new(block);
    let flags = c.u8("flags")?;
    // Every bit of `flags` has its meaning: none is unknown.
    let priority = c.u8("priority")?;
    if priority > MAX_PRIORITY {
        return Err(Error::invalid(
            "priority",
            format!("{priority} is above {MAX_PRIORITY}"),
        ));
    }
    let destination_kind = DestinationKind::from_u8(c.u8("destination kind")?)?;
    let destination = destination(&mut c)?;
    let message_id = string(&mut c, "message id")?;
    let timestamp = c.i64("timestamp")?;
    let expiration = c.i64("expiration")?;
    let correlation_id = (flags & FLAG_CORRELATION != 0)
        .then(|| string(&mut c, "correlation id"))
        .transpose()?;
    let reply_to = if flags & FLAG_REPLY_TO != 0 {
        let kind = DestinationKind::from_u8(c.u8("reply-to kind")?)?;
        Some((kind, string(&mut c, "reply-to")?))
    } else {
        None
    };
    let message_type = (flags & FLAG_TYPE != 0)
        .then(|| string(&mut c, "type"))
        .transpose()?;
    let delivery_time = if flags & FLAG_DELIVERY_TIME != 0 {
        c.i64("delivery time")?
    } else {
        0
    };
    let origin = if flags & FLAG_ORIGIN != 0 {
        let protocol = c.u8("origin protocol")?;
        if protocol != Origin::AMQP {
            return Err(Error::invalid(
                "origin protocol",
                format!("unknown protocol {protocol}"),
            ));
        }
        let len = c.u32("origin length")?;
        Some((protocol, c.bytes(len as usize, "origin")?))
    } else {
        None
    };
    let properties = EntriesRef::parse(&mut c, "property count")?;
    let body = match c.u8("body kind")? {
        0 => BodyRef::Empty,
        1 => {
            let start = c.position();
            c.rest();
            BodyRef::Bytes(start..block.len())
        }
        2 => BodyRef::Text(utf8(c.rest(), "text body")?),
        3 => BodyRef::Map(EntriesRef::parse(&mut c, "map entry count")?),
        4 => BodyRef::Stream(Streamed::read(&mut c)?),
        k => return Err(Error::invalid("body kind", format!("unknown kind {k}"))),
    };
    c.finish()?;
    Ok(Fields {
        flags,
        priority,
        destination_kind,
        destination,
        message_id,
        timestamp,
        expiration,
        correlation_id,
        reply_to,
        message_type,
        delivery_time,
        origin,
        properties,
        body,
    })
}

/// A reply-to read from a peer follows the naming rules.
fn check_reply_to(reply_to: Option<(DestinationKind, &str)>) -> Result<(), Error> {
    match reply_to {
        Some((_, name)) => validate_name(name),
        None => Ok(()),
    }
}

/// Persistent or not, by a block's flags.
fn delivery_mode(flags: u8) -> DeliveryMode {
    if flags & FLAG_PERSISTENT != 0 {
        DeliveryMode::Persistent
    } else {
        DeliveryMode::NonPersistent
    }
}

impl<'a> MessageRef<'a> {
    /// Validates a whole message block from an untrusted peer: its
    /// structure, UTF-8, and the naming rules of its destinations.
    pub fn parse(block: &'a [u8]) -> Result<MessageRef<'a>, Error> {
        MessageRef::walk(block, true)
    }

    /// Reads a block that was validated with [`MessageRef::parse`] when it
    /// entered the server (a stored message, a delivery from the server):
    /// structure and UTF-8 are still checked, so a bad block is an error
    /// and never undefined behaviour, but destination names are not
    /// checked against the naming rules again.
    pub fn read(block: &'a [u8]) -> Result<MessageRef<'a>, Error> {
        MessageRef::walk(block, false)
    }

    fn walk(block: &'a [u8], check_names: bool) -> Result<MessageRef<'a>, Error> {
        let f = walk(
            block,
            |c| {
                let destination = c.str16("destination")?;
                if check_names {
                    validate_name(destination)?;
                }
                Ok(destination)
            },
            Cursor::str16,
        )?;
        if check_names {
            check_reply_to(f.reply_to)?;
        }
        Ok(MessageRef {
            flags: f.flags,
            priority: f.priority,
            destination_kind: f.destination_kind,
            destination: f.destination,
            message_id: f.message_id,
            timestamp: f.timestamp,
            expiration: f.expiration,
            correlation_id: f.correlation_id,
            reply_to: f.reply_to,
            message_type: f.message_type,
            delivery_time: f.delivery_time,
            properties: f.properties,
            body: f.body,
            origin: f.origin,
        })
    }

    /// Persistent or not.
    pub fn delivery_mode(&self) -> DeliveryMode {
        delivery_mode(self.flags)
    }

    /// Whether the publisher asked for it to be retained.
    pub fn retain(&self) -> bool {
        self.flags & FLAG_RETAIN != 0
    }

    /// Whether it was delivered from the retained store.
    pub fn kept(&self) -> bool {
        self.flags & FLAG_KEPT != 0
    }
}

/// Whether a validated message block asks to be retained, read from its
/// first byte.
pub fn asks_retain(block: &[u8]) -> bool {
    block.first().is_some_and(|flags| flags & FLAG_RETAIN != 0)
}

/// Whether a message block carries an origin ([`Origin`]), read from its
/// first byte.
pub fn has_origin(block: &[u8]) -> bool {
    block.first().is_some_and(|flags| flags & FLAG_ORIGIN != 0)
}

/// A validated message block's copy marked as delivered from the retained
/// store.
pub fn mark_kept(block: &[u8]) -> Bytes {
    let mut copy = block.to_vec();
    if let Some(flags) = copy.first_mut() {
        *flags |= FLAG_KEPT;
    }
    Bytes::from(copy)
}

/// The priority and expiration of a validated message block, read without
/// walking the rest of it (what a queue orders and expires by).
pub fn priority_and_expiration(block: &[u8]) -> Option<(u8, i64)> {
    let mut c = Cursor::new(block);
    c.u8("flags").ok()?;
    let priority = c.u8("priority").ok()?;
    c.u8("destination kind").ok()?;
    c.skip16("destination").ok()?;
    c.skip16("message id").ok()?;
    c.i64("timestamp").ok()?;
    let expiration = c.i64("expiration").ok()?;
    Some((priority, expiration))
}

/// The cursor of a validated block, past its header fields to its
/// property count, and the position of its expiration: without walking
/// the body.
fn to_properties(block: &[u8]) -> Option<(Cursor<'_>, usize)> {
    let mut c = Cursor::new(block);
    let flags = c.u8("flags").ok()?;
    c.u8("priority").ok()?;
    c.u8("destination kind").ok()?;
    c.skip16("destination").ok()?;
    c.skip16("message id").ok()?;
    c.i64("timestamp").ok()?;
    let expiration_at = c.position();
    c.i64("expiration").ok()?;
    if flags & FLAG_CORRELATION != 0 {
        c.skip16("correlation id").ok()?;
    }
    if flags & FLAG_REPLY_TO != 0 {
        c.u8("reply-to kind").ok()?;
        c.skip16("reply-to").ok()?;
    }
    if flags & FLAG_TYPE != 0 {
        c.skip16("type").ok()?;
    }
    if flags & FLAG_DELIVERY_TIME != 0 {
        c.i64("delivery time").ok()?;
    }
    if flags & FLAG_ORIGIN != 0 {
        c.u8("origin protocol").ok()?;
        let len = c.u32("origin length").ok()?;
        c.bytes(len as usize, "origin").ok()?;
    }
    Some((c, expiration_at))
}

/// Property `name` of a validated message block, read without walking
/// the body (what a queue groups and keys its messages by).
pub fn property_of<'a>(block: &'a [u8], name: &str) -> Option<ValueRef<'a>> {
    let mut found = None;
    each_property(block, |key, value| {
        if key == name {
            found = Some(value);
        }
        found.is_none()
    });
    found
}

/// Calls `each` with the properties of a validated message block in
/// order, without walking the body, until it returns `false`: several
/// properties read in one pass.
pub fn each_property<'a>(block: &'a [u8], mut each: impl FnMut(&'a str, ValueRef<'a>) -> bool) {
    let Some((mut c, _)) = to_properties(block) else {
        return;
    };
    let Ok(count) = c.u16("property count") else {
        return;
    };
    for _ in 0..count {
        let (Ok(key), Ok(value)) = (c.str16("property name"), ValueRef::decode(&mut c)) else {
            return;
        };
        if !each(key, value) {
            return;
        }
    }
}

/// The streamed body of a validated message block, if its body is one
/// (a large message's), read without copying anything.
pub fn streamed_body(block: &[u8]) -> Option<Streamed> {
    // A streamed body is the block's last bytes: most blocks are told
    // apart by one byte.
    let kind_at = block.len().checked_sub(1 + Streamed::ENCODED_LEN)?;
    if block[kind_at] != 4 {
        return None;
    }
    let (mut c, _) = to_properties(block)?;
    let count = c.u16("property count").ok()?;
    for _ in 0..count {
        c.skip16("property name").ok()?;
        ValueRef::decode(&mut c).ok()?;
    }
    match c.u8("body kind").ok()? {
        4 => Streamed::read(&mut c).ok(),
        _ => None,
    }
}

/// A validated message block's copy with its priority and expiration
/// replaced where given (an address's default priority and time to live);
/// the same block if neither is.
pub fn restamp(block: &Bytes, priority: Option<u8>, expiration: Option<i64>) -> Bytes {
    if priority.is_none() && expiration.is_none() {
        return block.clone();
    }
    let Some((_, expiration_at)) = to_properties(block) else {
        return block.clone();
    };
    let mut copy = block.to_vec();
    if let Some(p) = priority.filter(|p| *p <= MAX_PRIORITY) {
        copy[1] = p;
    }
    if let Some(e) = expiration {
        copy[expiration_at..expiration_at + 8].copy_from_slice(&e.to_be_bytes());
    }
    Bytes::from(copy)
}

/// `block` with property `name` set to `value`, spliced in without
/// decoding the message: about a tenth of a decode and an encode. `None`
/// if the block has that property already or does not read (decode and
/// encode it then).
pub fn with_property(block: &[u8], name: &str, value: &Value) -> Option<Bytes> {
    if property_of(block, name).is_some() {
        return None;
    }
    let (c, _) = to_properties(block)?;
    let at = c.position();
    let count = block.get(at..at + 2)?;
    let count = u16::from_be_bytes([count[0], count[1]]).checked_add(1)?;
    let mut out = BytesMut::with_capacity(block.len() + name.len() + 16);
    out.put_slice(&block[..at]);
    out.put_u16(count);
    put_str16(&mut out, name, "property name").ok()?;
    value.encode(&mut out).ok()?;
    out.put_slice(&block[at + 2..]);
    Some(out.freeze())
}

/// Whether a message block is persistent (its first byte says).
pub fn is_persistent(block: &[u8]) -> bool {
    block
        .first()
        .is_some_and(|flags| flags & FLAG_PERSISTENT != 0)
}

/// When a validated message block may be delivered (0 = at once): fast
/// when the message has no delivery time, which is most of them.
pub fn delivery_time(block: &[u8]) -> i64 {
    if block
        .first()
        .is_some_and(|flags| flags & FLAG_DELIVERY_TIME != 0)
    {
        MessageRef::read(block).map_or(0, |r| r.delivery_time)
    } else {
        0
    }
}

/// What the server keeps of a published message: the validated block,
/// shared by reference count among all its deliveries, and the few header
/// fields routing needs, copied out.
#[derive(Debug, Clone)]
pub struct MessageView {
    block: Bytes,
    destination: Range<usize>,
    /// Topic or queue.
    pub destination_kind: DestinationKind,
    /// Persistent or not.
    pub delivery_mode: DeliveryMode,
    /// 0 to 9.
    pub priority: u8,
    /// Milliseconds since the epoch; 0 = never.
    pub expiration: i64,
}

impl MessageView {
    /// Validates `block` and records where its routing fields are.
    pub fn parse(block: Bytes) -> Result<MessageView, Error> {
        MessageView::parse_known(block, None)
    }

    /// [`MessageView::parse`], but a destination byte for byte `known`,
    /// a name that passed the naming rules before (a publisher's last
    /// one), is not checked again: checking it is most of what checking
    /// a small message costs.
    pub fn parse_known(block: Bytes, known: Option<&str>) -> Result<MessageView, Error> {
        let f = walk(
            &block,
            |c| {
                let len = usize::from(c.u16("destination")?);
                let start = c.position();
                let name = c.bytes(len, "destination")?;
                if known.is_none_or(|k| k.as_bytes() != name) {
                    validate_name(utf8(name, "destination")?)?;
                }
                Ok(start..start + len)
            },
            // Only checked, not kept: ASCII at a glance.
            Cursor::str16_at,
        )?;
        let reply_to = match f.reply_to {
            Some((kind, at)) => Some((kind, utf8(&block[at], "reply-to")?)),
            None => None,
        };
        check_reply_to(reply_to)?;
        Ok(MessageView {
            destination: f.destination,
            destination_kind: f.destination_kind,
            delivery_mode: delivery_mode(f.flags),
            priority: f.priority,
            expiration: f.expiration,
            block,
        })
    }

    /// The destination name.
    pub fn destination(&self) -> &str {
        // Checked as UTF-8 by `parse`; the fallback is unreachable.
        std::str::from_utf8(&self.block[self.destination.clone()]).unwrap_or_default()
    }

    /// Whether the destination is `name`, compared as bytes.
    pub fn has_destination(&self, name: &str) -> bool {
        self.block[self.destination.clone()] == *name.as_bytes()
    }

    /// The encoded block, to forward as is.
    pub fn block(&self) -> &Bytes {
        &self.block
    }

    /// A borrowed view of every field (re-walks the block).
    pub fn fields(&self) -> Result<MessageRef<'_>, Error> {
        MessageRef::read(&self.block)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_message_is_the_default_with_the_default_priority_and_its_body() {
        let body = Body::Bytes(Bytes::from_static(b"abc"));
        let expected = Message {
            priority: DEFAULT_PRIORITY,
            body: body.clone(),
            ..Message::default()
        };
        assert_eq!(Message::new(body), expected);
        assert_eq!(Message::new(Body::Empty).message_id(), "");
        assert_eq!(Message::new(Body::Empty).destination(), None);
    }

    fn full() -> Message {
        let mut m = Message::text("sold 3")
            .with_property("region", "EU")
            .with_property("units", 3)
            .with_property("flag", true)
            .with_property("b", 7i8)
            .with_property("s", -3i16)
            .with_property("l", 1i64 << 40)
            .with_property("f", 0.5f32)
            .with_property("d", 0.25f64)
            .persistent();
        m.set_message_id("ID:1");
        m.set_destination(Some(Destination::topic("sales.europe.smartphone")));
        m.timestamp = 1_700_000_000_000;
        m.expiration = 1_700_000_060_000;
        m.priority = 9;
        m.set_correlation_id(Some("req-1".into()));
        m.set_reply_to(Some(Destination::topic("replies")));
        m.set_message_type(Some("sale".into()));
        m.delivery_time = 1_700_000_001_000;
        m.set_origin(Some(Origin {
            protocol: Origin::AMQP,
            bytes: Bytes::from_static(b"\x00\x00\x53\x77\xa1\x06sold 3"),
        }));
        m
    }

    #[test]
    fn a_property_and_the_restamped_fields_are_found_past_every_header() {
        let mut b = BytesMut::new();
        full().encode(&mut b).unwrap();
        let block = b.freeze();
        assert_eq!(property_of(&block, "region"), Some(ValueRef::String("EU")));
        assert_eq!(property_of(&block, "d"), Some(ValueRef::F64(0.25)));
        assert_eq!(property_of(&block, "absent"), None);
        assert_eq!(property_of(&block[..40], "region"), None, "truncated");
        let same = restamp(&block, None, None);
        assert_eq!(same, block);
        let changed = restamp(&block, Some(2), Some(42));
        let m = MessageRef::parse(&changed).unwrap();
        assert_eq!((m.priority, m.expiration), (2, 42));
        assert_eq!(m.properties.count(), 8);
        assert_eq!(priority_and_expiration(&changed), Some((2, 42)));
        // The rest is as it was.
        let (a, b) = (
            Message::decode(&block, 0).unwrap(),
            Message::decode(&changed, 0).unwrap(),
        );
        assert_eq!(
            Message {
                priority: 9,
                expiration: a.expiration,
                ..b
            },
            a
        );
    }

    fn encode(m: &Message) -> Bytes {
        let mut b = BytesMut::new();
        m.encode(&mut b).unwrap();
        b.freeze()
    }

    #[test]
    fn round_trips_all_headers_and_properties() {
        let m = full();
        let back = Message::decode(&encode(&m), 1).unwrap();
        assert_eq!(back.delivery_count, 1);
        assert!(!back.redelivered);
        let mut expected = m.clone();
        expected.delivery_count = 1;
        assert_eq!(back, expected);
    }

    #[test]
    fn decimal_len_counts_the_digits_at_every_power_of_ten() {
        let mut cases = vec![0, 1, 9, u64::MAX];
        for p in POWERS_OF_TEN {
            cases.extend([p - 1, p, p + 1, p.saturating_mul(5)]);
        }
        for n in cases {
            assert_eq!(decimal_len(n), n.to_string().len(), "{n}");
        }
    }

    #[test]
    fn a_stamp_replaces_what_a_producer_sets() {
        let m = Message::text("x");
        let destination = Destination::queue("orders");
        for (message_id, id) in [
            (MessageId::Numbered("ID:c-", 0), "ID:c-0"),
            (MessageId::Numbered("ID:c-", 7), "ID:c-7"),
            (MessageId::Numbered("ID:c-", 10), "ID:c-10"),
            (MessageId::Numbered("ID:c-", 100), "ID:c-100"),
            (MessageId::Produced("ID:c-", 9, 1000), "ID:c-9-1000"),
            (
                MessageId::Produced("ID:c-", 12_345, 987_654_321),
                "ID:c-12345-987654321",
            ),
            (
                MessageId::Numbered("ID:c-", u64::MAX),
                "ID:c-18446744073709551615",
            ),
            (MessageId::Produced("ID:c-", 3, 41), "ID:c-3-41"),
            (
                MessageId::Produced("ID:c-", u32::MAX, u64::MAX),
                "ID:c-4294967295-18446744073709551615",
            ),
        ] {
            let stamp = Stamp {
                destination: &destination,
                message_id,
                timestamp: 5,
                delivery_time: 9,
            };
            let mut b = BytesMut::new();
            m.encode_stamped(&stamp, &mut b).unwrap();
            let back = Message::decode(&b.freeze(), 1).unwrap();
            assert_eq!(back.message_id(), id);
            assert_eq!(back.destination(), Some(&destination));
            assert_eq!((back.timestamp, back.delivery_time), (5, 9));
        }
        let long = "p".repeat(65_530);
        let stamp = Stamp {
            destination: &destination,
            message_id: MessageId::Numbered(&long, 123_456),
            timestamp: 0,
            delivery_time: 0,
        };
        assert!(m.encode_stamped(&stamp, &mut BytesMut::new()).is_err());
    }

    #[test]
    fn a_property_spliced_in_reads_as_one_set_and_encoded() {
        let m = full();
        let mut block = BytesMut::new();
        m.encode(&mut block).unwrap();
        let block = block.freeze();
        let spliced = with_property(&block, "added", &Value::Bool(true)).unwrap();
        let mut expected = Message::decode(&block, 0).unwrap();
        expected.set_property("added", true);
        let back = Message::decode(&spliced, 0).unwrap();
        assert_eq!(back.property("added"), Some(&Value::Bool(true)));
        assert_eq!(back.properties().len(), expected.properties().len());
        assert_eq!(back.body, expected.body);
        assert_eq!(back.message_id(), expected.message_id());
        // Once there, it is not added twice.
        assert!(with_property(&spliced, "added", &Value::Bool(false)).is_none());
        assert!(with_property(b"garbage", "added", &Value::Bool(true)).is_none());
    }

    #[test]
    fn producer_defaults_fill_only_what_a_message_did_not_choose() {
        let defaults = (DeliveryMode::Persistent, 7, 1_000);
        let fill = |mut m: Message| {
            m.or_defaults(defaults.0, defaults.1, defaults.2);
            (m.delivery_mode, m.priority, m.expiration)
        };
        assert_eq!(fill(Message::text("x")), defaults);
        // Chosen by a builder, even at the default value.
        let chosen = Message::text("x")
            .non_persistent()
            .with_priority(DEFAULT_PRIORITY)
            .with_ttl(Duration::ZERO);
        assert_eq!(
            fill(chosen),
            (DeliveryMode::NonPersistent, DEFAULT_PRIORITY, 0)
        );
        // Set through the fields to other than the default.
        let mut set = Message::text("x");
        (set.priority, set.expiration) = (2, 5);
        assert_eq!(fill(set), (DeliveryMode::Persistent, 2, 5));
        // A received message chose nothing: a producer that sends it on
        // stamps its own, as JMS does.
        let mut b = BytesMut::new();
        Message::text("x")
            .non_persistent()
            .with_destination(Destination::queue("q"))
            .encode(&mut b)
            .unwrap();
        let received = Message::decode(&b.freeze(), 1).unwrap();
        assert_eq!(fill(received), defaults);
    }

    #[test]
    fn read_skips_only_the_naming_rules() {
        let mut m = full();
        m.set_destination(Some(Destination::topic("ok")));
        let mut block = BytesMut::from(&encode(&m)[..]);
        // "ok" -> "o*": a wildcard is no destination name.
        block[6] = b'*';
        assert!(MessageRef::parse(&block).is_err());
        assert_eq!(MessageRef::read(&block).unwrap().destination, "o*");
        // Bad UTF-8 is refused by both.
        block[6] = 0xff;
        assert!(MessageRef::read(&block).is_err());
    }

    #[test]
    fn round_trips_every_body_kind() {
        let bodies = [
            Body::Empty,
            Body::Bytes(Bytes::from_static(b"\0\x01binary\0")),
            Body::Text(String::new()),
            Body::Map(vec![
                ("a".into(), Value::I32(1)),
                ("b".into(), Value::String("x".into())),
            ]),
            Body::Stream(Streamed {
                len: 3 << 30,
                stream: 7,
            }),
        ];
        for body in bodies {
            let mut m = Message::new(body);
            m.set_destination(Some(Destination::topic("q")));
            let back = Message::decode(&encode(&m), 2).unwrap();
            assert!(back.redelivered);
            assert_eq!(back.body, m.body);
        }
    }

    #[test]
    fn a_streamed_body_is_exactly_its_length_and_stream() {
        let mut m = Message::new(Body::Stream(Streamed { len: 1, stream: 2 }));
        m.set_destination(Some(Destination::queue("q")));
        let block = encode(&m);
        for cut in [1, 8, 15] {
            let short = block.slice(..block.len() - cut);
            assert!(MessageView::parse(short).is_err(), "cut {cut}");
        }
        let long = Bytes::from([&block[..], b"!"].concat());
        assert!(MessageView::parse(long).is_err());
        assert_eq!(streamed_body(&block), Some(Streamed { len: 1, stream: 2 }));
        assert_eq!(streamed_body(&encode(&full())), None);
    }

    #[test]
    fn priority_and_expiration_are_read_from_the_front() {
        assert_eq!(
            priority_and_expiration(&encode(&full())),
            Some((9, 1_700_000_060_000))
        );
        assert_eq!(priority_and_expiration(b"\x00"), None);
        assert_eq!(delivery_time(&encode(&full())), 1_700_000_001_000);
    }

    #[test]
    fn view_exposes_routing_fields() {
        let v = MessageView::parse(encode(&full())).unwrap();
        assert_eq!(v.destination(), "sales.europe.smartphone");
        assert_eq!(v.delivery_mode, DeliveryMode::Persistent);
        assert_eq!(v.priority, 9);
        let props: Vec<_> = v.fields().unwrap().properties.map(|(k, _)| k).collect();
        assert_eq!(props[..2], ["region", "units"]);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let b = encode(&full());
        // Cutting inside the text body still decodes (it is the rest of the
        // block), so cut only before the body starts.
        let body_start = b.len() - "sold 3".len();
        for n in 0..body_start {
            assert!(MessageView::parse(b.slice(..n)).is_err(), "cut at {n}");
        }
    }

    #[test]
    fn rejects_bad_fields() {
        let mut m = full();
        m.priority = 10;
        assert!(m.encode(&mut BytesMut::new()).is_err());
        m.priority = 4;
        m.set_destination(Some(Destination::topic("sales.#")));
        let mut b = BytesMut::new();
        m.encode(&mut b).unwrap();
        assert!(
            MessageView::parse(b.freeze()).is_err(),
            "wildcard destination"
        );
        let mut m = full();
        m.set_origin(Some(Origin {
            protocol: 9,
            bytes: Bytes::from_static(b"?"),
        }));
        assert!(
            MessageView::parse(encode(&m)).is_err(),
            "unknown origin protocol"
        );
        assert!(
            Message::text("x").encode(&mut BytesMut::new()).is_err(),
            "no destination"
        );
    }

    #[test]
    fn a_known_destination_skips_its_check_and_no_other() {
        let b = encode(&full());
        let known = Some("sales.europe.smartphone");
        let v = MessageView::parse_known(b.clone(), known).unwrap();
        assert_eq!(v.destination(), "sales.europe.smartphone");
        assert!(v.has_destination("sales.europe.smartphone"));
        assert!(
            !v.has_destination("sales.europe") && !v.has_destination("sales.europe.smartphones")
        );
        // Byte for byte the known name: taken as checked, so a caller
        // must pass only names that passed.
        let mut wild = BytesMut::from(&b[..]);
        wild[5 + "sales.europe.".len()] = b'*';
        let wild = wild.freeze();
        assert!(MessageView::parse(wild.clone()).is_err());
        assert!(MessageView::parse_known(wild.clone(), Some("sales.europe.*martphone")).is_ok());
        assert!(
            MessageView::parse_known(wild, known).is_err(),
            "not the known one"
        );
    }

    proptest::proptest! {
        /// With a valid known name, a block is accepted or refused as
        /// [`MessageView::parse`] would, whatever its bytes.
        #[test]
        fn parse_known_agrees_with_parse(
            flips in proptest::collection::vec((0usize..200, proptest::prelude::any::<u8>()), 1..4),
            known in proptest::sample::select(vec!["sales.europe.smartphone", "sales.europe", "x"]),
        ) {
            let mut b = BytesMut::from(&encode(&full())[..]);
            for (at, byte) in flips {
                let at = at % b.len();
                b[at] = byte;
            }
            let b = b.freeze();
            let plain = MessageView::parse(b.clone()).map(|v| v.destination().to_owned());
            let with = MessageView::parse_known(b, Some(known)).map(|v| v.destination().to_owned());
            proptest::prop_assert_eq!(plain.ok(), with.ok());
        }

        /// A numbered id reads as its prefix and the number in decimal,
        /// whatever the numbers.
        #[test]
        fn numbered_ids_are_written_in_decimal(producer: u32, n: u64) {
            let mut b = BytesMut::new();
            MessageId::Produced("ID:c-", producer, n).encode(&mut b).unwrap();
            let expected = format!("ID:c-{producer}-{n}");
            proptest::prop_assert_eq!(&b[2..], expected.as_bytes());
        }

        /// A received message is refused where [`MessageRef::read`]
        /// refuses its block, and otherwise reads the same headers out of
        /// it, whatever its bytes.
        #[test]
        fn a_received_message_agrees_with_read(
            flips in proptest::collection::vec((0usize..200, proptest::prelude::any::<u8>()), 1..4),
        ) {
            let mut b = BytesMut::from(&encode(&full())[..]);
            for (at, byte) in flips {
                let at = at % b.len();
                b[at] = byte;
            }
            let b = b.freeze();
            let read = MessageRef::read(&b).map(|r| {
                (r.message_id.to_owned(), r.destination.to_owned(), r.correlation_id.map(str::to_owned),
                 r.reply_to.map(|(_, n)| n.to_owned()), r.message_type.map(str::to_owned))
            });
            let received = Message::from_block(b, 1).map(|m| {
                (m.message_id().to_owned(), m.destination().map_or(String::new(), |d| d.name.clone()),
                 m.correlation_id().map(str::to_owned), m.reply_to().map(|d| d.name.clone()),
                 m.message_type().map(str::to_owned))
            });
            proptest::prop_assert_eq!(read.ok(), received.ok());
        }
    }

    #[test]
    fn a_received_message_reads_its_headers_from_the_block() {
        let sent = full();
        let mut got = Message::decode(&encode(&sent), 1).unwrap();
        assert_eq!(got.message_id(), "ID:1");
        assert_eq!(
            got.destination(),
            Some(&Destination::topic("sales.europe.smartphone"))
        );
        assert_eq!(got.correlation_id(), Some("req-1"));
        assert_eq!(got.reply_to(), Some(&Destination::topic("replies")));
        assert_eq!(got.message_type(), Some("sale"));
        // Forwarded as it came, it encodes to the same block.
        assert_eq!(encode(&got), encode(&sent));
        // A clone reads the same; a header set on one is its own.
        let copy = got.clone();
        got.set_correlation_id(Some("req-2".into()));
        got.set_reply_to(None);
        got.set_message_type(None);
        got.set_destination(Some(Destination::queue("elsewhere")));
        got.set_message_id("ID:2");
        assert_eq!(copy.correlation_id(), Some("req-1"));
        assert_eq!(copy.reply_to(), Some(&Destination::topic("replies")));
        assert_eq!(got.correlation_id(), Some("req-2"));
        assert_eq!((got.reply_to(), got.message_type()), (None, None));
        assert_eq!(got.destination(), Some(&Destination::queue("elsewhere")));
        assert_eq!(got.message_id(), "ID:2");
        assert_ne!(got, copy);
    }

    #[test]
    fn a_received_header_that_is_not_utf8_is_refused() {
        let m = Message::text("x")
            .with_destination(Destination::topic("t"))
            .with_correlation_id("c\u{e9}")
            .with_message_type("ascii");
        let block = encode(&m);
        assert_eq!(
            Message::decode(&block, 1).unwrap().correlation_id(),
            Some("c\u{e9}"),
            "UTF-8 beyond ASCII is read as it is"
        );
        // The 0xc3 of the correlation id's é made a lone continuation byte.
        let at = block.iter().position(|&b| b == 0xc3).unwrap();
        let mut bad = BytesMut::from(&block[..]);
        bad[at] = 0xa9;
        assert!(matches!(
            Message::decode(&bad.freeze(), 1),
            Err(Error::Invalid {
                field: "correlation id",
                ..
            })
        ));
    }
}
