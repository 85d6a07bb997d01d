//! Deliveries produced while handling a burst of frames, bucketed by the
//! worker that owns each target connection. The worker hands each bucket
//! over in one message (one wake-up per burst, not per delivery) and
//! delivers its own bucket directly.

use bytes::Bytes;

use super::address::{ConnectionRef, Subscriber};
use super::pending::Pending;
use super::queue::{AckRef, Dispatch};
use super::topic_tree::MatchCache;

/// One message for one subscription.
#[derive(Clone)]
pub struct Delivery {
    /// Who receives it.
    pub to: Subscriber,
    /// The message block, shared with every other delivery of the message.
    pub message: Bytes,
    /// 1 the first time; more when redelivered.
    pub delivery_count: u32,
    /// For a delivery from a queue: where its ACK must go.
    pub ack: Option<AckRef>,
    /// For a delivery from a queue: its place among the queue's dispatches
    /// to this consumer (from 1); 0 for a topic's direct delivery, which
    /// is routed on its publisher's thread and so in order already.
    pub order: u64,
    /// A non-persistent message that nobody acknowledges, which the
    /// slow-consumer policy may drop. Read from the block as it is routed,
    /// while the block is in the cache: read at delivery, after a whole
    /// read's worth of messages, it was a cache miss per message (half of
    /// `Worker::deliver`'s samples).
    pub droppable: bool,
}

/// Which workers the deliveries pushed since [`Deliveries::watch`] go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// None yet.
    Nowhere,
    /// All to this worker.
    One(usize),
    /// To more than one.
    Many,
}

/// Deliveries waiting to be handed to their workers.
pub struct Deliveries {
    buckets: Vec<Vec<Delivery>>,
    /// Blocked connections to wake, by worker.
    wakes: Vec<Vec<ConnectionRef>>,
    seen: Seen,
    /// The topic matches this routing thread found lately; `None` while
    /// a route has it out (a route nested in that one goes without).
    pub matches: Option<MatchCache>,
    /// The commit this routing belongs to, from `Broker::begin_atomic`
    /// to `Broker::end_atomic`: what is journalled and enqueued meanwhile
    /// waits in it for the commit's end.
    pub(super) commit: Option<Pending>,
}

impl Deliveries {
    /// Buckets for `workers` workers.
    pub fn new(workers: usize) -> Deliveries {
        Deliveries {
            buckets: (0..workers).map(|_| Vec::new()).collect(),
            wakes: (0..workers).map(|_| Vec::new()).collect(),
            seen: Seen::Nowhere,
            matches: Some(MatchCache::default()),
            commit: None,
        }
    }

    /// Starts noting where the deliveries pushed from now on go.
    pub fn watch(&mut self) {
        self.seen = Seen::Nowhere;
    }

    /// Where the deliveries pushed since [`Deliveries::watch`] go.
    pub fn seen(&self) -> Seen {
        self.seen
    }

    fn bucket(&mut self, worker: usize) -> &mut Vec<Delivery> {
        self.seen = match self.seen {
            Seen::Nowhere => Seen::One(worker),
            Seen::One(w) if w == worker => Seen::One(w),
            _ => Seen::Many,
        };
        &mut self.buckets[worker]
    }

    /// Adds a first delivery that needs no acknowledgement.
    pub fn push(&mut self, to: Subscriber, message: Bytes) {
        let droppable = !herald_protocol::message::is_persistent(&message);
        self.bucket(to.conn.worker).push(Delivery {
            to,
            message,
            delivery_count: 1,
            ack: None,
            order: 0,
            droppable,
        });
    }

    /// Adds a delivery from a queue.
    pub fn push_acked(&mut self, d: Dispatch, ack: AckRef) {
        self.bucket(d.to.conn.worker).push(Delivery {
            to: d.to,
            message: d.block,
            delivery_count: d.delivery_count,
            ack: Some(ack),
            order: d.order,
            droppable: false,
        });
    }

