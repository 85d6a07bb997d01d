//! Deliveries produced while handling a burst of frames, bucketed by the
//! worker that owns each target connection. The worker hands each bucket
//! over in one message (one wake-up per burst, not per delivery) and
//! delivers its own bucket directly.

use std::sync::Mutex;

use crate::sync::lock;

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
    /// Whether a batch was handed out since the last
    /// [`Deliveries::release_room`].
    busy: bool,
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
            busy: false,
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
        self.wakes
            .iter_mut()
            .enumerate()
            .filter(|(_, l)| !l.is_empty())
            .map(|(i, l)| (i, std::mem::take(l)))
    }

    /// Takes the non-empty buckets, with their worker index. Each but
    /// that of `own` (the calling worker, which gives it back through
    /// [`Deliveries::recycle`]) is left with room for as many as it had:
    /// the emptied batch its worker left in `spares` (indexed by worker),
    /// or a new one. Growing a bucket delivery by delivery in every batch
    /// reallocated it over and over, each time onto fresh pages.
    pub fn drain<'a>(
        &'a mut self,
        own: Option<usize>,
        spares: &'a [Spare],
    ) -> impl Iterator<Item = (usize, Vec<Delivery>)> + 'a {
        self.busy = true;
        self.buckets
            .iter_mut()
            .enumerate()
            .filter(|(_, b)| !b.is_empty())
            .map(move |(i, b)| {
                let room = if Some(i) == own {
                    Vec::new()
                } else {
                    spares[i].take(b.len())
                };
                (i, std::mem::replace(b, room))
            })
    }
}

/// Deliveries an idle bucket keeps room for (a few hundred kilobytes of
/// them): in a burst a bucket grows to hundreds of thousands and keeps
/// that room while the burst lasts, not after.
const KEPT_DELIVERIES: usize = 4096;

impl Deliveries {
    /// Gives back the room of empty buckets beyond [`KEPT_DELIVERIES`]
    /// if no batch was handed out since the last call: called on each
    /// tick, so a burst's room goes within two, and is kept while the
    /// burst lasts (given back on every tick that found the buckets
    /// empty, it was regrown, delivery by delivery onto fresh pages, ten
    /// times a second).
    pub fn release_room(&mut self) {
        if std::mem::take(&mut self.busy) {
            return;
        }
        for bucket in &mut self.buckets {
            if bucket.is_empty() && bucket.capacity() > KEPT_DELIVERIES {
                bucket.shrink_to(KEPT_DELIVERIES);
            }
        }
    }

    /// Gives an emptied batch's room back to the bucket of `worker` if
    /// that has less, else to `spare` (the worker's, for other threads'
    /// buckets).
    pub fn recycle(&mut self, worker: usize, mut batch: Vec<Delivery>, spare: &Spare) {
        batch.clear();
        let bucket = &mut self.buckets[worker];
        if bucket.is_empty() && bucket.capacity() < batch.capacity() {
            *bucket = batch;
        } else {
            spare.give(batch);
        }
    }
}

/// A worker's emptied batch from another thread, kept for the threads that
/// route to it to fill again: a batch handed to a worker does not come
/// back to its router, and allocating one per batch put the pages of a
/// burst's buckets through the allocator (and the kernel) again and again.
#[derive(Default)]
pub struct Spare(Mutex<SpareRoom>);

#[derive(Default)]
struct SpareRoom {
    room: Vec<Delivery>,
    /// Whether room was given or taken since the last [`Spare::release`].
    busy: bool,
}

impl Spare {
    /// Keeps `batch`'s room, emptied, if larger than the room kept.
    pub fn give(&self, mut batch: Vec<Delivery>) {
        batch.clear();
        let mut kept = lock(&self.0);
        kept.busy = true;
        if kept.room.capacity() < batch.capacity() {
            kept.room = batch;
        }
    }

