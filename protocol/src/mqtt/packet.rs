//! The packets, and their bodies' decoding and encoding (MQTT 3.1.1 §3,
//! MQTT 5.0 §3). Only the fields of the connection's version are read
//! and written: properties and reason codes exist in 5.0 only.

use bytes::{BufMut, Bytes, BytesMut};

use super::properties::{Allowed, Properties};
use super::wire::{put_binary, Reader};
use super::{MqttError, QoS, Version};

/// One MQTT control packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet {
    /// 1: a client asks to connect.
    Connect(Box<Connect>),
    /// 2: the server's answer.
    ConnAck(ConnAck),
    /// 3: a message.
    Publish(Publish),
    /// 4: QoS 1 done.
    PubAck(Ack),
    /// 5: QoS 2, received.
    PubRec(Ack),
    /// 6: QoS 2, release.
    PubRel(Ack),
    /// 7: QoS 2, complete.
    PubComp(Ack),
    /// 8: subscribe to filters.
    Subscribe(Subscribe),
    /// 9: the subscription's outcome per filter.
    SubAck(SubAck),
    /// 10: unsubscribe from filters.
    Unsubscribe(Unsubscribe),
    /// 11: the outcome per filter.
    UnsubAck(UnsubAck),
    /// 12: keep-alive.
    PingReq,
    /// 13: its answer.
    PingResp,
    /// 14: the connection ends.
    Disconnect(Disconnect),
    /// 15: extended authentication (5.0): its reason code and properties.
    Auth(u8, Properties),
}

/// CONNECT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connect {
    /// The protocol level.
    pub version: Version,
    /// 3.1.1's clean session, 5.0's clean start.
    pub clean: bool,
    /// Seconds between packets before the server may close (0 = none).
    pub keep_alive: u16,
    /// 5.0: session expiry, receive maximum, maximum packet size, ...
    pub properties: Properties,
    /// The client id ("" = let the server choose).
    pub client_id: String,
    /// The will message, if any.
    pub will: Option<Will>,
    /// The user name.
    pub username: Option<String>,
    /// The password.
    pub password: Option<Bytes>,
}

/// A will message: published if the connection ends without DISCONNECT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Will {
    /// Where.
    pub topic: String,
    /// What.
    pub payload: Bytes,
    /// Its QoS.
    pub qos: QoS,
    /// Whether it is retained.
    pub retain: bool,
    /// 5.0: will delay, message expiry, content type, ...
    pub properties: Properties,
}

/// CONNACK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnAck {
    /// The server had a session for this client id.
    pub session_present: bool,
    /// 0 = accepted; else 3.1.1's return code or 5.0's reason code.
    pub code: u8,
    /// 5.0: what the server allows and assigned.
    pub properties: Properties,
}

/// PUBLISH.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publish {
    /// A redelivery of a QoS 1 or 2 publish.
    pub dup: bool,
    /// Its QoS.
    pub qos: QoS,
    /// Retain it as the topic's last message.
    pub retain: bool,
    /// The topic ("" in 5.0 when a topic alias stands for it).
    pub topic: String,
    /// For QoS 1 and 2.
    pub packet_id: Option<u16>,
    /// 5.0: expiry, content type, response topic, user properties, ...
    pub properties: Properties,
    /// The payload.
    pub payload: Bytes,
}

/// PUBACK, PUBREC, PUBREL or PUBCOMP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    /// The publish it is about.
    pub packet_id: u16,
    /// 5.0's reason code (0 = success; always 0 in 3.1.1).
    pub reason: u8,
    /// 5.0: reason string, user properties.
    pub properties: Properties,
}

impl Ack {
    /// A successful acknowledgement of `packet_id`.
    pub fn ok(packet_id: u16) -> Ack {
        Ack {
            packet_id,
            reason: 0,
            properties: Properties::default(),
        }
    }
}

