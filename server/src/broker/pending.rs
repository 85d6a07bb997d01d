//! A transaction being committed on this thread: what it holds back until
//! its end (see `transaction`).

use std::cell::RefCell;

use bytes::Bytes;

use super::queue::{EntryId, SharedQueue};
use crate::store::Record;

/// A transaction being committed on this thread.
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

thread_local! {
    /// Set between [`Broker::begin_atomic`](super::Broker::begin_atomic) and [`Broker::end_atomic`](super::Broker::end_atomic) on
    /// this thread.
    pub(super) static TRANSACTION: RefCell<Option<Pending>> = const { RefCell::new(None) };
}

/// A commit in progress on this thread, from [`Broker::begin_atomic`](super::Broker::begin_atomic);
/// dropped without [`Broker::end_atomic`](super::Broker::end_atomic) (a panic), it is forgotten.
#[must_use = "a commit ends with Broker::end_atomic"]
pub struct Atomic(pub(super) ());

impl Drop for Atomic {
    fn drop(&mut self) {
        TRANSACTION.set(None);
    }
}
