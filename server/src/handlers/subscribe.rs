//! SUBSCRIBE: a topic subscription (plain, acknowledged or durable) or a
//! queue consumer.

use std::collections::hash_map::Entry;

use herald_protocol::frame::Subscribe;
use herald_protocol::ErrorCode;

use super::{receipt, Context, Flow, Refusal};
use crate::broker::{SubscribeError, SubscribeRequest, Subscriber};
use crate::net::outbound::Outbound;
use crate::session::Session;

/// The wire code for a refused subscription.
pub fn refusal(e: SubscribeError) -> Refusal {
    let code = match e {
        SubscribeError::Selector(_) => ErrorCode::InvalidSelector,
        SubscribeError::ClientIdRequired => ErrorCode::ClientIdRequired,
        SubscribeError::InUse(_) => ErrorCode::SubscriptionInUse,
        SubscribeError::UnknownDurable(_) => ErrorCode::UnknownSubscription,
        SubscribeError::DurableQueue
        | SubscribeError::Destination(_)
        | SubscribeError::NotOwner(_) => ErrorCode::InvalidDestination,
    };
    Refusal::soft(code, e.to_string())
}

/// A native SUBSCRIBE frame.
pub fn handle(
    f: Subscribe,
    request_id: u32,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Refusal> {
    let limit = ctx.shared.config.max_subscriptions_per_connection;
    if session.subscriptions.len() >= limit {
        return Err(Refusal::soft(
            ErrorCode::LimitExceeded,
            format!("this connection already holds {limit} subscriptions, the most allowed"),
        ));
    }
    let Entry::Vacant(slot) = session.subscriptions.entry(f.subscription_id) else {
        return Err(Refusal::soft(
            ErrorCode::DuplicateSubscription,
            format!(
                "subscription id {} is already in use on this connection",
                f.subscription_id
            ),
        ));
    };
    let prefix = format!("temp.{}.", ctx.me.serial);
    if f.temporary && !f.pattern.starts_with(&prefix) {
        return Err(Refusal::soft(
            ErrorCode::InvalidDestination,
            format!("a temporary queue's name starts with {prefix} (temp.<connection id>.)"),
        ));
    }
    let subscriber = Subscriber {
        conn: ctx.me,
        subscription_id: f.subscription_id,
    };
    let request = SubscribeRequest {
        kind: f.kind,
        destination: &f.pattern,
        selector: &f.selector,
        acknowledged: f.acknowledged,
        prefetch: f.prefetch,
        durable_name: &f.durable_name,
        client_id: &session.client_id,
        temporary: f.temporary,
        shared: f.shared,
        durable: f.durable,
    };
    // The RECEIPT is queued before any message the subscription may
    // already have waiting: deliveries are routed after this frame.
    let handle = ctx
        .shared
        .broker
        .subscribe(request, subscriber, ctx.deliveries)
        .map_err(refusal)?;
    slot.insert(handle);
    if f.temporary && !session.temporary_queues.contains(&f.pattern) {
        session.temporary_queues.push(f.pattern);
    }
    receipt(out, request_id);
    Ok(Flow::Continue)
}
