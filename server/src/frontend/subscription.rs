//! Subscriptions, whatever protocol asks: their selectors, who may make
//! them, and their end.

use std::collections::HashSet;
use std::sync::Arc;

use herald_protocol::destination::Pattern;
use herald_protocol::selector::Selector;
use herald_protocol::{DestinationKind, ErrorCode};

use super::context::{authorize as check, await_journal, Context, Refusal};
use super::login::check_id_length;
use super::outbound::Outbound;
use crate::auth::Permission;
use crate::broker::{SubscribeError, SubscribeRequest, Subscriber, Written};
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
        SubscribeError::Reader(_) => ErrorCode::LimitExceeded,
    };
    Refusal::soft(code, e.to_string())
}

/// DDS reader policies from a subscription's headers or properties, by
/// name (`get` gives a value's text): `time-filter` (ms),
/// `destination-order` (`reception` or `source-timestamp`) and `history`.
/// STOMP headers, MQTT 5 user properties and AMQP link properties name
/// them alike.
pub fn reader_qos(
    get: impl Fn(&str) -> Option<String>,
) -> Result<herald_protocol::frame::ReaderQos, String> {
    let number = |name: &str| match get(name) {
        None => Ok(0),
        Some(text) => text
            .parse::<u64>()
            .map_err(|_| format!("{name} '{text}' is not a whole number")),
    };
    let by_source_timestamp = match get("destination-order").as_deref() {
        None | Some("reception") => false,
        Some("source-timestamp") => true,
        Some(other) => {
            return Err(format!(
                "destination-order '{other}' is not reception or source-timestamp"
            ))
        }
    };
    Ok(herald_protocol::frame::ReaderQos {
        time_filter_ms: number("time-filter")?,
        by_source_timestamp,
        history: number("history")?,
    })
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
        let held: usize = session
            .traffic_ref()
            .map_or(0, |t| t.selector_memory.values().sum());
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
        session.traffic().selector_memory.insert(id, s.memory());
    }
}

/// Starts subscription `subscription_id` of this connection, whatever
/// its protocol: checks the user may, subscribes, and keeps its handle
/// (and its selector's cost). Deliveries it already has are routed after
/// the frame, behind its answer.
pub fn subscribe(
    subscription_id: u32,
    request: SubscribeRequest<'_>,
    session: &mut Session,
    ctx: &mut Context<'_>,
) -> Result<(), Refusal> {
    authorize(session, &request, ctx)?;
    let selector = request.selector.clone();
    let subscriber = Subscriber {
        conn: ctx.me,
        subscription_id,
    };
    let handle = ctx
        .shared
        .broker
        .subscribe(request, subscriber, ctx.deliveries)
        .map_err(refusal)?;
    session
        .traffic()
        .subscriptions
        .insert(subscription_id, handle);
    hold_selector(subscription_id, selector.as_deref(), session);
    Ok(())
}

/// Sends subscription `subscription_id`, which goes on, the retained
/// messages of `pattern` (which it was made with) again.
pub fn resend_retained(
    subscription_id: u32,
    pattern: &str,
    session: &mut Session,
    ctx: &mut Context<'_>,
) {
    let handle = session
        .traffic_ref()
        .and_then(|t| t.subscriptions.get(&subscription_id));
    let (Some(handle), Ok(pattern)) = (handle, Pattern::parse(pattern)) else {
        return;
    };
    let subscriber = Subscriber {
        conn: ctx.me,
        subscription_id,
    };
    ctx.shared
        .broker
        .resend_retained(handle, &pattern, subscriber, ctx.deliveries);
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
    check(
        session,
        Permission::Consume,
        request.kind,
        request.destination,
    )?;
    let durable = !request.durable_name.is_empty() && (!request.shared || request.durable);
    if durable && request.kind == DestinationKind::Topic {
        check(
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

/// Deletes durable subscription `name` of this connection's client id,
/// whatever the protocol asks: it takes the `durable` permission on the
/// subscription's topics, and the subscription must be the user's own (or
/// the user an administrator). The answer to `request_id` waits until the
/// deletion is kept (in the journal, or in a cluster in Redis), as a
/// durable subscription's does for its making, so that nothing sent after
/// it is kept for the subscription.
pub fn delete_durable(
    name: &str,
    request_id: u32,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<(), Refusal> {
    check_id_length(
        "durable subscription name",
        name,
        ctx.shared.config.max_id_length,
    )?;
    if let Some(pattern) = check_owner(session, name, ctx)? {
        check(
            session,
            Permission::Durable,
            DestinationKind::Topic,
            &pattern.to_string(),
        )?;
    }
    ctx.shared
        .broker
        .unsubscribe_durable(&session.client_id, name)
        .map_err(refusal)?;
    await_journal(request_id, Written::default(), session, out, ctx);
    Ok(())
}

/// Ends a subscription of this connection, whatever its protocol; false if
/// there is none with that id. With `seen`, the unsettled deliveries the
/// client handed to its application: only those count as delivered, the
/// others return to their queue as they were (a consumer that closes with
/// prefetched messages it never read does not push them towards the
/// dead-letter queue). Without, all of them count.
pub fn end_subscription(
    subscription_id: u32,
    seen: Option<&[u64]>,
    session: &mut Session,
    ctx: &mut Context<'_>,
) -> bool {
    let Some(traffic) = session.traffic_mut() else {
        return false;
    };
    let Some(handle) = traffic.subscriptions.remove(&subscription_id) else {
        return false;
    };
    let seen: Option<HashSet<u64>> = seen.map(|ids| ids.iter().copied().collect());
    let mut unseen = Vec::new();
    traffic.unacked.retain(|id, u| {
        if u.subscription_id != subscription_id {
            return true;
        }
        if seen.as_ref().is_some_and(|seen| !seen.contains(id)) {
            unseen.push(u.ack.clone());
        }
        false
    });
    traffic.best_effort.remove(&subscription_id);
    traffic.selector_memory.remove(&subscription_id);
    // Its id may start another subscription, whose dispatches count from 1.
    traffic.in_order.remove(&subscription_id);
    let subscriber = Subscriber {
        conn: ctx.me,
        subscription_id,
    };
    ctx.shared
        .broker
        .unsubscribe(handle, &subscriber, &unseen, ctx.deliveries);
    true
}
