//! Large messages arriving, whatever protocol carries them (native CHUNK
//! frames, AMQP transfers, a STOMP or MQTT frame's body read on its own):
//! whether a connection may send one, checked before any of its body is
//! written, and the spool file its body goes to.

use bytes::{Buf, Bytes, BytesMut};
use herald_protocol::{ErrorCode, MessageView};

use super::{Context, Refusal};
use crate::session::{Phase, Session};
use crate::store::large::{streamed_block, Spool};

/// The body size past which a frame's body is read on its own, after its
/// head (a large message's may be longer than a frame may be): where some
/// address keeps bodies in files, and past `max_frame_size` anyway; never
/// before CONNECT, nor over WebSocket, whose messages are whole.
pub fn read_apart(phase: Phase, websocket: bool, ctx: &Context<'_>) -> usize {
    match (phase, websocket) {
        (Phase::Connected, false) => ctx
            .shared
            .broker
            .large_from()
            .min(ctx.shared.config.max_frame_size as usize),
        _ => usize::MAX,
    }
}

/// The largest message a client may send: `max_frame_size`, or where
/// large messages are kept (and not over WebSocket, whose messages are
/// whole, for the protocols that read a body apart), a body of
/// `max_large_message_bytes` and a frame's worth of the rest more. What
/// MQTT's Maximum Packet Size and AMQP's max-message-size say.
pub fn largest_message(websocket: bool, ctx: &Context<'_>) -> u64 {
    let config = &ctx.shared.config;
    let frame = u64::from(config.max_frame_size);
    let kept = ctx.shared.broker.large_from() != usize::MAX;
    match !websocket && kept && config.max_streams_per_connection > 0 {
        true => config.max_large_message_bytes.saturating_add(frame),
        false => frame,
    }
}

/// Whether this connection, with `open` bodies arriving already, may send
/// `message`, whose body of `len` bytes follows it.
pub fn admit(
    message: &MessageView,
    (len, open): (u64, usize),
    session: &Session,
    ctx: &Context<'_>,
) -> Result<(), Refusal> {
    let config = &ctx.shared.config;
    if !config.cluster.redis.is_empty() {
        return Err(Refusal::soft(
            ErrorCode::LimitExceeded,
            "large messages are not carried between cluster nodes yet: send the body in one frame, within max_frame_size",
        ));
    }
    if len > config.max_large_message_bytes {
        return Err(Refusal::soft(
            ErrorCode::LimitExceeded,
            format!(
                "a body of {len} bytes exceeds max_large_message_bytes ({})",
                config.max_large_message_bytes
            ),
        ));
    }
    if open >= config.max_streams_per_connection {
        let why = match config.max_streams_per_connection {
            0 => "large messages are refused here (max_streams_per_connection = 0)".to_owned(),
            _ => format!(
                "this connection is sending {open} large messages already (max_streams_per_connection)"
            ),
        };
        return Err(Refusal::soft(ErrorCode::LimitExceeded, why));
    }
    super::authorize_publish(session, message, ctx)
}

/// The spool file for a body of `len` bytes: refused if the disk would
/// be left below its floor.
pub fn spool(len: u64, ctx: &Context<'_>) -> Result<Spool, Refusal> {
    let spool = match ctx.shared.broker.large() {
        Some(large) => large.create(len),
        None => Err(std::io::Error::other(
            "this broker has no store for large messages",
        )),
    };
    spool.map_err(|e| cannot_write(&e))
}

/// What a sender is told when its body cannot be written.
pub fn cannot_write(e: &std::io::Error) -> Refusal {
    let code = match e.kind() {
        std::io::ErrorKind::StorageFull => ErrorCode::QueueFull,
        _ => ErrorCode::Internal,
    };
    Refusal::soft(
        code,
        format!("the large message's body cannot be kept: {e}"),
    )
}

