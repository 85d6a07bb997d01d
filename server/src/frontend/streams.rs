//! Large messages on a connection: bodies arriving in CHUNK frames, each
//! written to its spool file as it comes, and bodies leaving in the frames
//! of their client's protocol (native CHUNKs, AMQP transfers), each read
//! from its file only once it is at the front of its connection's queue,
//! so that neither holds more than a chunk or two in memory. A client
//! whose protocol cannot take a body in pieces gets it read in, up to a
//! bound ([`inline`]).

use std::fs::File;
use std::io::{self, Read};

use bytes::{Bytes, BytesMut};
use herald_protocol::frame::{Delivery, CHUNK_HEAD_LEN};
use herald_protocol::header::Header;
use herald_protocol::message::streamed_body;
use herald_protocol::{Body, FrameKind, Message, Streamed, HEADER_LEN};

use super::outbound::{Droppable, Outbound};
use crate::store::large::{LargeStore, Spool};

/// Bytes of body in one CHUNK frame the server sends.
pub const CHUNK_BYTES: usize = 256 << 10;

/// A body arriving: its spool file and the message it belongs to.
pub struct Incoming {
    /// Where the body goes.
    pub spool: Spool,
    /// The message as the client sent it, its streamed body numbered by
    /// the client.
    pub block: Bytes,
    /// The SEND's request id, answered once the message is routed.
    pub request_id: u32,
    /// The transaction a TX_SEND holds it in.
    pub transaction: Option<u32>,
}

/// How a protocol frames the pieces of a body it streams.
pub trait Framer: Send {
    /// Most bytes of body in one frame.
    fn piece_len(&self) -> usize;
    /// Appends the start of the frame that carries the next `n` bytes of
    /// the body, which follow it; `last`: no more follow them.
    fn head(&mut self, n: usize, last: bool, frame: &mut Vec<u8>);
    /// Appends what follows the body's last bytes in their frame, if
    /// anything does.
    fn end(&mut self, _frame: &mut Vec<u8>) {}
    /// The frame as the wire takes it.
    fn finish(&self, frame: Vec<u8>) -> Bytes {
        Bytes::from(frame)
    }
    /// What tells the client that the rest of the body will not come,
    /// if its protocol has a way to.
    fn give_up(&mut self) -> Option<Bytes>;
}

/// A body's frames, read from its file one piece at a time as its
/// connection writes them (an [`outbound::FrameSource`](super::outbound::FrameSource)).
pub struct BodyFrames<F> {
    /// The body's file; none if it could not be opened.
    file: Option<File>,
    left: u64,
    framer: F,
    /// The delivery, for the log.
    delivery: u64,
    /// It stopped short and its protocol has no way to say so.
    failed: bool,
}

impl<F: Framer> BodyFrames<F> {
    /// The `len` bytes of `streamed`'s body for delivery `delivery`, from
    /// `large`, framed by `framer`. One whose file cannot be opened is
    /// given up at its first frame.
    pub fn open(
        large: Option<&LargeStore>,
        streamed: &Streamed,
        delivery: u64,
        framer: F,
    ) -> BodyFrames<F> {
        let opened = match large {
            Some(large) => large.open_body(streamed),
            None => Err(io::Error::other("this server keeps no large messages")),
        };
        BodyFrames {
            file: opened.inspect_err(|e| log_unreadable(delivery, e)).ok(),
            left: streamed.len,
            framer,
            delivery,
            failed: false,
        }
    }
}

impl<F: Framer> BodyFrames<F> {
    /// Bytes of the body still to be framed.
    pub fn remaining(&self) -> u64 {
        self.left
    }
}

