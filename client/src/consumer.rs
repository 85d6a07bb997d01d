//! Consumers: receive through a listener callback or a blocking
//! `receive(timeout)`.
//!
//! Without a listener, messages wait in the consumer's own queue, at most
//! `pending_messages` of them and `pending_bytes` of their bodies; past
//! that new ones are dropped and counted ([`Consumer::dropped`]), so a
//! consumer nobody reads cannot grow without bound. With a listener, the connection's reader thread calls it for each
//! message in order; a listener that panics is logged and the reader goes on.

use std::collections::{HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use herald_protocol::frame::{Settle, Subscribe, Unsubscribe};
use herald_protocol::{Body, Destination, Frame, Message, Value};

use crate::connection::Inner;
use crate::error::{Error, Result};
use crate::session::SessionShared;
use crate::stream::{cut, BodyReader, Slot, Streams};
use crate::sync::{lock, read, write};

type Listener = Box<dyn FnMut(Message) + Send>;

/// A wait long enough to stand for "no timeout".
const FOREVER: Duration = Duration::from_secs(24 * 3600);

struct Queue {
    messages: VecDeque<Message>,
    /// What the messages weigh against `pending_bytes` ([`weight`]).
    bytes: usize,
    closed: bool,
}

impl Queue {
    fn pop_front(&mut self) -> Option<Message> {
        let m = self.messages.pop_front()?;
        self.bytes -= weight(&m);
        Some(m)
    }

    fn take_all(&mut self) -> VecDeque<Message> {
        self.bytes = 0;
        std::mem::take(&mut self.messages)
    }
}

/// What a waiting message counts against `pending_bytes`: its body's
/// bytes (a map's names and string values, and eight for any other value).
fn weight(m: &Message) -> usize {
    let value = |v: &Value| match v {
        Value::String(s) => s.len(),
        _ => 8,
    };
    match &m.body {
        Body::Empty => 0,
        Body::Bytes(b) => b.len(),
        Body::Text(t) => t.len(),
        Body::Map(entries) => entries.iter().map(|(k, v)| k.len() + value(v)).sum(),
        // It arrives after, chunk by chunk, for the application to read.
        Body::Stream(_) => 0,
    }
}

fn is_streamed(m: &Message) -> bool {
    matches!(m.body, Body::Stream(_))
}

/// The part of a consumer the reader thread delivers to.
pub(crate) struct ConsumerShared {
    /// Held while a message is delivered or queued, so that installing a
    /// listener (which first drains the queue) cannot reorder messages.
    listener: Mutex<Option<Listener>>,
    queue: Mutex<Queue>,
    ready: Condvar,
    /// `pending_messages` and `pending_bytes`.
    limit: (usize, usize),
    dropped: AtomicU64,
    /// The session, for consumers whose deliveries the server tracks.
    session: Option<Arc<SessionShared>>,
    /// Set by `Session::recover` until the server confirms: messages that
    /// arrive meanwhile were sent before the recovery and come again.
    discarding: AtomicBool,
    /// The SUBSCRIBE that made it, sent again after a failover; `None`
    /// for a browser's snapshot.
    subscribe: Option<Subscribe>,
    /// The deadline asked for, and when a message last came (or the
    /// deadline was last reported missed).
    deadline: Option<(Duration, Mutex<Instant>)>,
}

/// A connection's consumers by subscription id, which the reader thread
/// delivers to. Ids are never used twice on a connection, so the only
/// change that can make a consumer the reader looked up stale is a
/// removal, which is counted.
#[derive(Default)]
pub(crate) struct Consumers {
    map: RwLock<HashMap<u32, Arc<ConsumerShared>>>,
    removals: AtomicU64,
}

impl Consumers {
    pub(crate) fn insert(&self, id: u32, consumer: Arc<ConsumerShared>) {
        write(&self.map).insert(id, consumer);
    }

    pub(crate) fn remove(&self, id: u32) -> Option<Arc<ConsumerShared>> {
        let removed = write(&self.map).remove(&id);
        self.removals.fetch_add(1, Ordering::Release);
        removed
    }

    /// Every consumer, by id.
    pub(crate) fn all(&self) -> RwLockReadGuard<'_, HashMap<u32, Arc<ConsumerShared>>> {
        read(&self.map)
    }
}

