//! What the server knows of one client session, apart from its socket:
//! whether CONNECT has happened, the negotiated terms, the subscriptions.

use crate::collections::FastMap;
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use crate::auth::Principal;
use herald_protocol::MessageView;
use thiserror::Error;

use crate::broker::delivery::Delivery;
use crate::broker::{AckRef, Backlog, SubscriptionHandle};
use crate::frontend::streams::Incoming;

/// A delivery the client has not settled yet.
pub struct Unacked {
    /// The subscription it was delivered to.
    pub subscription_id: u32,
    /// Where its ACK goes.
    pub ack: AckRef,
}

/// A queue subscription's deliveries, put back in the order the queue
/// dispatched them. A queue dispatches on whichever thread touches it (a
/// publisher's worker inserting, the consumer's worker acknowledging), so
/// one dispatched earlier elsewhere can still be in this worker's inbox
/// when a later one, dispatched here, is ready.
#[derive(Default)]
pub struct InOrder {
    /// The place of the next delivery to hand on (0 before the first).
    next: u64,
    /// Those that came ahead of it, by place.
    early: std::collections::BTreeMap<u64, Delivery>,
}

impl InOrder {
    /// Takes delivery `d`, at place `d.order`, and appends to `out` what
    /// can go now: it and the early ones it was waiting for, or nothing.
    pub fn take(&mut self, d: Delivery, out: &mut Vec<Delivery>) {
        let next = self.next.max(1);
        if d.order > next {
            self.early.insert(d.order, d);
            return;
        }
        // One behind the count cannot be: it goes as it is.
        if d.order == next {
            self.next = next + 1;
        }
        out.push(d);
        while let Some(e) = self.early.remove(&self.next) {
            self.next += 1;
            out.push(e);
        }
    }
}

/// Where a session is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Accepted; only CONNECT is allowed.
    AwaitingConnect,
    /// CONNECT accepted.
    Connected,
}

/// What a session has going: its subscriptions, the deliveries it has
/// not settled, its transactions and temporary queues.
#[derive(Default)]
pub struct Traffic {
    /// The client's subscriptions by their id, with what it takes to end
    /// them.
    pub subscriptions: FastMap<u32, SubscriptionHandle>,
    /// Bytes each subscription's selector holds, by subscription id:
    /// bounded by `selectors.max_bytes_per_connection`.
    pub selector_memory: FastMap<u32, usize>,
    /// Acknowledged deliveries not yet settled, by delivery id.
    pub unacked: FastMap<u64, Unacked>,
    /// Per subscription from a queue, the dispatches handed on in order.
    pub in_order: FastMap<u32, InOrder>,
    /// Best-effort subscriptions: their deliveries may be dropped.
    pub best_effort: std::collections::HashSet<u32>,
    /// Temporary queues this connection made; deleted when it ends.
    pub temporary_queues: Vec<String>,
    /// Open native transactions, by the client's id for them; dropped
    /// (rolled back) with the connection.
    pub transactions: Transactions<u32>,
    /// Large messages it is sending, by its number for their streams.
    pub incoming: FastMap<u64, Incoming>,
    /// Streams of its large messages that were refused, latest last:
    /// their chunks still on the way are dropped.
    refused_streams: VecDeque<u64>,
    /// Raised while this connection drains a backlog: its direct
    /// subscriptions' publishers pause meanwhile. Made with the first
    /// subscription that hands it out.
    backlog: Option<Arc<Backlog>>,
}

impl Traffic {
    /// Notes that the stream of a refused large message is closed: its
    /// chunks still on the way are dropped. The latest `keep` are kept.
    pub fn refuse_stream(&mut self, stream: u64, keep: usize) {
        if self.refused_streams.len() >= keep {
            self.refused_streams.pop_front();
        }
        self.refused_streams.push_back(stream);
    }

    /// Whether `stream` is of a refused large message.
    pub fn was_refused(&self, stream: u64) -> bool {
        self.refused_streams.contains(&stream)
    }
}

