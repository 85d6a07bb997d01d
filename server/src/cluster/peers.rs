//! The cluster as the broker sees it: [`Peers`], implemented by sending
//! commands to the outbound thread and requests to the queue thread.

use super::commands::{Command, OUTBOUND_QUEUE};
use super::durables::Step;
use super::interest::redis_glob;
use super::{queues, requests, Cluster};
use crate::broker::{
    Backlog, BrowseDone, ConnectionRef, DurableRecord, EntryId, Peers, SharedChanges, SharedQueue,
};
use crate::store::Completion;
use crate::sync::lock;
use bytes::{BufMut, Bytes, BytesMut};
use herald_protocol::destination::Pattern;
use herald_protocol::selector::Selector;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Peers for Cluster {
    /// See `requests::Request::Browse`: `done` runs on the queue thread.
    fn browse(&self, queue: &str, selector: Option<Arc<Selector>>, limit: usize, done: BrowseDone) {
        self.ask(requests::Request::Browse {
            queue: queue.to_owned(),
            selector,
            limit,
            done,
        });
    }

    fn published(&self, topic: &str, block: &Bytes) -> Option<Arc<Backlog>> {
        let inboxes = self.wanted(topic);
        if inboxes.is_empty() {
            return None;
        }
        // While Redis is away nobody drains the queue: publishers go on,
        // and what the queue cannot take is dropped.
        if self.queued.load(Ordering::Relaxed) >= OUTBOUND_QUEUE {
            let n = inboxes.len() as u64;
            self.stats.dropped.fetch_add(n, Ordering::Relaxed);
            return self.backlog.is_high().then(|| self.backlog.clone());
        }
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let mut payload = BytesMut::with_capacity(1 + self.origin.len() + 8 + block.len());
        payload.put_u8(self.origin.len() as u8);
        payload.put_slice(&self.origin);
        payload.put_u64(seq);
        payload.put_slice(block);
        let payload = payload.freeze();
        let mut queued = 0;
        for inbox in inboxes.iter() {
            queued = self.send(Command::Publish {
                channel: inbox.clone(),
                payload: payload.clone(),
            });
        }
        self.pressure(queued)
    }

    fn interest(&self, pattern: &Pattern, interested: bool) {
        let glob = redis_glob(pattern);
        let mut interest = lock(&self.interest);
        let count = interest.entry(glob.clone()).or_default();
        let changed = if interested {
            *count += 1;
            *count == 1
        } else {
            *count = count.saturating_sub(1);
            *count == 0
        };
        if *count == 0 {
            interest.remove(&glob);
        }
        if changed {
            self.own_changed.store(true, Ordering::Release);
        }
    }

    fn queue_send(
        &self,
        queue: &str,
        block: &Bytes,
        from: Option<ConnectionRef>,
    ) -> Option<Arc<Backlog>> {
        let queued = self.send(Command::Append {
            queue: queue.to_owned(),
            block: block.clone(),
            from,
            seq: self.number_write(),
        });
        self.pressure(queued)
    }

    fn commit(&self, changes: SharedChanges, from: Option<ConnectionRef>) {
        let seq = self.number_write();
        self.send(Command::Commit { changes, from, seq });
    }

    fn settle(&self, queue: &str, entry: EntryId) {
        self.send(Command::Settle {
            queue: queue.to_owned(),
            entry,
        });
    }

    fn written(&self) -> u64 {
        self.writes.load(Ordering::Acquire)
    }

    fn barrier(&self, from: Option<ConnectionRef>, covers: u64, done: Completion) {
        self.send(Command::Barrier { from, covers, done });
    }

    fn closed(&self, serial: u64) {
        self.send(Command::Forget { serial });
    }

    fn consuming(&self, name: &str, queue: &SharedQueue, attached: bool) {
        queues::consuming(self, name, queue, attached);
    }

    fn durable(&self, record: &DurableRecord, registered: bool) {
        let stream = record.stream();
        for set in [&self.ephemeral, &self.joined] {
            let mut set = lock(set);
            match registered && !record.durable {
                true => set.insert(stream.clone()),
                false => set.remove(&stream),
            };
        }
        *lock(&self.registering).entry(stream).or_default() += 1;
        self.send(Command::Registry {
            step: Step::Stream,
            record: record.clone(),
            registered,
            by: self.member(),
        });
    }

    fn durables_epoch(&self) -> u64 {
        self.durables_epoch.load(Ordering::Acquire)
    }

    fn recheck(
        &self,
        topic: &str,
        block: &Bytes,
        seen: (u64, Vec<String>),
        from: Option<ConnectionRef>,
    ) {
        let (epoch, appended) = seen;
        self.send(Command::Recheck {
            topic: topic.to_owned(),
            block: block.clone(),
            epoch,
            appended,
            from,
            seq: self.number_write(),
        });
    }
}
