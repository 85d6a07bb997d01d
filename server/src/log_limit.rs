//! Log lines that could repeat without end (a link that breaks as soon as
//! it is made, a peer that keeps failing): each is said at most once an
//! interval, and the next one said tells how many were held back, so that
//! no fault can fill a disk with log.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::sync::lock;

/// One kind of line's limit.
#[derive(Debug)]
pub struct LogLimit {
    every: Duration,
    state: Mutex<Said>,
}

#[derive(Debug, Default)]
struct Said {
    /// When a line was last said.
    at: Option<Instant>,
    /// Lines held back since.
    held: u64,
}

/// At most one line each ten seconds.
impl Default for LogLimit {
    fn default() -> LogLimit {
        LogLimit::new(Duration::from_secs(10))
    }
}

impl LogLimit {
    /// At most one line each `every`.
    pub const fn new(every: Duration) -> LogLimit {
        LogLimit {
            every,
            state: Mutex::new(Said { at: None, held: 0 }),
        }
    }

    /// Whether a line may be said now, with how many were held back since
    /// the last one; `None` holds this one back (and counts it).
    pub fn allow(&self) -> Option<u64> {
        self.allow_at(Instant::now())
    }

    fn allow_at(&self, now: Instant) -> Option<u64> {
        let mut said = lock(&self.state);
        if said
            .at
            .is_some_and(|at| now.duration_since(at) < self.every)
        {
            said.held += 1;
            return None;
        }
        said.at = Some(now);
        Some(std::mem::take(&mut said.held))
    }
}

/// What a line adds about the lines held back before it: nothing if none
/// were.
pub fn held_back(held: u64) -> String {
    match held {
        0 => String::new(),
        n => format!(" ({n} more like this held back)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_an_interval_and_the_next_says_how_many_were_held() {
        let limit = LogLimit::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(limit.allow_at(t0), Some(0));
        for i in 1..=5 {
            assert_eq!(limit.allow_at(t0 + Duration::from_secs(i)), None);
        }
        assert_eq!(limit.allow_at(t0 + Duration::from_secs(10)), Some(5));
        assert_eq!(limit.allow_at(t0 + Duration::from_secs(21)), Some(0));
        assert_eq!(held_back(0), "");
        assert_eq!(held_back(5), " (5 more like this held back)");
    }
}
