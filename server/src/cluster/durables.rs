//! Durable subscriptions shared by the nodes of a cluster.
//!
//! The registry is the Redis hash `herald:durables`: one field per
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

use bytes::{BufMut, Bytes, BytesMut};

use crate::broker::DurableRecord;

/// The Redis hash of the registry.
const REGISTRY: &str = "herald:durables";
/// The channel on which a change is announced (the message is the node
/// id).
pub(super) const CHANNEL: &str = "herald:durables";

/// Adds the commands that register (`Some`) or delete a subscription, and
/// announce it.
pub(super) fn write(
    pipe: &mut redis::Pipeline,
    stream: &str,
    record: Option<&Bytes>,
    node_id: &str,
) {
    match record {
        Some(record) => {
            pipe.cmd("HSET")
                .arg(REGISTRY)
                .arg(stream)
                .arg(&record[..])
                .ignore();
        }
        None => {
            pipe.cmd("HDEL").arg(REGISTRY).arg(stream).ignore();
            pipe.cmd("DEL").arg(super::queues::key(stream)).ignore();
        }
    }
    pipe.cmd("PUBLISH").arg(CHANNEL).arg(node_id).ignore();
}

/// Reads the registry. Entries that do not decode are skipped.
pub(super) fn load(con: &mut redis::Connection) -> redis::RedisResult<Vec<DurableRecord>> {
    let all: Vec<(Vec<u8>, Vec<u8>)> = redis::cmd("HGETALL").arg(REGISTRY).query(con)?;
    Ok(all
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
        .collect())
}

/// A record as the registry holds it: each field as its length (4 bytes,
/// big-endian) and its UTF-8 bytes.
pub(super) fn encode(record: &DurableRecord) -> Bytes {
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
    b.freeze()
}

fn decode(mut bytes: &[u8]) -> Option<DurableRecord> {
    let mut field = || -> Option<String> {
        let (len, rest) = bytes.split_first_chunk::<4>()?;
        let (text, rest) = rest.split_at_checked(u32::from_be_bytes(*len) as usize)?;
        bytes = rest;
        String::from_utf8(text.to_vec()).ok()
    };
    let record = DurableRecord {
        client_id: field()?,
        name: field()?,
        pattern: field()?,
        selector: field()?,
    };
    bytes.is_empty().then_some(record)
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
        };
        let bytes = encode(&record);
        assert_eq!(decode(&bytes), Some(record));
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
