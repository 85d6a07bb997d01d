//! Frame bodies, one module per kind, joined by [`Frame`].
//!
//! RECEIPT, PING, PONG and DISCONNECT have empty bodies and no module.

mod ack;
mod browse;
mod chunk;
mod connect;
mod connected;
mod delivery;
mod error;
mod recover;
mod subscribe;
mod transaction;
mod unsubscribe;
mod unsubscribe_durable;

pub use ack::Settle;
pub use browse::Browse;
pub use chunk::{Chunk, CHUNK_HEAD_LEN};
pub use connect::Connect;
pub use connected::Connected;
pub use delivery::{Delivery, DELIVERY_HEAD_LEN};
pub use error::{ErrorFrame, RefusedSend};
pub use recover::Recover;
pub use subscribe::{ReaderQos, Subscribe};
pub use transaction::{Commit, Rollback, TxSend};
pub use unsubscribe::Unsubscribe;
pub use unsubscribe_durable::UnsubscribeDurable;

use bytes::{BufMut, BytesMut};

use crate::codec::{encode_frame, RawFrame};
use crate::cursor::Cursor;
use crate::error::Error;
use crate::header::FrameKind;
use crate::message::MessageView;

/// A decoded frame of any kind.
#[derive(Debug, Clone)]
pub enum Frame {
    /// Open a session.
    Connect(Connect),
    /// The session is open.
    Connected(Connected),
    /// Something went wrong.
    Error(ErrorFrame),
    /// Publish a message.
    Send(MessageView),
    /// The frame with the header's request id succeeded.
    Receipt,
    /// Start a subscription.
    Subscribe(Subscribe),
    /// Stop a subscription.
    Unsubscribe(Unsubscribe),
    /// A message for a subscription.
    Message(Delivery),
    /// Liveness probe.
    Ping,
    /// Liveness answer.
    Pong,
    /// Graceful close.
    Disconnect,
    /// Deliveries processed.
    Ack(Settle),
    /// Deliveries to redeliver.
    Nack(Settle),
    /// Snapshot of a queue.
    Browse(Browse),
    /// Delete a durable subscription.
    UnsubscribeDurable(UnsubscribeDurable),
    /// Redeliver what subscriptions have not settled.
    Recover(Recover),
    /// Publish a message inside a transaction.
    TxSend(TxSend),
    /// Commit a transaction.
    Commit(Commit),
    /// Roll a transaction back.
    Rollback(Rollback),
    /// A piece of a large message's body.
    Chunk(Chunk),
}

impl Frame {
    /// Decodes a raw frame's body according to its kind.
    pub fn decode(raw: RawFrame) -> Result<Frame, Error> {
        let body = raw.body;
        let empty = |frame: Frame| Cursor::new(&body).finish().map(|()| frame);
        match raw.header.kind {
            FrameKind::Connect => Connect::decode(&body).map(Frame::Connect),
            FrameKind::Connected => Connected::decode(&body).map(Frame::Connected),
            FrameKind::Error => ErrorFrame::decode(&body).map(Frame::Error),
            FrameKind::Send => MessageView::parse(body).map(Frame::Send),
            FrameKind::Subscribe => Subscribe::decode(&body).map(Frame::Subscribe),
            FrameKind::Unsubscribe => Unsubscribe::decode(&body).map(Frame::Unsubscribe),
            FrameKind::Message => Delivery::decode(body).map(Frame::Message),
            FrameKind::Receipt => empty(Frame::Receipt),
            FrameKind::Ping => empty(Frame::Ping),
            FrameKind::Pong => empty(Frame::Pong),
            FrameKind::Disconnect => empty(Frame::Disconnect),
            FrameKind::Ack => Settle::decode(&body).map(Frame::Ack),
            FrameKind::Nack => Settle::decode(&body).map(Frame::Nack),
            FrameKind::Browse => Browse::decode(&body).map(Frame::Browse),
            FrameKind::UnsubscribeDurable => {
                UnsubscribeDurable::decode(&body).map(Frame::UnsubscribeDurable)
            }
            FrameKind::Recover => Recover::decode(&body).map(Frame::Recover),
            FrameKind::TxSend => TxSend::decode(body).map(Frame::TxSend),
            FrameKind::Commit => Commit::decode(&body).map(Frame::Commit),
            FrameKind::Rollback => Rollback::decode(&body).map(Frame::Rollback),
            FrameKind::Chunk => Chunk::decode(body).map(Frame::Chunk),
        }
    }

