//! Durable subscriptions shared by the nodes of a cluster.
//!
//! The registry is the Redis hash `herald:{herald}:durables`: one field per
//! subscription, named after its client id and name (see
//! [`DurableRecord::field`]), holding its client id, name, topic pattern
//! and selector. Its messages are in a stream of its own,
//! `herald:q:{<stream>}` (see [`DurableRecord::stream`]), whose slot is
//! its own: on a Redis Cluster the subscriptions spread over the shards
//! as queues do. A node that creates, replaces or deletes one writes the
//! hash and announces it on channel `herald:durables`; every node reads
//! the hash again when it hears that, when it connects, and every 20 s,
//! and enters each subscription in its topic tree. A message published on
//! any node is appended to the stream of each durable subscription it
//! matches (selectors run there), and the node where the subscriber is
//! reads the stream as it reads a shared queue's.
//!
//! The registry and a stream are on different shards, so a change is
//! made in two steps, the second once the first was answered ([`Step`]):
//! a registration makes the stream and its group, then the entry; a deletion drops the stream, then the entry if
//! it still is the one deleted (a replacement may have come first).
//! Appends to a subscription's stream do not make it (`NOMKSTREAM`): one
//! routed by a node that has not heard of the deletion yet is dropped,
//! instead of leaving a stream that nobody would ever delete. A replaced
//! subscription's stream has another name (it carries a hash of what it
//! subscribes to), so the old stream's deletion cannot reach the new
//! one's messages.
//!
//! A non-durable shared subscription ends when no node has a consumer:
//! each node with consumers keeps its origin in the set
//! `herald:{herald}:alive:<stream>` and renews a key
//! `herald:{herald}:alive:<stream>:<origin>`
//! that expires after `claim_idle_ms`. A node whose last consumer leaves,
//! and every node now and then for the ones it has no consumer of, drops
//! the members whose key expired and ends the subscription once none is
//! left (one script, so two nodes cannot both keep it or both miss it).
//! Its stream goes next.
//!
//! Subscriptions registered by an older version (their records have no
//! kind field) keep their streams where that version put them, under
//! `herald:{herald}:q:<stream>`, until they are deleted.

use bytes::{BufMut, Bytes, BytesMut};

use std::sync::Arc;

use super::common::{query_pipeline, Keys};
use super::replies::GROUP;
use crate::broker::DurableRecord;

/// The Redis hash of the registry (`P:{P}:durables`).
fn registry(keys: &Keys) -> String {
    keys.own("durables")
}

/// A counter raised whenever a subscription is registered or changed:
/// a node that routed a message knowing an older value may have missed a
/// subscription made meanwhile (see `Command::Recheck`).
pub(super) fn epoch(keys: &Keys) -> String {
    keys.own("durables:epoch")
}

/// Ends a non-durable shared subscription that no node has a consumer
/// of any more: KEYS = its alive set, the registry; ARGV = the origin
/// leaving ("" for none), the registry field, the announcing node id, the
/// prefix of the members' keys, the channel of announcements. Returns 1
/// if it ended (its stream is to go next).
const LEAVE: &str = r"
if ARGV[1] ~= '' then
  redis.call('SREM', KEYS[1], ARGV[1])
  redis.call('DEL', ARGV[4] .. ARGV[1])
end
for _, m in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if redis.call('EXISTS', ARGV[4] .. m) == 0 then
    redis.call('SREM', KEYS[1], m)
  end
end
if redis.call('SCARD', KEYS[1]) == 0 and redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 then
  redis.call('HDEL', KEYS[2], ARGV[2])
  redis.call('PUBLISH', ARGV[5], ARGV[3])
  return 1
end
return 0
";

/// Makes a subscription's stream and group if need be: KEYS = the
/// stream; ARGV = the group.
const MAKE: &str = r"
pcall(redis.call, 'XGROUP', 'CREATE', KEYS[1], ARGV[1], '0', 'MKSTREAM')
return 1
";

/// Registers a subscription: KEYS = the registry, the epoch; ARGV = its
/// field, its record. The epoch rises only if the record is new or
/// changed, so that a subscriber coming back does not count as new.
const REGISTER: &str = r"
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  redis.call('INCR', KEYS[2])
end
";

/// Deletes a subscription's entry if it still holds the record deleted:
/// KEYS = the registry; ARGV = its field, the record.
const UNREGISTER: &str = r"
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HDEL', KEYS[1], ARGV[1])
end
";

