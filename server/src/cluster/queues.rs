//! Queues shared by the nodes of a cluster, on Redis streams.
//!
//! A named queue is the stream `herald:q:<name>` with one consumer group,
//! `herald`. A message sent to it on any node is appended to the stream
//! (by the outbound thread; a persistent message's RECEIPT waits for
//! Redis's answer). Each node with consumers of the queue reads it for
//! them as one member of the group, named after the node and its process
//! start, on the `herald-cl-q` thread: no more than its consumers
//! have credit for, into the node's own [`crate::broker::Queue`], which
//! dispatches as on a single node. An acknowledgement settles the entry
//! (`XACK` and `XDEL`), and so does a move to the dead-letter or expiry
//! queue, which are shared queues too.
//!
//! A node renews its hold on the entries it has read (`XCLAIM ... JUSTID`
//! resets their idle time) every third of `claim_idle_ms`. Entries whose
//! holder stopped renewing (it died) are claimed by a node that has
//! consumers once they have been idle that long, and redelivered with the
//! delivery count the stream kept (the max-delivery rule applies). When a
//! node's last consumer of a queue leaves, or the node stops, the
//! messages it read and did not deliver are given back: appended anew
//! with their delivery counts, their old entries settled, in one
//! transaction.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::sync::Weak;
use std::time::{Duration, Instant};

use bytes::Bytes;
use herald_protocol::message::{priority_and_expiration, MessageRef, DEFAULT_PRIORITY};
use herald_protocol::selector::Selector;
use herald_protocol::{DestinationKind, MessageView};
use redis::Value;

use super::commands::Command;
use super::common::{part_name, split_part, Keys, Reconnect};
use super::exclusive::{Gate, Leases};
use super::groups::Partitions;
use super::replies::{array, consumers, entries, int, pending_entries, streams, Fields, GROUP};
use super::requests::{Consumed, Held, Request};
use super::shards::{Redis, Routed};
use super::Cluster;
use crate::broker::delivery::Deliveries;
use crate::broker::queue::{delivered_at, QueuedMessage};
use crate::broker::{has_own_slot, is_durable_stream, EntryId, PeerError, SharedQueue};
use crate::frontend::{hand_out, Shared};
use crate::sync::lock;

/// How long a read waits for new entries: the longest a consumer that got
/// credit back waits for the node to read more for it.
const BLOCK_MS: u64 = 5;
/// Entries read from one stream at once at most.
const READ_MAX: usize = 256;
/// Messages a node holds waiting for its consumers at most, those their
/// selectors do not take included (see `Reader::pass_on`).
const HOLD: usize = 2 * READ_MAX;
/// Entry ids per `XCLAIM` at most.
const CLAIM_CHUNK: usize = 512;

/// Adds the commands that append `block` to `queue`'s stream, with the
/// times it was delivered before (none for a new message). A cluster
/// subscription's stream is not made by an append: it is made when the
/// subscription is registered, and one that is gone was deleted.
pub(super) fn append(
    pipe: &mut redis::Pipeline,
    keys: &Keys,
    queue: &str,
    block: &Bytes,
    deliveries: u32,
) {
    let cmd = pipe.cmd("XADD").arg(keys.stream_for(queue, block));
    if has_own_slot(queue) {
        cmd.arg("NOMKSTREAM");
    }
    let cmd = cmd.arg("*").arg("m").arg(&block[..]);
    if deliveries > 0 {
        cmd.arg("d").arg(deliveries);
    }
    cmd.ignore();
}

/// Adds the commands that settle entries of `queue`'s streams: two per
/// stream they are in (its own, or its groups' partitions), however many
/// entries.
pub(super) fn settle(pipe: &mut redis::Pipeline, keys: &Keys, queue: &str, entries: &[EntryId]) {
    let mut parts: Vec<u8> = entries.iter().map(|e| e.part).collect();
    parts.sort_unstable();
    parts.dedup();
    for part in parts {
        let key = keys.entry_stream(queue, part);
        let ids: Vec<String> = entries
            .iter()
            .filter(|e| e.part == part)
            .map(EntryId::to_string)
            .collect();
        pipe.cmd("XACK").arg(&key).arg(GROUP).arg(&ids).ignore();
        pipe.cmd("XDEL").arg(&key).arg(&ids).ignore();
    }
}

/// Counts a consumer of `name` in or out.
pub(super) fn consuming(cluster: &Cluster, name: &str, queue: &SharedQueue, attached: bool) {
    let mut consumed = lock(&cluster.consumed);
    let entry = consumed.entry(name.to_owned()).or_insert_with(|| Consumed {
        queue: queue.clone(),
        consumers: 0,
    });
    entry.consumers = match attached {
        true => entry.consumers + 1,
        false => entry.consumers.saturating_sub(1),
    };
}

