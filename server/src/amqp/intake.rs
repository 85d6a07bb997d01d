//! What a client's transfers make: a message, read whole from memory, or
//! a large one taken in as it comes. A delivery whose body is one binary
//! (a `data` section's or an `amqp-value`'s, up to 4 GiB) past its
//! address's `large_message_threshold` has its body's bytes written to a
//! spool file as its transfers come, so that memory holds only its other
//! sections whatever its size; it is routed like any other once its last
//! transfer has come, its body left in the file (see `store::large`).

use bytes::BytesMut;
use herald_protocol::amqp::message::{body_start, BodyStart, Sections};
use herald_protocol::{Destination, MessageView};

use super::mapping::{self, MappingError};
use super::state::{condition, fault, AmqpSession, Arriving, Fault, Intake, Link, Partial};
use crate::frontend::{arriving, Context};
use crate::session::Session;
use crate::store::large::streamed_block;

/// The Herald message a client's whole AMQP message `bytes` makes, sent
/// on a link to `destination` (the anonymous relay's: `None`).
pub(super) fn view_of(
    amqp: &mut AmqpSession,
    bytes: &[u8],
    destination: Option<&Destination>,
) -> Result<MessageView, Fault> {
    let m = Sections::read(bytes).map_err(|e| (condition::DECODE, e.to_string()))?;
    let n = amqp.next_message;
    amqp.next_message += 1;
    let id = (amqp.id_prefix.as_str(), n);
    mapping::message_from(&m, destination, id, mapping::now_ms(), &mut amqp.chunks).map_err(|e| {
        let condition = match e {
            MappingError::NoAddress => condition::NOT_FOUND,
            MappingError::Message(_) => condition::INVALID_FIELD,
        };
        (condition, e.to_string())
    })
}

/// Looks at the start of a delivery whose transfers are still coming,
/// once it shows where the body begins: a large one's body goes to a file
/// from now on, if the connection may send it (else it is refused, and
/// the rest of it dropped as it comes); any other stays in memory.
pub(super) fn probe(
    amqp: &mut AmqpSession,
    partial: &mut Partial,
    destination: Option<&Destination>,
    session: &Session,
    ctx: &Context<'_>,
) {
    let (head, content, len, value) = match body_start(&partial.bytes) {
        BodyStart::NotYet => return,
        BodyStart::Other => {
            partial.body = Intake::Memory;
            return;
        }
        BodyStart::Binary {
            head,
            content,
            len,
            value,
        } => (head, content, len, value),
    };
    partial.body = Intake::Memory;
    // A body that memory may not hold goes to a file whatever its address
    // says (or is refused saying why).
    let max_frame = ctx.shared.config.max_frame_size as usize;
    let must = len as usize > max_frame;
    if !must && ctx.shared.broker.large_past(len as usize).is_none() {
        return;
    }
    // The message with an empty body of the same section: its head.
    let mut headed = partial.bytes[..head].to_vec();
    headed.extend_from_slice(&[0x00, 0x53, if value { 0x77 } else { 0x75 }, 0xa0, 0x00]);
    let open = arriving_bodies(amqp);
    let taken = view_of(amqp, &headed, destination).and_then(|view| {
        let threshold = ctx
            .shared
            .broker
            .settings(view.destination_kind, view.destination())
            .large_message_threshold;
        if len <= threshold as u64 && !must {
            return Ok(None);
        }
        arriving::admit(&view, (len, open), session, ctx).map_err(fault)?;
        let spool = arriving::spool(len, ctx).map_err(fault)?;
        // Its empty body's kind byte is the block's last.
        let block = view.block();
        let block = streamed_block(&block[..block.len() - 1], len, spool.id());
        Ok(Some(Arriving {
            spool,
            block,
            after: BytesMut::new(),
        }))
    });
    let rest = partial.bytes.split_off(content);
    partial.body = match taken {
        Ok(None) => {
            partial.bytes.unsplit(rest);
            return;
        }
        Ok(Some(arriving)) => Intake::File(Box::new(arriving)),
        Err(fault) => Intake::Refused(fault),
    };
    partial.bytes = BytesMut::new();
    take(partial, &rest, max_frame);
}

/// Large bodies this connection's links are taking in.
fn arriving_bodies(amqp: &AmqpSession) -> usize {
    amqp.channels
        .values()
        .flat_map(|ch| ch.links.values())
        .filter(|link| {
            matches!(link, Link::Incoming(i)
                if i.partial.as_ref().is_some_and(|p| matches!(p.body, Intake::File(_))))
        })
        .count()
}

/// Takes the next bytes of a large body arriving (dropped if it was
/// refused): to its file up to its length, then, up to `max_after`,
/// what follows it. A body that cannot be written is refused.
pub(super) fn take(partial: &mut Partial, payload: &[u8], max_after: usize) {
    let Intake::File(arriving) = &mut partial.body else {
        return;
    };
    let n = payload.len().min(arriving.spool.left() as usize);
    let written = arriving.spool.write(&payload[..n]);
    let after = &payload[n..];
    let fault = match written {
        Err(e) => fault(arriving::cannot_write(&e)),
        Ok(()) if arriving.after.len() + after.len() > max_after => (
            condition::MESSAGE_SIZE,
            format!("more than {max_after} bytes after a large message's body (max_frame_size)"),
        ),
        Ok(()) => {
            arriving.after.extend_from_slice(after);
            return;
        }
    };
    // Its file goes with it.
    partial.body = Intake::Refused(fault);
}

/// The large message whose last transfer has come, its body now its
/// file's; or why it is refused.
pub(super) fn finish(body: Intake) -> Result<MessageView, Fault> {
    let arriving = match body {
        Intake::File(arriving) => arriving,
        Intake::Refused(fault) => return Err(fault),
        Intake::Unknown | Intake::Memory => {
            return Err((condition::INTERNAL, "no large body arrived".into()))
        }
    };
    let Arriving {
        spool,
        block,
        after,
    } = *arriving;
    if spool.left() > 0 {
        return Err((
            condition::DECODE,
            format!(
                "the message ended {} bytes short of its body's length",
                spool.left()
            ),
        ));
    }
    // A footer may follow; further body sections may not.
    let only_footer = Sections::read(&after).map(|s| s.body.is_empty());
    match only_footer {
        Ok(true) => {}
        Ok(false) => {
            return Err((
                condition::NOT_IMPLEMENTED,
                "a large message's body is taken as one data section or binary amqp-value, and this one has more sections".into(),
            ))
        }
        Err(e) => return Err((condition::DECODE, e.to_string())),
    }
    let held = spool
        .finish(block)
        .map_err(|e| fault(arriving::cannot_write(&e)))?;
    MessageView::parse(held).map_err(|e| (condition::DECODE, e.to_string()))
}
