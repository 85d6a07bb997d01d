//! Named topic subscriptions: durable ones (kept with their messages
//! while no consumer is attached, in the journal or, in a cluster, in
//! Redis's registry), shared ones (consumers compete), or both.

use super::address::Subscriber;
use super::delivery::Deliveries;
use super::queue::Queue;
use super::registry::{Durable, DurableRecord, Kept};
use super::request::{Room, SubscribeError, SubscribeRequest, SubscriptionHandle, Written};
use super::topic_tree::{Target, TopicEntry};
use super::Broker;
use crate::store::{Holder, Record};
use crate::sync::lock;
use herald_protocol::destination::is_temporary;
use herald_protocol::selector::Selector;
use herald_protocol::{DeliveryMode, DestinationKind, Pattern};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Broker {
    /// A durable subscription's entry and queue, entered in the topic tree.
    pub(super) fn new_durable(
        &self,
        (client_id, name): (&str, &str),
        owner: String,
        pattern: Pattern,
        (selector_text, selector): (String, Option<Arc<Selector>>),
        kept: Kept,
    ) -> Durable {
        let key = self.next_key.fetch_add(1, Ordering::Relaxed);
        // Only a journalled one files its persistent messages in the store;
        // a cluster's is named after its stream, which its settlements go to.
        let (queue_name, holder) = match &kept {
            Kept::No => (format!("durable.{client_id}.{name}"), None),
            Kept::Journal(_) => (
                format!("durable.{client_id}.{name}"),
                Some(Holder::Durable(client_id.to_owned(), name.to_owned())),
            ),
            Kept::Cluster { stream, .. } => (stream.clone(), None),
        };
        let settings = self.settings(DestinationKind::Topic, &pattern.to_string());
        let queue = self.shared_queue(Queue::new(queue_name, holder, settings));
        let target = match &kept {
            Kept::Cluster { stream, .. } => Target::Stream(stream.clone()),
            _ => Target::Queue(queue.clone()),
        };
        let entry = TopicEntry {
            key,
            target,
            selector,
            owner: None,
            backlog: None,
            no_local: false,
            reader: None,
        };
        self.enter(&mut self.write_topics(), &pattern, entry);
        Durable {
            pattern,
            selector: selector_text,
            owner,
            key,
            queue,
            consumers: Vec::new(),
            shared: false,
            kept,
        }
    }

    /// Makes this node's cluster durable subscriptions those of the
    /// cluster's registry, as read from Redis: new ones are entered (this
    /// node appends what is published here to their streams), changed ones
    /// replaced, deleted ones dropped, unless a consumer here uses one:
    /// that one is registered again (a registry that lost it, or a
    /// non-durable shared subscription ended by the others a moment
    /// before a consumer here joined it). Subscriptions whose streams are
    /// `in_flight` (this node's own change to them was not yet answered
    /// when the read began) are left as they are: the read may predate
    /// the change, and the change's answer brings another read.
    pub fn sync_durables(&self, registry: Vec<DurableRecord>, in_flight: &HashSet<String>) {
        let mut wanted: HashMap<(String, String), DurableRecord> = registry
            .into_iter()
            .map(|r| ((r.client_id.clone(), r.name.clone()), r))
            .collect();
        let mut durables = lock(&self.durables);
        // A replaced one (another topic, selector or kind) has another
        // stream.
        let stale: Vec<(String, String)> = durables
            .iter()
            .filter(|(id, d)| match &d.kept {
                Kept::Cluster { stream, .. } => {
                    let same = wanted.get(*id).is_some_and(|r| r.stream() == *stream);
                    d.consumers.is_empty() && !same && !in_flight.contains(stream)
                }
                _ => false,
            })
            .map(|(id, _)| id.clone())
            .collect();
        if let Some(peers) = self.peers.get() {
            for (id, d) in durables.iter() {
                if let (Kept::Cluster { record, stream }, false, false) =
                    (&d.kept, d.consumers.is_empty(), wanted.contains_key(id))
                {
                    if !in_flight.contains(stream) {
                        peers.durable(record, true);
                    }
                }
            }
        }
        for id in stale {
            if let Some(d) = durables.remove(&id) {
                self.drop_durable(d, false);
            }
        }
        wanted.retain(|id, _| !durables.contains_key(id));
        for (id, r) in wanted {
            match self.parse_subscription(&r.pattern, &r.selector) {
                Ok((pattern, selector)) => {
                    let kept = Kept::Cluster {
                        stream: r.stream(),
                        record: r.clone(),
                    };
                    // The registry does not say who made it.
                    let d = self.new_durable(
                        (&r.client_id, &r.name),
                        String::new(),
                        pattern,
                        (r.selector, selector),
                        kept,
                    );
                    durables.insert(id, d);
                }
                Err(e) => log::warn!(
                    "cluster durable subscription {}/{} does not parse ({e}): ignored",
                    r.client_id,
                    r.name
                ),
            }
        }
    }

    /// Removes a durable subscription from the tree and ends it and its
    /// messages where it is kept. `everywhere`: in a cluster, the other
    /// nodes and the registry are told (not when the registry told us).
    pub(super) fn drop_durable(&self, d: Durable, everywhere: bool) {
        self.leave(&mut self.write_topics(), &d.pattern, d.key);
        for m in lock(&d.queue).drain() {
            if let Some(id) = m.journal_id {
                self.journal(Record::End { id }, None);
            }
        }
        match &d.kept {
            Kept::No => {}
            Kept::Journal(id) => self.journal(Record::End { id: *id }, None),
            Kept::Cluster { record, .. } => {
                // Its stream goes whole: what this node read of it too.
                if let (Some(peers), true) = (self.peers.get(), everywhere) {
                    peers.durable(record, false);
                }
            }
        }
    }

    /// Attaches `sub` to the named subscription `req` names, making it
    /// (or, for another topic or selector, replacing it) if need be.
    pub(super) fn subscribe_durable(
        &self,
        req: SubscribeRequest<'_>,
        pattern: Pattern,
        selector: Option<Arc<Selector>>,
        prefetch: u32,
        sub: Subscriber,
        out: &mut Deliveries,
    ) -> Result<SubscriptionHandle, SubscribeError> {
        if req.kind != DestinationKind::Topic {
            return Err(SubscribeError::DurableQueue);
        }
        let priority = req.priority;
        if is_temporary(req.destination) {
            return Err(SubscribeError::Destination(format!(
                "'{}': a temporary topic has no durable or shared subscriptions",
                req.destination
            )));
        }
        // A shared subscription may do without a client id (JMS 2.0).
        if req.client_id.is_empty() && !req.shared {
            return Err(SubscribeError::ClientIdRequired);
        }
        let durable = !req.shared || req.durable;
        let id = (req.client_id.to_owned(), req.durable_name.to_owned());
        let mut durables = lock(&self.durables);
        if let Some(d) = durables.get(&id) {
            let in_use = !d.consumers.is_empty();
            if in_use && (!d.shared || !req.shared || d.durable() != durable) {
                return Err(SubscribeError::InUse(req.durable_name.to_owned()));
            }
            // JMS: resubscribing with another topic or selector replaces
            // the subscription and what it kept (not while in use).
            if d.pattern != pattern || d.selector != req.selector_text() {
                if in_use {
                    return Err(SubscribeError::InUse(req.durable_name.to_owned()));
                }
                if let Some(old) = durables.remove(&id) {
                    self.drop_durable(old, true);
                }
            }
        }
        let mut created = false;
        let d = durables.entry(id.clone()).or_insert_with(|| {
            created = true;
            let (client, name) = (req.client_id, req.durable_name);
            let kept = match (durable, self.peers.get()) {
                // In a cluster: registered in Redis, for every node.
                (_, Some(peers)) => {
                    let record = DurableRecord {
                        client_id: client.to_owned(),
                        name: name.to_owned(),
                        pattern: req.destination.to_owned(),
                        selector: req.selector_text().to_owned(),
                        durable,
                        own_slot: true,
                    };
                    peers.durable(&record, true);
                    Kept::Cluster {
                        stream: record.stream(),
                        record,
                    }
                }
                (false, None) => Kept::No,
                (true, None) => {
                    let journal_id = self.store.next_id();
                    self.store.append(
                        Record::Durable {
                            id: journal_id,
                            client_id: client.to_owned(),
                            name: name.to_owned(),
                            pattern: req.destination.to_owned(),
                            selector: req.selector_text().to_owned(),
                            owner: req.user.to_owned(),
                        },
                        None,
                    );
                    Kept::Journal(journal_id)
                }
            };
            self.new_durable(
                (client, name),
                req.user.to_owned(),
                pattern.clone(),
                (req.selector_text().to_owned(), selector.clone()),
                kept,
            )
        });
        // A durable subscription kept from before a restart takes the
        // sharing of its first consumer.
        d.shared = req.shared;
        d.consumers.push(sub);
        let queue = d.queue.clone();
        let stream = match &d.kept {
            Kept::Cluster { stream, .. } => Some(stream.clone()),
            _ => None,
        };
        drop(durables);
        // A new one starts with the retained messages of its topics (in a
        // cluster, its stream gets what is published from now on only).
        if created && req.kept && stream.is_none() {
            for block in self.kept_for(&pattern, selector.as_deref(), req.reader.history) {
                let _ = self.enqueue(
                    &queue,
                    &block,
                    (DeliveryMode::NonPersistent, Room::Refuse),
                    &mut Written::default(),
                    out,
                );
            }
        }
        let mut dispatches = Vec::new();
        lock(&queue).add_consumer(sub, None, (prefetch, priority, false), &mut dispatches);
        self.settled(&queue, dispatches, out);
        if let (Some(stream), Some(peers)) = (stream, self.peers.get()) {
            peers.consuming(&stream, &queue, true);
        }
        Ok(SubscriptionHandle::Durable { queue, id })
    }

    /// The pattern and owner of durable subscription `name` of
    /// `client_id`, if there is one.
    pub fn durable_owner(&self, client_id: &str, name: &str) -> Option<(Pattern, String)> {
        let id = (client_id.to_owned(), name.to_owned());
        lock(&self.durables)
            .get(&id)
            .map(|d| (d.pattern.clone(), d.owner.clone()))
    }

    /// The names of `client_id`'s durable subscriptions that start with
    /// `prefix`, in name order.
    pub fn durables_of(&self, client_id: &str, prefix: &str) -> Vec<String> {
        let mut names: Vec<String> = lock(&self.durables)
            .iter()
            .filter(|((client, name), d)| {
                client == client_id && name.starts_with(prefix) && d.durable()
            })
            .map(|((_, name), _)| name.clone())
            .collect();
        names.sort();
        names
    }

    /// Deletes a durable subscription and what it kept.
    pub fn unsubscribe_durable(&self, client_id: &str, name: &str) -> Result<(), SubscribeError> {
        let id = (client_id.to_owned(), name.to_owned());
        let mut durables = lock(&self.durables);
        match durables.get(&id) {
            None => Err(SubscribeError::UnknownDurable(name.to_owned())),
            Some(d) if !d.consumers.is_empty() => Err(SubscribeError::InUse(name.to_owned())),
            Some(d) if !d.durable() => Err(SubscribeError::UnknownDurable(name.to_owned())),
            Some(_) => {
                if let Some(d) = durables.remove(&id) {
                    self.drop_durable(d, true);
                }
                Ok(())
            }
        }
    }
}
