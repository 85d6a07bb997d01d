//! Redis Cluster's key slots: which of the 16,384 slots a key hashes to
//! (CRC16 of the key, or of its hash tag), and which primary serves each
//! slot (`CLUSTER SLOTS`).
//!
//! Every key of one destination carries the destination's name as its
//! hash tag (`herald:q:{orders}`), so a destination's keys share a slot
//! and every multi-key command and script on it stays on one shard, while
//! different destinations spread over the shards.

use redis::Value;

/// Slots in a Redis Cluster.
pub const SLOTS: usize = 16_384;

/// CRC16/XMODEM (polynomial 0x1021, initial 0), a byte at a time from a
/// table made at compile time: Redis Cluster's key hash.
const CRC16: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

fn crc16(data: &[u8]) -> u16 {
    data.iter().fold(0u16, |crc, &b| {
        (crc << 8) ^ CRC16[usize::from((crc >> 8) as u8 ^ b)]
    })
}

/// The part of `key` that is hashed: what lies between its first `{`
/// and the first `}` after it, if that is not empty; else the whole key
/// (Redis Cluster's rule, so that `a{x}` and `b{x}` share a slot).
fn hashed(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&b| b == b'{') else {
        return key;
    };
    match key[open + 1..].iter().position(|&b| b == b'}') {
        Some(0) | None => key,
        Some(len) => &key[open + 1..open + 1 + len],
    }
}

/// The slot `key` belongs to.
pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hashed(key)) & (SLOTS as u16 - 1)
}

/// Which primary serves each slot, as a cluster node answered
/// `CLUSTER SLOTS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotMap {
    /// `host:port` of each primary, in the order first met.
    pub primaries: Vec<String>,
    /// Per slot, the index of its primary in `primaries`; `NONE` for a
    /// slot no primary serves.
    owner: Vec<u16>,
}

const NONE: u16 = u16::MAX;

/// A `CLUSTER SLOTS` answer that does not read, with what was there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlotsError {
    /// The answer is not a list of ranges.
    #[error("CLUSTER SLOTS answered {0}, not a list")]
    NotAList(String),
    /// A range that is not a list.
    #[error("a slot range that is not a list: {0}")]
    RangeNotAList(String),
    /// A range without start, end and primary.
    #[error("a slot range without its primary: {0}")]
    NoPrimary(String),
    /// Slots outside 0 to 16383, or backwards.
    #[error("slots {start}-{end} are not within 0-16383")]
    OutOfRange {
        /// The first.
        start: i64,
        /// The last.
        end: i64,
    },
    /// A primary without a host.
    #[error("a primary without a host: {0}")]
    NoHost(String),
    /// A primary without a port.
    #[error("the primary {0} has no port")]
    NoPort(String),
}

impl SlotMap {
    /// Reads a `CLUSTER SLOTS` answer. A primary whose host is empty (the
    /// node does not know the address it is reached at) is taken to be on
    /// `asked_host`, the host that answered.
    pub fn parse(reply: &Value, asked_host: &str) -> Result<SlotMap, SlotsError> {
        let Value::Array(ranges) = reply else {
            return Err(SlotsError::NotAList(format!("{reply:?}")));
        };
        let mut map = SlotMap {
            primaries: Vec::new(),
            owner: vec![NONE; SLOTS],
        };
        for range in ranges {
            let Value::Array(fields) = range else {
                return Err(SlotsError::RangeNotAList(format!("{range:?}")));
            };
            let (start, end, primary) = match &fields[..] {
                [Value::Int(start), Value::Int(end), Value::Array(primary), ..] => {
                    (*start, *end, primary)
                }
                _ => return Err(SlotsError::NoPrimary(format!("{fields:?}"))),
            };
            let in_range = |s: i64| usize::try_from(s).is_ok_and(|s| s < SLOTS);
            if !in_range(start) || !in_range(end) || start > end {
                return Err(SlotsError::OutOfRange { start, end });
            }
            let host = match primary.first() {
                Some(Value::BulkString(h)) if !h.is_empty() => String::from_utf8_lossy(h).into(),
                Some(Value::BulkString(_)) | Some(Value::Nil) => asked_host.to_owned(),
                other => return Err(SlotsError::NoHost(format!("{other:?}"))),
            };
            let Some(Value::Int(port)) = primary.get(1) else {
                return Err(SlotsError::NoPort(host));
            };
            let addr = format!("{host}:{port}");
            let index = match map.primaries.iter().position(|p| *p == addr) {
                Some(i) => i,
                None => {
                    map.primaries.push(addr);
                    map.primaries.len() - 1
                }
            };
            for slot in start as usize..=end as usize {
                map.owner[slot] = index as u16;
            }
        }
        Ok(map)
    }

