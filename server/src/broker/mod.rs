//! Routing: who gets which message. No sockets here.
//!
//! A subscriber is addressed by a [`ConnectionRef`] (which the network layer
//! interprets) and the client's subscription id. Topic subscriptions sit in
//! the [`TopicTree`]; a plain one is delivered to directly, while one whose
//! deliveries are acknowledged (and every durable one) is backed by a
//! private [`Queue`] that the topic feeds. Queues are created on first use.
//!
//! A transaction's commit runs between [`Broker::begin_atomic`] and
//! [`Broker::end_atomic`]: what it
//! journals becomes one atomic store record, and the messages it puts in
//! queues become visible only once that record is appended, so no ACK of
//! one of them can reach the store ahead of it.
//!
//! Locks, always taken in this order and never held across I/O: the
//! `queues` or `durables` registry, then `topics`, then one queue. No two
//! queues are ever locked at once (dead letters move after the source queue
//! is unlocked).

mod address;
mod backlog;
mod declared_topics;
pub mod delivery;
mod divert;
mod durables;
mod instances;
mod manage;
pub mod memory;
pub mod messages;
mod peers;
mod pending;
pub mod queue;
mod queued;
mod reader;
mod ready;
mod refile;
mod registry;
mod request;
mod retained;
mod routing;
mod stats;
mod subscriptions;
mod timers;
mod topic_tree;
mod transaction;

pub use address::{ConnectionRef, Subscriber};
pub use backlog::Backlog;
pub use declared_topics::{DeclaredTopics, Undeclared};
pub use instances::{
    InstanceView, Refused as SampleRefused, State as InstanceState, INSTANCE_PROPERTY,
};
pub use peers::{BrowseDone, PeerError, Peers};
pub use pending::{Atomic, SharedChanges};
pub use queue::{AckRef, Held, Limit, Queue, QueueFull, SharedQueue};
pub use registry::{durable_field, has_own_slot, is_durable_stream, DurableRecord};
pub use request::{
    QueueError, RepublishError, Room, RouteError, Routed, SubscribeError, SubscribeRequest,
    SubscriptionHandle, TopicError, Written,
};
pub use stats::{BrokerCounters, LiveSubscription, QueueStats, SubscriptionView};
pub use topic_tree::{MatchCache, Target, TopicEntry, TopicTree};

use crate::collections::FastMap;
use crate::sync::{lock, read, write};
use std::cell::OnceCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock};

use bytes::Bytes;
use herald_protocol::destination::{
    temporary_owner, temporary_prefix, PatternWord, TEMPORARY_PREFIX,
};
use herald_protocol::message::{
    priority_and_expiration, restamp, BodyRef, MessageRef, DEFAULT_PRIORITY,
};
use herald_protocol::selector::{IndexKey, Selector, SelectorLimits};
use herald_protocol::{DeliveryMode, DestinationKind, MessageView, Pattern};

use crate::addresses::{AddressBook, AddressSettings};
use crate::config::{Config, FullPolicy};
use crate::diverts::Diverts;
use crate::store::large::{keep, LargeStore};
use crate::store::page::PagingRoot;
use crate::store::{Completion, Holder, Record, Recovered, Store};
use delivery::Deliveries;
use pending::Pending;
pub use queue::EntryId;
use queue::{Dispatch, QueuedMessage};
use registry::{Durable, Kept};
use retained::Retained;
use timers::{Timed, Timers};

/// Whether the topic subscription `entry` takes a message: a temporary
/// topic's (of connection `owner`) reach its owner only, and a selector
/// must select it. `fields` holds the message parsed, once, when a
/// selector first needs it.
fn takes<'a>(
    entry: &TopicEntry,
    (owner, from): (Option<u64>, Option<u64>),
    block: &'a Bytes,
    fields: &OnceCell<Option<MessageRef<'a>>>,
) -> bool {
    if owner.is_some() && entry.owner != owner {
        return false;
    }
    if entry.no_local && from.is_some() && entry.owner == from {
        return false;
    }
    match &entry.selector {
        Some(selector) => fields
            .get_or_init(|| MessageRef::read(block).ok())
            .as_ref()
            .is_some_and(|r| selector.matches(r)),
        None => true,
    }
}

/// The index key of property `name` of the message in `block` (see
/// `TopicTree::for_each_match`), from the message parsed at most once.
fn key_of<'a>(
    block: &'a Bytes,
    fields: &OnceCell<Option<MessageRef<'a>>>,
    name: &str,
) -> Option<IndexKey> {
    fields
        .get_or_init(|| MessageRef::read(block).ok())
        .as_ref()
        .and_then(|m| IndexKey::of_property(m, name))
}

