//! The memory bounds on queued messages: each address's own
//! (`max_size_bytes` in `[[addresses]]`) and the server's
//! (`queues.max_memory_bytes`, Artemis's `global-max-size`).
//!
//! Every queue (named, durable, temporary, an acknowledged topic
//! subscription's) is registered here when it is made. At most every
//! [`SAMPLE_EVERY`], a worker's tick weighs them all. A queue over its own
//! `max_size_bytes` is marked full; when all together hold more than
//! `queues.max_memory_bytes`, the largest are marked full too, the largest
//! first, until what the rest hold is under 95 % of it. A queue marked
//! full holds back or refuses its publishers as its `full_policy` says,
//! and no one else's: one queue that nobody drains stops only its own
//! publishers. A mark is lifted below 95 % of the bound that set it, so
//! that one drained message does not let a burst through, and the
//! publishers it held are woken. The sums are taken, not kept up to date
//! on every message: the hot path pays nothing, and a burst can pass a
//! bound by what arrives within one sample.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, Weak};
use std::time::{Duration, Instant};

use super::address::ConnectionRef;
use super::queue::{Limit, Queue, SharedQueue};
use crate::sync::lock;

/// How often the queues are weighed.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// What the queues weigh, and whether that is over the limit.
pub struct Memory {
    /// The limit in bytes; 0 = none.
    limit: usize,
    used: AtomicUsize,
    over: AtomicBool,
    queues: Mutex<Vec<Weak<Mutex<Queue>>>>,
    sampled: Mutex<Option<Instant>>,
}

impl Memory {
    /// No queues yet, and a limit of `limit` bytes (0 = none).
    pub fn new(limit: usize) -> Memory {
        Memory {
            limit,
            used: AtomicUsize::new(0),
            over: AtomicBool::new(false),
            queues: Mutex::new(Vec::new()),
            sampled: Mutex::new(None),
        }
    }

    /// Counts `queue` from now on, until it is dropped.
    pub fn register(&self, queue: &SharedQueue) {
        lock(&self.queues).push(std::sync::Arc::downgrade(queue));
    }

    /// Whether the queues held more than the server's limit when last
    /// weighed (the largest of them hold their publishers back).
    pub fn over(&self) -> bool {
        self.over.load(Ordering::Relaxed)
    }

    /// Every queue registered and still alive.
    pub fn queues(&self) -> Vec<SharedQueue> {
        let mut queues = lock(&self.queues);
        queues.retain(|q| q.strong_count() > 0);
        queues.iter().filter_map(Weak::upgrade).collect()
    }

    /// Bytes the queues held when last weighed.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// The limit, in bytes; 0 = none.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Weighs the queues if the last time was long enough ago (or never);
    /// returns the publishers a queue no longer holds back, to wake.
    pub fn sample(&self, now: Instant) -> Vec<ConnectionRef> {
        {
            let mut sampled = lock(&self.sampled);
            if sampled.is_some_and(|at| now.duration_since(at) < SAMPLE_EVERY) {
                return Vec::new();
            }
            *sampled = Some(now);
        }
        self.weigh()
    }

    /// Weighs the queues now, forgetting those that are gone, and marks
    /// those over a bound (see the module's doc); returns the publishers a
    /// queue no longer holds back, to wake.
    pub fn weigh(&self) -> Vec<ConnectionRef> {
        let mut woken = Vec::new();
        let live = self.queues();
        let mut sizes: Vec<(usize, &SharedQueue)> =
            live.iter().map(|q| (lock(q).bytes(), q)).collect();
        let used: usize = sizes.iter().map(|(bytes, _)| bytes).sum();
        self.used.store(used, Ordering::Relaxed);
        let over = self.limit != 0
            && {
                let was = self.over();
                let now_over = used >= if was { lower(self.limit) } else { self.limit };
                if now_over != was {
                    self.over.store(now_over, Ordering::Relaxed);
                    match now_over {
                    true => log::warn!(
                        "queued messages hold {used} bytes, over queues.max_memory_bytes ({}): the largest queues are marked full (they page, or hold back or refuse their publishers, as their full_policy says)",
                        self.limit
                    ),
                    false => log::info!("queued messages hold {used} bytes: publishers go on"),
                }
                }
                now_over
            };
        // The largest first; those past the point where the rest fit
        // under 95 % of the limit are held back for memory.
        sizes.sort_by_key(|(bytes, _)| std::cmp::Reverse(*bytes));
        let mut rest = used;
        for (bytes, queue) in sizes {
            let for_memory = over && rest >= lower(self.limit);
            rest -= bytes;
            let mut q = lock(queue);
            let mark = match for_memory {
                true => Some(Limit::Memory(self.limit)),
                false => own_bound(&q, bytes),
            };
            q.set_over(mark);
            if mark.is_none() {
                woken.extend(q.take_waiters_if_room());
            }
        }
        woken
    }
}