/// Per-connection protocol state.
pub struct Session {
    /// Where the session is in its life.
    pub phase: Phase,
    /// The client's id from CONNECT ("" = none): one copy, shared with
    /// the registry of client ids and the management view.
    pub client_id: Arc<str>,
    /// Who logged in, and what they may do.
    pub principal: Principal,
    /// The peer's address and port, if the socket could tell (20 bytes
    /// where a `SocketAddr` takes 32).
    peer: Option<(IpAddr, u16)>,
    /// Requests waiting for the journal before their RECEIPT.
    pub pending_receipts: usize,
    /// How long the connection may stay silent before it is closed, in
    /// milliseconds (`u32::MAX`: for ever): the connect timeout until
    /// CONNECT, then the negotiated heart-beat.
    silence_ms: u32,
    /// Its subscriptions, deliveries and transactions: made on first use,
    /// so that a connection that only connects holds none of it.
    traffic: Option<Box<Traffic>>,
    next_delivery_id: u64,
}

impl Session {
    /// A session with `peer` that has not connected yet.
    pub fn new(connect_timeout: Duration, peer: Option<SocketAddr>) -> Session {
        let mut session = Session {
            phase: Phase::AwaitingConnect,
            client_id: no_client_id(),
            principal: Principal::nobody(),
            peer: peer.map(|a| (a.ip(), a.port())),
            pending_receipts: 0,
            silence_ms: 0,
            traffic: None,
            next_delivery_id: 1,
        };
        session.set_silence_limit(connect_timeout);
        session
    }

    /// The peer's address, if the socket could tell.
    pub fn peer(&self) -> Option<SocketAddr> {
        self.peer.map(|(ip, port)| SocketAddr::new(ip, port))
    }

    /// How long the connection may stay silent before it is closed.
    pub fn silence_limit(&self) -> Duration {
        match self.silence_ms {
            u32::MAX => Duration::MAX,
            ms => Duration::from_millis(ms.into()),
        }
    }

    /// Sets how long the connection may stay silent (past 49 days: for
    /// ever).
    pub fn set_silence_limit(&mut self, limit: Duration) {
        self.silence_ms = u32::try_from(limit.as_millis()).unwrap_or(u32::MAX);
    }

    /// Its subscriptions, deliveries and transactions, made if need be.
    pub fn traffic(&mut self) -> &mut Traffic {
        self.traffic.get_or_insert_with(Box::default)
    }

    /// Its subscriptions, deliveries and transactions, if it has had any.
    pub fn traffic_ref(&self) -> Option<&Traffic> {
        self.traffic.as_deref()
    }

    /// Its subscriptions, deliveries and transactions to change, if it has
    /// had any: what removes needs not make them.
    pub fn traffic_mut(&mut self) -> Option<&mut Traffic> {
        self.traffic.as_deref_mut()
    }

    /// Its backlog signal, for a subscription whose publishers watch it.
    pub fn backlog(&mut self) -> Arc<Backlog> {
        self.traffic()
            .backlog
            .get_or_insert_with(Arc::default)
            .clone()
    }

    /// Its backlog signal, if a subscription was given it: without one,
    /// nobody watches.
    pub fn backlog_signal(&self) -> Option<&Backlog> {
        self.traffic_ref()?.backlog.as_deref()
    }

    /// Lowers its backlog signal for good (until raised again): its
    /// publishers go on.
    pub fn lower_backlog(&self) {
        if let Some(b) = self.backlog_signal() {
            b.set(false);
            b.set_limit(0);
        }
    }

    /// How many subscriptions it holds.
    pub fn subscription_count(&self) -> usize {
        self.traffic_ref().map_or(0, |t| t.subscriptions.len())
    }

    /// Whether it holds subscription `id`.
    pub fn has_subscription(&self, id: u32) -> bool {
        self.traffic_ref()
            .is_some_and(|t| t.subscriptions.contains_key(&id))
    }

    /// Takes the client id CONNECT gave ("" = none).
    pub fn set_client_id(&mut self, id: &str) {
        self.client_id = if id.is_empty() {
            no_client_id()
        } else {
            Arc::from(id)
        };
    }

    /// The id for the next delivery on this connection.
    pub fn next_delivery_id(&mut self) -> u64 {
        let id = self.next_delivery_id;
        self.next_delivery_id += 1;
        id
    }
}

