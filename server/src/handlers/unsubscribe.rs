//! UNSUBSCRIBE: end a subscription; its unsettled deliveries return to
//! their queue.

use herald_protocol::frame::Unsubscribe;
use herald_protocol::ErrorCode;

use super::{receipt, Context, Flow, Refusal};
use crate::broker::Subscriber;
use crate::net::outbound::Outbound;
use crate::session::Session;

pub fn handle(
    f: Unsubscribe,
    request_id: u32,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Refusal> {
    let Some(handle) = session.subscriptions.remove(&f.subscription_id) else {
        return Err(Refusal::soft(
            ErrorCode::UnknownSubscription,
            format!(
                "no subscription with id {} on this connection",
                f.subscription_id
            ),
        ));
    };
    session
        .unacked
        .retain(|_, u| u.subscription_id != f.subscription_id);
    let subscriber = Subscriber {
        conn: ctx.me,
        subscription_id: f.subscription_id,
    };
    ctx.shared
        .broker
        .unsubscribe(handle, &subscriber, ctx.deliveries);
    receipt(out, request_id);
    Ok(Flow::Continue)
}
