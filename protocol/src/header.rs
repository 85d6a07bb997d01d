//! The 12-byte header that starts every datagram (DESIGN.md, "Wire format").
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 2 | magic `HR` |
//! | 2 | 1 | protocol version, 1 |
//! | 3 | 1 | frame kind |
//! | 4 | 4 | request id (0 = no RECEIPT wanted) |
//! | 8 | 4 | body length |

use crate::error::Error;

/// The two magic bytes, `HR`.
pub const MAGIC: [u8; 2] = *b"HR";
/// The protocol version this crate speaks.
pub const VERSION: u8 = 1;
/// Length of the header in bytes.
pub const HEADER_LEN: usize = 12;

macro_rules! frame_kinds {
    ($($(#[$doc:meta])* $name:ident = $n:literal,)*) => {
        /// The kind of a frame, byte 3 of the header.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum FrameKind {
            $($(#[$doc])* $name = $n,)*
        }

        impl FrameKind {
            /// Every kind, in numeric order.
            pub const ALL: &'static [FrameKind] = &[$(FrameKind::$name,)*];

            /// The kind for a byte, if it names one.
            pub fn from_u8(n: u8) -> Option<FrameKind> {
                match n {
                    $($n => Some(FrameKind::$name),)*
                    _ => None,
                }
            }
        }
    };
}

frame_kinds! {
    /// Client → server: open a session.
    Connect = 1,
    /// Server → client: the session is open.
    Connected = 2,
    /// Either way: something went wrong.
    Error = 3,
    /// Client → server: publish a message.
    Send = 4,
    /// Server → client: the frame with this request id succeeded.
    Receipt = 5,
    /// Client → server: start receiving from a destination.
    Subscribe = 6,
    /// Client → server: stop a subscription.
    Unsubscribe = 7,
    /// Server → client: a message for a subscription.
    Message = 8,
    /// Either way: are you there?
    Ping = 9,
    /// Either way: yes.
    Pong = 10,
    /// Client → server: close the session gracefully.
    Disconnect = 11,
    /// Client → server: these deliveries were processed.
    Ack = 12,
    /// Client → server: redeliver these deliveries.
    Nack = 13,
    /// Client → server: list a queue's messages without consuming.
    Browse = 14,
    /// Client → server: delete a durable subscription.
    UnsubscribeDurable = 15,
    /// Client → server: redeliver what these subscriptions have not settled.
    Recover = 16,
    /// Client → server: publish a message inside a transaction.
    TxSend = 17,
    /// Client → server: commit a transaction.
    Commit = 18,
    /// Client → server: roll a transaction back.
    Rollback = 19,
    /// Either way: a piece of a large message's body.
    Chunk = 20,
}

/// A decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// What the body holds.
    pub kind: FrameKind,
    /// Correlates a RECEIPT or ERROR with this frame; 0 = none wanted.
    pub request_id: u32,
    /// Body length in bytes.
    pub len: u32,
}

impl Header {
    /// Decodes and checks a header; `max_len` bounds the body length.
    pub fn decode(b: &[u8; HEADER_LEN], max_len: u32) -> Result<Header, Error> {
        if b[0..2] != MAGIC {
            return Err(Error::BadMagic(u16::from_be_bytes([b[0], b[1]])));
        }
        if b[2] != VERSION {
            return Err(Error::UnsupportedVersion(b[2]));
        }
        let kind = FrameKind::from_u8(b[3]).ok_or(Error::UnknownKind(b[3]))?;
        let request_id = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
        let len = u32::from_be_bytes([b[8], b[9], b[10], b[11]]);
        if len > max_len {
            return Err(Error::FrameTooLarge { len, max: max_len });
        }
        Ok(Header {
            kind,
            request_id,
            len,
        })
    }

    /// Encodes this header.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..2].copy_from_slice(&MAGIC);
        b[2] = VERSION;
        b[3] = self.kind as u8;
        b[4..8].copy_from_slice(&self.request_id.to_be_bytes());
        b[8..12].copy_from_slice(&self.len.to_be_bytes());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_every_kind() {
        for &kind in FrameKind::ALL {
            let h = Header {
                kind,
                request_id: 0xdead_beef,
                len: 42,
            };
            assert_eq!(Header::decode(&h.encode(), 100), Ok(h));
        }
    }

    #[test]
    fn rejects_bad_header_fields() {
        let good = Header {
            kind: FrameKind::Ping,
            request_id: 0,
            len: 10,
        }
        .encode();
        let mut b = good;
        b[0] = b'X';
        assert_eq!(Header::decode(&b, 100), Err(Error::BadMagic(0x5852)));
        let mut b = good;
        b[2] = 9;
        assert_eq!(Header::decode(&b, 100), Err(Error::UnsupportedVersion(9)));
        let mut b = good;
        b[3] = 200;
        assert_eq!(Header::decode(&b, 100), Err(Error::UnknownKind(200)));
        assert_eq!(
            Header::decode(&good, 9),
            Err(Error::FrameTooLarge { len: 10, max: 9 })
        );
    }
}
