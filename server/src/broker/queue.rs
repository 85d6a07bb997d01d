//! A queue: messages waiting, consumers competing for them, deliveries in
//! flight until acknowledged.
//!
//! Every message goes to one consumer. Dispatch walks the waiting messages
//! in delivery order (higher priority first, first in first out within a
//! priority; expired ones are set aside for the broker to move to the
//! expiry queue) and gives each to the next consumer, round-robin, that has
//! credit (fewer unacknowledged deliveries than its prefetch) and whose
//! selector matches; a message no consumer can take now stays for later.
//! A delivery that comes back (NACK, its consumer gone) returns to its
//! place in the order and counts as delivered once more; after
//! `max_deliveries` it is handed back to the broker as dead, for the
//! dead-letter queue.
//!
//! Invariant: every message is in exactly one of `ready` (in delivery
//! order: priority, then sequence number), `in_flight` and `expired`, and a consumer's `in_flight` count is
//! the number of `in_flight` entries that name it.

use crate::collections::FastMap;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use herald_protocol::message::{
    delivery_time, priority_and_expiration, MessageRef, DEFAULT_PRIORITY,
};
use herald_protocol::selector::Selector;

use super::address::{ConnectionRef, Subscriber};
pub use super::queued::{EntryId, QueuedMessage};
use super::ready::{Ready, ReadyKey};
use crate::store::Holder;

/// A queue sweeps out its expired messages at most this often.
const SWEEP_EVERY_MS: i64 = 1000;

/// Milliseconds since the epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A message the queue has given to a consumer.
#[derive(Debug, Clone)]
pub struct Dispatch {
    /// The consumer.
    pub to: Subscriber,
    /// Which message, for ACK/NACK.
    pub seq: u64,
    /// The message block.
    pub block: Bytes,
    /// 1 the first time, more on redelivery.
    pub delivery_count: u32,
    /// Its place among the dispatches to this consumer, from 1: whichever
    /// thread dispatched it, its consumer's worker hands them on in this
    /// order.
    pub order: u64,
}

struct Consumer {
    sub: Subscriber,
    selector: Option<Arc<Selector>>,
    prefetch: u32,
    in_flight: u32,
    /// Dispatches to it so far.
    dispatched: u64,
}

/// Limits that apply to one queue.
#[derive(Debug, Clone, Copy)]
pub struct QueueLimits {
    /// Deliveries after which a message that comes back is dead.
    pub max_deliveries: u32,
    /// Messages held (waiting and in flight) at most.
    pub max_messages: usize,
}

/// The queue is holding all the messages it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueFull {
    /// The limit.
    pub max_messages: usize,
}

/// Where a message is in its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// Waiting for a consumer.
    Ready,
    /// Waiting for its delivery time.
    Scheduled,
    /// Delivered and not yet acknowledged.
    InFlight,
}

impl Held {
    /// As the management interface says it.
    pub fn as_str(self) -> &'static str {
        match self {
            Held::Ready => "ready",
            Held::Scheduled => "scheduled",
            Held::InFlight => "in flight",
        }
    }
}

/// One queue's state; it lives behind a mutex in the broker.
pub struct Queue {
    name: String,
    /// How its persistent messages are filed in the store; `None` for a
    /// queue that lives and dies with one connection.
    holder: Option<Holder>,
    limits: QueueLimits,
    ready: Ready,
    /// Messages found expired, for the broker to move or drop.
    expired: Vec<QueuedMessage>,
    /// When a sweep for expired messages is scheduled (see
    /// [`Queue::sweep_for`]).
    sweep_at: Option<i64>,
    /// When the last sweep ran.
    swept_at: i64,
    /// Messages with a delivery time still to come, by (time, sequence).
    scheduled: BTreeMap<(i64, u64), QueuedMessage>,
    in_flight: FastMap<u64, (Subscriber, QueuedMessage)>,
    consumers: Vec<Consumer>,
    next_seq: u64,
    /// Where the next round-robin search starts.
    rr: usize,
    enqueued: u64,
    acknowledged: u64,
    /// Connections whose send is blocked until this queue has room.
    waiters: Vec<ConnectionRef>,
    /// For a temporary queue, the serial of the one connection that may
    /// consume from it.
    owner: Option<u64>,
}

