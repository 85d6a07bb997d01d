//! MQTT 5.0 properties (§2.2.2): a length, then identifier and value
//! pairs. Each identifier has one value type; an unknown identifier makes
//! the packet malformed.

use bytes::{BufMut, Bytes, BytesMut};

use super::wire::{put_binary, put_varint, Reader};
use super::MqttError;

/// One property, by its identifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Property {
    /// 0x01: the payload is UTF-8 text (1) or unspecified bytes (0).
    PayloadFormat(u8),
    /// 0x02: seconds until the message expires.
    MessageExpiry(u32),
    /// 0x03: the payload's content type.
    ContentType(String),
    /// 0x08: where a response goes.
    ResponseTopic(String),
    /// 0x09: what ties a response to its request.
    CorrelationData(Bytes),
    /// 0x0B: the identifier of the subscription a message came through.
    SubscriptionId(u32),
    /// 0x11: seconds the session outlives the connection.
    SessionExpiry(u32),
    /// 0x12: the client id the server chose.
    AssignedClientId(String),
    /// 0x13: the keep-alive the server holds the client to.
    ServerKeepAlive(u16),
    /// 0x15: the extended authentication method.
    AuthMethod(String),
    /// 0x16: extended authentication data.
    AuthData(Bytes),
    /// 0x17: whether reason strings and user properties may come on errors.
    RequestProblemInfo(u8),
    /// 0x18: seconds to wait before publishing the will.
    WillDelay(u32),
    /// 0x19: whether the client wants response information.
    RequestResponseInfo(u8),
    /// 0x1A: the base of response topics.
    ResponseInfo(String),
    /// 0x1C: another server to use.
    ServerReference(String),
    /// 0x1F: a human-readable reason.
    ReasonString(String),
    /// 0x21: QoS 1 and 2 publishes the sender takes in flight at once.
    ReceiveMaximum(u16),
    /// 0x22: the highest topic alias the sender accepts.
    TopicAliasMaximum(u16),
    /// 0x23: a number standing for a topic.
    TopicAlias(u16),
    /// 0x24: the highest QoS the server takes.
    MaximumQos(u8),
    /// 0x25: whether the server keeps retained messages.
    RetainAvailable(u8),
    /// 0x26: a name and a value, in order; may repeat.
    User(String, String),
    /// 0x27: the largest packet the sender accepts.
    MaximumPacketSize(u32),
    /// 0x28: whether the server takes wildcard subscriptions.
    WildcardAvailable(u8),
    /// 0x29: whether the server takes subscription identifiers.
    SubscriptionIdsAvailable(u8),
    /// 0x2A: whether the server takes shared subscriptions.
    SharedAvailable(u8),
}

/// A packet's properties, in the order they came.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Properties(pub Vec<Property>);

/// The identifiers a kind of packet may carry, one bit each (every
/// identifier is below 64), from the table in §2.2.2.2. Any other makes
/// the packet malformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowed(u64);

const fn bits(ids: &[u8]) -> Allowed {
    let mut mask = 1 << 0x26; // user properties go anywhere
    let mut i = 0;
    while i < ids.len() {
        mask |= 1 << ids[i];
        i += 1;
    }
    Allowed(mask)
}

impl Allowed {
    /// CONNECT's own properties.
    pub const CONNECT: Allowed = bits(&[0x11, 0x15, 0x16, 0x17, 0x19, 0x21, 0x22, 0x27]);
    /// CONNACK's.
    pub const CONNACK: Allowed = bits(&[
        0x11, 0x12, 0x13, 0x15, 0x16, 0x1A, 0x1C, 0x1F, 0x21, 0x22, 0x24, 0x25, 0x27, 0x28, 0x29,
        0x2A,
    ]);
    /// PUBLISH's.
    pub const PUBLISH: Allowed = bits(&[0x01, 0x02, 0x03, 0x08, 0x09, 0x0B, 0x23]);
    /// A will's, in CONNECT.
    pub const WILL: Allowed = bits(&[0x01, 0x02, 0x03, 0x08, 0x09, 0x18]);
    /// PUBACK, PUBREC, PUBREL, PUBCOMP, SUBACK and UNSUBACK's.
    pub const ACK: Allowed = bits(&[0x1F]);
    /// SUBSCRIBE's.
    pub const SUBSCRIBE: Allowed = bits(&[0x0B]);
    /// UNSUBSCRIBE's.
    pub const UNSUBSCRIBE: Allowed = bits(&[]);
    /// DISCONNECT's.
    pub const DISCONNECT: Allowed = bits(&[0x11, 0x1C, 0x1F]);
    /// AUTH's.
    pub const AUTH: Allowed = bits(&[0x15, 0x16, 0x1F]);
}

