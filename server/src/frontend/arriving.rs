//! Large messages arriving, whatever protocol carries them (native CHUNK
//! frames, AMQP transfers): whether a connection may send one, checked
//! before any of its body is written, and the spool file its body goes to.

use herald_protocol::{ErrorCode, MessageView};

use super::{Context, Refusal};
use crate::session::Session;
use crate::store::large::Spool;

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