/// The messages of `read` that came from a stream, to give back. Those
/// of a partition of message groups stay pending, in their order, for
/// the node that takes the partition next (see `super::groups`).
fn held(read: Vec<QueuedMessage>) -> Vec<Held> {
    read.into_iter()
        .filter_map(|m| {
            Some(Held {
                entry: m.entry.filter(|e| !e.in_partition())?,
                block: m.block,
                deliveries: m.deliveries,
            })
        })
        .collect()
}

/// This node's name in the consumer groups.
fn consumer(cluster: &Cluster) -> String {
    String::from_utf8_lossy(&cluster.origin).into_owned()
}

/// The `herald-cl-q` thread: reads the shared queues this node has
/// consumers for, until the cluster stops.
pub(super) fn run(cluster: &Cluster, requests: &Receiver<Request>, shared: &Weak<Shared>) {
    let me = consumer(cluster);
    let mut reconnect = Reconnect::default();
    let link = &cluster.stats.connected_queues;
    while !cluster.stop_queues.load(Ordering::Acquire) {
        let connected = Redis::connect(&cluster.link, &cluster.keys, reconnect.again());
        let result = connected.and_then(|mut shards| {
            link.set_up("queue reader");
            reconnect.connected();
            let mut reader = Reader {
                cluster,
                keys: &cluster.keys,
                me: &me,
                shards: &mut shards,
                groups: HashSet::new(),
                renewed: Instant::now(),
                claimed: Instant::now(),
                alive: HashSet::new(),
                passed_over: HashMap::new(),
                member: cluster.member(),
                leases: Leases::default(),
                partitions: Partitions::default(),
            };
            let served = reader.serve(shared, requests);
            if served.is_ok() {
                reader.give_back_all();
            }
            served
        });
        match result {
            Ok(()) => return,
            Err(e) => {
                link.set_down("queue reader", &e);
                let why = e.to_string();
                for request in requests.try_iter() {
                    request.fail(&why);
                }
                if !reconnect.wait(&cluster.stop_queues, link) {
                    return;
                }
            }
        }
    }
}

struct Reader<'a, 'l> {
    cluster: &'a Cluster,
    /// The cluster's key names.
    keys: &'a Keys,
    me: &'a str,
    shards: &'a mut Redis<'l>,
    /// Streams whose group this connection has made sure of.
    groups: HashSet<String>,
    /// When this node last renewed its hold on what it read.
    renewed: Instant,
    /// When it last looked for entries to claim.
    claimed: Instant,
    /// Non-durable shared subscriptions this node is marked alive in.
    alive: HashSet<String>,
    /// Per queue, the waiting messages no consumer here took at the last
    /// look (see `Reader::pass_on`).
    passed_over: HashMap<String, HashSet<u64>>,
    /// This node, as the registry's writes name it.
    member: super::durables::Member,
    /// The leases of the exclusive queues and the partitions of message
    /// groups it reads or would.
    leases: Leases,
    /// The partitions of message groups it reads or would.
    partitions: Partitions,
}

impl Reader<'_, '_> {
    fn serve(
        &mut self,
        shared: &Weak<Shared>,
        requests: &Receiver<Request>,
    ) -> redis::RedisResult<()> {
        let mut out = None;
        loop {
            if self.cluster.stop_queues.load(Ordering::Acquire) {
                return Ok(());
            }
            while let Ok(request) = requests.try_recv() {
                self.answer(request)?;
            }
            let Some(shared) = shared.upgrade() else {
                return Ok(());
            };
            let out = out.get_or_insert_with(|| Deliveries::new(shared.workers.len()));
            let (wanted, left) = self.wanted();
            for (name, _, _) in &wanted {
                let made = self.make_group(name);
                self.isolated(name, made)?;
            }
            let wanted = self.exclusive(&shared, wanted, out)?;
            let wanted = self.grouped(&shared, wanted, out)?;
            let idle = self.cluster.claim_idle;
            let renew = self.renewed.elapsed() >= idle / 3;
            self.keep_alive(&wanted, renew, &left)?;
            if renew {
                self.renewed = Instant::now();
                self.renew()?;
            }
            if self.claimed.elapsed() >= idle / 2 {
                self.claimed = Instant::now();
                for (name, queue, want) in &wanted {
                    let claimed = self.claim(&shared, name, queue, *want, out);
                    self.isolated(name, claimed)?;
                }
                hand_out(&shared, out);
                self.pass_on(&wanted);
                self.end_abandoned(&wanted)?;
            }
            let wanted: Vec<_> = wanted.into_iter().filter(|w| w.2 > 0).collect();
            if wanted.is_empty() {
                std::thread::sleep(Duration::from_millis(BLOCK_MS));
                continue;
            }
            self.read(&shared, &wanted, out)?;
            hand_out(&shared, out);
        }
    }

