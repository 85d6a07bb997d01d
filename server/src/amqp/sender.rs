//! Links on which this side sends: each is a subscription (to a queue,
//! whose consumers share its messages, or to a topic), its selector read
//! from the source's filter. What the broker routes to it goes out as the
//! client's credit allows and waits for credit otherwise; the client's
//! dispositions settle it: `accepted` acknowledges, `released` gives a
//! message back untried, `modified` gives it back tried (counted, as a
//! NACK) or untried, `rejected` dead-letters it.

use std::collections::{HashMap, VecDeque};

use herald_protocol::amqp::delivery::DeliveryState;
use herald_protocol::amqp::performative::{Attach, Disposition, Flow as AmqpFlow};
use herald_protocol::amqp::terminus::{Durability, Source};
use herald_protocol::amqp::Performative;
use herald_protocol::{DestinationKind, ErrorCode};

use super::mapping;
use super::state::{condition, AmqpSession, Link, Outgoing, WINDOW};
use crate::broker::{SubscribeRequest, Written};
use crate::frontend::outbound::Outbound;
use crate::frontend::{end_subscription, selector, settle, Context, Refusal};
use crate::session::{Outcome, Session};

/// Why a link cannot attach: the condition and why.
type Refused = (&'static str, String);

fn refused(refusal: Refusal) -> Refused {
    let condition = match refusal.code() {
        ErrorCode::NotAuthorized => condition::UNAUTHORIZED,
        ErrorCode::InvalidSelector => condition::INVALID_FIELD,
        ErrorCode::LimitExceeded => condition::LIMIT,
        ErrorCode::UnknownSubscription | ErrorCode::InvalidDestination => condition::NOT_FOUND,
        _ => condition::NOT_ALLOWED,
    };
    (condition, refusal.message().to_owned())
}

fn not_built(what: &str) -> Refused {
    (
        condition::NOT_IMPLEMENTED,
        format!("{what} over AMQP is not built yet (issue 28)"),
    )
}

/// Subscribes for a link on which the client receives, and keeps the
/// link on `channel`; or why it may not.
pub(super) fn attach(
    amqp: &mut AmqpSession,
    channel: u16,
    a: &Attach,
    session: &mut Session,
    ctx: &mut Context<'_>,
) -> Result<(), Refused> {
    let source = Source::from_value(a.source.clone())
        .map_err(|e| (condition::INVALID_FIELD, e.to_string()))?
        .ok_or_else(|| {
            (
                condition::INVALID_FIELD,
                "a receiver needs a source".to_owned(),
            )
        })?;
    if source.node.dynamic {
        return Err(not_built("a dynamic node (a temporary queue for replies)"));
    }
    if source.node.durable != Durability::None
        || source.node.capabilities.iter().any(|c| c == "shared")
    {
        return Err(not_built("a durable or shared subscription"));
    }
    if source.no_local() {
        return Err(not_built("the no-local filter"));
    }
    if let [first, ..] = source.unknown_filters()[..] {
        return Err((
            condition::NOT_IMPLEMENTED,
            format!(
                "filter {first:?}: this server applies the JMS selector and no-local filters only"
            ),
        ));
    }
    let address = source.node.address.as_deref().ok_or_else(|| {
        (
            condition::INVALID_FIELD,
            "the source has no address".to_owned(),
        )
    })?;
    let destination = mapping::destination(address, &source.node.capabilities)
        .map_err(|e| (condition::INVALID_FIELD, e.to_string()))?;
    if destination.kind == DestinationKind::Queue
        && source.distribution_mode.as_deref() == Some("copy")
    {
        return Err(not_built("browsing a queue"));
    }
    let text = source
        .selector()
        .map_err(|e| (condition::INVALID_FIELD, e.to_string()))?
        .unwrap_or_default();
    let selector = selector(text, session, ctx).map_err(refused)?;
    let subscription_id = amqp.next_subscription;
    amqp.next_subscription = amqp.next_subscription.wrapping_add(1).max(1);
    let client_id = session.client_id.clone();
    let user = session.principal.user.clone();
    let request = SubscribeRequest {
        kind: destination.kind,
        destination: &destination.name,
        selector,
        acknowledged: destination.kind == DestinationKind::Queue,
        prefetch: 0,
        durable_name: "",
        client_id: &client_id,
        user: &user,
        temporary: false,
        shared: false,
        durable: false,
        backlog: None,
        kept: false,
    };
    // The link first: what the subscription has already is routed to it
    // after this frame.
    let link = Outgoing {
        subscription_id,
        credit: 0,
        delivery_count: 0,
        presettled: a.snd_settle_mode == 1,
        waiting: VecDeque::new(),
    };
    if let Some(ch) = amqp.channels.get_mut(&channel) {
        ch.links.insert(a.handle, Link::Outgoing(link));
    }
    amqp.subscriptions
        .insert(subscription_id, (channel, a.handle));
    if let Err(refusal) = crate::frontend::subscribe(subscription_id, request, session, ctx) {
        amqp.subscriptions.remove(&subscription_id);
        if let Some(ch) = amqp.channels.get_mut(&channel) {
            ch.links.remove(&a.handle);
        }
        return Err(refused(refusal));
    }
    Ok(())
}

/// A flow for an outgoing link: its credit as the client counts it; what
/// waited goes out as far as that allows.
pub(super) fn flow(
    amqp: &mut AmqpSession,
    channel: u16,
    f: &AmqpFlow,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) {
    let Some(handle) = f.handle else {
        return;
    };
    let Some(link) = amqp.outgoing(channel, handle) else {
        return;
    };
    if let Some(credit) = f.link_credit {
        // The client's count plus what it grants, less what was sent.
        let theirs = f.delivery_count.unwrap_or(0);
        link.credit = theirs
            .wrapping_add(credit)
            .wrapping_sub(link.delivery_count);
    }
    let mut sent_settled = Vec::new();
    while let Some(next) = link_waiting(amqp, channel, handle) {
        let (herald_id, count, block) = next;
        if amqp.transfer_out(out, channel, handle, (herald_id, count, &block)) {
            sent_settled.push(herald_id);
        }
    }
    settle_as(sent_settled, Outcome::Processed, session, ctx);
    let Some(link) = amqp.outgoing(channel, handle) else {
        return;
    };
    // Drain: what credit is left is used up, and the client told so.
    let drained = f.drain && link.credit > 0;
    if drained {
        link.delivery_count = link.delivery_count.wrapping_add(link.credit);
        link.credit = 0;
    }
    if drained || f.echo {
        let state = (link.delivery_count, link.credit, link.waiting.len());
        send_flow(amqp, channel, handle, state, f.drain, out);
    }
}

/// The next waiting delivery of an outgoing link, if it has credit for it.
fn link_waiting(
    amqp: &mut AmqpSession,
    channel: u16,
    handle: u32,
) -> Option<(u64, u32, bytes::Bytes)> {
    let link = amqp.outgoing(channel, handle)?;
    match link.credit {
        0 => None,
        _ => link.waiting.pop_front(),
    }
}

/// Tells the client an outgoing link's state: (delivery count, credit,
/// messages waiting).
fn send_flow(
    amqp: &AmqpSession,
    channel: u16,
    handle: u32,
    (delivery_count, credit, available): (u32, u32, usize),
    drain: bool,
    out: &mut Outbound,
) {
    let Some(ch) = amqp.channels.get(&channel) else {
        return;
    };
    let flow = AmqpFlow {
        next_incoming_id: Some(ch.next_incoming_id),
        incoming_window: WINDOW,
        next_outgoing_id: ch.next_outgoing_id,
        outgoing_window: WINDOW,
        handle: Some(handle),
        delivery_count: Some(delivery_count),
        link_credit: Some(credit),
        available: Some(u32::try_from(available).unwrap_or(u32::MAX)),
        drain,
        echo: false,
    };
    amqp.perform(out, channel, Performative::Flow(flow));
}

/// What the client says of deliveries this side sent.
pub(super) fn disposition(
    amqp: &mut AmqpSession,
    channel: u16,
    d: &Disposition,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<(), String> {
    if !d.role_receiver {
        // About deliveries the client sent: this side settles those.
        return Ok(());
    }
    let state = DeliveryState::from_value(d.state.clone()).map_err(|e| e.to_string())?;
    let last = d.last.unwrap_or(d.first);
    if last.wrapping_sub(d.first) > 1 << 20 {
        return Err(format!("a disposition of deliveries {} to {last}", d.first));
    }
    let Some(ch) = amqp.channels.get_mut(&channel) else {
        return Ok(());
    };
    let mut ids = Vec::new();
    let mut id = d.first;
    loop {
        if let Some((_, herald_id)) = ch.unsettled.remove(&id) {
            ids.push(herald_id);
        }
        if id == last {
            break;
        }
        id = id.wrapping_add(1);
    }
    let outcome = match state {
        // Settled without an outcome: as accepted (the default outcome).
        None | Some(DeliveryState::Accepted) => Outcome::Processed,
        Some(DeliveryState::Modified {
            delivery_failed: true,
            ..
        }) => Outcome::Redeliver,
        Some(DeliveryState::Released | DeliveryState::Modified { .. }) => Outcome::Release,
        Some(DeliveryState::Rejected(_)) => Outcome::Reject,
        Some(other) => return Err(format!("{other:?} is not an outcome a receiver gives")),
    };
    settle_as(ids, outcome, session, ctx);
    if !d.settled {
        // This side settles what the client left unsettled.
        let mut back = d.clone();
        back.role_receiver = false;
        back.settled = true;
        amqp.perform(out, channel, Performative::Disposition(back));
    }
    Ok(())
}

/// Settles deliveries with `outcome`, if there are any.
fn settle_as(ids: Vec<u64>, outcome: Outcome, session: &mut Session, ctx: &mut Context<'_>) {
    if !ids.is_empty() {
        settle(ids, outcome, session, &mut Written::default(), ctx);
    }
}

/// An outgoing link has ended: its subscription ends. What it sent and
/// the client did not settle counts as delivered; what waited for credit
/// returns uncounted.
pub(super) fn ended(
    amqp: &mut AmqpSession,
    channel: u16,
    handle: u32,
    link: Outgoing,
    session: &mut Session,
    ctx: &mut Context<'_>,
) {
    amqp.subscriptions.remove(&link.subscription_id);
    let mut seen = Vec::new();
    if let Some(ch) = amqp.channels.get_mut(&channel) {
        let unsettled: &mut HashMap<u32, (u32, u64)> = &mut ch.unsettled;
        unsettled.retain(|_, (h, herald_id)| {
            let mine = *h == handle;
            if mine {
                seen.push(*herald_id);
            }
            !mine
        });
    }
    end_subscription(link.subscription_id, Some(&seen), session, ctx);
}
