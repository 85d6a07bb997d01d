//! What the broker counts and shows the management interface.

use super::queue::Limit;
use std::sync::atomic::AtomicU64;

use herald_protocol::DestinationKind;

use super::queue::SharedQueue;
use super::request::{SubscribeRequest, SubscriptionHandle};

/// Counters of what happened to messages after they were routed.
#[derive(Debug, Default)]
pub struct BrokerCounters {
    /// Deliveries given back for redelivery (NACK, RECOVER, rollback).
    pub redelivered: AtomicU64,
    /// Messages moved to a dead-letter queue.
    pub dead_lettered: AtomicU64,
    /// Messages that expired before delivery.
    pub expired: AtomicU64,
}

/// A live subscription, as it was asked for.
#[derive(Clone)]
pub struct LiveSubscription {
    pub(super) kind: DestinationKind,
    pub(super) pattern: String,
    pub(super) selector: String,
    pub(super) name: String,
    /// A named (durable or shared) subscription's client id.
    pub(super) client_id: String,
    pub(super) durable: bool,
    pub(super) queue: Option<SharedQueue>,
    /// Its reader policies, which count what they drop.
    pub(super) reader: Option<std::sync::Arc<super::reader::Reader>>,
}

impl LiveSubscription {
    pub(super) fn new(req: &SubscribeRequest<'_>) -> LiveSubscription {
        LiveSubscription {
            kind: req.kind,
            pattern: req.destination.to_owned(),
            selector: req.selector_text().to_owned(),
            name: req.durable_name.to_owned(),
            client_id: match req.durable_name {
                "" => String::new(),
                _ => req.client_id.to_owned(),
            },
            // A named subscription is durable unless it is shared and
            // not asked to be.
            durable: !req.durable_name.is_empty() && (!req.shared || req.durable),
            queue: None,
            reader: None,
        }
    }

    pub(super) fn with_queue(mut self, handle: &SubscriptionHandle) -> LiveSubscription {
        self.queue = match handle {
            SubscriptionHandle::Topic { queue, reader, .. } => {
                self.reader = reader.clone();
                queue.clone()
            }
            SubscriptionHandle::Queue(q) | SubscriptionHandle::Durable { queue: q, .. } => {
                Some(q.clone())
            }
        };
        self
    }
}

/// One subscription as the management interface lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionView {
    /// Topic or queue.
    pub kind: DestinationKind,
    /// The pattern or queue name.
    pub pattern: String,
    /// The selector; empty = none.
    pub selector: String,
    /// A durable or shared subscription's name; empty = none.
    pub name: String,
    /// A durable subscription's client id.
    pub client_id: String,
    /// The consuming connection; `None` for a durable one with no
    /// consumer now.
    pub connection: Option<u64>,
    /// The connection's id for it.
    pub subscription_id: Option<u32>,
    /// Durable: kept across restarts.
    pub durable: bool,
    /// Messages waiting for it (tracked subscriptions; 0 for plain ones).
    pub backlog: usize,
    /// Samples its DDS reader policies dropped (stale by source
    /// timestamp, or held back by the time filter and replaced).
    pub dropped: u64,
}

/// One queue's figures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Its name.
    pub name: String,
    /// Messages waiting for a consumer (not those that expired).
    pub depth: usize,
    /// Messages waiting for their delivery time.
    pub scheduled: usize,
    /// Delivered and not yet acknowledged.
    pub in_flight: usize,
    /// Consumers attached.
    pub consumers: usize,
    /// Messages ever enqueued.
    pub enqueued: u64,
    /// Messages ever acknowledged.
    pub acknowledged: u64,
    /// Bytes of the messages it holds, when last weighed.
    pub bytes: usize,
    /// The memory bound it is over, if it is.
    pub over: Option<Limit>,
    /// Sends dropped because it was full (`full_policy = "drop"`).
    pub dropped: u64,
    /// Messages in its page files.
    pub paged: usize,
    /// Their bytes there.
    pub paged_bytes: u64,
    /// It would page and cannot (see [`crate::broker::Queue::paging_stopped`]).
    pub paging_stopped: bool,
}

impl QueueStats {
    /// A queue this node holds nothing of (in a cluster, one that only
    /// Redis has).
    pub fn empty(name: &str) -> QueueStats {
        QueueStats {
            name: name.to_owned(),
            ..QueueStats::default()
        }
    }
}
