//! SEND: route a published message to every matching subscription, or
//! into its queue.

use herald_protocol::message::has_origin;
use herald_protocol::{ErrorCode, MessageView};

use super::answer::receipt;
use crate::amqp::mapping::origin_reads;
use crate::frontend::outbound::Outbound;
use crate::frontend::{publish, Context, Flow, Published, Refusal};
use crate::session::Session;

/// A native SEND whose message is whole: its body here or (a large
/// message's, once it has come) in its file.
pub fn handle(
    message: MessageView,
    request_id: u32,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Refusal> {
    check_origin(&message)?;
    Ok(
        match publish(message, request_id, None, session, out, ctx)? {
            Published::Now => {
                receipt(out, request_id);
                Flow::Continue
            }
            Published::Later => Flow::Continue,
            Published::Held(parked) => Flow::Park(parked),
        },
    )
}

/// Refuses a message whose AMQP origin (a client forwarding a message it
/// received keeps it) does not read as the AMQP front-end writes one:
/// AMQP receivers are sent it as it is.
pub fn check_origin(message: &MessageView) -> Result<(), Refusal> {
    if !has_origin(message.block()) {
        return Ok(());
    }
    let fields = message
        .fields()
        .map_err(|e| Refusal::fatal(e.code(), e.to_string()))?;
    match origin_reads(&fields, message.block()) {
        true => Ok(()),
        false => Err(Refusal::soft(
            ErrorCode::Malformed,
            "its AMQP origin does not read as AMQP sections that agree with the message",
        )),
    }
}
