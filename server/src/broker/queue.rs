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

use bytes::{Bytes, BytesMut};
use herald_protocol::message::{
    delivery_time, priority_and_expiration, property_of, MessageRef, DEFAULT_PRIORITY,
};
use herald_protocol::selector::Selector;
use herald_protocol::value::ValueRef;
use herald_protocol::{Message, Value};

use super::address::{ConnectionRef, Subscriber};
pub use super::queued::{EntryId, QueuedMessage};
use super::ready::{Ready, ReadyKey};
use crate::addresses::AddressSettings;
use crate::config::FullPolicy;
use crate::store::large::{keep, LargeStore};
use crate::store::page::{HeldBack, Paged, Pager, PagingRoot};
use crate::store::Holder;

/// A paging queue reads messages back from its page files while fewer
/// than this many wait in memory.
const PAGE_IN_BELOW: usize = 1000;

/// Paging that fails (a full disk) is said at most once an interval.
static PAGING_FAILED: crate::log_limit::LogLimit =
    crate::log_limit::LogLimit::new(std::time::Duration::from_secs(10));

/// A browse that could not read page files is said at most once an
/// interval.
static BROWSE_FAILED: crate::log_limit::LogLimit =
    crate::log_limit::LogLimit::new(std::time::Duration::from_secs(10));

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
    /// Higher ones are given messages first (the consumers are kept in
    /// this order, highest first, then by when they came).
    priority: i32,
    in_flight: u32,
    /// Dispatches to it so far.
    dispatched: u64,
    /// It asked that its queue deliver to one consumer at a time.
    exclusive: bool,
    /// In a dispatch, the last first message of its groups it passed over
    /// (its selector did not take it).
    passed: Option<ReadyKey>,
}

impl Consumer {
    fn has_credit(&self) -> bool {
        self.in_flight < self.prefetch
    }
}

/// The property that puts a message in a group (JMS).
pub const GROUP_PROPERTY: &str = "JMSXGroupID";

/// Set on the first message of a group that a consumer is given, so that
/// it knows the group is its own now.
pub const GROUP_FIRST_PROPERTY: &str = "JMSXGroupFirstForConsumer";

/// The key of a value of a message property: a hash of its type and
/// value. Groups and last values are keyed by hash, so that a long id costs
/// no copy; two ids that collide share a consumer or replace each other's
/// waiting message, which a 64-bit hash makes vanishingly rare.
fn value_key(value: ValueRef<'_>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    match value {
        ValueRef::Bool(b) => (0u8, b).hash(&mut h),
        ValueRef::I8(n) => (1u8, i64::from(n)).hash(&mut h),
        ValueRef::I16(n) => (1u8, i64::from(n)).hash(&mut h),
        ValueRef::I32(n) => (1u8, i64::from(n)).hash(&mut h),
        ValueRef::I64(n) => (1u8, n).hash(&mut h),
        ValueRef::F32(f) => (2u8, f64::from(f).to_bits()).hash(&mut h),
        ValueRef::F64(f) => (2u8, f.to_bits()).hash(&mut h),
        ValueRef::String(s) => (3u8, s).hash(&mut h),
    }
    h.finish()
}

/// The group of a message block, if it has one.
fn group_of(block: &[u8]) -> Option<u64> {
    property_of(block, GROUP_PROPERTY).map(value_key)
}

/// Why the queue takes no more messages now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// It holds `max_messages`.
    Messages(usize),
    /// It holds more than its `max_size_bytes`.
    Bytes(usize),
    /// It is among the largest queues while all of them together hold
    /// more than `queues.max_memory_bytes`.
    Memory(usize),
}

/// The queue is holding all the messages it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueFull {
    /// The limit it is at.
    pub limit: Limit,
    /// What its address does with a send now.
    pub policy: FullPolicy,
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Limit::Messages(max) => write!(f, "holds {max} messages, the most it may (max_messages)"),
            Limit::Bytes(max) => write!(f, "holds more than its max_size_bytes ({max})"),
            Limit::Memory(max) => write!(
                f,
                "is among the largest queues while all together hold more than queues.max_memory_bytes ({max})"
            ),
        }
    }
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
    /// In the page files (or held in memory behind them), waiting to be
    /// read back.
    Paged,
}

impl Held {
    /// As the management interface says it.
    pub fn as_str(self) -> &'static str {
        match self {
            Held::Ready => "ready",
            Held::Scheduled => "scheduled",
            Held::InFlight => "in flight",
            Held::Paged => "paged",
        }
    }
}

/// A queued message of `block`, number `seq` in its queue's order.
fn queued(
    block: Bytes,
    (journal_id, entry): (Option<u64>, Option<EntryId>),
    deliveries: u32,
    seq: u64,
) -> QueuedMessage {
    let (priority, expiration) = priority_and_expiration(&block).unwrap_or((DEFAULT_PRIORITY, 0));
    QueuedMessage {
        seq,
        group: group_of(&block),
        block,
        deliveries,
        journal_id,
        priority,
        expiration,
        entry,
        restored: false,
    }
}