    /// The queues to read for, with what their consumers can take; gives
    /// back what a queue without consumers here still holds.
    /// Also returns the queues whose last consumer here left.
    fn wanted(&mut self) -> (Vec<(String, SharedQueue, usize)>, Vec<String>) {
        let mut idle = Vec::new();
        let mut left = Vec::new();
        let mut wanted = Vec::new();
        {
            let mut consumed = lock(&self.cluster.consumed);
            consumed.retain(|name, c| {
                if c.consumers == 0 {
                    idle.push((name.clone(), c.queue.clone()));
                    return false;
                }
                let want = lock(&c.queue).wants(HOLD).min(READ_MAX);
                wanted.push((name.clone(), c.queue.clone(), want));
                true
            });
        }
        for (name, queue) in idle {
            let mut q = lock(&queue);
            // A consumer may have come back meanwhile.
            if q.consumer_count() == 0 {
                let held = q.purge();
                drop(q);
                // An exclusive queue's stay pending, in their order, for
                // the node that takes its lease next.
                if !self.leases.holds(&name) {
                    self.give_back(&name, held);
                }
                left.push(name);
            }
        }
        (wanted, left)
    }

    /// Of the queues wanted, those this node may read now: an exclusive
    /// one only while it holds the queue's lease (see `super::exclusive`);
    /// one whose lease it has just taken, after claiming what other nodes
    /// left pending. Lets go of the leases of queues without consumers
    /// here.
    fn exclusive(
        &mut self,
        shared: &Shared,
        wanted: Vec<(String, SharedQueue, usize)>,
        out: &mut Deliveries,
    ) -> redis::RedisResult<Vec<(String, SharedQueue, usize)>> {
        for name in self.leases.held() {
            // Partitions are `Reader::grouped`'s.
            if split_part(&name).is_none() && !wanted.iter().any(|w| w.0 == name) {
                let who = (&mut *self.shards, self.keys, self.me);
                self.leases.release(who, &name)?;
            }
        }
        let lease = self.cluster.claim_idle;
        let mut readable = Vec::with_capacity(wanted.len());
        for w in wanted {
            let exclusive = !is_durable_stream(&w.0) && lock(&w.1).settings().exclusive;
            if !exclusive {
                readable.push(w);
                continue;
            }
            let who = (&mut *self.shards, self.keys, self.me);
            match self.leases.gate(who, &w.0, lease)? {
                Gate::Closed => continue,
                Gate::Taken => {
                    let claimed = self.claim_all(shared, &w.0, &w.1, out);
                    self.isolated(&w.0, claimed)?;
                    hand_out(shared, out);
                }
                Gate::Read => {}
            }
            readable.push(w);
        }
        Ok(readable)
    }

    /// To the queues this node may read now, adds the partitions of their
    /// message groups it reads (see `super::groups`), those it has just
    /// taken after claiming what other nodes left pending in them; lets
    /// go of the partitions of queues it does not read.
    fn grouped(
        &mut self,
        shared: &Shared,
        mut wanted: Vec<(String, SharedQueue, usize)>,
        out: &mut Deliveries,
    ) -> redis::RedisResult<Vec<(String, SharedQueue, usize)>> {
        let reads: HashSet<String> = wanted.iter().map(|w| w.0.clone()).collect();
        let who = (&mut *self.shards, self.keys, self.me);
        self.partitions
            .retain(who, &mut self.leases, |q| reads.contains(q))?;
        let lease = self.cluster.claim_idle;
        for i in 0..wanted.len() {
            let (name, queue, want) = wanted[i].clone();
            if is_durable_stream(&name) {
                continue;
            }
            let all = lock(&queue).settings().exclusive;
            let who = (&mut *self.shards, self.keys, self.me);
            let parts =
                self.partitions
                    .readable(who, &mut self.leases, (&name, &queue), (lease, all));
            let parts = match parts {
                Ok(parts) => parts,
                Err(e) => {
                    self.isolated(&name, Err(e))?;
                    continue;
                }
            };
            for (part, gate) in parts {
                let made = self.make_group(&part);
                self.isolated(&part, made)?;
                if gate == Gate::Taken {
                    let claimed = self.claim_all(shared, &part, &queue, out);
                    self.isolated(&part, claimed)?;
                    hand_out(shared, out);
                }
                wanted.push((part, queue.clone(), want));
            }
        }
        Ok(wanted)
    }

