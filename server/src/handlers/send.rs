//! SEND: route a published message to every matching subscription.

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
    let deliveries = &mut *ctx.deliveries;
    ctx.broker
        .publish(&message, |s| deliveries.push(*s, message.block().clone()))
        .map_err(|e| match e {
            RouteError::Undeclared(why) => Refusal::soft(ErrorCode::UndeclaredTopic, why),
        })?;
    ctx.published += 1;
    receipt(out, request_id);
    Ok(Flow::Continue)
}