impl Queue {
    /// An empty queue; `holder` files its persistent messages in the store.
    pub fn new(name: impl Into<String>, holder: Option<Holder>, limits: QueueLimits) -> Queue {
        Queue {
            name: name.into(),
            holder,
            limits,
            ready: Ready::default(),
            expired: Vec::new(),
            sweep_at: None,
            swept_at: 0,
            scheduled: BTreeMap::new(),
            in_flight: FastMap::default(),
            consumers: Vec::new(),
            next_seq: 1,
            rr: 0,
            enqueued: 0,
            acknowledged: 0,
            waiters: Vec::new(),
            owner: None,
        }
    }

    /// The connection a temporary queue belongs to.
    pub fn owner(&self) -> Option<u64> {
        self.owner
    }

    /// Makes this a temporary queue of connection `serial`.
    pub fn set_owner(&mut self, serial: u64) {
        self.owner = Some(serial);
    }

    /// Remembers a connection blocked on this queue being full.
    pub fn add_waiter(&mut self, conn: ConnectionRef) {
        if !self.waiters.contains(&conn) {
            self.waiters.push(conn);
        }
    }

    /// The blocked connections, if there is room for them to try again.
    pub fn take_waiters_if_room(&mut self) -> Vec<ConnectionRef> {
        if self.waiters.is_empty() || self.check_room().is_err() {
            return Vec::new();
        }
        std::mem::take(&mut self.waiters)
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How its persistent messages are filed, if they are.
    pub fn holder(&self) -> Option<&Holder> {
        self.holder.as_ref()
    }

    /// Messages waiting for a consumer, not counting those that have
    /// expired and wait to be set aside.
    pub fn depth(&self) -> usize {
        self.ready.live(now_ms())
    }

    /// Messages waiting for their delivery time.
    pub fn scheduled(&self) -> usize {
        self.scheduled.len()
    }

    /// Messages delivered and not yet acknowledged.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// How many more messages the consumers could take now: their unused
    /// credit, less what already waits for them. Waiting messages that no
    /// consumer's selector takes do not count (more are read past them),
    /// up to `hold` waiting in all.
    pub fn wants(&self, hold: usize) -> usize {
        if self.ready.len() >= hold {
            return 0;
        }
        let credit: usize = self
            .consumers
            .iter()
            .map(|c| c.prefetch.saturating_sub(c.in_flight) as usize)
            .sum();
        let unselected = self.unselected().len();
        credit.saturating_sub(self.ready.len() - unselected)
    }

    /// The waiting messages that no consumer's selector takes, by
    /// sequence number.
    pub fn unselected(&self) -> Vec<u64> {
        if self.consumers.iter().any(|c| c.selector.is_none()) {
            return Vec::new();
        }
        self.ready
            .iter()
            .filter(|m| {
                !self
                    .consumers
                    .iter()
                    .any(|c| selects_queued(c.selector.as_deref(), m))
            })
            .map(|m| m.seq)
            .collect()
    }

    /// Takes these waiting messages out (to give them to other nodes).
    pub fn take_ready(&mut self, seqs: &[u64]) -> Vec<QueuedMessage> {
        let mut taken = Vec::new();
        self.ready.retain(|m| {
            let take = seqs.contains(&m.seq);
            if take {
                taken.push(m.clone());
            }
            !take
        });
        taken
    }

    /// The stream entries of the messages this queue holds, waiting and
    /// in flight.
    pub fn entries(&self) -> Vec<EntryId> {
        let in_flight = self.in_flight.values().map(|(_, m)| m);
        self.ready
            .iter()
            .chain(self.scheduled.values())
            .chain(in_flight)
            .filter_map(|m| m.entry)
            .collect()
    }

    /// Consumers attached.
    pub fn consumer_count(&self) -> usize {
        self.consumers.len()
    }

    /// Messages ever enqueued, and ever acknowledged.
    pub fn counters(&self) -> (u64, u64) {
        (self.enqueued, self.acknowledged)
    }

    /// Bytes of the messages it holds: waiting, scheduled, in flight and
    /// set aside as expired.
    pub fn bytes(&self) -> usize {
        let len = |m: &QueuedMessage| m.block.len();
        self.ready.bytes()
            + self.scheduled.values().map(len).sum::<usize>()
            + self.in_flight.values().map(|(_, m)| len(m)).sum::<usize>()
            + self.expired.iter().map(len).sum::<usize>()
    }

    /// Fails if one more message would exceed the limit.
    pub fn check_room(&self) -> Result<(), QueueFull> {
        self.check_room_for(1)
    }

    /// Whether `n` more messages fit under the limit.
    pub fn check_room_for(&self, n: usize) -> Result<(), QueueFull> {
        let held = self.ready.len() + self.in_flight.len() + self.scheduled.len();
        if held.saturating_add(n) > self.limits.max_messages {
            return Err(QueueFull {
                max_messages: self.limits.max_messages,
            });
        }
        Ok(())
    }

    /// Adds a message (with its store record, if persistent) and
    /// dispatches what can be. Returns its delivery time if that is still
    /// to come (the broker then wakes the queue at that time).
    pub fn enqueue(
        &mut self,
        block: Bytes,
        journal_id: Option<u64>,
        out: &mut Vec<Dispatch>,
    ) -> Result<Option<i64>, QueueFull> {
        self.check_room()?;
        Ok(self.push(block, journal_id, out))
    }

    /// Adds a message whatever the limit (the broker has checked it) and
    /// dispatches what can be. Returns its delivery time if that is still
    /// to come.
    pub fn push(
        &mut self,
        block: Bytes,
        journal_id: Option<u64>,
        out: &mut Vec<Dispatch>,
    ) -> Option<i64> {
        let m = self.message(block, journal_id, None, 0);
        let due = self.admit(m);
        self.dispatch(out);
        due
    }

    /// Adds a message kept from before a restart, whatever the limit: a
    /// persistent message is never dropped. `delivered` is how often it
    /// had been delivered, if the server stopped cleanly and so knows
    /// (`store::shutdown`); if not, it may have been delivered, and is
    /// reported redelivered (see [`QueuedMessage::restored`]). Returns
    /// when the queue wants its tick for it, if it does.
    pub fn restore(
        &mut self,
        block: Bytes,
        journal_id: Option<u64>,
        delivered: Option<u32>,
    ) -> Option<i64> {
        let mut m = self.message(block, journal_id, None, delivered.unwrap_or(0));
        m.restored = delivered.is_none();
        self.admit(m)
    }

    /// Each held message kept in the store with how often it may have been
    /// delivered, if it may have been: what a clean stop notes down.
    pub fn kept_deliveries(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.held().filter_map(|(m, _)| {
            let count = m.deliveries + u32::from(m.restored);
            Some((m.journal_id?, count)).filter(|_| count > 0)
        })
    }

    /// Adds a message read from the queue's stream in Redis, delivered
    /// `deliveries` times before (by any node), and dispatches what can be.
    /// Returns its delivery time if that is still to come, or the message
    /// if it was delivered as often as it may be (it is dead).
    pub fn push_entry(
        &mut self,
        block: Bytes,
        entry: EntryId,
        deliveries: u32,
        out: &mut Vec<Dispatch>,
    ) -> Result<Option<i64>, QueuedMessage> {
        if deliveries >= self.limits.max_deliveries {
            return Err(self.message(block, None, Some(entry), deliveries));
        }
        let m = self.message(block, None, Some(entry), deliveries);
        let due = self.admit(m);
        self.dispatch(out);
        Ok(due)
    }

    /// Takes back an acknowledged message whose acknowledgement could not
    /// be kept, to be delivered again (its deliveries so far count), and
    /// dispatches what can be. Returns its delivery time if that is still
    /// to come.
    pub fn put_back(&mut self, m: QueuedMessage, out: &mut Vec<Dispatch>) -> Option<i64> {
        let mut again = self.message(m.block, m.journal_id, m.entry, m.deliveries);
        again.restored = m.restored;
        let due = self.admit(again);
        self.dispatch(out);
        due
    }

    /// Puts back a message taken out of this queue, in its old place
    /// (its sequence number), and dispatches what can be. Returns its
    /// delivery time if that is still to come.
    pub fn reinsert(&mut self, m: QueuedMessage, out: &mut Vec<Dispatch>) -> Option<i64> {
        let due = self.admit(m);
        self.dispatch(out);
        due
    }

    /// Takes in message `m`, numbered by [`Queue::message`]: ready, or
    /// scheduled for its delivery time. Returns when the queue wants its
    /// tick ([`Queue::sweep_expired`] and a dispatch) for it, if it does:
    /// at its delivery time, or to set it aside once it expires.
    fn admit(&mut self, m: QueuedMessage) -> Option<i64> {
        let due = delivery_time(&m.block);
        let sweep = match m.expiration {
            0 => None,
            expiration => self.sweep_for(expiration.max(due)),
        };
        if due != 0 && due > now_ms() {
            self.scheduled.insert((due, m.seq), m);
            return Some(sweep.map_or(due, |s| s.min(due)));
        }
        self.insert_ready(m);
        sweep
    }

    /// When to sweep for a message that expires at `expiration` (0:
    /// never), unless a sweep is due by then already: at most one a
    /// [`SWEEP_EVERY_MS`], so that messages expiring one after another
    /// cost one pass over the queue a second, not one each.
    fn sweep_for(&mut self, expiration: i64) -> Option<i64> {
        if expiration == 0 {
            return None;
        }
        let at = expiration.max(self.swept_at + SWEEP_EVERY_MS);
        if self.sweep_at.is_some_and(|t| t <= at) {
            return None;
        }
        self.sweep_at = Some(at);
        Some(at)
    }

    /// If a sweep is due, sets aside every waiting message that has
    /// expired (for [`Queue::take_expired`]), whether or not a consumer
    /// would have come for it; returns when the next sweep is due.
    pub fn sweep_expired(&mut self) -> Option<i64> {
        let now = now_ms();
        if self.sweep_at.is_none_or(|t| t > now) {
            return None;
        }
        (self.sweep_at, self.swept_at) = (None, now);
        let (mut expired, next) = self.ready.take_expired(now);
        self.expired.append(&mut expired);
        // Scheduled ones are swept once they are due and still expired.
        let later = self
            .scheduled
            .iter()
            .filter(|(_, m)| m.expiration != 0)
            .map(|((due, _), m)| m.expiration.max(*due))
            .min();
        let next = [next, later].into_iter().flatten().min()?;
        self.sweep_for(next)
    }

    /// A message of this queue's, numbered in its order.
    fn message(
        &mut self,
        block: Bytes,
        journal_id: Option<u64>,
        entry: Option<EntryId>,
        deliveries: u32,
    ) -> QueuedMessage {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.enqueued += 1;
        let (priority, expiration) =
            priority_and_expiration(&block).unwrap_or((DEFAULT_PRIORITY, 0));
        QueuedMessage {
            seq,
            block,
            deliveries,
            journal_id,
            priority,
            expiration,
            entry,
            restored: false,
        }
    }

    /// Dispatches what can be now, messages whose delivery time has come
    /// included.
    pub fn dispatch_due(&mut self, out: &mut Vec<Dispatch>) {
        self.dispatch(out);
    }

    /// Takes the messages found expired since the last call.
    pub fn take_expired(&mut self) -> Vec<QueuedMessage> {
        std::mem::take(&mut self.expired)
    }

    /// Attaches a consumer and dispatches to it what waits.
    pub fn add_consumer(
        &mut self,
        sub: Subscriber,
        selector: Option<Arc<Selector>>,
        prefetch: u32,
        out: &mut Vec<Dispatch>,
    ) {
        self.consumers.push(Consumer {
            sub,
            selector,
            prefetch: prefetch.max(1),
            in_flight: 0,
            dispatched: 0,
        });
        self.dispatch(out);
    }

    /// Detaches a consumer. Its unacknowledged deliveries return to the
    /// queue for the other consumers, counted as deliveries (those
    /// delivered too often are returned as dead instead) but for those in
    /// `unread` (sequence numbers, sorted), which its client handed to no
    /// application: they return as they were. Both in one step, so that no
    /// dispatch meanwhile gives the leaving consumer an unread one again.
    pub fn remove_consumer(
        &mut self,
        sub: &Subscriber,
        unread: &[u64],
        out: &mut Vec<Dispatch>,
    ) -> Vec<QueuedMessage> {
        self.consumers.retain(|c| c.sub != *sub);
        let seqs: Vec<u64> = self
            .in_flight
            .iter()
            .filter(|(_, (owner, _))| owner == sub)
            .map(|(seq, _)| *seq)
            .collect();
        let mut dead = Vec::new();
        for seq in seqs {
            let Some((_, mut m)) = self.in_flight.remove(&seq) else {
                continue;
            };
            match unread.binary_search(&seq) {
                Ok(_) => {
                    m.deliveries -= 1;
                    self.insert_ready(m);
                }
                Err(_) => self.give_back(m, &mut dead),
            }
        }
        self.dispatch(out);
        dead
    }

    /// The consumer processed the message: forget it, and return it (its
    /// store record must end). `None` if `sub` does not hold that delivery.
    pub fn ack(
        &mut self,
        sub: &Subscriber,
        seq: u64,
        out: &mut Vec<Dispatch>,
    ) -> Option<QueuedMessage> {
        let m = self.acked(sub, seq)?;
        self.dispatch(out);
        Some(m)
    }

    /// [`Queue::ack`] without dispatching what the freed credit allows: for
    /// many acknowledgements at once, followed by one
    /// [`Queue::dispatch_due`].
    pub fn acked(&mut self, sub: &Subscriber, seq: u64) -> Option<QueuedMessage> {
        let m = self.take_in_flight(sub, seq)?;
        self.acknowledged += 1;
        Some(m)
    }

    /// The consumer gives the message back for redelivery; dead ones are
    /// returned. `None` if `sub` does not hold that delivery.
    pub fn nack(
        &mut self,
        sub: &Subscriber,
        seq: u64,
        out: &mut Vec<Dispatch>,
    ) -> Option<Vec<QueuedMessage>> {
        let m = self.take_in_flight(sub, seq)?;
        let mut dead = Vec::new();
        self.give_back(m, &mut dead);
        self.dispatch(out);
        Some(dead)
    }

    /// The delivery never reached its consumer (it went away first): the
    /// message returns without counting as delivered.
    pub fn release(&mut self, sub: &Subscriber, seq: u64, out: &mut Vec<Dispatch>) {
        self.released(sub, seq);
        self.dispatch(out);
    }

    /// [`Queue::release`] without dispatching: for a consumer that is
    /// leaving, which must not be given the message again.
    pub fn released(&mut self, sub: &Subscriber, seq: u64) {
        if let Some(mut m) = self.take_in_flight(sub, seq) {
            m.deliveries -= 1;
            self.insert_ready(m);
        }
    }

    /// The waiting, unexpired messages that `selector` matches, in
    /// delivery order.
    pub fn browse(&self, selector: Option<&Selector>) -> Vec<QueuedMessage> {
        let now = now_ms();
        self.ready
            .iter()
            .filter(|m| !m.expired(now) && selects_queued(selector, m))
            .cloned()
            .collect()
    }

    /// Every message it holds, in the order a person reads a queue: those
    /// waiting in delivery order, then those scheduled by their time, then
    /// those in flight to a consumer.
    pub fn held(&self) -> impl Iterator<Item = (&QueuedMessage, Held)> {
        let ready = self.ready.iter().map(|m| (m, Held::Ready));
        let scheduled = self.scheduled.values().map(|m| (m, Held::Scheduled));
        let mut in_flight: Vec<&QueuedMessage> = self.in_flight.values().map(|(_, m)| m).collect();
        in_flight.sort_by_key(|m| m.seq);
        ready
            .chain(scheduled)
            .chain(in_flight.into_iter().map(|m| (m, Held::InFlight)))
    }

    /// Takes out the first waiting or scheduled message that `wanted`
    /// picks (not one in flight: its consumer has it).
    pub fn take_waiting(
        &mut self,
        wanted: impl Fn(&QueuedMessage) -> bool,
    ) -> Option<QueuedMessage> {
        if self.ready.iter().any(&wanted) {
            let mut taken = None;
            self.ready.retain(|m| {
                let take = taken.is_none() && wanted(m);
                if take {
                    taken = Some(m.clone());
                }
                !take
            });
            return taken;
        }
        let key = self
            .scheduled
            .iter()
            .find(|(_, m)| wanted(m))
            .map(|(k, _)| *k)?;
        self.scheduled.remove(&key)
    }

    /// Takes the waiting messages (not those in flight).
    pub fn purge(&mut self) -> Vec<QueuedMessage> {
        let mut all = self.ready.take_all();
        all.extend(std::mem::take(&mut self.scheduled).into_values());
        all.append(&mut self.expired);
        all
    }

    /// Takes every message, waiting and in flight (the queue is being
    /// deleted).
    pub fn drain(&mut self) -> Vec<QueuedMessage> {
        let mut all = self.ready.take_all();
        all.extend(std::mem::take(&mut self.scheduled).into_values());
        all.append(&mut self.expired);
        all.extend(self.in_flight.drain().map(|(_, (_, m))| m));
        for c in &mut self.consumers {
            c.in_flight = 0;
        }
        all
    }

    /// Takes a delivery its consumer refused as unprocessable: it is not
    /// given back (it goes to the dead-letter queue).
    pub fn reject(
        &mut self,
        sub: &Subscriber,
        seq: u64,
        out: &mut Vec<Dispatch>,
    ) -> Option<QueuedMessage> {
        let m = self.take_in_flight(sub, seq)?;
        self.dispatch(out);
        Some(m)
    }

    fn take_in_flight(&mut self, sub: &Subscriber, seq: u64) -> Option<QueuedMessage> {
        match self.in_flight.get(&seq) {
            Some((owner, _)) if owner == sub => {}
            _ => return None,
        }
        let (_, m) = self.in_flight.remove(&seq)?;
        if let Some(c) = self.consumers.iter_mut().find(|c| c.sub == *sub) {
            c.in_flight -= 1;
        }
        Some(m)
    }

    fn give_back(&mut self, m: QueuedMessage, dead: &mut Vec<QueuedMessage>) {
        if m.deliveries >= self.limits.max_deliveries {
            dead.push(m);
        } else {
            self.insert_ready(m);
        }
    }

    fn insert_ready(&mut self, m: QueuedMessage) {
        self.ready.insert(m);
    }

    /// Gives waiting messages, in delivery order, to consumers with credit
    /// whose selectors take them; expired ones are set aside instead.
    fn dispatch(&mut self, out: &mut Vec<Dispatch>) {
        // The clock is read only if a message has a time to compare: most
        // have neither a delivery time nor an expiration.
        let mut clock = None;
        let mut now = || *clock.get_or_insert_with(now_ms);
        while let Some(entry) = self.scheduled.first_entry() {
            if entry.key().0 > now() {
                break;
            }
            let m = entry.remove();
            self.insert_ready(m);
        }
        // Messages before `from` were looked at and no consumer took them.
        let mut from: Option<ReadyKey> = None;
        loop {
            if !self.consumers.iter().any(|c| c.in_flight < c.prefetch) {
                return;
            }
            let Some((key, m)) = self.ready.next_after(from) else {
                return;
            };
            if m.expiration != 0 && m.expired(now()) {
                if let Some(m) = self.ready.remove(key) {
                    self.expired.push(m);
                }
                continue;
            }
            let n = self.consumers.len();
            let chosen = (0..n).map(|k| (self.rr + k) % n).find(|&k| {
                let c = &self.consumers[k];
                c.in_flight < c.prefetch && selects_queued(c.selector.as_deref(), m)
            });
            let Some(k) = chosen else {
                from = Some(key);
                continue;
            };
            self.rr = (k + 1) % n;
            let Some(mut m) = self.ready.remove(key) else {
                return;
            };
            m.deliveries += 1;
            let c = &mut self.consumers[k];
            c.in_flight += 1;
            c.dispatched += 1;
            out.push(Dispatch {
                to: c.sub,
                seq: m.seq,
                block: m.block.clone(),
                delivery_count: m.deliveries + u32::from(m.restored),
                order: c.dispatched,
            });
            self.in_flight.insert(m.seq, (c.sub, m));
        }
    }
}

/// Whether `selector` (none = all) selects the message in `block`.
pub fn selects(selector: Option<&Selector>, block: &[u8]) -> bool {
    selects_delivery(selector, block, 1)
}

/// Whether `selector` selects queued message `m` for its next delivery
/// (`JMSXDeliveryCount` is the count that delivery would report).
pub fn selects_queued(selector: Option<&Selector>, m: &QueuedMessage) -> bool {
    let count = m.deliveries + 1 + u32::from(m.restored);
    selects_delivery(selector, &m.block, count)
}

fn selects_delivery(selector: Option<&Selector>, block: &[u8], delivery_count: u32) -> bool {
    match selector {
        None => true,
        // Blocks were validated on the way in; one that no longer parses
        // is selected by nothing.
        Some(s) => MessageRef::read(block).is_ok_and(|r| s.matches_delivery(&r, delivery_count)),
    }
}

/// A queue shared between the broker and the deliveries in flight from it.
pub type SharedQueue = Arc<Mutex<Queue>>;

/// Names the queue message a delivery came from, so that its ACK or NACK
/// reaches it.
#[derive(Clone)]
pub struct AckRef {
    /// The queue.
    pub queue: SharedQueue,
    /// The message's sequence number in it.
    pub seq: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::ConnectionRef;
    use bytes::BytesMut;
    use herald_protocol::{Destination, Message};

