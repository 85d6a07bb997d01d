//! Sessions: the context in which producers and consumers are created, and
//! which fixes how received messages are acknowledged.
//!
//! Which deliveries the server tracks: everything from a queue or a durable
//! subscription, and topic subscriptions in CLIENT and INDIVIDUAL modes.
//! Plain topic subscriptions in AUTO and DUPS_OK modes are fire-and-forget,
//! the fast path.

use std::sync::{Arc, Mutex};

use herald_protocol::frame::{
    Browse, Commit, Recover, Rollback, Settle, Subscribe, UnsubscribeDurable,
};
use herald_protocol::{Destination, DestinationKind, ErrorCode, Frame, Message};

use crate::connection::{Connection, Inner};
use crate::consumer::{Consumer, ConsumerShared};
use crate::error::{Error, Result};
use crate::producer::Producer;
use crate::stream::BodyReader;
use crate::sync::lock;

/// How a session acknowledges the messages it receives (JMS's modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckMode {
    /// Each message is acknowledged once it has been handed to the
    /// application: when `receive` returns it, or when the listener returns
    /// (a listener that panics gets the message redelivered instead).
    Auto,
    /// The application calls [`Session::acknowledge`], which acknowledges
    /// every message the session has handed out so far.
    Client,
    /// Like AUTO, but acknowledgements are sent lazily in batches: cheaper,
    /// and a failure may redeliver a few messages.
    DupsOk,
    /// The application acknowledges each message on its own with
    /// [`Session::acknowledge_message`].
    Individual,
    /// A transacted session: its sends are held by the server and the
    /// messages it receives stay unacknowledged until
    /// [`Session::commit`], which makes both happen at once (persistent
    /// sends and acknowledgements reach the journal together: after a
    /// crash, all or none). [`Session::rollback`] drops the sends and has
    /// the received messages delivered again. A listener that panics rolls
    /// its session's transaction back.
    Transacted,
}

/// Ids in one ACK or NACK frame at most (8 bytes each, well inside any
/// server's frame limit).
const IDS_PER_FRAME: usize = 100_000;
/// DUPS_OK sends its acknowledgements in batches of this many.
const LAZY_BATCH: usize = 64;

/// The part of a session its consumers share.
pub(crate) struct SessionShared {
    pub(crate) inner: Arc<Inner>,
    pub(crate) mode: AckMode,
    /// CLIENT, INDIVIDUAL and TRANSACTED: delivery ids handed to the
    /// application and not yet acknowledged, oldest first, each with its
    /// subscription id.
    delivered: Mutex<Vec<(u64, u32)>>,
    /// TRANSACTED: the session's transaction id on the connection.
    pub(crate) transaction: Option<u32>,
    /// DUPS_OK: acknowledgements not yet sent.
    lazy: Mutex<Vec<u64>>,
    /// TRANSACTED: the connection failed over during the transaction,
    /// which the server rolled back; its commit must fail.
    interrupted: std::sync::atomic::AtomicBool,
    /// The session's consumers, by subscription id.
    consumers: Mutex<Vec<(u32, Arc<ConsumerShared>)>>,
}

impl SessionShared {
    /// Whether a consumer of `kind` in this session has its deliveries
    /// tracked by the server.
    fn tracks(&self, kind: DestinationKind, durable: bool) -> bool {
        kind == DestinationKind::Queue
            || durable
            || matches!(
                self.mode,
                AckMode::Client | AckMode::Individual | AckMode::Transacted
            )
    }

    /// Called just before a tracked message reaches the application:
    /// from then on an acknowledgement or a commit covers it, also one
    /// made by the listener handling it (as JMS has it).
    pub(crate) fn handing_out(&self, delivery_id: u64, subscription_id: u32) {
        if matches!(
            self.mode,
            AckMode::Client | AckMode::Individual | AckMode::Transacted
        ) {
            lock(&self.delivered).push((delivery_id, subscription_id));
        }
    }

    /// The unacknowledged deliveries of one subscription that reached the
    /// application, which stop being this session's to acknowledge (the
    /// subscription is ending): its UNSUBSCRIBE names them, so that only
    /// they count as delivered.
    pub(crate) fn seen_by(&self, subscription_id: u32) -> Vec<u64> {
        let mut seen = Vec::new();
        lock(&self.delivered).retain(|&(id, sub)| {
            if sub == subscription_id {
                seen.push(id);
            }
            sub != subscription_id
        });
        seen
    }

