//! What the management interface sees of the broker and may change: queue
//! and subscription listings, counters, strict mode's declared topics,
//! purging a queue, replaying a dead-letter queue. Nothing here is on the
//! publish path.

use bytes::{Bytes, BytesMut};
use herald_protocol::{DestinationKind, Message, MessageView};

use super::delivery::Deliveries;
use super::request::{QueueError, RepublishError, TopicError};
use super::stats::{BrokerCounters, QueueStats, SubscriptionView};
use super::timers::Timed;
use super::{Broker, Room, SharedQueue};
use crate::store::large::keep;
use crate::store::Record;
use crate::sync::{lock, read, write};

impl Broker {
    /// The instances of keyed topic `topic`, by key (`None`: it keeps
    /// none).
    pub fn instances_of(&self, topic: &str) -> Option<Vec<super::InstanceView>> {
        self.instances.instances_of(topic)
    }

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
                    scheduled: q.scheduled(),
                    in_flight: q.in_flight(),
                    consumers: q.consumer_count(),
                    enqueued,
                    acknowledged,
                    bytes: q.bytes(),
                    over: q.over(),
                    dropped: q.dropped(),
                    paged: q.paged().0,
                    paged_bytes: q.paged().1,
                    paging_stopped: q.paging_stopped(),
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
                dropped: s.reader.as_ref().map_or(0, |r| r.dropped()),
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
                    dropped: 0,
                });
            }
        }
        v.sort_by(|a, b| (&a.pattern, a.connection).cmp(&(&b.pattern, b.connection)));
        v
    }

    /// The retained messages of the topics `pattern` matches, topics in
    /// name order, oldest first within a topic, unexpired.
    pub fn retained_messages(&self, pattern: &herald_protocol::Pattern) -> Vec<Bytes> {
        self.kept_for(pattern, None, 0)
    }

    /// Strict mode's declared topics, or `None` when publishing is open.
    pub fn declared_topics(&self) -> Option<Vec<String>> {
        self.declared.as_ref().map(|d| read(d).names())
    }

    /// Declares a topic (strict mode); an error if publishing is open.
    pub fn declare_topic(&self, name: &str) -> Result<(), TopicError> {
        herald_protocol::destination::validate_name(name)?;
        let declared = self.declared.as_ref().ok_or(TopicError::Open)?;
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
    pub fn undeclare_topic(&self, name: &str) -> Result<bool, TopicError> {
        let declared = self.declared.as_ref().ok_or(TopicError::Open)?;
        Ok(write(declared).remove(name))
    }

    /// Drops every message waiting in a queue (not those in flight);
    /// returns how many, or `None` if there is no such queue.
    pub fn purge(&self, name: &str, out: &mut Deliveries) -> Option<usize> {
        let queue = self.find_queue(name)?;
        let mut q = lock(&queue);
        let purged = q.purge();
        for m in &purged {
            self.ended(name, m, None);
        }
        super::wake_blocked(&mut q, out);
        Some(purged.len())
    }

    /// Makes queue `name` exist, as a first send to it would, and keeps
    /// it (empty or not) across restarts until it is deleted: the journal
    /// records it. False if it was there already.
    pub fn create_queue(&self, name: &str) -> Result<bool, QueueError> {
        herald_protocol::destination::validate_name(name)?;
        if herald_protocol::destination::is_temporary(name) {
            return Err(QueueError::Temporary(name.to_owned()));
        }
        let existed = self.find_queue(name).is_some();
        self.queue(name);
        let mut created = lock(&self.created);
        if !created.contains_key(name) {
            let id = self.store.next_id();
            self.journal(
                Record::Queue {
                    id,
                    name: name.to_owned(),
                },
                None,
            );
            created.insert(name.to_owned(), id);
        }
        Ok(!existed)
    }

    /// Deletes queue `name` and the messages it holds, unless a consumer
    /// is attached; returns how many messages went with it.
    pub fn delete_named_queue(&self, name: &str) -> Result<usize, QueueError> {
        let queue = self
            .find_queue(name)
            .ok_or_else(|| QueueError::NoQueue(name.to_owned()))?;
        let q = lock(&queue);
        if q.owner().is_some() {
            return Err(QueueError::Temporary(name.to_owned()));
        }
        if q.consumer_count() > 0 {
            return Err(QueueError::InUse {
                name: name.to_owned(),
                consumers: q.consumer_count(),
            });
        }
        let held = q.held().count();
        drop(q);
        self.delete_queue(name);
        if let Some(id) = lock(&self.created).remove(name) {
            self.journal(Record::End { id }, None);
        }
        Ok(held)
    }

    /// Whether `name` is a queue that dead or expired messages are moved
    /// to (see [`AddressBook::is_dead_letter_queue`]). Only their messages
    /// say where they came from.
    ///
    /// [`AddressBook::is_dead_letter_queue`]: crate::addresses::AddressBook::is_dead_letter_queue
    pub fn is_dead_letter_queue(&self, name: &str) -> bool {
        self.address_book().is_dead_letter_queue(name)
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
                    self.ended(name, &m, None);
                }
                Err(why) => {
                    log::warn!("message in {name} stays: {why}");
                    stay.push(m);
                }
            }
        }
        let mut dispatches = Vec::new();
        let mut q = lock(&queue);
        let due: Vec<i64> = stay
            .into_iter()
            .filter_map(|m| q.push(m.block, m.journal_id, &mut dispatches))
            .collect();
        drop(q);
        for due in due {
            self.timers.schedule(due, Timed::Queue(queue.clone()));
        }
        self.settled(&queue, dispatches, out);
        Some(moved)
    }

    /// Publishes a dead-lettered or expired message again to the
    /// destination it came from, without the dead-letter properties.
    pub fn republish(&self, block: &Bytes, out: &mut Deliveries) -> Result<(), RepublishError> {
        let view = self.replayed(block)?;
        self.publish(&view, Room::Refuse, None, out)?;
        Ok(())
    }

    /// The dead letter `block` as it goes back: to its original
    /// destination, without the dead-letter properties.
    pub fn replayed(&self, block: &Bytes) -> Result<MessageView, RepublishError> {
        let mut message = Message::decode(block, 0)?;
        let original = message
            .remove_property("HeraldOriginalDestination")
            .ok_or(RepublishError::NoOrigin)?;
        message.remove_property("HeraldDeadLetterReason");
        let original = original.as_str().ok_or(RepublishError::NoOrigin)?;
        message.set_destination(Some(herald_protocol::Destination::from_uri(original)?));
        let mut encoded = BytesMut::new();
        message.encode(&mut encoded)?;
        Ok(MessageView::parse(keep(self.large(), encoded.freeze()))?)
    }
}