impl Properties {
    /// Reads the length and the properties of a packet that may carry
    /// the `allowed` ones.
    pub fn read(r: &mut Reader<'_>, allowed: Allowed) -> Result<Properties, MqttError> {
        let len = r.varint("property length")? as usize;
        if len > r.remaining() {
            return Err(MqttError::Malformed(
                "properties run past the packet's end".into(),
            ));
        }
        let end = r.remaining() - len;
        let mut list = Vec::new();
        // Every identifier is below 64: one bit each.
        let mut seen = 0u64;
        while r.remaining() > end {
            let p = read_one(r)?;
            let id = p.id();
            if allowed.0 & (1 << id) == 0 {
                return Err(MqttError::Malformed(format!(
                    "property {id:#04x} is not one this packet may carry"
                )));
            }
            // Only user properties and subscription identifiers may
            // repeat; any other twice in one packet is a Protocol Error
            // (§2.2.2.2, and each property's own paragraph in §3).
            if seen & (1 << id) != 0 && !matches!(id, 0x0B | 0x26) {
                return Err(MqttError::Protocol(format!(
                    "property {id:#04x} appears twice"
                )));
            }
            seen |= 1 << id;
            list.push(p);
        }
        if r.remaining() != end {
            return Err(MqttError::Malformed(
                "a property runs past the property length".into(),
            ));
        }
        Ok(Properties(list))
    }

    /// Writes the length and the properties.
    pub fn write(&self, dst: &mut BytesMut) {
        let mut body = BytesMut::new();
        for p in &self.0 {
            write_one(p, &mut body);
        }
        put_varint(dst, body.len() as u32);
        dst.put_slice(&body);
    }
}

fn read_one(r: &mut Reader<'_>) -> Result<Property, MqttError> {
    let id = r.varint("property identifier")?;
    Ok(match id {
        0x01 => Property::PayloadFormat(r.u8("payload format")?),
        0x02 => Property::MessageExpiry(r.u32("message expiry")?),
        0x03 => Property::ContentType(r.string("content type")?),
        0x08 => Property::ResponseTopic(r.string("response topic")?),
        0x09 => Property::CorrelationData(r.binary("correlation data")?),
        0x0B => {
            let id = r.varint("subscription identifier")?;
            if id == 0 {
                return Err(MqttError::Protocol("subscription identifier 0".into()));
            }
            Property::SubscriptionId(id)
        }
        0x11 => Property::SessionExpiry(r.u32("session expiry")?),
        0x12 => Property::AssignedClientId(r.string("assigned client id")?),
        0x13 => Property::ServerKeepAlive(r.u16("server keep alive")?),
        0x15 => Property::AuthMethod(r.string("authentication method")?),
        0x16 => Property::AuthData(r.binary("authentication data")?),
        0x17 => Property::RequestProblemInfo(flag(r, "request problem information")?),
        0x18 => Property::WillDelay(r.u32("will delay")?),
        0x19 => Property::RequestResponseInfo(flag(r, "request response information")?),
        0x1A => Property::ResponseInfo(r.string("response information")?),
        0x1C => Property::ServerReference(r.string("server reference")?),
        0x1F => Property::ReasonString(r.string("reason string")?),
        0x21 => match r.u16("receive maximum")? {
            0 => return Err(MqttError::Protocol("receive maximum 0".into())),
            n => Property::ReceiveMaximum(n),
        },
        0x22 => Property::TopicAliasMaximum(r.u16("topic alias maximum")?),
        0x23 => Property::TopicAlias(r.u16("topic alias")?),
        0x24 => Property::MaximumQos(r.u8("maximum QoS")?),
        0x25 => Property::RetainAvailable(r.u8("retain available")?),
        0x26 => Property::User(
            r.string("user property name")?,
            r.string("user property value")?,
        ),
        0x27 => match r.u32("maximum packet size")? {
            0 => return Err(MqttError::Protocol("maximum packet size 0".into())),
            n => Property::MaximumPacketSize(n),
        },
        0x28 => Property::WildcardAvailable(r.u8("wildcard subscription available")?),
        0x29 => Property::SubscriptionIdsAvailable(r.u8("subscription identifiers available")?),
        0x2A => Property::SharedAvailable(r.u8("shared subscription available")?),
        other => {
            return Err(MqttError::Malformed(format!(
                "unknown property identifier {other:#04x}"
            )))
        }
    })
}

