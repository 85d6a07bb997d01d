//! A subscriber connection's backlog signal, which its publishers read.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Set while a connection has more waiting to be written than it drains
/// at once, and is draining it: publishers to its subscriptions pause
/// briefly, as NATS stalls a fast producer, instead of growing the
/// backlog until the subscriber is cut off. Shared by the connection's
/// worker, which sets it, and every worker that routes to it.
///
/// Bytes routed to the connection and not yet queued on it (on their way
/// from another worker) count too: a subscriber's worker that is slow to
/// take its deliveries must not let publishers run ahead unseen.
#[derive(Debug, Default)]
pub struct Backlog {
    high: AtomicBool,
    in_flight: AtomicUsize,
    /// The connection's threshold, for `in_flight`; 0 = not known yet.
    limit: AtomicUsize,
}

impl Backlog {
    /// Whether publishers should pause.
    pub fn is_high(&self) -> bool {
        let limit = self.limit.load(Ordering::Relaxed);
        self.high.load(Ordering::Relaxed)
            || (limit > 0 && self.in_flight.load(Ordering::Relaxed) > limit)
    }

    /// Says whether publishers should pause.
    pub fn set(&self, high: bool) {
        self.high.store(high, Ordering::Relaxed);
    }

    /// Past how many bytes in flight publishers should pause; 0 = never
    /// for that.
    pub fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    /// A publisher routed `bytes` to the connection.
    pub fn routed(&self, bytes: usize) {
        self.in_flight.fetch_add(bytes, Ordering::Relaxed);
    }

    /// The connection's worker queued `bytes` of what was routed to it.
    pub fn arrived(&self, bytes: usize) {
        // Saturating: messages kept for new subscribers arrive without
        // having been counted on the way.
        let _ = self
            .in_flight
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(bytes))
            });
    }
}
