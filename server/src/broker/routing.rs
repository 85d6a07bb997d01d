//! Publishing: a message to the subscribers of its topic (plain ones
//! directly, acknowledged and durable ones through their queues, cluster
//! streams through the other nodes), or into its queue.

use super::address::{ConnectionRef, Subscriber};
use super::backlog::Backlog;
use super::delivery::Deliveries;
use super::instances;
use super::peers::Peers;
use super::pending::Pending;
use super::queue::{EntryId, QueuedMessage, SharedQueue};
use super::reader::{Reader, Taken};
use super::refile::Refile;
use super::request::{Room, RouteError, Routed, Written};
use super::timers::Timed;
use super::topic_tree::{Target, TopicEntry};
use super::{key_of, queue, takes, Broker};
use crate::diverts::Divert;
use crate::store::{Completion, Holder, Record};
use crate::sync::lock;
use bytes::Bytes;
use herald_protocol::destination::temporary_owner;
use herald_protocol::message::{delivery_time, MessageRef};
use herald_protocol::{DeliveryMode, DestinationKind, MessageView};
use std::cell::OnceCell;
use std::sync::Arc;

impl Broker {
    /// Routes a message another node published on a topic to this node's
    /// subscribers; it is not told to the other nodes again.
    pub fn publish_from_peer(&self, message: &MessageView, out: &mut Deliveries) {
        if message.destination_kind == DestinationKind::Topic {
            let name = message.destination();
            if let Err(e) = self.route_topic(message, name, None, false, out) {
                log::warn!("a message from another node was not routed: {e}");
            }
        }
    }

    /// Routes a published message: to every matching topic subscription,
    /// or into its queue. Returns whether anything was written to the
    /// store (then the publisher's RECEIPT must wait for it). `room` says
    /// what happens if its queue is full. In a cluster, topic messages go
    /// to the other nodes too.
    /// `from` is the connection that sent it, if one did.
    pub fn publish(
        &self,
        message: &MessageView,
        room: Room,
        from: Option<ConnectionRef>,
        out: &mut Deliveries,
    ) -> Result<Routed, RouteError> {
        self.publish_to(message, message.destination(), room, from, out)
    }

    /// [`Broker::publish`], for a caller that has taken the destination
    /// `name` out of the message already (that checks it as UTF-8 again,
    /// which the hot path does not pay twice).
    pub fn publish_to(
        &self,
        message: &MessageView,
        name: &str,
        room: Room,
        from: Option<ConnectionRef>,
        out: &mut Deliveries,
    ) -> Result<Routed, RouteError> {
        if self.diverting.load(std::sync::atomic::Ordering::Relaxed) {
            let diverts = self.diverts();
            let kind = message.destination_kind;
            let taking: Vec<&Divert> = diverts.taking(kind, name, message.block()).collect();
            if !taking.is_empty() {
                return self.publish_diverted(message, name, &taking, (room, from), out);
            }
        }
        self.route(message, name, room, from, out)
    }

    /// Routes a message where it was sent (see [`Broker::publish`]).
    pub(super) fn route(
        &self,
        message: &MessageView,
        name: &str,
        room: Room,
        from: Option<ConnectionRef>,
        out: &mut Deliveries,
    ) -> Result<Routed, RouteError> {
        let block = message.block();
        let mode = message.delivery_mode;
        match message.destination_kind {
            DestinationKind::Queue => {
                self.send_to_queue((name, false), block, mode, room, from, out)
            }
            DestinationKind::Topic => {
                let mut routed = self.route_topic(message, name, from, true, out)?;
                if let Some(peers) = self.peers.get() {
                    if temporary_owner(name).is_none() {
                        if let Some(backlog) = peers.published(name, block) {
                            routed.backlog.get_or_insert(backlog);
                        }
                    }
                }
                Ok(routed)
            }
        }
    }

    /// Puts a message into the named queue: here, or in a cluster into
    /// the queue's stream in Redis (inside a commit, at its end). A queue
    /// that does not exist is made if `make` (the server moves a message)
    /// or its address creates queues on first use.
    pub(super) fn send_to_queue(
        &self,
        (name, make): (&str, bool),
        block: &Bytes,
        mode: DeliveryMode,
        room: Room,
        from: Option<ConnectionRef>,
        out: &mut Deliveries,
    ) -> Result<Routed, RouteError> {
        let Some(peers) = self.sharing(name) else {
            let queue = match self.find_queue(name) {
                Some(queue) => queue,
                None if make || self.settings(DestinationKind::Queue, name).auto_create => {
                    self.queue(name)
                }
                None => return Err(RouteError::NoQueue(name.to_owned())),
            };
            let mut written = Written::default();
            let journaled = self
                .enqueue(&queue, block, (mode, room), &mut written, out)
                .map_err(|full| RouteError::QueueFull {
                    queue: name.to_owned(),
                    full,
                })?;
            return Ok(Routed {
                journaled,
                written,
                delivered: 1,
                backlog: None,
            });
        };
        let backlog = self.append_shared(peers, (name, block), from, out.commit.as_mut());
        Ok(Routed {
            // A persistent message's RECEIPT waits for Redis to accept it.
            journaled: mode == DeliveryMode::Persistent,
            written: Written::default(),
            delivered: 1,
            backlog,
        })
    }

