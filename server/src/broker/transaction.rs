//! A transaction's commit: between [`Broker::begin_atomic`] and
//! [`Broker::end_atomic`], what it journals becomes one atomic store
//! record, and the messages it puts in queues become visible only once
//! that record is appended, so no ACK of one of them can reach the store
//! ahead of it. In a cluster, its changes to shared queues go to Redis in
//! one MULTI/EXEC.

use super::*;

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
    /// Set between [`Broker::begin_atomic`] and [`Broker::end_atomic`] on
    /// this thread.
    pub(super) static TRANSACTION: RefCell<Option<Pending>> = const { RefCell::new(None) };
}

/// A commit in progress on this thread, from [`Broker::begin_atomic`];
/// dropped without [`Broker::end_atomic`] (a panic), it is forgotten.
#[must_use = "a commit ends with Broker::end_atomic"]
pub struct Atomic(());

impl Drop for Atomic {
    fn drop(&mut self) {
        TRANSACTION.set(None);
    }
}

impl Broker {
    /// Starts a commit on this thread: until [`Broker::end_atomic`],
    /// what publishing and settling journal is held back, and so are the
    /// messages they put in queues.
    pub fn begin_atomic(&self) -> Atomic {
        TRANSACTION.set(Some(Pending::default()));
        Atomic(())
    }

    /// Ends a commit: what it journalled is appended as one atomic record,
    /// and its messages enter their queues once that is on disk. Returns
    /// what the commit's RECEIPT must check.
    pub fn end_atomic(
        &self,
        atomic: Atomic,
        from: Option<ConnectionRef>,
        out: &mut Deliveries,
    ) -> Written {
        let pending = TRANSACTION.take().unwrap_or_default();
        drop(atomic);
        let mut written = Written::default();
        // With anything to keep, the transaction's messages (persistent or
        // not) enter their queues together once its record is on disk, or
        // none does.
        let inserts = match pending.records.is_empty() {
            true => pending.inserts,
            false => match self.insert_when_durable(pending.inserts, &mut written) {
                Ok(done) => {
                    self.store.append_atomically(pending.records, Some(done));
                    Vec::new()
                }
                Err(inserts) => {
                    self.store.append_atomically(pending.records, None);
                    inserts
                }
            },
        };
        if let (Some(peers), false) = (self.peers.get(), pending.shared.is_empty()) {
            peers.commit(pending.shared, from);
        }
        for (queue, block, journal_id) in inserts {
            self.insert(&queue, block, journal_id, out);
        }
        written
    }
}
