//! What the other threads ask of the outbound thread ([`Command`]), and
//! how full its queue may get.

use std::collections::HashMap;

use bytes::Bytes;

use super::durables::{Member, Step};
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
        /// The write's number (see [`Outcomes`]).
        seq: u64,
    },
    /// A shared queue's entry is done with: acknowledge and delete it.
    Settle { queue: String, entry: EntryId },
    /// A committed transaction's changes, in MULTI/EXEC.
    Commit {
        changes: SharedChanges,
        from: Option<ConnectionRef>,
        seq: u64,
    },
    /// Messages this node read and gives back for other nodes: appended
    /// anew with their delivery counts, their old entries settled, in
    /// MULTI/EXEC.
    Release { queue: String, messages: Vec<Held> },
    /// Register a durable subscription (`registered`) or delete one,
    /// and announce it: a step at a time, each once the one before it
    /// was answered (see [`Step`]).
    Registry {
        record: DurableRecord,
        registered: bool,
        by: Member,
        step: Step,
    },
    /// Change the shared configuration, and announce it.
    Settings {
        change: Change,
        node_id: String,
        seq: u64,
    },
    /// A persistent topic message routed knowing the registry at
    /// `epoch`, to the streams `appended`; see `Peers::recheck`.
    Recheck {
        topic: String,
        block: Bytes,
        epoch: u64,
        appended: Vec<String>,
        from: Option<ConnectionRef>,
        seq: u64,
    },
    /// Answer once everything before it was answered: with an error if a
    /// write of `from`'s numbered up to `covers` failed, or is not known
    /// to be on enough replicas.
    Barrier {
        from: Option<ConnectionRef>,
        covers: u64,
        done: Completion,
    },
    /// Connection `serial` closed: what its barriers were to answer for
    /// is forgotten (a receipt still on its way has nobody to go to).
    Forget { serial: u64 },
}

/// What became of commands that did not reach Redis, and what each
/// sender's next receipts must know of its writes (kept until the sender's
/// connection closes, [`Command::Forget`]).
///
/// Writes done for a sender (appends, commits, rechecks, settings
/// changes) are numbered in the order the node routed them, and a barrier
/// covers the writes numbered up to the count when it was asked for. A
/// sender's barriers lag behind its writes (a barrier first waits for the
/// journal), so several writes can come before the barrier of the first:
/// a failure must fail the barrier that covers it, not merely the next
/// one to come.
#[derive(Default)]
pub(super) struct Outcomes {
    /// Per sender (a connection's serial; `None` for the server's own),
    /// what its barriers still have to answer for.
    pub(super) writes: HashMap<Option<u64>, Writes>,
    /// Settlements to send again once Redis is back: acknowledging twice
    /// is harmless, never acknowledging would hold the entry forever.
    pub(super) retry: Vec<Command>,
    /// Registry changes whose step before was answered: their next
    /// step, sent before anything else.
    pub(super) next: Vec<Command>,
    /// Topic messages lost.
    pub(super) dropped: u64,
    /// Receipts refused, by why (see [`Refused`]).
    pub(super) refused: [u64; Refused::ALL.len()],
}

/// Why a receipt (a persistent send's, or a settlement's) was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Redis could not be reached, or broke the connection.
    Unreachable,
    /// Redis refused a write the receipt answers for.
    NotTaken,
    /// Fewer replicas than `cluster.min_replicas` confirmed it in time.
    Unreplicated,
}

impl Refused {
    /// Every reason, in the order of [`Outcomes::refused`].
    pub const ALL: [Refused; 3] = [
        Refused::Unreachable,
        Refused::NotTaken,
        Refused::Unreplicated,
    ];

    /// Its name in the metrics.
    pub fn name(self) -> &'static str {
        match self {
            Refused::Unreachable => "unreachable",
            Refused::NotTaken => "not_taken",
            Refused::Unreplicated => "unreplicated",
        }
    }
}

/// The Redis connection id that stands for "Redis did not take it": no
/// connection has it, so no `WAIT` ever confirms it.
pub(super) const NOT_TAKEN: u64 = 0;

/// Writes not taken that a sender's barriers answer for one by one; past
/// this many, more are kept as a span (see [`Writes::spans`]).
const NOT_TAKEN_EXACT: usize = 1024;

/// What one sender's barriers still answer for.
#[derive(Default)]
pub(super) struct Writes {
    /// The numbers of its writes Redis did not take. Kept one by one: a
    /// connection that sends to queues on several shards while one is
    /// down has the other shards' receipts interleaved with these.
    not_taken: Vec<u64>,
    /// (connection id, first and last write number) per Redis connection
    /// its writes went on. A span answers as a whole: each barrier that
    /// covers any of it fails if that connection's `WAIT` fell short (or
    /// the span stands for writes not taken), and what it does not cover
    /// stays for the next. At worst a receipt fails that could have
    /// passed, never the other way round.
    spans: Vec<(u64, u64, u64)>,
}

/// Why a barrier fails.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Uncovered {
    /// A write it covers was not taken.
    NotTaken,
    /// A write it covers went on a connection whose `WAIT` did not
    /// confirm it.
    Unreplicated,
}

