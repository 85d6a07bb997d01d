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

impl Properties {
    /// Reads the length and the properties.
    pub fn read(r: &mut Reader<'_>) -> Result<Properties, MqttError> {
        let len = r.varint("property length")? as usize;
        if len > r.remaining() {
            return Err(MqttError::Malformed(
                "properties run past the packet's end".into(),
            ));
        }
        let end = r.remaining() - len;
        let mut list = Vec::new();
        while r.remaining() > end {
            list.push(read_one(r)?);
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
        0x17 => Property::RequestProblemInfo(r.u8("request problem information")?),
        0x18 => Property::WillDelay(r.u32("will delay")?),
        0x19 => Property::RequestResponseInfo(r.u8("request response information")?),
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

fn write_one(p: &Property, dst: &mut BytesMut) {
    let byte = |dst: &mut BytesMut, id: u8, v: u8| {
        dst.put_u8(id);
        dst.put_u8(v);
    };
    let text = |dst: &mut BytesMut, id: u8, v: &[u8]| {
        dst.put_u8(id);
        put_binary(dst, v);
    };
    match p {
        Property::PayloadFormat(v) => byte(dst, 0x01, *v),
        Property::MessageExpiry(v) => {
            dst.put_u8(0x02);
            dst.put_u32(*v);
        }
        Property::ContentType(v) => text(dst, 0x03, v.as_bytes()),
        Property::ResponseTopic(v) => text(dst, 0x08, v.as_bytes()),
        Property::CorrelationData(v) => text(dst, 0x09, v),
        Property::SubscriptionId(v) => {
            dst.put_u8(0x0B);
            put_varint(dst, *v);
        }
        Property::SessionExpiry(v) => {
            dst.put_u8(0x11);
            dst.put_u32(*v);
        }
        Property::AssignedClientId(v) => text(dst, 0x12, v.as_bytes()),
        Property::ServerKeepAlive(v) => {
            dst.put_u8(0x13);
            dst.put_u16(*v);
        }
        Property::AuthMethod(v) => text(dst, 0x15, v.as_bytes()),
        Property::AuthData(v) => text(dst, 0x16, v),
        Property::RequestProblemInfo(v) => byte(dst, 0x17, *v),
        Property::WillDelay(v) => {
            dst.put_u8(0x18);
            dst.put_u32(*v);
        }
        Property::RequestResponseInfo(v) => byte(dst, 0x19, *v),
        Property::ResponseInfo(v) => text(dst, 0x1A, v.as_bytes()),
        Property::ServerReference(v) => text(dst, 0x1C, v.as_bytes()),
        Property::ReasonString(v) => text(dst, 0x1F, v.as_bytes()),
        Property::ReceiveMaximum(v) => {
            dst.put_u8(0x21);
            dst.put_u16(*v);
        }
        Property::TopicAliasMaximum(v) => {
            dst.put_u8(0x22);
            dst.put_u16(*v);
        }
        Property::TopicAlias(v) => {
            dst.put_u8(0x23);
            dst.put_u16(*v);
        }
        Property::MaximumQos(v) => byte(dst, 0x24, *v),
        Property::RetainAvailable(v) => byte(dst, 0x25, *v),
        Property::User(k, v) => {
            text(dst, 0x26, k.as_bytes());
            put_binary(dst, v.as_bytes());
        }
        Property::MaximumPacketSize(v) => {
            dst.put_u8(0x27);
            dst.put_u32(*v);
        }
        Property::WildcardAvailable(v) => byte(dst, 0x28, *v),
        Property::SubscriptionIdsAvailable(v) => byte(dst, 0x29, *v),
        Property::SharedAvailable(v) => byte(dst, 0x2A, *v),
    }
}
