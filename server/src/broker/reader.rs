//! DDS reader policies that a plain topic subscription asks for, applied
//! by the broker to its deliveries, per instance (a keyed topic's, see
//! `super::instances`; else each topic is one):
//!
//! - the **time-based filter**: at most one sample per instance per
//!   `time_filter_ms`; one that comes sooner is held back, replacing any
//!   held before it, and the newest held is delivered when the window
//!   ends, so that the last value is never lost;
//! - **destination order by source timestamp**: a sample whose timestamp
//!   is older than the newest one taken of its instance is dropped, and
//!   counted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use bytes::Bytes;
use herald_protocol::frame::ReaderQos;

use crate::collections::FastMap;
use crate::sync::lock;

/// The longest time-based filter: a day (a longer one is refused).
pub(super) const MAX_TIME_FILTER_MS: u64 = 86_400_000;

/// Instances a reader keeps state for at most: past it the state is
/// forgotten (the next sample of each is taken as a first), so that a
/// pattern over topics named per entity does not grow it without bound.
const MAX_TRACKED: usize = 100_000;

/// What happens to a sample a reader is offered.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Taken {
    /// Deliver it now.
    Now,
    /// Held back until the instance's window ends; `Some(due)`: no timer
    /// waits for the instance yet, set one for `due` (ms).
    Held(Option<i64>),
    /// Dropped: older by its source timestamp than one taken before.
    Stale,
}

/// One instance, as a reader has seen it.
#[derive(Default)]
struct Seen {
    /// When a sample was last delivered (ms; 0: never).
    delivered_at: i64,
    /// The newest source timestamp taken (delivered or held).
    newest: i64,
    /// The sample held back by the time filter.
    held: Option<Bytes>,
    /// A timer waits to deliver what is held.
    armed: bool,
}

/// A subscription's reader policies and what it has seen of each
/// instance.
pub struct Reader {
    qos: ReaderQos,
    seen: Mutex<FastMap<String, Seen>>,
    /// Samples dropped as stale, and held back then replaced.
    dropped: AtomicU64,
}

impl Reader {
    /// A reader with `qos`, if it asks for anything applied to
    /// deliveries.
    pub(super) fn new(qos: ReaderQos) -> Option<Reader> {
        (qos.time_filter_ms > 0 || qos.by_source_timestamp).then(|| Reader {
            qos,
            seen: Mutex::default(),
            dropped: AtomicU64::new(0),
        })
    }

    /// Offers the sample `block` of instance `key`, with source timestamp
    /// `source`, at `now` (ms).
    pub(super) fn offer(&self, key: &str, block: &Bytes, source: i64, now: i64) -> Taken {
        let mut seen = lock(&self.seen);
        if seen.len() >= MAX_TRACKED && !seen.contains_key(key) {
            seen.clear();
        }
        let s = match seen.get_mut(key) {
            Some(s) => s,
            None => seen.entry(key.to_owned()).or_default(),
        };
        if self.qos.by_source_timestamp && source < s.newest {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return Taken::Stale;
        }
        s.newest = s.newest.max(source);
        let window = self.qos.time_filter_ms.min(MAX_TIME_FILTER_MS) as i64;
        if window > 0 && s.delivered_at != 0 && now - s.delivered_at < window {
            if s.held.replace(block.clone()).is_some() {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
            if s.armed {
                return Taken::Held(None);
            }
            s.armed = true;
            return Taken::Held(Some(s.delivered_at + window));
        }
        s.delivered_at = now;
        // A sample delivered now makes one held before it stale.
        if s.held.take().is_some() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        Taken::Now
    }

    /// At the end of instance `key`'s window (`now`): the sample held
    /// back, to deliver.
    pub(super) fn window_ended(&self, key: &str, now: i64) -> Option<Bytes> {
        let mut seen = lock(&self.seen);
        let s = seen.get_mut(key)?;
        s.armed = false;
        let held = s.held.take()?;
        s.delivered_at = now;
        Some(held)
    }

    /// Samples dropped: stale by their source timestamp, or held back and
    /// replaced by a newer one.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qos(time_filter_ms: u64, by_source_timestamp: bool) -> Reader {
        Reader::new(ReaderQos {
            time_filter_ms,
            by_source_timestamp,
            history: 0,
        })
        .unwrap()
    }

    #[test]
    fn the_time_filter_holds_back_all_but_the_newest_and_delivers_it_at_the_windows_end() {
        let r = qos(100, false);
        let b = |n: u8| Bytes::from(vec![n]);
        assert_eq!(r.offer("a", &b(1), 0, 1000), Taken::Now);
        assert_eq!(r.offer("a", &b(2), 0, 1010), Taken::Held(Some(1100)));
        assert_eq!(r.offer("a", &b(3), 0, 1050), Taken::Held(None));
        // Another instance has its own window.
        assert_eq!(r.offer("b", &b(9), 0, 1050), Taken::Now);
        assert_eq!(r.window_ended("a", 1100), Some(b(3)));
        assert_eq!(r.dropped(), 1, "2 was replaced by 3");
        assert_eq!(r.offer("a", &b(4), 0, 1150), Taken::Held(Some(1200)));
        assert_eq!(r.window_ended("a", 1200), Some(b(4)));
        assert_eq!(r.window_ended("a", 1300), None);
        assert_eq!(r.offer("a", &b(5), 0, 1400), Taken::Now);
        assert!(Reader::new(ReaderQos::default()).is_none());
    }

    #[test]
    fn by_source_timestamp_a_sample_older_than_one_taken_is_dropped() {
        let r = qos(0, true);
        let b = Bytes::new();
        assert_eq!(r.offer("a", &b, 20, 1), Taken::Now);
        assert_eq!(r.offer("a", &b, 10, 2), Taken::Stale);
        assert_eq!(r.offer("a", &b, 20, 3), Taken::Now, "as new as the newest");
        assert_eq!(r.offer("b", &b, 5, 4), Taken::Now);
        assert_eq!(r.dropped(), 1);
    }
}
