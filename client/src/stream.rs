//! Large messages: bodies that travel after their message in CHUNK
//! frames (PROTOCOL.md, "Large messages"), sent from a [`Read`] and
//! received as one.
//!
//! A received body passes from the reader thread to the application
//! through a small bounded channel: while the application does not read,
//! the reader waits, and the server, whose socket fills, waits too, so
//! that neither side holds more than a few chunks of it. A body the
//! application leaves unread is dropped as it arrives once it receives
//! the next message, closes its consumer, or drops the reader.

use std::collections::HashMap;
use std::io::{self, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use herald_protocol::{Body, Message};

use crate::error::{Error, Result};
use crate::sync::lock;

/// Chunks of one body waiting for the application at most.
const BUFFERED_CHUNKS: usize = 16;

/// Bytes of body in one CHUNK frame the client sends.
pub(crate) const CHUNK_BYTES: usize = 256 << 10;

/// A piece of a body for the application: bytes, or `None` when the
/// server gave the body up.
type Piece = Option<Bytes>;

/// Where a body's receiver waits until the application takes it; taken
/// out (dropped) when it is discarded.
pub(crate) type Slot = Arc<Mutex<Option<Receiver<Piece>>>>;

/// Where a body's chunks go (none: dropped), and its bytes still to come.
type Arriving = (Option<SyncSender<Piece>>, u64);

/// The large messages' bodies of one connection, on their way.
#[derive(Default)]
pub(crate) struct Streams {
    /// Bodies arriving, by the delivery id they stream for: where their
    /// chunks go (none: dropped) and how many bytes are still to come.
    arriving: Mutex<HashMap<u64, Arriving>>,
    /// The receiving ends, by delivery id, for the application to take.
    bodies: Mutex<HashMap<u64, Slot>>,
    /// Numbers for the bodies this side sends.
    next: AtomicU64,
}

impl Streams {
    /// A number for a body to send.
    pub(crate) fn next_stream(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// A MESSAGE of delivery `delivery_id` came with a streamed body of
    /// `len` bytes; `wanted`: a consumer takes it (otherwise its chunks
    /// are dropped).
    pub(crate) fn opened(&self, delivery_id: u64, len: u64, wanted: bool) {
        if len == 0 {
            return;
        }
        let tx = match wanted {
            true => {
                let (tx, rx) = sync_channel(BUFFERED_CHUNKS);
                lock(&self.bodies).insert(delivery_id, Arc::new(Mutex::new(Some(rx))));
                Some(tx)
            }
            false => None,
        };
        lock(&self.arriving).insert(delivery_id, (tx, len));
    }

    /// A CHUNK of stream `stream`: passed on, waiting while the
    /// application's buffer is full. An empty one: the server gave the
    /// body up. A chunk of a stream this side does not know (its body
    /// was dropped) is dropped.
    pub(crate) fn chunk(&self, stream: u64, data: Bytes) {
        let tx = {
            let mut arriving = lock(&self.arriving);
            let Some((tx, left)) = arriving.get_mut(&stream) else {
                return;
            };
            let n = data.len() as u64;
            let tx = tx.clone();
            if n == 0 || n >= *left {
                arriving.remove(&stream);
            } else {
                *left -= n;
            }
            tx
        };
        let piece = (!data.is_empty()).then_some(data);
        // Outside the lock: this waits for the application.
        if let Some(tx) = tx {
            if tx.send(piece).is_err() {
                // Its reader went: the rest is dropped as it comes.
                if let Some((tx, _)) = lock(&self.arriving).get_mut(&stream) {
                    *tx = None;
                }
            }
        }
    }

    /// The body of delivery `delivery_id` to read, `len` bytes long; none
    /// if it was discarded or taken before.
    pub(crate) fn take(&self, delivery_id: u64, len: u64) -> Option<BodyReader> {
        let slot = lock(&self.bodies).remove(&delivery_id);
        let slot = match (slot, len) {
            (Some(slot), _) => slot,
            // An empty body has no stream.
            (None, 0) => Arc::new(Mutex::new(None)),
            (None, _) => return None,
        };
        Some(BodyReader {
            slot,
            current: Bytes::new(),
            left: len,
        })
    }

    /// The body of delivery `delivery_id`, to cut off later (see
    /// [`cut`]) whether the application took it or not.
    pub(crate) fn slot(&self, delivery_id: u64) -> Option<Slot> {
        lock(&self.bodies).get(&delivery_id).cloned()
    }

    /// Drops the body of delivery `delivery_id` if the application did not
    /// take it: its chunks still to come are dropped.
    pub(crate) fn discard(&self, delivery_id: u64) {
        if let Some(slot) = lock(&self.bodies).remove(&delivery_id) {
            cut(&slot);
        }
    }

    /// The connection ended: every body on its way is cut off.
    pub(crate) fn clear(&self) {
        lock(&self.arriving).clear();
        for (_, slot) in lock(&self.bodies).drain() {
            lock(&slot).take();
        }
    }
}

/// The body of `message`, a large message received on this connection,
/// to read as it arrives.
pub(crate) fn body(streams: &Streams, message: &Message) -> Result<BodyReader> {
    // A body that came with its message reads as one that follows it: an
    // application reads every body one way, whichever its size made it.
    let whole = |current: Bytes| {
        Ok(BodyReader {
            slot: Arc::new(Mutex::new(None)),
            left: current.len() as u64,
            current,
        })
    };
    let s = match &message.body {
        Body::Stream(s) => s,
        Body::Bytes(b) => return whole(b.clone()),
        Body::Text(t) => return whole(Bytes::copy_from_slice(t.as_bytes())),
        Body::Empty => return whole(Bytes::new()),
        Body::Map(_) => {
            return Err(Error::InvalidArgument(
                "a map body is not read as bytes".into(),
            ))
        }
    };
    streams.take(message.delivery_id, s.len).ok_or_else(|| {
        Error::InvalidArgument(
            "its body was taken already, or dropped (a body is read before the consumer's next receive)".into(),
        )
    })
}

/// Cuts a body off: a reader of it fails, and its chunks still to come
/// are dropped.
pub(crate) fn cut(slot: &Slot) {
    lock(slot).take();
}

/// A message's body to read: a large message's as it arrives (read it
/// before the consumer's next receive, which drops what is left of it).
pub struct BodyReader {
    slot: Slot,
    current: Bytes,
    left: u64,
}

impl BodyReader {
    /// Bytes of the body not read yet.
    pub fn remaining(&self) -> u64 {
        self.left
    }
}

impl Read for BodyReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 || buf.is_empty() {
            return Ok(0);
        }
        if self.current.is_empty() {
            let next = match lock(&self.slot).as_ref() {
                Some(rx) => rx.recv().ok(),
                None => {
                    return Err(io::Error::other(
                        "the body was dropped: it is read before the consumer's next receive",
                    ))
                }
            };
            self.current = match next {
                Some(Some(data)) => data,
                Some(None) => {
                    return Err(io::Error::other(
                        "the server could not send the rest of the body (its log says why)",
                    ))
                }
                None => {
                    return Err(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        "the connection ended before the whole body came",
                    ))
                }
            };
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        self.current = self.current.slice(n..);
        self.left = self.left.saturating_sub(n as u64);
        Ok(n)
    }
}

impl std::fmt::Debug for BodyReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BodyReader")
            .field("remaining", &self.left)
            .finish()
    }
}