    /// The room kept if it holds `len` deliveries, or new room for them.
    fn take(&self, len: usize) -> Vec<Delivery> {
        let mut kept = lock(&self.0);
        kept.busy = true;
        if kept.room.capacity() >= len {
            std::mem::take(&mut kept.room)
        } else {
            Vec::with_capacity(len)
        }
    }

    /// Gives back the room kept if none was given or taken since the
    /// last call (on each of its worker's ticks, as
    /// [`Deliveries::release_room`]).
    pub fn release(&self) {
        let mut kept = lock(&self.0);
        if !std::mem::take(&mut kept.busy) {
            kept.room = Vec::new();
        }
    }
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
        let spares = [Spare::default(), Spare::default()];
        let batches: Vec<_> = d.drain(Some(0), &spares).collect();
        assert_eq!(batches[0].1.len(), burst);
        assert!(d.buckets[1].capacity() >= burst);
        // A tick in the burst keeps it; the next, with no batch since,
        // gives it back.
        d.release_room();
        assert!(d.buckets[1].capacity() >= burst);
        d.release_room();
        assert!(d.buckets[1].capacity() <= KEPT_DELIVERIES);
        // A bucket that holds deliveries keeps them.
        d.push(to, Bytes::new());
        d.release_room();
        assert_eq!(d.buckets[1].len(), 1);
    }

    #[test]
    fn a_batch_handed_over_comes_back_as_room_for_the_next() {
        let to = |worker| Subscriber {
            conn: ConnectionRef {
                worker,
                slot: 0,
                serial: 1,
            },
            subscription_id: 1,
        };
        let spares = [Spare::default(), Spare::default()];
        // Worker 0 routes a burst to worker 1 and to itself.
        let mut zero = Deliveries::new(2);
        let burst = 10 * KEPT_DELIVERIES;
        (0..burst).for_each(|_| zero.push(to(1), Bytes::new()));
        zero.push(to(0), Bytes::new());
        let mut batches = zero.drain(Some(0), &spares);
        let (_, own) = batches.next().expect("its own");
        let (_, handed) = batches.next().expect("worker 1's");
        drop(batches);
        // Its own comes back to its bucket.
        let room = own.as_ptr();
        zero.recycle(0, own, &spares[0]);
        assert_eq!(zero.buckets[0].as_ptr(), room);
        // Worker 1 delivers it: its own bucket, with less room, takes
        // the room; the next batch's, with less than that, is left for
        // worker 0.
        let mut one = Deliveries::new(2);
        let room = handed.as_ptr();
        one.recycle(1, handed, &spares[1]);
        assert_eq!(one.buckets[1].as_ptr(), room);
        let next: Vec<Delivery> = Vec::with_capacity(burst / 2);
        let room = next.as_ptr();
        one.recycle(1, next, &spares[1]);
        assert!(one.buckets[1].capacity() >= burst);
        // Worker 0's next batch to worker 1 leaves that room in the
        // bucket, and none kept (no two routers fill the same).
        (0..burst / 4).for_each(|_| zero.push(to(1), Bytes::new()));
        assert_eq!(zero.drain(Some(0), &spares).count(), 1);
        assert_eq!(zero.buckets[1].as_ptr(), room);
        assert_eq!(lock(&spares[1].0).room.capacity(), 0);
        // Room too small for the batch is not taken.
        one.recycle(1, Vec::with_capacity(8), &spares[1]);
        (0..burst / 4).for_each(|_| zero.push(to(1), Bytes::new()));
        let _ = zero.drain(Some(0), &spares).count();
        assert!(zero.buckets[1].capacity() >= burst / 4);
        // The room kept goes on worker 1's first tick with none given or
        // taken since the one before.
        one.recycle(1, Vec::with_capacity(burst / 2), &spares[1]);
        spares[1].release();
        assert_eq!(lock(&spares[1].0).room.capacity(), burst / 2);
        spares[1].release();
        assert_eq!(lock(&spares[1].0).room.capacity(), 0);
    }
}
