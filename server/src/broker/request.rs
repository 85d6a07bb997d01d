//! What the broker is asked to do and what it answers: subscription
//! requests and handles, routing outcomes, their errors.

use std::sync::{Arc, Mutex};

use herald_protocol::destination::Pattern;
use herald_protocol::selector::Selector;
use herald_protocol::DestinationKind;

use super::address::ConnectionRef;
use super::backlog::Backlog;
use super::declared_topics::Undeclared;
use super::queue::{QueueFull, SharedQueue};
use crate::store::{Completion, StoreError};
use crate::sync::lock;

/// What became of a published message.
#[derive(Debug, Default, Clone)]
pub struct Routed {
    /// Something was written to the store: a RECEIPT waits for it.
    pub journaled: bool,
    /// Whether what was written was kept: a RECEIPT's barrier checks it.
    pub written: Written,
    /// Subscriptions (or the queue) it went to.
    pub delivered: usize,
    /// The backlog of a subscriber it went to, if one has a backlog: its
    /// publisher should pause until that is drained.
    pub backlog: Option<Arc<Backlog>>,
}

/// What became of the records one publish or commit wrote: the first
/// failure, if any. Their completions fill it in, and a barrier appended
/// after them completes after them, so [`Written::guard`] sees every one
/// (a barrier alone only says that what was written is durable, not that
/// each write succeeded).
/// Made only for a publish that writes (the usual non-persistent one
/// costs no allocation).
#[derive(Debug, Clone, Default)]
pub struct Written(Option<Arc<Mutex<Option<StoreError>>>>);

impl Written {
    /// The shared slot its records' completions report to.
    pub(super) fn slot(&mut self) -> Arc<Mutex<Option<StoreError>>> {
        self.0.get_or_insert_with(Arc::default).clone()
    }

    /// `done`, failing if any of the records failed.
    pub fn guard(self, done: Completion) -> Completion {
        let Some(slot) = self.0 else {
            return done;
        };
        Box::new(move |result| {
            let failed = lock(&slot).take();
            done(result.and_then(|()| failed.map_or(Ok(()), Err)))
        })
    }
}

/// What to do when a queue a message goes to is full.
#[derive(Debug, Clone, Copy)]
pub enum Room {
    /// Refuse the message.
    Refuse,
    /// Refuse it, and wake this connection once there is room.
    Wait(ConnectionRef),
    /// Take it anyway: a committing transaction, whose room was checked
    /// beforehand, is not refused halfway.
    Overfill,
    /// A message the server moves (a dead letter, an expired one): only
    /// `max_messages` refuses it, not a memory bound, which holds back
    /// publishers.
    Move,
}

/// What a connection must remember to undo a subscription.
pub enum SubscriptionHandle {
    /// A topic subscription; `queue` if its deliveries are acknowledged.
    Topic {
        /// The pattern it was entered under.
        pattern: Pattern,
        /// Its entry's key.
        key: u64,
        /// Its private queue, if any.
        queue: Option<SharedQueue>,
        /// Its DDS reader policies, if it asked for any applied to its
        /// deliveries.
        reader: Option<Arc<super::reader::Reader>>,
    },
    /// A consumer of a named queue.
    Queue(SharedQueue),
    /// The consumer of a durable subscription.
    Durable {
        /// The subscription's queue.
        queue: SharedQueue,
        /// (client id, name).
        id: (String, String),
    },
}