    fn sub(n: u32) -> Subscriber {
        Subscriber {
            conn: ConnectionRef {
                worker: 0,
                slot: n as usize,
                serial: n.into(),
            },
            subscription_id: n,
        }
    }

    fn block(i: i32) -> Bytes {
        let mut m = Message::text(i.to_string()).with_property("i", i);
        m.set_destination(Some(Destination::queue("q")));
        let mut b = BytesMut::new();
        m.encode(&mut b).unwrap();
        b.freeze()
    }

    fn queue() -> Queue {
        Queue::new(
            "q",
            None,
            QueueLimits {
                max_deliveries: 3,
                max_messages: 100,
            },
        )
    }

    #[test]
    fn competing_consumers_alternate_within_their_credit() {
        let mut q = queue();
        let mut out = Vec::new();
        q.add_consumer(sub(1), None, 2, &mut out);
        q.add_consumer(sub(2), None, 2, &mut out);
        for i in 0..6 {
            q.enqueue(block(i), None, &mut out).unwrap();
        }
        let to: Vec<u32> = out.iter().map(|d| d.to.subscription_id).collect();
        assert_eq!(to, [1, 2, 1, 2]);
        assert_eq!((q.depth(), q.in_flight()), (2, 4));
        let first = out[0].seq;
        out.clear();
        assert!(q.ack(&sub(1), first, &mut out).is_some());
        assert_eq!(out.len(), 1, "credit freed, one more dispatched");
        assert!(
            q.ack(&sub(2), out[0].seq, &mut Vec::new()).is_none(),
            "not sub 2's delivery"
        );
    }

