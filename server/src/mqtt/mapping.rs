//! MQTT PUBLISH ↔ Herald messages: the one place that knows which MQTT
//! field is which JMS header. MQTT 5.0's user properties are string
//! properties; QoS 1 and 2 are persistent messages.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use crate::frontend::chunks::Chunks;
use crate::frontend::correlation::{set_correlation_data, unhex, CORRELATION_HEX_PROPERTY};
use herald_protocol::message::CONTENT_TYPE_PROPERTY;
use herald_protocol::message::{BodyRef, MessageRef};
use herald_protocol::mqtt::{topic, Properties, Property, Publish, QoS, Version};
use herald_protocol::value::ValueRef;
use herald_protocol::{
    Body, DeliveryMode, Destination, DestinationKind, Message, MessageId, MessageView, Stamp,
};

/// The property that marks a message published at QoS 2, so that an
/// MQTT subscriber at QoS 2 gets it at 2 (any other persistent message is
/// QoS 1, a non-persistent one QoS 0).
pub const QOS_PROPERTY: &str = "HeraldMqttQoS";

/// Why a PUBLISH does not make a message; each has its 5.0 reason code.
#[derive(Debug, thiserror::Error)]
pub enum MappingError {
    /// The payload says it is UTF-8 and is not (0x99).
    #[error("the payload format indicator says UTF-8, and the payload is not")]
    PayloadFormat,
    /// The topic makes an invalid Herald name, or the message is too big
    /// (0x90 or 0x95).
    #[error(transparent)]
    Message(#[from] herald_protocol::Error),
}

impl MappingError {
    /// The MQTT 5.0 reason code.
    pub fn reason(&self) -> u8 {
        match self {
            MappingError::PayloadFormat => 0x99,
            MappingError::Message(_) => 0x90,
        }
    }
}

/// Milliseconds since the epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The message block of a PUBLISH on `topic` (its alias resolved), its
/// id `id`: a prefix and a number, so that no string is made for it. The
/// block is written into `chunks`.
pub fn message_from(
    publish: &Publish,
    topic: &str,
    id: (&str, u64),
    now: i64,
    chunks: &mut Chunks,
) -> Result<MessageView, MappingError> {
    let mut content_type = None;
    let mut utf8 = false;
    let mut m = Message::new(Body::Empty);
    for p in &publish.properties.0 {
        match p {
            Property::PayloadFormat(f) => utf8 = *f == 1,
            Property::ContentType(ct) => content_type = Some(ct.clone()),
            Property::ResponseTopic(t) => {
                let (kind, name) = topic::to_destination(t);
                m.set_reply_to(Some(Destination { kind, name }))
            }
            Property::CorrelationData(data) => set_correlation_data(&mut m, data),
            Property::MessageExpiry(secs) => {
                m.expiration = now.saturating_add(i64::from(*secs) * 1000)
            }
            Property::User(name, value) => m.set_property(name.as_str(), value.as_str()),
            _ => {}
        }
    }
    let payload = &publish.payload;
    m.body = match std::str::from_utf8(payload) {
        // An empty payload said to be UTF-8 is an empty text, so that its
        // subscribers get the indicator too [MQTT-3.3.2-4].
        _ if payload.is_empty() && !utf8 => Body::Empty,
        Ok(text) if utf8 => Body::Text(text.to_owned()),
        Err(_) if utf8 => return Err(MappingError::PayloadFormat),
        _ => Body::Bytes(payload.clone()),
    };
    if let Some(ct) = content_type {
        m.set_property(CONTENT_TYPE_PROPERTY, ct);
    }
    if publish.qos != QoS::AtMostOnce {
        m.delivery_mode = DeliveryMode::Persistent;
    }
    if publish.qos == QoS::ExactlyOnce {
        m.set_property(QOS_PROPERTY, 2i32);
    }
    let (kind, name) = topic::to_destination(topic);
    // A queue keeps no retained message.
    m.retain = publish.retain && kind == DestinationKind::Topic;
    let destination = Destination { kind, name };
    let stamp = Stamp {
        destination: &destination,
        message_id: MessageId::Numbered(id.0, id.1),
        timestamp: now,
        delivery_time: 0,
    };
    // Room for the headers as well as the body.
    let block = chunks.room(payload.len() + 2 * topic.len() + 128);
    if let Err(e) = m.encode_stamped(&stamp, block) {
        block.clear();
        return Err(e.into());
    }
    Ok(MessageView::parse(chunks.cut())?)
}

/// The QoS a message was published with, as far as MQTT goes.
pub fn published_qos(m: &MessageRef<'_>) -> QoS {
    if m.delivery_mode() == DeliveryMode::NonPersistent {
        return QoS::AtMostOnce;
    }
    let two = m
        .properties
        .clone()
        .any(|(name, value)| name == QOS_PROPERTY && value == ValueRef::I32(2));
    match two {
        true => QoS::ExactlyOnce,
        false => QoS::AtLeastOnce,
    }
}

/// How one delivery goes out.
pub struct Outgoing {
    /// At what QoS.
    pub qos: QoS,
    /// Its packet id, for QoS 1 and 2.
    pub packet_id: Option<u16>,
    /// Delivered before.
    pub dup: bool,
    /// The subscription asked for the retain flag as published.
    pub retain_as_published: bool,
    /// The subscription's identifier, if the client gave it one.
    pub subscription_id: Option<u32>,
}

/// The PUBLISH for one delivery of message `m`, read from `block`: the
/// payload shares the block's bytes.
pub fn publish_from(
    m: &MessageRef<'_>,
    block: &Bytes,
    how: &Outgoing,
    version: Version,
) -> Publish {
    let mut properties = Vec::new();
    let (payload, text) = match &m.body {
        // A streamed body is read into the block, or marked as not
        // carried, before a delivery gets here (`frontend::streams::inline`).
        BodyRef::Empty | BodyRef::Stream(_) => (Bytes::new(), false),
        BodyRef::Bytes(range) => (block.slice(range.clone()), false),
        BodyRef::Text(t) => (block.slice_ref(t.as_bytes()), true),
        BodyRef::Map(entries) => {
            let text: String = entries
                .clone()
                .map(|(k, v)| format!("{k}={}\n", v.to_owned()))
                .collect();
            (Bytes::from(text), true)
        }
    };
    if version == Version::V5 {
        if text {
            properties.push(Property::PayloadFormat(1));
        }
        if let Some(id) = how.subscription_id {
            properties.push(Property::SubscriptionId(id));
        }
        if m.expiration != 0 {
            let left = (m.expiration - now_ms()).max(1000);
            let secs = u32::try_from((left + 999) / 1000).unwrap_or(u32::MAX);
            properties.push(Property::MessageExpiry(secs));
        }
        if let Some((kind, name)) = m.reply_to {
            properties.push(Property::ResponseTopic(topic::from_destination(kind, name)));
        }
        if let Some(c) = m.correlation_id {
            properties.push(Property::CorrelationData(Bytes::copy_from_slice(
                c.as_bytes(),
            )));
        }
        for (name, value) in m.properties.clone() {
            match (name, value) {
                (CONTENT_TYPE_PROPERTY, ValueRef::String(ct)) => {
                    properties.push(Property::ContentType(ct.to_owned()))
                }
                (CORRELATION_HEX_PROPERTY, ValueRef::String(h)) => match unhex(h) {
                    Some(data) => properties.push(Property::CorrelationData(data)),
                    None => properties.push(Property::User(name.to_owned(), h.to_owned())),
                },
                (QOS_PROPERTY, _) => {}
                _ => properties.push(Property::User(
                    name.to_owned(),
                    value.to_owned().to_string(),
                )),
            }
        }
    }
    Publish {
        dup: how.dup,
        qos: how.qos,
        retain: m.kept() || (how.retain_as_published && m.retain()),
        topic: topic::from_herald(m.destination),
        packet_id: how.packet_id,
        properties: Properties(properties),
        payload,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn publish(qos: QoS, properties: Vec<Property>, payload: &'static [u8]) -> Publish {
        Publish {
            dup: false,
            qos,
            retain: true,
            topic: "a/b.c".into(),
            packet_id: (qos != QoS::AtMostOnce).then_some(7),
            properties: Properties(properties),
            payload: Bytes::from_static(payload),
        }
    }

    fn round_trip(p: &Publish, version: Version) -> Publish {
        let view =
            message_from(p, &p.topic, ("ID:x-", 1), now_ms(), &mut Chunks::default()).unwrap();
        let m = MessageRef::read(view.block()).unwrap();
        let how = Outgoing {
            qos: published_qos(&m),
            packet_id: p.packet_id,
            dup: false,
            retain_as_published: true,
            subscription_id: None,
        };
        publish_from(&m, view.block(), &how, version)
    }

    #[test]
    fn a_publish_survives_the_trip_through_a_herald_message() {
        let p = publish(
            QoS::ExactlyOnce,
            vec![
                Property::PayloadFormat(1),
                Property::ContentType("application/json; charset=utf-8".into()),
                Property::ResponseTopic("re/ply".into()),
                Property::CorrelationData(Bytes::from_static(&[0, 0xff, 1])),
                Property::User("k".into(), "v".into()),
            ],
            "{\"é\":1}".as_bytes(),
        );
        let back = round_trip(&p, Version::V5);
        assert_eq!(back.topic, "a/b.c");
        assert_eq!(back.qos, QoS::ExactlyOnce);
        assert!(back.retain);
        assert_eq!(back.payload, p.payload);
        for property in &p.properties.0 {
            assert!(back.properties.0.contains(property), "{property:?} lost");
        }
        // Binary, at QoS 1, through 3.1.1: no properties there.
        let p = publish(QoS::AtLeastOnce, vec![], b"\0\xff");
        let back = round_trip(&p, Version::V311);
        assert_eq!((back.qos, back.payload), (QoS::AtLeastOnce, p.payload));
        assert!(back.properties.0.is_empty());
    }

    /// [MQTT-3.3.2-4]: the Payload Format Indicator and the Content Type
    /// go to every subscriber unaltered, at every QoS, an empty payload's
    /// too; a payload that says nothing gets no indicator.
    #[test]
    fn an_empty_payloads_format_indicator_and_content_type_go_on() {
        for qos in [QoS::AtMostOnce, QoS::AtLeastOnce, QoS::ExactlyOnce] {
            let said = vec![
                Property::PayloadFormat(1),
                Property::ContentType("text/plain".into()),
            ];
            let back = round_trip(&publish(qos, said.clone(), b""), Version::V5);
            assert!(back.payload.is_empty());
            for property in &said {
                assert!(
                    back.properties.0.contains(property),
                    "{qos:?}: {property:?} lost"
                );
            }
            let back = round_trip(&publish(qos, vec![], b""), Version::V5);
            assert!(back.payload.is_empty());
            assert!(
                !back
                    .properties
                    .0
                    .iter()
                    .any(|p| matches!(p, Property::PayloadFormat(_))),
                "{qos:?}: an indicator nobody gave"
            );
        }
    }

    #[test]
    fn a_payload_that_says_utf8_and_is_not_is_refused() {
        let p = publish(QoS::AtMostOnce, vec![Property::PayloadFormat(1)], b"\xff");
        let e = message_from(&p, &p.topic, ("ID:x-", 1), 0, &mut Chunks::default()).unwrap_err();
        assert_eq!(e.reason(), 0x99);
    }
}
