//! UNSUBSCRIBE: end a subscription; its unsettled deliveries return to
//! their queue.

use herald_protocol::frame::Unsubscribe;
use herald_protocol::ErrorCode;

use super::{receipt, Context, Flow, Refusal};
use crate::broker::Subscriber;
use crate::net::outbound::Outbound;
use crate::session::Session;

/// A native UNSUBSCRIBE frame.
pub fn handle(
    f: Unsubscribe,
    request_id: u32,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Refusal> {
    if !end(f.subscription_id, session, ctx) {
        return Err(Refusal::soft(
            ErrorCode::UnknownSubscription,
            format!(
                "no subscription with id {} on this connection",
                f.subscription_id
            ),
        ));
    }
    receipt(out, request_id);
    Ok(Flow::Continue)
}

/// Ends a subscription of this connection, whatever its protocol; false if
/// there is none with that id.
pub fn end(subscription_id: u32, session: &mut Session, ctx: &mut Context<'_>) -> bool {
    let Some(handle) = session.subscriptions.remove(&subscription_id) else {
        return false;
    };
    session
        .unacked
        .retain(|_, u| u.subscription_id != subscription_id);
    session.best_effort.remove(&subscription_id);
    session.selector_memory.remove(&subscription_id);
    let subscriber = Subscriber {
        conn: ctx.me,
        subscription_id,
    };
    ctx.shared
        .broker
        .unsubscribe(handle, &subscriber, ctx.deliveries);
    true
}
