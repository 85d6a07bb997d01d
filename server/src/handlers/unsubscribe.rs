//! UNSUBSCRIBE: end a subscription; its unsettled deliveries return to
//! their queue, counted as delivered only if the client may have seen them.

use herald_protocol::frame::Unsubscribe;
use herald_protocol::ErrorCode;

use super::answer::receipt;
use crate::frontend::outbound::Outbound;
use crate::frontend::{Context, Flow, Refusal};
use crate::session::Session;

/// A native UNSUBSCRIBE frame.
pub fn handle(
    f: Unsubscribe,
    request_id: u32,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Refusal> {
    let seen = f.seen.map(|s| s.delivery_ids);
    if !crate::frontend::end_subscription(f.subscription_id, seen.as_deref(), session, ctx) {
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
