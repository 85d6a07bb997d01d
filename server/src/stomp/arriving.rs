//! A STOMP client's large messages: a SEND whose `content-length` says
//! more than its address's `large_message_threshold` (or more than a
//! frame may hold) has its body written to a spool file as the bytes
//! come, so that memory holds only its headers whatever its size; with
//! its NUL it is sent like any other SEND, its body left in the file.
//! A body under its threshold is gathered in memory and its frame handled
//! whole, as it would have been. One body arrives at a time: STOMP frames
//! follow each other whole.

use bytes::{Buf, Bytes, BytesMut};
use herald_protocol::stomp::StompFrame;
use herald_protocol::{ErrorCode, MessageView};

use crate::frontend::{arriving, Context, Refusal};
use crate::session::Session;
use crate::store::large::{streamed_block, Spool};

/// A SEND's body on its way.
pub(super) struct Arriving {
    /// Bytes of body still to come; its NUL follows them.
    left: usize,
    into: Into,
    /// The request the SEND's receipt answers.
    pub(super) request_id: u32,
    /// A large message's transaction, if it is sent in one.
    pub(super) transaction: Option<String>,
}

/// Where the body goes.
enum Into {
    /// Into memory, under the frame's head: a body under its threshold.
    Memory(StompFrame, BytesMut),
    /// Into its file, for the message `block` (which names the file).
    File(Spool, Bytes),
}

/// The SEND whose body has come.
pub(super) enum Arrived {
    /// Whole, to be handled as any frame.
    Frame(StompFrame),
    /// A large message, its body in its file.
    Large(MessageView),
}

impl Arriving {
    /// The body of `body_len` bytes of the SEND whose head is `frame`,
    /// under its address's threshold: into memory.
    pub(super) fn memory(frame: StompFrame, body_len: usize, request_id: u32) -> Arriving {
        Arriving {
            left: body_len,
            into: Into::Memory(frame, BytesMut::with_capacity(body_len)),
            request_id,
            transaction: None,
        }
    }

    /// The body of `body_len` bytes of the message `view` (its body
    /// empty), past its address's threshold or more than a frame may
    /// hold: into a file, once the connection may send it.
    pub(super) fn file(
        view: &MessageView,
        body_len: usize,
        (request_id, transaction): (u32, Option<String>),
        session: &Session,
        ctx: &Context<'_>,
    ) -> Result<Arriving, Refusal> {
        let len = body_len as u64;
        // One body arrives at a time on a STOMP connection.
        arriving::admit(view, (len, 0), session, ctx)?;
        let spool = arriving::spool(len, ctx)?;
        // Its empty body's kind byte is the block's last.
        let block = view.block();
        let block = streamed_block(&block[..block.len() - 1], len, spool.id());
        Ok(Arriving {
            left: body_len,
            into: Into::File(spool, block),
            request_id,
            transaction,
        })
    }

    /// Takes what of the body, and its NUL, `buf` holds: whether they
    /// have all come.
    pub(super) fn take(&mut self, buf: &mut BytesMut) -> Result<bool, Refusal> {
        let n = self.left.min(buf.len());
        if n > 0 {
            let piece = buf.split_to(n);
            match &mut self.into {
                Into::Memory(_, body) => body.extend_from_slice(&piece),
                Into::File(spool, _) => spool
                    .write(&piece)
                    .map_err(|e| arriving::cannot_write(&e))?,
            }
            self.left -= n;
        }
        if self.left > 0 || buf.is_empty() {
            return Ok(false);
        }
        if buf[0] != 0 {
            return Err(Refusal::fatal(
                ErrorCode::Malformed,
                "a SEND's body is not followed by a NUL where its content-length says it ends",
            ));
        }
        buf.advance(1);
        Ok(true)
    }

    /// The SEND whose body has all come.
    pub(super) fn finish(self) -> Result<Arrived, Refusal> {
        match self.into {
            Into::Memory(mut frame, body) => {
                frame.body = body.freeze();
                Ok(Arrived::Frame(frame))
            }
            Into::File(spool, block) => {
                let held = spool
                    .finish(block)
                    .map_err(|e| arriving::cannot_write(&e))?;
                let view = MessageView::parse(held)
                    .map_err(|e| Refusal::fatal(e.code(), e.to_string()))?;
                Ok(Arrived::Large(view))
            }
        }
    }
}
