//! Subscribing and settling: starting and ending subscriptions, and the
//! acknowledgements, NACKs and releases of what they were delivered.

use super::address::Subscriber;
use super::delivery::Deliveries;
use super::queue::{AckRef, Queue, QueuedMessage, SharedQueue};
use super::reader::Reader;
use super::registry::{is_durable_stream, Kept};
use super::request::{
    Room, RouteError, SubscribeError, SubscribeRequest, SubscriptionHandle, Written,
};
use super::retained;
use super::stats::LiveSubscription;
use super::timers::Timed;
use super::topic_tree::{Target, TopicEntry};
use super::{wake_blocked, Broker};
use crate::sync::lock;
use bytes::Bytes;
use herald_protocol::destination::is_temporary;
use herald_protocol::selector::Selector;
use herald_protocol::{DeliveryMode, DestinationKind, Pattern};
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Broker {
    /// The kept messages of the topics `pattern` matches that `selector`
    /// selects, for a new subscriber: retained messages (topics in name
    /// order), then the samples of keyed topics' live instances in the
    /// order they came; unexpired, marked as kept.
    /// A `history` above 0 keeps at most that many samples per instance.
    pub(super) fn kept_for(
        &self,
        pattern: &Pattern,
        selector: Option<&Selector>,
        history: u64,
    ) -> Vec<Bytes> {
        let mut kept = self.retained.kept(pattern);
        kept.extend(self.instances.kept_for(|t| pattern.matches(t), history));
        retained::offered(kept, selector, self.large())
    }

    /// Starts a subscription for `sub`.
    pub fn subscribe(
        &self,
        req: SubscribeRequest<'_>,
        sub: Subscriber,
        out: &mut Deliveries,
    ) -> Result<SubscriptionHandle, SubscribeError> {
        let info = LiveSubscription::new(&req);
        let handle = self.start_subscription(req, sub, out)?;
        lock(&self.live).insert(
            (sub.conn.serial, sub.subscription_id),
            info.with_queue(&handle),
        );
        Ok(handle)
    }

    pub(super) fn start_subscription(
        &self,
        req: SubscribeRequest<'_>,
        sub: Subscriber,
        out: &mut Deliveries,
    ) -> Result<SubscriptionHandle, SubscribeError> {
        let selector = req.selector.clone();
        let prefetch = match req.prefetch {
            0 => self.default_prefetch,
            n => n,
        };
        let bad = |e: herald_protocol::Error| SubscribeError::Destination(e.to_string());
        if req.kind == DestinationKind::Queue {
            herald_protocol::destination::validate_name(req.destination).map_err(bad)?;
        }
        let pattern = Pattern::parse(req.destination).map_err(bad)?;
        let reader = Reader::new(req.reader).map(Arc::new);
        let plain =
            req.kind == DestinationKind::Topic && req.durable_name.is_empty() && !req.acknowledged;
        if reader.is_some() && !plain {
            return Err(SubscribeError::Reader(
                "a time-based filter and destination order by source timestamp are for plain topic subscriptions (not acknowledged, durable or shared)",
            ));
        }
        if req.reader.time_filter_ms > super::reader::MAX_TIME_FILTER_MS {
            return Err(SubscribeError::Reader(
                "a time-based filter is at most a day (86400000 ms)",
            ));
        }
        if !req.durable_name.is_empty() {
            return self.subscribe_durable(req, pattern, selector, prefetch, sub, out);
        }
        let attach =
            |queue: &SharedQueue, selector: Option<Arc<Selector>>, out: &mut Deliveries| {
                let mut dispatches = Vec::new();
                let rank = (prefetch, req.priority, req.exclusive);
                lock(queue).add_consumer(sub, selector, rank, &mut dispatches);
                self.settled(queue, dispatches, out);
            };
        match req.kind {
            DestinationKind::Queue => {
                let queue = match req.temporary {
                    true => self.temporary_queue(req.destination, sub.conn.serial)?,
                    false if !self.may_open(req.destination) => {
                        let missing = RouteError::NoQueue(req.destination.to_owned());
                        return Err(SubscribeError::Destination(missing.to_string()));
                    }
                    false => self.queue(req.destination),
                };
                if lock(&queue).owner().is_some_and(|o| o != sub.conn.serial) {
                    return Err(SubscribeError::NotOwner(req.destination.to_owned()));
                }
                attach(&queue, selector, out);
                if let Some(peers) = self.sharing(req.destination) {
                    peers.consuming(req.destination, &queue, true);
                }
                Ok(SubscriptionHandle::Queue(queue))
            }
            DestinationKind::Topic => {
                let own = self.temporary_prefix(sub.conn.serial);
                if is_temporary(req.destination) && !req.destination.starts_with(&own) {
                    return Err(SubscribeError::NotOwner(req.destination.to_owned()));
                }
                let key = self.next_key.fetch_add(1, Ordering::Relaxed);
                let (target, queue, backlog) = if req.acknowledged {
                    let name = format!("subscription.{}.{}", sub.conn.serial, sub.subscription_id);
                    // Lives and dies with its connection: nothing to keep.
                    let settings = self.settings(DestinationKind::Topic, req.destination);
                    let queue = self.shared_queue(Queue::new(name, None, settings));
                    attach(&queue, None, out);
                    (Target::Queue(queue.clone()), Some(queue), None)
                } else {
                    (Target::Direct(sub), None, req.backlog.clone())
                };
                let kept_for = target.clone();
                let entry = TopicEntry {
                    key,
                    target,
                    selector: selector.clone(),
                    owner: Some(sub.conn.serial),
                    backlog,
                    no_local: req.no_local,
                    reader: reader.clone(),
                };
                let mut tree = self.write_topics();
                let kept = match req.kept {
                    true => self.kept_for(&pattern, selector.as_deref(), req.reader.history),
                    false => Vec::new(),
                };
                self.enter(&mut tree, &pattern, entry);
                drop(tree);
                for block in kept {
                    match &kept_for {
                        // Only durable subscriptions append to streams.
                        Target::Stream(_) => {}
                        Target::Direct(s) => out.push(*s, block),
                        Target::Queue(q) => {
                            // Kept messages are not persistent copies.
                            let _ = self.enqueue(
                                q,
                                &block,
                                (DeliveryMode::NonPersistent, Room::Refuse),
                                &mut Written::default(),
                                out,
                            );
                        }
                    }
                }
                Ok(SubscriptionHandle::Topic {
                    pattern,
                    key,
                    queue,
                    reader,
                })
            }
        }
    }

    /// Ends a subscription. Deliveries of its that were not acknowledged
    /// return to their queue for other consumers (or to the dead-letter
    /// queue).
    pub fn unsubscribe(
        &self,
        handle: SubscriptionHandle,
        sub: &Subscriber,
        unread: &[AckRef],
        out: &mut Deliveries,
    ) {
        lock(&self.live).remove(&(sub.conn.serial, sub.subscription_id));
        match handle {
            SubscriptionHandle::Topic {
                pattern,
                key,
                queue,
                ..
            } => {
                self.leave(&mut self.write_topics(), &pattern, key);
                // A private queue goes with its subscription.
                drop(queue);
            }
            SubscriptionHandle::Queue(queue) => {
                self.detach(&queue, sub, unread, out);
                let name = lock(&queue).name().to_owned();
                if let Some(peers) = self.sharing(&name) {
                    peers.consuming(&name, &queue, false);
                }
            }
            SubscriptionHandle::Durable { queue, id } => {
                let mut durables = lock(&self.durables);
                let ended = durables.get_mut(&id).is_some_and(|d| {
                    d.consumers.retain(|c| c != sub);
                    // A non-durable shared subscription ends with its last
                    // consumer (in a cluster, its last on any node: the
                    // cluster ends it).
                    d.consumers.is_empty() && d.kept == Kept::No
                });
                let gone = if ended { durables.remove(&id) } else { None };
                drop(durables);
                self.detach(&queue, sub, unread, out);
                let name = lock(&queue).name().to_owned();
                if let Some(peers) = self.peers.get().filter(|_| is_durable_stream(&name)) {
                    peers.consuming(&name, &queue, false);
                }
                if let Some(d) = gone {
                    self.drop_durable(d, true);
                }
            }
        }
    }

    /// Takes `sub` off `queue`: what it holds goes back, counted but for
    /// the `unread` deliveries (see [`Queue::remove_consumer`]).
    pub(super) fn detach(
        &self,
        queue: &SharedQueue,
        sub: &Subscriber,
        unread: &[AckRef],
        out: &mut Deliveries,
    ) {
        let mut unread: Vec<u64> = unread
            .iter()
            .filter(|a| Arc::ptr_eq(&a.queue, queue))
            .map(|a| a.seq)
            .collect();
        unread.sort_unstable();
        let mut dispatches = Vec::new();
        let dead = lock(queue).remove_consumer(sub, &unread, &mut dispatches);
        self.settled(queue, dispatches, out);
        self.dead_letter(queue, dead, "delivered too many times", out);
    }

    /// Settles one delivery as processed. False if `sub` does not hold it.
    pub fn ack(&self, ack: &AckRef, sub: &Subscriber, out: &mut Deliveries) -> bool {
        let mut held = true;
        let acks = [(*sub, ack.seq)];
        self.ack_all(
            &ack.queue,
            &acks,
            |_| held = false,
            &mut Written::default(),
            out,
        );
        held
    }

    /// Settles many deliveries of one queue under one lock, and then
    /// dispatches what the freed credit allows once; calls `not_held`
    /// with the index of each that its subscriber does not hold. `written`
    /// learns if an acknowledgement could not be written.
    pub fn ack_all(
        &self,
        queue: &SharedQueue,
        acks: &[(Subscriber, u64)],
        mut not_held: impl FnMut(usize),
        written: &mut Written,
        out: &mut Deliveries,
    ) {
        let mut dispatches = Vec::new();
        let mut q = lock(queue);
        for (i, (sub, seq)) in acks.iter().enumerate() {
            match q.acked(sub, *seq) {
                Some(m) => self.acked((queue, q.name()), m, written, out.commit.as_mut()),
                None => not_held(i),
            }
        }
        q.dispatch_due(&mut dispatches);
        wake_blocked(&mut q, out);
        // Paged last values read back may have been replaced.
        self.end_replaced(&mut q, out.commit.as_mut());
        let expired = q.take_expired();
        if let Some(due) = self.wake_of(&mut q) {
            self.timers.schedule(due, Timed::Queue(queue.clone()));
        }
        drop(q);
        self.settled_apart(queue, (dispatches, expired), out);
    }

    /// Gives one delivery back for redelivery. False if `sub` does not
    /// hold it.
    pub fn nack(&self, ack: &AckRef, sub: &Subscriber, out: &mut Deliveries) -> bool {
        self.counters.redelivered.fetch_add(1, Ordering::Relaxed);
        let mut dispatches = Vec::new();
        let dead = lock(&ack.queue).nack(sub, ack.seq, &mut dispatches);
        self.settled(&ack.queue, dispatches, out);
        match dead {
            Some(dead) => {
                self.dead_letter(&ack.queue, dead, "delivered too many times", out);
                true
            }
            None => false,
        }
    }

    /// Dead-letters one delivery its consumer refused (AMQP's `rejected`)
    /// rather than redelivering it. False if `sub` does not hold it.
    pub fn reject(&self, ack: &AckRef, sub: &Subscriber, out: &mut Deliveries) -> bool {
        let mut dispatches = Vec::new();
        let taken = lock(&ack.queue).reject(sub, ack.seq, &mut dispatches);
        self.settled(&ack.queue, dispatches, out);
        match taken {
            Some(m) => {
                self.dead_letter(&ack.queue, vec![m], "rejected by its consumer", out);
                true
            }
            None => false,
        }
    }

    /// Gives a topic subscription that goes on the retained messages of
    /// its `pattern` again, as a new one gets them (MQTT's SUBSCRIBE that
    /// repeats a subscription with retain handling 0).
    pub fn resend_retained(
        &self,
        handle: &SubscriptionHandle,
        pattern: &Pattern,
        sub: Subscriber,
        out: &mut Deliveries,
    ) {
        let queue = match handle {
            SubscriptionHandle::Topic { queue, .. } => queue.as_ref(),
            SubscriptionHandle::Durable { queue, .. } => Some(queue),
            SubscriptionHandle::Queue(_) => return,
        };
        for block in self.kept_for(pattern, None, 0) {
            match queue {
                None => out.push(sub, block),
                // Kept messages are not persistent copies.
                Some(q) => {
                    let _ = self.enqueue(
                        q,
                        &block,
                        (DeliveryMode::NonPersistent, Room::Refuse),
                        &mut Written::default(),
                        out,
                    );
                }
            }
        }
    }

    /// Returns a delivery that never reached its subscriber.
    pub fn release(&self, ack: &AckRef, sub: &Subscriber, out: &mut Deliveries) {
        let mut dispatches = Vec::new();
        lock(&ack.queue).release(sub, ack.seq, &mut dispatches);
        self.settled(&ack.queue, dispatches, out);
    }

    /// Takes back a delivery its subscriber gave up unprocessed without
    /// failing it (AMQP's `released`): uncounted, after the redelivery
    /// delay (see [`Queue::give_up`]).
    pub fn give_up(&self, ack: &AckRef, sub: &Subscriber, out: &mut Deliveries) -> bool {
        let mut dispatches = Vec::new();
        let held = lock(&ack.queue).give_up(sub, ack.seq, &mut dispatches);
        self.settled(&ack.queue, dispatches, out);
        held
    }

    /// The messages waiting in a queue that `selector` matches, paged
    /// ones too, up to `limit`.
    pub fn browse(
        &self,
        queue: &str,
        selector: &str,
        limit: usize,
    ) -> Result<Vec<QueuedMessage>, SubscribeError> {
        let selector = self.parse_selector(selector)?;
        Ok(self
            .find_queue(queue)
            .map(|q| lock(&q).browse(selector.as_deref(), limit))
            .unwrap_or_default())
    }
}