/// The consumer the reader thread delivered to last: a stream of
/// messages for one consumer looks it up once instead of taking the
/// map's lock and a reference for each (4 % of a subscriber's CPU).
#[derive(Default)]
pub(crate) struct LastConsumer {
    /// [`Consumers::removals`] when it was looked up.
    removals: u64,
    last: Option<(u32, Arc<ConsumerShared>)>,
}

impl LastConsumer {
    /// The consumer `id` names, if it is still registered.
    pub(crate) fn get(&mut self, consumers: &Consumers, id: u32) -> Option<&ConsumerShared> {
        // Read before the map: a removal after this counts again.
        let removals = consumers.removals.load(Ordering::Acquire);
        let current = removals == self.removals && matches!(&self.last, Some((at, _)) if *at == id);
        if !current {
            self.removals = removals;
            self.last = consumers.all().get(&id).map(|c| (id, c.clone()));
        }
        self.last.as_ref().map(|(_, c)| &**c)
    }
}

/// Runs the listener; false if it panicked.
#[inline(always)]
fn call(listener: &mut Listener, message: Message) -> bool {
    let ok = catch_unwind(AssertUnwindSafe(|| listener(message))).is_ok();
    if !ok {
        log::error!("a message listener panicked; delivery goes on");
    }
    ok
}

impl ConsumerShared {
    pub(crate) fn new(
        limit: (usize, usize),
        session: Option<Arc<SessionShared>>,
        subscribe: Option<Subscribe>,
        deadline: Option<Duration>,
    ) -> ConsumerShared {
        ConsumerShared {
            listener: Mutex::new(None),
            queue: Mutex::new(Queue {
                messages: VecDeque::new(),
                bytes: 0,
                closed: false,
            }),
            ready: Condvar::new(),
            limit,
            dropped: AtomicU64::new(0),
            session,
            discarding: AtomicBool::new(false),
            subscribe,
            deadline: deadline.map(|d| (d, Mutex::new(Instant::now()))),
        }
    }

    /// If its deadline passed with no message since, the period (and the
    /// clock starts again).
    pub(crate) fn deadline_missed(&self, now: Instant) -> Option<Duration> {
        let (period, last) = self.deadline.as_ref()?;
        let mut last = lock(last);
        if now.duration_since(*last) < *period {
            return None;
        }
        *last = now;
        Some(*period)
    }

    /// The SUBSCRIBE that made it, if it is a subscription.
    pub(crate) fn subscription(&self) -> Option<Subscribe> {
        self.subscribe.clone()
    }

    fn subscription_id(&self) -> u32 {
        self.subscribe.as_ref().map_or(0, |s| s.subscription_id)
    }

    /// Whether the server tracks this consumer's deliveries.
    pub(crate) fn is_tracked(&self) -> bool {
        self.session.is_some()
    }

    /// Starts or ends dropping arrivals (around a recovery).
    pub(crate) fn set_discarding(&self, on: bool) {
        self.discarding.store(on, Ordering::Release);
    }

    /// Tells the session a message reached the application.
    fn handed_out(&self, delivery_id: u64, processed: bool) {
        if let Some(s) = &self.session {
            s.handed_out(delivery_id, processed);
        }
    }

    /// Runs the listener on a message; the session counts the message as
    /// handed out before, so that the listener can acknowledge it (or
    /// commit or recover with it).
    #[inline(always)]
    fn run_listener(&self, listener: &mut Listener, message: Message) {
        let id = message.delivery_id;
        if let Some(s) = &self.session {
            s.handing_out(id, self.subscription_id());
        }
        let processed = call(listener, message);
        self.handed_out(id, processed);
    }

    /// Whether a large message's body that comes for it now is wanted:
    /// not while it discards what comes, nor by a browser's snapshot
    /// (which shows a large message's headers and length).
    pub(crate) fn takes_bodies(&self) -> bool {
        self.subscribe.is_some() && !self.discarding.load(Ordering::Acquire)
    }

