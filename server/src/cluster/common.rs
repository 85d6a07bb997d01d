//! What every cluster thread uses: stream names, pipelined round trips,
//! re-reading what changed, and the state of its link to Redis.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::Value;

use crate::broker::{has_own_slot, is_durable_stream};

/// The names of one Herald cluster's Redis keys and channels, all under
/// its `cluster.key_prefix` P (`herald` unless set), so that several
/// clusters can share one Redis.
pub struct Keys {
    /// P.
    prefix: String,
    /// `P:{P}:`, the prefix of every key that describes the cluster
    /// rather than one queue (the registry of subscriptions, the nodes,
    /// their interest, the shared settings), and of the streams of
    /// cluster subscriptions that an older version registered: one hash
    /// tag, so that on a Redis Cluster they share a slot and the scripts
    /// that read and write several of them stay on one shard.
    control: String,
    /// `P:q:{`, the prefix of the stream keys that hold shared queues'
    /// and cluster subscriptions' messages, `P:q:{<name>}`: the name is
    /// the hash tag, so that on a Redis Cluster each stream (with its
    /// group and pending entries) is on the shard of its slot and they
    /// spread over the shards.
    streams: String,
    /// The channels on which a node announces a change of the registry
    /// of subscriptions, of the shared settings, of its node record and
    /// of its interest (each message is the node id).
    pub(super) durables_channel: String,
    pub(super) settings_channel: String,
    pub(super) nodes_channel: String,
    pub(super) interest_channel: String,
}

impl Keys {
    /// The names under `prefix`.
    pub fn new(prefix: &str) -> Keys {
        Keys {
            prefix: prefix.to_owned(),
            control: format!("{prefix}:{{{prefix}}}:"),
            streams: format!("{prefix}:q:{{"),
            durables_channel: format!("{prefix}:durables"),
            settings_channel: format!("{prefix}:config"),
            nodes_channel: format!("{prefix}:nodes"),
            interest_channel: format!("{prefix}:interest"),
        }
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `P:{P}:`: a key of the cluster's own slot.
    pub(super) fn control(&self) -> &str {
        &self.control
    }

    /// The cluster's own key `name`: `P:{P}:<name>`.
    pub(super) fn own(&self, name: &str) -> String {
        format!("{}{name}", self.control)
    }

    /// The Redis stream that holds the messages of the shared queue (or
    /// cluster subscription stream) `name`, or of a partition of a
    /// queue's message groups (`<queue>#<part>`, see [`part_name`]):
    /// `P:q:{<queue>}:g<part>`, in the queue's slot.
    pub(super) fn stream(&self, name: &str) -> String {
        if let Some((queue, part)) = split_part(name) {
            return self.entry_stream(queue, part);
        }
        match is_durable_stream(name) && !has_own_slot(name) {
            true => format!("{}q:{name}", self.control),
            false => format!("{}{name}}}", self.streams),
        }
    }

    /// The stream of `queue` that holds its entries of partition `part`
    /// (0: the queue's own; see [`crate::broker::EntryId::part`]).
    pub(super) fn entry_stream(&self, queue: &str, part: u8) -> String {
        match part {
            0 => self.stream(queue),
            _ => format!("{}{queue}}}:g{part}", self.streams),
        }
    }

    /// The stream of `queue` that a message `block` is appended to: a
    /// message with a group goes to its group's partition (a cluster
    /// subscription's stream has none).
    pub(super) fn stream_for(&self, queue: &str, block: &[u8]) -> String {
        match is_durable_stream(queue) {
            true => self.stream(queue),
            false => self.entry_stream(queue, partition_of(block)),
        }
    }

    /// The glob of every stream key of a queue or subscription with a
    /// slot of its own.
    pub(super) fn streams_glob(&self) -> String {
        format!("{}*", self.streams)
    }

    /// The queue whose stream (its own or a partition's) is `key`, if it
    /// is a queue's.
    pub(super) fn queue_of<'k>(&self, key: &'k str) -> Option<&'k str> {
        let rest = key.strip_prefix(&self.streams)?;
        if let Some(queue) = rest.strip_suffix('}') {
            return Some(queue);
        }
        let (queue, part) = rest.rsplit_once("}:g")?;
        part.parse::<u8>()
            .is_ok_and(|p| (1..=PARTITIONS).contains(&p))
            .then_some(queue)
    }

    /// The channel on which node `node_id` hears the topic messages the
    /// others send it: `P:in:{<node id>}`, its own hash tag, so that on a
    /// Redis Cluster the inboxes of different nodes are on different
    /// shards.
    pub(super) fn inbox(&self, node_id: &str) -> String {
        format!("{}:in:{{{node_id}}}", self.prefix)
    }
}

/// The partitions of a shared queue's message groups: a message with a
/// `JMSXGroupID` goes to the stream of its group's partition, which one
/// node at a time reads (see `super::groups`). Fixed: every node must
/// agree on it.
pub(super) const PARTITIONS: u8 = 16;