/// 95 % of `limit`: where a mark is lifted.
fn lower(limit: usize) -> usize {
    limit - limit / 20
}

/// Whether `q`, holding `bytes`, is over its address's `max_size_bytes`:
/// from reaching it until it is back under 95 % of it.
fn own_bound(q: &Queue, bytes: usize) -> Option<Limit> {
    let max = q.settings().max_size_bytes;
    let was = matches!(q.over(), Some(Limit::Bytes(_)));
    let over = max != 0 && bytes >= if was { lower(max) } else { max };
    over.then_some(Limit::Bytes(max))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addresses::AddressSettings;
    use bytes::Bytes;
    use herald_protocol::Destination;
    use std::sync::Arc;

    fn queue(name: &str, max_size_bytes: usize) -> SharedQueue {
        let mut s = AddressSettings::defaults(&Default::default(), &Destination::queue(name));
        s.max_size_bytes = max_size_bytes;
        Arc::new(Mutex::new(Queue::new(name, None, Arc::new(s))))
    }

    fn block(n: usize) -> Bytes {
        Bytes::from(vec![0u8; n])
    }

    #[test]
    fn the_limit_is_reached_at_it_and_left_below_95_percent() {
        let memory = Memory::new(1000);
        let q = queue("q", 0);
        memory.register(&q);
        lock(&q).restore(block(600), None, None);
        memory.weigh();
        assert!(!memory.over());
        lock(&q).restore(block(400), None, None);
        memory.weigh();
        assert!(memory.over());
        assert_eq!(memory.used(), 1000);
        assert_eq!(lock(&q).over(), Some(Limit::Memory(1000)));
        let drained = lock(&q).purge();
        assert_eq!(drained.len(), 2);
        lock(&q).restore(block(960), None, None);
        memory.weigh();
        assert!(memory.over(), "still within 5 % of the limit");
        lock(&q).purge();
        memory.weigh();
        assert!(!memory.over());
        assert_eq!(lock(&q).over(), None);
        drop(q);
        memory.weigh();
        assert_eq!(memory.used(), 0);
        assert!(memory.queues().is_empty(), "a dropped queue is forgotten");
    }

    #[test]
    fn over_the_limit_only_the_largest_queues_are_held_back() {
        let memory = Memory::new(1000);
        let (big, middle, small) = (queue("big", 0), queue("middle", 0), queue("small", 0));
        for (q, bytes) in [(&big, 700), (&middle, 300), (&small, 100)] {
            memory.register(q);
            lock(q).restore(block(bytes), None, None);
        }
        memory.weigh();
        assert!(memory.over());
        // Without the largest, 400 bytes: under 950.
        assert_eq!(lock(&big).over(), Some(Limit::Memory(1000)));
        assert_eq!(lock(&middle).over(), None);
        assert_eq!(lock(&small).over(), None);
        assert!(lock(&small).check_publish().is_ok());
    }

    #[test]
    fn a_queue_over_its_own_size_is_held_back_alone() {
        let memory = Memory::new(0);
        let (capped, other) = (queue("capped", 500), queue("other", 0));
        memory.register(&capped);
        memory.register(&other);
        lock(&capped).restore(block(500), None, None);
        lock(&other).restore(block(5000), None, None);
        memory.weigh();
        assert_eq!(lock(&capped).over(), Some(Limit::Bytes(500)));
        assert_eq!(lock(&other).over(), None);
        assert!(lock(&capped).check_publish().is_err());
        // Back under 95 % of its bound only.
        lock(&capped).purge();
        lock(&capped).restore(block(480), None, None);
        memory.weigh();
        assert_eq!(lock(&capped).over(), Some(Limit::Bytes(500)));
        lock(&capped).purge();
        lock(&capped).restore(block(470), None, None);
        memory.weigh();
        assert_eq!(lock(&capped).over(), None);
    }
}
