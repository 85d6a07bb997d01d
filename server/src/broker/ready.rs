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
//!
//! Of a message group, only the first waiting message is in the delivery
//! order; the rest wait behind it, by sequence number, and the next steps
//! in when it goes (a dispatch that passed over each backlog whose
//! consumer had no credit made a grouped queue quadratic: 15,000 against
//! 450,000 messages a second). The first message of a group that a
//! consumer owns waits with that consumer's (`owned`), not in the shared
//! order: a dispatch looks at the groups of consumers with credit only,
//! where passing over the first message of every group whose consumer had
//! none cost 69 % of the server with 10,000 groups.

use std::cmp::{Ordering, Reverse};
use std::collections::VecDeque;

use herald_protocol::message::MAX_PRIORITY;

use super::address::Subscriber;
use super::queued::QueuedMessage;
use crate::collections::FastMap;

/// Where a waiting message is in the delivery order, which is the order
/// of keys: higher priority first, then by sequence number.
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

impl Ord for ReadyKey {
    fn cmp(&self, other: &ReadyKey) -> Ordering {
        (Reverse(self.priority), self.seq).cmp(&(Reverse(other.priority), other.seq))
    }
}

impl PartialOrd for ReadyKey {
    fn partial_cmp(&self, other: &ReadyKey) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Waiting messages, by priority and then sequence number.
#[derive(Default)]
pub struct Ready {
    /// Messages of no group and the first waiting message of each group
    /// no consumer owns; index = priority.
    by_priority: [VecDeque<QueuedMessage>; MAX_PRIORITY as usize + 1],
    /// The first waiting message of each group a consumer owns, by owner.
    owned: FastMap<Subscriber, Firsts>,
    /// Which consumer each message group is with, while it is attached,
    /// whether the group has waiting messages or not.
    owners: FastMap<u64, Subscriber>,
    /// For each message group with waiting messages: the key of its first
    /// one, and the others, by sequence number.
    groups: FastMap<u64, (ReadyKey, VecDeque<QueuedMessage>)>,
    /// Messages waiting behind the first of their group.
    behind: usize,
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

fn key_of(m: &QueuedMessage) -> ReadyKey {
    ReadyKey::new(m.priority, m.seq)
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
        self.len += 1;
        let Some(group) = m.group else {
            return self.place(m);
        };
        let Some((first, rest)) = self.groups.get_mut(&group) else {
            self.groups.insert(group, (key_of(&m), VecDeque::new()));
            return self.put_first(group, m);
        };
        self.behind += 1;
        if first.seq < m.seq {
            // Most arrive after all of their group.
            match rest.back() {
                Some(last) if last.seq > m.seq => {
                    let at = rest.partition_point(|x| x.seq < m.seq);
                    rest.insert(at, m);
                }
                _ => rest.push_back(m),
            }
            return;
        }
        // Given back ahead of the group's first: it steps in front.
        let old = std::mem::replace(first, key_of(&m));
        if let Some(old) = self.take_first(group, old) {
            if let Some((_, rest)) = self.groups.get_mut(&group) {
                rest.push_front(old);
            }
        }
        self.put_first(group, m);
    }

    /// Files `m` in its priority's queue by sequence number.
    fn place(&mut self, m: QueuedMessage) {
        let queue = &mut self.by_priority[priority(&m) as usize];
        match queue.back() {
            Some(last) if last.seq > m.seq => {
                let at = queue.partition_point(|x| x.seq < m.seq);
                queue.insert(at, m);
            }
            _ => queue.push_back(m),
        }
    }

    /// Files `m`, the first waiting message of `group`, with its owner's
    /// or in the shared order.
    fn put_first(&mut self, group: u64, m: QueuedMessage) {
        match self.owners.get(&group) {
            Some(owner) => {
                self.owned.entry(*owner).or_default().insert(m);
            }
            None => self.place(m),
        }
    }

    /// Takes out `group`'s first waiting message, at `key`.
    fn take_first(&mut self, group: u64, key: ReadyKey) -> Option<QueuedMessage> {
        match self.owners.get(&group) {
            Some(owner) => self.take_first_of(*owner, key),
            None => take_at(&mut self.by_priority, key),
        }
    }

    /// The first message in the shared delivery order after `key` (from
    /// the start if `None`), with its key: of no group, or the first of a
    /// group no consumer owns.
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