    /// Every delivery id handed out and not yet acknowledged, taken.
    fn take_delivered(&self) -> Vec<u64> {
        std::mem::take(&mut *lock(&self.delivered))
            .into_iter()
            .map(|(id, _)| id)
            .collect()
    }

    /// Called once a tracked message has been handed to the application
    /// (after [`SessionShared::handing_out`]); `processed` is false when
    /// its listener panicked.
    pub(crate) fn handed_out(&self, delivery_id: u64, processed: bool) {
        let result = match (self.mode, processed) {
            (AckMode::Auto | AckMode::DupsOk, false) => {
                self.settle(false, vec![delivery_id], false)
            }
            (AckMode::Auto, true) => self.settle(true, vec![delivery_id], false),
            (AckMode::DupsOk, true) => {
                let mut lazy = lock(&self.lazy);
                lazy.push(delivery_id);
                if lazy.len() < LAZY_BATCH {
                    return;
                }
                let batch = std::mem::take(&mut *lazy);
                drop(lazy);
                self.settle(true, batch, false)
            }
            (AckMode::Client | AckMode::Individual, _) | (AckMode::Transacted, true) => Ok(()),
            (AckMode::Transacted, false) => {
                // The listener failed partway: nothing it did may stand.
                log::warn!("a listener panicked in a transacted session: rolling back");
                self.rollback()
            }
        };
        if let Err(e) = result {
            log::debug!("acknowledgement not sent: {e}");
        }
    }

    fn transaction_id(&self, what: &str) -> Result<u32> {
        self.transaction.ok_or_else(|| {
            Error::InvalidArgument(format!(
                "cannot {what}: the session is not transacted ({:?})",
                self.mode
            ))
        })
    }

    /// Drops the transaction's sends and redelivers its messages.
    fn rollback(&self) -> Result<()> {
        let transaction_id = self.transaction_id("roll back")?;
        self.interrupted
            .store(false, std::sync::atomic::Ordering::Release);
        self.recover(Some(transaction_id))
    }

