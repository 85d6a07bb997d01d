//! MESSAGE: server → client, one delivery of a message to a subscription.
//!
//! `u32 subscription id | u64 delivery id | u32 delivery count | message block`
//!
//! The first 16 bytes are the per-delivery head; the message block is the
//! publisher's, byte for byte, shared among all deliveries of one message.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::cursor::Cursor;
use crate::error::Error;
use crate::header::{FrameKind, Header, HEADER_LEN};
use crate::message::MessageRef;

/// Length of the per-delivery head that precedes the message block.
pub const DELIVERY_HEAD_LEN: usize = 16;

/// A message delivered to a subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The subscription it is for.
    pub subscription_id: u32,
    /// The server's id for this delivery on this connection, increasing.
    pub delivery_id: u64,
    /// 1 on first delivery; more when redelivered.
    pub delivery_count: u32,
    /// The message block, validated.
    pub message: Bytes,
}

impl Delivery {
    /// Writes the frame header and delivery head for a message block of
    /// `block_len` bytes: the per-subscriber part of a MESSAGE frame, to be
    /// followed on the wire by the shared block.
    pub fn encode_head(
        request_id: u32,
        subscription_id: u32,
        delivery_id: u64,
        delivery_count: u32,
        block_len: usize,
    ) -> [u8; HEADER_LEN + DELIVERY_HEAD_LEN] {
        let mut b = [0u8; HEADER_LEN + DELIVERY_HEAD_LEN];
        let header = Header {
            kind: FrameKind::Message,
            request_id,
            len: (DELIVERY_HEAD_LEN + block_len) as u32,
        };
        b[..HEADER_LEN].copy_from_slice(&header.encode());
        b[12..16].copy_from_slice(&subscription_id.to_be_bytes());
        b[16..24].copy_from_slice(&delivery_id.to_be_bytes());
        b[24..28].copy_from_slice(&delivery_count.to_be_bytes());
        b
    }

    pub(super) fn decode(body: Bytes) -> Result<Delivery, Error> {
        let d = Delivery::decode_head(body)?;
        MessageRef::parse(&d.message)?;
        Ok(d)
    }

    /// Decodes a MESSAGE body's delivery head but does not validate the
    /// message block: for a receiver that decodes the block next anyway
    /// (with `Message::decode`) and so need not walk it twice.
    pub fn decode_head(body: Bytes) -> Result<Delivery, Error> {
        let mut c = Cursor::new(&body);
        let subscription_id = c.u32("subscription id")?;
        let delivery_id = c.u64("delivery id")?;
        let delivery_count = c.u32("delivery count")?;
        let mut message = body;
        message.advance(DELIVERY_HEAD_LEN);
        Ok(Delivery {
            subscription_id,
            delivery_id,
            delivery_count,
            message,
        })
    }

    pub(super) fn encode_body(&self, d: &mut BytesMut) {
        d.put_u32(self.subscription_id);
        d.put_u64(self.delivery_id);
        d.put_u32(self.delivery_count);
        d.put_slice(&self.message);
    }
}
