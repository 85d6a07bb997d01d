//! Durable subscriptions shared by the nodes of a cluster.
//!
//! The registry is the Redis hash `herald:{herald}:durables`: one field per
//! subscription, named after its stream (see
//! [`crate::broker::cluster_durable_stream`]), holding its client id,
//! name, topic pattern and selector. A node that creates, replaces or
//! deletes one writes the hash (a deletion drops the stream, with what it
//! kept) and announces it on channel `herald:durables`; every node reads
//! the hash again when it hears that, when it connects, and every 20 s,
//! and enters each subscription in its topic tree. A message published on
//! any node is appended to the stream of each durable subscription it
//! matches (selectors run there), and the node where the subscriber is
//! reads the stream as it reads a shared queue's.
//!
//! A non-durable shared subscription is registered the same way, so that
//! its consumers on every node share one stream, and ends when no node
//! has a consumer: each node with consumers keeps its origin in the set
//! `herald:{herald}:alive:<stream>` and renews a key
//! `herald:{herald}:alive:<stream>:<origin>`
//! that expires after `claim_idle_ms`. A node whose last consumer leaves,
//! and every node now and then for the ones it has no consumer of, drops
//! the members whose key expired and ends the subscription once none is
//! left (one script, so two nodes cannot both keep it or both miss it).

use bytes::{BufMut, Bytes, BytesMut};

use super::common::{query_pipeline, stream_key, CONTROL};
use crate::broker::DurableRecord;

/// The Redis hash of the registry.
const REGISTRY: &str = "herald:{herald}:durables";
/// A counter raised whenever a subscription is registered or changed:
/// a node that routed a message knowing an older value may have missed a
/// subscription made meanwhile (see `Command::Recheck`).
pub(super) const EPOCH: &str = "herald:{herald}:durables:epoch";
/// The channel on which a change is announced (the message is the node
/// id).
pub(super) const CHANNEL: &str = "herald:durables";

/// Ends a non-durable shared subscription that no node has a consumer
/// of any more: KEYS = its alive set, the registry, its stream; ARGV =
/// the origin leaving ("" for none), the registry field, the announcing
/// node id, the prefix of the members' keys.
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
  redis.call('DEL', KEYS[3])
  redis.call('PUBLISH', 'herald:durables', ARGV[3])
  return 1
end
return 0
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

/// This node, as the registry's writes name it.
#[derive(Debug, Clone)]
pub(super) struct Member {
    /// Announces changes.
    pub node_id: String,
    /// Marks it alive in a non-durable shared subscription.
    pub origin: String,
    /// How long a mark lasts unless renewed.
    pub ttl_ms: u64,
}

fn alive_set(stream: &str) -> String {
    format!("{CONTROL}alive:{stream}")
}

/// Adds the commands that register (`Some`) or delete a subscription, and
/// announce it. A non-durable one is registered with this node alive in
/// it, so that nobody ends it before this node's consumer is counted.
pub(super) fn write(
    pipe: &mut redis::Pipeline,
    stream: &str,
    record: Option<&DurableRecord>,
    by: &Member,
) {
    match record {
        Some(record) => {
            pipe.cmd("EVAL")
                .arg(REGISTER)
                .arg(2)
                .arg(REGISTRY)
                .arg(EPOCH)
                .arg(stream)
                .arg(&encode(record)[..])
                .ignore();
            if !record.durable {
                mark_alive(pipe, stream, by);
            }
        }
        None => {
            pipe.cmd("HDEL").arg(REGISTRY).arg(stream).ignore();
            pipe.cmd("DEL").arg(stream_key(stream)).ignore();
            pipe.cmd("DEL").arg(alive_set(stream)).ignore();
        }
    }
    pipe.cmd("PUBLISH").arg(CHANNEL).arg(&by.node_id).ignore();
}

/// Adds the commands that mark (or keep) this node alive in a non-durable
/// shared subscription.
pub(super) fn mark_alive(pipe: &mut redis::Pipeline, stream: &str, by: &Member) {
    let set = alive_set(stream);
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
/// if no member is left. Returns whether it ended.
pub(super) fn leave(
    con: &mut redis::Connection,
    stream: &str,
    leaving: bool,
    by: &Member,
) -> redis::RedisResult<bool> {
    let set = alive_set(stream);
    redis::cmd("EVAL")
        .arg(LEAVE)
        .arg(3)
        .arg(&set)
        .arg(REGISTRY)
        .arg(stream_key(stream))
        .arg(if leaving { by.origin.as_str() } else { "" })
        .arg(stream)
        .arg(&by.node_id)
        .arg(format!("{set}:"))
        .query(con)
}

/// Reads the registry, with its epoch as it was before the read (so that
/// a change made meanwhile counts as not yet seen). Entries that do not
/// decode are skipped.
pub(super) fn load(con: &mut redis::Connection) -> redis::RedisResult<(u64, Vec<DurableRecord>)> {
    let mut pipe = redis::pipe();
    pipe.cmd("GET").arg(EPOCH).cmd("HGETALL").arg(REGISTRY);
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
/// big-endian) and its UTF-8 bytes; a non-durable shared subscription's
/// has a fifth, empty field.
fn encode(record: &DurableRecord) -> Bytes {
    let fields = [
        &record.client_id,
        &record.name,
        &record.pattern,
        &record.selector,
    ];
    let mut b = BytesMut::new();
    for f in fields {
        b.put_u32(f.len() as u32);
        b.put_slice(f.as_bytes());
    }
    if !record.durable {
        b.put_u32(0);
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
    // A fifth field, empty, marks a non-durable shared subscription.
    let durable = match b.is_empty() {
        true => true,
        false => {
            if !field(b)?.is_empty() {
                return None;
            }
            false
        }
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
        };
        let bytes = encode(&record);
        assert_eq!(decode(&bytes), Some(record.clone()));
        let shared = DurableRecord {
            durable: false,
            ..record
        };
        let five = encode(&shared);
        assert_eq!(decode(&five), Some(shared));
        assert_eq!(decode(&five[..five.len() - 1]), None);
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