    /// Whether any consumer owns a group with a waiting message.
    pub fn any_owned(&self) -> bool {
        !self.owned.is_empty()
    }

    /// The first waiting message, after `key` (from the start if `None`),
    /// of the groups `owner` owns.
    pub fn next_owned(
        &self,
        owner: &Subscriber,
        key: Option<ReadyKey>,
    ) -> Option<(ReadyKey, &QueuedMessage)> {
        let m = self.owned.get(owner)?.after(key)?;
        Some((key_of(m), m))
    }

    /// `group` is with `owner` from now on: its messages wait for it.
    pub fn set_owner(&mut self, group: u64, owner: Subscriber) {
        let first = self.groups.get(&group).map(|(first, _)| *first);
        let taken = first.and_then(|key| self.take_first(group, key));
        self.owners.insert(group, owner);
        if let Some(m) = taken {
            self.put_first(group, m);
        }
    }

    /// `owner` has gone: its groups go to whoever is given their next
    /// message.
    pub fn disown(&mut self, owner: &Subscriber) {
        self.owners.retain(|_, o| o != owner);
        for m in self.owned.remove(owner).into_iter().flat_map(|f| f.0) {
            self.place(m);
        }
    }

    /// Takes out the message at `key` (the first of a group lets the next
    /// step in); one waiting behind the first of its group is found too.
    pub fn remove(&mut self, key: ReadyKey) -> Option<QueuedMessage> {
        self.remove_from(None, key)
    }

    /// [`Ready::remove`] of a message known to be the first of one of
    /// `owner`'s groups (none: anywhere), which spares looking for it.
    pub fn remove_from(
        &mut self,
        owner: Option<&Subscriber>,
        key: ReadyKey,
    ) -> Option<QueuedMessage> {
        let found = match owner {
            Some(owner) => self.take_first_of(*owner, key),
            None => self.take_anywhere(key),
        };
        let taken = match found {
            Some(m) => {
                if let Some(group) = m.group {
                    self.step_up(group);
                }
                Some(m)
            }
            None => self.take_behind(key),
        };
        let m = taken?;
        self.len -= 1;
        self.bytes -= m.block.len();
        self.expiring -= usize::from(m.expiration != 0);
        Some(m)
    }

    /// Takes the message at `key` from the shared order or from an
    /// owner's groups.
    fn take_anywhere(&mut self, key: ReadyKey) -> Option<QueuedMessage> {
        if let Some(m) = take_at(&mut self.by_priority, key) {
            return Some(m);
        }
        let owner = self
            .owned
            .iter()
            .find(|(_, firsts)| firsts.contains(key))
            .map(|(owner, _)| *owner)?;
        self.take_first_of(owner, key)
    }

    /// Takes the first of one of `owner`'s groups, at `key`.
    fn take_first_of(&mut self, owner: Subscriber, key: ReadyKey) -> Option<QueuedMessage> {
        let firsts = self.owned.get_mut(&owner)?;
        let m = firsts.remove(key);
        if firsts.0.is_empty() {
            self.owned.remove(&owner);
        }
        m
    }

    /// The first of `group` has gone: the next of it, if any, takes its
    /// place.
    fn step_up(&mut self, group: u64) {
        let Some((first, rest)) = self.groups.get_mut(&group) else {
            return;
        };
        match rest.pop_front() {
            Some(next) => {
                *first = key_of(&next);
                self.behind -= 1;
                self.put_first(group, next);
            }
            None => {
                self.groups.remove(&group);
            }
        }
    }

    /// Takes out the message at `key` from behind the first of its group.
    fn take_behind(&mut self, key: ReadyKey) -> Option<QueuedMessage> {
        if self.behind == 0 {
            return None;
        }
        let taken = self.groups.values_mut().find_map(|(_, rest)| {
            let at = rest.binary_search_by_key(&key.seq, |m| m.seq).ok()?;
            rest.remove(at)
        })?;
        self.behind -= 1;
        Some(taken)
    }

    /// Whether the message at `key` is waiting.
    pub fn contains(&self, key: ReadyKey) -> bool {
        let found = |queue: &VecDeque<QueuedMessage>| {
            queue.binary_search_by_key(&key.seq, |m| m.seq).is_ok()
        };
        found(&self.by_priority[key.priority as usize])
            || self.owned.values().any(|firsts| firsts.contains(key))
            || (self.behind > 0 && self.groups.values().any(|(_, rest)| found(rest)))
    }

