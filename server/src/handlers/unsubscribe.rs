//! UNSUBSCRIBE: end a subscription; its unsettled deliveries return to
//! their queue, counted as delivered only if the client may have seen them.

use std::collections::HashSet;

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
    let seen = f.seen.map(|s| s.delivery_ids);
    if !end(f.subscription_id, seen.as_deref(), session, ctx) {
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
/// there is none with that id. With `seen`, the unsettled deliveries the
/// client handed to its application: only those count as delivered, the
/// others return to their queue as they were (a consumer that closes with
/// prefetched messages it never read does not push them towards the
/// dead-letter queue). Without, all of them count.
pub fn end(
    subscription_id: u32,
    seen: Option<&[u64]>,
    session: &mut Session,
    ctx: &mut Context<'_>,
) -> bool {
    let Some(handle) = session.subscriptions.remove(&subscription_id) else {
        return false;
    };
    let seen: Option<HashSet<u64>> = seen.map(|ids| ids.iter().copied().collect());
    let mut unseen = Vec::new();
    session.unacked.retain(|id, u| {
        if u.subscription_id != subscription_id {
            return true;
        }
        if seen.as_ref().is_some_and(|seen| !seen.contains(id)) {
            unseen.push(u.ack.clone());
        }
        false
    });
    session.best_effort.remove(&subscription_id);
    session.selector_memory.remove(&subscription_id);
    let subscriber = Subscriber {
        conn: ctx.me,
        subscription_id,
    };
    ctx.shared.broker.release_unread(&unseen, &subscriber);
    ctx.shared
        .broker
        .unsubscribe(handle, &subscriber, ctx.deliveries);
    true
}