/// A byte that may only be 0 or 1: anything else is a Protocol Error
/// (§3.1.2.11.6 and §3.1.2.11.7).
fn flag(r: &mut Reader<'_>, what: &'static str) -> Result<u8, MqttError> {
    match r.u8(what)? {
        v @ (0 | 1) => Ok(v),
        v => Err(MqttError::Protocol(format!("{what} {v}: only 0 or 1"))),
    }
}

impl Property {
    /// Its identifier.
    pub fn id(&self) -> u8 {
        match self {
            Property::PayloadFormat(_) => 0x01,
            Property::MessageExpiry(_) => 0x02,
            Property::ContentType(_) => 0x03,
            Property::ResponseTopic(_) => 0x08,
            Property::CorrelationData(_) => 0x09,
            Property::SubscriptionId(_) => 0x0B,
            Property::SessionExpiry(_) => 0x11,
            Property::AssignedClientId(_) => 0x12,
            Property::ServerKeepAlive(_) => 0x13,
            Property::AuthMethod(_) => 0x15,
            Property::AuthData(_) => 0x16,
            Property::RequestProblemInfo(_) => 0x17,
            Property::WillDelay(_) => 0x18,
            Property::RequestResponseInfo(_) => 0x19,
            Property::ResponseInfo(_) => 0x1A,
            Property::ServerReference(_) => 0x1C,
            Property::ReasonString(_) => 0x1F,
            Property::ReceiveMaximum(_) => 0x21,
            Property::TopicAliasMaximum(_) => 0x22,
            Property::TopicAlias(_) => 0x23,
            Property::MaximumQos(_) => 0x24,
            Property::RetainAvailable(_) => 0x25,
            Property::User(..) => 0x26,
            Property::MaximumPacketSize(_) => 0x27,
            Property::WildcardAvailable(_) => 0x28,
            Property::SubscriptionIdsAvailable(_) => 0x29,
            Property::SharedAvailable(_) => 0x2A,
        }
    }
}

fn write_one(p: &Property, dst: &mut BytesMut) {
    dst.put_u8(p.id());
    match p {
        Property::PayloadFormat(v)
        | Property::RequestProblemInfo(v)
        | Property::RequestResponseInfo(v)
        | Property::MaximumQos(v)
        | Property::RetainAvailable(v)
        | Property::WildcardAvailable(v)
        | Property::SubscriptionIdsAvailable(v)
        | Property::SharedAvailable(v) => dst.put_u8(*v),
        Property::MessageExpiry(v)
        | Property::SessionExpiry(v)
        | Property::WillDelay(v)
        | Property::MaximumPacketSize(v) => dst.put_u32(*v),
        Property::ServerKeepAlive(v)
        | Property::ReceiveMaximum(v)
        | Property::TopicAliasMaximum(v)
        | Property::TopicAlias(v) => dst.put_u16(*v),
        Property::SubscriptionId(v) => put_varint(dst, *v),
        Property::ContentType(v)
        | Property::ResponseTopic(v)
        | Property::AssignedClientId(v)
        | Property::AuthMethod(v)
        | Property::ResponseInfo(v)
        | Property::ServerReference(v)
        | Property::ReasonString(v) => put_binary(dst, v.as_bytes()),
        Property::CorrelationData(v) | Property::AuthData(v) => put_binary(dst, v),
        Property::User(k, v) => {
            put_binary(dst, k.as_bytes());
            put_binary(dst, v.as_bytes());
        }
    }
}