    /// Gives back, for other nodes, the messages that no consumer here
    /// has taken for two looks in a row (half `claim_idle_ms` apart)
    /// because no selector here takes them: a node reads past those (see
    /// `Queue::wants`), so they would otherwise wait here for a consumer
    /// that may be on another node. A message nobody selects goes round
    /// the nodes at that pace, as it would wait in a single node's queue.
    fn pass_on(&mut self, wanted: &[(String, SharedQueue, usize)]) {
        self.passed_over
            .retain(|name, _| wanted.iter().any(|w| &w.0 == name));
        // An exclusive queue's one node reads them all, in order.
        for (name, queue, _) in wanted.iter().filter(|w| !self.leases.holds(&w.0)) {
            let mut q = lock(queue);
            let now: HashSet<u64> = q.unselected_to_pass_on().into_iter().collect();
            let before = self.passed_over.entry(name.clone()).or_default();
            let stale: Vec<u64> = now.intersection(before).copied().collect();
            let taken = q.take_ready(&stale);
            drop(q);
            *before = &now - &stale.iter().copied().collect();
            self.give_back(name, taken);
        }
    }

    /// Marks this node alive in the non-durable shared subscriptions it
    /// has consumers of (those newly consumed at once, all of them when
    /// `renew`), and takes it out of those whose last consumer here
    /// `left`, ending them if no node is left in them.
    fn keep_alive(
        &mut self,
        wanted: &[(String, SharedQueue, usize)],
        renew: bool,
        left: &[String],
    ) -> redis::RedisResult<()> {
        let ephemeral = lock(&self.cluster.ephemeral).clone();
        let mut pipe = redis::pipe();
        for (name, _, _) in wanted.iter().filter(|w| ephemeral.contains(&w.0)) {
            if self.alive.insert(name.clone()) || renew {
                super::durables::mark_alive(&mut pipe, name, &self.member);
            }
        }
        if pipe.cmd_iter().next().is_some() {
            let control = self.keys.control();
            self.shards.pipeline(control, &pipe, 0)?;
        }
        for name in left {
            // One made and left between two passes was never marked here,
            // but its registration marked this node alive in it: without
            // leaving now, it would last until that mark expired.
            let joined = lock(&self.cluster.joined).remove(name);
            if self.alive.remove(name) | joined {
                self.leave(name, true)?;
            }
        }
        Ok(())
    }

    /// See `durables::leave`. A subscription that ended is dropped here
    /// too (this node does not hear its own announcement), and then its
    /// stream.
    fn leave(&mut self, stream: &str, leaving: bool) -> redis::RedisResult<()> {
        if !super::durables::leave(self.shards.control()?, stream, leaving, &self.member)? {
            return Ok(());
        }
        self.cluster.durables_changed.store(true, Ordering::Release);
        let key = self.keys.stream(stream);
        let dropped = redis::cmd("DEL").arg(&key).on::<i64>(self.shards, &key);
        if let Err(e) = &dropped {
            log::warn!(
                "cluster: {key}, the stream of a shared subscription that ended, stays: {e}"
            );
        }
        self.isolated(stream, dropped.map(drop))
    }

    /// Ends the non-durable shared subscriptions that this node has no
    /// consumer of and whose nodes all stopped renewing (they died).
    fn end_abandoned(&mut self, wanted: &[(String, SharedQueue, usize)]) -> redis::RedisResult<()> {
        let ephemeral = lock(&self.cluster.ephemeral).clone();
        for stream in ephemeral
            .iter()
            .filter(|s| !wanted.iter().any(|w| &w.0 == *s))
        {
            self.leave(stream, false)?;
        }
        Ok(())
    }

    /// Hands messages this node read back to the stream for the others.
    fn give_back(&self, name: &str, read: Vec<QueuedMessage>) {
        self.cluster.give_back(name, held(read));
    }

    /// At a stop: gives back everything read here, delivered or not (its
    /// consumers are going away with the server), on this connection.
    fn give_back_all(&mut self) {
        let consumed: Vec<(String, SharedQueue)> = lock(&self.cluster.consumed)
            .drain()
            .map(|(name, c)| (name, c.queue))
            .collect();
        for (name, queue) in consumed {
            let messages = held(lock(&queue).drain());
            if self.leases.holds(&name) {
                // Left pending, in order, for the node that takes the
                // lease next, which it may now.
                let who = (&mut *self.shards, self.keys, self.me);
                if let Err(e) = self.leases.release(who, &name) {
                    log::warn!("cluster: the lease of exclusive queue {name} was not let go ({e}); it expires");
                }
                continue;
            }
            if messages.is_empty() {
                continue;
            }
            let mut pipe = redis::pipe();
            let release = Command::Release {
                queue: name.clone(),
                messages,
            };
            release.add_to(&mut pipe, self.keys);
            if let Err(e) = self.shards.pipeline(&self.keys.stream(&name), &pipe, 0) {
                log::warn!("cluster: what this node read from {name} was not given back ({e}); another node claims it later");
            }
        }
        // What it read of its partitions stays pending, in order, for the
        // nodes that take them next, which they may now.
        let who = (&mut *self.shards, self.keys, self.me);
        if let Err(e) = self.partitions.retain(who, &mut self.leases, |_| false) {
            log::warn!("cluster: the partitions of message groups this node read were not let go ({e}); their leases expire");
        }
    }

