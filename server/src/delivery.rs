//! Deliveries produced while handling a burst of frames, bucketed by the
//! worker that owns each target connection. The worker hands each bucket
//! over in one message (one wake-up per burst, not per delivery) and
//! delivers its own bucket directly.

use bytes::Bytes;

use crate::broker::Subscriber;

/// One message for one subscription.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// Who receives it.
    pub to: Subscriber,
    /// The message block, shared with every other delivery of the message.
    pub message: Bytes,
}

/// Deliveries waiting to be handed to their workers.
#[derive(Debug)]
pub struct Deliveries {
    buckets: Vec<Vec<Delivery>>,
}

impl Deliveries {
    /// Buckets for `workers` workers.
    pub fn new(workers: usize) -> Deliveries {
        Deliveries {
            buckets: (0..workers).map(|_| Vec::new()).collect(),
        }
    }

    /// Adds one delivery to its worker's bucket.
    pub fn push(&mut self, to: Subscriber, message: Bytes) {
        self.buckets[to.conn.worker].push(Delivery { to, message });
    }

    /// Takes the non-empty buckets, with their worker index.
    pub fn drain(&mut self) -> impl Iterator<Item = (usize, Vec<Delivery>)> + '_ {
        self.buckets
            .iter_mut()
            .enumerate()
            .filter(|(_, b)| !b.is_empty())
            .map(|(i, b)| (i, std::mem::take(b)))
    }
}
