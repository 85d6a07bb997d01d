//! Message groups across the nodes of a cluster. A shared queue's
//! messages with a `JMSXGroupID` are appended not to its stream but to
//! the stream of their group's partition (one of [`PARTITIONS`], by a
//! hash of the group id that every node computes alike), and each
//! partition is read by one node at a time, which holds its lease in
//! Redis as for an exclusive queue (see `super::exclusive`). That node's
//! own queue gives each group to one of its consumers at a time, as on a
//! single node: a group's messages go to one consumer in the cluster at
//! a time, in order.
//!
//! The nodes that read a queue share its partitions. Each counts itself
//! in the queue's set of readers (renewed; a dead node's place fades
//! after `claim_idle_ms`) and holds at most its share: the partitions
//! divided by the readers, rounded up. A node over its share (another
//! came) reads its extra partitions no more and lets each go once it has
//! held none of their messages for [`SETTLED`] (its consumers acknowledged
//! them all), so that the next node starts each group where this one's
//! consumers left it. A partition whose node died is taken when the lease
//! expires, what that node left pending first, in order.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::common::{part_name, split_part, Keys, PARTITIONS};
use super::exclusive::{Gate, Leases};
use super::shards::{Redis, Routed};
use crate::broker::SharedQueue;
use crate::sync::lock;

/// How often a node looks whether a queue it reads has grouped messages.
const PROBE: Duration = Duration::from_millis(200);
/// How often a node renews its place among a queue's readers at most (and
/// counts them again).
const COUNT: Duration = Duration::from_secs(1);
/// How long a partition a node gives up must have none of its messages
/// there before the node lets it go: the acknowledgements of the last
/// ones reach Redis meanwhile, so the next node does not deliver them
/// again.
const SETTLED: Duration = Duration::from_millis(500);

/// Counts node `ARGV[2]` among the readers `KEYS[1]` at time `ARGV[1]`
/// (ms), forgets those not seen for `ARGV[3]` ms, and answers how many
/// are left.
const COUNT_READERS: &str = "redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2]) \
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1] - ARGV[3]) \
    redis.call('PEXPIRE', KEYS[1], 2 * ARGV[3]) \
    return redis.call('ZCARD', KEYS[1])";

/// Who asks: the queue thread's link, the key names, this node's name.
type Who<'a, 'l> = (&'a mut Redis<'l>, &'a Keys, &'a str);

/// The partitions of grouped queues, as this node reads them.
#[derive(Default)]
pub(super) struct Partitions {
    /// Queues read here that have grouped messages: how many nodes read
    /// each at the last count, and when that was.
    grouped: HashMap<String, (usize, Instant)>,
    /// Queues read here without grouped messages at the last look, and
    /// when that was.
    probed: HashMap<String, Instant>,
    /// Partitions this node holds and gives up, and since when it holds
    /// none of their messages.
    giving_up: HashMap<String, Option<Instant>>,
}