    /// Creates the queue's stream and group unless this connection did.
    fn make_group(&mut self, name: &str) -> redis::RedisResult<()> {
        if self.groups.contains(name) {
            return Ok(());
        }
        // From the stream's start: what was sent before any consumer
        // existed is there for the first.
        let made: redis::RedisResult<()> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(self.keys.stream(name))
            .arg(GROUP)
            .arg("0")
            .arg("MKSTREAM")
            .on(self.shards, &self.keys.stream(name));
        match made {
            Err(e) if e.code() != Some("BUSYGROUP") => return Err(e),
            _ => {}
        }
        self.groups.insert(name.to_owned());
        Ok(())
    }

    /// Reads new entries for the queues whose consumers want some.
    fn read(
        &mut self,
        shared: &Shared,
        wanted: &[(String, SharedQueue, usize)],
        out: &mut Deliveries,
    ) -> redis::RedisResult<()> {
        let count = wanted.iter().map(|w| w.2).max().unwrap_or(1);
        let read = |names: &[&(String, SharedQueue, usize)], block: bool| {
            let mut cmd = redis::cmd("XREADGROUP");
            cmd.arg("GROUP")
                .arg(GROUP)
                .arg(self.me)
                .arg("COUNT")
                .arg(count);
            if block {
                cmd.arg("BLOCK").arg(BLOCK_MS);
            }
            cmd.arg("STREAMS");
            for (name, _, _) in names {
                cmd.arg(self.keys.stream(name));
            }
            for _ in names {
                cmd.arg(">");
            }
            cmd
        };
        let mut replies = Vec::new();
        if self.shards.sharded() {
            // One slot per queue: a read per queue, pipelined per shard,
            // and a pause instead of BLOCK when none had anything.
            let mut parts: HashMap<usize, redis::Pipeline> = HashMap::new();
            for w in wanted {
                // A queue whose slot no primary serves now is left for the
                // next round; the others are read.
                let shard = match self.shards.shard_of(&self.keys.stream(&w.0)) {
                    Ok(shard) => shard,
                    Err(e) => {
                        self.isolated(&w.0, Err(e))?;
                        continue;
                    }
                };
                parts
                    .entry(shard)
                    .or_insert_with(redis::pipe)
                    .add_command(read(&[w], false));
            }
            let parts: Vec<(usize, redis::Pipeline)> = parts.into_iter().collect();
            let plan: Vec<(usize, &redis::Pipeline)> = parts.iter().map(|(s, p)| (*s, p)).collect();
            for (answered, _) in self.shards.each_answer_on(&plan) {
                match answered {
                    Ok(answers) => replies.extend(answers),
                    // The others' go on; this one is tried again.
                    Err(e) => log::debug!("cluster: a shard did not answer a read: {e}"),
                }
            }
        } else {
            let all: Vec<_> = wanted.iter().collect();
            match self
                .shards
                .query::<Value>(&self.keys.stream(&wanted[0].0), &read(&all, true))
            {
                Err(e) if e.code() == Some("NOGROUP") => {
                    // The stream went (deleted in Redis): made again next
                    // time.
                    self.groups.clear();
                    return Ok(());
                }
                reply => replies.push(reply?),
            }
        }
        let mut got = 0;
        for reply in replies {
            if let Value::ServerError(e) = &reply {
                // A stream went (NOGROUP: deleted in Redis): its group is
                // made again next time.
                log::debug!("cluster: a read was refused: {e:?}");
                self.groups.clear();
                continue;
            }
            for (stream, entries) in streams(reply) {
                let Some((name, queue, _)) =
                    wanted.iter().find(|w| self.keys.stream(&w.0) == stream)
                else {
                    continue;
                };
                for (entry, fields) in entries {
                    got += 1;
                    self.cluster.stats.read.fetch_add(1, Ordering::Relaxed);
                    self.admit(shared, (name, queue), (entry, fields), None, out);
                }
            }
        }
        if got == 0 && self.shards.sharded() {
            std::thread::sleep(Duration::from_millis(BLOCK_MS));
        }
        Ok(())
    }

