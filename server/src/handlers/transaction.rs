//! Transactions, native and STOMP: holding a SEND, and the COMMIT (what a
//! transaction holds until it ends is the session's,
//! [`Transactions`](crate::session::Transactions)).
//!
//! A commit first checks that it can succeed (every queue it sends to has
//! room, every topic is allowed), then routes and settles as one
//! [`Atomic`](crate::broker::Atomic) commit: its
//! persistent messages and acknowledgements reach the journal as one
//! record. A commit that cannot succeed does nothing and says why.

use std::collections::HashMap;

use herald_protocol::frame::{Commit, Rollback, TxSend};
use herald_protocol::{DeliveryMode, DestinationKind, ErrorCode};

use super::ack::{recover_subscriptions, settle};
use super::{Context, Flow, Refusal};
use crate::broker::{Room, Written};
use crate::net::outbound::Outbound;
use crate::session::{Deferred, Held, Outcome, Session};

/// Carries out a transaction's work. Returns what its RECEIPT must check
/// (the journal kept it); refuses, having done nothing, if it cannot all
/// succeed.
pub fn commit(
    held: Held,
    session: &mut Session,
    ctx: &mut Context<'_>,
) -> Result<Written, Refusal> {
    let rolled_back = |why: String| Refusal::soft(ErrorCode::TransactionRolledBack, why);
    let ops = held.into_ops().map_err(rolled_back)?;
    let broker = &ctx.shared.broker;
    let mut per_queue: HashMap<&str, usize> = HashMap::new();
    for op in &ops {
        if let Deferred::Settle(ids, _) = op {
            if let Some(id) = ids.iter().find(|id| !session.unacked.contains_key(id)) {
                return Err(rolled_back(format!(
                    "transaction rolled back: delivery {id} is not outstanding on this connection"
                )));
            }
        }
        if let Deferred::Send(view) = op {
            if view.delivery_mode == DeliveryMode::Persistent {
                if let Some(why) = broker.refusing_persistent() {
                    return Err(rolled_back(format!("transaction rolled back: {why}")));
                }
            }
            match view.destination_kind {
                DestinationKind::Queue => *per_queue.entry(view.destination()).or_default() += 1,
                DestinationKind::Topic => broker
                    .check_topic(view.destination())
                    .map_err(|e| rolled_back(format!("transaction rolled back: {e}")))?,
            }
        }
    }
    for (queue, n) in per_queue {
        broker
            .has_room(queue, n)
            .map_err(|e| rolled_back(format!("transaction rolled back: {e}")))?;
    }
    let atomic = broker.begin_atomic();
    for op in ops {
        match op {
            Deferred::Send(view) => {
                let name = view.destination();
                match broker.publish_to(&view, name, Room::Overfill, Some(ctx.me), ctx.deliveries) {
                    Ok(routed) => ctx.routed(&view, name, routed),
                    Err(e) => log::warn!("a committed message was not routed: {e}"),
                }
            }
            Deferred::Settle(ids, outcome) => {
                settle(ids, outcome, session, &mut Written::default(), ctx);
            }
        }
    }
    Ok(broker.end_atomic(atomic, Some(ctx.me), ctx.deliveries))
}

/// A native TX_SEND.
pub fn tx_send(
    f: TxSend,
    request_id: u32,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Refusal> {
    if let Err(refusal) = super::send::authorize(session, &f.message, ctx) {
        let (code, _, why) = refusal.into_parts();
        let why = format!("transaction {} is rolled back: {why}", f.transaction_id);
        let max_open = ctx.shared.config.max_transactions_per_connection;
        session
            .transactions
            .doom(f.transaction_id, why.clone(), max_open);
        return Err(Refusal::soft(code, why));
    }
    let limit = ctx
        .shared
        .limits
        .get(&ctx.shared.limits.max_transaction_bytes);
    let max_open = ctx.shared.config.max_transactions_per_connection;
    session
        .transactions
        .hold(f.transaction_id, Deferred::Send(f.message), limit, max_open)?;
    super::receipt(out, request_id);
    Ok(Flow::Continue)
}

/// A native COMMIT: the held messages and the consumed deliveries' ACKs.
pub fn handle_commit(
    f: Commit,
    request_id: u32,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Refusal> {
    let mut held = session
        .transactions
        .end(&f.transaction_id)
        .unwrap_or_default();
    if !f.consumed.delivery_ids.is_empty() {
        held.add_at_commit(Deferred::Settle(
            f.consumed.delivery_ids,
            Outcome::Processed,
        ));
    }
    let written = commit(held, session, ctx)?;
    super::await_journal(request_id, written, session, out, ctx);
    Ok(Flow::Continue)
}

/// A native ROLLBACK: the held messages go; the subscriptions' unsettled
/// deliveries come again, as for RECOVER.
pub fn handle_rollback(
    f: Rollback,
    request_id: u32,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Refusal> {
    session.transactions.end(&f.transaction_id);
    recover_subscriptions(f.subscriptions, session, ctx);
    super::receipt(out, request_id);
    Ok(Flow::Continue)
}