    /// RECOVER, or with a transaction id ROLLBACK: every unacknowledged
    /// message of the session's tracked consumers comes again.
    fn recover(&self, transaction: Option<u32>) -> Result<()> {
        let consumers: Vec<(u32, Arc<ConsumerShared>)> = lock(&self.consumers)
            .iter()
            .filter(|(_, c)| c.is_tracked())
            .cloned()
            .collect();
        if consumers.is_empty() && transaction.is_none() {
            return Ok(());
        }
        // Arrivals are dropped from here until the RECEIPT: the server
        // sends that after everything it sent before the recovery and
        // before the redeliveries.
        for (_, c) in &consumers {
            c.set_discarding(true);
            c.take_all();
        }
        lock(&self.delivered).clear();
        let subscriptions = Recover {
            subscription_ids: consumers.iter().map(|(id, _)| *id).collect(),
        };
        let frame = match transaction {
            Some(transaction_id) => Frame::Rollback(Rollback {
                transaction_id,
                subscriptions,
            }),
            None => Frame::Recover(subscriptions),
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let resume = consumers.clone();
        let waiter = Box::new(move |result: Result<()>| {
            // Runs on the reader thread, between the last stale MESSAGE
            // and the first redelivery.
            for (_, c) in &resume {
                c.set_discarding(false);
            }
            let _ = tx.try_send(result);
        });
        self.inner
            .request_async(frame.kind(), |d, _| frame.encode_body(d), waiter)?;
        if self.inner.on_reader_thread() {
            // Inside a listener: the RECEIPT is read once it returns.
            return Ok(());
        }
        let timeout = self.inner.request_timeout();
        match rx.recv_timeout(timeout) {
            Ok(result) => result,
            Err(_) => Err(Error::Timeout {
                what: "the RECOVER or ROLLBACK receipt",
                millis: timeout.as_millis(),
            }),
        }
    }

    /// The connection failed over: the old session's deliveries cannot be
    /// acknowledged any more (the server delivers them again), and an
    /// open transaction was rolled back by the server.
    pub(crate) fn connection_lost(&self) {
        lock(&self.delivered).clear();
        lock(&self.lazy).clear();
        if self.transaction.is_some() {
            self.interrupted
                .store(true, std::sync::atomic::Ordering::Release);
        }
    }

    /// NACKs a tracked message the application never saw (its consumer's
    /// queue was full), whatever the mode: the server delivers it again.
    pub(crate) fn give_back(&self, delivery_id: u64) {
        if let Err(e) = self.settle(false, vec![delivery_id], false) {
            log::debug!("a NACK was not sent: {e}");
        }
    }

    /// Sends the DUPS_OK acknowledgements held back so far.
    pub(crate) fn flush_lazy(&self) -> Result<()> {
        let batch = std::mem::take(&mut *lock(&self.lazy));
        if batch.is_empty() {
            return Ok(());
        }
        self.settle(true, batch, false)
    }

    /// ACK (or NACK) these deliveries; with `confirmed`, wait for the
    /// server's receipt.
    fn settle(&self, processed: bool, ids: Vec<u64>, confirmed: bool) -> Result<()> {
        for chunk in ids.chunks(IDS_PER_FRAME) {
            let settle = Settle {
                delivery_ids: chunk.to_vec(),
            };
            let frame = if processed {
                Frame::Ack(settle)
            } else {
                Frame::Nack(settle)
            };
            if confirmed {
                self.inner.request(&frame, "the acknowledgement receipt")?;
            } else {
                self.inner.writer.send(&frame, 0)?;
            }
        }
        Ok(())
    }
}

/// Options for [`Session::create_consumer_with`].
#[derive(Debug, Clone, Default)]
pub struct ConsumerOptions {
    /// A JMS message selector: only messages it selects are delivered.
    pub selector: Option<String>,
    /// Most unacknowledged messages the server sends ahead; 0 = the
    /// server's default. 1 gives strict one-at-a-time load balancing.
    pub prefetch: u32,
    /// Makes a topic subscription durable under this name (the connection
    /// needs a client id), or names the shared subscription.
    pub durable_name: Option<String>,
    /// The named subscription is shared (JMS 2.0): its consumers, on any
    /// connection, compete for its messages.
    pub shared: bool,
    /// A shared subscription is durable too.
    pub shared_durable: bool,
    /// DDS's best-effort reliability, for a plain topic subscription in an
    /// AUTO or DUPS_OK session: the server may drop its messages when this
    /// consumer falls behind, rather than slow anyone down or disconnect.
    pub best_effort: bool,
    /// DDS's deadline: if no message arrives for this long, the
    /// connection's exception listener hears [`Error::DeadlineMissed`]
    /// (again each period while none comes).
    pub deadline: Option<std::time::Duration>,
    /// Its priority among the consumers of a queue (Artemis's consumer
    /// priority, RabbitMQ's `x-priority`): while a higher one has credit
    /// and takes a message, lower ones are not given it. 0 by default.
    pub priority: i32,
    /// While this consumer is attached, its queue delivers to one consumer
    /// at a time (the highest priority, then the earliest), as an address
    /// with `exclusive = true` does (ActiveMQ's exclusive consumer,
    /// RabbitMQ's single active consumer); the next takes over when it
    /// goes.
    pub exclusive: bool,
    /// DDS reader policies the server applies: a time-based filter and
    /// destination order by source timestamp (plain topic subscriptions
    /// in AUTO or DUPS_OK sessions), and the history depth a reader that
    /// joins a keyed topic gets.
    pub reader: herald_protocol::frame::ReaderQos,
}

impl ConsumerOptions {
    /// DDS's time-based filter: at most one message per instance (a keyed
    /// topic's, else per topic) per `separation`; the newest held back is
    /// delivered when the window ends, so the last value always arrives.
    pub fn time_filter(mut self, separation: std::time::Duration) -> ConsumerOptions {
        self.reader.time_filter_ms = separation.as_millis().max(1) as u64;
        self
    }

    /// DDS's destination order by source timestamp: a message whose
    /// timestamp is older than the last one delivered of its instance is
    /// dropped (the server counts it).
    pub fn order_by_source_timestamp(mut self) -> ConsumerOptions {
        self.reader.by_source_timestamp = true;
        self
    }

