//! SEND: route a published message to every matching subscription, or
//! into its queue.

use herald_protocol::{ErrorCode, MessageView};

use std::time::{Duration, Instant};

use super::{receipt, Context, Flow, Parked, Refusal};
use crate::broker::RouteError;
use crate::config::FullPolicy;
use crate::net::outbound::Outbound;

/// Routes a SEND; `since` is when it was first held back, if it was.
pub fn handle(
    message: MessageView,
    request_id: u32,
    since: Option<Instant>,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Refusal> {
    let config = &ctx.shared.config.queues;
    let block = config.full_policy == FullPolicy::Block;
    let waiter = block.then_some(ctx.me);
    let journaled = match ctx.shared.broker.publish(&message, waiter, ctx.deliveries) {
        Ok(journaled) => journaled,
        Err(RouteError::Undeclared(why)) => {
            return Err(Refusal::soft(ErrorCode::UndeclaredTopic, why))
        }
        Err(full @ RouteError::QueueFull { .. }) => {
            let since = since.unwrap_or_else(Instant::now);
            let limit = Duration::from_millis(config.block_timeout_ms.into());
            if block && since.elapsed() < limit {
                return Ok(Flow::Park(Parked {
                    message,
                    request_id,
                    since,
                }));
            }
            return Err(Refusal::soft(ErrorCode::QueueFull, full.to_string()));
        }
    };
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

/// Tries a held-back SEND again (its queue may have room now, or its time
/// may be up).
pub fn retry(parked: Parked, out: &mut Outbound, ctx: &mut Context<'_>) -> Flow {
    let request_id = parked.request_id;
    match handle(parked.message, request_id, Some(parked.since), out, ctx) {
        Ok(flow) => flow,
        Err(refusal) => refusal.answer(out, request_id),
    }
}
