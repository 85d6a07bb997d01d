//! What became of numbered messages. Every message of a run carries its
//! number in the property `n`; a [`Ledger`] keeps, for one receiver (a
//! queue's consumers together, or one topic subscriber), which numbers
//! were handed out, whose send failed, and how often each arrived, so that
//! a run can say what was lost and what came twice.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use herald_client::Message;

/// The numbered messages of one stream, as one receiver saw them.
pub struct Ledger {
    pub name: String,
    /// Numbers handed out so far: 0 to `issued` - 1.
    issued: AtomicU64,
    /// Numbers whose send failed (refused, or no receipt): not expected,
    /// though one whose outcome was unknown may still arrive.
    failed: Mutex<Vec<u64>>,
    /// Deliveries of each number, saturating.
    got: Mutex<Vec<u8>>,
    /// Second deliveries not marked redelivered.
    unmarked: AtomicU64,
    /// When the first second delivery came.
    first_duplicate: Mutex<Option<SystemTime>>,
    /// Messages found in the dead-letter queue at the end.
    pub dead: AtomicU64,
}

/// A ledger's totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// Numbers handed out.
    pub issued: u64,
    /// Numbers whose send succeeded: receipted, or sent without a receipt
    /// and not refused.
    pub expected: u64,
    /// Numbers that arrived at least once.
    pub delivered: u64,
    /// Expected numbers that never arrived.
    pub lost: u64,
    /// Arrivals beyond each number's first.
    pub duplicates: u64,
    /// Of those, the ones not marked redelivered.
    pub unmarked: u64,
}

impl Ledger {
    pub fn new(name: &str) -> Arc<Ledger> {
        Arc::new(Ledger {
            name: name.to_owned(),
            issued: AtomicU64::new(0),
            failed: Mutex::new(Vec::new()),
            got: Mutex::new(Vec::new()),
            unmarked: AtomicU64::new(0),
            first_duplicate: Mutex::new(None),
            dead: AtomicU64::new(0),
        })
    }

    /// The next number to send.
    pub fn issue(&self) -> u64 {
        self.issued.fetch_add(1, Ordering::Relaxed)
    }

    /// The send of number `n` failed.
    pub fn failed(&self, n: u64) {
        lock(&self.failed).push(n);
    }

    /// This receiver expects what `other` was sent: several subscribers
    /// of one topic share its numbers.
    pub fn expect_as(&self, other: &Ledger) {
        self.issued
            .store(other.issued.load(Ordering::Relaxed), Ordering::Relaxed);
        *lock(&self.failed) = lock(&other.failed).clone();
    }

    /// Counts an arrival; a message without a number is ignored.
    pub fn received(&self, m: &Message) {
        let Some(n) = m.property("n").and_then(|v| v.as_i64()) else {
            return;
        };
        let Ok(n) = usize::try_from(n) else { return };
        let mut got = lock(&self.got);
        if got.len() <= n {
            got.resize(n + 1, 0);
        }
        if got[n] > 0 {
            lock(&self.first_duplicate).get_or_insert_with(SystemTime::now);
            if !m.redelivered {
                self.unmarked.fetch_add(1, Ordering::Relaxed);
            }
        }
        got[n] = got[n].saturating_add(1);
    }

    /// When the first second delivery came, if one did.
    pub fn first_duplicate(&self) -> Option<SystemTime> {
        *lock(&self.first_duplicate)
    }

    /// The first `limit` expected numbers that have not arrived.
    pub fn missing(&self, limit: usize) -> Vec<u64> {
        let failed = self.failed_sorted();
        let got = lock(&self.got);
        (0..self.issued.load(Ordering::Relaxed))
            .filter(|&n| got.get(n as usize).is_none_or(|&k| k == 0))
            .filter(|n| failed.binary_search(n).is_err())
            .take(limit)
            .collect()
    }

    /// The numbers whose send failed, sorted, each once.
    fn failed_sorted(&self) -> Vec<u64> {
        let mut failed = lock(&self.failed).clone();
        failed.sort_unstable();
        failed.dedup();
        failed
    }

    /// Whether every expected number has arrived.
    pub fn complete(&self) -> bool {
        self.tally().lost == 0
    }

    pub fn tally(&self) -> Tally {
        let issued = self.issued.load(Ordering::Relaxed);
        let failed = self.failed_sorted();
        let got = lock(&self.got);
        let (mut delivered, mut lost, mut duplicates) = (0, 0, 0);
        for n in 0..issued {
            match got.get(n as usize).copied().unwrap_or(0) {
                0 if failed.binary_search(&n).is_err() => lost += 1,
                0 => {}
                k => {
                    delivered += 1;
                    duplicates += u64::from(k - 1);
                }
            }
        }
        Tally {
            issued,
            expected: issued - failed.len() as u64,
            delivered,
            lost,
            duplicates,
            unmarked: self.unmarked.load(Ordering::Relaxed),
        }
    }
}

pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbered(n: i64, redelivered: bool) -> Message {
        let mut m = Message::text("x").with_property("n", n);
        m.redelivered = redelivered;
        m
    }

    #[test]
    fn a_ledger_counts_lost_duplicated_and_unmarked_numbers() {
        let ledger = Ledger::new("q");
        for _ in 0..5 {
            ledger.issue();
        }
        ledger.failed(3);
        ledger.failed(4);
        // 0 twice (marked), 1 three times (once unmarked), 2 never; 4
        // failed yet arrived (its outcome was unknown), 3 failed and did
        // not.
        for (n, again) in [
            (0, false),
            (0, true),
            (1, false),
            (1, true),
            (1, false),
            (4, false),
        ] {
            ledger.received(&numbered(n, again));
        }
        ledger.received(&Message::text("no number"));
        let t = ledger.tally();
        assert_eq!(
            (
                t.issued,
                t.expected,
                t.delivered,
                t.lost,
                t.duplicates,
                t.unmarked
            ),
            (5, 3, 3, 1, 3, 1)
        );
        assert!(ledger.first_duplicate().is_some());
        assert!(!ledger.complete());
        assert_eq!(ledger.missing(10), vec![2]);

        let subscriber = Ledger::new("s");
        subscriber.expect_as(&ledger);
        assert_eq!(subscriber.tally().lost, 3);
        assert_eq!(subscriber.first_duplicate(), None);
    }
}
