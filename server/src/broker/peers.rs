//! The other nodes of a cluster, as the broker sees them: what it tells
//! them and asks of them (`crate::cluster` implements it).

use std::sync::Arc;

use bytes::Bytes;
use herald_protocol::destination::Pattern;
use herald_protocol::selector::Selector;

use super::address::ConnectionRef;
use super::backlog::Backlog;
use super::pending::SharedChanges;
use super::queue::{EntryId, SharedQueue};
use super::registry::DurableRecord;
use crate::store::Completion;

/// What a broker tells the other nodes of a cluster (see `crate::cluster`).
/// Called on workers: implementations hand the work to threads of their
/// own and never block.
pub trait Peers: Send + Sync {
    /// A message was published on `topic` here: other nodes route it to
    /// their own subscribers. Returns a backlog signal while the copies
    /// for other nodes pile up faster than they leave: its publisher
    /// pauses, as for a slow subscriber.
    fn published(&self, topic: &str, block: &Bytes) -> Option<Arc<Backlog>>;
    /// A subscription to `pattern` began here (`true`) or ended.
    fn interest(&self, pattern: &Pattern, interested: bool);
    /// A message was sent to the shared queue `queue` here (by connection
    /// `from`, if a client sent it): it goes to the queue's stream, which
    /// the nodes with consumers read. Returns a backlog signal as
    /// [`Peers::published`] does.
    fn queue_send(
        &self,
        queue: &str,
        block: &Bytes,
        from: Option<ConnectionRef>,
    ) -> Option<Arc<Backlog>>;
    /// A committed transaction's changes to shared queues: all of them
    /// or none.
    fn commit(&self, changes: SharedChanges, from: Option<ConnectionRef>);
    /// A message read from `queue`'s stream is done with (acknowledged,
    /// moved, expired): its entry goes.
    fn settle(&self, queue: &str, entry: EntryId);
    /// How many writes (sends to shared queues, commits, rechecks) were
    /// handed over so far: a barrier asked for now covers those.
    fn written(&self) -> u64;
    /// Runs `done` once Redis has answered everything sent before it,
    /// with an error if a write of `from`'s among the first `covers` (see
    /// [`Peers::written`]) was not accepted.
    fn barrier(&self, from: Option<ConnectionRef>, covers: u64, done: Completion);
    /// Connection `serial` closed: nothing it sent needs answering for any
    /// more.
    fn closed(&self, serial: u64);
    /// A consumer attached to (`true`) or detached from the shared queue
    /// `name` here: the node reads the queue's stream while it has any.
    fn consuming(&self, name: &str, queue: &SharedQueue, attached: bool);
    /// A durable subscription was made here (`registered`, replacing one
    /// of the same client id and name) or deleted, its messages with it:
    /// the registry in Redis and the other nodes learn of it.
    fn durable(&self, record: &DurableRecord, registered: bool);
    /// The epoch of the registry of durable subscriptions that this
    /// node's topic tree holds.
    fn durables_epoch(&self) -> u64;
    /// A persistent message published here (by `from`) on `topic` was
    /// routed knowing the registry at an epoch, and appended to some
    /// streams: `seen` holds both.
    /// If a subscription was registered since (on another node, whose
    /// subscriber may then have sent it, through this node), the message
    /// is appended to that one's stream too before any later barrier
    /// completes: a receipted message reaches every durable subscription
    /// made before it was sent.
    fn recheck(
        &self,
        topic: &str,
        block: &Bytes,
        seen: (u64, Vec<String>),
        from: Option<ConnectionRef>,
    );
    /// Reads up to `limit` messages of the shared queue `queue` that
    /// match `selector`, for a browser, without consuming them.
    fn browse(&self, queue: &str, selector: Option<Arc<Selector>>, limit: usize, done: BrowseDone);
}

/// Called with a browse's messages (block and times delivered before),
/// or why there are none.
pub type BrowseDone = Box<dyn FnOnce(Result<Vec<(Bytes, u32)>, PeerError>) + Send>;

/// Why the other nodes' shared state could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerError {
    /// No link to Redis now: the request was not sent.
    #[error("Redis is not available: {0}")]
    Unavailable(String),
    /// The link failed while Redis was asked.
    #[error("Redis did not answer: {0}")]
    NoAnswer(String),
}