/// This node, as the registry's writes name it.
#[derive(Clone)]
pub(super) struct Member {
    /// The cluster's key names.
    pub keys: Arc<Keys>,
    /// Announces changes.
    pub node_id: String,
    /// Marks it alive in a non-durable shared subscription.
    pub origin: String,
    /// How long a mark lasts unless renewed.
    pub ttl_ms: u64,
}

/// Where a registry change stands: on a Redis Cluster its steps are on
/// two shards, and the second waits for the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// On the stream's shard: make it (a registration), or drop it (a
    /// deletion).
    Stream,
    /// On the registry's shard: the entry, and the announcement.
    Control,
}

fn alive_set(keys: &Keys, stream: &str) -> String {
    keys.own(&format!("alive:{stream}"))
}

/// The key whose slot `step` of a change to `record` is made in.
pub(super) fn key(keys: &Keys, record: &DurableRecord, step: Step) -> String {
    match step {
        Step::Stream => keys.stream(&record.stream()),
        Step::Control => keys.control().to_owned(),
    }
}

/// Adds the commands of `step` of registering (`registered`) or deleting
/// `record` by `by`. A non-durable one is registered with this node
/// alive in it, so that nobody ends it before this node's consumer is
/// counted.
pub(super) fn write(
    pipe: &mut redis::Pipeline,
    (record, registered): (&DurableRecord, bool),
    step: Step,
    by: &Member,
) {
    let (keys, stream) = (&*by.keys, record.stream());
    match (step, registered) {
        (Step::Stream, false) => {
            pipe.cmd("DEL").arg(keys.stream(&stream)).ignore();
        }
        (Step::Stream, true) => {
            pipe.cmd("EVAL")
                .arg(MAKE)
                .arg(1)
                .arg(keys.stream(&stream))
                .arg(GROUP)
                .ignore();
        }
        (Step::Control, registered) => {
            let script = match registered {
                true => REGISTER,
                false => UNREGISTER,
            };
            pipe.cmd("EVAL")
                .arg(script)
                .arg(1 + usize::from(registered))
                .arg(registry(keys));
            if registered {
                pipe.arg(epoch(keys));
            }
            pipe.arg(record.field()).arg(&encode(record)[..]).ignore();
            match (registered, record.durable) {
                (true, false) => mark_alive(pipe, &stream, by),
                (false, _) => {
                    pipe.cmd("DEL").arg(alive_set(keys, &stream)).ignore();
                }
                (true, true) => {}
            }
            pipe.cmd("PUBLISH")
                .arg(&keys.durables_channel)
                .arg(&by.node_id)
                .ignore();
        }
    }
}

/// Adds the commands that mark (or keep) this node alive in a non-durable
/// shared subscription.
pub(super) fn mark_alive(pipe: &mut redis::Pipeline, stream: &str, by: &Member) {
    let set = alive_set(&by.keys, stream);
    pipe.cmd("SADD").arg(&set).arg(&by.origin).ignore();
    pipe.cmd("SET")
        .arg(format!("{set}:{}", by.origin))
        .arg(1)
        .arg("PX")
        .arg(by.ttl_ms)
        .ignore();
}

/// Takes this node out of a non-durable shared subscription (`leaving`),
/// or only drops members that stopped renewing, and ends the subscription
/// if no member is left: on `control` (the registry's shard). Returns
/// whether it ended; its stream is then to go.
pub(super) fn leave(
    control: &mut redis::Connection,
    stream: &str,
    leaving: bool,
    by: &Member,
) -> redis::RedisResult<bool> {
    let set = alive_set(&by.keys, stream);
    redis::cmd("EVAL")
        .arg(LEAVE)
        .arg(2)
        .arg(&set)
        .arg(registry(&by.keys))
        .arg(if leaving { by.origin.as_str() } else { "" })
        .arg(crate::broker::durable_field(stream))
        .arg(&by.node_id)
        .arg(format!("{set}:"))
        .arg(&by.keys.durables_channel)
        .query(control)
}