    /// Appends a message to a shared queue's stream, or inside a `commit`
    /// keeps it for the commit's end.
    pub(super) fn append_shared(
        &self,
        peers: &Arc<dyn Peers>,
        (name, block): (&str, &Bytes),
        from: Option<ConnectionRef>,
        commit: Option<&mut Pending>,
    ) -> Option<Arc<Backlog>> {
        match commit {
            Some(pending) => {
                pending.shared.sends.push((name.to_owned(), block.clone()));
                None
            }
            None => peers.queue_send(name, block, from),
        }
    }

    /// Takes a message that the cluster read from the stream of the shared
    /// queue `queue` for this node's consumers, delivered `deliveries`
    /// times before; one delivered as often as allowed is dead instead.
    pub fn arrived(
        &self,
        queue: &SharedQueue,
        block: Bytes,
        entry: EntryId,
        deliveries: u32,
        out: &mut Deliveries,
    ) {
        let mut dispatches = Vec::new();
        let admitted = lock(queue).push_entry(block, entry, deliveries, &mut dispatches);
        match admitted {
            Ok(due) => {
                if let Some(due) = due {
                    self.timers.schedule(due, Timed::Queue(queue.clone()));
                }
                self.settled(queue, dispatches, out);
            }
            Err(dead) => self.dead_letter(queue, vec![dead], "delivered too many times", out),
        }
    }

    /// Routes a topic message to this node's subscribers and, if it was
    /// published here (`local`, by `from`), to the streams of the cluster's
    /// durable subscriptions it matches.
    /// `name` is the message's destination, which the caller has already
    /// taken out of it (checking it as UTF-8 each time costs).
    pub(super) fn route_topic(
        &self,
        message: &MessageView,
        name: &str,
        from: Option<ConnectionRef>,
        local: bool,
        out: &mut Deliveries,
    ) -> Result<Routed, RouteError> {
        let block = message.block();
        let mode = message.delivery_mode;
        self.check_topic(name)?;
        if message.expiration != 0 && message.expiration <= queue::now_ms() {
            // Expired before routing: no subscriber sees it.
            let expired = QueuedMessage {
                seq: 0,
                group: None,
                block: block.clone(),
                deliveries: 0,
                journal_id: None,
                priority: message.priority,
                expiration: message.expiration,
                entry: None,
                restored: false,
            };
            let settings = self.settings(DestinationKind::Topic, name);
            self.refile_one((name, &settings), &expired, Refile::Expired, out);
            return Ok(Routed::default());
        }
        // A keyed topic's instance takes the sample, or refuses it,
        // before anyone gets it; under `durability = "persistent"` the
        // sample is journaled below, whatever its delivery mode (the node
        // it was published on keeps the record).
        let kept = self.instances.keep(
            name,
            block,
            || {
                self.settings(DestinationKind::Topic, name)
                    .instances
                    .clone()
            },
            || local.then(|| self.store.next_id()),
        )?;
        // Parsed at most once, and only if a selector needs it.
        let fields: OnceCell<Option<MessageRef<'_>>> = OnceCell::new();
        let mut routed = Routed::default();
        // Looked at once per publish, not per subscriber: most
        // messages have no delivery time, and then no clock is read.
        let due = delivery_time(block);
        let delayed = due != 0 && due > queue::now_ms();
        // A temporary topic's messages reach its owner only, even
        // through wildcards.
        let owner = temporary_owner(name);
        // A no-local subscription of the publisher's own connection is
        // passed over.
        let publisher = from.map(|f| f.serial);
        // In a cluster, a persistent message's receipt also waits until
        // the node has made sure that no durable subscription was
        // registered elsewhere after it last read the registry (see
        // `Peers::recheck`). The epoch is read before the tree, which is
        // at least that new.
        let recheck = self
            .peers
            .get()
            .filter(|_| local && mode == DeliveryMode::Persistent)
            .map(|peers| (peers, peers.durables_epoch()));
        let mut appended = Vec::new();
        let tree = self.read_topics();
        // Out of `out` while its entries are borrowed: the visit pushes to
        // `out`. Taken, not swapped for an empty one, which would seed a
        // new hasher for every publish.
        let mut cache = out.matches.take().unwrap_or_default();
        let cached = cache.matches(&tree, name);
        let mut visit = |entry: &TopicEntry| {
            if !takes(entry, (owner, publisher), block, &fields) {
                return;
            }
            routed.delivered += 1;
            if let (Some(b), false) = (&entry.backlog, delayed) {
                b.routed(block.len());
            }
            if routed.backlog.is_none() {
                routed.backlog = entry.backlog.as_ref().filter(|b| b.is_high()).cloned();
            }
            match &entry.target {
                Target::Direct(sub) if delayed => self
                    .timers
                    .schedule(due, Timed::Direct(*sub, block.clone())),
                Target::Direct(sub) => match &entry.reader {
                    None => out.push(*sub, block.clone()),
                    Some(reader) => self.offer(reader, (name, message), *sub, out),
                },
                Target::Stream(stream) => {
                    if let (Some(peers), true) = (self.peers.get(), local) {
                        let commit = out.commit.as_mut();
                        let backlog = self.append_shared(peers, (stream, block), from, commit);
                        routed.journaled |= mode == DeliveryMode::Persistent;
                        if recheck.is_some() {
                            appended.push(stream.clone());
                        }
                        if routed.backlog.is_none() {
                            routed.backlog = backlog;
                        }
                    }
                }
                Target::Queue(queue) => {
                    match self.enqueue(queue, block, (mode, Room::Refuse), &mut routed.written, out)
                    {
                        Ok(written) => routed.journaled |= written,
                        Err(full) => log::warn!(
                            "subscription queue '{}' {}: a message on {name} is not kept for it",
                            lock(queue).name(),
                            full.limit
                        ),
                    }
                }
            }
        };
        match cached {
            Some(entries) => entries.iter().for_each(&mut visit),
            None => tree.for_each_match(name, |p| key_of(block, &fields, p), visit),
        }
        out.matches = Some(cache);
        self.keep_retained(name, block, (mode, kept), &mut routed, out);
        drop(tree);
        if let Some((peers, epoch)) = recheck {
            peers.recheck(name, block, (epoch, appended), from);
            routed.journaled = true;
        }
        Ok(routed)
    }

