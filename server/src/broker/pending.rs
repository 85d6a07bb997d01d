//! A transaction being committed: what it holds back until its end (see
//! `transaction`). It travels in the routing context, `Deliveries`, from
//! the commit's beginning to its end, and the broker's functions that
//! journal or enqueue look there.

use bytes::Bytes;

use super::queue::{EntryId, SharedQueue};
use crate::store::Record;

/// A transaction being committed.
#[derive(Default)]
pub(super) struct Pending {
    /// Its store records, appended together at the end.
    pub(super) records: Vec<Record>,
    /// Its queue insertions, made once the records are appended.
    pub(super) inserts: Vec<(SharedQueue, Bytes, Option<u64>)>,
    /// In a cluster: messages for shared queues, and their stream entries
    /// settled, that go to Redis in one transaction at the end.
    pub(super) shared: SharedChanges,
}

/// Changes to queues shared through Redis that take effect together.
#[derive(Debug, Default)]
pub struct SharedChanges {
    /// (queue, message block) to append.
    pub sends: Vec<(String, Bytes)>,
    /// (queue, entry) done with.
    pub settled: Vec<(String, EntryId)>,
}

impl SharedChanges {
    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.sends.is_empty() && self.settled.is_empty()
    }
}

/// Proof of a commit begun with [`Broker::begin_atomic`](super::Broker::begin_atomic),
/// to end with [`Broker::end_atomic`](super::Broker::end_atomic).
#[must_use = "a commit ends with Broker::end_atomic"]
pub struct Atomic(pub(super) ());