    /// DDS's history depth for a reader that joins: of a keyed topic's
    /// kept samples, at most `depth` per instance.
    pub fn history(mut self, depth: u32) -> ConsumerOptions {
        self.reader.history = u64::from(depth);
        self
    }

    /// Asks for one consumer at a time on its queue (see
    /// [`ConsumerOptions::exclusive`]).
    pub fn exclusive(mut self) -> ConsumerOptions {
        self.exclusive = true;
        self
    }

    /// Sets the consumer's priority (see [`ConsumerOptions::priority`]).
    pub fn priority(mut self, priority: i32) -> ConsumerOptions {
        self.priority = priority;
        self
    }

    /// Sets the selector.
    pub fn selector(mut self, selector: impl Into<String>) -> ConsumerOptions {
        self.selector = Some(selector.into());
        self
    }

    /// Sets the prefetch.
    pub fn prefetch(mut self, prefetch: u32) -> ConsumerOptions {
        self.prefetch = prefetch;
        self
    }

    /// Makes the subscription durable.
    pub fn durable(mut self, name: impl Into<String>) -> ConsumerOptions {
        self.durable_name = Some(name.into());
        self
    }

    /// Makes it a consumer of the shared (non-durable) subscription
    /// `name`, which ends with its last consumer.
    pub fn shared(mut self, name: impl Into<String>) -> ConsumerOptions {
        self.durable_name = Some(name.into());
        self.shared = true;
        self
    }

    /// Asks for best-effort delivery (see [`ConsumerOptions::best_effort`]).
    pub fn best_effort(mut self) -> ConsumerOptions {
        self.best_effort = true;
        self
    }

    /// Asks to hear when no message came for `period`.
    pub fn deadline(mut self, period: std::time::Duration) -> ConsumerOptions {
        self.deadline = Some(period);
        self
    }

    /// Makes it a consumer of the shared durable subscription `name`.
    pub fn shared_durable(self, name: impl Into<String>) -> ConsumerOptions {
        let mut options = self.shared(name);
        options.shared_durable = true;
        options
    }
}

/// A single-threaded context for producing and consuming, with one
/// acknowledgement mode (see the crate's documentation for what each
/// covers).
///
/// ```no_run
/// use std::time::Duration;
/// use herald_client::{AckMode, ConnectionFactory, Destination};
/// # fn main() -> herald_client::Result<()> {
/// let connection = ConnectionFactory::new("herald://127.0.0.1:7777")?.create_connection()?;
/// let session = connection.create_session(AckMode::Client)?;
/// let jobs = session.create_consumer(&Destination::queue("jobs"))?;
/// while let Some(job) = jobs.receive(Duration::from_secs(1))? {
///     match job.body_text() {
///         Some(text) if !text.is_empty() => session.acknowledge()?, // done
///         _ => session.recover()?, // comes again, marked redelivered
///     }
/// }
/// # Ok(()) }
/// ```
pub struct Session {
    shared: Arc<SessionShared>,
    /// Keeps the connection open while the session is alive.
    connection: Connection,
}

impl Session {
    pub(crate) fn new(connection: Connection, mode: AckMode) -> Session {
        let inner = connection.inner().clone();
        let transaction = (mode == AckMode::Transacted).then(|| inner.next_subscription_id());
        let shared = Arc::new(SessionShared {
            inner,
            mode,
            transaction,
            delivered: Mutex::new(Vec::new()),
            lazy: Mutex::new(Vec::new()),
            interrupted: std::sync::atomic::AtomicBool::new(false),
            consumers: Mutex::new(Vec::new()),
        });
        shared.inner.add_session(Arc::downgrade(&shared));
        Session { shared, connection }
    }

    fn inner(&self) -> &Arc<Inner> {
        &self.shared.inner
    }

    /// The connection it belongs to (a handle to it; see [`Connection`]).
    pub fn connection(&self) -> &Connection {
        &self.connection
    }

    /// The session's acknowledgement mode.
    pub fn ack_mode(&self) -> AckMode {
        self.shared.mode
    }

    /// The body of `message`, which one of this connection's consumers
    /// received: [`Consumer::body`](crate::Consumer::body) for a
    /// listener, which holds its session rather than its consumer. A
    /// listener takes the body and reads it on another thread (its own is
    /// the one that reads the body from the server); one it does not take
    /// is dropped when it returns.
    pub fn body(&self, message: &Message) -> Result<BodyReader> {
        crate::stream::body(&self.connection.inner().streams, message)
    }

