//! What the management interface sees of the broker and may change: queue
//! and subscription listings, counters, strict mode's declared topics,
//! purging a queue, replaying a dead-letter queue. Nothing here is on the
//! publish path.

use std::sync::atomic::AtomicU64;

use bytes::{Bytes, BytesMut};
use herald_protocol::{DestinationKind, Message, MessageView};

use super::{Broker, Room, RouteError, SharedQueue, SubscribeRequest, SubscriptionHandle};
use crate::broker::delivery::Deliveries;
use crate::sync::{lock, read, write};

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
    kind: DestinationKind,
    pattern: String,
    selector: String,
    name: String,
    /// A named (durable or shared) subscription's client id.
    client_id: String,
    durable: bool,
    queue: Option<SharedQueue>,
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
        }
    }

    pub(super) fn with_queue(mut self, handle: &SubscriptionHandle) -> LiveSubscription {
        self.queue = match handle {
            SubscriptionHandle::Topic { queue, .. } => queue.clone(),
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
}

/// One queue's figures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Its name.
    pub name: String,
    /// Messages waiting (ready or scheduled).
    pub depth: usize,
    /// Delivered and not yet acknowledged.
    pub in_flight: usize,
    /// Consumers attached.
    pub consumers: usize,
    /// Messages ever enqueued.
    pub enqueued: u64,
    /// Messages ever acknowledged.
    pub acknowledged: u64,
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

impl Broker {
    /// Redeliveries, dead letters, expiries.
    pub fn counters(&self) -> &BrokerCounters {
        &self.counters
    }

    /// Every named queue's figures, by name.
    pub fn queue_stats(&self) -> Vec<QueueStats> {
        let queues: Vec<SharedQueue> = read(&self.queues).values().cloned().collect();
        let mut v: Vec<QueueStats> = queues
            .iter()
            .map(|q| {
                let q = lock(q);
                let (enqueued, acknowledged) = q.counters();
                QueueStats {
                    name: q.name().to_owned(),
                    depth: q.depth(),
                    in_flight: q.in_flight(),
                    consumers: q.consumer_count(),
                    enqueued,
                    acknowledged,
                }
            })
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// Every subscription: the live ones, and durable ones without a
    /// consumer now.
    pub fn subscriptions(&self) -> Vec<SubscriptionView> {
        let backlog = |q: &Option<SharedQueue>| q.as_ref().map_or(0, |q| lock(q).depth());
        let mut v: Vec<SubscriptionView> = lock(&self.live)
            .iter()
            .map(|((conn, id), s)| SubscriptionView {
                kind: s.kind,
                pattern: s.pattern.clone(),
                selector: s.selector.clone(),
                name: s.name.clone(),
                client_id: s.client_id.clone(),
                connection: Some(*conn),
                subscription_id: Some(*id),
                durable: s.durable,
                backlog: backlog(&s.queue),
            })
            .collect();
        for ((client_id, name), d) in lock(&self.durables).iter() {
            if d.consumers.is_empty() {
                v.push(SubscriptionView {
                    kind: DestinationKind::Topic,
                    pattern: d.pattern.to_string(),
                    selector: d.selector.clone(),
                    name: name.clone(),
                    client_id: client_id.clone(),
                    connection: None,
                    subscription_id: None,
                    durable: d.durable(),
                    backlog: lock(&d.queue).depth(),
                });
            }
        }
        v.sort_by(|a, b| (&a.pattern, a.connection).cmp(&(&b.pattern, b.connection)));
        v
    }

    /// Strict mode's declared topics, or `None` when publishing is open.
    pub fn declared_topics(&self) -> Option<Vec<String>> {
        self.declared.as_ref().map(|d| read(d).names())
    }

    /// Declares a topic (strict mode); an error if publishing is open.
    pub fn declare_topic(&self, name: &str) -> Result<(), String> {
        herald_protocol::destination::validate_name(name).map_err(|e| e.to_string())?;
        let declared = self.declared.as_ref().ok_or(OPEN)?;
        write(declared).declare(name);
        Ok(())
    }

    /// Replaces strict mode's declared topics (in a cluster, when the
    /// shared ones changed); nothing when publishing is open.
    pub fn set_declared<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        if let Some(declared) = &self.declared {
            *write(declared) = super::DeclaredTopics::new(names);
        }
    }

    /// Removes a declared topic and its subtree; false if it was not
    /// declared.
    pub fn undeclare_topic(&self, name: &str) -> Result<bool, String> {
        let declared = self.declared.as_ref().ok_or(OPEN)?;
        Ok(write(declared).remove(name))
    }

    /// Drops every message waiting in a queue (not those in flight);
    /// returns how many, or `None` if there is no such queue.
    pub fn purge(&self, name: &str, out: &mut Deliveries) -> Option<usize> {
        let queue = self.find_queue(name)?;
        let mut q = lock(&queue);
        let purged = q.purge();
        for m in &purged {
            self.ended(name, m);
        }
        super::wake_blocked(&mut q, out);
        Some(purged.len())
    }

    /// Moves the messages of a dead-letter or expiry queue back to the
    /// destination each came from (its `HeraldOriginalDestination`),
    /// without the dead-letter properties; returns how many moved, or
    /// `None` if there is no such queue. One that cannot go back (no
    /// original destination, or a full queue) stays.
    pub fn replay(&self, name: &str, out: &mut Deliveries) -> Option<usize> {
        let queue = self.find_queue(name)?;
        let waiting = lock(&queue).purge();
        let mut moved = 0;
        let mut stay = Vec::new();
        for m in waiting {
            match self.republish(&m.block, out) {
                Ok(()) => {
                    moved += 1;
                    self.ended(name, &m);
                }
                Err(why) => {
                    log::warn!("message in {name} stays: {why}");
                    stay.push(m);
                }
            }
        }
        let mut dispatches = Vec::new();
        let mut q = lock(&queue);
        for m in stay {
            q.push(m.block, m.journal_id, &mut dispatches);
        }
        drop(q);
        self.settled(&queue, dispatches, out);
        Some(moved)
    }

    /// Publishes a dead-lettered or expired message again to the
    /// destination it came from, without the dead-letter properties.
    pub fn republish(&self, block: &Bytes, out: &mut Deliveries) -> Result<(), String> {
        let mut message = Message::decode(block, 0).map_err(|e| e.to_string())?;
        let original = message
            .remove_property("HeraldOriginalDestination")
            .ok_or("it has no HeraldOriginalDestination")?;
        message.remove_property("HeraldDeadLetterReason");
        let original = original
            .as_str()
            .ok_or("HeraldOriginalDestination is not text")?;
        message.destination = Some(herald_protocol::Destination::from_uri(original));
        let mut encoded = BytesMut::new();
        message.encode(&mut encoded).map_err(|e| e.to_string())?;
        let view = MessageView::parse(encoded.freeze()).map_err(|e| e.to_string())?;
        self.publish(&view, Room::Refuse, None, out)
            .map(drop)
            .map_err(|e: RouteError| e.to_string())
    }
}

const OPEN: &str = "topics are not declared: strict mode is off ([topics] strict)";