    #[test]
    fn returned_messages_keep_their_place_and_count() {
        let mut q = queue();
        let mut out = Vec::new();
        q.add_consumer(sub(1), None, 1, &mut out);
        q.enqueue(block(0), None, &mut out).unwrap();
        q.enqueue(block(1), None, &mut out).unwrap();
        assert_eq!(out.len(), 1);
        let d = out.pop().unwrap();
        assert!(q.remove_consumer(&sub(1), &[], &mut out).is_empty());
        q.add_consumer(sub(2), None, 10, &mut out);
        assert_eq!(
            out.iter()
                .map(|d| (d.seq, d.delivery_count))
                .collect::<Vec<_>>(),
            [(d.seq, 2), (d.seq + 1, 1)]
        );
    }

    #[test]
    fn too_many_deliveries_make_a_message_dead() {
        let mut q = queue();
        let mut out = Vec::new();
        q.add_consumer(sub(1), None, 1, &mut out);
        q.enqueue(block(0), None, &mut out).unwrap();
        for round in 1..=3 {
            let d = out.pop().unwrap();
            assert_eq!(d.delivery_count, round);
            let dead = q.nack(&sub(1), d.seq, &mut out).unwrap();
            assert_eq!(dead.len(), usize::from(round == 3));
        }
        assert!(out.is_empty());
        assert_eq!((q.depth(), q.in_flight()), (0, 0));
    }