/// The routing state of one server.
pub struct Broker {
    topics: RwLock<TopicTree>,
    /// Strict mode's declared tree; `None` when publishing is open.
    declared: Option<RwLock<DeclaredTopics>>,
    /// Live subscriptions by (connection, subscription id), for the
    /// management interface.
    live: Mutex<HashMap<(u64, u32), LiveSubscription>>,
    /// Redeliveries, dead letters, expiries.
    counters: BrokerCounters,
    /// Named queues. Read-mostly: every SEND to a queue looks its queue
    /// up here, and only a new queue takes the write lock.
    queues: RwLock<FastMap<String, SharedQueue>>,
    /// Durable subscriptions by (client id, name).
    durables: Mutex<HashMap<(String, String), Durable>>,
    /// Queues created through the management interface, with the record
    /// that keeps each across restarts (empty or not) until it is deleted.
    created: Mutex<HashMap<String, u64>>,
    next_key: AtomicU64,
    /// Settings per address; replaced whole on reload.
    addresses: RwLock<Arc<AddressBook>>,
    /// Where queues page, once the server says (see [`Broker::set_paging`]).
    paging: OnceLock<PagingRoot>,
    /// Where large messages' bodies are kept, once the server says (see
    /// [`Broker::set_large`]).
    large: OnceLock<Arc<LargeStore>>,
    /// The least `large_message_threshold` of any address: a publish of a
    /// block no larger reads only this.
    large_floor: AtomicUsize,
    /// Copies the broker files itself; replaced whole on reload.
    diverts: RwLock<Arc<Diverts>>,
    /// Whether there are any diverts: a publish without reads only this.
    diverting: AtomicBool,
    default_prefetch: u32,
    /// What a client's selector may cost.
    selector_limits: SelectorLimits,
    /// What the queues weigh, against `queues.max_memory_bytes`.
    memory: memory::Memory,
    /// A key of this server run's own: connection ids, and with them the
    /// names of temporary destinations, carry a keyed hash of the
    /// connection's number that no one else can guess.
    connection_key: std::collections::hash_map::RandomState,
    /// Where persistent messages and durable subscriptions are kept.
    store: Arc<dyn Store>,
    /// Deliveries waiting for their delivery time, soonest first.
    timers: Timers,
    /// Topics that keep their last messages for late subscribers; used
    /// only while `topics` is locked.
    retained: Retained,
    /// Keyed topics' instances and what they keep.
    instances: instances::Instances,
    /// The other nodes, in cluster mode.
    peers: OnceLock<Arc<dyn Peers>>,
    /// Where work done off the workers (a journal confirmation) routes
    /// its deliveries; see [`Broker::set_sink`].
    sink: OnceLock<Arc<dyn Sink>>,
}

/// Runs broker work off the workers and hands the deliveries it routes to
/// the workers (the network layer implements it; the broker never names a
/// worker). A persistent message enters its queue this way once the
/// journal has it.
pub trait Sink: Send + Sync {
    /// Runs `work` with the broker and somewhere to route deliveries, and
    /// hands those out; on worker `on` if given (after what that worker
    /// was sent before), else on any.
    fn run(&self, on: Option<usize>, work: SinkWork);
}

