//! An AMQP session's links: `attach`, `flow`, `transfer`, `disposition`
//! and `detach`, and the links on which a client sends: each grants it
//! `amqp.link_credit` messages, renewed as they arrive; a message is
//! routed as the native protocol's SEND is, and settled by this side once
//! routed, or once the journal has it. Links on which this side sends are
//! `super::sender`'s.

use bytes::{Bytes, BytesMut};
use herald_protocol::amqp::delivery::{DeliveryState, TxnControl};
use herald_protocol::amqp::message::Message as AmqpMessage;
use herald_protocol::amqp::performative::{Attach, Detach, Flow as AmqpFlow, Transfer};
use herald_protocol::amqp::terminus::LinkTarget;
use herald_protocol::amqp::{Performative, Value};
use herald_protocol::{Destination, MessageView};

use super::intake;
use super::mapping;
use super::sender;
use super::state::{
    condition, error, outcome, settled_as, AmqpSession, Fatal, Fault, Incoming, Intake, Link,
    Partial, WINDOW,
};
use crate::auth::Permission;
use crate::frontend::outbound::Outbound;
use crate::frontend::{publish, Context, Flow, Published, Refusal};
use crate::session::Session;

/// Handles a link's performative on `channel` (which has a session).
pub(super) fn performative(
    amqp: &mut AmqpSession,
    channel: u16,
    p: Performative,
    payload: bytes::Bytes,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Fatal> {
    match p {
        Performative::Attach(a) => attach(amqp, channel, *a, session, out, ctx),
        Performative::Transfer(t) => transfer(amqp, channel, t, payload, session, out, ctx),
        Performative::Detach(d) => {
            let Some(ch) = amqp.channels.get_mut(&channel) else {
                return Err(unattached(d.handle));
            };
            // The answer to this side's detach.
            if ch.detaching.remove(&d.handle) {
                return Ok(Flow::Continue);
            }
            if !ch.links.contains_key(&d.handle) {
                return Err(unattached(d.handle));
            }
            amqp.attach_now(out, channel, d.handle);
            let deleted = end_link(amqp, (channel, d.handle), d.closed, session, ctx);
            let detach = Performative::Detach(Detach {
                handle: d.handle,
                closed: d.closed,
                error: None,
            });
            match deleted {
                // Once the deletion is kept, as a native
                // UNSUBSCRIBE_DURABLE's RECEIPT.
                true => amqp.perform_when_kept(out, channel, detach, session, ctx),
                false => amqp.perform(out, channel, detach),
            }
            Ok(Flow::Continue)
        }
        // Credit for links on which this side sends, and the session's
        // window, which this side keeps open.
        Performative::Flow(f) => {
            if let Some(handle) = f.handle {
                let ch = amqp.channels.get(&channel);
                if ch.is_some_and(|ch| ch.detaching.contains(&handle)) {
                    return Ok(Flow::Continue);
                }
                match ch.and_then(|ch| ch.links.get(&handle)) {
                    None => return Err(unattached(handle)),
                    Some(Link::Outgoing(_)) => sender::flow(amqp, channel, &f, session, out, ctx),
                    Some(Link::Incoming(_)) if f.echo => grant(amqp, channel, handle, out),
                    Some(Link::Incoming(_) | Link::Dormant(_)) => {}
                }
            }
            Ok(Flow::Continue)
        }
        Performative::Disposition(d) => {
            sender::disposition(amqp, channel, &d, session, out, ctx)
                .map_err(|why| Fatal(condition::INVALID_FIELD, why.to_string()))?;
            Ok(Flow::Continue)
        }
        other => Err(Fatal(
            condition::FRAMING,
            format!("{other:?} is not a link's performative"),
        )),
    }
}

/// Ends a link this side kept (detached, `closed` for good or not, or its
/// session ended); whether that deleted a durable subscription.
fn end_link(
    amqp: &mut AmqpSession,
    (channel, handle): (u16, u32),
    closed: bool,
    session: &mut Session,
    ctx: &mut Context<'_>,
) -> bool {
    let link = amqp
        .channels
        .get_mut(&channel)
        .and_then(|ch| ch.links.remove(&handle));
    match link {
        Some(Link::Outgoing(link)) => {
            sender::ended(amqp, (channel, handle), link, closed, session, ctx)
        }
        Some(Link::Dormant(durable)) if closed => sender::end_durable(&durable, ctx),
        _ => false,
    }
}

/// Ends every link of the session on `channel`, and the session.
pub(super) fn end_session(
    amqp: &mut AmqpSession,
    channel: u16,
    session: &mut Session,
    ctx: &mut Context<'_>,
) {
    let handles: Vec<u32> = amqp
        .channels
        .get(&channel)
        .map(|ch| ch.links.keys().copied().collect())
        .unwrap_or_default();
    for handle in handles {
        end_link(amqp, (channel, handle), false, session, ctx);
    }
    // Attaches not answered yet are not: the session is gone.
    amqp.attaching.retain(|_, (c, _, _)| *c != channel);
    amqp.channels.remove(&channel);
}

fn unattached(handle: u32) -> Fatal {
    Fatal(
        condition::UNATTACHED,
        format!("handle {handle} is not attached"),
    )
}

/// Refuses an attach: an attach back without the terminus, then a detach
/// with why.
fn refuse_attach(
    amqp: &mut AmqpSession,
    channel: u16,
    mut a: Attach,
    (condition, why): (&str, String),
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) {
    a.role_receiver = !a.role_receiver;
    if a.role_receiver {
        a.target = herald_protocol::amqp::Value::Null;
    } else {
        a.source = herald_protocol::amqp::Value::Null;
    }
    a.initial_delivery_count = (!a.role_receiver).then_some(0);
    let handle = a.handle;
    amqp.perform(out, channel, Performative::Attach(Box::new(a)));
    detach_with(amqp, channel, handle, (condition, why), session, out, ctx);
}

fn attach(
    amqp: &mut AmqpSession,
    channel: u16,
    a: Attach,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Fatal> {
    let max = ctx.shared.config.amqp.max_links;
    if a.handle >= max {
        return Err(Fatal(
            condition::FRAMING,
            format!(
                "handle {} is beyond the handle-max of {}",
                a.handle,
                max - 1
            ),
        ));
    }
    if amqp
        .channels
        .get(&channel)
        .is_some_and(|ch| ch.links.contains_key(&a.handle))
    {
        return Err(Fatal(
            condition::HANDLE_IN_USE,
            format!("handle {} is attached already", a.handle),
        ));
    }
    if a.role_receiver {
        let (source, kept) = match sender::attach(amqp, channel, &a, session, ctx) {
            Ok(attached) => attached,
            Err(fault) => {
                refuse_attach(amqp, channel, a, fault, session, out, ctx);
                return Ok(Flow::Continue);
            }
        };
        let reply = Attach {
            source,
            role_receiver: false,
            initial_delivery_count: Some(0),
            max_message_size: 0,
            // Unsettled unless the client asked for settled.
            snd_settle_mode: if a.snd_settle_mode == 1 { 1 } else { 0 },
            rcv_settle_mode: 0,
            offered_capabilities: Vec::new(),
            desired_capabilities: Vec::new(),
            properties: Value::Null,
            ..a
        };
        match kept {
            true => amqp.attach_when_kept((channel, reply.handle), Box::new(reply), ctx),
            false => amqp.perform(out, channel, Performative::Attach(Box::new(reply))),
        }
        return Ok(Flow::Continue);
    }
    let (destination, coordinator) = match sender_target(&a, session) {
        Ok(d) => d,
        Err(fault) => {
            refuse_attach(amqp, channel, a, fault, session, out, ctx);
            return Ok(Flow::Continue);
        }
    };
    // Accepted: the attach back, then credit.
    let credit = ctx.shared.config.amqp.link_credit;
    let handle = a.handle;
    let delivery_count = a.initial_delivery_count.unwrap_or(0);
    let reply = Attach {
        role_receiver: true,
        initial_delivery_count: None,
        // A message whose body is one binary may be a large message's.
        max_message_size: crate::frontend::arriving::largest_message(false, ctx),
        offered_capabilities: Vec::new(),
        desired_capabilities: Vec::new(),
        properties: Value::Null,
        // Settled on arrival, as a receiver does in mode first.
        rcv_settle_mode: 0,
        ..a
    };
    amqp.perform(out, channel, Performative::Attach(Box::new(reply)));
    if let Some(ch) = amqp.channels.get_mut(&channel) {
        ch.links.insert(
            handle,
            Link::Incoming(Incoming {
                destination: destination.map(std::sync::Arc::new),
                credit,
                delivery_count,
                partial: None,
                coordinator,
            }),
        );
    }
    grant(amqp, channel, handle, out);
    Ok(Flow::Continue)
}

/// Where a link on which the client sends delivers: its target's node,
/// or `None` for the anonymous relay, and whether it is the transaction
/// coordinator; or why it may not attach.
fn sender_target(
    a: &Attach,
    session: &Session,
) -> Result<(Option<Destination>, bool), (&'static str, String)> {
    let target = LinkTarget::from_value(a.target.clone())
        .map_err(|e| (condition::INVALID_FIELD, e.to_string()))?;
    let destination = match target {
        None => None,
        Some(LinkTarget::Coordinator(caps)) => {
            if let Some(other) = caps.iter().find(|c| *c != "amqp:local-transactions") {
                let why = format!("{other}: this server has local transactions only");
                return Err((condition::NOT_IMPLEMENTED, why));
            }
            return Ok((None, true));
        }
        Some(LinkTarget::Target(t)) if t.dynamic => {
            let why = "a dynamic target: this side makes temporary queues for receivers only";
            return Err((condition::NOT_ALLOWED, why.into()));
        }
        Some(LinkTarget::Target(t)) => t
            .address
            .as_deref()
            .map(|address| mapping::destination(address, &t.capabilities))
            .transpose()
            .map_err(|e| (condition::INVALID_FIELD, e.to_string()))?,
    };
    if let Some(d) = destination.as_ref().filter(|d| !d.is_temporary()) {
        session
            .principal
            .check(Permission::Publish, d.kind, &d.name)
            .map_err(|denied| (condition::UNAUTHORIZED, denied.to_string()))?;
    }
    Ok((destination, false))
}

/// Sends a link's state and its full credit.
fn grant(amqp: &mut AmqpSession, channel: u16, handle: u32, out: &mut Outbound) {
    let full = amqp.link_credit;
    let Some(ch) = amqp.channels.get_mut(&channel) else {
        return;
    };
    let next_incoming_id = ch.next_incoming_id;
    let Some(Link::Incoming(link)) = ch.links.get_mut(&handle) else {
        return;
    };
    link.credit = full;
    let flow = AmqpFlow {
        next_incoming_id: Some(next_incoming_id),
        incoming_window: WINDOW,
        next_outgoing_id: 1,
        outgoing_window: WINDOW,
        handle: Some(handle),
        delivery_count: Some(link.delivery_count),
        link_credit: Some(full),
        available: None,
        drain: false,
        echo: false,
    };
    amqp.perform(out, channel, Performative::Flow(flow));
}

/// Wait `token` of `amqp` is over: its attach is answered, and the link
/// sends what it held as its credit allows; or, if the subscription could
/// not be kept, the link is detached with why.
pub fn attached(
    amqp: &mut AmqpSession,
    token: u32,
    result: Result<(), Refusal>,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) {
    let Some(&(channel, handle, _)) = amqp.attaching.get(&token) else {
        return;
    };
    let asks = amqp.attach_now(out, channel, handle);
    match result {
        Ok(()) => {
            sender::send_waiting(amqp, (channel, handle), session, out, ctx);
            sender::answer_flow(amqp, (channel, handle), asks, out);
        }
        Err(refusal) => {
            let why = format!("the subscription is not kept: {}", refusal.message());
            detach_with(
                amqp,
                channel,
                handle,
                (condition::INTERNAL, why),
                session,
                out,
                ctx,
            );
        }
    }
}

/// Ends a link on an error of its own: the connection goes on.
fn detach_with(
    amqp: &mut AmqpSession,
    channel: u16,
    handle: u32,
    (condition, why): (&str, String),
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) {
    log::info!(
        "AMQP connection {}: link {handle} detached: {condition}: {why}",
        ctx.me.serial
    );
    end_link(amqp, (channel, handle), false, session, ctx);
    if let Some(ch) = amqp.channels.get_mut(&channel) {
        ch.detaching.insert(handle);
    }
    amqp.detach(out, channel, handle, (condition, why));
}

fn transfer(
    amqp: &mut AmqpSession,
    channel: u16,
    t: Transfer,
    payload: bytes::Bytes,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Fatal> {
    let max_message = ctx.shared.config.max_frame_size as usize;
    let full = amqp.link_credit;
    let Some(ch) = amqp.channels.get_mut(&channel) else {
        return Err(unattached(t.handle));
    };
    ch.next_incoming_id = ch.next_incoming_id.wrapping_add(1);
    if ch.detaching.contains(&t.handle) {
        return Ok(Flow::Continue);
    }
    let Some(Link::Incoming(link)) = ch.links.get_mut(&t.handle) else {
        return Err(unattached(t.handle));
    };
    // The first frame of a delivery uses credit.
    let partial = match link.partial.take() {
        Some(p) => p,
        None => {
            let Some(delivery_id) = t.delivery_id else {
                return Err(Fatal(
                    condition::INVALID_FIELD,
                    "a transfer that starts a delivery without a delivery-id".into(),
                ));
            };
            if link.credit == 0 {
                let why = "a transfer without credit".to_owned();
                detach_with(
                    amqp,
                    channel,
                    t.handle,
                    (condition::TRANSFER_LIMIT, why),
                    session,
                    out,
                    ctx,
                );
                return Ok(Flow::Continue);
            }
            link.credit -= 1;
            link.delivery_count = link.delivery_count.wrapping_add(1);
            Partial {
                delivery_id,
                settled: t.settled,
                bytes: BytesMut::new(),
                txn: None,
                body: Intake::Unknown,
            }
        }
    };
    let mut partial = partial;
    partial.settled |= t.settled;
    if let Ok(Some(DeliveryState::Transactional { txn_id, .. })) =
        DeliveryState::from_value(t.state.clone())
    {
        partial.txn = Some(txn_id);
    }
    if t.aborted {
        // A large body's file goes with it.
        return Ok(Flow::Continue);
    }
    let large = matches!(partial.body, Intake::File(_) | Intake::Refused(_));
    if !large && partial.bytes.len() + payload.len() > max_message {
        let why = format!("a message of more than {max_message} bytes (max_frame_size)");
        detach_with(
            amqp,
            channel,
            t.handle,
            (condition::MESSAGE_SIZE, why),
            session,
            out,
            ctx,
        );
        return Ok(Flow::Continue);
    }
    let low = link.credit <= full / 2;
    let destination = link.destination.clone();
    let coordinator = link.coordinator;
    if large {
        intake::take(&mut partial, &payload, max_message);
    }
    if t.more {
        if !large {
            partial.bytes.extend_from_slice(&payload);
        }
        if matches!(partial.body, Intake::Unknown) && !coordinator {
            intake::probe(amqp, &mut partial, destination.as_deref(), session, ctx);
        }
        if let Some(Link::Incoming(link)) = amqp
            .channels
            .get_mut(&channel)
            .and_then(|ch| ch.links.get_mut(&t.handle))
        {
            link.partial = Some(partial);
        }
        return Ok(Flow::Continue);
    }
    if low {
        grant(amqp, channel, t.handle, out);
    }
    if large {
        let Partial {
            delivery_id,
            settled,
            txn,
            body,
            ..
        } = partial;
        let made = intake::finish(body);
        let handled = (channel, t.handle, delivery_id, settled, txn);
        return route(amqp, handled, made, session, out, ctx);
    }
    // A message in one frame is read where it lies.
    let whole = match partial.bytes.is_empty() {
        true => payload,
        false => {
            partial.bytes.extend_from_slice(&payload);
            partial.bytes.split().freeze()
        }
    };
    if coordinator {
        return coordinate(
            amqp,
            (channel, t.handle),
            partial,
            &whole,
            session,
            out,
            ctx,
        );
    }
    deliver(
        amqp,
        channel,
        t.handle,
        (partial, whole),
        destination,
        session,
        out,
        ctx,
    )
}

/// A whole message that arrived on the coordinator's link: a declare or
/// a discharge.
fn coordinate(
    amqp: &mut AmqpSession,
    (channel, handle): (u16, u32),
    partial: Partial,
    whole: &[u8],
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Fatal> {
    let control = AmqpMessage::decode(whole)
        .map_err(|e| e.to_string())
        .and_then(|m| match m.body {
            herald_protocol::amqp::message::Body::Value(v) => {
                TxnControl::from_value(v).map_err(|e| e.to_string())
            }
            other => Err(format!(
                "the coordinator takes an amqp-value, not {other:?}"
            )),
        });
    match control {
        Ok(control) => super::txn::control(
            amqp,
            (channel, partial.delivery_id),
            control,
            session,
            out,
            ctx,
        ),
        Err(why) => {
            detach_with(
                amqp,
                channel,
                handle,
                (condition::DECODE, why),
                session,
                out,
                ctx,
            );
            Ok(Flow::Continue)
        }
    }
}

/// Routes a whole message that arrived on a link.
#[allow(clippy::too_many_arguments)]
fn deliver(
    amqp: &mut AmqpSession,
    channel: u16,
    handle: u32,
    (partial, bytes): (Partial, Bytes),
    destination: Option<std::sync::Arc<Destination>>,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Fatal> {
    let Partial {
        delivery_id,
        settled,
        txn,
        ..
    } = partial;
    let made = intake::view_of(amqp, &bytes, destination.as_deref());
    let handled = (channel, handle, delivery_id, settled, txn);
    route(amqp, handled, made, session, out, ctx)
}

/// Routes the message a delivery made (`handled`: its channel, link
/// handle, delivery id, whether the client settled it, and its
/// transaction), or answers why it was not made.
fn route(
    amqp: &mut AmqpSession,
    handled: (u16, u32, u32, bool, Option<Bytes>),
    made: Result<MessageView, Fault>,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Fatal> {
    let (channel, handle, delivery_id, settled, txn) = handled;
    let view = match made {
        Ok(view) => view,
        Err(fault) if settled => {
            detach_with(amqp, channel, handle, fault, session, out, ctx);
            return Ok(Flow::Continue);
        }
        Err((condition, why)) => {
            let rejected = DeliveryState::Rejected(error(condition, why));
            amqp.perform(out, channel, settled_as(delivery_id, rejected));
            return Ok(Flow::Continue);
        }
    };
    if let Some(txn) = txn {
        super::txn::send(
            amqp,
            (channel, delivery_id, settled),
            txn,
            view,
            session,
            out,
            ctx,
        );
        return Ok(Flow::Continue);
    }
    let request_id = if settled {
        0
    } else {
        amqp.owe(channel, delivery_id)
    };
    match publish(view, request_id, None, session, out, ctx) {
        Ok(Published::Now) => {
            amqp.settle_request(out, request_id, Ok(()));
            Ok(Flow::Continue)
        }
        Ok(Published::Later) => Ok(Flow::Continue),
        Ok(Published::Held(parked)) => Ok(Flow::Park(parked)),
        Err(refusal) if request_id == 0 => {
            let why = refusal.message().to_owned();
            let condition = match outcome(Err(refusal)) {
                DeliveryState::Rejected(Some(c)) if c.condition == condition::UNAUTHORIZED => {
                    condition::UNAUTHORIZED
                }
                _ => condition::NOT_ALLOWED,
            };
            detach_with(amqp, channel, handle, (condition, why), session, out, ctx);
            Ok(Flow::Continue)
        }
        Err(refusal) => {
            amqp.settle_request(out, request_id, Err(refusal));
            Ok(Flow::Continue)
        }
    }
}