    /// Every waiting message, in delivery order (those behind the first
    /// of their group and those of owned groups in their place too).
    pub fn iter(&self) -> impl Iterator<Item = &QueuedMessage> {
        let mut aside: Vec<&QueuedMessage> = self.owned.values().flat_map(|f| &f.0).collect();
        if self.behind > 0 {
            aside.extend(self.groups.values().flat_map(|(_, rest)| rest));
        }
        aside.sort_by_key(|m| key_of(m));
        let mut front = self.by_priority.iter().rev().flatten().peekable();
        let mut aside = aside.into_iter().peekable();
        std::iter::from_fn(move || match (front.peek(), aside.peek()) {
            (Some(a), Some(b)) if key_of(b) < key_of(a) => aside.next(),
            (Some(_), _) => front.next(),
            (None, _) => aside.next(),
        })
    }

    /// Keeps the messages `keep` says to keep.
    pub fn retain(&mut self, mut keep: impl FnMut(&QueuedMessage) -> bool) {
        let all = self.take_all();
        for m in all {
            if keep(&m) {
                self.insert(m);
            }
        }
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
        for m in self.take_all() {
            if m.expired(now_ms) {
                expired.push(m);
                continue;
            }
            if m.expiration != 0 {
                next = Some(next.map_or(m.expiration, |n| n.min(m.expiration)));
            }
            self.insert(m);
        }
        (expired, next)
    }

    /// Takes every waiting message, in delivery order. The groups keep
    /// their owners.
    pub fn take_all(&mut self) -> Vec<QueuedMessage> {
        let front = std::mem::take(&mut self.by_priority);
        let groups = std::mem::take(&mut self.groups);
        let owned = std::mem::take(&mut self.owned);
        let mut all: Vec<QueuedMessage> = front.into_iter().rev().flatten().collect();
        if self.behind > 0 || !owned.is_empty() {
            all.extend(owned.into_values().flat_map(|f| f.0));
            all.extend(groups.into_values().flat_map(|(_, rest)| rest));
            all.sort_by_key(key_of);
        }
        (self.len, self.bytes, self.expiring, self.behind) = (0, 0, 0, 0);
        all
    }
}

/// The first waiting messages of one consumer's groups, in delivery
/// order. The next of a group usually comes after the others' firsts, so
/// it is pushed at the back, and the one delivered is at the front: a
/// double-ended queue, which cost a fifth of what a B-tree did here.
#[derive(Default)]
struct Firsts(VecDeque<QueuedMessage>);

impl Firsts {
    fn insert(&mut self, m: QueuedMessage) {
        let key = key_of(&m);
        match self.0.back() {
            Some(last) if key_of(last) > key => {
                let at = self.0.partition_point(|x| key_of(x) < key);
                self.0.insert(at, m);
            }
            _ => self.0.push_back(m),
        }
    }

    /// The first after `key` (from the start if `None`).
    fn after(&self, key: Option<ReadyKey>) -> Option<&QueuedMessage> {
        let at = key.map_or(0, |key| self.0.partition_point(|x| key_of(x) <= key));
        self.0.get(at)
    }

    fn position(&self, key: ReadyKey) -> Option<usize> {
        match self.0.front() {
            Some(first) if key_of(first) == key => Some(0),
            _ => self.0.binary_search_by_key(&key, key_of).ok(),
        }
    }

    fn contains(&self, key: ReadyKey) -> bool {
        self.position(key).is_some()
    }