thread_local! {
    /// The index of the worker this thread is, if it is one.
    static WORKER: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// Marks this thread as worker `index`: work it hands to the [`Sink`] (a
/// persistent message to insert once on disk) goes back to it, ahead of
/// the RECEIPT it is then sent, so that a client that has its receipt
/// finds the message in its queue. A thread that is no worker (the
/// management interface's) may name one, to have its work done in the
/// order it asked (see [`Broker::after_inserts`]).
pub fn set_worker_thread(index: usize) {
    WORKER.set(Some(index));
}

/// Work a [`Sink`] runs.
pub type SinkWork = Box<dyn FnOnce(&Broker, &mut Deliveries) + Send>;

/// Whether topics under a pattern can be heard beyond this node: a
/// temporary topic's subscribers are all on its owner's node.
fn shared_with_peers(pattern: &Pattern) -> bool {
    let temp = TEMPORARY_PREFIX.trim_end_matches('.');
    !matches!(pattern.words().first(), Some(PatternWord::Literal(w)) if w.as_str() == temp)
}

/// Whether a subscription needs the topic messages other nodes publish:
/// not a temporary topic's (all on its owner's node), nor a cluster
/// durable subscription's (the publishing node appends to its stream).
fn heard_from_peers(entry: &TopicEntry, pattern: &Pattern) -> bool {
    !matches!(entry.target, Target::Stream(_)) && shared_with_peers(pattern)
}

/// `block` as its address's defaults make it: the default priority for a
/// message sent with the default one, the default time to live for one
/// sent without; `None` if they change nothing (most addresses have
/// neither, and pay no parse).
fn defaults_applied(settings: &AddressSettings, block: &Bytes) -> Option<Bytes> {
    if settings.default_priority.is_none() && settings.default_ttl == 0 {
        return None;
    }
    let (priority, expiration) = priority_and_expiration(block)?;
    let priority = settings
        .default_priority
        .filter(|_| priority == DEFAULT_PRIORITY);
    let expiration = (settings.default_ttl > 0 && expiration == 0)
        .then(|| queue::now_ms().saturating_add(settings.default_ttl as i64));
    (priority.is_some() || expiration.is_some()).then(|| restamp(block, priority, expiration))
}

/// Wakes the senders blocked on `q` if it now has room.
fn wake_blocked(q: &mut Queue, out: &mut Deliveries) {
    for conn in q.take_waiters_if_room() {
        out.wake(conn);
    }
}

/// Turns a queue's dispatches into deliveries that carry their ack ref.
fn deliver_from(queue: &SharedQueue, dispatches: Vec<Dispatch>, out: &mut Deliveries) {
    for d in dispatches {
        let ack = AckRef {
            queue: queue.clone(),
            seq: d.seq,
        };
        out.push_acked(d, ack);
    }
}

impl Broker {
    /// A broker for this configuration, keeping what must last in `store`.
    pub fn new(config: &Config, store: Arc<dyn Store>) -> Broker {
        let declared = config
            .topics
            .strict
            .then(|| DeclaredTopics::new(config.topics.declared.iter().map(String::as_str)))
            .map(RwLock::new);
        let instances = instances::Instances::default();
        instances.set_book(&config.addresses());
        Broker {
            topics: RwLock::new(TopicTree::default()),
            declared,
            live: Mutex::new(HashMap::new()),
            counters: BrokerCounters::default(),
            queues: RwLock::default(),
            durables: Mutex::new(HashMap::new()),
            created: Mutex::new(HashMap::new()),
            next_key: AtomicU64::new(1),
            addresses: RwLock::new(Arc::new(config.addresses())),
            paging: OnceLock::new(),
            large: OnceLock::new(),
            large_floor: AtomicUsize::new(config.addresses().least_large_threshold()),
            diverting: AtomicBool::new(!config.diverts.is_empty()),
            diverts: RwLock::new(Arc::new(config.diverts())),
            default_prefetch: config.queues.default_prefetch,
            selector_limits: config.selectors.limits(),
            memory: memory::Memory::new(config.queues.max_memory_bytes),
            connection_key: std::collections::hash_map::RandomState::new(),
            store,
            timers: Timers::default(),
            retained: Retained::new(&config.topics.retain),
            instances,
            peers: OnceLock::new(),
            sink: OnceLock::new(),
        }
    }

    /// Lets queues page to files under `root` (before [`Broker::restore`],
    /// so that a queue restored over its bound pages too). Without it
    /// (a broker without a server), `full_policy = "page"` blocks.
    pub fn set_paging(&self, root: PagingRoot) {
        let _ = self.paging.set(root);
    }

    /// Keeps large messages' bodies in `store` (before [`Broker::restore`],
    /// which holds the bodies its messages name). Without it (a broker
    /// without a server), large messages are refused.
    pub fn set_large(&self, store: Arc<LargeStore>) {
        let _ = self.large.set(store);
    }

    /// Where large messages' bodies are kept.
    pub fn large(&self) -> Option<&Arc<LargeStore>> {
        self.large.get()
    }

    /// Where a body of `len` bytes would be kept, if it may be past some
    /// address's `large_message_threshold`: not on a server without a
    /// large-message store or in a cluster, whose nodes carry bodies whole.
    pub fn large_past(&self, len: usize) -> Option<&Arc<LargeStore>> {
        (len > self.large_from()).then(|| self.large()).flatten()
    }

    /// The body size past which some address keeps a body in a file:
    /// `usize::MAX` where none can (see [`Broker::large_past`]).
    pub fn large_from(&self) -> usize {
        match self.peers.get().is_none() && self.large().is_some() {
            true => self.large_floor.load(Ordering::Relaxed),
            false => usize::MAX,
        }
    }

    /// `message` with its body moved to a file of its own, if the body is
    /// bytes larger than its destination's `large_message_threshold`
    /// (however it was sent, it is then held as a large message is);
    /// `None` if it stays as it is (see [`Broker::large_past`]).
    pub fn spilled(&self, message: &MessageView) -> Option<std::io::Result<MessageView>> {
        let block = message.block();
        let large = self.large_past(block.len())?;
        let body = match MessageRef::read(block).ok()?.body {
            BodyRef::Bytes(range) => range,
            _ => return None,
        };
        let threshold = self
            .settings(message.destination_kind, message.destination())
            .large_message_threshold;
        if body.len() <= threshold {
            return None;
        }
        let spilled = large.spill(block, body).and_then(|block| {
            MessageView::parse(block)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))
        });
        Some(spilled)
    }

    /// The settings in force for destination `name` of `kind` (for a
    /// topic subscription's queue, its pattern).
    pub fn settings(&self, kind: DestinationKind, name: &str) -> Arc<AddressSettings> {
        Arc::new(read(&self.addresses).resolve(kind, name))
    }

    /// The settings per address now in force.
    pub fn address_book(&self) -> Arc<AddressBook> {
        read(&self.addresses).clone()
    }

    /// Puts new settings per address in force (a reload): every queue
    /// takes those of its address.
    pub fn set_address_book(&self, book: AddressBook) {
        let book = Arc::new(book);
        self.large_floor
            .store(book.least_large_threshold(), Ordering::Relaxed);
        *write(&self.addresses) = book.clone();
        self.instances.set_book(&book);
        for queue in self.memory.queues() {
            let mut q = lock(&queue);
            let to = &q.settings().destination;
            let settings = Arc::new(book.resolve(to.kind, &to.name));
            q.set_settings(settings);
        }
    }

    /// Takes the way to run work off the workers. Until it is set (a
    /// broker without a server, in tests), persistent messages enter their
    /// queues before the journal confirms them.
    pub fn set_sink(&self, sink: Arc<dyn Sink>) {
        let _ = self.sink.set(sink);
    }

    /// A completion for a journal append that puts `inserts` in their
    /// queues once the record is on disk, and drops them if it could not
    /// be written: a persistent message whose sender is told it failed is
    /// never delivered. `None` without a sink.
    fn insert_when_durable(
        &self,
        inserts: Vec<(SharedQueue, Bytes, Option<u64>)>,
        written: &mut Written,
    ) -> Result<Completion, Vec<(SharedQueue, Bytes, Option<u64>)>> {
        let Some(sink) = self.sink.get().cloned() else {
            return Err(inserts);
        };
        let slot = written.slot();
        let here = WORKER.get();
        Ok(Box::new(move |result| match result {
            Ok(()) => sink.run(
                here,
                Box::new(move |broker, out| {
                    for (queue, block, journal_id) in inserts {
                        broker.insert(&queue, block, journal_id, out);
                    }
                }),
            ),
            Err(why) => {
                log::warn!(
                    "{} message(s) not routed: the journal could not keep them ({why})",
                    inserts.len()
                );
                lock(&slot).get_or_insert(why);
            }
        }))
    }

    /// Whether a client may consume from queue `name`: it exists (here,
    /// or in a cluster as a shared queue), or its address creates queues
    /// on first use.
    pub(super) fn may_open(&self, name: &str) -> bool {
        self.find_queue(name).is_some()
            || self.sharing(name).is_some()
            || self.settings(DestinationKind::Queue, name).auto_create
    }

    fn queue(&self, name: &str) -> SharedQueue {
        if let Some(q) = self.find_queue(name) {
            return q;
        }
        write(&self.queues)
            .entry(name.to_owned())
            .or_insert_with(|| {
                let holder = Holder::Queue(name.to_owned());
                let settings = self.settings(DestinationKind::Queue, name);
                self.shared_queue(Queue::new(name, Some(holder), settings))
            })
            .clone()
    }

    /// Rebuilds durable subscriptions and queues from what the store kept,
    /// before any client connects. `delivered`, after a clean stop, says
    /// how often each kept message had been delivered (one not in it had
    /// not been); without it, every kept message may have been.
    pub fn restore(&self, recovered: Recovered, delivered: Option<HashMap<u64, u32>>) {
        let (mut messages, mut durables, mut retained, mut queues) = (0, 0, 0, 0);
        for record in recovered.records {
            let Some(record) = self.with_body(record) else {
                continue;
            };
            match record {
                Record::Queue { id, name } => {
                    self.queue(&name);
                    lock(&self.created).insert(name, id);
                    queues += 1;
                }
                Record::Durable {
                    id,
                    client_id,
                    name,
                    pattern,
                    selector,
                    owner,
                } => match self.parse_subscription(&pattern, &selector) {
                    Ok((pattern, sel)) => {
                        let key = (client_id.clone(), name.clone());
                        let d = self.new_durable(
                            (&client_id, &name),
                            owner,
                            pattern,
                            (selector, sel),
                            Kept::Journal(id),
                        );
                        lock(&self.durables).insert(key, d);
                        durables += 1;
                    }
                    Err(e) => {
                        log::warn!("kept durable subscription {client_id}/{name} no longer parses ({e}): dropped");
                        self.journal(Record::End { id }, None);
                    }
                },
                Record::Enqueue {
                    id,
                    holder: Holder::Retained(topic),
                    block,
                } => {
                    // A keyed topic's sample, or a retained message.
                    let resolve = || {
                        self.settings(DestinationKind::Topic, &topic)
                            .instances
                            .clone()
                    };
                    let ended = match self.instances.restore(&topic, &block, id, resolve) {
                        Some(ended) => ended,
                        None => self
                            .retained
                            .restore(&topic, block, id)
                            .into_iter()
                            .collect(),
                    };
                    for old in ended {
                        self.journal(Record::End { id: old }, None);
                    }
                    retained += 1;
                }
                Record::Enqueue { id, holder, block } => {
                    let queue = match &holder {
                        Holder::Queue(name) => Some(self.queue(name)),
                        Holder::Durable(client, name) => lock(&self.durables)
                            .get(&(client.clone(), name.clone()))
                            .map(|d| d.queue.clone()),
                        Holder::Retained(_) => None,
                    };
                    match queue {
                        Some(q) => {
                            let count =
                                delivered.as_ref().map(|d| d.get(&id).copied().unwrap_or(0));
                            let mut kept = lock(&q);
                            if let Some(due) = kept.restore(block, Some(id), count) {
                                self.timers.schedule(due, Timed::Queue(q.clone()));
                            }
                            // Replaced by a later last value (a crash came
                            // before its record ended).
                            self.end_replaced(&mut kept, None);
                            messages += 1;
                        }
                        None => {
                            log::warn!("kept message {id} belongs to {holder:?}, which no longer exists: dropped");
                            self.journal(Record::End { id }, None);
                        }
                    }
                }
                // Replay hands over single live records only.
                Record::End { .. } | Record::Batch(_) => {}
            }
        }
        if messages + durables + retained + queues > 0 {
            log::info!(
                "restored {messages} persistent messages, {durables} durable subscriptions, {retained} retained messages and {queues} created queues"
            );
        }
    }

    /// A kept message's record with its block holding the large body it
    /// names, if it names one; `None` (its record ended) if that body is
    /// not there as it was written.
    fn with_body(&self, record: Record) -> Option<Record> {
        let Some(large) = self.large() else {
            return Some(record);
        };
        match record {
            Record::Enqueue { id, holder, block } => match large.hold(block) {
                Ok(block) => Some(Record::Enqueue { id, holder, block }),
                Err(e) => {
                    log::error!("kept message {id}'s large body cannot be read ({e}): dropped");
                    self.journal(Record::End { id }, None);
                    None
                }
            },
            other => Some(other),
        }
    }

    /// Each kept message of every queue and durable subscription that may
    /// have been delivered, by its record id, with how many times: what a
    /// clean stop notes down (`store::shutdown`).
    pub fn kept_deliveries(&self) -> Vec<(u64, u32)> {
        let durables: Vec<SharedQueue> = lock(&self.durables)
            .values()
            .map(|d| d.queue.clone())
            .collect();
        let queues: Vec<SharedQueue> = read(&self.queues).values().cloned().collect();
        let mut all = Vec::new();
        for q in queues.iter().chain(&durables) {
            all.extend(lock(q).kept_deliveries());
        }
        all
    }

    /// Appends a record to the store, or to the `commit` in progress.
    fn journal(&self, record: Record, commit: Option<&mut Pending>) {
        match commit {
            Some(pending) => pending.records.push(record),
            None => self.store.append(record, None),
        }
    }

    /// An acknowledged message leaves `queue`. Its `End` rides the next
    /// sync; if it cannot be written, the journal still holds the message,
    /// so it goes back into the queue to be delivered again (rather than
    /// vanish from memory and return at the next start), and `written`
    /// learns why (an ACK's RECEIPT becomes an ERROR). A stopped journal
    /// writes nothing until the restart that brings it back anyway: it is
    /// not put back then, lest it go round and round.
    /// Inside a `commit`, its `End` goes with the commit's record.
    fn acked(
        &self,
        (queue, name): (&SharedQueue, &str),
        m: QueuedMessage,
        written: &mut Written,
        commit: Option<&mut Pending>,
    ) {
        let in_commit = commit.is_some();
        let (Some(id), Some(sink), false) = (m.journal_id, self.sink.get(), in_commit) else {
            return self.ended(name, &m, commit);
        };
        let (sink, slot, queue) = (sink.clone(), written.slot(), queue.clone());
        let put_back: Completion = Box::new(move |result| {
            if let Err(why) = result {
                lock(&slot).get_or_insert(why.clone());
                sink.run(None, Box::new(move |broker, out| {
                    if broker.store.stopped() {
                        return;
                    }
                    log::warn!("an acknowledgement could not be written ({why}): the message is delivered again");
                    let mut dispatches = Vec::new();
                    if let Some(due) = lock(&queue).put_back(m, &mut dispatches) {
                        broker.timers.schedule(due, Timed::Queue(queue.clone()));
                    }
                    broker.settled(&queue, dispatches, out);
                }));
            }
        });
        self.store.append_lazily(Record::End { id }, put_back);
    }

    /// A message leaves `queue` for good: its store record ends, or its
    /// entry in the queue's Redis stream is settled (with the `commit`, if
    /// one is in progress).
    /// Ends the messages of a last-value queue that newer ones with the
    /// same value replaced (arriving, restored, or as paged ones are read
    /// back).
    fn end_replaced(&self, q: &mut Queue, mut commit: Option<&mut Pending>) {
        for m in q.take_replaced() {
            self.ended(q.name(), &m, commit.as_deref_mut());
        }
    }

    fn ended(&self, queue: &str, m: &QueuedMessage, mut commit: Option<&mut Pending>) {
        if let Some(id) = m.journal_id {
            self.journal(Record::End { id }, commit.as_deref_mut());
        }
        let (Some(entry), Some(peers)) = (m.entry, self.peers.get()) else {
            return;
        };
        match commit {
            Some(pending) => pending.shared.settled.push((queue.to_owned(), entry)),
            None => peers.settle(queue, entry),
        }
    }

    /// Runs `done` after the inserts this thread's work asked of its worker
    /// so far (persistent messages that reached the journal): once it runs,
    /// they are in their queues. `done` runs at once off a worker, or
    /// where there is no sink.
    pub fn after_inserts(&self, done: Box<dyn FnOnce() + Send>) {
        match (self.sink.get(), WORKER.get()) {
            (Some(sink), Some(here)) => sink.run(Some(here), Box::new(move |_, _| done())),
            _ => done(),
        }
    }

    /// Runs `done` once everything routed so far is as safe as it gets:
    /// in the journal, and in a cluster accepted by Redis (with an error
    /// if something `from` sent was not).
    pub fn barrier(&self, from: Option<ConnectionRef>, done: Completion) {
        match self.peers.get().cloned() {
            None => self.store.barrier(done),
            Some(peers) => {
                // Counted now: the journal answers later, by when `from`
                // may have sent more, which a later barrier answers for.
                let covers = peers.written();
                self.store.barrier(Box::new(move |stored| match stored {
                    Ok(()) => peers.barrier(from, covers, done),
                    Err(e) => done(Err(e)),
                }))
            }
        }
    }

    /// Connection `serial` closed (its receipts have nobody to go to).
    pub fn connection_closed(&self, serial: u64) {
        if let Some(peers) = self.peers.get() {
            peers.closed(serial);
        }
    }

    /// The other nodes, if `queue` is shared with them: every named queue
    /// in a cluster but the temporary ones, whose consumer is here.
    pub fn sharing(&self, queue: &str) -> Option<&Arc<dyn Peers>> {
        self.peers
            .get()
            .filter(|_| temporary_owner(queue).is_none())
    }

    /// Whether a message may be published on `topic` (strict mode).
    pub fn check_topic(&self, topic: &str) -> Result<(), RouteError> {
        match &self.declared {
            Some(declared) => read(declared).check(topic).map_err(RouteError::Undeclared),
            None => Ok(()),
        }
    }

    /// Whether `queue` has room for `n` more messages now.
    pub fn has_room(&self, queue: &str, n: usize) -> Result<(), RouteError> {
        if self.sharing(queue).is_some() {
            // Held in Redis, which refuses what its memory cannot take.
            return Ok(());
        }
        let full = match self.find_queue(queue) {
            Some(q) => {
                let q = lock(&q);
                match q.check_room_for(n) {
                    // Its page files take what memory does not.
                    Err(full) if full.policy == FullPolicy::Page && q.can_page() => Ok(()),
                    other => other,
                }
            }
            // Created on first use, empty.
            None => Queue::new(queue, None, self.settings(DestinationKind::Queue, queue))
                .check_room_for(n),
        };
        full.map_err(|full| RouteError::QueueFull {
            queue: queue.to_owned(),
            full,
        })
    }

    /// Puts a message into a queue, writing it to the store first if it is
    /// persistent and the queue keeps persistent messages. Returns whether
    /// it was written. The store record is appended under the queue lock,
    /// so it precedes any acknowledgement of the message.
    /// `room` says what happens if the queue is full. Inside
    /// a commit (see [`Broker::begin_atomic`]) the message enters the queue
    /// at its end.
    fn enqueue(
        &self,
        queue: &SharedQueue,
        block: &Bytes,
        (mode, room): (DeliveryMode, Room),
        written: &mut Written,
        out: &mut Deliveries,
    ) -> Result<bool, QueueFull> {
        let mut q = lock(queue);
        let room_for = match room {
            Room::Overfill => Ok(()),
            // Moved by the server, not sent: memory bounds do not refuse it.
            Room::Move => q.check_room(),
            Room::Refuse | Room::Wait(_) => q.check_publish(),
        };
        let room_for = match room_for {
            // A queue that pages takes it: its page files hold what
            // memory does not.
            Err(full) if full.policy == FullPolicy::Page && q.can_page() => Ok(()),
            other => other,
        };
        if let Err(full) = room_for {
            match (full.policy, room) {
                (FullPolicy::Drop, Room::Refuse | Room::Wait(_)) => {
                    q.count_dropped();
                    return Ok(false);
                }
                // Registered under the same lock as the check, so room
                // freed a moment later cannot go unnoticed.
                (FullPolicy::Block | FullPolicy::Page, Room::Wait(conn)) => q.add_waiter(conn),
                _ => {}
            }
            return Err(full);
        }
        let stamped = defaults_applied(q.settings(), block).map(|b| keep(self.large(), b));
        let block = stamped.as_ref().unwrap_or(block);
        let in_commit = out.commit.is_some();
        let journal_id = match (mode, q.holder()) {
            (DeliveryMode::Persistent, Some(holder)) => {
                let id = self.store.next_id();
                let record = Record::Enqueue {
                    id,
                    holder: holder.clone(),
                    block: block.clone(),
                };
                if in_commit {
                    self.journal(record, out.commit.as_mut());
                } else {
                    // The message enters the queue once it is on disk.
                    let insert = vec![(queue.clone(), block.clone(), Some(id))];
                    match self.insert_when_durable(insert, written) {
                        Ok(done) => {
                            self.store.append(record, Some(done));
                            return Ok(true);
                        }
                        Err(_) => self.store.append(record, None),
                    }
                }
                Some(id)
            }
            _ => None,
        };
        if let Some(pending) = out.commit.as_mut() {
            pending
                .inserts
                .push((queue.clone(), block.clone(), journal_id));
            return Ok(journal_id.is_some());
        }
        // Under the same lock as the room check: one lock per message.
        self.insert_locked(queue, q, block.clone(), journal_id, out);
        Ok(journal_id.is_some())
    }

    /// When `q` wants to be woken for a message given back to wait out
    /// its redelivery delay, if it does; the kept ones among those are
    /// filed again with their time first (the old record ended in the
    /// same entry), so that the delay holds across a restart.
    fn wake_of(&self, q: &mut Queue) -> Option<i64> {
        if let Some(holder) = q.holder().filter(|_| q.has_redated()).cloned() {
            q.refile_redated(|old, block| {
                let id = self.store.next_id();
                let enqueue = Record::Enqueue {
                    id,
                    holder: holder.clone(),
                    block,
                };
                self.journal(Record::Batch(vec![enqueue, Record::End { id: old }]), None);
                id
            });
        }
        q.take_wake()
    }

    /// Puts an admitted message into its queue and dispatches.
    fn insert(
        &self,
        queue: &SharedQueue,
        block: Bytes,
        journal_id: Option<u64>,
        out: &mut Deliveries,
    ) {
        self.insert_locked(queue, lock(queue), block, journal_id, out);
    }

    /// [`Broker::insert`] with the queue already locked.
    fn insert_locked(
        &self,
        queue: &SharedQueue,
        mut q: MutexGuard<'_, Queue>,
        block: Bytes,
        journal_id: Option<u64>,
        out: &mut Deliveries,
    ) {
        let mut dispatches = Vec::new();
        let due = q.push(block, journal_id, &mut dispatches);
        let expired = q.take_expired();
        // Paged messages read back with a time of their own.
        let due = match (due, self.wake_of(&mut q)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        // A last-value queue's message replaced by this one is done with.
        self.end_replaced(&mut q, out.commit.as_mut());
        drop(q);
        if let Some(due) = due {
            self.timers.schedule(due, Timed::Queue(queue.clone()));
        }
        self.settled_apart(queue, (dispatches, expired), out);
    }

    /// Runs what has come due: messages whose delivery time has arrived
    /// are dispatched, and expired ones go to the expiry queue. Called on
    /// every worker's tick.
    pub fn tick(&self, out: &mut Deliveries) {
        for conn in self.memory.sample(std::time::Instant::now()) {
            out.wake(conn);
        }
        for what in self.timers.due(queue::now_ms()) {
            match what {
                Timed::Queue(queue) => {
                    let mut dispatches = Vec::new();
                    let mut q = lock(&queue);
                    let again = q.sweep_expired();
                    q.dispatch_due(&mut dispatches);
                    drop(q);
                    if let Some(due) = again {
                        self.timers.schedule(due, Timed::Queue(queue.clone()));
                    }
                    self.settled(&queue, dispatches, out);
                }
                Timed::Direct(sub, block) => out.push(sub, block),
                Timed::Window(reader, key, sub) => {
                    if let Some(block) = reader.window_ended(&key, queue::now_ms()) {
                        out.push(sub, block);
                    }
                }
            }
        }
    }

    /// Creates a temporary queue that only connection `owner` may consume
    /// from and that is never journalled; it goes with
    /// [`Broker::delete_queue`] when its connection ends. Returns it, or
    /// the existing one if the name is taken by the same owner.
    pub fn temporary_queue(&self, name: &str, owner: u64) -> Result<SharedQueue, SubscribeError> {
        let mut queues = write(&self.queues);
        if let Some(q) = queues.get(name) {
            return match lock(q).owner() {
                Some(o) if o == owner => Ok(q.clone()),
                _ => Err(SubscribeError::NotOwner(name.to_owned())),
            };
        }
        let mut q = Queue::new(name, None, self.settings(DestinationKind::Queue, name));
        q.set_owner(owner);
        let q = self.shared_queue(q);
        queues.insert(name.to_owned(), q.clone());
        Ok(q)
    }

    /// Removes a queue and drops what it holds (a temporary queue whose
    /// connection has ended).
    pub fn delete_queue(&self, name: &str) {
        let removed = write(&self.queues).remove(name);
        if let Some(q) = removed {
            for m in lock(&q).drain() {
                self.ended(name, &m, None);
            }
        }
    }

    /// The queue called `name`, if it exists.
    pub fn find_queue(&self, name: &str) -> Option<SharedQueue> {
        read(&self.queues).get(name).cloned()
    }

    fn read_topics(&self) -> std::sync::RwLockReadGuard<'_, TopicTree> {
        read(&self.topics)
    }

    fn write_topics(&self) -> std::sync::RwLockWriteGuard<'_, TopicTree> {
        write(&self.topics)
    }

    /// Makes this broker one node of a cluster: its topic messages and
    /// subscriptions are told to `peers` from now on, the subscriptions it
    /// has already (durable ones restored from the journal) at once.
    pub fn join_cluster(&self, peers: Arc<dyn Peers>) {
        for d in lock(&self.durables).values() {
            peers.interest(&d.pattern, true);
        }
        let _ = self.peers.set(peers);
    }

    /// Enters a subscription in the tree, and tells the other nodes. A
    /// cluster durable subscription's publishers append to its stream
    /// themselves: no topic traffic is needed for it.
    fn enter(&self, tree: &mut TopicTree, pattern: &Pattern, entry: TopicEntry) {
        let heard = heard_from_peers(&entry, pattern);
        tree.insert(pattern, entry);
        if let Some(peers) = self.peers.get().filter(|_| heard) {
            peers.interest(pattern, true);
        }
    }

    /// Takes a subscription out of the tree, and tells the other nodes.
    fn leave(&self, tree: &mut TopicTree, pattern: &Pattern, key: u64) {
        let removed = tree.remove(pattern, key);
        let heard = removed.is_some_and(|e| heard_from_peers(&e, pattern));
        if let Some(peers) = self.peers.get().filter(|_| heard) {
            peers.interest(pattern, false);
        }
    }

    /// Shares a new queue, counting it against the memory limit.
    fn shared_queue(&self, mut queue: Queue) -> SharedQueue {
        if let Some(root) = self.paging.get() {
            // Named by number: a queue's name may hold any character.
            let n = self.next_key.fetch_add(1, Ordering::Relaxed);
            queue.set_paging(root.clone(), n.to_string());
        }
        if let Some(large) = self.large() {
            queue.set_large(large.clone());
        }
        let queue = Arc::new(Mutex::new(queue));
        self.memory.register(&queue);
        queue
    }

    /// What the queues weigh against the memory limit.
    pub fn memory(&self) -> &memory::Memory {
        &self.memory
    }

    /// Why new persistent messages are not taken now (the journal's disk
    /// is below its free-space floor), if they are not.
    pub fn refusing_persistent(&self) -> Option<String> {
        self.store.refusing()
    }

    /// A kept subscription's pattern and selector, parsed again.
    fn parse_subscription(
        &self,
        pattern: &str,
        selector: &str,
    ) -> Result<(Pattern, Option<Arc<Selector>>), SubscribeError> {
        let pattern =
            Pattern::parse(pattern).map_err(|e| SubscribeError::Destination(e.to_string()))?;
        let selector = self.parse_selector(selector)?;
        Ok((pattern, selector))
    }

    /// The id connection number `serial` is told in CONNECTED: its number
    /// and a token that cannot be guessed from it.
    pub fn connection_id(&self, serial: u64) -> String {
        use std::hash::BuildHasher;
        format!("{serial}.{:016x}", self.connection_key.hash_one(serial))
    }

    /// How the names of connection `serial`'s temporary queues and topics
    /// start: `temp.<connection id>.`. Only that connection knows it, so
    /// only those it tells (a reply-to) can send to them.
    pub fn temporary_prefix(&self, serial: u64) -> String {
        temporary_prefix(self.connection_id(serial))
    }

    /// Parses a client's selector within the configured limits; empty
    /// text is no selector.
    pub fn parse_selector(&self, text: &str) -> Result<Option<Arc<Selector>>, SubscribeError> {
        if text.is_empty() {
            return Ok(None);
        }
        Selector::parse_within(text, &self.selector_limits)
            .map(|s| Some(Arc::new(s)))
            .map_err(|e| SubscribeError::Selector(e.to_string()))
    }

    /// Where persistent state is kept.
    pub fn store(&self) -> &dyn Store {
        &*self.store
    }

    /// Number of topic subscriptions (durable ones included).
    pub fn subscription_count(&self) -> usize {
        self.read_topics().len()
    }
}

#[cfg(test)]
mod tests;