    /// Hands an entry to the local queue `to` (name and queue), or
    /// settles one that holds no message for it (it could never be
    /// delivered). `deliveries` is what the stream counted for a claimed
    /// entry.
    fn admit(
        &self,
        shared: &Shared,
        (name, queue): (&str, &SharedQueue),
        (entry, fields): (EntryId, Fields),
        deliveries: Option<u32>,
        out: &mut Deliveries,
    ) {
        // An entry of a partition of the queue's message groups is
        // settled in that partition's stream.
        let (base, entry) = match split_part(name) {
            Some((base, part)) => (base, EntryId { part, ..entry }),
            None => (name, entry),
        };
        // A queue's messages name it; a durable subscription's name the
        // topic they were published on.
        let valid = fields.block.clone().and_then(|block| {
            let view = MessageView::parse(block).ok()?;
            let fits = match is_durable_stream(name) {
                true => view.destination_kind == DestinationKind::Topic,
                false => {
                    view.destination_kind == DestinationKind::Queue && view.destination() == base
                }
            };
            fits.then(|| view.block().clone())
        });
        match valid {
            Some(block) => {
                let deliveries = deliveries.unwrap_or(fields.deliveries);
                shared.broker.arrived(queue, block, entry, deliveries, out);
            }
            None => {
                log::warn!(
                    "cluster: entry {entry} of {} holds no message for it: dropped",
                    self.keys.stream(name)
                );
                super::Peers::settle(self.cluster, base, entry);
            }
        }
    }

    /// Answers a request; fails only if Redis does (the request is then
    /// answered with the error).
    fn answer(&mut self, request: Request) -> redis::RedisResult<()> {
        match request {
            Request::Browse {
                queue,
                selector,
                limit,
                done,
            } => match self.browse(&queue, selector.as_deref(), limit) {
                Ok(found) => done(Ok(found)),
                Err(e) => {
                    done(Err(PeerError::NoAnswer(e.to_string())));
                    return Err(e);
                }
            },
            Request::Streams { done } => match self.streams() {
                Ok(streams) => done(Ok(streams)),
                Err(e) => {
                    done(Err(PeerError::NoAnswer(e.to_string())));
                    return Err(e);
                }
            },
            Request::Take { queue, limit, done } => match self.take(&queue, limit) {
                Ok(taken) => done(Ok(taken)),
                Err(e) => {
                    done(Err(PeerError::NoAnswer(e.to_string())));
                    return Err(e);
                }
            },
            Request::Page {
                queue,
                selector,
                page,
                done,
            } => answered(
                super::manage::page(self.shards, &queue, selector.as_deref(), page),
                done,
            )?,
            Request::Pick {
                queue,
                id,
                take,
                done,
            } => answered(super::manage::pick(self.shards, &queue, &id, take), done)?,
            Request::Move {
                queue,
                held,
                to,
                block,
                done,
            } => answered(
                super::manage::move_entry(self.shards, &queue, held, (&to, &block)),
                done,
            )?,
            Request::Drop { queue, done } => {
                self.groups.remove(&queue);
                answered(super::manage::drop_queue(self.shards, &queue), done)?
            }
            Request::Create { queue, done } => {
                let made = super::manage::exists(self.shards, &queue)
                    .and_then(|existed| self.make_group(&queue).map(|()| !existed));
                answered(made, done)?
            }
        }
        Ok(())
    }

    /// Reads up to `limit` new entries of `queue` as this node's, so that
    /// no other node gets them: if this node dies before settling or
    /// giving them back, a live one claims them. Entries that hold no
    /// message are settled on the way.
    /// The partitions of its message groups are read too, after it.
    fn take(&mut self, queue: &str, limit: usize) -> redis::RedisResult<Option<Vec<Held>>> {
        let parts = super::manage::parts(self.shards, queue)?;
        if parts.is_empty() {
            return Ok(None);
        }
        let mut taken = Vec::new();
        for part in parts {
            if taken.len() >= limit.max(1) {
                break;
            }
            let name = match part {
                0 => queue.to_owned(),
                _ => part_name(queue, part),
            };
            self.make_group(&name)?;
            let key = self.keys.stream(&name);
            let reply: Value = redis::cmd("XREADGROUP")
                .arg("GROUP")
                .arg(GROUP)
                .arg(self.me)
                .arg("COUNT")
                .arg(limit.max(1) - taken.len())
                .arg("STREAMS")
                .arg(&key)
                .arg(">")
                .on(self.shards, &key)?;
            for (_, list) in streams(reply) {
                for (entry, fields) in list {
                    let entry = EntryId { part, ..entry };
                    match fields.block {
                        Some(block) => taken.push(Held {
                            entry,
                            block,
                            deliveries: fields.deliveries,
                        }),
                        None => super::Peers::settle(self.cluster, queue, entry),
                    }
                }
            }
        }
        Ok(Some(taken))
    }

