//! A queue's waiting messages in delivery order: higher priority first,
//! then first in, first out.
//!
//! One double-ended queue per priority, each ordered by sequence number.
//! A new message goes at the back of its priority's queue and the next
//! one to deliver is at the front of the highest non-empty one, so the
//! usual send and dispatch cost O(1) whatever the depth (a B-tree over
//! 100,000 waiting messages cost a fifth of a queue message's server
//! time). A message given back for redelivery goes to its place by
//! sequence number, and one taken from the middle (a selector passed over
//! what was before it) is found by binary search.

use std::collections::VecDeque;

use herald_protocol::message::MAX_PRIORITY;

use super::queued::QueuedMessage;

/// Where a waiting message is in the delivery order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadyKey {
    priority: u8,
    seq: u64,
}

impl ReadyKey {
    /// The key of the message with this priority and sequence number.
    pub fn new(priority: u8, seq: u64) -> ReadyKey {
        ReadyKey {
            priority: priority.min(MAX_PRIORITY),
            seq,
        }
    }
}

/// Waiting messages, by priority and then sequence number.
#[derive(Default)]
pub struct Ready {
    /// Index = priority.
    by_priority: [VecDeque<QueuedMessage>; MAX_PRIORITY as usize + 1],
    len: usize,
    /// The messages' blocks' bytes, for the server's memory limit.
    bytes: usize,
    /// How many of them have an expiration: while none has, the depth is
    /// `len` without looking at each.
    expiring: usize,
}

/// The priority a message is filed under (one read from a damaged block
/// could be out of range).
fn priority(m: &QueuedMessage) -> u8 {
    m.priority.min(MAX_PRIORITY)
}

impl Ready {
    /// Messages waiting.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Bytes of the waiting messages' blocks.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Files a message in its place.
    pub fn insert(&mut self, m: QueuedMessage) {
        self.bytes += m.block.len();
        self.expiring += usize::from(m.expiration != 0);
        let queue = &mut self.by_priority[priority(&m) as usize];
        match queue.back() {
            Some(last) if last.seq > m.seq => {
                let at = queue.partition_point(|x| x.seq < m.seq);
                queue.insert(at, m);
            }
            _ => queue.push_back(m),
        }
        self.len += 1;
    }

    /// The first message in delivery order after `key` (from the start if
    /// `None`), with its key.
    pub fn next_after(&self, key: Option<ReadyKey>) -> Option<(ReadyKey, &QueuedMessage)> {
        let (top, skip_to) = match key {
            None => (MAX_PRIORITY, None),
            Some(k) => (k.priority, Some(k.seq)),
        };
        for p in (0..=top).rev() {
            let queue = &self.by_priority[p as usize];
            let at = match skip_to {
                Some(seq) if p == top => queue.partition_point(|x| x.seq <= seq),
                _ => 0,
            };
            if let Some(m) = queue.get(at) {
                let key = ReadyKey {
                    priority: p,
                    seq: m.seq,
                };
                return Some((key, m));
            }
        }
        None
    }

    /// Takes out the message at `key`.
    pub fn remove(&mut self, key: ReadyKey) -> Option<QueuedMessage> {
        let queue = &mut self.by_priority[key.priority as usize];
        let taken = match queue.front() {
            Some(first) if first.seq == key.seq => queue.pop_front(),
            _ => {
                let at = queue.binary_search_by_key(&key.seq, |m| m.seq).ok()?;
                queue.remove(at)
            }
        };
        self.len -= usize::from(taken.is_some());
        self.bytes -= taken.as_ref().map_or(0, |m| m.block.len());
        self.expiring -= usize::from(taken.as_ref().is_some_and(|m| m.expiration != 0));
        taken
    }

    /// Whether the message at `key` is waiting.
    pub fn contains(&self, key: ReadyKey) -> bool {
        self.by_priority[key.priority as usize]
            .binary_search_by_key(&key.seq, |m| m.seq)
            .is_ok()
    }

    /// Every waiting message, in delivery order.
    pub fn iter(&self) -> impl Iterator<Item = &QueuedMessage> {
        self.by_priority.iter().rev().flatten()
    }

    /// Keeps the messages `keep` says to keep.
    pub fn retain(&mut self, mut keep: impl FnMut(&QueuedMessage) -> bool) {
        for queue in &mut self.by_priority {
            queue.retain(&mut keep);
        }
        self.len = self.by_priority.iter().map(VecDeque::len).sum();
        self.bytes = self.iter().map(|m| m.block.len()).sum();
        self.expiring = self.iter().filter(|m| m.expiration != 0).count();
    }

    /// Waiting messages that have not expired at `now_ms` (expired ones
    /// wait here until a dispatch sets them aside).
    pub fn live(&self, now_ms: i64) -> usize {
        match self.expiring {
            0 => self.len,
            _ => self.iter().filter(|m| !m.expired(now_ms)).count(),
        }
    }

