//! What the rest of the server asks of the queue thread (`Request`),
//! and what it answers with.

use std::sync::Arc;

use bytes::Bytes;
use herald_protocol::selector::Selector;

use crate::broker::{BrowseDone, EntryId, PeerError, SharedQueue};

/// Work for the queue thread from the rest of the server.
pub(super) enum Request {
    /// The messages of a shared queue, for a browser.
    Browse {
        queue: String,
        selector: Option<Arc<Selector>>,
        limit: usize,
        done: BrowseDone,
    },
    /// Every shared queue in Redis, with its stream's length and its
    /// unacknowledged entries.
    Streams { done: StreamsDone },
    /// Takes up to `limit` messages of a shared queue that no node has
    /// read, for this node to settle or give back (purge, replay).
    Take {
        queue: String,
        limit: usize,
        done: TakeDone,
    },
    /// A page (offset, limit) of a shared queue's messages that the
    /// selector selects, for an operator.
    Page {
        queue: String,
        selector: Option<Arc<Selector>>,
        page: (usize, usize),
        done: Done<Option<Page>>,
    },
    /// One message of a shared queue by id, taken out of its stream if
    /// `take`, for an operator's delete, move or copy.
    Pick {
        queue: String,
        id: String,
        take: bool,
        done: Done<Picked>,
    },
    /// Moves an entry that no node holds to another shared queue, as
    /// `block`, in one step.
    Move {
        queue: String,
        held: Held,
        to: String,
        block: Bytes,
        done: Done<Picked>,
    },
    /// Deletes a shared queue no node consumes.
    Drop { queue: String, done: Done<Dropped> },
    /// Makes a shared queue's stream and group; whether it is new.
    Create { queue: String, done: Done<bool> },
}

/// Called with the answer to a request, or why Redis gave none.
pub type Done<T> = Box<dyn FnOnce(Result<T, PeerError>) + Send>;

/// Called with the messages taken (`None`: there is no such queue), or
/// why there are none.
pub type TakeDone = Done<Option<Vec<Held>>>;

/// Called with (queue, stream length, unacknowledged entries) per shared
/// queue, or why Redis did not say.
pub type StreamsDone = Done<Vec<(String, u64, u64)>>;

impl Request {
    /// Answers that Redis is away.
    pub(super) fn fail(self, why: &str) {
        let away = PeerError::Unavailable(why.to_owned());
        match self {
            Request::Browse { done, .. } => done(Err(away)),
            Request::Streams { done } => done(Err(away)),
            Request::Take { done, .. } => done(Err(away)),
            Request::Page { done, .. } => done(Err(away)),
            Request::Pick { done, .. } => done(Err(away)),
            Request::Drop { done, .. } => done(Err(away)),
            Request::Move { done, .. } => done(Err(away)),
            Request::Create { done, .. } => done(Err(away)),
        }
    }
}

/// A shared queue with consumers on this node.
pub(super) struct Consumed {
    pub(super) queue: SharedQueue,
    pub(super) consumers: usize,
}

/// A message this node read from a stream, to settle or give back.
pub struct Held {
    /// Its entry.
    pub entry: EntryId,
    /// The message block.
    pub block: Bytes,
    /// Times it was delivered before.
    pub deliveries: u32,
}

/// One message of a shared queue, as a page lists it.
pub struct Listed {
    /// The message block.
    pub block: Bytes,
    /// Times it was delivered before.
    pub deliveries: u32,
    /// The group member (node) that read it and has not settled it.
    pub holder: Option<String>,
}

/// A page of a shared queue: how many messages the selector selects, and
/// those of the page.
pub struct Page {
    /// Selected, in all.
    pub total: usize,
    /// From the page's offset, in the stream's order.
    pub messages: Vec<Listed>,
}

/// What looking for one message found.
pub enum Picked {
    /// No stream by that name.
    NoQueue,
    /// No message with that id.
    NoMessage,
    /// It is in flight: the named member read it.
    InFlight(String),
    /// There it is (taken out of the stream, if asked to).
    Found(Held),
}

/// What deleting a shared queue did.
pub enum Dropped {
    /// No stream by that name.
    NoQueue,
    /// A node holds messages of it, or read it a moment ago: it has
    /// consumers. The member, and how many it holds.
    InUse(String, u64),
    /// Gone, with this many messages.
    Dropped(u64),
}