/// Reads the registry, with its epoch as it was before the read (so that
/// a change made meanwhile counts as not yet seen). Entries that do not
/// decode are skipped.
pub(super) fn load(
    con: &mut redis::Connection,
    keys: &Keys,
) -> redis::RedisResult<(u64, Vec<DurableRecord>)> {
    let mut pipe = redis::pipe();
    pipe.cmd("GET")
        .arg(epoch(keys))
        .cmd("HGETALL")
        .arg(registry(keys));
    let answers = query_pipeline(con, &pipe, 2)?;
    let (epoch, all) = match &answers[..] {
        [epoch, all] => (
            redis::from_redis_value::<Option<u64>>(epoch)?,
            redis::from_redis_value::<Vec<(Vec<u8>, Vec<u8>)>>(all)?,
        ),
        _ => {
            let what = "the registry's read did not answer twice";
            return Err((redis::ErrorKind::ResponseError, what).into());
        }
    };
    let records = all
        .into_iter()
        .filter_map(|(field, value)| {
            let record = decode(&value);
            if record.is_none() {
                log::warn!(
                    "cluster: registry entry {} does not decode: ignored",
                    String::from_utf8_lossy(&field)
                );
            }
            record
        })
        .collect();
    Ok((epoch.unwrap_or(0), records))
}

/// A record as the registry holds it: each field as its length (4 bytes,
/// big-endian) and its UTF-8 bytes; a fifth holds the kind, "D" (durable)
/// or "S" (shared), of one whose stream has its own slot. An older
/// version's record has four fields (durable) or an empty fifth (shared).
fn encode(record: &DurableRecord) -> Bytes {
    let kind = match (record.own_slot, record.durable) {
        (true, true) => Some("D"),
        (true, false) => Some("S"),
        (false, false) => Some(""),
        (false, true) => None,
    };
    let fields = [
        &record.client_id[..],
        &record.name,
        &record.pattern,
        &record.selector,
    ];
    let mut b = BytesMut::new();
    for f in fields.into_iter().chain(kind) {
        b.put_u32(f.len() as u32);
        b.put_slice(f.as_bytes());
    }
    b.freeze()
}

fn decode(mut bytes: &[u8]) -> Option<DurableRecord> {
    fn field(bytes: &mut &[u8]) -> Option<String> {
        let (len, rest) = bytes.split_first_chunk::<4>()?;
        let (text, rest) = rest.split_at_checked(u32::from_be_bytes(*len) as usize)?;
        *bytes = rest;
        String::from_utf8(text.to_vec()).ok()
    }
    let b = &mut bytes;
    let (client_id, name, pattern, selector) = (field(b)?, field(b)?, field(b)?, field(b)?);
    let (durable, own_slot) = match b.is_empty() {
        true => (true, false),
        false => match &field(b)?[..] {
            "" => (false, false),
            "D" => (true, true),
            "S" => (false, true),
            _ => return None,
        },
    };
    if !b.is_empty() {
        return None;
    }
    Some(DurableRecord {
        client_id,
        name,
        pattern,
        selector,
        durable,
        own_slot,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_garbage_is_refused() {
        let record = DurableRecord {
            client_id: "app 1".into(),
            name: "daily".into(),
            pattern: "sales.#".into(),
            selector: "units > 3 AND region = 'EU'".into(),
            durable: true,
            own_slot: false,
        };
        let bytes = encode(&record);
        assert_eq!(bytes.len(), 4 * 4 + 5 + 5 + 7 + 27, "an older version's");
        assert_eq!(decode(&bytes), Some(record.clone()));
        for (durable, own_slot) in [(false, false), (true, true), (false, true)] {
            let other = DurableRecord {
                durable,
                own_slot,
                ..record.clone()
            };
            let five = encode(&other);
            assert_eq!(decode(&five), Some(other));
            assert_eq!(decode(&five[..five.len() - 1]), None);
        }
        let mut unknown = bytes.to_vec();
        unknown.extend_from_slice(&[0, 0, 0, 1, b'X']);
        assert_eq!(decode(&unknown), None, "an unknown kind");
        for cut in 0..bytes.len() {
            assert_eq!(decode(&bytes[..cut]), None, "cut at {cut}");
        }
        let mut longer = bytes.to_vec();
        longer.push(0);
        assert_eq!(decode(&longer), None, "trailing bytes");
        assert_eq!(
            decode(&[0xff, 0xff, 0xff, 0xff, b'x']),
            None,
            "absurd length"
        );
        assert_eq!(decode(&[0, 0, 0, 1, 0xff]), None, "not UTF-8");
    }
}