impl Outcomes {
    /// Records that `sender`'s write number `seq` went on Redis
    /// connection `on` ([`NOT_TAKEN`] if Redis did not take it).
    pub(super) fn wrote(&mut self, sender: Option<u64>, seq: u64, on: u64) {
        let writes = self.writes.entry(sender).or_default();
        if on == NOT_TAKEN && writes.not_taken.len() < NOT_TAKEN_EXACT {
            writes.not_taken.push(seq);
            return;
        }
        match writes.spans.iter_mut().find(|s| s.0 == on) {
            // The server's own writes come from several threads, so
            // numbers can arrive out of order.
            Some(span) => (span.1, span.2) = (span.1.min(seq), span.2.max(seq)),
            None => writes.spans.push((on, seq, seq)),
        }
    }

    /// Answers for a barrier of `sender`'s covering its writes numbered
    /// up to `covers`, which are forgotten: fails if one was not taken,
    /// or went on a connection that `confirmed` does not hold.
    pub(super) fn cover(
        &mut self,
        sender: Option<u64>,
        covers: u64,
        confirmed: impl Fn(u64) -> bool,
    ) -> Result<(), Uncovered> {
        let Some(writes) = self.writes.get_mut(&sender) else {
            return Ok(());
        };
        let before = writes.not_taken.len();
        writes.not_taken.retain(|&seq| seq > covers);
        let mut answer = match writes.not_taken.len() < before {
            true => Err(Uncovered::NotTaken),
            false => Ok(()),
        };
        for &(on, _, _) in writes.spans.iter().filter(|s| s.1 <= covers) {
            if on == NOT_TAKEN {
                answer = Err(Uncovered::NotTaken);
            } else if answer.is_ok() && !confirmed(on) {
                answer = Err(Uncovered::Unreplicated);
            }
        }
        writes.spans.retain_mut(|span| {
            if span.1 <= covers {
                span.1 = covers + 1;
            }
            span.1 <= span.2
        });
        if writes.spans.is_empty() && writes.not_taken.is_empty() {
            self.writes.remove(&sender);
        }
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_fails_the_barrier_that_covers_it_not_merely_the_next() {
        // One sender's writes 1 and 2 go before the barrier of write 1
        // (barriers lag behind their writes); write 2 is not taken.
        let mut o = Outcomes::default();
        let s = Some(7);
        o.wrote(s, 2, NOT_TAKEN);
        assert_eq!(o.cover(s, 1, |_| true), Ok(()), "write 1 was taken");
        assert_eq!(o.cover(s, 2, |_| true), Err(Uncovered::NotTaken));
        assert_eq!(o.cover(s, 3, |_| true), Ok(()), "reported once");
        assert!(o.writes.is_empty());
        // Another sender's failure is not this one's.
        o.wrote(Some(8), 4, NOT_TAKEN);
        assert_eq!(o.cover(s, 5, |_| true), Ok(()));
        assert_eq!(o.cover(Some(8), 5, |_| true), Err(Uncovered::NotTaken));
        // Interleaved with writes that were taken (queues on another
        // shard), each failure fails its own barrier alone.
        for seq in [10, 12, 14] {
            o.wrote(s, seq, NOT_TAKEN);
        }
        o.wrote(s, 11, 3);
        o.wrote(s, 13, 3);
        let answers: Vec<bool> = (10..=14).map(|c| o.cover(s, c, |_| true).is_ok()).collect();
        assert_eq!(answers, [false, true, false, true, false]);
        assert!(o.writes.is_empty());
    }

    #[test]
    fn a_closed_connection_leaves_nothing_behind() {
        let mut o = Outcomes::default();
        o.wrote(Some(7), 1, NOT_TAKEN);
        o.wrote(Some(7), 2, 3);
        o.wrote(Some(8), 3, NOT_TAKEN);
        Command::Forget { serial: 7 }.done(&mut o, |_| true, "");
        assert_eq!(o.writes.len(), 1, "the other sender's writes stay");
        Command::Forget { serial: 8 }.fail("no Redis", &mut o);
        assert!(o.writes.is_empty());
    }

    #[test]
    fn past_the_exact_count_failures_are_answered_for_as_a_span() {
        let mut o = Outcomes::default();
        let s = Some(1);
        let last = NOT_TAKEN_EXACT as u64 + 2;
        for seq in 1..=last {
            o.wrote(s, seq, NOT_TAKEN);
        }
        assert_eq!(o.cover(s, last - 2, |_| true), Err(Uncovered::NotTaken));
        // The last two were kept as one span, which fails each barrier
        // that covers any of it.
        assert_eq!(o.cover(s, last - 1, |_| true), Err(Uncovered::NotTaken));
        assert_eq!(o.cover(s, last, |_| true), Err(Uncovered::NotTaken));
        assert!(o.writes.is_empty());
        assert_eq!(o.cover(s, last + 1, |_| true), Ok(()));
    }

    #[test]
    fn a_write_counts_as_replicated_only_on_a_confirmed_connection() {
        let mut o = Outcomes::default();
        let s = None;
        o.wrote(s, 1, 10);
        o.wrote(s, 3, 11);
        // Connection 11 is not confirmed, but the barrier covers write 1
        // alone.
        assert_eq!(o.cover(s, 2, |id| id == 10), Ok(()));
        assert_eq!(o.cover(s, 3, |id| id == 10), Err(Uncovered::Unreplicated));
        // A span is answered for whole: writes 4 and 6 on connection 12,
        // a barrier covering 4 fails for both, the next covering 6 then
        // only for what is left.
        o.wrote(s, 4, 12);
        o.wrote(s, 6, 12);
        assert_eq!(o.cover(s, 4, |_| false), Err(Uncovered::Unreplicated));
        assert_eq!(o.cover(s, 6, |id| id == 12), Ok(()));
        assert!(o.writes.is_empty());
    }
}