/// A subscription's options (its byte after the filter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubscribeOptions {
    /// The highest QoS the client takes on it.
    pub qos: QoS,
    /// 5.0: not its own publishes.
    pub no_local: bool,
    /// 5.0: keep the retain flag as published.
    pub retain_as_published: bool,
    /// 5.0: retained messages at subscribe: 0 always, 1 if new, 2 never.
    pub retain_handling: u8,
}

/// SUBSCRIBE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscribe {
    /// Its packet id.
    pub packet_id: u16,
    /// 5.0: subscription identifier, user properties.
    pub properties: Properties,
    /// The filters and their options.
    pub filters: Vec<(String, SubscribeOptions)>,
}

/// SUBACK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubAck {
    /// The SUBSCRIBE's packet id.
    pub packet_id: u16,
    /// 5.0: reason string, user properties.
    pub properties: Properties,
    /// Per filter: the granted QoS, or a failure code (0x80 in 3.1.1).
    pub codes: Vec<u8>,
}

/// UNSUBSCRIBE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsubscribe {
    /// Its packet id.
    pub packet_id: u16,
    /// 5.0: user properties.
    pub properties: Properties,
    /// The filters.
    pub filters: Vec<String>,
}

/// UNSUBACK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsubAck {
    /// The UNSUBSCRIBE's packet id.
    pub packet_id: u16,
    /// 5.0: reason string, user properties.
    pub properties: Properties,
    /// 5.0: per filter, its reason code (none in 3.1.1).
    pub codes: Vec<u8>,
}

/// DISCONNECT.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Disconnect {
    /// 5.0's reason code (0 = normal).
    pub reason: u8,
    /// 5.0: session expiry, reason string, server reference, ...
    pub properties: Properties,
}

/// Decodes a body; `version` is `None` only for CONNECT.
pub(super) fn decode(
    first: u8,
    body: &Bytes,
    version: Option<Version>,
) -> Result<Packet, MqttError> {
    let (kind, flags) = (first >> 4, first & 0x0f);
    let r = &mut Reader::new(body);
    let v5 = version == Some(Version::V5);
    let expect_flags = |want: u8| match flags == want {
        true => Ok(()),
        false => Err(MqttError::Malformed(format!(
            "packet type {kind} with flags {flags:#06b}, not {want:#06b}"
        ))),
    };
    let props = |r: &mut Reader<'_>, allowed| match v5 {
        true => Properties::read(r, allowed),
        false => Ok(Properties::default()),
    };
    let packet = match kind {
        1 => {
            expect_flags(0)?;
            Packet::Connect(Box::new(connect(r)?))
        }
        2 => {
            expect_flags(0)?;
            let ack_flags = r.u8("acknowledge flags")?;
            if ack_flags & 0xfe != 0 {
                return Err(MqttError::Malformed("CONNACK's reserved flags set".into()));
            }
            Packet::ConnAck(ConnAck {
                session_present: ack_flags & 1 == 1,
                code: r.u8("return code")?,
                properties: props(r, Allowed::CONNACK)?,
            })
        }
        3 => Packet::Publish(publish(flags, r, v5)?),
        4..=7 => {
            expect_flags(if kind == 6 { 0b0010 } else { 0 })?;
            let packet_id = r.u16("packet id")?;
            let (reason, properties) = match v5 {
                true => reason_and_properties(r, Allowed::ACK)?,
                false => (0, Properties::default()),
            };
            let ack = Ack {
                packet_id,
                reason,
                properties,
            };
            match kind {
                4 => Packet::PubAck(ack),
                5 => Packet::PubRec(ack),
                6 => Packet::PubRel(ack),
                _ => Packet::PubComp(ack),
            }
        }
        8 => {
            expect_flags(0b0010)?;
            let packet_id = r.u16("packet id")?;
            let properties = props(r, Allowed::SUBSCRIBE)?;
            let filters = filters(r, "SUBSCRIBE", |r| {
                let filter = r.string("topic filter")?;
                Ok((
                    filter,
                    subscribe_options(r.u8("subscription options")?, v5)?,
                ))
            })?;
            Packet::Subscribe(Subscribe {
                packet_id,
                properties,
                filters,
            })
        }
        9 => {
            expect_flags(0)?;
            let packet_id = r.u16("packet id")?;
            let properties = props(r, Allowed::ACK)?;
            let codes = r.rest().to_vec();
            Packet::SubAck(SubAck {
                packet_id,
                properties,
                codes,
            })
        }
        10 => {
            expect_flags(0b0010)?;
            let packet_id = r.u16("packet id")?;
            let properties = props(r, Allowed::UNSUBSCRIBE)?;
            let filters = filters(r, "UNSUBSCRIBE", |r| r.string("topic filter"))?;
            Packet::Unsubscribe(Unsubscribe {
                packet_id,
                properties,
                filters,
            })
        }
        11 => {
            expect_flags(0)?;
            let packet_id = r.u16("packet id")?;
            let properties = props(r, Allowed::ACK)?;
            let codes = match v5 {
                true => r.rest().to_vec(),
                false => Vec::new(),
            };
            Packet::UnsubAck(UnsubAck {
                packet_id,
                properties,
                codes,
            })
        }
        12 => {
            expect_flags(0)?;
            Packet::PingReq
        }
        13 => {
            expect_flags(0)?;
            Packet::PingResp
        }
        14 => {
            expect_flags(0)?;
            let (reason, properties) = match v5 {
                true => reason_and_properties(r, Allowed::DISCONNECT)?,
                false => (0, Properties::default()),
            };
            Packet::Disconnect(Disconnect { reason, properties })
        }
        15 if v5 => {
            expect_flags(0)?;
            let (reason, properties) = reason_and_properties(r, Allowed::AUTH)?;
            Packet::Auth(reason, properties)
        }
        other => return Err(MqttError::Malformed(format!("unknown packet type {other}"))),
    };
    if r.remaining() > 0 {
        return Err(MqttError::Malformed(format!(
            "{} bytes past the end of packet type {kind}",
            r.remaining()
        )));
    }
    Ok(packet)
}