    /// A producer that sends to `destination` (a name, not a pattern).
    pub fn create_producer(&self, destination: &Destination) -> Result<Producer> {
        Error::check_name(&destination.name)?;
        Ok(Producer::new(
            self.inner().clone(),
            destination.clone(),
            self.shared.transaction,
        ))
    }

    /// Sends `message` to `destination` without a producer of its own
    /// (JMS's anonymous producer): the same as
    /// [`Producer::send`] on a producer for `destination`.
    pub fn send(&self, destination: &Destination, message: Message) -> Result<()> {
        self.create_producer(destination)?.send(message)
    }

    /// A consumer of `destination`, which for topics may be a pattern with
    /// `*` and `#`. Returns once the server has confirmed the subscription,
    /// so every message published after this returns is received.
    pub fn create_consumer(&self, destination: &Destination) -> Result<Consumer> {
        self.create_consumer_with(destination, ConsumerOptions::default())
    }

    /// A consumer that only receives what `selector` selects.
    pub fn create_consumer_with_selector(
        &self,
        destination: &Destination,
        selector: &str,
    ) -> Result<Consumer> {
        self.create_consumer_with(destination, ConsumerOptions::default().selector(selector))
    }

    /// A durable subscriber to a topic: messages published while it is
    /// away are kept until it comes back. Needs a client id.
    pub fn create_durable_subscriber(&self, topic: &Destination, name: &str) -> Result<Consumer> {
        self.create_consumer_with(topic, ConsumerOptions::default().durable(name))
    }

    /// A consumer of the shared subscription `name` on a topic (JMS 2.0):
    /// each message goes to one of its consumers; it ends with the last.
    pub fn create_shared_consumer(&self, topic: &Destination, name: &str) -> Result<Consumer> {
        self.create_consumer_with(topic, ConsumerOptions::default().shared(name))
    }

    /// A consumer of the shared durable subscription `name` on a topic:
    /// shared like [`Session::create_shared_consumer`], kept like a durable
    /// subscriber's.
    pub fn create_shared_durable_consumer(
        &self,
        topic: &Destination,
        name: &str,
    ) -> Result<Consumer> {
        self.create_consumer_with(topic, ConsumerOptions::default().shared_durable(name))
    }

    /// A consumer with every option.
    pub fn create_consumer_with(
        &self,
        destination: &Destination,
        options: ConsumerOptions,
    ) -> Result<Consumer> {
        match destination.kind {
            DestinationKind::Topic => Error::check_pattern(&destination.name)?,
            DestinationKind::Queue => Error::check_name(&destination.name)?,
        }
        let selector = options.selector.unwrap_or_default();
        Error::check_selector(&selector)?;
        let durable_name = options.durable_name.unwrap_or_default();
        let temporary = destination.kind == DestinationKind::Queue
            && destination
                .name
                .starts_with(&self.inner().temporary_prefix());
        let tracked = self
            .shared
            .tracks(destination.kind, !durable_name.is_empty());
        if options.best_effort && (tracked || destination.kind == DestinationKind::Queue) {
            return Err(Error::InvalidArgument(format!(
                "best effort is for plain topic subscriptions in AUTO or DUPS_OK sessions, not {destination} in {:?}{}",
                self.shared.mode,
                if durable_name.is_empty() { "" } else { " (durable)" }
            )));
        }
        let r = &options.reader;
        let filtered = r.time_filter_ms > 0 || r.by_source_timestamp;
        if (filtered && (tracked || destination.kind == DestinationKind::Queue))
            || (r.history > 0 && destination.kind == DestinationKind::Queue)
        {
            return Err(Error::InvalidArgument(format!(
                "a time filter and source order are for plain topic subscriptions in AUTO or DUPS_OK sessions, a history depth for topics, not {destination} in {:?}",
                self.shared.mode
            )));
        }
        if options.deadline.is_some_and(|d| d.is_zero()) {
            return Err(Error::InvalidArgument(
                "a deadline must be longer than 0".into(),
            ));
        }
        let inner = self.inner();
        let id = inner.next_subscription_id();
        let subscribe = Subscribe {
            subscription_id: id,
            kind: destination.kind,
            pattern: destination.name.clone(),
            selector,
            acknowledged: tracked,
            prefetch: options.prefetch,
            durable_name,
            temporary,
            shared: options.shared,
            durable: options.shared_durable,
            best_effort: options.best_effort,
            priority: options.priority,
            exclusive: options.exclusive,
            reader: options.reader,
        };
        let consumer = Arc::new(ConsumerShared::new(
            (inner.config.pending_messages, inner.config.pending_bytes),
            tracked.then(|| self.shared.clone()),
            Some(subscribe.clone()),
            options.deadline,
        ));
        if let Some(period) = options.deadline {
            inner.watch_deadline(period);
        }
        // Registered before SUBSCRIBE goes out: the first message can
        // arrive before the RECEIPT does.
        inner.consumers.insert(id, consumer.clone());
        let subscribe = Frame::Subscribe(subscribe);
        if let Err(e) = inner.request(&subscribe, "the SUBSCRIBE receipt") {
            inner.consumers.remove(id);
            return Err(e);
        }
        lock(&self.shared.consumers).push((id, consumer.clone()));
        Ok(Consumer::new(
            inner.clone(),
            consumer,
            id,
            destination.clone(),
        ))
    }