    /// This frame's kind.
    pub fn kind(&self) -> FrameKind {
        match self {
            Frame::Connect(_) => FrameKind::Connect,
            Frame::Connected(_) => FrameKind::Connected,
            Frame::Error(_) => FrameKind::Error,
            Frame::Send(_) => FrameKind::Send,
            Frame::Receipt => FrameKind::Receipt,
            Frame::Subscribe(_) => FrameKind::Subscribe,
            Frame::Unsubscribe(_) => FrameKind::Unsubscribe,
            Frame::Message(_) => FrameKind::Message,
            Frame::Ping => FrameKind::Ping,
            Frame::Pong => FrameKind::Pong,
            Frame::Disconnect => FrameKind::Disconnect,
            Frame::Ack(_) => FrameKind::Ack,
            Frame::Nack(_) => FrameKind::Nack,
            Frame::Browse(_) => FrameKind::Browse,
            Frame::UnsubscribeDurable(_) => FrameKind::UnsubscribeDurable,
            Frame::Recover(_) => FrameKind::Recover,
            Frame::TxSend(_) => FrameKind::TxSend,
            Frame::Commit(_) => FrameKind::Commit,
            Frame::Rollback(_) => FrameKind::Rollback,
            Frame::Chunk(_) => FrameKind::Chunk,
        }
    }

    /// Appends the whole frame, header included.
    pub fn encode(&self, request_id: u32, dst: &mut BytesMut) -> Result<(), Error> {
        encode_frame(dst, self.kind(), request_id, |d| self.encode_body(d))
    }