/// A body on its way, read on its own past its frame's `head` (what its
/// protocol keeps to finish the send with): a STOMP SEND's, an MQTT
/// PUBLISH's. One past its address's threshold goes to a spool file as
/// its bytes come; one under it is gathered in memory, for the frame to
/// be handled whole as it would have been.
pub struct Arriving<H> {
    head: H,
    /// Bytes of body still to come.
    left: usize,
    /// The byte that ends the body, and its name (STOMP's NUL), if its
    /// protocol has one.
    end: Option<(u8, &'static str)>,
    into: Into,
}

/// Where a body goes.
enum Into {
    /// Nowhere: a resent message already taken.
    Skip,
    Memory(BytesMut),
    /// Its file, for the message block that names it.
    File(Spool, Bytes),
}

/// A body that has all come.
pub enum Arrived {
    /// Dropped as it came.
    Skipped,
    /// In memory: the frame's body.
    Whole(Bytes),
    /// In its file: the message, a large one.
    Large(MessageView),
}

impl<H> Arriving<H> {
    /// A body of `len` bytes under its address's threshold: into memory.
    pub fn memory(head: H, len: usize, end: Option<(u8, &'static str)>) -> Arriving<H> {
        Arriving {
            head,
            left: len,
            end,
            into: Into::Memory(BytesMut::with_capacity(len)),
        }
    }

    /// A body of `len` bytes to drop as it comes (a resent message
    /// already taken).
    pub fn skip(head: H, len: usize, end: Option<(u8, &'static str)>) -> Arriving<H> {
        Arriving {
            head,
            left: len,
            end,
            into: Into::Skip,
        }
    }

    /// The body of `len` bytes of message `view` (its body empty, its
    /// kind byte the block's last), past its address's threshold or more
    /// than a frame may hold: into a file, once the connection (with
    /// `open` bodies arriving already) may send it.
    pub fn file(
        head: H,
        (view, len, end): (&MessageView, usize, Option<(u8, &'static str)>),
        open: usize,
        session: &Session,
        ctx: &Context<'_>,
    ) -> Result<Arriving<H>, Refusal> {
        admit(view, (len as u64, open), session, ctx)?;
        let spool = spool(len as u64, ctx)?;
        let block = view.block();
        let block = streamed_block(&block[..block.len() - 1], len as u64, spool.id());
        Ok(Arriving {
            head,
            left: len,
            end,
            into: Into::File(spool, block),
        })
    }

    /// Takes what of the body (and the byte that ends it) `buf` holds:
    /// whether it has all come.
    pub fn take(&mut self, buf: &mut BytesMut) -> Result<bool, Refusal> {
        let n = self.left.min(buf.len());
        if n > 0 {
            let piece = buf.split_to(n);
            match &mut self.into {
                Into::Skip => {}
                Into::Memory(body) => body.extend_from_slice(&piece),
                Into::File(spool, _) => spool.write(&piece).map_err(|e| cannot_write(&e))?,
            }
            self.left -= n;
        }
        if self.left > 0 {
            return Ok(false);
        }
        let Some((end, name)) = self.end else {
            return Ok(true);
        };
        match buf.first() {
            None => Ok(false),
            Some(&b) if b == end => {
                buf.advance(1);
                self.end = None;
                Ok(true)
            }
            Some(_) => Err(Refusal::fatal(
                ErrorCode::Malformed,
                format!("a body is not followed by {name} where its length says it ends"),
            )),
        }
    }

    /// The frame's head, and its body, which has all come.
    pub fn finish(self) -> Result<(H, Arrived), Refusal> {
        let arrived = match self.into {
            Into::Skip => Arrived::Skipped,
            Into::Memory(body) => Arrived::Whole(body.freeze()),
            Into::File(spool, block) => {
                let held = spool.finish(block).map_err(|e| cannot_write(&e))?;
                let view = MessageView::parse(held)
                    .map_err(|e| Refusal::fatal(e.code(), e.to_string()))?;
                Arrived::Large(view)
            }
        };
        Ok((self.head, arrived))
    }
}