/// The partition (1 to [`PARTITIONS`]) of a message block's group, or 0
/// for a message without one. FNV-1a over the group id's bytes (its
/// decimal digits for a number), not Rust's hasher: every node, whatever
/// its build, must place a group alike.
pub(super) fn partition_of(block: &[u8]) -> u8 {
    use herald_protocol::message::property_of;
    use herald_protocol::value::ValueRef;
    let Some(group) = property_of(block, crate::broker::queue::GROUP_PROPERTY) else {
        return 0;
    };
    let text;
    let bytes = match group {
        ValueRef::String(s) => s.as_bytes(),
        other => {
            text = format!("{other:?}");
            text.as_bytes()
        }
    };
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    });
    (hash % u64::from(PARTITIONS)) as u8 + 1
}

/// The name the queue thread gives partition `part` of `queue`'s
/// message groups: `<queue>#<part>` (`#` is in no queue's name).
pub(super) fn part_name(queue: &str, part: u8) -> String {
    format!("{queue}#{part}")
}

/// The queue and partition a [`part_name`] names.
pub(super) fn split_part(name: &str) -> Option<(&str, u8)> {
    let (queue, part) = name.rsplit_once('#')?;
    Some((queue, part.parse().ok()?))
}

/// The keys that begin with `prefix` (which holds no glob characters),
/// read with `SCAN` a thousand at a time rather than `KEYS`, which would
/// stop a Redis holding millions of keys (queues' streams among them)
/// for as long as it walks them all. A key made or deleted meanwhile may
/// be missed or seen; the callers read again at the next change.
pub(super) fn scan_prefix(
    con: &mut redis::Connection,
    prefix: &str,
) -> redis::RedisResult<Vec<String>> {
    let pattern = format!("{prefix}*");
    let mut cursor = 0u64;
    let mut keys = Vec::new();
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query(con)?;
        keys.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    // SCAN may return a key twice.
    keys.sort_unstable();
    keys.dedup();
    Ok(keys)
}

/// Sends `pipe` and reads its answers, giving up at the first that does
/// not come. (The `redis` crate's own reading goes on to wait
/// `ANSWER_TIMEOUT` for each of the others, which on a silent server adds
/// up to five seconds a command.) Returns the last `keep` answers, or the
/// first error Redis answered with; on an I/O error the connection is
/// done with.
pub(super) fn query_pipeline(
    con: &mut redis::Connection,
    pipe: &redis::Pipeline,
    keep: usize,
) -> redis::RedisResult<Vec<Value>> {
    send_pipeline(con, pipe)?;
    recv_pipeline(con, pipe, keep)
}

/// The first half of [`query_pipeline`]: sends `pipe`.
pub(super) fn send_pipeline(
    con: &mut redis::Connection,
    pipe: &redis::Pipeline,
) -> redis::RedisResult<()> {
    con.send_packed_command(&pipe.get_packed_pipeline())
}

/// The second half of [`query_pipeline`]: reads `pipe`'s answers.
pub(super) fn recv_pipeline(
    con: &mut redis::Connection,
    pipe: &redis::Pipeline,
    keep: usize,
) -> redis::RedisResult<Vec<Value>> {
    let mut all = recv_all(con, pipe)?;
    if let Some(Value::ServerError(e)) = all.iter().find(|a| matches!(a, Value::ServerError(_))) {
        return Err(redis::RedisError::from(e.clone()));
    }
    Ok(all.split_off(all.len().saturating_sub(keep)))
}

/// Reads every answer to `pipe`, a refusal among them as it came
/// (`Value::ServerError`): fails only if the connection does.
pub(super) fn recv_all(
    con: &mut redis::Connection,
    pipe: &redis::Pipeline,
) -> redis::RedisResult<Vec<Value>> {
    (0..pipe.cmd_iter().count())
        .map(|_| con.recv_response())
        .collect()
}

/// Reads something from Redis again if `changed` says so, and hands it
/// to `apply`; a failed read leaves `changed` set for the next try.
pub(super) fn reread<T>(
    changed: &AtomicBool,
    load: impl FnOnce() -> redis::RedisResult<T>,
    apply: impl FnOnce(T),
) -> redis::RedisResult<()> {
    if !changed.swap(false, Ordering::AcqRel) {
        return Ok(());
    }
    match load() {
        Ok(loaded) => {
            apply(loaded);
            Ok(())
        }
        Err(e) => {
            changed.store(true, Ordering::Relaxed);
            Err(e)
        }
    }
}

/// A cluster thread's reconnections. Each waits longer than the last
/// (50 ms, doubled up to half a second) until a connection has lasted
/// [`STABLE`]: a link that breaks as soon as it is made (its slot map
/// still names a dead primary) is not made again in a loop.
#[derive(Default)]
pub(super) struct Reconnect {
    attempt: u32,
    since: Option<Instant>,
}

