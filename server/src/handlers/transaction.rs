//! Transactions, native and STOMP: what a transaction holds until it ends,
//! and its COMMIT.
//!
//! A commit first checks that it can succeed (every queue it sends to has
//! room, every topic is allowed), then routes and settles as one
//! [`Atomic`](crate::broker::Atomic) commit: its
//! persistent messages and acknowledgements reach the journal as one
//! record. A commit that cannot succeed does nothing and says why.

use std::collections::HashMap;

use herald_protocol::frame::{Commit, Rollback, TxSend};
use herald_protocol::{DeliveryMode, DestinationKind, ErrorCode, MessageView};

use super::ack::{recover_subscriptions, settle, Outcome};
use super::{Context, Flow, Refusal};
use crate::broker::{Room, Written};
use crate::net::outbound::Outbound;
use crate::session::Session;

/// What a held message is charged beyond its bytes.
const HELD_OVERHEAD: usize = 64;

/// Work held in a transaction until it commits.
pub enum Deferred {
    /// A message to route.
    Send(MessageView),
    /// Deliveries to settle.
    Settle(Vec<u64>, Outcome),
}

/// One open transaction.
#[derive(Default)]
pub struct Held {
    ops: Vec<Deferred>,
    bytes: usize,
    /// Why it can no longer commit, once something made it fail.
    doomed: Option<String>,
}

/// The open transactions of one connection, by the client's name for them,
/// within the connection's byte budget.
pub struct Transactions<K> {
    open: HashMap<K, Held>,
    bytes: usize,
}

impl<K> Default for Transactions<K> {
    fn default() -> Self {
        Transactions {
            open: HashMap::new(),
            bytes: 0,
        }
    }
}

impl<K: std::hash::Hash + Eq + std::fmt::Display + Clone> Transactions<K> {
    /// Opens `tx` if it is not open yet; false if it already was. Refused
    /// if `max_open` transactions are open already.
    pub fn begin(&mut self, tx: K, max_open: usize) -> Result<bool, Refusal> {
        if self.open.contains_key(&tx) {
            return Ok(false);
        }
        self.room_for(&tx, max_open)?;
        self.open.insert(tx, Held::default());
        Ok(true)
    }

    /// Refuses to open one more transaction than `max_open`.
    fn room_for(&self, tx: &K, max_open: usize) -> Result<(), Refusal> {
        if self.open.len() < max_open || self.open.contains_key(tx) {
            return Ok(());
        }
        Err(Refusal::soft(
            ErrorCode::LimitExceeded,
            format!(
                "transaction {tx} is refused: this connection has {max_open} open, the most allowed (max_transactions_per_connection)"
            ),
        ))
    }

    /// Whether `tx` is open.
    pub fn is_open(&self, tx: &K) -> bool {
        self.open.contains_key(tx)
    }

    /// Holds work in `tx` (opening it), within `limit` bytes for the whole
    /// connection. Past the limit the transaction is rolled back: its work
    /// dropped, the reason kept for its COMMIT, and returned now.
    /// Opens `tx` too if need be, within `max_open` open transactions.
    pub fn hold(
        &mut self,
        tx: K,
        op: Deferred,
        limit: usize,
        max_open: usize,
    ) -> Result<(), Refusal> {
        self.room_for(&tx, max_open)?;
        let held = self.open.entry(tx.clone()).or_default();
        if held.doomed.is_some() {
            return Ok(());
        }
        let cost = match &op {
            Deferred::Send(view) => view.block().len() + HELD_OVERHEAD,
            Deferred::Settle(ids, _) => ids.len() * 8 + HELD_OVERHEAD,
        };
        if self.bytes + cost > limit {
            let why = format!(
                "transaction {tx} is rolled back: this connection's open transactions would hold more than max_transaction_bytes ({limit})"
            );
            self.doom(tx, why.clone(), max_open);
            return Err(Refusal::soft(ErrorCode::LimitExceeded, why));
        }
        self.bytes += cost;
        held.bytes += cost;
        held.ops.push(op);
        Ok(())
    }

    /// Rolls `tx` back now, opening it if need be (within `max_open`; past
    /// it there is nothing to drop): its work is dropped, and its COMMIT
    /// will fail with `why`.
    pub fn doom(&mut self, tx: K, why: String, max_open: usize) {
        if self.room_for(&tx, max_open).is_err() {
            return;
        }
        let held = self.open.entry(tx).or_default();
        self.bytes -= held.bytes;
        held.ops.clear();
        held.bytes = 0;
        held.doomed.get_or_insert(why);
    }

    /// Ends `tx`, returning what it held (None if it was not open).
    pub fn end(&mut self, tx: &K) -> Option<Held> {
        let held = self.open.remove(tx)?;
        self.bytes -= held.bytes;
        Some(held)
    }
}

/// Carries out a transaction's work. Returns what its RECEIPT must check
/// (the journal kept it); refuses, having done nothing, if it cannot all
/// succeed.
pub fn commit(
    held: Held,
    session: &mut Session,
    ctx: &mut Context<'_>,
) -> Result<Written, Refusal> {
    let rolled_back = |why: String| Refusal::soft(ErrorCode::TransactionRolledBack, why);
    if let Some(why) = held.doomed {
        return Err(rolled_back(why));
    }
    let broker = &ctx.shared.broker;
    let mut per_queue: HashMap<&str, usize> = HashMap::new();
    for op in &held.ops {
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
    for op in held.ops {
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
        held.ops.push(Deferred::Settle(
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
