//! Transactions, native and STOMP: holding a SEND, and the COMMIT (what a
//! transaction holds until it ends is the session's,
//! [`Transactions`](crate::session::Transactions)).
//!
//! A commit first checks that it can succeed (every queue it sends to has
//! room, every topic is allowed), then routes and settles as one
//! [`Atomic`](crate::broker::Atomic) commit: its
//! persistent messages and acknowledgements reach the journal as one
//! record. A commit that cannot succeed does nothing and says why.

use herald_protocol::frame::{Commit, Rollback, TxSend};
use herald_protocol::MessageView;

use super::ack::recover_subscriptions;
use crate::frontend::outbound::Outbound;
use crate::frontend::{commit, Context, Flow, Refusal};
use crate::session::{Deferred, Outcome, Session};

/// A native TX_SEND.
pub fn tx_send(
    f: TxSend,
    request_id: u32,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Refusal> {
    if let Err(refusal) = super::send::check_origin(&f.message)
        .and_then(|()| crate::frontend::authorize_publish(session, &f.message, ctx))
    {
        return Err(doom(f.transaction_id, refusal, session, ctx));
    }
    hold(f.transaction_id, f.message, request_id, session, out, ctx)
}

/// Rolls transaction `tx` back for a send it could not take; the
/// refusal, saying so.
pub fn doom(tx: u32, refusal: Refusal, session: &mut Session, ctx: &Context<'_>) -> Refusal {
    let (code, _, why) = refusal.into_parts();
    let why = format!("transaction {tx} is rolled back: {why}");
    let max_open = ctx.shared.config.max_transactions_per_connection;
    session
        .traffic()
        .transactions
        .doom(tx, why.clone(), max_open);
    Refusal::soft(code, why)
}

/// Holds a message in transaction `tx` until it ends.
pub fn hold(
    tx: u32,
    message: MessageView,
    request_id: u32,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Refusal> {
    let limit = ctx
        .shared
        .limits
        .get(&ctx.shared.limits.max_transaction_bytes);
    let max_open = ctx.shared.config.max_transactions_per_connection;
    session.traffic().transactions.hold(
        tx,
        Deferred::Send(crate::frontend::spill(message, ctx)),
        limit,
        max_open,
    )?;
    super::answer::receipt(out, request_id);
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
        .traffic_mut()
        .and_then(|t| t.transactions.end(&f.transaction_id))
        .unwrap_or_default();
    if !f.consumed.delivery_ids.is_empty() {
        held.add_at_commit(Deferred::Settle(
            f.consumed.delivery_ids,
            Outcome::Processed,
        ));
    }
    let written = commit(held, session, ctx)?;
    crate::frontend::await_journal(request_id, written, session, out, ctx);
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
    if let Some(t) = session.traffic_mut() {
        t.transactions.end(&f.transaction_id);
    }
    recover_subscriptions(f.subscriptions, session, ctx);
    super::answer::receipt(out, request_id);
    Ok(Flow::Continue)
}
