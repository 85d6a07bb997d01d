//! SUBSCRIBE: a topic subscription (plain, acknowledged or durable) or a
//! queue consumer.

use herald_protocol::frame::Subscribe;
use herald_protocol::{DestinationKind, ErrorCode};

use super::answer::receipt;
use crate::broker::{SubscribeRequest, Written};
use crate::frontend::outbound::Outbound;
use crate::frontend::{selector, subscribe, Context, Flow, Refusal};
use crate::session::Session;

/// A native SUBSCRIBE frame.
pub fn handle(
    f: Subscribe,
    request_id: u32,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Refusal> {
    let limit = ctx
        .shared
        .limits
        .get(&ctx.shared.limits.max_subscriptions_per_connection);
    if session.subscription_count() >= limit {
        return Err(Refusal::soft(
            ErrorCode::LimitExceeded,
            format!("this connection already holds {limit} subscriptions, the most allowed"),
        ));
    }
    let max_id = ctx.shared.config.max_id_length;
    crate::frontend::check_id_length("durable subscription name", &f.durable_name, max_id)?;
    if session.has_subscription(f.subscription_id) {
        return Err(Refusal::soft(
            ErrorCode::DuplicateSubscription,
            format!(
                "subscription id {} is already in use on this connection",
                f.subscription_id
            ),
        ));
    }
    let plain = f.kind == DestinationKind::Topic && !f.acknowledged && f.durable_name.is_empty();
    if f.best_effort && !plain {
        return Err(Refusal::soft(
            ErrorCode::Malformed,
            "best effort is for plain topic subscriptions (not acknowledged, not durable or shared)",
        ));
    }
    let prefix = ctx.shared.broker.temporary_prefix(ctx.me.serial);
    if f.temporary && !f.pattern.starts_with(&prefix) {
        return Err(Refusal::soft(
            ErrorCode::InvalidDestination,
            format!("a temporary queue's name starts with {prefix} (temp.<connection id>.)"),
        ));
    }
    let selector = selector(&f.selector, session, ctx)?;
    // Owned: the session is lent to `subscribe` whole.
    let (owner, user) = (session.client_id.clone(), session.principal.user.clone());
    let request = SubscribeRequest {
        kind: f.kind,
        destination: &f.pattern,
        selector,
        acknowledged: f.acknowledged,
        prefetch: f.prefetch,
        durable_name: &f.durable_name,
        client_id: &owner,
        user: &user,
        temporary: f.temporary,
        shared: f.shared,
        durable: f.durable,
        // A best-effort subscriber's deliveries are dropped instead.
        backlog: (!f.best_effort).then(|| session.backlog()),
        kept: true,
        no_local: false,
        priority: f.priority,
        exclusive: f.exclusive,
        reader: f.reader,
    };
    // The RECEIPT is queued before any message the subscription may
    // already have waiting: deliveries are routed after this frame.
    subscribe(f.subscription_id, request, session, ctx)?;
    let traffic = session.traffic();
    if f.best_effort {
        traffic.best_effort.insert(f.subscription_id);
    }
    if f.temporary && !traffic.temporary_queues.contains(&f.pattern) {
        traffic.temporary_queues.push(f.pattern);
    }
    if f.durable_name.is_empty() {
        receipt(out, request_id);
    } else {
        // A durable subscription's RECEIPT waits until it is kept: in the
        // journal, or in a cluster in Redis's registry, so that a message
        // sent after it, through any node, is kept for it.
        crate::frontend::await_journal(request_id, Written::default(), session, out, ctx);
    }
    Ok(Flow::Continue)
}