/// Why the broker refused a publish.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// Strict mode and the topic is not in the declared tree.
    #[error(transparent)]
    Undeclared(#[from] Undeclared),
    /// The queue does not exist and its address does not create queues on
    /// first use.
    #[error("queue '{0}' does not exist, and its address does not create queues on first use (auto_create = false)")]
    NoQueue(String),
    /// The queue is at a limit.
    #[error("queue '{queue}' {}", full.limit)]
    QueueFull {
        /// The queue.
        queue: String,
        /// Which limit, and what its address does now.
        full: QueueFull,
    },
    /// A keyed topic refused the sample.
    #[error(transparent)]
    Sample(#[from] super::instances::Refused),
}

/// Why the broker refused a subscription.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubscribeError {
    /// The selector does not parse.
    #[error("{0}")]
    Selector(String),
    /// A durable subscription needs the connection's client id.
    #[error("a durable subscription needs a client id on the connection")]
    ClientIdRequired,
    /// The durable subscription has a live consumer already.
    #[error("durable subscription '{0}' already has an active consumer")]
    InUse(String),
    /// No durable subscription of that name.
    #[error("no durable subscription named '{0}' for this client id")]
    UnknownDurable(String),
    /// Durable subscriptions are for topics.
    #[error("durable subscriptions are made on topics, not queues")]
    DurableQueue,
    /// The destination is not a valid name or pattern.
    #[error("{0}")]
    Destination(String),
    /// A temporary queue or topic of another connection.
    #[error("'{0}' is a temporary destination of another connection: only it may consume")]
    NotOwner(String),
    /// Reader policies the subscription cannot have.
    #[error("{0}")]
    Reader(&'static str),
}

/// What a SUBSCRIBE asks for, as the broker needs it.
pub struct SubscribeRequest<'a> {
    /// Topic or queue.
    pub kind: DestinationKind,
    /// A queue name, or a topic name or pattern.
    pub destination: &'a str,
    /// The selector, parsed by [`Broker::parse_selector`](super::Broker::parse_selector).
    pub selector: Option<Arc<Selector>>,
    /// Deliveries are tracked until acknowledged.
    pub acknowledged: bool,
    /// Credit; 0 = the configured default.
    pub prefetch: u32,
    /// Durable subscription name; empty = not durable.
    pub durable_name: &'a str,
    /// The connection's client id.
    pub client_id: &'a str,
    /// The connection's user ("" = anonymous): a durable subscription it
    /// makes is theirs.
    pub user: &'a str,
    /// A temporary queue of this connection.
    pub temporary: bool,
    /// The named subscription is shared.
    pub shared: bool,
    /// A shared named subscription is durable.
    pub durable: bool,
    /// The connection's backlog signal, for a subscription whose
    /// publishers should pause while the connection drains a backlog.
    pub backlog: Option<Arc<Backlog>>,
    /// Whether it gets the retained messages of its topics first.
    pub kept: bool,
    /// Not the messages its own connection publishes (AMQP's no-local
    /// filter, JMS's noLocal): for a topic subscription of a connection,
    /// not a durable or shared one.
    pub no_local: bool,
    /// The consumer's priority among those of its queue (see
    /// [`Queue::add_consumer`](super::Queue::add_consumer)).
    pub priority: i32,
    /// While it is attached, its queue delivers to one consumer at a time.
    pub exclusive: bool,
    /// DDS reader policies: a time-based filter and source order (for a
    /// plain topic subscription), a history depth for what it gets kept.
    pub reader: herald_protocol::frame::ReaderQos,
}

impl SubscribeRequest<'_> {
    /// The selector's text; empty = none.
    pub fn selector_text(&self) -> &str {
        self.selector.as_ref().map_or("", |s| s.source())
    }
}

/// Why strict mode's declared topics cannot change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicError {
    /// Strict mode is off: publishing is open to any topic.
    #[error("topics are not declared: strict mode is off ([topics] strict)")]
    Open,
    /// Not a valid topic name.
    #[error(transparent)]
    Name(#[from] herald_protocol::Error),
}

/// Why a queue cannot be created or deleted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    /// Not a valid queue name.
    #[error(transparent)]
    Name(#[from] herald_protocol::Error),
    /// There is no such queue.
    #[error("no queue '{0}'")]
    NoQueue(String),
    /// A temporary queue belongs to its connection.
    #[error("'{0}' is a temporary queue: it goes when its connection ends")]
    Temporary(String),
    /// Consumers are attached.
    #[error("queue '{name}' has {consumers} consumer(s): close them first")]
    InUse {
        /// The queue.
        name: String,
        /// How many.
        consumers: usize,
    },
}

/// Why a dead-lettered or expired message cannot go back where it came
/// from; it stays where it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RepublishError {
    /// It does not say where it came from (or not as text).
    #[error("it has no HeraldOriginalDestination text property")]
    NoOrigin,
    /// It does not decode, or what it becomes is not a valid message.
    #[error(transparent)]
    Message(#[from] herald_protocol::Error),
    /// Its destination refuses it.
    #[error(transparent)]
    Route(#[from] RouteError),
}
