//! SEND: route a published message to every matching subscription, or
//! into its queue.

use std::time::{Duration, Instant};

use herald_protocol::{ErrorCode, MessageView};

use super::{receipt, Context, Flow, Parked, Refusal};
use crate::broker::{Room, RouteError};
use crate::config::FullPolicy;
use crate::net::outbound::Outbound;

/// What became of a published message.
pub enum Published {
    /// Routed: its receipt can go now.
    Now,
    /// Routed and written to the journal: the worker answers the request
    /// when the journal confirms.
    Later,
    /// Its queue is full: held back until there is room.
    Held(Parked),
}

/// Routes a message, whatever protocol it came in; `since` is when it was
/// first held back, if it was.
pub fn publish(
    message: MessageView,
    request_id: u32,
    since: Option<Instant>,
    ctx: &mut Context<'_>,
) -> Result<Published, Refusal> {
    let config = &ctx.shared.config.queues;
    let block = config.full_policy == FullPolicy::Block;
    let room = if block {
        Room::Wait(ctx.me)
    } else {
        Room::Refuse
    };
    let journaled = match ctx.shared.broker.publish(&message, room, ctx.deliveries) {
        Ok(journaled) => journaled,
        Err(RouteError::Undeclared(why)) => {
            return Err(Refusal::soft(ErrorCode::UndeclaredTopic, why))
        }
        Err(full @ RouteError::QueueFull { .. }) => {
            let since = since.unwrap_or_else(Instant::now);
            let limit = Duration::from_millis(config.block_timeout_ms.into());
            if block && since.elapsed() < limit {
                return Ok(Published::Held(Parked {
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
        // The RECEIPT waits until the journal has the message on disk.
        let done = crate::net::confirmation(ctx.shared, ctx.me, request_id);
        ctx.shared.broker.store().barrier(done);
        return Ok(Published::Later);
    }
    Ok(Published::Now)
}

/// A native SEND.
pub fn handle(
    message: MessageView,
    request_id: u32,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Refusal> {
    Ok(match publish(message, request_id, None, ctx)? {
        Published::Now => {
            receipt(out, request_id);
            Flow::Continue
        }
        Published::Later => Flow::Continue,
        Published::Held(parked) => Flow::Park(parked),
    })
}
