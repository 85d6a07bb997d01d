//! What the other threads ask of the outbound thread ([`Command`]), and
//! how full its queue may get.

use bytes::Bytes;

use super::durables::Member;
use super::requests::Held;
use super::settings::Change;
use crate::broker::{ConnectionRef, DurableRecord, EntryId, SharedChanges};
use crate::store::Completion;

/// Commands waiting for the outbound thread, past which topic messages
/// are dropped (queue messages and settlements never are).
pub(super) const OUTBOUND_QUEUE: usize = 65_536;

/// Past this many waiting, publishers pause (while Redis is there).
pub(super) const OUTBOUND_HIGH: usize = OUTBOUND_QUEUE / 4;

/// Publishers go on once no more than this many wait.
pub(super) const OUTBOUND_LOW: usize = OUTBOUND_QUEUE / 16;

/// What the outbound thread does in Redis, in the order given.
pub(super) enum Command {
    /// Publish a topic message for another node, on its inbox.
    Publish {
        channel: std::sync::Arc<str>,
        payload: Bytes,
    },
    /// Append a message to a shared queue's stream.
    Append {
        queue: String,
        block: Bytes,
        from: Option<ConnectionRef>,
    },
    /// A shared queue's entry is done with: acknowledge and delete it.
    Settle { queue: String, entry: EntryId },
    /// A committed transaction's changes, in MULTI/EXEC.
    Commit {
        changes: SharedChanges,
        from: Option<ConnectionRef>,
    },
    /// Messages this node read and gives back for other nodes: appended
    /// anew with their delivery counts, their old entries settled, in
    /// MULTI/EXEC.
    Release { queue: String, messages: Vec<Held> },
    /// Register a durable subscription (`Some`: its encoded record) or
    /// delete one, and announce it.
    Registry {
        stream: String,
        record: Option<DurableRecord>,
        by: Member,
    },
    /// Change the shared configuration, and announce it.
    Settings { change: Change, node_id: String },
    /// A persistent topic message routed knowing the registry at
    /// `epoch`, to the streams `appended`; see `Peers::recheck`.
    Recheck {
        topic: String,
        block: Bytes,
        epoch: u64,
        appended: Vec<String>,
        from: Option<ConnectionRef>,
    },
    /// Answer once everything before it was answered.
    Barrier {
        from: Option<ConnectionRef>,
        done: Completion,
    },
}

/// What became of commands that did not reach Redis.
#[derive(Default)]
pub(super) struct Outcomes {
    /// Connections (by serial: one may move between workers meanwhile)
    /// something of whose was not accepted: their next barrier fails.
    pub(super) failed: std::collections::HashSet<Option<u64>>,
    /// Settlements to send again once Redis is back: acknowledging twice
    /// is harmless, never acknowledging would hold the entry forever.
    pub(super) retry: Vec<Command>,
    /// Topic messages lost.
    pub(super) dropped: u64,
}