    #[test]
    fn a_message_kept_from_before_a_restart_is_marked_redelivered() {
        let mut q = queue();
        let mut out = Vec::new();
        q.restore(block(0), Some(7), None);
        q.enqueue(block(1), None, &mut out).unwrap();
        assert_eq!(q.kept_deliveries().collect::<Vec<_>>(), [(7, 1)]);
        q.add_consumer(sub(1), None, 1, &mut out);
        // It may have been delivered before: the first delivery says so.
        // Its nacks count as ever, against max_deliveries (3).
        for round in 1..=3 {
            let d = out.pop().unwrap();
            assert_eq!(d.delivery_count, round + 1);
            let dead = q.nack(&sub(1), d.seq, &mut out).unwrap();
            assert_eq!(dead.len(), usize::from(round == 3));
        }
        // A message that came after the restart is not marked.
        assert_eq!(out.pop().unwrap().delivery_count, 1);
    }

    #[test]
    fn after_a_clean_stop_a_kept_message_keeps_its_count() {
        let mut q = queue();
        let mut out = Vec::new();
        q.restore(block(0), Some(7), Some(0));
        q.restore(block(1), Some(8), Some(2));
        assert_eq!(q.kept_deliveries().collect::<Vec<_>>(), [(8, 2)]);
        q.add_consumer(sub(1), None, 2, &mut out);
        let counts: Vec<u32> = out.iter().map(|d| d.delivery_count).collect();
        assert_eq!(counts, [1, 3]);
    }

