//! SEND: route a published message to every matching subscription, or
//! into its queue.

use herald_protocol::{ErrorCode, MessageView};

use super::{receipt, Context, Flow, Refusal};
use crate::broker::RouteError;
use crate::net::outbound::Outbound;

pub fn handle(
    message: MessageView,
    request_id: u32,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Refusal> {
    let journaled = ctx
        .shared
        .broker
        .publish(&message, ctx.deliveries)
        .map_err(|e| match e {
            RouteError::Undeclared(why) => Refusal::soft(ErrorCode::UndeclaredTopic, why),
            full @ RouteError::QueueFull { .. } => {
                Refusal::soft(ErrorCode::QueueFull, full.to_string())
            }
        })?;
    ctx.published += 1;
    if journaled && request_id != 0 {
        // The RECEIPT waits until the journal has the message on disk; the
        // worker sends it when the journal confirms.
        let done = crate::net::confirmation(ctx.shared, ctx.me, request_id);
        ctx.shared.broker.store().barrier(done);
    } else {
        receipt(out, request_id);
    }
    Ok(Flow::Continue)
}