/// The client id of a session that has none: one shared value, so that
/// a connection that has not said its id allocates nothing for it.
fn no_client_id() -> Arc<str> {
    static NONE: std::sync::OnceLock<Arc<str>> = std::sync::OnceLock::new();
    NONE.get_or_init(|| Arc::from("")).clone()
}

/// Processed (ACK) or to be redelivered (NACK).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// ACK.
    Processed,
    /// NACK: back to be delivered again, counted as delivered.
    Redeliver,
    /// Back untried: delivered again without counting (AMQP's `released`).
    Release,
    /// Refused as unprocessable: to the dead-letter queue (AMQP's
    /// `rejected`).
    Reject,
}

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

impl Held {
    /// Adds work that comes with the COMMIT itself (the deliveries it
    /// names as consumed): not counted against the connection's limits.
    pub fn add_at_commit(&mut self, op: Deferred) {
        self.ops.push(op);
    }

    /// Its work in the order held, or why it can no longer commit.
    pub fn into_ops(self) -> Result<Vec<Deferred>, Doomed> {
        match self.doomed {
            Some(why) => Err(Doomed(why)),
            None => Ok(self.ops),
        }
    }
}

/// A transaction that can no longer commit, and why (what made it fail
/// while it was open): its COMMIT rolls it back.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0}")]
pub struct Doomed(pub String);

/// A transaction refused for a connection's limits (both
/// `ErrorCode::LimitExceeded` on the wire).
#[derive(Debug, Error)]
pub enum TxLimit {
    /// One more open transaction than `max_transactions_per_connection`.
    #[error("transaction {tx} is refused: this connection has {max_open} open, the most allowed (max_transactions_per_connection)")]
    TooMany {
        /// The transaction refused.
        tx: String,
        /// The limit.
        max_open: usize,
    },
    /// The open transactions would hold more than `max_transaction_bytes`.
    #[error("transaction {tx} is rolled back: this connection's open transactions would hold more than max_transaction_bytes ({limit})")]
    TooLarge {
        /// The transaction rolled back.
        tx: String,
        /// The limit, in bytes.
        limit: usize,
    },
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
    pub fn begin(&mut self, tx: K, max_open: usize) -> Result<bool, TxLimit> {
        if self.open.contains_key(&tx) {
            return Ok(false);
        }
        self.room_for(&tx, max_open)?;
        self.open.insert(tx, Held::default());
        Ok(true)
    }

    /// Refuses to open one more transaction than `max_open`.
    fn room_for(&self, tx: &K, max_open: usize) -> Result<(), TxLimit> {
        if self.open.len() < max_open || self.open.contains_key(tx) {
            return Ok(());
        }
        Err(TxLimit::TooMany {
            tx: tx.to_string(),
            max_open,
        })
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
    ) -> Result<(), TxLimit> {
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
            let too_large = TxLimit::TooLarge {
                tx: tx.to_string(),
                limit,
            };
            self.doom(tx, too_large.to_string(), max_open);
            return Err(too_large);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::{ConnectionRef, Subscriber};

    fn delivery(order: u64) -> Delivery {
        Delivery {
            to: Subscriber {
                conn: ConnectionRef {
                    worker: 0,
                    slot: 0,
                    serial: 1,
                },
                subscription_id: 1,
            },
            message: bytes::Bytes::new(),
            delivery_count: 1,
            ack: None,
            order,
            droppable: true,
        }
    }

    #[test]
    fn deliveries_that_come_early_wait_for_the_ones_before_them() {
        let mut in_order = InOrder::default();
        let mut out = Vec::new();
        for order in [1, 3, 4, 2, 6, 5, 7] {
            in_order.take(delivery(order), &mut out);
        }
        let orders: Vec<u64> = out.iter().map(|d| d.order).collect();
        assert_eq!(orders, [1, 2, 3, 4, 5, 6, 7]);
        // Held until the gap is filled; one that cannot be passes through.
        in_order.take(delivery(9), &mut out);
        assert_eq!(out.len(), 7);
        in_order.take(delivery(3), &mut out);
        in_order.take(delivery(8), &mut out);
        let orders: Vec<u64> = out[7..].iter().map(|d| d.order).collect();
        assert_eq!(orders, [3, 8, 9]);
    }
}