/// One queue's state; it lives behind a mutex in the broker.
pub struct Queue {
    name: String,
    /// How its persistent messages are filed in the store; `None` for a
    /// queue that lives and dies with one connection.
    holder: Option<Holder>,
    settings: Arc<AddressSettings>,
    /// Over a memory bound ([`Limit::Bytes`] or [`Limit::Memory`]) when
    /// last weighed: publishers wait or are refused.
    over: Option<Limit>,
    /// When a message given back with a redelivery delay is due, for the
    /// broker to wake the queue then ([`Queue::take_wake`]).
    wake: Option<i64>,
    /// Sends dropped because it was full (`full_policy = "drop"`).
    dropped: u64,
    /// Kept messages given back to wait out a redelivery delay, for the
    /// broker to file again with their time ([`Queue::refile_redated`]):
    /// the old record's id, when it is due, its sequence number.
    redated: Vec<(u64, i64, u64)>,
    /// A last-value queue's waiting message for each key value: its
    /// sequence number, priority and delivery time (0 if ready).
    last_values: FastMap<u64, (u64, u8, i64)>,
    /// Messages a newer one with the same last value replaced, for the
    /// broker to end their store records.
    replaced: Vec<QueuedMessage>,
    /// A last-value queue's latest paged message of each key value, by
    /// its place in the paged order: an older one read back is replaced.
    paged_values: FastMap<u64, u64>,
    /// Messages paged (or held behind the paged ones) so far, and read
    /// back: the next one's place in the paged order, each way.
    paged_out: u64,
    paged_in: u64,
    /// Where it may page (`full_policy = "page"`), and the name of its
    /// directory there.
    paging: Option<(PagingRoot, String)>,
    /// Its page files, once it has paged.
    pager: Option<Pager>,
    /// Where large messages' bodies are kept, for a block it rewrites.
    large: Option<Arc<LargeStore>>,
    /// Messages that arrived while it paged and its page files took none
    /// (a failed write, the disk's floor): held in memory behind the paged
    /// ones, in order, and paged after them once the files take again.
    unpaged: HeldBack,
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
    pub fn new(
        name: impl Into<String>,
        holder: Option<Holder>,
        settings: Arc<AddressSettings>,
    ) -> Queue {
        Queue {
            name: name.into(),
            holder,
            settings,
            over: None,
            wake: None,
            dropped: 0,
            redated: Vec::new(),
            last_values: FastMap::default(),
            replaced: Vec::new(),
            paged_values: FastMap::default(),
            paged_out: 0,
            paged_in: 0,
            paging: None,
            pager: None,
            unpaged: HeldBack::default(),
            large: None,
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

    /// The settings of its address in force.
    pub fn settings(&self) -> &Arc<AddressSettings> {
        &self.settings
    }

    /// Puts new settings in force (a reload); what it holds stays.
    pub fn set_settings(&mut self, settings: Arc<AddressSettings>) {
        self.settings = settings;
    }

    /// Marks the queue over a memory bound, or not; `None` clears it.
    pub fn set_over(&mut self, over: Option<Limit>) {
        self.over = over;
    }

    /// The memory bound it was over when last weighed.
    pub fn over(&self) -> Option<Limit> {
        self.over
    }

    /// Counts a send dropped because the queue was full.
    pub fn count_dropped(&mut self) {
        self.dropped += 1;
    }

    /// Sends dropped because it was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Lets it keep the bodies of the large messages whose blocks it
    /// rewrites (a redelivery delay's new delivery time).
    pub fn set_large(&mut self, large: Arc<LargeStore>) {
        self.large = Some(large);
    }

    /// Lets it page under `root`, in directory `dir`.
    pub fn set_paging(&mut self, root: PagingRoot, dir: String) {
        self.paging = Some((root, dir));
    }

    /// Whether it can page: the server gave it somewhere to, and its page
    /// files take messages (not after a failed write, or at the disk's
    /// free-space floor, until one is read back).
    pub fn can_page(&self) -> bool {
        self.paging.is_some() && self.pager.as_ref().is_none_or(Pager::takes)
    }

    /// Whether it would page and cannot: its page files stopped taking
    /// messages (a write failed, or the disk is at its free-space floor)
    /// until one is read back.
    pub fn paging_stopped(&self) -> bool {
        self.paging.is_some() && self.pager.as_ref().is_some_and(|p| !p.takes())
    }

    /// Messages waiting to be read back: in its page files and held in
    /// memory behind them (what [`Queue::walk_paged`] walks).
    pub fn paged_messages(&self) -> usize {
        self.paged().0 + self.unpaged.len()
    }

    /// Messages in its page files, and their bytes there.
    pub fn paged(&self) -> (usize, u64) {
        self.pager
            .as_ref()
            .map_or((0, 0), |p| (p.count(), p.bytes()))
    }

    /// Messages held in memory, waiting, scheduled, in flight and held
    /// behind the paged ones.
    fn held_in_memory(&self) -> usize {
        self.ready.len() + self.in_flight.len() + self.scheduled.len() + self.unpaged.len()
    }

    /// Whether a message that arrives now goes to the page files: once
    /// one has, every one after it does until they are read back (the
    /// order holds); before, while the queue pages and is over a bound:
    /// the memory sampler's, or at once its waiting messages' bytes (which
    /// it keeps count of) over its own `max_size_bytes`.
    fn pages_now(&self) -> bool {
        if self.has_paged() {
            return true;
        }
        let max = self.settings.max_size_bytes;
        self.settings.full_policy == FullPolicy::Page
            && self.paging.is_some()
            && (self.over.is_some()
                || (max != 0 && self.ready.bytes() >= max)
                || self.held_in_memory() >= self.settings.max_messages)
    }

    /// Whether messages wait paged, on disk or held behind those.
    fn has_paged(&self) -> bool {
        !self.unpaged.is_empty() || self.pager.as_ref().is_some_and(|p| p.count() > 0)
    }

    /// Takes `m` if it is to wait paged: into the page files, or held in
    /// memory behind what waits there if they take none now, so that the
    /// order holds. Gives it back if it is to wait in memory as usual.
    fn page_or_hold(&mut self, m: Paged) -> Result<(), Paged> {
        if !self.pages_now() {
            return Err(m);
        }
        let value = self.last_value_of(&m.block);
        let taken = self.paged_or_held(m);
        if taken.is_ok() {
            self.paged_one(value);
        }
        taken
    }

    /// The key of `block`'s last value, in a last-value queue.
    fn last_value_of(&self, block: &[u8]) -> Option<u64> {
        let key = &self.settings.last_value_key;
        (!key.is_empty())
            .then(|| property_of(block, key).map(value_key))
            .flatten()
    }

    /// Counts a message paged, in a last-value queue with the key
    /// `value`: it replaces the one with that value waiting in memory at
    /// once, and one paged before it as that is read back.
    fn paged_one(&mut self, value: Option<u64>) {
        let place = self.paged_out;
        self.paged_out += 1;
        let Some(value) = value else {
            return;
        };
        self.paged_values.insert(value, place);
        if let Some((seq, priority, at)) = self.last_values.remove(&value) {
            let old = match at {
                0 => self.ready.remove(ReadyKey::new(priority, seq)),
                at => self.scheduled.remove(&(at, seq)),
            };
            self.replaced.extend(old);
        }
    }

    /// Whether `p`, the next paged message read back, was replaced by a
    /// newer one with its last value.
    fn read_back_replaced(&mut self, p: &Paged) -> bool {
        let place = self.paged_in;
        self.paged_in += 1;
        let Some(value) = self.last_value_of(&p.block) else {
            return false;
        };
        match self.paged_values.get(&value) {
            Some(&latest) if latest > place => true,
            Some(&latest) if latest == place => {
                self.paged_values.remove(&value);
                false
            }
            _ => false,
        }
    }

    /// [`Queue::page_or_hold`] once it is to wait paged.
    fn paged_or_held(&mut self, m: Paged) -> Result<(), Paged> {
        self.enqueued += 1;
        // Those held behind go first, once the files take again.
        while let Some(held) = self.unpaged.pop_front() {
            if let Err(held) = self.page_out(held) {
                self.unpaged.push_front(held);
                break;
            }
        }
        let m = match self.unpaged.is_empty() {
            true => match self.page_out(m) {
                Ok(()) => return Ok(()),
                Err(kept) => kept,
            },
            false => m,
        };
        if self.has_paged() {
            self.unpaged.push_back(m);
            return Ok(());
        }
        self.enqueued -= 1;
        Err(m)
    }

    /// Writes a message to the page files; gives it back if that failed
    /// (the log says why).
    fn page_out(&mut self, m: Paged) -> Result<(), Paged> {
        let Some((root, dir)) = &self.paging else {
            return Err(m);
        };
        let pager = self.pager.get_or_insert_with(|| Pager::new(root, dir));
        match pager.append(&m) {
            Ok(()) => Ok(()),
            Err(e) => {
                if let Some(held) = PAGING_FAILED.allow() {
                    log::warn!(
                        "queue {}: a message could not be paged ({e}): it is held in memory{}",
                        self.name,
                        crate::log_limit::held_back(held)
                    );
                }
                Err(m)
            }
        }
    }

    /// Reads paged messages back while few wait in memory: at most
    /// [`PAGE_IN_BELOW`] waiting, and half the address's
    /// `max_size_bytes` if it has one.
    fn page_in(&mut self) {
        let mut pager = self.pager.take();
        let max = self.settings.max_size_bytes;
        while self.ready.len() < PAGE_IN_BELOW && (max == 0 || self.ready.bytes() < max / 2) {
            // The files first, then what is held behind them.
            let next = match pager.as_mut().filter(|p| p.count() > 0) {
                Some(p) => p.read(),
                None => Ok(self.unpaged.pop_front()),
            };
            match next {
                Ok(Some(p)) if self.read_back_replaced(&p) => {
                    let m = self.paged_back(p);
                    self.replaced.push(m);
                }
                Ok(Some(p)) => {
                    let m = self.paged_back(p);
                    if let Some(due) = self.admit(m) {
                        self.wake = Some(self.wake.map_or(due, |w| w.min(due)));
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    if let Some(lost) = pager.take() {
                        self.unreadable(&e, &lost);
                    }
                }
            }
        }
        self.pager = pager;
    }

    /// A message read back from the page files, numbered in its order.
    fn paged_back(&mut self, p: Paged) -> QueuedMessage {
        let mut m = self.message(p.block, p.journal_id, None, p.deliveries);
        m.restored = p.restored;
        m
    }

    /// Says that the page files cannot be read: a persistent message is
    /// still in the journal and comes back at the next start; the rest are
    /// lost.
    fn unreadable(&mut self, e: &std::io::Error, pager: &Pager) {
        log::error!(
            "queue {}: its page files cannot be read ({e}): {} paged message(s) dropped from this run",
            self.name,
            pager.count()
        );
        // What is left of the paged order is held in memory.
        self.paged_in = self.paged_out - self.unpaged.len() as u64;
        let first = self.paged_in;
        self.paged_values.retain(|_, place| *place >= first);
    }

    /// Every paged message, read back (a purge, a deletion).
    fn page_in_all(&mut self) -> Vec<QueuedMessage> {
        let mut all = Vec::new();
        if let Some(mut pager) = self.pager.take() {
            loop {
                match pager.read() {
                    Ok(Some(p)) => all.push(self.paged_back(p)),
                    Ok(None) => break,
                    Err(e) => {
                        self.unreadable(&e, &pager);
                        break;
                    }
                }
            }
        }
        for p in self.unpaged.take_all() {
            all.push(self.paged_back(p));
        }
        // Nothing is paged now.
        self.paged_in = self.paged_out;
        self.paged_values.clear();
        all
    }

    /// Takes the messages replaced by newer ones with the same last value
    /// since the last call.
    pub fn take_replaced(&mut self) -> Vec<QueuedMessage> {
        std::mem::take(&mut self.replaced)
    }

    /// When a message it put aside to wait for its redelivery delay is
    /// due, once: the broker wakes the queue then.
    pub fn take_wake(&mut self) -> Option<i64> {
        self.wake.take()
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
        if self.waiters.is_empty() || self.check_room().is_err() || self.over.is_some() {
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
        self.ready.live(now_ms()) + self.paged().0 + self.unpaged.len()
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
        self.unselected_where(|_| true)
    }

    /// Those of [`Queue::unselected`] that may go to another node of a
    /// cluster: not those of a partition of message groups, which stay
    /// with the node that reads it, in their order.
    pub fn unselected_to_pass_on(&self) -> Vec<u64> {
        self.unselected_where(|m| m.entry.is_none_or(|e| !e.in_partition()))
    }

    fn unselected_where(&self, also: impl Fn(&QueuedMessage) -> bool) -> Vec<u64> {
        if self.consumers.iter().any(|c| c.selector.is_none()) {
            return Vec::new();
        }
        self.ready
            .iter()
            .filter(|m| {
                also(m)
                    && !self
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
            + self.unpaged.bytes()
    }

    /// Fails if one more message would exceed `max_messages`.
    pub fn check_room(&self) -> Result<(), QueueFull> {
        self.check_room_for(1)
    }

    /// Whether `n` more messages fit under `max_messages`.
    pub fn check_room_for(&self, n: usize) -> Result<(), QueueFull> {
        let held = self.held_in_memory();
        let max = self.settings.max_messages;
        if held.saturating_add(n) > max {
            return Err(self.full(Limit::Messages(max)));
        }
        Ok(())
    }

    /// [`Queue::check_room`], and whether a publisher may add to it now:
    /// not while it is over a memory bound, as the sampler last weighed it
    /// or, at once, by the bytes of its waiting messages (those held behind
    /// paged ones too).
    pub fn check_publish(&self) -> Result<(), QueueFull> {
        self.check_room()?;
        let max = self.settings.max_size_bytes;
        let waiting = self.ready.bytes() + self.unpaged.bytes();
        match self.over {
            Some(limit) => Err(self.full(limit)),
            None if max != 0 && waiting >= max => Err(self.full(Limit::Bytes(max))),
            None => Ok(()),
        }
    }

    fn full(&self, limit: Limit) -> QueueFull {
        QueueFull {
            limit,
            policy: self.settings.full_policy,
        }
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
        let paged = Paged {
            block,
            journal_id,
            deliveries: 0,
            restored: false,
        };
        let block = match self.page_or_hold(paged) {
            Ok(()) => {
                // A consumer waiting on an empty queue reads it back now.
                self.dispatch(out);
                return None;
            }
            Err(kept) => kept.block,
        };
        self.enqueued += 1;
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
        let deliveries = delivered.unwrap_or(0);
        // Over its bound as it was kept: paged again, in the same order.
        let paged = Paged {
            block,
            journal_id,
            deliveries,
            restored: delivered.is_none(),
        };
        let block = match self.page_or_hold(paged) {
            Ok(()) => return None,
            Err(kept) => kept.block,
        };
        self.enqueued += 1;
        let mut m = self.message(block, journal_id, None, deliveries);
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
        self.enqueued += 1;
        if deliveries >= self.settings.max_deliveries {
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
        self.enqueued += 1;
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
        if !self.settings.last_value_key.is_empty() {
            self.replace_last_value(&m, due);
        }
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

    /// In a last-value queue, takes out the waiting message that `m`
    /// (due at `due`) replaces, if one has the same value of the key; one
    /// in flight stays with its consumer.
    fn replace_last_value(&mut self, m: &QueuedMessage, due: i64) {
        let Some(value) = property_of(&m.block, &self.settings.last_value_key) else {
            return;
        };
        let key = value_key(value);
        let waiting = if due != 0 && due > now_ms() { due } else { 0 };
        let Some((seq, priority, at)) = self.last_values.insert(key, (m.seq, m.priority, waiting))
        else {
            return;
        };
        let old = match at {
            0 => self.ready.remove(ReadyKey::new(priority, seq)),
            at => self.scheduled.remove(&(at, seq)),
        };
        self.replaced.extend(old);
        // Keys whose message has left linger; past twice what waits, they
        // are swept, so that unique keys cannot grow the map unbounded.
        let waiting = self.ready.len() + self.scheduled.len();
        if self.last_values.len() > 2 * waiting + 1024 {
            let (ready, scheduled) = (&self.ready, &self.scheduled);
            self.last_values.retain(|_, (seq, priority, at)| match *at {
                0 => ready.contains(ReadyKey::new(*priority, *seq)),
                at => scheduled.contains_key(&(at, *seq)),
            });
        }
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
        queued(block, (journal_id, entry), deliveries, seq)
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
    /// `priority` places it among the others: higher ones are given
    /// messages first, equal ones in turn. While an `exclusive` one is
    /// attached, the queue delivers to one consumer at a time, as an
    /// exclusive address does.
    pub fn add_consumer(
        &mut self,
        sub: Subscriber,
        selector: Option<Arc<Selector>>,
        (prefetch, priority, exclusive): (u32, i32, bool),
        out: &mut Vec<Dispatch>,
    ) {
        let at = self.consumers.partition_point(|c| c.priority >= priority);
        self.consumers.insert(
            at,
            Consumer {
                sub,
                selector,
                prefetch: prefetch.max(1),
                priority,
                in_flight: 0,
                dispatched: 0,
                exclusive,
                passed: None,
            },
        );
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
        // Its groups go to whoever is given their next message.
        self.ready.disown(sub);
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

    /// The consumer gives the delivery back unprocessed without counting
    /// it as failed (AMQP's `released`): it returns uncounted, after the
    /// address's first redelivery delay.
    /// False if `sub` does not hold that delivery.
    pub fn give_up(&mut self, sub: &Subscriber, seq: u64, out: &mut Vec<Dispatch>) -> bool {
        let Some(mut m) = self.take_in_flight(sub, seq) else {
            return false;
        };
        m.deliveries -= 1;
        let wait = self.settings.redelivery_wait(1);
        self.return_after(m, wait);
        self.dispatch(out);
        true
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
    /// delivery order, up to `limit`: those in memory, then those paged
    /// (read from the page files and left there).
    pub fn browse(&mut self, selector: Option<&Selector>, limit: usize) -> Vec<QueuedMessage> {
        let now = now_ms();
        let wanted = |m: &QueuedMessage| !m.expired(now) && selects_queued(selector, m);
        let mut found: Vec<QueuedMessage> = self
            .ready
            .iter()
            .filter(|m| wanted(m))
            .take(limit)
            .cloned()
            .collect();
        self.walk_paged(|m| {
            if found.len() >= limit {
                return false;
            }
            if wanted(&m) {
                found.push(m);
            }
            true
        });
        found
    }

    /// The paged messages, then those held in memory behind them, oldest
    /// first, read and left where they are, until `each` says to stop
    /// (numbered after those in memory, for the reader's eyes only). Page
    /// files that cannot be read end the walk, and the log says why.
    pub fn walk_paged(&mut self, mut each: impl FnMut(QueuedMessage) -> bool) {
        let mut seq = self.next_seq;
        let mut view = |p: Paged| {
            let mut m = queued(p.block, (p.journal_id, None), p.deliveries, seq);
            m.restored = p.restored;
            seq += 1;
            each(m)
        };
        let mut going = true;
        if let Some(pager) = self.pager.as_mut() {
            if let Err(e) = pager.peek(|p| {
                going = view(p);
                going
            }) {
                // Each browse would say it again: once an interval.
                if let Some(held) = BROWSE_FAILED.allow() {
                    log::warn!(
                        "queue {}: its page files cannot be browsed: {e}{}",
                        self.name,
                        crate::log_limit::held_back(held)
                    );
                }
                return;
            }
        }
        for p in self.unpaged.iter() {
            if !going || !view(p.clone()) {
                return;
            }
        }
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
        all.append(&mut self.page_in_all());
        all.extend(std::mem::take(&mut self.scheduled).into_values());
        all.append(&mut self.expired);
        all
    }

    /// Takes every message, waiting and in flight (the queue is being
    /// deleted).
    pub fn drain(&mut self) -> Vec<QueuedMessage> {
        let mut all = self.ready.take_all();
        all.append(&mut self.page_in_all());
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

    /// Takes back a delivery its consumer did not process: dead if it
    /// was delivered as often as it may be, else waiting again, after its
    /// redelivery delay if the address has one.
    fn give_back(&mut self, m: QueuedMessage, dead: &mut Vec<QueuedMessage>) {
        if m.deliveries >= self.settings.max_deliveries {
            dead.push(m);
        } else {
            let wait = self.settings.redelivery_wait(m.deliveries);
            self.return_after(m, wait);
        }
    }

    /// Makes `m` wait again: at once, or `wait` ms from now. A kept
    /// message's block then carries that time, and is filed again
    /// ([`Queue::refile_redated`]), so that the wait holds across a
    /// restart; so does a cluster's, so that the wait holds on the node
    /// it is given back to when its consumers here leave.
    fn return_after(&mut self, mut m: QueuedMessage, wait: u64) {
        if wait == 0 {
            return self.insert_ready(m);
        }
        // A millisecond more: the clock is read in whole milliseconds, and
        // the message must not come back before its delay.
        let due = now_ms().saturating_add(wait as i64 + 1);
        self.wake = Some(self.wake.map_or(due, |w| w.min(due)));
        if m.journal_id.is_some() || m.entry.is_some() {
            m.block = keep(
                self.large.as_ref(),
                rewritten(&m.block, |m| m.delivery_time = due),
            );
        }
        if let Some(id) = m.journal_id {
            self.redated.push((id, due, m.seq));
        }
        // A last value waits with its time, to be found when replaced.
        if let Some(at) = Some(&self.settings.last_value_key)
            .filter(|key| !key.is_empty())
            .and_then(|key| property_of(&m.block, key))
            .and_then(|value| self.last_values.get_mut(&value_key(value)))
            .filter(|(seq, ..)| *seq == m.seq)
        {
            at.2 = due;
        }
        self.scheduled.insert((due, m.seq), m);
    }

    /// Whether kept messages wait to be filed again with their time.
    pub fn has_redated(&self) -> bool {
        !self.redated.is_empty()
    }

    /// Files again each kept message given back to wait out a redelivery
    /// delay since the last call, its block now carrying its delivery
    /// time: `file` takes the old record's id and the new block and gives
    /// the new record's id.
    pub fn refile_redated(&mut self, mut file: impl FnMut(u64, Bytes) -> u64) {
        for (old, due, seq) in std::mem::take(&mut self.redated) {
            // Delivered meanwhile, it was filed at its ack or will be.
            if let Some(m) = self.scheduled.get_mut(&(due, seq)) {
                m.journal_id = Some(file(old, m.block.clone()));
            }
        }
    }

    fn insert_ready(&mut self, m: QueuedMessage) {
        self.ready.insert(m);
    }

    /// Gives waiting messages, in delivery order, to consumers with credit
    /// whose selectors take them; expired ones are set aside instead.
    fn dispatch(&mut self, out: &mut Vec<Dispatch>) {
        // Paged messages come back for consumers, not to wait in memory.
        if self.has_paged() && self.consumers.iter().any(Consumer::has_credit) {
            self.page_in();
        }
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
        // Messages before `from` in the shared order were looked at and
        // no consumer took them.
        let mut from: Option<ReadyKey> = None;
        for c in &mut self.consumers {
            c.passed = None;
        }
        let exclusive = self.settings.exclusive || self.consumers.iter().any(|c| c.exclusive);
        loop {
            if !self.consumers.iter().any(Consumer::has_credit) {
                return;
            }
            let shared = self.ready.next_after(from).map(|(key, _)| key);
            let owned = self.next_owned();
            // The earlier of the next shared message and the first of the
            // owned groups of a consumer with credit.
            let (key, owner) = match (shared, owned) {
                (_, Some((key, k))) if shared.is_none_or(|s| key < s) => (key, Some(k)),
                (Some(key), _) => (key, None),
                (None, _) => return,
            };
            let found = match owner {
                Some(k) => self
                    .ready
                    .next_owned(&self.consumers[k].sub, self.consumers[k].passed),
                None => self.ready.next_after(from),
            };
            let Some((_, m)) = found else {
                return;
            };
            if m.expiration != 0 && m.expired(now()) {
                if let Some(m) = self.ready.remove(key) {
                    self.expired.push(m);
                }
                continue;
            }
            let takes = |c: &Consumer| c.has_credit() && selects_queued(c.selector.as_deref(), m);
            let chosen = match owner {
                Some(k) => Some(k).filter(|&k| takes(&self.consumers[k])),
                None => choose(&self.consumers, self.rr, exclusive, takes),
            };
            let Some(k) = chosen else {
                match owner {
                    Some(k) => self.consumers[k].passed = Some(key),
                    None => from = Some(key),
                }
                continue;
            };
            // A group's messages go to its consumer alone, in order (an
            // exclusive queue has one consumer at a time anyway): the
            // first a consumer is given makes the group its own.
            let first = match m.group.filter(|_| !exclusive && owner.is_none()) {
                Some(group) => {
                    self.ready.set_owner(group, self.consumers[k].sub);
                    true
                }
                None => false,
            };
            self.rr = (k + 1) % self.consumers.len();
            let from_owner = owner.map(|k| self.consumers[k].sub);
            let Some(mut m) = self.ready.remove_from(from_owner.as_ref(), key) else {
                return;
            };
            m.deliveries += 1;
            let c = &mut self.consumers[k];
            c.in_flight += 1;
            c.dispatched += 1;
            out.push(Dispatch {
                to: c.sub,
                seq: m.seq,
                block: match first {
                    true => first_of_group(&m.block),
                    false => m.block.clone(),
                },
                delivery_count: m.deliveries + u32::from(m.restored),
                order: c.dispatched,
            });
            self.in_flight.insert(m.seq, (c.sub, m));
        }
    }

    /// The earliest first message of the owned groups of the consumers
    /// with credit, past what each passed over, and whose it is.
    fn next_owned(&self) -> Option<(ReadyKey, usize)> {
        if !self.ready.any_owned() {
            return None;
        }
        self.consumers
            .iter()
            .enumerate()
            .filter(|(_, c)| c.has_credit())
            .filter_map(|(k, c)| Some((self.ready.next_owned(&c.sub, c.passed)?.0, k)))
            .min()
    }
}

/// The consumer to give a waiting message to, of those `takes` allows:
/// among the highest priority that can take it, the next in turn from
/// `rr`; for an exclusive queue, the first consumer that asked for it or
/// else the first (the highest priority, then the earliest), or none.
fn choose(
    consumers: &[Consumer],
    rr: usize,
    exclusive: bool,
    takes: impl Fn(&Consumer) -> bool,
) -> Option<usize> {
    if exclusive {
        let one = consumers.iter().position(|c| c.exclusive).unwrap_or(0);
        return consumers.get(one).filter(|c| takes(c)).map(|_| one);
    }
    let mut start = 0;
    while let Some(first) = consumers.get(start) {
        // Most queues have one priority: then the run is all of them.
        let len = match consumers.last() {
            Some(last) if last.priority == first.priority => consumers.len() - start,
            _ => consumers[start..]
                .iter()
                .take_while(|c| c.priority == first.priority)
                .count(),
        };
        // In turn: from the one after the last chosen, if it is of this
        // run, else from the run's first.
        let offset = rr.clamp(start, start + len) - start;
        let found = (0..len)
            .map(|k| start + (offset + k) % len)
            .find(|&k| takes(&consumers[k]));
        if found.is_some() {
            return found;
        }
        start += len;
    }
    None
}

/// A copy of `block` marked as the first of its group for the consumer
/// given it ([`GROUP_FIRST_PROPERTY`]).
fn first_of_group(block: &Bytes) -> Bytes {
    let marked = Value::Bool(true);
    herald_protocol::message::with_property(block, GROUP_FIRST_PROPERTY, &marked)
        .unwrap_or_else(|| rewritten(block, |m| m.set_property(GROUP_FIRST_PROPERTY, true)))
}

/// A copy of `block` to be delivered at `due` (ms since the epoch), not
/// before: a message claimed from a cluster node that died, waiting out
/// its redelivery delay.
pub fn delivered_at(block: &Bytes, due: i64) -> Bytes {
    rewritten(block, |m| m.delivery_time = due)
}

/// A copy of `block` with the message `change`d (the block itself if it
/// does not decode, which a validated block does).
fn rewritten(block: &Bytes, change: impl FnOnce(&mut Message)) -> Bytes {
    let Ok(mut m) = Message::decode(block, 0) else {
        return block.clone();
    };
    change(&mut m);
    let mut copy = BytesMut::with_capacity(block.len() + 40);
    match m.encode(&mut copy) {
        Ok(()) => copy.freeze(),
        Err(_) => block.clone(),
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

    fn settings(max_deliveries: u32, max_messages: usize) -> Arc<AddressSettings> {
        let mut s = AddressSettings::defaults(&Default::default(), &Destination::queue("q"));
        (s.max_deliveries, s.max_messages) = (max_deliveries, max_messages);
        Arc::new(s)
    }

    fn queue() -> Queue {
        Queue::new("q", None, settings(3, 100))
    }

    #[test]
    fn competing_consumers_alternate_within_their_credit() {
        let mut q = queue();
        let mut out = Vec::new();
        q.add_consumer(sub(1), None, (2, 0, false), &mut out);
        q.add_consumer(sub(2), None, (2, 0, false), &mut out);
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
        q.add_consumer(sub(1), None, (1, 0, false), &mut out);
        q.enqueue(block(0), None, &mut out).unwrap();
        q.enqueue(block(1), None, &mut out).unwrap();
        assert_eq!(out.len(), 1);
        let d = out.pop().unwrap();
        assert!(q.remove_consumer(&sub(1), &[], &mut out).is_empty());
        q.add_consumer(sub(2), None, (10, 0, false), &mut out);
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
        q.add_consumer(sub(1), None, (1, 0, false), &mut out);
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
        q.add_consumer(sub(1), None, (1, 0, false), &mut out);
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
        q.add_consumer(sub(1), None, (2, 0, false), &mut out);
        let counts: Vec<u32> = out.iter().map(|d| d.delivery_count).collect();
        assert_eq!(counts, [1, 3]);
    }

    #[test]
    fn selectors_leave_unmatched_messages_for_others() {
        let mut q = queue();
        let mut out = Vec::new();
        let even = Arc::new(Selector::parse("i / 2 * 2 = i").unwrap());
        q.add_consumer(sub(1), Some(even), (10, 0, false), &mut out);
        for i in 0..4 {
            q.enqueue(block(i), None, &mut out).unwrap();
        }
        assert_eq!(out.len(), 2);
        assert_eq!(q.depth(), 2);
        out.clear();
        q.add_consumer(sub(2), None, (10, 0, false), &mut out);
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
        q.add_consumer(sub(1), Some(even), (2, 0, false), &mut out);
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
        q.add_consumer(sub(2), None, (10, 0, false), &mut out);
        assert!(q.unselected().is_empty());
    }

    #[test]
    fn higher_priority_goes_first_and_fifo_within_a_priority() {
        let mut q = queue();
        let mut out = Vec::new();
        for p in [4, 9, 0, 9, 4] {
            q.enqueue(block_with(p, 0), None, &mut out).unwrap();
        }
        q.add_consumer(sub(1), None, (10, 0, false), &mut out);
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
        assert_eq!(
            q.browse(None, usize::MAX).len(),
            2,
            "browsing skips the expired one"
        );
        q.add_consumer(sub(1), None, (10, 0, false), &mut out);
        assert_eq!(out.len(), 2);
        let expired = q.take_expired();
        assert_eq!(expired.len(), 1);
        assert!(q.take_expired().is_empty());
    }

    #[test]
    fn a_released_delivery_is_not_counted_and_limits_hold() {
        let mut q = Queue::new("q", None, settings(3, 2));
        let mut out = Vec::new();
        q.add_consumer(sub(1), None, (5, 0, false), &mut out);
        q.enqueue(block(0), None, &mut out).unwrap();
        let d = out.pop().unwrap();
        q.release(&sub(1), d.seq, &mut out);
        assert_eq!(out.pop().unwrap().delivery_count, 1);
        q.enqueue(block(1), None, &mut out).unwrap();
        assert_eq!(
            q.enqueue(block(2), None, &mut out),
            Err(QueueFull {
                limit: Limit::Messages(2),
                policy: FullPolicy::Page
            })
        );
        assert_eq!(q.browse(None, usize::MAX).len(), 0, "both in flight");
    }

    #[test]
    fn a_leaving_consumer_returns_what_it_never_read_uncounted_and_the_rest_counted() {
        let mut q = queue();
        let mut out = Vec::new();
        q.add_consumer(sub(1), None, (5, 0, false), &mut out);
        for i in 0..3 {
            q.enqueue(block(i), None, &mut out).unwrap();
        }
        let seqs: Vec<u64> = out.drain(..).map(|d| d.seq).collect();
        q.add_consumer(sub(2), None, (5, 0, false), &mut out);
        // The first one read, the other two not: they come back as they
        // were, and none to the consumer leaving.
        assert!(q.remove_consumer(&sub(1), &seqs[1..], &mut out).is_empty());
        let counts: Vec<(u64, u32)> = out.iter().map(|d| (d.seq, d.delivery_count)).collect();
        assert_eq!(counts, [(seqs[0], 2), (seqs[1], 1), (seqs[2], 1)]);
        assert!(out.iter().all(|d| d.to == sub(2)));
    }

    fn with(change: impl FnOnce(&mut AddressSettings)) -> Queue {
        let mut s = (*settings(3, 100)).clone();
        change(&mut s);
        Queue::new("q", None, Arc::new(s))
    }

    fn tagged(i: i32, name: &str, value: &str) -> Bytes {
        let mut m = Message::text(i.to_string()).with_property(name, value);
        m.set_destination(Some(Destination::queue("q")));
        let mut b = BytesMut::new();
        m.encode(&mut b).unwrap();
        b.freeze()
    }

    fn text(d: &Dispatch) -> String {
        let m = Message::decode(&d.block, 1).unwrap();
        m.body_text().unwrap().to_owned()
    }

    #[test]
    fn a_higher_priority_consumer_is_served_first_while_it_has_credit() {
        let mut q = queue();
        let mut out = Vec::new();
        q.add_consumer(sub(1), None, (10, 0, false), &mut out);
        q.add_consumer(sub(2), None, (2, 5, false), &mut out);
        q.add_consumer(sub(3), None, (10, 0, false), &mut out);
        for i in 0..6 {
            q.enqueue(block(i), None, &mut out).unwrap();
        }
        let to: Vec<u32> = out.iter().map(|d| d.to.subscription_id).collect();
        // Two to the high one (its credit), then the rest in turn.
        assert_eq!(to, [2, 2, 1, 3, 1, 3]);
        // Credit back: the high one again.
        let d = out.iter().find(|d| d.to == sub(2)).unwrap().seq;
        q.ack(&sub(2), d, &mut Vec::new());
        q.enqueue(block(6), None, &mut out).unwrap();
        assert_eq!(out.last().unwrap().to, sub(2));
    }

    #[test]
    fn an_exclusive_queue_delivers_to_one_consumer_until_it_goes() {
        let mut q = with(|s| s.exclusive = true);
        let mut out = Vec::new();
        q.add_consumer(sub(1), None, (2, 0, false), &mut out);
        q.add_consumer(sub(2), None, (10, 0, false), &mut out);
        for i in 0..4 {
            q.enqueue(block(i), None, &mut out).unwrap();
        }
        assert!(out.iter().all(|d| d.to == sub(1)), "{out:?}");
        assert_eq!(
            (out.len(), q.depth()),
            (2, 2),
            "the rest wait for its credit"
        );
        let unread = out[1].seq;
        out.clear();
        // It goes having read the first: everything moves to the next, in
        // order, the read one marked as delivered before.
        q.remove_consumer(&sub(1), &[unread], &mut out);
        let got: Vec<(String, u32)> = out.iter().map(|d| (text(d), d.delivery_count)).collect();
        assert_eq!(
            got,
            [
                ("0".into(), 2),
                ("1".into(), 1),
                ("2".into(), 1),
                ("3".into(), 1)
            ]
        );
        assert!(out.iter().all(|d| d.to == sub(2)));
    }

    #[test]
    fn an_exclusive_consumer_takes_every_message_while_it_is_attached() {
        let mut q = queue();
        let mut out = Vec::new();
        q.add_consumer(sub(1), None, (10, 0, false), &mut out);
        q.add_consumer(sub(2), None, (10, 0, true), &mut out);
        for i in 0..4 {
            q.enqueue(block(i), None, &mut out).unwrap();
        }
        assert!(out.iter().all(|d| d.to == sub(2)), "{out:?}");
        for d in std::mem::take(&mut out) {
            q.ack(&sub(2), d.seq, &mut Vec::new());
        }
        // Gone, the queue shares its messages again.
        q.remove_consumer(&sub(2), &[], &mut out);
        q.add_consumer(sub(3), None, (10, 0, false), &mut out);
        for i in 4..8 {
            q.enqueue(block(i), None, &mut out).unwrap();
        }
        let to: Vec<_> = out.iter().map(|d| d.to).collect();
        assert!(to.contains(&sub(1)) && to.contains(&sub(3)), "{to:?}");
    }

    #[test]
    fn a_group_stays_with_one_consumer_and_moves_when_it_goes() {
        let mut q = queue();
        let mut out = Vec::new();
        q.add_consumer(sub(1), None, (100, 0, false), &mut out);
        q.add_consumer(sub(2), None, (100, 0, false), &mut out);
        for i in 0..8 {
            let group = if i % 2 == 0 { "g1" } else { "g2" };
            q.enqueue(tagged(i, GROUP_PROPERTY, group), None, &mut out)
                .unwrap();
        }
        let of = |out: &[Dispatch], c: u32| -> Vec<String> {
            out.iter().filter(|d| d.to == sub(c)).map(text).collect()
        };
        let (one, two) = (of(&out, 1), of(&out, 2));
        assert_eq!(one, ["0", "2", "4", "6"], "g1 whole at one consumer");
        assert_eq!(two, ["1", "3", "5", "7"], "g2 whole at the other");
        let firsts: Vec<String> = out
            .iter()
            .filter(|d| {
                Message::decode(&d.block, 1)
                    .unwrap()
                    .property(GROUP_FIRST_PROPERTY)
                    .is_some()
            })
            .map(text)
            .collect();
        assert_eq!(firsts, ["0", "1"]);
        // The second consumer goes with g2 unacknowledged: the group moves
        // to the first, in order, its first message marked again.
        let seqs: Vec<u64> = out
            .iter()
            .filter(|d| d.to == sub(2))
            .map(|d| d.seq)
            .collect();
        out.clear();
        q.remove_consumer(&sub(2), &seqs, &mut out);
        assert_eq!(of(&out, 1), ["1", "3", "5", "7"]);
        let first = Message::decode(&out[0].block, 1).unwrap();
        assert_eq!(
            first
                .property(GROUP_FIRST_PROPERTY)
                .and_then(|v| v.as_bool()),
            Some(true)
        );
        // A group whose consumer has no credit waits; others pass it.
        let mut q = queue();
        q.add_consumer(sub(1), None, (1, 0, false), &mut out);
        q.add_consumer(sub(2), None, (5, 0, false), &mut out);
        out.clear();
        for (i, group) in [(0, "a"), (1, "a"), (2, "b")] {
            q.enqueue(tagged(i, GROUP_PROPERTY, group), None, &mut out)
                .unwrap();
        }
        let got: Vec<(u32, String)> = out
            .iter()
            .map(|d| (d.to.subscription_id, text(d)))
            .collect();
        assert_eq!(got, [(1, "0".into()), (2, "2".into())]);
        assert_eq!(q.depth(), 1, "a's second waits for its consumer");
    }

    #[test]
    fn a_last_value_replaces_the_waiting_message_with_the_same_key() {
        let mut q = with(|s| s.last_value_key = "ticker".into());
        let mut out = Vec::new();
        for (i, ticker) in [(0, "ACME"), (1, "INIT"), (2, "ACME"), (3, "ACME")] {
            q.enqueue(tagged(i, "ticker", ticker), None, &mut out)
                .unwrap();
        }
        q.enqueue(block(4), None, &mut out).unwrap();
        let replaced: Vec<String> = q
            .take_replaced()
            .iter()
            .map(|m| {
                Message::decode(&m.block, 0)
                    .unwrap()
                    .body_text()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(replaced, ["0", "2"]);
        q.add_consumer(sub(1), None, (1, 0, false), &mut out);
        assert_eq!(out.iter().map(text).collect::<Vec<_>>(), ["1"]);
        // One in flight is not replaced; the next value waits behind it.
        q.enqueue(tagged(5, "ticker", "INIT"), None, &mut out)
            .unwrap();
        assert!(q.take_replaced().is_empty());
        assert_eq!(q.depth(), 3, "3, 4 (no key) and 5");
    }

    #[test]
    fn a_last_value_waiting_out_its_redelivery_delay_is_replaced_too() {
        let mut q = with(|s| {
            s.last_value_key = "ticker".into();
            (s.redelivery_delay, s.max_redelivery_delay) = (60_000, 60_000);
        });
        let mut out = Vec::new();
        q.add_consumer(sub(1), None, (1, 0, false), &mut out);
        q.enqueue(tagged(0, "ticker", "ACME"), None, &mut out)
            .unwrap();
        let seq = out.pop().unwrap().seq;
        q.nack(&sub(1), seq, &mut out).unwrap();
        assert_eq!((q.scheduled(), out.len()), (1, 0), "waits its delay");
        q.enqueue(tagged(1, "ticker", "ACME"), None, &mut out)
            .unwrap();
        assert_eq!(q.take_replaced().len(), 1);
        assert_eq!(out.iter().map(text).collect::<Vec<_>>(), ["1"]);
        assert_eq!((q.scheduled(), q.depth()), (0, 0));
    }
}