    fn remove(&mut self, key: ReadyKey) -> Option<QueuedMessage> {
        self.0.remove(self.position(key)?)
    }
}

/// Takes the message at `key` out of the priority queues.
fn take_at(by_priority: &mut [VecDeque<QueuedMessage>], key: ReadyKey) -> Option<QueuedMessage> {
    let queue = &mut by_priority[key.priority as usize];
    match queue.front() {
        Some(first) if first.seq == key.seq => queue.pop_front(),
        _ => {
            let at = queue.binary_search_by_key(&key.seq, |m| m.seq).ok()?;
            queue.remove(at)
        }
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

    fn grouped(seq: u64, group: u64) -> QueuedMessage {
        QueuedMessage {
            group: Some(group),
            ..message(seq, 4)
        }
    }

    /// The sequence numbers a dispatch walks past, from the start.
    fn walked(r: &Ready) -> Vec<u64> {
        std::iter::successors(r.next_after(None), |(k, _)| r.next_after(Some(*k)))
            .map(|(_, m)| m.seq)
            .collect()
    }

    #[test]
    fn a_group_shows_its_first_message_and_the_next_steps_in() {
        let mut r = Ready::default();
        for (seq, group) in [(1, 7), (2, 8), (3, 7), (5, 7), (6, 8)] {
            r.insert(grouped(seq, group));
        }
        r.insert(message(4, 4));
        assert_eq!(walked(&r), [1, 2, 4], "one per group, and the rest");
        assert_eq!(order(&r), [1, 2, 3, 4, 5, 6], "every message, in order");
        assert_eq!((r.len(), r.behind), (6, 3));
        let first = r.next_after(None).unwrap().0;
        assert_eq!(r.remove(first).map(|m| m.seq), Some(1));
        assert_eq!(walked(&r), [2, 3, 4]);
        // Given back ahead of its group's first: it steps in front of it.
        r.insert(grouped(1, 7));
        assert_eq!(walked(&r), [1, 2, 4]);
        assert_eq!(order(&r), [1, 2, 3, 4, 5, 6]);
        // Taken from behind (a last value replaced), and found.
        assert!(r.contains(ReadyKey::new(4, 5)));
        assert_eq!(r.remove(ReadyKey::new(4, 5)).map(|m| m.seq), Some(5));
        assert!(!r.contains(ReadyKey::new(4, 5)));
        r.retain(|m| m.seq != 1);
        assert_eq!((walked(&r), r.len(), r.behind), (vec![2, 3, 4], 4, 1));
        assert_eq!(
            r.take_all().iter().map(|m| m.seq).collect::<Vec<_>>(),
            [2, 3, 4, 6]
        );
        assert_eq!((r.len(), r.behind, r.groups.len()), (0, 0, 0));
    }

    fn owner(n: u32) -> Subscriber {
        Subscriber {
            conn: super::super::address::ConnectionRef {
                worker: 0,
                slot: 0,
                serial: 1,
            },
            subscription_id: n,
        }
    }

    /// The first messages of `owner`'s groups, in order.
    fn owned_by(r: &Ready, owner: &Subscriber) -> Vec<u64> {
        std::iter::successors(r.next_owned(owner, None), |(k, _)| {
            r.next_owned(owner, Some(*k))
        })
        .map(|(_, m)| m.seq)
        .collect()
    }

    #[test]
    fn an_owned_group_waits_with_its_consumer_until_it_goes() {
        let (a, b) = (owner(1), owner(2));
        let mut r = Ready::default();
        for (seq, group) in [(1, 7), (2, 8), (3, 7), (4, 9), (6, 7)] {
            r.insert(grouped(seq, group));
        }
        r.insert(message(5, 4));
        r.set_owner(7, a);
        r.set_owner(8, b);
        assert_eq!(walked(&r), [4, 5], "the shared order has no owned group");
        assert_eq!((owned_by(&r, &a), owned_by(&r, &b)), (vec![1], vec![2]));
        // The next of a group steps in with its owner.
        let first = r.next_owned(&a, None).unwrap().0;
        assert_eq!(r.remove(first).map(|m| m.seq), Some(1));
        assert_eq!(owned_by(&r, &a), [3]);
        // One that arrives for an owned group with none waiting goes to
        // its owner too; and every message shows, in order.
        r.remove(r.next_owned(&b, None).unwrap().0);
        r.insert(grouped(10, 8));
        assert_eq!(owned_by(&r, &b), [10]);
        assert_eq!(order(&r), [3, 4, 5, 6, 10]);
        // Taking all and filing again keeps the owners.
        r.retain(|_| true);
        assert_eq!((owned_by(&r, &a), owned_by(&r, &b)), (vec![3], vec![10]));
        assert!(r.contains(ReadyKey::new(4, 10)));
        // Its consumer gone, a group is in the shared order again.
        r.disown(&a);
        assert_eq!(owned_by(&r, &a), Vec::<u64>::new());
        assert_eq!(walked(&r), [3, 4, 5]);
        assert_eq!(r.take_all().len(), 5);
        assert!(!r.any_owned() && r.len() == 0);
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
