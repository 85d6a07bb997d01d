//! Moments in eight bytes, for the clocks every connection keeps.

use std::num::NonZeroU64;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A moment: nanoseconds (from 1) since the process first asked for one.
/// Half an `Instant`'s size, and `Option<Stamp>` is no bigger; it covers
/// 584 years.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Stamp(NonZeroU64);

impl Stamp {
    /// Now.
    pub fn now() -> Stamp {
        Stamp::at(Instant::now())
    }

    /// The moment `instant` (one before the first stamp counts as the
    /// first stamp).
    pub fn at(instant: Instant) -> Stamp {
        static EPOCH: OnceLock<Instant> = OnceLock::new();
        let epoch = *EPOCH.get_or_init(Instant::now);
        let nanos = instant.saturating_duration_since(epoch).as_nanos();
        Stamp(NonZeroU64::MIN.saturating_add(u64::try_from(nanos).unwrap_or(u64::MAX - 1)))
    }

    /// How long after `earlier` it is (zero if it is not after).
    pub fn since(self, earlier: Stamp) -> Duration {
        Duration::from_nanos(self.0.get().saturating_sub(earlier.0.get()))
    }

    /// How long ago it was.
    pub fn elapsed(self) -> Duration {
        Stamp::now().since(self)
    }

    /// Its nanoseconds, to keep in an atomic.
    pub fn nanos(self) -> u64 {
        self.0.get()
    }

    /// The stamp whose [`Stamp::nanos`] were `nanos` (0, never set,
    /// reads as the first stamp).
    pub fn from_nanos(nanos: u64) -> Stamp {
        Stamp(NonZeroU64::new(nanos).unwrap_or(NonZeroU64::MIN))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_measure_what_instants_do() {
        let first = Stamp::now();
        let i0 = Instant::now();
        let i1 = i0 + Duration::from_millis(20);
        let (s0, s1) = (Stamp::at(i0), Stamp::at(i1));
        assert!(first <= s0 && s0 < s1);
        assert_eq!(s1.since(s0), Duration::from_millis(20));
        assert_eq!(s0.since(s1), Duration::ZERO);
        assert!(first.elapsed() >= s0.since(first));
        assert_eq!(std::mem::size_of::<Option<Stamp>>(), 8);
    }
}
