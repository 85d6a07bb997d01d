//! CHUNK: either way, a piece of a streamed body (a large message's).
//!
//! `u64 stream | bytes`
//!
//! A message whose body is [`Streamed`](crate::message::Streamed) is
//! followed by CHUNK frames of its stream, in order, until `len` bytes have
//! come; other frames may come between them. An empty CHUNK before then
//! gives the stream up: the sender could not finish it (PROTOCOL.md,
//! "Large messages").

use bytes::{BufMut, Bytes, BytesMut};

use crate::cursor::Cursor;
use crate::error::Error;

/// Bytes of a CHUNK body before its data.
pub const CHUNK_HEAD_LEN: usize = 8;

/// A piece of a streamed body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The stream: the number in the message's streamed body.
    pub stream: u64,
    /// The next bytes of the body; empty gives the stream up.
    pub data: Bytes,
}

impl Chunk {
    pub(super) fn decode(body: Bytes) -> Result<Chunk, Error> {
        let stream = Cursor::new(&body).u64("stream")?;
        Ok(Chunk {
            stream,
            data: body.slice(CHUNK_HEAD_LEN..),
        })
    }

    pub(super) fn encode(&self, d: &mut BytesMut) {
        d.put_u64(self.stream);
        d.put_slice(&self.data);
    }

    /// Whether it gives its stream up.
    pub fn gives_up(&self) -> bool {
        self.data.is_empty()
    }
}
