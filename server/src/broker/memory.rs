//! The server's memory limit for queued messages (Artemis's
//! `global-max-size`, RabbitMQ's memory high-water mark).
//!
//! Every queue (named, durable, temporary, an acknowledged topic
//! subscription's) is registered here when it is made. At most every
//! [`SAMPLE_EVERY`], a worker's tick adds up what they all hold; above
//! `queues.max_memory_bytes`, the limit is reached, and publishers are
//! held or refused by `queues.full_policy` until it is back under 95 % of
//! it, so that one drained message does not let a burst through. The sum
//! is taken, not kept up to date on every message: the hot path pays one
//! relaxed load, and a burst can pass the limit by what arrives within
//! one sample.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, Weak};
use std::time::{Duration, Instant};

use super::queue::{Queue, SharedQueue};
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

    /// Whether publishers must wait: the queues held more than the limit
    /// when last weighed.
    pub fn over(&self) -> bool {
        self.over.load(Ordering::Relaxed)
    }

    /// Bytes the queues held when last weighed.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// The limit, in bytes; 0 = none.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Weighs the queues if the last time was long enough ago (or never).
    pub fn sample(&self, now: Instant) {
        {
            let mut sampled = lock(&self.sampled);
            if sampled.is_some_and(|at| now.duration_since(at) < SAMPLE_EVERY) {
                return;
            }
            *sampled = Some(now);
        }
        self.weigh();
    }

    /// Weighs the queues now, forgetting those that are gone.
    pub fn weigh(&self) {
        let live: Vec<SharedQueue> = {
            let mut queues = lock(&self.queues);
            queues.retain(|q| q.strong_count() > 0);
            queues.iter().filter_map(Weak::upgrade).collect()
        };
        let used: usize = live.iter().map(|q| lock(q).bytes()).sum();
        self.used.store(used, Ordering::Relaxed);
        if self.limit == 0 {
            return;
        }
        let was = self.over();
        let now_over = if was {
            used >= self.limit - self.limit / 20
        } else {
            used >= self.limit
        };
        if now_over != was {
            self.over.store(now_over, Ordering::Relaxed);
            match now_over {
                true => log::warn!(
                    "queued messages hold {used} bytes, over queues.max_memory_bytes ({}): publishers are held back",
                    self.limit
                ),
                false => log::info!("queued messages hold {used} bytes: publishers go on"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::queue::QueueLimits;
    use bytes::Bytes;
    use std::sync::Arc;

    #[test]
    fn the_limit_is_reached_at_it_and_left_below_95_percent() {
        let memory = Memory::new(1000);
        let limits = QueueLimits {
            max_deliveries: 10,
            max_messages: 1000,
        };
        let q: SharedQueue = Arc::new(Mutex::new(Queue::new("q", None, limits)));
        memory.register(&q);
        let block = |n: usize| Bytes::from(vec![0u8; n]);
        lock(&q).restore(block(600), None, None);
        memory.weigh();
        assert!(!memory.over());
        lock(&q).restore(block(400), None, None);
        memory.weigh();
        assert!(memory.over());
        assert_eq!(memory.used(), 1000);
        let drained = lock(&q).purge();
        assert_eq!(drained.len(), 2);
        lock(&q).restore(block(960), None, None);
        memory.weigh();
        assert!(memory.over(), "still within 5 % of the limit");
        lock(&q).purge();
        memory.weigh();
        assert!(!memory.over());
        drop(q);
        memory.weigh();
        assert_eq!(memory.used(), 0);
        assert!(
            lock(&memory.queues).is_empty(),
            "a dropped queue is forgotten"
        );
    }
}