    /// Asks the worker of `conn` to retry its blocked send.
    pub fn wake(&mut self, conn: ConnectionRef) {
        self.wakes[conn.worker].push(conn);
    }

    /// Whether nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.buckets.iter().all(Vec::is_empty) && self.wakes.iter().all(Vec::is_empty)
    }

    /// Takes the non-empty wake lists, with their worker index.
    pub fn drain_wakes(&mut self) -> impl Iterator<Item = (usize, Vec<ConnectionRef>)> + '_ {
        take_non_empty(&mut self.wakes, |_| false)
    }

    /// Takes the non-empty buckets, with their worker index. Each but
    /// that of `own` (the calling worker, which gives it back through
    /// [`Deliveries::recycle`]) is left with room for as many as it had:
    /// a bucket handed to another worker does not come back, and growing
    /// a new one delivery by delivery would reallocate it over and over in
    /// every burst.
    pub fn drain(
        &mut self,
        own: Option<usize>,
    ) -> impl Iterator<Item = (usize, Vec<Delivery>)> + '_ {
        take_non_empty(&mut self.buckets, move |i| Some(i) != own)
    }
}

/// Deliveries an idle bucket keeps room for (a few hundred kilobytes of
/// them): in a burst a bucket grows to hundreds of thousands and keeps
/// that room while the burst lasts, not after.
const KEPT_DELIVERIES: usize = 4096;

impl Deliveries {
    /// Gives back the room of empty buckets beyond [`KEPT_DELIVERIES`]:
    /// called on each tick, so a burst's room goes within one.
    pub fn release_room(&mut self) {
        for bucket in &mut self.buckets {
            if bucket.is_empty() && bucket.capacity() > KEPT_DELIVERIES {
                bucket.shrink_to(KEPT_DELIVERIES);
            }
        }
    }

    /// Gives an emptied batch's room back to the bucket of `worker`, if
    /// that has less.
    pub fn recycle(&mut self, worker: usize, mut batch: Vec<Delivery>) {
        batch.clear();
        let bucket = &mut self.buckets[worker];
        if bucket.is_empty() && bucket.capacity() < batch.capacity() {
            *bucket = batch;
        }
    }
}

/// Empties each non-empty list, yielding it with its index; one whose
/// index `keep_room` names is left with room for as many as it had.
fn take_non_empty<'a, T>(
    lists: &'a mut [Vec<T>],
    keep_room: impl Fn(usize) -> bool + 'a,
) -> impl Iterator<Item = (usize, Vec<T>)> + 'a {
    lists
        .iter_mut()
        .enumerate()
        .filter(|(_, l)| !l.is_empty())
        .map(move |(i, l)| {
            let room = if keep_room(i) { l.len() } else { 0 };
            (i, std::mem::replace(l, Vec::with_capacity(room)))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::{ConnectionRef, Subscriber};

    #[test]
    fn a_bursts_room_is_given_back_once_its_buckets_are_empty() {
        let mut d = Deliveries::new(2);
        let to = Subscriber {
            conn: ConnectionRef {
                worker: 1,
                slot: 0,
                serial: 1,
            },
            subscription_id: 1,
        };
        let burst = 10 * KEPT_DELIVERIES;
        (0..burst).for_each(|_| d.push(to, Bytes::new()));
        // Handed to worker 1 by worker 0: the bucket keeps room for as
        // many, for the rest of the burst.
        let batches: Vec<_> = d.drain(Some(0)).collect();
        assert_eq!(batches[0].1.len(), burst);
        assert!(d.buckets[1].capacity() >= burst);
        // The burst is over: the room goes.
        d.release_room();
        assert!(d.buckets[1].capacity() <= KEPT_DELIVERIES);
        // A bucket that holds deliveries keeps them.
        d.push(to, Bytes::new());
        d.release_room();
        assert_eq!(d.buckets[1].len(), 1);
    }
}