    /// A map of one server that serves every slot: a Redis that is not a
    /// cluster.
    pub fn single(addr: String) -> SlotMap {
        SlotMap {
            primaries: vec![addr],
            owner: vec![0; SLOTS],
        }
    }

    /// The index in `primaries` of the primary serving `slot`.
    pub fn primary_of(&self, slot: u16) -> Option<usize> {
        match self.owner.get(usize::from(slot)) {
            Some(&NONE) | None => None,
            Some(&i) => Some(usize::from(i)),
        }
    }

    /// The ranges of slots that no primary serves, first to last.
    pub fn uncovered(&self) -> Vec<(u16, u16)> {
        let mut ranges: Vec<(u16, u16)> = Vec::new();
        for (slot, &owner) in self.owner.iter().enumerate() {
            if owner != NONE {
                continue;
            }
            let slot = slot as u16;
            match ranges.last_mut() {
                Some((_, end)) if *end + 1 == slot => *end = slot,
                _ => ranges.push((slot, slot)),
            }
        }
        ranges
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_hash_to_the_slots_redis_gives_them() {
        // The CRC16 check value, and slots as `CLUSTER KEYSLOT` gives them.
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b""), 0);
        // A hash tag: the part in braces decides.
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(
            key_slot(b"herald:q:{orders}"),
            key_slot(b"other:{orders}:n/1")
        );
        // Empty braces are no tag; only the first pair counts.
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") & 16383);
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"foo{bar"), crc16(b"foo{bar") & 16383);
    }

    fn range(start: i64, end: i64, host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::Int(start),
            Value::Int(end),
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ]),
            // A replica, which the map leaves aside.
            Value::Array(vec![
                Value::BulkString(b"10.0.0.9".to_vec()),
                Value::Int(7000),
            ]),
        ])
    }

    #[test]
    fn slot_maps_say_who_serves_what_and_what_nobody_does() {
        let reply = Value::Array(vec![
            range(0, 5460, "10.0.0.1", 7000),
            range(5461, 10922, "", 7001),
            range(10923, 16000, "10.0.0.1", 7000),
        ]);
        let map = SlotMap::parse(&reply, "seed").unwrap();
        assert_eq!(map.primaries, ["10.0.0.1:7000", "seed:7001"]);
        assert_eq!(map.primary_of(0), Some(0));
        assert_eq!(map.primary_of(5461), Some(1));
        assert_eq!(map.primary_of(16000), Some(0));
        assert_eq!(map.primary_of(16001), None);
        assert_eq!(map.uncovered(), [(16001, 16383)]);
        assert!(SlotMap::single("h:1".into()).uncovered().is_empty());

        for bad in [
            Value::Okay,
            Value::Array(vec![Value::Int(1)]),
            Value::Array(vec![range(5, 2, "h", 1)]),
            Value::Array(vec![range(0, 16384, "h", 1)]),
            Value::Array(vec![Value::Array(vec![
                Value::Int(0),
                Value::Int(1),
                Value::Array(vec![Value::BulkString(b"h".to_vec())]),
            ])]),
        ] {
            assert!(SlotMap::parse(&bad, "seed").is_err(), "{bad:?}");
        }
    }
}
