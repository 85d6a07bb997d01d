//! Large messages on a connection: bodies arriving in CHUNK frames, each
//! written to its spool file as it comes, and bodies leaving in CHUNK
//! frames, each read from its file only as fast as the client takes them,
//! so that neither holds more than a chunk or two in memory.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read};

use bytes::{Bytes, BytesMut};
use herald_protocol::frame::CHUNK_HEAD_LEN;
use herald_protocol::header::Header;
use herald_protocol::message::streamed_body;
use herald_protocol::{Body, FrameKind, Message, HEADER_LEN};

use super::outbound::Outbound;
use crate::store::large::{LargeStore, Spool};

/// Bytes of body in one CHUNK frame the server sends.
pub const CHUNK_BYTES: usize = 256 << 10;

/// Chunks are read while less than this waits to be written: a stream
/// keeps the socket busy without filling memory.
const REFILL_BELOW: usize = 4 * CHUNK_BYTES;

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

/// A body leaving for the client.
pub struct Outgoing {
    /// The delivery id the client knows the stream by.
    pub stream: u64,
    /// The body's file; none if it could not be opened, and the stream is
    /// given up.
    file: Option<File>,
    left: u64,
}

/// What streams after a native MESSAGE of `block`, delivery
/// `delivery_id`, if it is a large message's with a body: the body, from
/// its file. One whose file cannot be opened is given up.
pub fn body_of(block: &[u8], delivery_id: u64, large: Option<&LargeStore>) -> Option<Outgoing> {
    let streamed = streamed_body(block).filter(|s| s.len > 0)?;
    let opened = match large {
        Some(large) => large.open_body(&streamed),
        None => Err(io::Error::other("this server keeps no large messages")),
    };
    Some(Outgoing {
        stream: delivery_id,
        file: opened.inspect_err(|e| log_unreadable(delivery_id, e)).ok(),
        left: streamed.len,
    })
}

/// `block` for a client whose protocol cannot stream a body (STOMP,
/// MQTT, AMQP for now): a large message's body read into it as bytes, up
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
            .and_then(|f| {
                let mut body = Vec::with_capacity(streamed.len as usize);
                f.take(streamed.len).read_to_end(&mut body).map(|_| body)
            })
            .map_err(|e| format!("its body could not be read: {e}")),
    };
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

/// The empty CHUNK that gives stream `stream` up.
pub fn give_up(stream: u64) -> Bytes {
    Bytes::copy_from_slice(&chunk_head(stream, 0))
}

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

/// A CHUNK frame of the next `n` bytes of `file`, read straight into it
/// (`read_to_end` fills the frame's spare room without zeroing it first).
fn read_chunk(stream: u64, file: &mut File, n: usize) -> io::Result<Bytes> {
    let mut frame = Vec::with_capacity(HEADER_LEN + CHUNK_HEAD_LEN + n);
    frame.extend_from_slice(&chunk_head(stream, n));
    file.take(n as u64).read_to_end(&mut frame)?;
    if frame.len() != HEADER_LEN + CHUNK_HEAD_LEN + n {
        return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
    }
    Ok(Bytes::from(frame))
}

/// Queues the next chunks of the bodies leaving, first one first, while
/// little waits to be written. A body whose file fails is given up (the
/// client's read of it fails) and the next goes on.
pub fn refill(outgoing: &mut VecDeque<Outgoing>, out: &mut Outbound) {
    while out.pending() < REFILL_BELOW {
        let Some(front) = outgoing.front_mut() else {
            return;
        };
        let n = front.left.min(CHUNK_BYTES as u64) as usize;
        let read = match front.file.as_mut() {
            Some(file) => read_chunk(front.stream, file, n),
            // Said when it failed to open.
            None => Err(io::Error::from(io::ErrorKind::NotFound)),
        };
        match read {
            Ok(frame) => {
                out.push_raw(frame);
                front.left -= n as u64;
                if front.left == 0 {
                    outgoing.pop_front();
                }
            }
            Err(e) => {
                if front.file.is_some() {
                    log_unreadable(front.stream, &e);
                }
                out.push_raw(give_up(front.stream));
                outgoing.pop_front();
            }
        }
    }
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
