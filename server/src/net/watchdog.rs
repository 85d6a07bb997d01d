//! The workers' watchdog, run by the acceptor about once a second. A
//! worker whose loop has not turned for [`STALL`] is stuck (a bug, or one
//! client's cost that no limit caught) and serves none of its connections:
//! that is logged once, counted, and turns readiness false until its loop
//! turns again.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::stamp::Stamp;
use crate::frontend::WorkerStats;

/// How long a worker's loop may go without turning before it counts as
/// stuck: thirty of its longest waits (a tick is at most 100 ms).
pub const STALL: Duration = Duration::from_secs(3);

/// How often the acceptor looks.
pub const EVERY: Duration = Duration::from_secs(1);

/// When the workers were last looked at.
pub struct Watchdog {
    looked: Instant,
}

/// A watchdog that looks first in [`EVERY`].
impl Default for Watchdog {
    fn default() -> Watchdog {
        Watchdog {
            looked: Instant::now(),
        }
    }
}

impl Watchdog {
    /// How long until it looks again.
    pub fn due_in(&self) -> Duration {
        EVERY.saturating_sub(self.looked.elapsed())
    }

    /// Looks at the workers if it is time: marks each stuck one stalled
    /// (logged and counted once a stall) and each turning one not.
    pub fn look(&mut self, workers: &[WorkerStats]) {
        if !self.due_in().is_zero() {
            return;
        }
        self.looked = Instant::now();
        let now = Stamp::now();
        for (index, w) in workers.iter().enumerate() {
            let idle = now.since(Stamp::from_nanos(w.last_turn.load(Ordering::Relaxed)));
            let stuck = idle >= STALL;
            if stuck == w.stalled.swap(stuck, Ordering::AcqRel) {
                continue;
            }
            if stuck {
                w.stalls.fetch_add(1, Ordering::Relaxed);
                log::error!(
                    "herald-worker-{index} has made no progress for {} s: its connections are not served; \
                     readiness is false until it does",
                    idle.as_secs()
                );
            } else {
                log::warn!("herald-worker-{index} makes progress again");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_whose_loop_stops_turning_is_stalled_once_until_it_turns() {
        let workers = [WorkerStats::default(), WorkerStats::default()];
        let turned_now = || Stamp::now().nanos();
        let long_ago = turned_now().saturating_sub(STALL.as_nanos() as u64 + 1);
        workers[0].last_turn.store(turned_now(), Ordering::Relaxed);
        workers[1]
            .last_turn
            .store(long_ago.max(1), Ordering::Relaxed);
        let mut dog = Watchdog {
            looked: Instant::now() - EVERY,
        };
        dog.look(&workers);
        // Not due yet: nothing changes, however stuck.
        dog.look(&workers);
        assert!(!workers[0].stalled.load(Ordering::Relaxed));
        let stuck = workers[1].stalled.load(Ordering::Relaxed);
        // The process may be younger than STALL: then nothing is old enough.
        if long_ago > 1 {
            assert!(stuck);
            assert_eq!(workers[1].stalls.load(Ordering::Relaxed), 1);
        }
        workers[1].last_turn.store(turned_now(), Ordering::Relaxed);
        dog.looked = Instant::now() - EVERY;
        dog.look(&workers);
        assert!(!workers[1].stalled.load(Ordering::Relaxed));
        assert!(workers[1].stalls.load(Ordering::Relaxed) <= 1);
    }
}