    /// Every shared queue's stream (durable subscriptions' aside), its
    /// length and its unacknowledged entries.
    /// A queue's partitions of message groups count in its figures.
    fn streams(&mut self) -> redis::RedisResult<Vec<(String, u64, u64)>> {
        let mut found: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let own = self.keys;
        for keys in self.shards.each(|con| scan_streams(con, own))? {
            for key in keys {
                if let Some(name) = self.keys.queue_of(&key).filter(|n| !is_durable_stream(n)) {
                    found.entry(name.to_owned()).or_default().push(key);
                }
            }
        }
        let mut streams = Vec::with_capacity(found.len());
        for (name, keys) in found {
            let (mut len, mut pending) = (0, 0);
            for key in keys {
                len += redis::cmd("XLEN").arg(&key).on::<u64>(self.shards, &key)?;
                // A stream whose group is not made yet has nothing pending.
                pending += redis::cmd("XPENDING")
                    .arg(&key)
                    .arg(GROUP)
                    .on::<Value>(self.shards, &key)
                    .ok()
                    .and_then(|summary| array(summary).first().and_then(int))
                    .unwrap_or(0);
            }
            streams.push((name, len, pending));
        }
        Ok(streams)
    }

    /// A shared queue's unacknowledged messages that `selector` selects,
    /// at most `limit`, unexpired, in delivery order (higher priority
    /// first, then oldest first).
    fn browse(
        &mut self,
        queue: &str,
        selector: Option<&Selector>,
        limit: usize,
    ) -> redis::RedisResult<Vec<(Bytes, u32)>> {
        let now = crate::broker::queue::now_ms();
        let mut found: Vec<(u8, Bytes, u32)> = Vec::new();
        if limit == 0 {
            return Ok(Vec::new());
        }
        super::manage::scan(self.shards, queue, |_, block, deliveries| {
            let Ok(view) = MessageRef::read(&block) else {
                return true;
            };
            if selector.is_some_and(|s| !s.matches(&view)) {
                return true;
            }
            let (priority, expiration) =
                priority_and_expiration(&block).unwrap_or((DEFAULT_PRIORITY, 0));
            if expiration == 0 || expiration > now {
                found.push((priority, block, deliveries));
            }
            found.len() < limit
        })?;
        // Stable: oldest first within a priority.
        found.sort_by_key(|(priority, _, _)| std::cmp::Reverse(*priority));
        Ok(found.into_iter().map(|(_, b, d)| (b, d)).collect())
    }

    /// Renews this node's hold on every entry it read and still has.
    fn renew(&mut self) -> redis::RedisResult<()> {
        let held: Vec<(String, Vec<EntryId>)> = lock(&self.cluster.consumed)
            .iter()
            .map(|(name, c)| (name.clone(), lock(&c.queue).entries()))
            .filter(|(_, entries)| !entries.is_empty())
            .collect();
        for (name, mut entries) in held {
            entries.sort_unstable_by_key(|e| e.part);
            for chunk in entries.chunk_by(|a, b| a.part == b.part) {
                self.renew_entries(&name, chunk)?;
            }
        }
        Ok(())
    }

    /// Renews this node's hold on `entries`, all of one stream of `name`.
    fn renew_entries(&mut self, name: &str, entries: &[EntryId]) -> redis::RedisResult<()> {
        for chunk in entries.chunks(CLAIM_CHUNK) {
            let mut cmd = redis::cmd("XCLAIM");
            let key = self.keys.entry_stream(name, chunk[0].part);
            cmd.arg(&key).arg(GROUP).arg(self.me).arg(0);
            for entry in chunk {
                cmd.arg(entry.to_string());
            }
            cmd.arg("JUSTID");
            let renewed = cmd.on::<Value>(self.shards, &key).map(drop);
            self.isolated(name, renewed)?;
        }
        Ok(())
    }

    /// On a Redis Cluster a failure on one queue's shard leaves the
    /// others' queues to go on (the queue is tried again next round, once
    /// the shard is back or failed over); with one Redis it is the link's.
    fn isolated(&self, queue: &str, result: redis::RedisResult<()>) -> redis::RedisResult<()> {
        match result {
            Err(e) if self.shards.sharded() => {
                log::debug!("cluster: {queue} is tried again later: {e}");
                Ok(())
            }
            other => other,
        }
    }