/// 5.0's reason code and properties, either of which a packet may leave
/// out at its end (success, no properties).
fn reason_and_properties(
    r: &mut Reader<'_>,
    allowed: Allowed,
) -> Result<(u8, Properties), MqttError> {
    let reason = match r.remaining() {
        0 => 0,
        _ => r.u8("reason code")?,
    };
    let properties = match r.remaining() {
        0 => Properties::default(),
        _ => Properties::read(r, allowed)?,
    };
    Ok((reason, properties))
}

/// The topic filters of a SUBSCRIBE or UNSUBSCRIBE, to the packet's end:
/// at least one.
fn filters<T>(
    r: &mut Reader<'_>,
    packet: &str,
    mut item: impl FnMut(&mut Reader<'_>) -> Result<T, MqttError>,
) -> Result<Vec<T>, MqttError> {
    let mut list = Vec::new();
    while r.remaining() > 0 {
        list.push(item(r)?);
    }
    if list.is_empty() {
        return Err(MqttError::Protocol(format!(
            "{packet} without a topic filter"
        )));
    }
    Ok(list)
}

fn connect(r: &mut Reader<'_>) -> Result<Connect, MqttError> {
    let name = r.string("protocol name")?;
    let level = r.u8("protocol level")?;
    let version = match (name.as_str(), level) {
        ("MQTT", 4) => Version::V311,
        ("MQTT", 5) => Version::V5,
        ("MQTT" | "MQIsdp", level) => return Err(MqttError::UnsupportedVersion(level)),
        (other, _) => {
            return Err(MqttError::Protocol(format!(
                "protocol name '{other}', not 'MQTT'"
            )))
        }
    };
    let v5 = version == Version::V5;
    let flags = r.u8("connect flags")?;
    if flags & 1 != 0 {
        return Err(MqttError::Malformed("CONNECT's reserved flag set".into()));
    }
    let will_flag = flags & 0b100 != 0;
    let will_qos = QoS::from_bits((flags >> 3) & 0b11)?;
    let will_retain = flags & 0b10_0000 != 0;
    if !will_flag && (will_qos != QoS::AtMostOnce || will_retain) {
        return Err(MqttError::Malformed(
            "will QoS or retain without a will".into(),
        ));
    }
    let (has_user, has_password) = (flags & 0x80 != 0, flags & 0x40 != 0);
    if !v5 && has_password && !has_user {
        return Err(MqttError::Malformed(
            "a password without a user name".into(),
        ));
    }
    let keep_alive = r.u16("keep alive")?;
    let properties = match v5 {
        true => Properties::read(r, Allowed::CONNECT)?,
        false => Properties::default(),
    };
    let client_id = r.string("client id")?;
    let will = match will_flag {
        true => {
            let properties = match v5 {
                true => Properties::read(r, Allowed::WILL)?,
                false => Properties::default(),
            };
            check_response_topic(&properties)?;
            let topic = r.string("will topic")?;
            check_topic_name(&topic)?;
            Some(Will {
                properties,
                topic,
                payload: r.binary("will payload")?,
                qos: will_qos,
                retain: will_retain,
            })
        }
        false => None,
    };
    let username = has_user.then(|| r.string("user name")).transpose()?;
    let password = has_password.then(|| r.binary("password")).transpose()?;
    Ok(Connect {
        version,
        clean: flags & 0b10 != 0,
        keep_alive,
        properties,
        client_id,
        will,
        username,
        password,
    })
}

fn publish(flags: u8, r: &mut Reader<'_>, v5: bool) -> Result<Publish, MqttError> {
    let qos = QoS::from_bits((flags >> 1) & 0b11)?;
    let dup = flags & 0b1000 != 0;
    if dup && qos == QoS::AtMostOnce {
        return Err(MqttError::Malformed("DUP on a QoS 0 PUBLISH".into()));
    }
    let topic = r.string("topic name")?;
    check_topic_name(&topic)?;
    let packet_id = match qos {
        QoS::AtMostOnce => None,
        _ => match r.u16("packet id")? {
            0 => return Err(MqttError::Malformed("packet id 0".into())),
            id => Some(id),
        },
    };
    let properties = match v5 {
        true => Properties::read(r, Allowed::PUBLISH)?,
        false => Properties::default(),
    };
    check_response_topic(&properties)?;
    let aliased = properties
        .0
        .iter()
        .any(|p| matches!(p, super::Property::TopicAlias(_)));
    if topic.is_empty() && !aliased {
        return Err(MqttError::TopicName("an empty topic name".into()));
    }
    Ok(Publish {
        dup,
        qos,
        retain: flags & 1 != 0,
        topic,
        packet_id,
        properties,
        payload: r.rest(),
    })
}

/// A topic name holds no wildcard: only filters may.
fn check_topic_name(topic: &str) -> Result<(), MqttError> {
    match super::topic::has_wildcard(topic) {
        true => Err(MqttError::TopicName(format!(
            "'{topic}' has a wildcard: only subscriptions may use + and #"
        ))),
        false => Ok(()),
    }
}

/// "The Response Topic MUST NOT contain wildcard characters"
/// [MQTT-3.3.2-14], in a PUBLISH or a will: a Protocol Error.
fn check_response_topic(properties: &Properties) -> Result<(), MqttError> {
    for p in &properties.0 {
        if let super::Property::ResponseTopic(t) = p {
            if super::topic::has_wildcard(t) {
                return Err(MqttError::Protocol(format!(
                    "the response topic '{t}' has a wildcard [MQTT-3.3.2-14]"
                )));
            }
        }
    }
    Ok(())
}

fn subscribe_options(b: u8, v5: bool) -> Result<SubscribeOptions, MqttError> {
    let reserved = if v5 { 0b1100_0000 } else { 0b1111_1100 };
    if b & reserved != 0 {
        return Err(MqttError::Malformed(format!(
            "subscription options {b:#010b} set reserved bits"
        )));
    }
    let retain_handling = (b >> 4) & 0b11;
    if retain_handling == 3 {
        return Err(MqttError::Protocol("retain handling 3".into()));
    }
    Ok(SubscribeOptions {
        qos: QoS::from_bits(b & 0b11)?,
        no_local: b & 0b100 != 0,
        retain_as_published: b & 0b1000 != 0,
        retain_handling,
    })
}

/// Writes a packet's body; returns its fixed header's first byte.
pub(super) fn encode_body(packet: &Packet, version: Version, b: &mut BytesMut) -> u8 {
    let v5 = version == Version::V5;
    let props = |p: &Properties, b: &mut BytesMut| {
        if v5 {
            p.write(b);
        }
    };
    match packet {
        Packet::Connect(c) => {
            put_binary(b, b"MQTT");
            b.put_u8(c.version.level());
            let mut flags = 0u8;
            if c.clean {
                flags |= 0b10;
            }
            if let Some(w) = &c.will {
                flags |= 0b100 | (w.qos as u8) << 3;
                if w.retain {
                    flags |= 0b10_0000;
                }
            }
            if c.password.is_some() {
                flags |= 0x40;
            }
            if c.username.is_some() {
                flags |= 0x80;
            }
            b.put_u8(flags);
            b.put_u16(c.keep_alive);
            props(&c.properties, b);
            put_binary(b, c.client_id.as_bytes());
            if let Some(w) = &c.will {
                props(&w.properties, b);
                put_binary(b, w.topic.as_bytes());
                put_binary(b, &w.payload);
            }
            if let Some(u) = &c.username {
                put_binary(b, u.as_bytes());
            }
            if let Some(p) = &c.password {
                put_binary(b, p);
            }
            0x10
        }
        Packet::ConnAck(a) => {
            b.put_u8(u8::from(a.session_present));
            b.put_u8(a.code);
            props(&a.properties, b);
            0x20
        }
        Packet::Publish(p) => {
            put_binary(b, p.topic.as_bytes());
            if let Some(id) = p.packet_id {
                b.put_u16(id);
            }
            props(&p.properties, b);
            b.put_slice(&p.payload);
            0x30 | u8::from(p.dup) << 3 | (p.qos as u8) << 1 | u8::from(p.retain)
        }
        Packet::PubAck(a) | Packet::PubRec(a) | Packet::PubRel(a) | Packet::PubComp(a) => {
            b.put_u16(a.packet_id);
            // 5.0 leaves out a success without properties.
            if v5 && (a.reason != 0 || !a.properties.0.is_empty()) {
                b.put_u8(a.reason);
                a.properties.write(b);
            }
            match packet {
                Packet::PubAck(_) => 0x40,
                Packet::PubRec(_) => 0x50,
                Packet::PubRel(_) => 0x62,
                _ => 0x70,
            }
        }
        Packet::Subscribe(s) => {
            b.put_u16(s.packet_id);
            props(&s.properties, b);
            for (filter, o) in &s.filters {
                put_binary(b, filter.as_bytes());
                b.put_u8(
                    o.qos as u8
                        | u8::from(o.no_local) << 2
                        | u8::from(o.retain_as_published) << 3
                        | o.retain_handling << 4,
                );
            }
            0x82
        }
        Packet::SubAck(s) => {
            b.put_u16(s.packet_id);
            props(&s.properties, b);
            b.put_slice(&s.codes);
            0x90
        }
        Packet::Unsubscribe(u) => {
            b.put_u16(u.packet_id);
            props(&u.properties, b);
            for filter in &u.filters {
                put_binary(b, filter.as_bytes());
            }
            0xa2
        }
        Packet::UnsubAck(u) => {
            b.put_u16(u.packet_id);
            if v5 {
                u.properties.write(b);
                b.put_slice(&u.codes);
            }
            0xb0
        }
        Packet::PingReq => 0xc0,
        Packet::PingResp => 0xd0,
        Packet::Disconnect(d) => {
            if v5 && (d.reason != 0 || !d.properties.0.is_empty()) {
                b.put_u8(d.reason);
                d.properties.write(b);
            }
            0xe0
        }
        Packet::Auth(reason, properties) => {
            b.put_u8(*reason);
            properties.write(b);
            0xf0
        }
    }
}
