//! MQTT 3.1.1 and 5.0 packets: the types, an incremental decoder (bytes
//! in, whole packets out, with the size limit checked before a byte of
//! the body is buffered) and the encoder.
//!
//! Pure code, like the rest of the crate. A decode error says which MQTT
//! 5.0 reason code the server answers it with ([`MqttError::reason`]);
//! an MQTT 3.1.1 server closes the connection instead (only CONNECT's
//! errors have a return code there).

mod packet;
mod properties;
pub mod topic;
pub mod wire;

pub use packet::{
    Ack, ConnAck, Connect, Disconnect, Packet, Publish, SubAck, Subscribe, SubscribeOptions,
    UnsubAck, Unsubscribe, Will,
};
pub use properties::{Allowed, Properties, Property};

use bytes::{Bytes, BytesMut};
use thiserror::Error;

use wire::MAX_VARINT;

/// The protocol level a client connected with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Version {
    /// MQTT 3.1.1 (protocol level 4).
    V311,
    /// MQTT 5.0 (protocol level 5).
    V5,
}

impl Version {
    /// The protocol level byte of CONNECT.
    pub fn level(self) -> u8 {
        match self {
            Version::V311 => 4,
            Version::V5 => 5,
        }
    }
}

/// Quality of service: how often a message may arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum QoS {
    /// At most once.
    AtMostOnce = 0,
    /// At least once (PUBACK).
    AtLeastOnce = 1,
    /// Exactly once (PUBREC, PUBREL, PUBCOMP).
    ExactlyOnce = 2,
}

impl QoS {
    /// The QoS of two bits; 3 is malformed.
    pub fn from_bits(bits: u8) -> Result<QoS, MqttError> {
        match bits {
            0 => Ok(QoS::AtMostOnce),
            1 => Ok(QoS::AtLeastOnce),
            2 => Ok(QoS::ExactlyOnce),
            _ => Err(MqttError::Malformed("QoS 3".into())),
        }
    }
}

/// Why a packet was not taken. Each kind has its MQTT 5.0 reason code.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MqttError {
    /// The bytes do not follow the packet format (reason 0x81).
    #[error("malformed packet: {0}")]
    Malformed(String),
    /// A well-formed packet the protocol does not allow here (0x82).
    #[error("protocol error: {0}")]
    Protocol(String),
    /// CONNECT for a protocol other than MQTT 3.1.1 or 5.0 (0x84, or
    /// 3.1.1's return code 1).
    #[error("unsupported protocol level {0} (3.1.1 and 5.0 are)")]
    UnsupportedVersion(u8),
    /// A packet over the size limit (0x95).
    #[error("packet of {size} bytes exceeds the limit of {max}")]
    TooLarge {
        /// Its size, fixed header included.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// A PUBLISH topic with a wildcard, or empty without an alias (0x90).
    #[error("invalid topic name: {0}")]
    TopicName(String),
}

impl MqttError {
    /// The MQTT 5.0 reason code a DISCONNECT (or CONNACK) gives for it.
    pub fn reason(&self) -> u8 {
        match self {
            MqttError::Malformed(_) => 0x81,
            MqttError::Protocol(_) => 0x82,
            MqttError::UnsupportedVersion(_) => 0x84,
            MqttError::TopicName(_) => 0x90,
            MqttError::TooLarge { .. } => 0x95,
        }
    }
}

/// Takes whole packets off a connection's bytes.
#[derive(Debug, Clone)]
pub struct Decoder {
    /// Set by the CONNECT it decodes (a server's), or given (a client's).
    version: Option<Version>,
    max_size: usize,
}

impl Decoder {
    /// A server's decoder: the first packet must be CONNECT, which sets
    /// the version. `max_size` bounds a packet, fixed header included.
    pub fn new(max_size: usize) -> Decoder {
        Decoder {
            version: None,
            max_size,
        }
    }

    /// A client's decoder, for a connection made with `version`.
    pub fn with_version(version: Version, max_size: usize) -> Decoder {
        Decoder {
            version: Some(version),
            max_size,
        }
    }

    /// The version, once known.
    pub fn version(&self) -> Option<Version> {
        self.version
    }

    /// Sets the largest packet taken from now on (a CONNECT's limit, then
    /// the connection's).
    pub fn set_max_size(&mut self, max_size: usize) {
        self.max_size = max_size;
    }

    /// [`Decoder::decode`], but of a PUBLISH whose payload is more than
    /// `large` bytes only the head is taken (the packet with an empty
    /// payload), and the payload is left in `buf`, to follow: a large
    /// message's, which may be larger than a packet may be.
    pub fn decode_or_head(
        &mut self,
        buf: &mut BytesMut,
        large: usize,
    ) -> Result<Option<Decoded>, MqttError> {
        let Some((first, len, head)) = fixed_header(buf)? else {
            return Ok(None);
        };
        if let (3, Some(version)) = (first >> 4, self.version) {
            if len > large {
                match publish_head_len(
                    first,
                    &buf[head..],
                    version == Version::V5,
                    (len, self.max_size),
                ) {
                    Some(Some(var)) if len - var > large => {
                        let body = Bytes::copy_from_slice(&buf[head..head + var]);
                        let Packet::Publish(publish) = packet::decode(first, &body, Some(version))?
                        else {
                            return Err(MqttError::Protocol("not a PUBLISH".into()));
                        };
                        let _ = buf.split_to(head + var);
                        return Ok(Some(Decoded::Head {
                            publish,
                            payload_len: len - var,
                        }));
                    }
                    // Its head has not all come.
                    Some(None) => return Ok(None),
                    // A head that does not read, or a small payload:
                    // decoded whole, which says what is wrong.
                    _ => {}
                }
            }
        }
        Ok(self.decode(buf)?.map(Decoded::Packet))
    }