    /// Called on the reader thread for each message. Inlined with what it
    /// calls, down to the listener, so that the 296-byte message is moved
    /// one time fewer on its way (37 instructions of 2,850 a message).
    /// A large message's body that no one will read is dropped.
    #[inline(always)]
    pub(crate) fn deliver(&self, message: Message, streams: &Streams) {
        if self.discarding.load(Ordering::Acquire) {
            return;
        }
        if let Some((_, last)) = &self.deadline {
            *lock(last) = Instant::now();
        }
        let mut listener = lock(&self.listener);
        if let Some(l) = listener.as_mut() {
            let (id, streamed) = (message.delivery_id, is_streamed(&message));
            self.run_listener(l, message);
            if streamed {
                // Unless the listener took the body, to read it elsewhere.
                streams.discard(id);
            }
            return;
        }
        let mut q = lock(&self.queue);
        let weight = weight(&message);
        let (messages, bytes) = self.limit;
        let full = q.messages.len() >= messages
            || (!q.messages.is_empty() && q.bytes.saturating_add(weight) > bytes);
        if full {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            drop(q);
            if is_streamed(&message) {
                streams.discard(message.delivery_id);
            }
            // A tracked message is not lost: the server redelivers it.
            if let Some(s) = &self.session {
                s.give_back(message.delivery_id);
            }
            return;
        }
        // Higher priority first, first in first out within a priority.
        let at = q
            .messages
            .iter()
            .rposition(|m| m.priority >= message.priority)
            .map_or(0, |i| i + 1);
        q.messages.insert(at, message);
        q.bytes += weight;
        self.ready.notify_one();
    }

    /// Takes every queued message (browsing, recovery).
    pub(crate) fn take_all(&self) -> Vec<Message> {
        lock(&self.queue).take_all().into()
    }

    /// No more messages will come; wakes every `receive`.
    pub(crate) fn close(&self) {
        lock(&self.queue).closed = true;
        self.ready.notify_all();
    }
}

/// Receives messages from one destination or pattern.
pub struct Consumer {
    inner: Arc<Inner>,
    shared: Arc<ConsumerShared>,
    id: u32,
    destination: Destination,
    /// The body of the large message received last, cut off at the next
    /// receive.
    last_body: Mutex<Option<(u64, Slot)>>,
}

impl Consumer {
    pub(crate) fn new(
        inner: Arc<Inner>,
        shared: Arc<ConsumerShared>,
        id: u32,
        destination: Destination,
    ) -> Consumer {
        Consumer {
            inner,
            shared,
            id,
            destination,
            last_body: Mutex::new(None),
        }
    }

    /// The body of `message`, a message this consumer received, to read:
    /// a large message's as it arrives (read it before the next receive,
    /// which drops what is left), any other's from the message. A
    /// listener takes it with [`Session::body`](crate::Session::body) and
    /// reads it on another thread. Fails for a map body, and for a large
    /// body taken or dropped already.
    pub fn body(&self, message: &Message) -> Result<BodyReader> {
        crate::stream::body(&self.inner.streams, message)
    }

    /// Cuts off the body of the large message received last.
    fn drop_last_body(&self) {
        if let Some((id, slot)) = lock(&self.last_body).take() {
            cut(&slot);
            self.inner.streams.discard(id);
        }
    }

    /// What this consumer subscribed to.
    pub fn destination(&self) -> &Destination {
        &self.destination
    }

    /// Installs a listener, called on the connection's reader thread for
    /// every message from now on. Messages already waiting are passed to it
    /// first, on this thread, in order.
    pub fn set_message_listener(
        &self,
        listener: impl FnMut(Message) + Send + 'static,
    ) -> Result<()> {
        let mut listener: Listener = Box::new(listener);
        let mut slot = lock(&self.shared.listener);
        let waiting = lock(&self.shared.queue).take_all();
        // The reader thread waits on `slot` meanwhile: these listener
        // calls must not wait for anything it reads.
        self.inner.as_listener(|| {
            for m in waiting {
                self.shared.run_listener(&mut listener, m);
            }
        });
        *slot = Some(listener);
        Ok(())
    }

    /// Waits up to `timeout` for a message. `Ok(None)` on timeout; an error
    /// once the consumer or its connection is closed and nothing is left.
    pub fn receive(&self, timeout: Duration) -> Result<Option<Message>> {
        let now = Instant::now();
        self.receive_until(now.checked_add(timeout).unwrap_or(now + FOREVER))
    }

