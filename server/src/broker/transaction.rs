//! A transaction's commit: between [`Broker::begin_atomic`] and
//! [`Broker::end_atomic`], in the routing context they are given, what it
//! journals becomes one atomic store record, and the messages it puts in
//! queues become visible only once that record is appended, so no ACK of
//! one of them can reach the store ahead of it. In a cluster, its changes
//! to shared queues go to Redis in one MULTI/EXEC.

use super::delivery::Deliveries;
use super::pending::{Atomic, Pending};
use super::{Broker, ConnectionRef, Written};

impl Broker {
    /// Starts a commit in the routing context `out`: until
    /// [`Broker::end_atomic`], what publishing and settling through `out`
    /// journal is held back, and so are the messages they put in queues.
    pub fn begin_atomic(&self, out: &mut Deliveries) -> Atomic {
        out.commit = Some(Pending::default());
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
        let Atomic(()) = atomic;
        let pending = out.commit.take().unwrap_or_default();
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
