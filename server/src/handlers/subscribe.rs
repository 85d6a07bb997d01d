//! SUBSCRIBE: a topic subscription (plain, acknowledged or durable) or a
//! queue consumer.

use std::sync::Arc;

use herald_protocol::destination::Pattern;
use herald_protocol::frame::Subscribe;
use herald_protocol::selector::Selector;
use herald_protocol::{DestinationKind, ErrorCode};

use super::{receipt, Context, Flow, Refusal};
use crate::auth::Permission;
use crate::broker::Written;
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

/// A subscription's selector, parsed within the server's limits, if the
/// connection's selectors have room for it (see [`hold_selector`]).
pub fn selector(
    text: &str,
    session: &Session,
    ctx: &Context<'_>,
) -> Result<Option<Arc<Selector>>, Refusal> {
    let selector = ctx.shared.broker.parse_selector(text).map_err(refusal)?;
    if let Some(s) = &selector {
        let limit = ctx.shared.config.selectors.max_bytes_per_connection;
        let held: usize = session.selector_memory.values().sum();
        if held + s.memory() > limit {
            return Err(Refusal::soft(
                ErrorCode::LimitExceeded,
                format!(
                    "this selector needs {} bytes and the connection's selectors hold {held}: \
                     more than the {limit} allowed (selectors.max_bytes_per_connection)",
                    s.memory()
                ),
            ));
        }
    }
    Ok(selector)
}

/// Counts the selector of subscription `id`, now made, against the
/// connection's selector memory until the subscription ends.
pub fn hold_selector(id: u32, selector: Option<&Selector>, session: &mut Session) {
    if let Some(s) = selector {
        session.selector_memory.insert(id, s.memory());
    }
}

/// Refuses a subscription the user lacks a permission for: `consume` on
/// the destination, and `durable` for a durable one. A connection's own
/// temporary queues and topics need none.
pub fn authorize(
    session: &Session,
    request: &SubscribeRequest<'_>,
    ctx: &Context<'_>,
) -> Result<(), Refusal> {
    let own = ctx.shared.broker.temporary_prefix(ctx.me.serial);
    if request.destination.starts_with(&own) {
        return Ok(());
    }
    super::authorize(
        session,
        Permission::Consume,
        request.kind,
        request.destination,
    )?;
    let durable = !request.durable_name.is_empty() && (!request.shared || request.durable);
    if durable && request.kind == DestinationKind::Topic {
        super::authorize(
            session,
            Permission::Durable,
            request.kind,
            request.destination,
        )?;
    }
    if !request.durable_name.is_empty() {
        check_owner(session, request.durable_name, ctx)?;
    }
    Ok(())
}

/// Refuses to let one user use, replace or delete a named subscription
/// that another user made (administrators may). One made anonymously, or
/// on another node of a cluster, has no owner. Returns its pattern, if it
/// exists.
pub fn check_owner(
    session: &Session,
    name: &str,
    ctx: &Context<'_>,
) -> Result<Option<Pattern>, Refusal> {
    let Some((pattern, owner)) = ctx.shared.broker.durable_owner(&session.client_id, name) else {
        return Ok(None);
    };
    let user = &session.principal.user;
    if owner.is_empty() || owner == *user || session.principal.permissions.is_admin() {
        return Ok(Some(pattern));
    }
    Err(Refusal::soft(
        ErrorCode::NotAuthorized,
        format!(
            "subscription '{name}' of client id '{}' belongs to another user, not '{user}'",
            session.client_id
        ),
    ))
}

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
    if session.subscriptions.len() >= limit {
        return Err(Refusal::soft(
            ErrorCode::LimitExceeded,
            format!("this connection already holds {limit} subscriptions, the most allowed"),
        ));
    }
    let max_id = ctx.shared.config.max_id_length;
    super::connect::check_id_length("durable subscription name", &f.durable_name, max_id)?;
    if session.subscriptions.contains_key(&f.subscription_id) {
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
    let subscriber = Subscriber {
        conn: ctx.me,
        subscription_id: f.subscription_id,
    };
    let selector = selector(&f.selector, session, ctx)?;
    let request = SubscribeRequest {
        kind: f.kind,
        destination: &f.pattern,
        selector: selector.clone(),
        acknowledged: f.acknowledged,
        prefetch: f.prefetch,
        durable_name: &f.durable_name,
        client_id: &session.client_id,
        user: &session.principal.user,
        temporary: f.temporary,
        shared: f.shared,
        durable: f.durable,
        // A best-effort subscriber's deliveries are dropped instead.
        backlog: (!f.best_effort).then(|| session.backlog.clone()),
    };
    authorize(session, &request, ctx)?;
    // The RECEIPT is queued before any message the subscription may
    // already have waiting: deliveries are routed after this frame.
    let handle = ctx
        .shared
        .broker
        .subscribe(request, subscriber, ctx.deliveries)
        .map_err(refusal)?;
    session.subscriptions.insert(f.subscription_id, handle);
    hold_selector(f.subscription_id, selector.as_deref(), session);
    if f.best_effort {
        session.best_effort.insert(f.subscription_id);
    }
    if f.temporary && !session.temporary_queues.contains(&f.pattern) {
        session.temporary_queues.push(f.pattern);
    }
    if f.durable_name.is_empty() {
        receipt(out, request_id);
    } else {
        // A durable subscription's RECEIPT waits until it is kept: in the
        // journal, or in a cluster in Redis's registry, so that a message
        // sent after it, through any node, is kept for it.
        super::await_journal(request_id, Written::default(), session, out, ctx);
    }
    Ok(Flow::Continue)
}