    /// Claims, for consumers that want them, entries another node read
    /// and stopped renewing; forgets members that hold nothing and have
    /// not been seen for as long.
    /// Claims the entries of `pending` (an `XPENDING` answer) idle at
    /// least `idle_ms`, in their order, and admits them; returns how many
    /// `pending` listed.
    fn claim_pending(
        &mut self,
        shared: &Shared,
        (name, queue): (&str, &SharedQueue),
        pending: Value,
        idle_ms: u64,
        out: &mut Deliveries,
    ) -> redis::RedisResult<Option<EntryId>> {
        let stream = self.keys.stream(name);
        let listed = pending_entries(pending);
        let last = listed.last().map(|p| p.entry);
        // This node's own idle entries count too, unless it holds them
        // (then it renews them): a read whose answer was lost leaves
        // one behind.
        let held: HashSet<EntryId> = lock(queue).entries().into_iter().collect();
        let stale: BTreeMap<EntryId, u32> = listed
            .into_iter()
            .filter(|p| p.consumer != self.me || !held.contains(&p.entry))
            .map(|p| (p.entry, p.deliveries))
            .collect();
        if stale.is_empty() {
            return Ok(last);
        }
        let mut cmd = redis::cmd("XCLAIM");
        cmd.arg(&stream).arg(GROUP).arg(self.me).arg(idle_ms);
        for entry in stale.keys() {
            cmd.arg(entry.to_string());
        }
        // Only those still idle that long are taken: another node
        // claiming at the same moment gets the rest.
        let claimed: Value = cmd.on(self.shards, &stream)?;
        for (entry, mut fields) in entries(claimed) {
            self.cluster.stats.claimed.fetch_add(1, Ordering::Relaxed);
            let before = stale.get(&entry).copied().unwrap_or(1);
            // Taken from a node that died (idle that long): it came back,
            // and waits out its redelivery delay from now, as its wait on
            // that node went with it. (Redis counts a read as a delivery,
            // so one that node had read and not delivered waits too.)
            let wait = lock(queue).settings().redelivery_wait(before);
            if idle_ms > 0 && wait > 0 {
                let due = crate::broker::queue::now_ms().saturating_add(wait as i64 + 1);
                fields.block = fields.block.map(|b| delivered_at(&b, due));
            }
            self.admit(shared, (name, queue), (entry, fields), Some(before), out);
        }
        Ok(last)
    }

    /// Claims every entry of exclusive queue `name` that other nodes (or
    /// this one, before) left pending, in their order: its lease has just
    /// come to this node, so none is being delivered elsewhere.
    fn claim_all(
        &mut self,
        shared: &Shared,
        name: &str,
        queue: &SharedQueue,
        out: &mut Deliveries,
    ) -> redis::RedisResult<()> {
        let stream = self.keys.stream(name);
        let mut from = "-".to_owned();
        loop {
            let pending: Value = redis::cmd("XPENDING")
                .arg(&stream)
                .arg(GROUP)
                .arg(&from)
                .arg("+")
                .arg(CLAIM_CHUNK)
                .on(self.shards, &stream)?;
            match self.claim_pending(shared, (name, queue), pending, 0, out)? {
                Some(last) => from = format!("({last}"),
                None => return Ok(()),
            }
        }
    }

    fn claim(
        &mut self,
        shared: &Shared,
        name: &str,
        queue: &SharedQueue,
        want: usize,
        out: &mut Deliveries,
    ) -> redis::RedisResult<()> {
        let stream = self.keys.stream(name);
        let idle_ms = self.cluster.claim_idle.as_millis() as u64;
        if want > 0 {
            let pending: Value = redis::cmd("XPENDING")
                .arg(&stream)
                .arg(GROUP)
                .arg("IDLE")
                .arg(idle_ms)
                .arg("-")
                .arg("+")
                .arg(want)
                .on(self.shards, &stream)?;
            self.claim_pending(shared, (name, queue), pending, idle_ms, out)?;
        }
        let members: Value = redis::cmd("XINFO")
            .arg("CONSUMERS")
            .arg(&stream)
            .arg(GROUP)
            .on(self.shards, &stream)?;
        for member in consumers(members) {
            if member.pending == 0 && member.idle_ms > idle_ms && member.name != self.me {
                redis::cmd("XGROUP")
                    .arg("DELCONSUMER")
                    .arg(&stream)
                    .arg(GROUP)
                    .arg(&member.name)
                    .on::<Value>(self.shards, &stream)?;
            }
        }
        Ok(())
    }
}

/// Every shared queue's stream key on one server (`SCAN`).
fn scan_streams(con: &mut redis::Connection, names: &Keys) -> redis::RedisResult<Vec<String>> {
    let mut keys = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, found): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(names.streams_glob())
            .arg("COUNT")
            .arg(1000)
            .query(con)?;
        keys.extend(found);
        if next == 0 {
            return Ok(keys);
        }
        cursor = next;
    }
}

/// Answers a request with what Redis gave; its error goes to the asker
/// and on, so that the thread reconnects.
fn answered<T>(
    got: redis::RedisResult<T>,
    done: Box<dyn FnOnce(Result<T, PeerError>) + Send>,
) -> redis::RedisResult<()> {
    match got {
        Ok(found) => {
            done(Ok(found));
            Ok(())
        }
        Err(e) => {
            done(Err(PeerError::NoAnswer(e.to_string())));
            Err(e)
        }
    }
}
