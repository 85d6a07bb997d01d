//! Actions due at a time: a delayed message's delivery to a plain topic
//! subscriber, and the dispatch of a queue whose scheduled message comes
//! due. Every worker's tick takes what has come due ([`Timers::due`]).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use bytes::Bytes;

use super::address::Subscriber;
use super::queue::SharedQueue;
use crate::sync::lock;

/// Something to do at a delivery time.
pub(super) enum Timed {
    /// Dispatch this queue (a scheduled message in it has come due).
    Queue(SharedQueue),
    /// Deliver this message to this plain topic subscriber.
    Direct(Subscriber, Bytes),
    /// The time-based filter's window of an instance (by its key) ended
    /// for this subscriber: deliver what it held back.
    Window(std::sync::Arc<super::reader::Reader>, String, Subscriber),
}

/// The actions waiting for their time, earliest first.
#[derive(Default)]
pub(super) struct Timers {
    heap: Mutex<BinaryHeap<Reverse<Timer>>>,
    /// Keeps actions due at the same moment in the order they were made.
    next_seq: AtomicU64,
}

impl Timers {
    /// Does `what` once the clock (`queue::now_ms`) reaches `due`.
    pub(super) fn schedule(&self, due: i64, what: Timed) {
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        lock(&self.heap).push(Reverse(Timer { due, seq, what }));
    }

    /// Takes what is due at `now`, in the order it fell due.
    pub(super) fn due(&self, now: i64) -> Vec<Timed> {
        let mut due = Vec::new();
        let mut heap = lock(&self.heap);
        while heap.peek().is_some_and(|t| t.0.due <= now) {
            if let Some(Reverse(t)) = heap.pop() {
                due.push(t.what);
            }
        }
        due
    }
}

/// A [`Timed`] action, ordered by when it is due.
struct Timer {
    due: i64,
    seq: u64,
    what: Timed,
}

impl PartialEq for Timer {
    fn eq(&self, other: &Timer) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}

impl Eq for Timer {}

impl PartialOrd for Timer {
    fn partial_cmp(&self, other: &Timer) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Timer {
    fn cmp(&self, other: &Timer) -> std::cmp::Ordering {
        (self.due, self.seq).cmp(&(other.due, other.seq))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subscriber(id: u32) -> Subscriber {
        Subscriber {
            conn: super::super::ConnectionRef {
                worker: 0,
                slot: 0,
                serial: 1,
            },
            subscription_id: id,
        }
    }

    fn ids(due: Vec<Timed>) -> Vec<u32> {
        due.into_iter()
            .map(|t| match t {
                Timed::Direct(s, _) => s.subscription_id,
                Timed::Queue(_) | Timed::Window(..) => u32::MAX,
            })
            .collect()
    }

    #[test]
    fn actions_come_due_in_time_order_and_ties_in_the_order_made() {
        let timers = Timers::default();
        for (due, id) in [(30, 1), (10, 2), (20, 3), (10, 4)] {
            timers.schedule(due, Timed::Direct(subscriber(id), Bytes::new()));
        }
        assert!(timers.due(9).is_empty());
        assert_eq!(ids(timers.due(10)), [2, 4]);
        assert_eq!(ids(timers.due(25)), [3]);
        assert_eq!(ids(timers.due(i64::MAX)), [1]);
        assert!(timers.due(i64::MAX).is_empty());
    }
}