    /// A temporary queue: only this connection may consume from it, and
    /// the server deletes it when the connection ends. Create its consumer
    /// before handing its name out (as a reply-to, say).
    pub fn create_temporary_queue(&self) -> Destination {
        let n = self.inner().next_subscription_id();
        Destination::queue(format!("{}{n}", self.inner().temporary_prefix()))
    }

    /// A temporary topic: only this connection may subscribe to it (even a
    /// wildcard subscription of another connection does not see its
    /// messages), anyone may publish to it, and it ends with the
    /// connection.
    pub fn create_temporary_topic(&self) -> Destination {
        let n = self.inner().next_subscription_id();
        Destination::topic(format!("{}t{n}", self.inner().temporary_prefix()))
    }

    /// Deletes the durable subscription `name` of this connection's client
    /// id, with every message it kept. Its consumer must be closed first.
    pub fn unsubscribe(&self, name: &str) -> Result<()> {
        let frame = Frame::UnsubscribeDurable(UnsubscribeDurable {
            name: name.to_owned(),
        });
        self.inner()
            .request(&frame, "the UNSUBSCRIBE_DURABLE receipt")
    }

    /// A browser of `queue`: it looks at the messages waiting there that
    /// `selector` (empty = all) selects, without consuming them.
    pub fn create_browser(&self, queue: &Destination, selector: &str) -> Result<QueueBrowser> {
        if queue.kind != DestinationKind::Queue {
            return Err(Error::invalid_destination(
                &queue.name,
                format!("{queue} is not a queue: only queues are browsed"),
            ));
        }
        Error::check_name(&queue.name)?;
        Error::check_selector(selector)?;
        Ok(QueueBrowser {
            inner: self.inner().clone(),
            queue: queue.name.clone(),
            selector: selector.to_owned(),
        })
    }

    /// CLIENT mode: acknowledges every message this session has handed
    /// out. INDIVIDUAL mode: the same, for all of them at once. Waits for
    /// the server to confirm.
    pub fn acknowledge(&self) -> Result<()> {
        let ids = self.shared.take_delivered();
        if ids.is_empty() {
            return Ok(());
        }
        self.shared.settle(true, ids, true)
    }

    /// Acknowledges one message. In INDIVIDUAL mode only that one; in
    /// CLIENT mode, as JMS says, every message the session handed out.
    pub fn acknowledge_message(&self, message: &Message) -> Result<()> {
        if self.shared.mode != AckMode::Individual {
            return self.acknowledge();
        }
        let mut delivered = lock(&self.shared.delivered);
        let Some(at) = delivered
            .iter()
            .position(|(id, _)| *id == message.delivery_id)
        else {
            return Err(Error::InvalidArgument(format!(
                "delivery {} is not awaiting acknowledgement in this session",
                message.delivery_id
            )));
        };
        delivered.remove(at);
        drop(delivered);
        self.shared.settle(true, vec![message.delivery_id], true)
    }

