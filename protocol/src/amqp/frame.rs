//! AMQP 1.0 framing (part 2.3): the 8-byte protocol header that opens a
//! connection (and a SASL layer), and the frames that follow.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | SIZE: the whole frame, header included, at most the peer's `max-frame-size` |
//! | 4 | 1 | DOFF: where the body starts, in 4-byte words (at least 2) |
//! | 5 | 1 | TYPE: 0 an AMQP frame, 1 a SASL frame |
//! | 6 | 2 | channel (AMQP), or ignored (SASL) |
//! | 8 | DOFF × 4 − 8 | extended header, ignored |
//! | DOFF × 4 | SIZE − DOFF × 4 | body: a performative, then for a transfer its payload; empty = a heart-beat |

use super::AmqpError;

/// The header each side sends first: `AMQP`, a protocol id, and version
/// 1.0.0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtocolHeader {
    /// `AMQP 0 1 0 0`: AMQP itself.
    Amqp,
    /// `AMQP 3 1 0 0`: a SASL layer first.
    Sasl,
    /// `AMQP 2 1 0 0`: a TLS layer first (not served on a plain port).
    Tls,
}

impl ProtocolHeader {
    /// Its eight bytes.
    pub fn bytes(self) -> [u8; 8] {
        let id = match self {
            ProtocolHeader::Amqp => 0,
            ProtocolHeader::Tls => 2,
            ProtocolHeader::Sasl => 3,
        };
        [b'A', b'M', b'Q', b'P', id, 1, 0, 0]
    }

    /// The header at the start of `buf`: `Ok(None)` until eight bytes are
    /// there; an error that says what was sent otherwise (another
    /// version, or not AMQP at all).
    pub fn read(buf: &[u8]) -> Result<Option<ProtocolHeader>, AmqpError> {
        let Some(h) = buf.get(..8) else {
            return match buf.iter().zip(b"AMQP").all(|(a, b)| a == b) {
                true => Ok(None),
                false => Err(AmqpError::Invalid("not an AMQP protocol header".into())),
            };
        };
        if &h[..4] != b"AMQP" {
            return Err(AmqpError::Invalid("not an AMQP protocol header".into()));
        }
        let header = match h[4] {
            0 => ProtocolHeader::Amqp,
            2 => ProtocolHeader::Tls,
            3 => ProtocolHeader::Sasl,
            id => return Err(AmqpError::Invalid(format!("unknown protocol id {id}"))),
        };
        if h[5..] != [1, 0, 0] {
            return Err(AmqpError::Invalid(format!(
                "AMQP {}.{}.{}: only 1.0.0 is spoken",
                h[5], h[6], h[7]
            )));
        }
        Ok(Some(header))
    }
}

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// An AMQP performative.
    Amqp,
    /// A SASL frame.
    Sasl,
}

/// A frame's header, and where its body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// The whole frame's size.
    pub size: u32,
    /// AMQP or SASL.
    pub kind: FrameKind,
    /// The session channel (AMQP frames).
    pub channel: u16,
    /// Where the body starts, in bytes from the frame's start.
    pub body_offset: usize,
}

/// Frames are at least this large (the fixed header).
pub const MIN_FRAME: u32 = 8;

impl FrameHeader {
    /// The header of the frame at the start of `buf`, checked against
    /// `max_frame` (the `max-frame-size` this side announced): `Ok(None)`
    /// until its eight bytes are there. The frame is whole once `buf`
    /// holds `size` bytes.
    pub fn read(buf: &[u8], max_frame: u32) -> Result<Option<FrameHeader>, AmqpError> {
        let Some(h) = buf.get(..8) else {
            return Ok(None);
        };
        let size = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        if size > max_frame {
            return Err(AmqpError::FrameTooLarge {
                size,
                max: max_frame,
            });
        }
        let doff = h[4];
        let body_offset = usize::from(doff) * 4;
        if doff < 2 || body_offset > size as usize {
            return Err(AmqpError::Invalid(format!(
                "data offset {doff} in a frame of {size} bytes"
            )));
        }
        let kind = match h[5] {
            0 => FrameKind::Amqp,
            1 => FrameKind::Sasl,
            t => return Err(AmqpError::Invalid(format!("unknown frame type {t}"))),
        };
        Ok(Some(FrameHeader {
            size,
            kind,
            channel: u16::from_be_bytes([h[6], h[7]]),
            body_offset,
        }))
    }

    /// Writes a frame's header (no extended header) for a body of
    /// `body_len` bytes.
    pub fn write(kind: FrameKind, channel: u16, body_len: usize, out: &mut impl bytes::BufMut) {
        out.put_u32((body_len + 8) as u32);
        out.put_u8(2);
        out.put_u8(match kind {
            FrameKind::Amqp => 0,
            FrameKind::Sasl => 1,
        });
        out.put_u16(channel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_headers_are_read_and_refused_clearly() {
        assert_eq!(
            ProtocolHeader::read(b"AMQP\x00\x01\x00\x00"),
            Ok(Some(ProtocolHeader::Amqp))
        );
        assert_eq!(
            ProtocolHeader::read(b"AMQP\x03\x01\x00\x00x"),
            Ok(Some(ProtocolHeader::Sasl))
        );
        assert_eq!(ProtocolHeader::read(b"AMQ"), Ok(None));
        for (wire, words) in [
            (&b"GET / HT"[..], "not an AMQP"),
            (&b"HR"[..], "not an AMQP"),
            (&b"AMQP\x00\x00\x09\x01"[..], "only 1.0.0"),
            (&b"AMQP\x07\x01\x00\x00"[..], "protocol id 7"),
        ] {
            let e = ProtocolHeader::read(wire).unwrap_err().to_string();
            assert!(e.contains(words), "{wire:?}: {e}");
        }
        assert_eq!(
            ProtocolHeader::read(&ProtocolHeader::Sasl.bytes()),
            Ok(Some(ProtocolHeader::Sasl))
        );
    }

    #[test]
    fn frame_headers_are_bounded() {
        let mut wire = Vec::new();
        FrameHeader::write(FrameKind::Amqp, 3, 5, &mut wire);
        assert_eq!(wire, [0, 0, 0, 13, 2, 0, 0, 3]);
        let h = FrameHeader::read(&wire, 512).unwrap().unwrap();
        assert_eq!(
            (h.size, h.kind, h.channel, h.body_offset),
            (13, FrameKind::Amqp, 3, 8)
        );
        assert_eq!(FrameHeader::read(&wire[..7], 512), Ok(None));
        assert_eq!(
            FrameHeader::read(&[0, 0, 2, 1, 2, 0, 0, 0], 512),
            Err(AmqpError::FrameTooLarge {
                size: 513,
                max: 512
            })
        );
        for bad in [
            [0, 0, 0, 8, 1, 0, 0, 0],
            [0, 0, 0, 8, 3, 0, 0, 0],
            [0, 0, 0, 8, 2, 9, 0, 0],
        ] {
            assert!(FrameHeader::read(&bad, 512).is_err(), "{bad:?}");
        }
    }
}