    #[test]
    fn selectors_leave_unmatched_messages_for_others() {
        let mut q = queue();
        let mut out = Vec::new();
        let even = Arc::new(Selector::parse("i / 2 * 2 = i").unwrap());
        q.add_consumer(sub(1), Some(even), 10, &mut out);
        for i in 0..4 {
            q.enqueue(block(i), None, &mut out).unwrap();
        }
        assert_eq!(out.len(), 2);
        assert_eq!(q.depth(), 2);
        out.clear();
        q.add_consumer(sub(2), None, 10, &mut out);
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|d| d.to == sub(2)));
    }

    fn block_with(priority: u8, expiration: i64) -> Bytes {
        let mut m = Message::text(format!("p{priority}"));
        m.priority = priority;
        m.expiration = expiration;
        m.set_destination(Some(Destination::queue("q")));
        let mut b = BytesMut::new();
        m.encode(&mut b).unwrap();
        b.freeze()
    }

    #[test]
    fn messages_no_selector_takes_do_not_count_against_what_is_wanted() {
        let mut q = queue();
        let mut out = Vec::new();
        let even = Arc::new(Selector::parse("i / 2 * 2 = i").unwrap());
        q.add_consumer(sub(1), Some(even), 2, &mut out);
        for i in [1, 3, 5] {
            q.enqueue(block(i), None, &mut out).unwrap();
        }
        assert_eq!(q.unselected().len(), 3);
        assert_eq!(q.wants(100), 2, "the odd ones are read past");
        assert_eq!(q.wants(3), 0, "up to what a node may hold");
        let seqs = q.unselected();
        let taken = q.take_ready(&seqs[..2]);
        assert_eq!(taken.len(), 2);
        assert_eq!(q.depth(), 1);
        // A consumer without a selector takes everything.
        q.add_consumer(sub(2), None, 10, &mut out);
        assert!(q.unselected().is_empty());
    }

    #[test]
    fn higher_priority_goes_first_and_fifo_within_a_priority() {
        let mut q = queue();
        let mut out = Vec::new();
        for p in [4, 9, 0, 9, 4] {
            q.enqueue(block_with(p, 0), None, &mut out).unwrap();
        }
        q.add_consumer(sub(1), None, 10, &mut out);
        let order: Vec<(u8, u64)> = out
            .iter()
            .map(|d| (priority_and_expiration(&d.block).unwrap().0, d.seq))
            .collect();
        assert_eq!(order, [(9, 2), (9, 4), (4, 1), (4, 5), (0, 3)]);
    }

    #[test]
    fn expired_messages_are_set_aside_not_delivered() {
        let mut q = queue();
        let mut out = Vec::new();
        q.enqueue(block_with(4, now_ms() - 1), None, &mut out)
            .unwrap();
        q.enqueue(block_with(4, now_ms() + 60_000), None, &mut out)
            .unwrap();
        q.enqueue(block_with(4, 0), None, &mut out).unwrap();
        assert_eq!(q.browse(None).len(), 2, "browsing skips the expired one");
        q.add_consumer(sub(1), None, 10, &mut out);
        assert_eq!(out.len(), 2);
        let expired = q.take_expired();
        assert_eq!(expired.len(), 1);
        assert!(q.take_expired().is_empty());
    }

    #[test]
    fn a_released_delivery_is_not_counted_and_limits_hold() {
        let mut q = Queue::new(
            "q",
            None,
            QueueLimits {
                max_deliveries: 3,
                max_messages: 2,
            },
        );
        let mut out = Vec::new();
        q.add_consumer(sub(1), None, 5, &mut out);
        q.enqueue(block(0), None, &mut out).unwrap();
        let d = out.pop().unwrap();
        q.release(&sub(1), d.seq, &mut out);
        assert_eq!(out.pop().unwrap().delivery_count, 1);
        q.enqueue(block(1), None, &mut out).unwrap();
        assert_eq!(
            q.enqueue(block(2), None, &mut out),
            Err(QueueFull { max_messages: 2 })
        );
        assert_eq!(q.browse(None).len(), 0, "both in flight");
    }

    #[test]
    fn a_leaving_consumer_returns_what_it_never_read_uncounted_and_the_rest_counted() {
        let mut q = queue();
        let mut out = Vec::new();
        q.add_consumer(sub(1), None, 5, &mut out);
        for i in 0..3 {
            q.enqueue(block(i), None, &mut out).unwrap();
        }
        let seqs: Vec<u64> = out.drain(..).map(|d| d.seq).collect();
        q.add_consumer(sub(2), None, 5, &mut out);
        // The first one read, the other two not: they come back as they
        // were, and none to the consumer leaving.
        assert!(q.remove_consumer(&sub(1), &seqs[1..], &mut out).is_empty());
        let counts: Vec<(u64, u32)> = out.iter().map(|d| (d.seq, d.delivery_count)).collect();
        assert_eq!(counts, [(seqs[0], 2), (seqs[1], 1), (seqs[2], 1)]);
        assert!(out.iter().all(|d| d.to == sub(2)));
    }
}
