//! SUBSCRIBE: add a subscription to the topic tree.

use std::collections::hash_map::Entry;

use herald_protocol::frame::Subscribe;
use herald_protocol::{ErrorCode, Pattern};

use super::{receipt, Context, Flow, Refusal};
use crate::broker::Subscriber;
use crate::net::outbound::Outbound;
use crate::session::Session;

pub fn handle(
    f: Subscribe,
    request_id: u32,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Refusal> {
    let pattern = Pattern::parse(&f.pattern)
        .map_err(|e| Refusal::soft(ErrorCode::InvalidDestination, e.to_string()))?;
    let limit = ctx.config.max_subscriptions_per_connection;
    if session.subscriptions.len() >= limit {
        return Err(Refusal::soft(
            ErrorCode::LimitExceeded,
            format!("this connection already holds {limit} subscriptions, the most allowed"),
        ));
    }
    match session.subscriptions.entry(f.subscription_id) {
        Entry::Occupied(_) => Err(Refusal::soft(
            ErrorCode::DuplicateSubscription,
            format!(
                "subscription id {} is already in use on this connection",
                f.subscription_id
            ),
        )),
        Entry::Vacant(slot) => {
            let subscriber = Subscriber {
                conn: ctx.me,
                subscription_id: f.subscription_id,
            };
            ctx.broker.subscribe(&pattern, subscriber);
            slot.insert(pattern);
            receipt(out, request_id);
            Ok(Flow::Continue)
        }
    }
}
