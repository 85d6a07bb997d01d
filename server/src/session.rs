//! What the server knows of one client session, apart from its socket:
//! whether CONNECT has happened, the negotiated terms, the subscriptions.

use crate::FastMap;
use std::sync::Arc;
use std::time::Duration;

use crate::auth::Principal;
use crate::broker::{AckRef, Backlog, SubscriptionHandle};
use crate::handlers::transaction::Transactions;

/// A delivery the client has not settled yet.
pub struct Unacked {
    /// The subscription it was delivered to.
    pub subscription_id: u32,
    /// Where its ACK goes.
    pub ack: AckRef,
}

/// Where a session is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Accepted; only CONNECT is allowed.
    AwaitingConnect,
    /// CONNECT accepted.
    Connected,
}

/// Per-connection protocol state.
pub struct Session {
    /// Where the session is in its life.
    pub phase: Phase,
    /// The client's id from CONNECT ("" = none).
    pub client_id: String,
    /// Who logged in, and what they may do.
    pub principal: Principal,
    /// Requests waiting for the journal before their RECEIPT.
    pub pending_receipts: usize,
    /// How long the connection may stay silent before it is closed: the
    /// connect timeout until CONNECT, then the negotiated heart-beat.
    pub silence_limit: Duration,
    /// The client's subscriptions by their id, with what it takes to end
    /// them.
    pub subscriptions: FastMap<u32, SubscriptionHandle>,
    /// Bytes each subscription's selector holds, by subscription id:
    /// bounded by `selectors.max_bytes_per_connection`.
    pub selector_memory: FastMap<u32, usize>,
    /// Acknowledged deliveries not yet settled, by delivery id.
    pub unacked: FastMap<u64, Unacked>,
    /// Best-effort subscriptions: their deliveries may be dropped.
    pub best_effort: std::collections::HashSet<u32>,
    /// Temporary queues this connection made; deleted when it ends.
    pub temporary_queues: Vec<String>,
    /// Open native transactions, by the client's id for them; dropped
    /// (rolled back) with the connection.
    pub transactions: Transactions<u32>,
    /// Raised while this connection drains a backlog: its direct
    /// subscriptions' publishers pause meanwhile.
    pub backlog: Arc<Backlog>,
    next_delivery_id: u64,
}

impl Session {
    /// A session that has not connected yet.
    pub fn new(connect_timeout: Duration) -> Session {
        Session {
            phase: Phase::AwaitingConnect,
            client_id: String::new(),
            principal: Principal::nobody(),
            pending_receipts: 0,
            silence_limit: connect_timeout,
            subscriptions: FastMap::default(),
            selector_memory: FastMap::default(),
            unacked: FastMap::default(),
            temporary_queues: Vec::new(),
            best_effort: std::collections::HashSet::new(),
            transactions: Transactions::default(),
            backlog: Arc::default(),
            next_delivery_id: 1,
        }
    }

    /// The id for the next delivery on this connection.
    pub fn next_delivery_id(&mut self) -> u64 {
        let id = self.next_delivery_id;
        self.next_delivery_id += 1;
        id
    }
}