impl<F: Framer> super::outbound::FrameSource for BodyFrames<F> {
    fn next_frame(&mut self) -> Option<Bytes> {
        if self.left == 0 {
            return None;
        }
        let n = self.left.min(self.framer.piece_len() as u64) as usize;
        let last = self.left == n as u64;
        let mut frame = Vec::with_capacity(n + 64);
        self.framer.head(n, last, &mut frame);
        let start = frame.len();
        // Read straight into the frame: `read_to_end` fills its spare room
        // without zeroing it first.
        let read = match self.file.as_mut() {
            Some(file) => {
                file.take(n as u64)
                    .read_to_end(&mut frame)
                    .and_then(|got| match got == n {
                        true => Ok(()),
                        false => Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
                    })
            }
            // Said when it failed to open.
            None => Err(io::Error::from(io::ErrorKind::NotFound)),
        };
        match read {
            Ok(()) => {
                debug_assert_eq!(frame.len(), start + n);
                self.left -= n as u64;
                if last {
                    self.framer.end(&mut frame);
                }
                Some(self.framer.finish(frame))
            }
            Err(e) => {
                if self.file.is_some() {
                    log_unreadable(self.delivery, &e);
                }
                self.left = 0;
                let told = self.framer.give_up();
                self.failed = told.is_none();
                told
            }
        }
    }

    fn failed(&self) -> bool {
        self.failed
    }
}

/// A native body's frames: CHUNKs of the delivery's id.
pub struct Chunks(u64);

impl Framer for Chunks {
    fn piece_len(&self) -> usize {
        CHUNK_BYTES
    }

    fn head(&mut self, n: usize, _: bool, frame: &mut Vec<u8>) {
        frame.extend_from_slice(&chunk_head(self.0, n));
    }

    fn give_up(&mut self) -> Option<Bytes> {
        Some(Bytes::copy_from_slice(&chunk_head(self.0, 0)))
    }
}

