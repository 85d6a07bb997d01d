//! Redis's replies to the stream commands, parsed: entry lists, the
//! lines of `XPENDING` and the members of `XINFO CONSUMERS`. What does
//! not parse is skipped, never a panic: Redis is a peer like any other.

use bytes::Bytes;
use redis::Value;

use crate::broker::EntryId;

/// The consumer group every node reads a queue's stream in.
pub(super) const GROUP: &str = "herald";

/// An entry's fields that Herald reads.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Fields {
    /// `m`: the message block.
    pub(super) block: Option<Bytes>,
    /// `d`: deliveries before it was given back.
    pub(super) deliveries: u32,
}

pub(super) fn bulk(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

pub(super) fn int(v: &Value) -> Option<u64> {
    match v {
        Value::Int(n) => u64::try_from(*n).ok(),
        other => std::str::from_utf8(bulk(other)?).ok()?.parse().ok(),
    }
}

pub(super) fn array(v: Value) -> Vec<Value> {
    match v {
        Value::Array(items) => items,
        _ => Vec::new(),
    }
}

/// An `XREADGROUP` reply: (stream, entries) pairs. Anything malformed is
/// skipped.
pub(super) fn streams(reply: Value) -> Vec<(String, Vec<(EntryId, Fields)>)> {
    let pairs: Vec<(Value, Value)> = match reply {
        Value::Map(pairs) => pairs,
        other => array(other)
            .into_iter()
            .filter_map(|s| {
                let mut s = array(s).into_iter();
                Some((s.next()?, s.next()?))
            })
            .collect(),
    };
    pairs
        .into_iter()
        .filter_map(|(name, list)| {
            let name = String::from_utf8(bulk(&name)?.to_vec()).ok()?;
            Some((name, entries(list)))
        })
        .collect()
}

/// A list of entries (`[id, [field, value, ...]]`), as `XREADGROUP` and
/// `XCLAIM` answer. A deleted entry (no fields) is left out.
pub(super) fn entries(list: Value) -> Vec<(EntryId, Fields)> {
    array(list)
        .into_iter()
        .filter_map(|e| {
            let mut e = array(e).into_iter();
            let id = EntryId::parse(bulk(&e.next()?)?)?;
            let mut values = array(e.next()?).into_iter();
            if values.len() == 0 {
                return None;
            }
            let mut fields = Fields::default();
            while let (Some(name), Some(value)) = (values.next(), values.next()) {
                match (bulk(&name), value) {
                    // The reply's own bytes become the block: no copy.
                    (Some(b"m"), Value::BulkString(block)) => fields.block = Some(block.into()),
                    (Some(b"d"), v) => fields.deliveries = int(&v).unwrap_or(0) as u32,
                    _ => {}
                }
            }
            Some((id, fields))
        })
        .collect()
}

/// One line of `XPENDING`'s extended form.
pub(super) struct PendingEntry {
    pub(super) entry: EntryId,
    pub(super) consumer: String,
    pub(super) deliveries: u32,
}

pub(super) fn pending_entries(reply: Value) -> Vec<PendingEntry> {
    array(reply)
        .into_iter()
        .filter_map(|p| {
            let p = array(p);
            Some(PendingEntry {
                entry: EntryId::parse(bulk(p.first()?)?)?,
                consumer: String::from_utf8_lossy(bulk(p.get(1)?)?).into_owned(),
                deliveries: int(p.get(3)?)? as u32,
            })
        })
        .collect()
}

/// One member of a group, as `XINFO CONSUMERS` lists it.
pub(super) struct Member {
    pub(super) name: String,
    pub(super) pending: u64,
    pub(super) idle_ms: u64,
}

pub(super) fn consumers(reply: Value) -> Vec<Member> {
    array(reply)
        .into_iter()
        .filter_map(|m| {
            let fields: Vec<(Value, Value)> = match m {
                Value::Map(pairs) => pairs,
                other => {
                    let flat = array(other);
                    flat.chunks(2)
                        .filter_map(|p| Some((p.first()?.clone(), p.get(1)?.clone())))
                        .collect()
                }
            };
            let get = |name: &[u8]| {
                fields
                    .iter()
                    .find(|(k, _)| bulk(k) == Some(name))
                    .map(|(_, v)| v)
            };
            Some(Member {
                name: String::from_utf8_lossy(bulk(get(b"name")?)?).into_owned(),
                pending: int(get(b"pending")?)?,
                idle_ms: int(get(b"idle")?)?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn entry_lists_are_parsed_and_garbage_skipped() {
        let list = Value::Array(vec![
            Value::Array(vec![
                b("1-2"),
                Value::Array(vec![b("m"), b("block"), b("d"), b("3")]),
            ]),
            // Deleted: no fields.
            Value::Array(vec![b("1-3"), Value::Nil]),
            Value::Array(vec![b("not an id"), Value::Array(vec![b("m"), b("x")])]),
            Value::Int(7),
            Value::Array(vec![b("4-0"), Value::Array(vec![b("m")])]),
        ]);
        let parsed = entries(list);
        assert_eq!(parsed.len(), 2);
        assert_eq!(
            parsed[0].0,
            EntryId {
                ms: 1,
                seq: 2,
                part: 0
            }
        );
        assert_eq!(
            parsed[0].1,
            Fields {
                block: Some(Bytes::from_static(b"block")),
                deliveries: 3
            }
        );
        assert_eq!(parsed[1].1, Fields::default(), "a field without a value");
        let reply = Value::Array(vec![
            Value::Array(vec![b("herald:q:{a}"), Value::Array(vec![])]),
            Value::Array(vec![b("short")]),
        ]);
        assert_eq!(streams(reply).len(), 1);
        assert!(streams(Value::Nil).is_empty());
    }

    #[test]
    fn pending_lines_and_members_are_parsed() {
        let pending = Value::Array(vec![
            Value::Array(vec![b("5-1"), b("n/1"), Value::Int(900), Value::Int(2)]),
            Value::Array(vec![b("5-2"), b("n/1")]),
        ]);
        let p = pending_entries(pending);
        assert_eq!(p.len(), 1);
        assert_eq!(
            (p[0].entry.seq, p[0].consumer.as_str(), p[0].deliveries),
            (1, "n/1", 2)
        );
        let members = Value::Array(vec![
            Value::Array(vec![
                b("name"),
                b("n/2"),
                b("pending"),
                Value::Int(0),
                b("idle"),
                Value::Int(5000),
            ]),
            Value::Array(vec![b("name"), b("n/3")]),
        ]);
        let m = consumers(members);
        assert_eq!(m.len(), 1);
        assert_eq!(
            (m[0].name.as_str(), m[0].pending, m[0].idle_ms),
            ("n/2", 0, 5000)
        );
    }

    #[test]
    fn entry_ids_round_trip_and_refuse_garbage() {
        let id = EntryId::parse(b"1700000000000-42").unwrap();
        assert_eq!(id.to_string(), "1700000000000-42");
        for bad in [&b""[..], b"12", b"a-1", b"1-", b"-1", b"1-2-3"] {
            assert!(EntryId::parse(bad).is_none(), "{bad:?}");
        }
    }
}