    /// The next whole packet at the front of `buf`, taken off it; `None`
    /// if it is not all there yet. An error leaves `buf` as it was: the
    /// connection is to be closed.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Packet>, MqttError> {
        let Some((first, len, head)) = fixed_header(buf)? else {
            return Ok(None);
        };
        let size = head + len;
        if size > self.max_size {
            return Err(MqttError::TooLarge {
                size,
                max: self.max_size,
            });
        }
        if buf.len() < size {
            return Ok(None);
        }
        let kind = first >> 4;
        let version = match (self.version, kind) {
            (_, 1) => None,
            (Some(v), _) => Some(v),
            (None, _) => {
                return Err(MqttError::Protocol(format!(
                    "packet type {kind} before CONNECT: the first packet must be CONNECT"
                )))
            }
        };
        // The packet's bytes are shared by what it decodes to (payloads,
        // binary fields): copied back only if it is refused.
        let whole = buf.split_to(size).freeze();
        let packet = match packet::decode(first, &whole.slice(head..), version) {
            Ok(packet) => packet,
            Err(e) => {
                let mut back = BytesMut::from(&whole[..]);
                back.unsplit(std::mem::take(buf));
                *buf = back;
                return Err(e);
            }
        };
        if let Packet::Connect(c) = &packet {
            self.version = Some(c.version);
        }
        Ok(Some(packet))
    }
}

/// What [`Decoder::decode_or_head`] took.
#[derive(Debug)]
pub enum Decoded {
    /// A whole packet.
    Packet(Packet),
    /// The head of a PUBLISH whose payload of `payload_len` bytes follows.
    Head {
        /// The PUBLISH, its payload empty.
        publish: Publish,
        /// Bytes of payload to come.
        payload_len: usize,
    },
}

/// The length of a PUBLISH's variable header (topic, packet id, 5.0's
/// properties), from the bytes after its fixed header, of a packet whose
/// remaining length is `len`, if it fits within `max` bytes:
/// `Some(None)` if they have not all come, `None` if they do not read.
fn publish_head_len(
    first: u8,
    rest: &[u8],
    v5: bool,
    (len, max): (usize, usize),
) -> Option<Option<usize>> {
    let Some(at) = publish_var_len(first, rest, v5)? else {
        return Some(None);
    };
    if at > len || at > max {
        return None;
    }
    Some((rest.len() >= at).then_some(at))
}

/// The length a PUBLISH's variable header says it has, from its first
/// bytes: `Some(None)` if too few have come to say, `None` if 5.0's
/// property length does not read.
fn publish_var_len(first: u8, rest: &[u8], v5: bool) -> Option<Option<usize>> {
    let Some(topic) = rest.get(..2) else {
        return Some(None);
    };
    let mut at = 2 + usize::from(u16::from_be_bytes([topic[0], topic[1]]));
    if (first >> 1) & 0b11 != 0 {
        at += 2;
    }
    if !v5 {
        return Some(Some(at));
    }
    let mut len = 0usize;
    for i in 0..4 {
        let Some(&b) = rest.get(at + i) else {
            return Some(None);
        };
        len |= usize::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some(Some(at + i + 1 + len));
        }
    }
    None
}

/// The fixed header at the front of `buf`: its first byte, the remaining
/// length and the header's own length; `None` if it is not all there.
fn fixed_header(buf: &[u8]) -> Result<Option<(u8, usize, usize)>, MqttError> {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    let mut len = 0usize;
    for i in 0..4 {
        let Some(&b) = buf.get(1 + i) else {
            return Ok(None);
        };
        len |= usize::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(Some((first, len, 2 + i)));
        }
    }
    Err(MqttError::Malformed(
        "the remaining length is longer than 4 bytes".into(),
    ))
}

/// Writes `packet` for a connection of `version`. The body must fit a
/// remaining length (256 MiB): the server's packet limit is far below.
pub fn encode(packet: &Packet, version: Version, dst: &mut BytesMut) {
    encode_head(packet, version, 0, dst);
}

/// The largest remaining length a packet may have (256 MiB less one).
pub const MAX_REMAINING: usize = MAX_VARINT as usize;

/// Writes `packet` (a PUBLISH whose payload is left out) for a connection
/// of `version`, its remaining length counting `payload` more bytes,
/// which the caller sends after it: a payload streamed from elsewhere.
/// The whole must fit [`MAX_REMAINING`].
pub fn encode_head(packet: &Packet, version: Version, payload: usize, dst: &mut BytesMut) {
    // The body goes in place after room for the longest fixed header, and
    // moves back once its length (so the header's) is known: one buffer.
    let start = dst.len();
    dst.extend_from_slice(&[0; 5]);
    let first = packet::encode_body(packet, version, dst);
    let body = dst.len() - start - 5 + payload;
    let mut header = [0u8; 5];
    let mut rest = &mut header[..];
    bytes::BufMut::put_u8(&mut rest, first);
    wire::put_varint(&mut rest, (body as u32).min(MAX_VARINT));
    let used = 5 - rest.len();
    dst.copy_within(start + 5.., start + used);
    dst.truncate(dst.len() - (5 - used));
    dst[start..start + used].copy_from_slice(&header[..used]);
}

#[cfg(test)]
mod tests;