/// A body's bytes as they are, after a head its protocol's frame has
/// sent (STOMP's MESSAGE, MQTT's PUBLISH), then its trailer (STOMP's
/// NUL). A body cut short cannot be told: the connection is closed
/// ([`FrameSource::failed`](super::outbound::FrameSource::failed)), or
/// what follows would be read as the rest of it.
pub struct Raw(pub &'static [u8]);

impl Framer for Raw {
    fn piece_len(&self) -> usize {
        CHUNK_BYTES
    }

    fn head(&mut self, _: usize, _: bool, _: &mut Vec<u8>) {}

    fn end(&mut self, frame: &mut Vec<u8>) {
        frame.extend_from_slice(self.0);
    }

    fn give_up(&mut self) -> Option<Bytes> {
        None
    }
}

/// Queues a native MESSAGE of `block` (subscription, delivery id and
/// count `ids`). A large message's body that a frame may hold (up to
/// `max_frame_size`) is read into it, as if it had been sent whole, once
/// it is at the front of the queue; a larger one streams after it, from
/// its file, in CHUNK frames.
pub fn push_native(
    out: &mut Outbound,
    ids: (u32, u64, u32),
    block: Bytes,
    droppable: Droppable,
    large: Option<&LargeStore>,
) {
    let (subscription_id, delivery_id, delivery_count) = ids;
    let Some(streamed) = streamed_body(&block).filter(|s| s.len > 0) else {
        out.push_delivery(
            subscription_id,
            delivery_id,
            delivery_count,
            block,
            droppable,
        );
        return;
    };
    if streamed.len <= large.map_or(0, LargeStore::max_inline) {
        let file = large.and_then(|l| {
            l.open_body(&streamed)
                .inspect_err(|e| log_unreadable(delivery_id, e))
                .ok()
        });
        out.push_source(Box::new(Whole {
            ids,
            block,
            file,
            len: streamed.len,
        }));
        return;
    }
    // Its chunks follow it: it stays.
    out.push_delivery(
        subscription_id,
        delivery_id,
        delivery_count,
        block,
        Droppable::Never,
    );
    let frames = BodyFrames::open(large, &streamed, delivery_id, Chunks(delivery_id));
    out.push_source(Box::new(frames));
}

/// A native MESSAGE whose large body is read into it at the front of its
/// connection's queue (a frame's worth at most).
struct Whole {
    ids: (u32, u64, u32),
    block: Bytes,
    /// The body's file; none once read, or if it could not be opened.
    file: Option<File>,
    len: u64,
}

impl super::outbound::FrameSource for Whole {
    fn next_frame(&mut self) -> Option<Bytes> {
        if self.block.is_empty() {
            return None;
        }
        let read = match self.file.take() {
            Some(f) => {
                read_body(f, self.len).map_err(|e| format!("its body could not be read: {e}"))
            }
            None => Err("its body's file could not be opened".to_owned()),
        };
        let block = with_body(std::mem::take(&mut self.block), read);
        let (subscription_id, delivery_id, delivery_count) = self.ids;
        let head =
            Delivery::encode_head(0, subscription_id, delivery_id, delivery_count, block.len());
        let mut frame = Vec::with_capacity(head.len() + block.len());
        frame.extend_from_slice(&head);
        frame.extend_from_slice(&block);
        Some(Bytes::from(frame))
    }
}

/// The `len` bytes of a body from its file.
fn read_body(file: File, len: u64) -> io::Result<Vec<u8>> {
    let mut body = Vec::with_capacity(len as usize);
    file.take(len).read_to_end(&mut body)?;
    match body.len() as u64 == len {
        true => Ok(body),
        false => Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
    }
}

/// `block` for a client whose protocol cannot stream a body (MQTT, STOMP
/// over WebSocket; AMQP's gets one of more than 4 GiB so): a large message's body read into it as bytes, up
/// to `max` bytes; past that, or if it cannot be read, the body is left
/// out and the property [`NOT_CARRIED`] says why.
pub fn inline(block: Bytes, large: Option<&LargeStore>, protocol: &str) -> Bytes {
    let Some(streamed) = streamed_body(&block) else {
        return block;
    };
    let max = large.map_or(0, LargeStore::max_inline);
    let read = match (large, streamed.len <= max) {
        (_, false) => Err(format!(
            "its body of {} bytes is more than max_frame_size ({max}) and {protocol} clients get large bodies only up to that",
            streamed.len
        )),
        (None, true) => Err("this server keeps no large messages".to_owned()),
        (Some(large), true) => large
            .open_body(&streamed)
            .and_then(|f| read_body(f, streamed.len))
            .map_err(|e| format!("its body could not be read: {e}")),
    };
    with_body(block, read)
}

/// `block`, a large message's, with its body `read` in as bytes, or left
/// out with the property [`NOT_CARRIED`] saying why.
fn with_body(block: Bytes, read: Result<Vec<u8>, String>) -> Bytes {
    let Ok(mut m) = Message::decode(&block, 0) else {
        return block;
    };
    match read {
        Ok(body) => m.body = Body::Bytes(Bytes::from(body)),
        Err(why) => {
            m.body = Body::Empty;
            m.set_property(NOT_CARRIED, why);
        }
    }
    let mut b = BytesMut::new();
    match m.encode(&mut b) {
        Ok(()) => b.freeze(),
        Err(_) => block,
    }
}

/// The property on a large message delivered without its body, saying
/// why.
pub const NOT_CARRIED: &str = "HeraldBodyNotCarried";

/// The frame header and stream of a CHUNK of `n` bytes.
fn chunk_head(stream: u64, n: usize) -> [u8; HEADER_LEN + CHUNK_HEAD_LEN] {
    let header = Header {
        kind: FrameKind::Chunk,
        request_id: 0,
        len: (CHUNK_HEAD_LEN + n) as u32,
    };
    let mut head = [0; HEADER_LEN + CHUNK_HEAD_LEN];
    head[..HEADER_LEN].copy_from_slice(&header.encode());
    head[HEADER_LEN..].copy_from_slice(&stream.to_be_bytes());
    head
}

/// A body that cannot be read is said at most once an interval.
static UNREADABLE: crate::log_limit::LogLimit =
    crate::log_limit::LogLimit::new(std::time::Duration::from_secs(10));

fn log_unreadable(stream: u64, e: &io::Error) {
    if let Some(held) = UNREADABLE.allow() {
        log::error!(
            "a large message's body could not be read for delivery {stream} ({e}): its stream is given up{}",
            crate::log_limit::held_back(held)
        );
    }
}