    /// Offers a message of topic `name` to a subscriber's reader policies
    /// (see `super::reader`): delivered now, held back until its
    /// instance's window ends (a timer set for the first held), or
    /// dropped as stale.
    fn offer(
        &self,
        reader: &Arc<Reader>,
        (name, message): (&str, &MessageView),
        sub: Subscriber,
        out: &mut Deliveries,
    ) {
        let block = message.block();
        let key = self.instances.reader_key(name, block);
        // The source timestamp: the message's JMSTimestamp.
        let source = MessageRef::read(block).map_or(0, |m| m.timestamp);
        match reader.offer(&key, block, source, queue::now_ms()) {
            Taken::Now => out.push(sub, block.clone()),
            Taken::Held(Some(due)) => {
                self.timers
                    .schedule(due, Timed::Window(reader.clone(), key, sub));
            }
            Taken::Held(None) | Taken::Stale => {}
        }
    }

    /// Keeps `block` if it is retained (see `Retained::keep`), unless its
    /// topic keeps instances, which `kept` says it did; a persistent one
    /// is journaled, and the publish's receipt waits for it, so that it
    /// comes back after a restart.
    fn keep_retained(
        &self,
        topic: &str,
        block: &Bytes,
        (mode, kept): (DeliveryMode, instances::Change),
        routed: &mut Routed,
        out: &mut Deliveries,
    ) {
        let persistent = mode == DeliveryMode::Persistent;
        let change = match kept.tracked {
            true => kept,
            false => {
                let retained = self
                    .retained
                    .keep(topic, block, || persistent.then(|| self.store.next_id()));
                instances::Change {
                    tracked: false,
                    new: retained.new,
                    ended: retained.ended.into_iter().collect(),
                }
            }
        };
        // The new record before the end of the old: a crash between them
        // leaves both, and the restart keeps the later.
        if let Some(id) = change.new {
            let record = Record::Enqueue {
                id,
                holder: Holder::Retained(topic.to_owned()),
                block: block.clone(),
            };
            match out.commit.as_mut() {
                Some(pending) => pending.records.push(record),
                None => {
                    let slot = routed.written.slot();
                    let done: Completion = Box::new(move |result| {
                        if let Err(why) = result {
                            lock(&slot).get_or_insert(why);
                        }
                    });
                    self.store.append(record, Some(done));
                }
            }
            routed.journaled = true;
        }
        for id in change.ended {
            self.journal(Record::End { id }, out.commit.as_mut());
        }
    }

    /// The cluster streams (of durable and shared subscriptions) that a
    /// message published on `topic` now goes to.
    pub fn streams_for(&self, topic: &str, block: &Bytes) -> Vec<String> {
        let (owner, fields) = (temporary_owner(topic), OnceCell::new());
        let mut streams = Vec::new();
        self.read_topics().for_each_match(
            topic,
            |p| key_of(block, &fields, p),
            |entry| match &entry.target {
                Target::Stream(stream) if takes(entry, (owner, None), block, &fields) => {
                    streams.push(stream.clone());
                }
                _ => {}
            },
        );
        streams
    }
}
