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
use herald_protocol::amqp::terminus::{Durability, Source, Terminus};
use herald_protocol::amqp::{Performative, Value};
use herald_protocol::frame::ReaderQos;
use herald_protocol::{Destination, DestinationKind, ErrorCode};

use super::mapping;
use super::state::{condition, AmqpSession, FlowAsks, Link, Outgoing, WINDOW};
use crate::auth::Permission;
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

/// Subscribes for a link on which the client receives, and keeps the
/// link on `channel`; returns the source to answer with (a dynamic node's
/// address filled in) and whether it made a durable or shared
/// subscription (answered once that is kept), or why it may not attach.
///
/// Durable and shared subscriptions are made as Qpid JMS asks for them:
/// a topic source with a durability (durable) or the `shared` capability
/// (shared), named by the link (a shared one's consumers' links are
/// `name`, `name|2`...), of the connection's container id unless the
/// `global` capability says it belongs to no client.
pub(super) fn attach(
    amqp: &mut AmqpSession,
    channel: u16,
    a: &Attach,
    session: &mut Session,
    ctx: &mut Context<'_>,
) -> Result<(Value, bool), Refused> {
    let Some(mut source) = Source::from_value(a.source.clone())
        .map_err(|e| (condition::INVALID_FIELD, e.to_string()))?
    else {
        return Ok((lookup(amqp, channel, a, session, ctx)?, false));
    };
    if let [first, ..] = source.unknown_filters()[..] {
        return Err((
            condition::NOT_IMPLEMENTED,
            format!(
                "filter {first:?}: this server applies the JMS selector and no-local filters only"
            ),
        ));
    }
    let caps = &source.node.capabilities;
    let has = |cap: &str| caps.iter().any(|c| c == cap);
    let (shared, global) = (has("shared"), has("global"));
    let durable = source.node.durable != Durability::None;
    let destination = match source.node.dynamic {
        true => dynamic(amqp, has("temporary-topic"), session, ctx)?,
        false => {
            let address = source.node.address.as_deref().ok_or_else(|| {
                (
                    condition::INVALID_FIELD,
                    "the source has no address".to_owned(),
                )
            })?;
            mapping::source(address, caps).map_err(|e| (condition::INVALID_FIELD, e.to_string()))?
        }
    };
    let queue = destination.kind == DestinationKind::Queue;
    // No-local keeps a connection's own messages from its own
    // subscription; a durable or shared one outlives the connection, and
    // a queue's messages are no one's to skip.
    let no_local = source.no_local() && !queue;
    if no_local && (durable || shared) {
        let why = "the no-local filter applies to a subscription of this connection only, not a durable or shared one";
        return Err((condition::NOT_IMPLEMENTED, why.into()));
    }
    if queue && source.distribution_mode.as_deref() == Some("copy") {
        let source = browse(amqp, (channel, a), &destination.name, &source, session, ctx)?;
        return Ok((source, false));
    }
    if queue && (durable || shared) {
        let why = "a durable or shared subscription is to a topic, not a queue";
        return Err((condition::NOT_ALLOWED, why.into()));
    }
    let text = source
        .selector()
        .map_err(|e| (condition::INVALID_FIELD, e.to_string()))?
        .unwrap_or_default();
    let selector = selector(text, session, ctx).map_err(refused)?;
    let named = durable || shared;
    let name = match shared {
        true => a.name.split('|').next().unwrap_or_default(),
        false => a.name.as_str(),
    };
    let subscription_id = amqp.next_subscription;
    amqp.next_subscription = amqp.next_subscription.wrapping_add(1).max(1);
    let client_id = match global {
        true => std::sync::Arc::from(""),
        false => session.client_id.clone(),
    };
    let user = session.principal.user.clone();
    let priority = consumer_priority(&a.properties)?;
    let exclusive = match link_property(&a.properties, "exclusive") {
        None | Some(Value::Bool(false)) => false,
        Some(Value::Bool(true)) => true,
        Some(other) => {
            return Err((
                condition::INVALID_FIELD,
                format!("the link property exclusive {other:?} is not a boolean"),
            ))
        }
    };
    let request = SubscribeRequest {
        kind: destination.kind,
        destination: &destination.name,
        selector,
        acknowledged: queue || named,
        prefetch: 0,
        durable_name: if named { name } else { "" },
        client_id: &client_id,
        user: &user,
        temporary: source.node.dynamic && queue,
        shared,
        durable: durable && shared,
        backlog: None,
        kept: false,
        no_local,
        priority,
        exclusive,
        reader: reader_qos(&a.properties)?,
    };
    // The link first: what the subscription has already is routed to it
    // after this frame.
    let link = Outgoing {
        subscription_id,
        credit: 0,
        delivery_count: 0,
        held: None,
        presettled: a.snd_settle_mode == 1,
        waiting: VecDeque::new(),
        durable: (named && durable).then(|| (client_id.to_string(), name.to_owned())),
        browsing: false,
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
    if source.node.dynamic {
        source.node.address = Some(format!(
            "{}://{}",
            destination.kind.as_str(),
            destination.name
        ));
        return Ok((source.to_value(), named));
    }
    Ok((a.source.clone(), named))
}

/// A link that browses a queue (`distribution-mode: copy`): what the queue
/// holds now, its selector applied, sent settled as credit allows; the
/// queue keeps it. A drain after the last one tells the client so.
fn browse(
    amqp: &mut AmqpSession,
    (channel, a): (u16, &Attach),
    queue: &str,
    source: &Source,
    session: &Session,
    ctx: &mut Context<'_>,
) -> Result<Value, Refused> {
    crate::frontend::authorize(session, Permission::Browse, DestinationKind::Queue, queue)
        .map_err(refused)?;
    let text = source
        .selector()
        .map_err(|e| (condition::INVALID_FIELD, e.to_string()))?
        .unwrap_or_default();
    let limit = ctx.shared.config.queues.max_messages;
    let held = ctx
        .shared
        .broker
        .browse(queue, text, limit)
        .map_err(|e| refused(crate::frontend::subscribe_refusal(e)))?;
    let link = Outgoing {
        subscription_id: 0,
        credit: 0,
        delivery_count: 0,
        held: None,
        presettled: true,
        waiting: held
            .into_iter()
            .map(|m| (0, m.deliveries + 1, m.block))
            .collect(),
        durable: None,
        browsing: true,
    };
    if let Some(ch) = amqp.channels.get_mut(&channel) {
        ch.links.insert(a.handle, Link::Outgoing(link));
    }
    Ok(a.source.clone())
}

/// A dynamic node: a temporary queue (or topic) of this connection, which
/// others reach through the address the attach answers with.
fn dynamic(
    amqp: &mut AmqpSession,
    topic: bool,
    session: &mut Session,
    ctx: &mut Context<'_>,
) -> Result<Destination, Refused> {
    let name = format!(
        "{}amqp-{}",
        ctx.shared.broker.temporary_prefix(ctx.me.serial),
        amqp.next_subscription
    );
    if topic {
        return Ok(Destination::topic(name));
    }
    ctx.shared
        .broker
        .temporary_queue(&name, ctx.me.serial)
        .map_err(|e| refused(crate::frontend::subscribe_refusal(e)))?;
    session.traffic().temporary_queues.push(name.clone());
    Ok(Destination::queue(name))
}

/// A receiver without a source: Qpid JMS asks so for the durable
/// subscription the link names, to end it (a detach that closes the
/// link). Answered with the subscription's source, the link kept idle.
fn lookup(
    amqp: &mut AmqpSession,
    channel: u16,
    a: &Attach,
    session: &Session,
    ctx: &mut Context<'_>,
) -> Result<Value, Refused> {
    let client_id = session.client_id.to_string();
    let Some((pattern, _)) = ctx.shared.broker.durable_owner(&client_id, &a.name) else {
        return Err((
            condition::NOT_FOUND,
            format!(
                "no durable subscription '{}' of client id '{client_id}'",
                a.name
            ),
        ));
    };
    crate::frontend::check_owner(session, &a.name, ctx).map_err(refused)?;
    if let Some(ch) = amqp.channels.get_mut(&channel) {
        ch.links
            .insert(a.handle, Link::Dormant((client_id, a.name.clone())));
    }
    let source = Source {
        node: Terminus {
            address: Some(format!("topic://{pattern}")),
            durable: Durability::UnsettledState,
            expiry_policy: Some("never".into()),
            capabilities: vec!["topic".into()],
            ..Terminus::default()
        },
        ..Source::default()
    };
    Ok(source.to_value())
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
    send_waiting(amqp, (channel, handle), session, out, ctx);
    let Some(link) = amqp.outgoing(channel, handle) else {
        return;
    };
    if let Some(asked) = &mut link.held {
        // Answered after the attach, which has not gone yet.
        asked.drain |= f.drain;
        asked.echo |= f.echo;
        return;
    }
    let asks = FlowAsks {
        drain: f.drain,
        echo: f.echo,
    };
    answer_flow(amqp, (channel, handle), asks, out);
}

/// Does what a flow asked of outgoing link `handle` once what waited was
/// sent: a drain uses up the credit left, and either tells the client
/// the link's state.
pub(super) fn answer_flow(
    amqp: &mut AmqpSession,
    (channel, handle): (u16, u32),
    asks: FlowAsks,
    out: &mut Outbound,
) {
    let Some(link) = amqp.outgoing(channel, handle) else {
        return;
    };
    let drained = asks.drain && link.credit > 0;
    if drained {
        link.delivery_count = link.delivery_count.wrapping_add(link.credit);
        link.credit = 0;
    }
    if drained || asks.echo {
        let state = (link.delivery_count, link.credit, link.waiting.len());
        send_flow(amqp, channel, handle, state, asks.drain, out);
    }
}

/// Sends what outgoing link `handle` holds, as far as its credit allows;
/// what goes settled is settled in the broker.
pub(super) fn send_waiting(
    amqp: &mut AmqpSession,
    (channel, handle): (u16, u32),
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) {
    let mut sent_settled = Vec::new();
    while let Some(next) = link_waiting(amqp, channel, handle) {
        let (herald_id, count, block) = next;
        // A browser's messages (id 0: delivery ids start at 1) stay in
        // their queue: nothing to settle.
        let large = ctx.shared.broker.large().map(|l| &**l);
        let sent_settled_now =
            amqp.transfer_out(out, (channel, handle), (herald_id, count, &block), large);
        if sent_settled_now && herald_id != 0 {
            sent_settled.push(herald_id);
        }
    }
    settle_as(sent_settled, Outcome::Processed, session, ctx);
}

/// The next waiting delivery of an outgoing link, if it has credit for it
/// and its attach was answered.
fn link_waiting(
    amqp: &mut AmqpSession,
    channel: u16,
    handle: u32,
) -> Option<(u64, u32, bytes::Bytes)> {
    let link = amqp.outgoing(channel, handle)?;
    match (link.credit, link.held) {
        (0, _) | (_, Some(_)) => None,
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

/// Why a disposition the client sent cannot be carried out (the
/// connection closes with `amqp:invalid-field`).
#[derive(Debug, thiserror::Error)]
pub(super) enum DispositionError {
    /// Its state does not decode.
    #[error(transparent)]
    State(#[from] herald_protocol::amqp::AmqpError),
    /// It names more deliveries than a connection may have.
    #[error("a disposition of deliveries {first} to {last}")]
    Range {
        /// The first.
        first: u32,
        /// The last.
        last: u32,
    },
    /// A state that settles nothing for a receiver.
    #[error("{0} is not an outcome a receiver gives")]
    NotAnOutcome(String),
    /// Its transaction refuses it.
    #[error("{}", .0.message())]
    Transaction(Refusal),
}

/// What the client says of deliveries this side sent.
pub(super) fn disposition(
    amqp: &mut AmqpSession,
    channel: u16,
    d: &Disposition,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<(), DispositionError> {
    if !d.role_receiver {
        // About deliveries the client sent: this side settles those.
        return Ok(());
    }
    let state = DeliveryState::from_value(d.state.clone())?;
    let last = d.last.unwrap_or(d.first);
    if last.wrapping_sub(d.first) > 1 << 20 {
        return Err(DispositionError::Range {
            first: d.first,
            last,
        });
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
    // In a transaction: held until it commits.
    let (txn, state) = match state {
        Some(DeliveryState::Transactional { txn_id, outcome }) => {
            (Some(txn_id), outcome.map(|o| *o))
        }
        state => (None, state),
    };
    let outcome = match state {
        // Settled without an outcome: as accepted (the default outcome).
        None | Some(DeliveryState::Accepted) => Outcome::Processed,
        Some(DeliveryState::Modified {
            delivery_failed: true,
            ..
        }) => Outcome::Redeliver,
        Some(DeliveryState::Released | DeliveryState::Modified { .. }) => Outcome::Release,
        Some(DeliveryState::Rejected(_)) => Outcome::Reject,
        Some(other) => return Err(DispositionError::NotAnOutcome(format!("{other:?}"))),
    };
    match txn {
        Some(txn) if !ids.is_empty() => super::txn::settle(&txn, ids, outcome, session, ctx)
            .map_err(DispositionError::Transaction)?,
        Some(_) => {}
        None => settle_as(ids, outcome, session, ctx),
    }
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
/// returns uncounted. A link `closed` for good ends its durable
/// subscription too: whether it did.
pub(super) fn ended(
    amqp: &mut AmqpSession,
    (channel, handle): (u16, u32),
    link: Outgoing,
    closed: bool,
    session: &mut Session,
    ctx: &mut Context<'_>,
) -> bool {
    if link.browsing {
        return false;
    }
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
    match (closed, &link.durable) {
        (true, Some(durable)) => end_durable(durable, ctx),
        _ => false,
    }
}

/// Ends durable subscription (client id, name), a link to it closed for
/// good; one still in use by other consumers (shared) stays. Whether it
/// was deleted.
pub(super) fn end_durable((client_id, name): &(String, String), ctx: &mut Context<'_>) -> bool {
    match ctx.shared.broker.unsubscribe_durable(client_id, name) {
        Ok(()) => true,
        Err(e) => {
            log::debug!(
                "AMQP connection {}: durable subscription '{name}' stays: {e}",
                ctx.me.serial
            );
            false
        }
    }
}

/// The value of an attach's property `name` (a symbol key), if it has it.
fn link_property<'a>(properties: &'a Value, name: &str) -> Option<&'a Value> {
    let Value::Map(entries) = properties else {
        return None;
    };
    entries
        .iter()
        .find(|(k, _)| matches!(k, Value::Symbol(s) if s == name))
        .map(|(_, v)| v)
}

/// The DDS reader policies an attach's properties give (see
/// [`crate::frontend::reader_qos`]): strings, or numbers for the numbers.
fn reader_qos(properties: &Value) -> Result<ReaderQos, (&'static str, String)> {
    let text = |name: &str| {
        link_property(properties, name).map(|v| match v {
            Value::String(s) | Value::Symbol(s) => s.clone(),
            Value::Ulong(n) => n.to_string(),
            Value::Long(n) => n.to_string(),
            Value::Uint(n) => n.to_string(),
            Value::Int(n) => n.to_string(),
            other => format!("{other:?}"),
        })
    };
    crate::frontend::reader_qos(text).map_err(|why| (condition::INVALID_FIELD, why))
}

/// The consumer priority an attach's properties give (`priority`, as
/// Artemis and Qpid JMS write it); 0 without one.
fn consumer_priority(properties: &Value) -> Result<i32, (&'static str, String)> {
    let Some(value) = link_property(properties, "priority") else {
        return Ok(0);
    };
    let wide = match *value {
        Value::Byte(n) => i64::from(n),
        Value::Short(n) => i64::from(n),
        Value::Int(n) => i64::from(n),
        Value::Long(n) => n,
        Value::Ubyte(n) => i64::from(n),
        Value::Ushort(n) => i64::from(n),
        Value::Uint(n) => i64::from(n),
        _ => i64::MAX,
    };
    i32::try_from(wide).map_err(|_| {
        (
            condition::INVALID_FIELD,
            format!("the link property priority {value:?} is not an int"),
        )
    })
}