/// The longest wait between two tries: a failover is followed within it
/// of its end.
const RECONNECT_MAX: Duration = Duration::from_millis(500);

/// How long a connection must last for the next failure to be retried at
/// once.
const STABLE: Duration = Duration::from_secs(5);

impl Reconnect {
    /// A connection is made.
    pub(super) fn connected(&mut self) {
        self.since = Some(Instant::now());
    }

    /// Whether the last try failed: what it knew of the cluster is to be
    /// read again.
    pub(super) fn again(&self) -> bool {
        self.attempt > 0
    }

    /// After a failure: waits before the next try (counted in `link`);
    /// false if `stop` is set meanwhile.
    pub(super) fn wait(&mut self, stop: &AtomicBool, link: &LinkState) -> bool {
        if self.since.take().is_some_and(|at| at.elapsed() >= STABLE) {
            self.attempt = 0;
        }
        link.reconnects.fetch_add(1, Ordering::Relaxed);
        let delay = Duration::from_millis(50u64 << self.attempt.min(4)).min(RECONNECT_MAX);
        self.attempt += 1;
        let deadline = Instant::now() + delay;
        while Instant::now() < deadline {
            if stop.load(Ordering::Acquire) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20).min(delay));
        }
        !stop.load(Ordering::Acquire)
    }
}

/// One cluster thread's link to Redis: whether it is up, how often it was
/// made again, and the limit on saying so in the log (a link that breaks
/// as soon as it is made would say it thousands of times a second).
#[derive(Debug, Default)]
pub struct LinkState {
    up: AtomicBool,
    /// Times the thread tried to connect again after a failure.
    pub reconnects: AtomicU64,
    log: crate::log_limit::LogLimit,
}

impl LinkState {
    /// Whether it is connected now.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// Marks it up, and says so when it changes.
    pub(super) fn set_up(&self, side: &str) {
        if !self.up.swap(true, Ordering::AcqRel) {
            if let Some(held) = self.log.allow() {
                let held = crate::log_limit::held_back(held);
                log::info!("cluster: {side} connected to Redis{held}");
            }
        }
    }

    /// Marks it down, and says so when it changes.
    pub(super) fn set_down(&self, side: &str, why: impl std::fmt::Display) {
        if self.up.swap(false, Ordering::AcqRel) {
            if let Some(held) = self.log.allow() {
                let held = crate::log_limit::held_back(held);
                log::warn!("cluster: {side} lost Redis ({why}); reconnecting{held}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use herald_protocol::{Destination, Message};

    fn block(group: Option<&str>) -> Vec<u8> {
        let mut m = Message::text("x");
        if let Some(g) = group {
            m = m.with_property("JMSXGroupID", g);
        }
        m.set_destination(Some(Destination::queue("q")));
        let mut b = BytesMut::new();
        m.encode(&mut b).unwrap();
        b.to_vec()
    }

    #[test]
    fn a_group_has_the_same_partition_on_every_node_and_build() {
        // FNV-1a (the values from an implementation of its own), pinned:
        // a change would split groups between nodes of two versions.
        assert_eq!(partition_of(&block(Some("g1"))), 6);
        assert_eq!(partition_of(&block(Some("order-42"))), 5);
        assert_eq!(partition_of(&block(None)), 0);
        let spread: std::collections::HashSet<u8> = (0..200)
            .map(|i| partition_of(&block(Some(&format!("g{i}")))))
            .collect();
        assert_eq!(
            spread.len(),
            usize::from(PARTITIONS),
            "every partition used"
        );
        assert!(spread.iter().all(|p| (1..=PARTITIONS).contains(p)));
    }

    #[test]
    fn partitions_are_named_in_their_queues_slot_and_found_back() {
        let keys = Keys::new("herald");
        assert_eq!(keys.stream("orders"), "herald:q:{orders}");
        assert_eq!(keys.stream(&part_name("orders", 3)), "herald:q:{orders}:g3");
        assert_eq!(keys.entry_stream("orders", 0), "herald:q:{orders}");
        assert_eq!(split_part("orders#3"), Some(("orders", 3)));
        assert_eq!(split_part("orders"), None);
        assert_eq!(keys.queue_of("herald:q:{orders}:g3"), Some("orders"));
        assert_eq!(keys.queue_of("herald:q:{orders}"), Some("orders"));
        assert_eq!(keys.queue_of("herald:q:{orders}:g3:active"), None);
        assert_eq!(keys.queue_of("herald:q:{orders}:g17"), None);
        assert_eq!(keys.queue_of("herald:q:{orders}:readers"), None);
        assert_eq!(
            keys.stream_for("orders", &block(Some("g1"))),
            "herald:q:{orders}:g6"
        );
    }
}