    /// Takes out the messages expired at `now_ms`, in delivery order, and
    /// says when the first of those left expires.
    pub fn take_expired(&mut self, now_ms: i64) -> (Vec<QueuedMessage>, Option<i64>) {
        let mut expired = Vec::new();
        let mut next: Option<i64> = None;
        if self.expiring == 0 {
            return (expired, next);
        }
        for queue in self.by_priority.iter_mut().rev() {
            if !queue.iter().any(|m| m.expiration != 0) {
                continue;
            }
            for m in std::mem::take(queue) {
                if m.expired(now_ms) {
                    self.len -= 1;
                    self.bytes -= m.block.len();
                    self.expiring -= 1;
                    expired.push(m);
                } else {
                    if m.expiration != 0 {
                        next = Some(next.map_or(m.expiration, |n| n.min(m.expiration)));
                    }
                    queue.push_back(m);
                }
            }
        }
        (expired, next)
    }

    /// Takes every waiting message, in delivery order.
    pub fn take_all(&mut self) -> Vec<QueuedMessage> {
        let all = std::mem::take(&mut self.by_priority);
        self.len = 0;
        self.bytes = 0;
        self.expiring = 0;
        all.into_iter().rev().flatten().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn message(seq: u64, priority: u8) -> QueuedMessage {
        QueuedMessage {
            seq,
            group: None,
            block: Bytes::new(),
            deliveries: 0,
            journal_id: None,
            priority,
            expiration: 0,
            entry: None,
            restored: false,
        }
    }

    fn order(r: &Ready) -> Vec<u64> {
        r.iter().map(|m| m.seq).collect()
    }

    #[test]
    fn live_leaves_out_the_expired_and_is_kept_through_every_change() {
        let expiring = |seq, at| QueuedMessage {
            expiration: at,
            ..message(seq, 4)
        };
        let mut r = Ready::default();
        r.insert(message(1, 4));
        r.insert(expiring(2, 100));
        r.insert(expiring(3, 300));
        assert_eq!((r.live(50), r.live(200), r.live(400)), (3, 2, 1));
        let key = r.next_after(None).map(|(k, _)| k).unwrap();
        r.remove(key);
        r.retain(|m| m.seq != 3);
        assert_eq!((r.len(), r.live(200), r.expiring), (1, 0, 1));
        r.take_all();
        assert_eq!((r.live(0), r.expiring), (0, 0));
    }

    #[test]
    fn taking_the_expired_keeps_the_order_and_says_when_the_next_expires() {
        let expiring = |seq, priority, at| QueuedMessage {
            expiration: at,
            ..message(seq, priority)
        };
        let mut r = Ready::default();
        r.insert(message(1, 4));
        r.insert(expiring(2, 9, 100));
        r.insert(expiring(3, 4, 300));
        r.insert(expiring(4, 4, 150));
        r.insert(expiring(5, 1, 500));
        let (gone, next) = r.take_expired(200);
        assert_eq!(gone.iter().map(|m| m.seq).collect::<Vec<_>>(), [2, 4]);
        assert_eq!(next, Some(300));
        assert_eq!(order(&r), [1, 3, 5]);
        assert_eq!((r.len(), r.expiring, r.live(200)), (3, 2, 3));
        let (gone, next) = r.take_expired(1000);
        assert_eq!((gone.len(), next, r.expiring), (2, None, 0));
    }

    #[test]
    fn higher_priority_first_then_by_sequence_also_for_messages_given_back() {
        let mut r = Ready::default();
        for (seq, p) in [(1, 4), (2, 4), (3, 9), (4, 0), (5, 4), (7, 4)] {
            r.insert(message(seq, p));
        }
        // Given back: 6 lands between 5 and 7, whatever the insertion order.
        r.insert(message(6, 4));
        assert_eq!(order(&r), vec![3, 1, 2, 5, 6, 7, 4]);
        assert_eq!(r.len(), 7);

        // Walking from a key, as a dispatch past unselected messages does.
        let mut walked = Vec::new();
        let mut key = None;
        while let Some((k, m)) = r.next_after(key) {
            walked.push(m.seq);
            key = Some(k);
        }
        assert_eq!(walked, order(&r));

        // From the middle and from the front.
        let (k5, _) = std::iter::successors(r.next_after(None), |(k, _)| r.next_after(Some(*k)))
            .find(|(_, m)| m.seq == 5)
            .unwrap();
        assert_eq!(r.remove(k5).map(|m| m.seq), Some(5));
        assert_eq!(r.remove(k5).map(|m| m.seq), None, "gone already");
        let (first, _) = r.next_after(None).unwrap();
        assert_eq!(r.remove(first).map(|m| m.seq), Some(3));
        assert_eq!(order(&r), vec![1, 2, 6, 7, 4]);
        assert_eq!(r.len(), 5);

        r.retain(|m| m.seq % 2 == 0);
        assert_eq!(order(&r), vec![2, 6, 4]);
        assert_eq!(r.len(), 3);
        assert_eq!(
            r.take_all().iter().map(|m| m.seq).collect::<Vec<_>>(),
            vec![2, 6, 4]
        );
        assert_eq!((r.len(), r.next_after(None).map(|(_, m)| m.seq)), (0, None));
    }

    #[test]
    fn an_out_of_range_priority_is_filed_as_the_highest() {
        let mut r = Ready::default();
        r.insert(message(1, 9));
        r.insert(message(2, 200));
        assert_eq!(order(&r), vec![1, 2]);
        let (k, _) = r.next_after(None).unwrap();
        let (k2, _) = r.next_after(Some(k)).unwrap();
        assert_eq!(r.remove(k2).map(|m| m.seq), Some(2));
    }
}