    /// Redelivers, from the first, every message of the session not yet
    /// acknowledged, whether handed out, waiting unread, or still on its
    /// way: they come again, marked redelivered.
    pub fn recover(&self) -> Result<()> {
        self.shared.recover(None)
    }

    /// TRANSACTED: makes the transaction's sends and acknowledgements
    /// happen, all at once, and starts the next transaction. Waits until
    /// the server has them (in its journal, if any is persistent). If the
    /// server cannot commit, the transaction is rolled back and the error
    /// (code `TransactionRolledBack`) says why. Inside a listener it
    /// cannot wait: an error then reaches the exception listener.
    pub fn commit(&self) -> Result<()> {
        let transaction_id = self.shared.transaction_id("commit")?;
        let interrupted = std::sync::atomic::Ordering::AcqRel;
        if self.shared.interrupted.swap(false, interrupted) {
            // What was sent since the failover belongs to the lost
            // transaction too.
            self.shared.rollback()?;
            return Err(Error::Server {
                code: ErrorCode::TransactionRolledBack as u32,
                message: "the connection failed over during the transaction, which was rolled back"
                    .into(),
                fatal: false,
            });
        }
        let ids = self.shared.take_delivered();
        let frame = Frame::Commit(Commit {
            transaction_id,
            consumed: Settle { delivery_ids: ids },
        });
        let result = self.inner().request(&frame, "the COMMIT receipt");
        if let Err(e) = &result {
            if e.server_code() == Some(ErrorCode::TransactionRolledBack) {
                self.shared.rollback()?;
            }
        }
        result
    }

    /// TRANSACTED: drops the transaction's sends and delivers its received
    /// messages again (marked redelivered, delivery count + 1), then starts
    /// the next transaction.
    pub fn rollback(&self) -> Result<()> {
        self.shared.transaction_id("roll back")?;
        self.shared.rollback()
    }

    /// Closes every consumer created in this session, as
    /// [`Consumer::close`](crate::Consumer::close) does; DUPS_OK
    /// acknowledgements still held back are sent first, and a transacted
    /// session's open transaction is rolled back (what it received comes
    /// again, marked redelivered; what it had prefetched, as it was).
    pub fn close(&self) -> Result<()> {
        let mut first_error = self.shared.flush_lazy().err();
        if let Some(transaction_id) = self.shared.transaction {
            // Its sends are dropped; what it received is given back as
            // each consumer closes, counted only if it was handed out.
            let frame = Frame::Rollback(Rollback {
                transaction_id,
                subscriptions: Recover::default(),
            });
            if let Err(e) = self.inner().request(&frame, "the ROLLBACK receipt") {
                first_error.get_or_insert(e);
            }
        }
        let consumers = std::mem::take(&mut *lock(&self.shared.consumers));
        for (id, _) in consumers {
            if let Err(e) = crate::consumer::unsubscribe(self.inner(), id, true) {
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            None | Some(Error::Closed) => Ok(()),
            Some(e) => Err(e),
        }
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("ack_mode", &self.shared.mode)
            .finish()
    }
}

/// Looks at a queue without consuming (JMS `QueueBrowser`).
pub struct QueueBrowser {
    inner: Arc<Inner>,
    queue: String,
    selector: String,
}

impl QueueBrowser {
    /// The queue's name.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// A snapshot of the messages waiting now, in queue order (deliveries
    /// in flight to consumers are not included).
    pub fn messages(&self) -> Result<Vec<Message>> {
        let inner = &self.inner;
        let id = inner.next_subscription_id();
        let snapshot = Arc::new(ConsumerShared::new(
            (usize::MAX, usize::MAX),
            None,
            None,
            None,
        ));
        inner.consumers.insert(id, snapshot.clone());
        let frame = Frame::Browse(Browse {
            subscription_id: id,
            queue: self.queue.clone(),
            selector: self.selector.clone(),
        });
        // The RECEIPT follows the last MESSAGE of the snapshot, and the
        // reader hands each MESSAGE over before it reads the RECEIPT.
        let result = inner.request(&frame, "the end of the browse");
        inner.consumers.remove(id);
        result?;
        Ok(snapshot.take_all())
    }
}

impl std::fmt::Debug for QueueBrowser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueBrowser")
            .field("queue", &self.queue)
            .field("selector", &self.selector)
            .finish()
    }
}
