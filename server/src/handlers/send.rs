//! SEND: route a published message to every matching subscription, or
//! into its queue.

use herald_protocol::MessageView;

use super::answer::receipt;
use crate::frontend::outbound::Outbound;
use crate::frontend::{publish, Context, Flow, Published, Refusal};
use crate::session::Session;

/// A native SEND.
pub fn handle(
    message: MessageView,
    request_id: u32,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Refusal> {
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