    /// Waits until `deadline` for a message: [`Consumer::receive`] with a
    /// point in time instead of a span, for loops that share one deadline.
    pub fn receive_until(&self, deadline: Instant) -> Result<Option<Message>> {
        self.drop_last_body();
        let mut q = lock(&self.shared.queue);
        let mut flushed = false;
        loop {
            if let Some(m) = q.pop_front() {
                drop(q);
                if is_streamed(&m) {
                    let slot = self.inner.streams.slot(m.delivery_id);
                    *lock(&self.last_body) = slot.map(|s| (m.delivery_id, s));
                }
                if let Some(s) = &self.shared.session {
                    s.handing_out(m.delivery_id, self.id);
                }
                self.shared.handed_out(m.delivery_id, true);
                return Ok(Some(m));
            }
            if q.closed {
                return Err(self.inner.end_error());
            }
            // Idle: DUPS_OK acknowledgements held back go out now.
            if !flushed {
                flushed = true;
                if let Some(s) = &self.shared.session {
                    drop(q);
                    let _ = s.flush_lazy();
                    q = lock(&self.shared.queue);
                    continue;
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            q = self
                .shared
                .ready
                .wait_timeout(q, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// The messages as they come, blocking for each; it ends when the
    /// consumer or its connection is closed (or lost). A consumer with a
    /// listener gets nothing here.
    ///
    /// ```no_run
    /// # fn main() -> herald_client::Result<()> {
    /// # let factory = herald_client::ConnectionFactory::new("herald://127.0.0.1:7777")?;
    /// # let connection = factory.create_connection()?;
    /// # let session = connection.create_session(herald_client::AckMode::Auto)?;
    /// let orders = session.create_consumer(&herald_client::Destination::queue("orders"))?;
    /// for order in orders.iter() {
    ///     println!("{:?}", order.body_text());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn iter(&self) -> impl Iterator<Item = Message> + '_ {
        std::iter::from_fn(move || loop {
            match self.receive(FOREVER) {
                Ok(Some(m)) => return Some(m),
                Ok(None) => continue,
                Err(_) => return None,
            }
        })
    }

    /// A message if one is waiting, without blocking.
    pub fn receive_no_wait(&self) -> Result<Option<Message>> {
        self.receive(Duration::ZERO)
    }

    /// Messages dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Unsubscribes and waits for the server to confirm. Messages it
    /// received ahead (prefetched) and never handed out return to their
    /// queue as they were: not counted as delivered, not marked
    /// redelivered. Messages handed out and not acknowledged (CLIENT,
    /// INDIVIDUAL, TRANSACTED) come again, marked redelivered, and can no
    /// longer be acknowledged. Dropping the consumer does the same without
    /// waiting.
    pub fn close(&self) -> Result<()> {
        self.shared.close();
        self.drop_last_body();
        unsubscribe(&self.inner, self.id, true)
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.shared.close();
        self.drop_last_body();
        let _ = unsubscribe(&self.inner, self.id, false);
    }
}

/// Forgets a consumer and tells the server, once; `wait` for its receipt.
/// A tracked consumer's UNSUBSCRIBE names the unacknowledged deliveries
/// its application received: the rest (prefetched, never read) return to
/// the queue without counting as delivered.
pub(crate) fn unsubscribe(inner: &Inner, id: u32, wait: bool) -> Result<()> {
    let Some(shared) = inner.consumers.remove(id) else {
        return Ok(());
    };
    shared.close();
    // Bodies of large messages it will never hand out.
    for m in lock(&shared.queue)
        .messages
        .iter()
        .filter(|m| is_streamed(m))
    {
        inner.streams.discard(m.delivery_id);
    }
    if inner.writer.is_paused() {
        // The session that held the subscription is gone, and the next
        // one will not subscribe it again.
        return Ok(());
    }
    let seen = shared.session.as_ref().map(|s| {
        // DUPS_OK acknowledgements held back go first: those were read.
        let _ = s.flush_lazy();
        Settle {
            delivery_ids: s.seen_by(id),
        }
    });
    let frame = Frame::Unsubscribe(Unsubscribe {
        subscription_id: id,
        seen,
    });
    let result = if wait {
        inner.request(&frame, "the UNSUBSCRIBE receipt")
    } else {
        inner.writer.send(&frame, 0)
    };
    match result {
        // A connection that is already gone has no subscription to drop.
        Err(Error::Closed | Error::ConnectionLost(_)) => Ok(()),
        other => other,
    }
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("subscription_id", &self.id)
            .field("destination", &self.destination)
            .field("dropped", &self.dropped())
            .finish()
    }
}