impl Partitions {
    /// The partitions of `queue` (read here into `local`) that this node
    /// reads now, by their [`part_name`], with what their lease gate said
    /// ([`Gate::Taken`]: claim what was left pending first). `all` for an
    /// exclusive queue, whose node reads every partition.
    pub(super) fn readable(
        &mut self,
        (shards, keys, me): Who,
        leases: &mut Leases,
        (queue, local): (&str, &SharedQueue),
        (lease, all): (Duration, bool),
    ) -> redis::RedisResult<Vec<(String, Gate)>> {
        let Some(readers) = self.readers((shards, keys, me), queue, lease)? else {
            return Ok(Vec::new());
        };
        let share = match all {
            true => usize::from(PARTITIONS),
            false => usize::from(PARTITIONS).div_ceil(readers.max(1)),
        };
        let mut readable = Vec::new();
        // Those held first: renewed, read up to the share, the others
        // given up.
        for part in 1..=PARTITIONS {
            let name = part_name(queue, part);
            if !leases.holds(&name) {
                self.giving_up.remove(&name);
                continue;
            }
            let gate = leases.gate((&mut *shards, keys, me), &name, lease)?;
            if gate == Gate::Closed {
                self.giving_up.remove(&name);
                continue;
            }
            if readable.len() < share {
                self.giving_up.remove(&name);
                readable.push((name, gate));
                continue;
            }
            let held = lock(local).entries().iter().any(|e| e.part == part);
            let since = self.giving_up.entry(name.clone()).or_insert(None);
            match (held, *since) {
                (true, _) => *since = None,
                (false, None) => *since = Some(Instant::now()),
                (false, Some(at)) if at.elapsed() >= SETTLED => {
                    log::debug!("cluster: {name} goes to another node");
                    self.giving_up.remove(&name);
                    leases.release((&mut *shards, keys, me), &name)?;
                }
                (false, Some(_)) => {}
            }
        }
        // Then free ones up to the share, each node from a place of its
        // own, so that nodes seldom try for the same one.
        let start = me
            .bytes()
            .fold(0u8, |h, b| h.wrapping_mul(31).wrapping_add(b))
            % PARTITIONS;
        for i in 0..PARTITIONS {
            if readable.len() >= share {
                break;
            }
            let name = part_name(queue, (start + i) % PARTITIONS + 1);
            if leases.holds(&name) {
                continue;
            }
            match leases.gate((&mut *shards, keys, me), &name, lease)? {
                Gate::Closed => {}
                gate => readable.push((name, gate)),
            }
        }
        Ok(readable)
    }

    /// How many nodes read `queue`'s partitions, this one counted in, or
    /// `None` while the queue has no grouped messages.
    fn readers(
        &mut self,
        (shards, keys, me): Who,
        queue: &str,
        lease: Duration,
    ) -> redis::RedisResult<Option<usize>> {
        match self.grouped.get(queue) {
            Some(&(count, at)) if at.elapsed() < COUNT.min(lease / 3) => return Ok(Some(count)),
            Some(_) => {}
            None => {
                if self
                    .probed
                    .get(queue)
                    .is_some_and(|at| at.elapsed() < PROBE)
                {
                    return Ok(None);
                }
                // In the queue's slot, all of them: one look.
                let streams: Vec<String> = (1..=PARTITIONS)
                    .map(|part| keys.entry_stream(queue, part))
                    .collect();
                let found: u64 = redis::cmd("EXISTS").arg(&streams).on(shards, &streams[0])?;
                if found == 0 {
                    self.probed.insert(queue.to_owned(), Instant::now());
                    return Ok(None);
                }
                self.probed.remove(queue);
            }
        }
        let key = readers_key(keys, queue);
        let count: usize = redis::cmd("EVAL")
            .arg(COUNT_READERS)
            .arg(1)
            .arg(&key)
            .arg(crate::broker::queue::now_ms())
            .arg(me)
            .arg(lease.as_millis() as u64)
            .on(shards, &key)?;
        self.grouped
            .insert(queue.to_owned(), (count, Instant::now()));
        Ok(Some(count))
    }

    /// Lets go of the partitions of the queues this node no longer reads
    /// (`reads` tells which it does), leaving what it read of them
    /// pending for the node that takes them next, and leaves their
    /// readers.
    pub(super) fn retain(
        &mut self,
        (shards, keys, me): Who,
        leases: &mut Leases,
        reads: impl Fn(&str) -> bool,
    ) -> redis::RedisResult<()> {
        for name in leases.held() {
            if split_part(&name).is_some_and(|(queue, _)| !reads(queue)) {
                self.giving_up.remove(&name);
                leases.release((&mut *shards, keys, me), &name)?;
            }
        }
        self.probed.retain(|queue, _| reads(queue));
        let left: Vec<String> = self
            .grouped
            .keys()
            .filter(|queue| !reads(queue))
            .cloned()
            .collect();
        for queue in left {
            self.grouped.remove(&queue);
            let key = readers_key(keys, &queue);
            redis::cmd("ZREM")
                .arg(&key)
                .arg(me)
                .on::<i64>(shards, &key)?;
        }
        Ok(())
    }
}

/// The set of the nodes that read `queue`'s partitions: beside its
/// stream, in its slot.
pub(super) fn readers_key(keys: &Keys, queue: &str) -> String {
    format!("{}:readers", keys.stream(queue))
}