    /// Appends the body only (for writers that frame it themselves with
    /// [`encode_frame`]).
    pub fn encode_body(&self, d: &mut BytesMut) -> Result<(), Error> {
        match self {
            Frame::Connect(f) => f.encode(d),
            Frame::Connected(f) => f.encode(d),
            Frame::Error(f) => f.encode(d),
            Frame::Send(view) => {
                d.put_slice(view.block());
                Ok(())
            }
            Frame::Subscribe(f) => f.encode(d),
            Frame::Unsubscribe(f) => f.encode(d),
            Frame::Message(f) => {
                f.encode_body(d);
                Ok(())
            }
            Frame::Receipt | Frame::Ping | Frame::Pong | Frame::Disconnect => Ok(()),
            Frame::Ack(f) | Frame::Nack(f) => f.encode(d),
            Frame::Browse(f) => f.encode(d),
            Frame::UnsubscribeDurable(f) => f.encode(d),
            Frame::Recover(f) => f.encode(d),
            Frame::TxSend(f) => {
                f.encode(d);
                Ok(())
            }
            Frame::Commit(f) => f.encode(d),
            Frame::Rollback(f) => f.encode(d),
            Frame::Chunk(f) => {
                f.encode(d);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::codec::Decoder;
    use crate::destination::{Destination, DestinationKind};
    use crate::error::ErrorCode;
    use crate::message::Message;

    fn samples() -> Vec<Frame> {
        let mut m = Message::text("hi").with_property("k", 1);
        m.set_destination(Some(Destination::topic("a.b")));
        let mut block = BytesMut::new();
        m.encode(&mut block).unwrap();
        let block = block.freeze();
        vec![
            Frame::Connect(Connect {
                client_id: "c1".into(),
                user: "u".into(),
                password: "p".into(),
                heartbeat_ms: 5000,
            }),
            Frame::Connected(Connected {
                server_version: "0.1.0".into(),
                connection_id: "7".into(),
                heartbeat_ms: 5000,
                max_frame_size: 1 << 20,
                notice: String::new(),
            }),
            Frame::Connected(Connected {
                server_version: "0.1.0".into(),
                connection_id: "8".into(),
                heartbeat_ms: 5000,
                max_frame_size: 1 << 20,
                notice: "authentication is off".into(),
            }),
            Frame::Error(ErrorFrame {
                code: 5,
                fatal: true,
                message: "bad".into(),
                refused: None,
            }),
            Frame::Error(ErrorFrame {
                refused: Some(RefusedSend {
                    destination: Destination::queue("q"),
                    message_id: "ID:c-1-2".into(),
                }),
                ..ErrorFrame::new(ErrorCode::QueueFull, false, "full")
            }),
            Frame::Send(MessageView::parse(block.clone()).unwrap()),
            Frame::Receipt,
            Frame::Subscribe(Subscribe::new(3, DestinationKind::Topic, "a.#")),
            Frame::Subscribe(Subscribe {
                subscription_id: 4,
                kind: DestinationKind::Queue,
                pattern: "orders".into(),
                selector: "region = 'EU'".into(),
                acknowledged: true,
                prefetch: 10,
                durable_name: "d".into(),
                temporary: true,
                shared: true,
                durable: true,
                best_effort: true,
                priority: -7,
                exclusive: true,
                reader: ReaderQos {
                    time_filter_ms: 250,
                    by_source_timestamp: true,
                    history: 3,
                },
            }),
            Frame::Ack(Settle {
                delivery_ids: vec![1, 2, u64::MAX],
            }),
            Frame::Nack(Settle::default()),
            Frame::Browse(Browse {
                subscription_id: 5,
                queue: "orders".into(),
                selector: String::new(),
            }),
            Frame::UnsubscribeDurable(UnsubscribeDurable { name: "d".into() }),
            Frame::Recover(Recover {
                subscription_ids: vec![1, 7],
            }),
            Frame::TxSend(TxSend {
                transaction_id: 9,
                message: MessageView::parse(block.clone()).unwrap(),
            }),
            Frame::Commit(Commit {
                transaction_id: 9,
                consumed: Settle {
                    delivery_ids: vec![4, 5],
                },
            }),
            Frame::Rollback(Rollback {
                transaction_id: 9,
                subscriptions: Recover {
                    subscription_ids: vec![2],
                },
            }),
            Frame::Unsubscribe(Unsubscribe::new(3)),
            Frame::Unsubscribe(Unsubscribe {
                subscription_id: 4,
                seen: Some(Settle {
                    delivery_ids: vec![7, 8],
                }),
            }),
            Frame::Unsubscribe(Unsubscribe {
                subscription_id: 5,
                seen: Some(Settle::default()),
            }),
            Frame::Message(Delivery {
                subscription_id: 3,
                delivery_id: 99,
                delivery_count: 1,
                message: block,
            }),
            Frame::Chunk(Chunk {
                stream: 3,
                data: Bytes::from_static(b"part of a body"),
            }),
            Frame::Chunk(Chunk {
                stream: u64::MAX,
                data: Bytes::new(),
            }),
            Frame::Ping,
            Frame::Pong,
            Frame::Disconnect,
        ]
    }

    #[test]
    fn every_kind_round_trips() {
        let d = Decoder::new(1 << 20);
        for f in samples() {
            let mut buf = BytesMut::new();
            f.encode(42, &mut buf).unwrap();
            let raw = d.decode(&mut buf).unwrap().unwrap();
            assert!(buf.is_empty());
            assert_eq!(raw.header.request_id, 42);
            let back = Frame::decode(raw).unwrap();
            assert_eq!(format!("{back:?}"), format!("{f:?}"));
        }
    }

    #[test]
    fn every_kind_rejects_truncated_and_padded_bodies() {
        let d = Decoder::new(1 << 20);
        for f in samples() {
            let mut buf = BytesMut::new();
            f.encode(0, &mut buf).unwrap();
            let raw = d.decode(&mut buf).unwrap().unwrap();
            let kind = raw.header.kind;
            // Bodies that end in "the rest" (SEND, MESSAGE) accept extra
            // bytes there, so only fixed-layout bodies are padded.
            if !matches!(
                kind,
                FrameKind::Send | FrameKind::TxSend | FrameKind::Message | FrameKind::Chunk
            ) {
                let mut padded = raw.clone();
                padded.body = Bytes::from([&raw.body[..], b"!"].concat());
                assert!(Frame::decode(padded).is_err(), "{kind:?} padded");
            }
            // The sample's text body "hi" is "the rest": cutting inside it
            // still leaves a valid (shorter) text.
            let fixed = match kind {
                FrameKind::Send | FrameKind::TxSend | FrameKind::Message => raw.body.len() - 2,
                FrameKind::Chunk => CHUNK_HEAD_LEN,
                _ => raw.body.len(),
            };
            // Where an optional tail may start: UNSUBSCRIBE's list of what
            // was read, ERROR's refused send, CONNECTED's notice.
            let optional = match &f {
                Frame::Unsubscribe(_) => Some(4),
                Frame::Error(e) => Some(7 + e.message.len()),
                Frame::Connected(c) => Some(12 + c.server_version.len() + c.connection_id.len()),
                _ => None,
            };
            for n in 0..fixed {
                if Some(n) == optional {
                    continue;
                }
                let mut cut = raw.clone();
                cut.body = raw.body.slice(..n);
                assert!(Frame::decode(cut).is_err(), "{kind:?} cut at {n}");
            }
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        // A small xorshift generator: deterministic, no dependency.
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let d = Decoder::new(4096);
        for round in 0..20_000 {
            let len = (next() % 200) as usize;
            let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if round % 2 == 0 && len >= 12 {
                // A valid header over a random body exercises body decoders.
                bytes[..3].copy_from_slice(b"HR\x01");
                bytes[3] = (next() % 21) as u8;
                bytes[8..12].copy_from_slice(&((len - 12) as u32).to_be_bytes());
            }
            let mut buf = BytesMut::from(&bytes[..]);
            while let Ok(Some(raw)) = d.decode(&mut buf) {
                let _ = Frame::decode(raw);
            }
        }
    }
}
