//! What a queue holds: a message with its place in the order, its
//! delivery count and where it is kept (the journal, or a Redis stream
//! entry). Shared by the queue and its ready set.

use bytes::Bytes;

/// A message held by a queue.
#[derive(Debug, Clone)]
pub struct QueuedMessage {
    /// Position in the queue's order.
    pub seq: u64,
    /// The encoded message block.
    pub block: Bytes,
    /// Its message group (a key of its `JMSXGroupID`), if it has one.
    pub group: Option<u64>,
    /// Times it has been delivered so far.
    pub deliveries: u32,
    /// Its record in the store, for a persistent message.
    pub journal_id: Option<u64>,
    /// 0 to 9: higher goes first.
    pub priority: u8,
    /// Milliseconds since the epoch after which it is not delivered; 0 =
    /// never.
    pub expiration: i64,
    /// Its entry in the queue's Redis stream, for a queue shared by the
    /// nodes of a cluster.
    pub entry: Option<EntryId>,
    /// Kept from before a restart: it may have been delivered then (the
    /// journal does not record deliveries), so each delivery reports one
    /// more than the server has counted and the first is marked
    /// redelivered; `max_deliveries` counts only the server's own.
    pub restored: bool,
}

/// The id of a Redis stream entry (`<ms>-<seq>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryId {
    /// Milliseconds part.
    pub ms: u64,
    /// Sequence part.
    pub seq: u64,
    /// Which of its queue's streams holds it: 0 the queue's own, `n` the
    /// partition `n - 1` of its message groups (see
    /// `crate::cluster::groups`). Not part of the id Redis gives.
    pub part: u8,
}

impl EntryId {
    /// Parses `<ms>-<seq>`.
    pub fn parse(text: &[u8]) -> Option<EntryId> {
        let text = std::str::from_utf8(text).ok()?;
        let (ms, seq) = text.split_once('-')?;
        Some(EntryId {
            ms: ms.parse().ok()?,
            seq: seq.parse().ok()?,
            part: 0,
        })
    }

    /// Whether it is in a partition of its queue's message groups, which
    /// one node at a time reads, in order.
    pub fn in_partition(&self) -> bool {
        self.part > 0
    }
}

impl std::fmt::Display for EntryId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

impl QueuedMessage {
    /// Whether it has expired at `now_ms`.
    pub fn expired(&self, now_ms: i64) -> bool {
        self.expiration != 0 && self.expiration <= now_ms
    }
}
