//! Local transactions (part 4): a sender attached to the coordinator
//! declares and discharges them; transfers and dispositions that carry a
//! transactional state are held in one until it is discharged. They are
//! the session's transactions, as a native or STOMP client's are: a
//! commit routes the held messages and settles the held deliveries as one
//! journal record, or fails whole and says why.

use bytes::Bytes;
use herald_protocol::amqp::delivery::{DeliveryState, TxnControl};
use herald_protocol::{ErrorCode, MessageView};

use super::state::{condition, error, settled_as, AmqpSession, Fatal};
use crate::frontend::outbound::Outbound;
use crate::frontend::{commit, Context, Flow, Refusal};
use crate::session::{Deferred, Outcome, Session};

/// A transaction id as the client is told it: the session's number for
/// the transaction, 4 bytes.
fn txn_bytes(id: u32) -> Bytes {
    Bytes::copy_from_slice(&id.to_be_bytes())
}

/// The session's number for a transaction the client names; `None` if it
/// names none this connection declared.
fn txn_id(bytes: &[u8], session: &Session) -> Option<u32> {
    let id = u32::from_be_bytes(bytes.try_into().ok()?);
    session
        .traffic_ref()
        .is_some_and(|t| t.transactions.is_open(&id))
        .then_some(id)
}

fn unknown(bytes: &[u8]) -> Refusal {
    Refusal::soft(
        ErrorCode::TransactionRolledBack,
        format!("no transaction {bytes:02x?} is open on this connection"),
    )
}

/// What the coordinator does with a control sent to it on `channel` as
/// delivery `delivery_id`.
pub(super) fn control(
    amqp: &mut AmqpSession,
    (channel, delivery_id): (u16, u32),
    control: TxnControl,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Fatal> {
    let max_open = ctx.shared.config.max_transactions_per_connection;
    match control {
        TxnControl::Declare => {
            let id = amqp.next_txn;
            amqp.next_txn = amqp.next_txn.wrapping_add(1).max(1);
            let state = match session.traffic().transactions.begin(id, max_open) {
                Ok(_) => DeliveryState::Declared(txn_bytes(id)),
                Err(limit) => DeliveryState::Rejected(error(condition::LIMIT, limit.to_string())),
            };
            amqp.perform(out, channel, settled_as(delivery_id, state));
        }
        TxnControl::Discharge {
            txn_id: bytes,
            fail,
        } => {
            let held = txn_id(&bytes, session)
                .and_then(|id| session.traffic_mut().and_then(|t| t.transactions.end(&id)));
            let request_id = amqp.owe(channel, delivery_id);
            match (held, fail) {
                (None, _) => amqp.settle_request(out, request_id, Err(unknown(&bytes))),
                // Rolled back: what it held goes; what it accepted stays
                // unsettled, for the client to settle again.
                (Some(_), true) => amqp.settle_request(out, request_id, Ok(())),
                (Some(held), false) => match commit(held, session, ctx) {
                    // Accepted once the journal has it.
                    Ok(written) => {
                        crate::frontend::await_journal(request_id, written, session, out, ctx)
                    }
                    Err(refusal) => amqp.settle_request(out, request_id, Err(refusal)),
                },
            }
        }
    }
    Ok(Flow::Continue)
}

/// A message sent in transaction `bytes`: held until it commits, and
/// answered (if the client did not settle it) with the outcome it will
/// have then.
pub(super) fn send(
    amqp: &mut AmqpSession,
    (channel, delivery_id, settled): (u16, u32, bool),
    bytes: Bytes,
    view: MessageView,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) {
    let held = match txn_id(&bytes, session) {
        None => Err(unknown(&bytes)),
        Some(id) => hold(
            id,
            Deferred::Send(crate::frontend::spill(view, ctx)),
            session,
            ctx,
        ),
    };
    if settled {
        return;
    }
    let state = match held {
        Ok(()) => DeliveryState::Transactional {
            txn_id: bytes,
            outcome: Some(Box::new(DeliveryState::Accepted)),
        },
        Err(refusal) => super::state::outcome(Err(refusal)),
    };
    amqp.perform(out, channel, settled_as(delivery_id, state));
}

/// Deliveries the client settled in transaction `bytes` with `outcome`:
/// held until it commits.
pub(super) fn settle(
    bytes: &[u8],
    ids: Vec<u64>,
    outcome: Outcome,
    session: &mut Session,
    ctx: &mut Context<'_>,
) -> Result<(), Refusal> {
    let id = txn_id(bytes, session).ok_or_else(|| unknown(bytes))?;
    hold(id, Deferred::Settle(ids, outcome), session, ctx)
}

/// Holds work in transaction `id`, within the connection's limits; a
/// message refused for its destination dooms the transaction.
fn hold(
    id: u32,
    op: Deferred,
    session: &mut Session,
    ctx: &mut Context<'_>,
) -> Result<(), Refusal> {
    let max_open = ctx.shared.config.max_transactions_per_connection;
    if let Deferred::Send(view) = &op {
        if let Err(refusal) = crate::frontend::authorize_publish(session, view, ctx) {
            let why = format!("the transaction is rolled back: {}", refusal.message());
            session
                .traffic()
                .transactions
                .doom(id, why.clone(), max_open);
            return Err(Refusal::soft(refusal.code(), why));
        }
    }
    // Kept on disk, if it is large, only once it may be sent.
    let op = match op {
        Deferred::Send(view) => Deferred::Send(crate::frontend::spill(view, ctx)),
        other => other,
    };
    let limit = ctx
        .shared
        .limits
        .get(&ctx.shared.limits.max_transaction_bytes);
    session
        .traffic()
        .transactions
        .hold(id, op, limit, max_open)
        .map_err(Refusal::from)
}
