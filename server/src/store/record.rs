//! The records a store keeps, the [`Store`] trait the broker writes them
//! through, and how a write's outcome comes back ([`Completion`]).

use bytes::{BufMut, Bytes, BytesMut};
use herald_protocol::cursor::{put_str16, Cursor};

/// Run once a record is as durable as the configured policy makes it, or
/// with the reason it could not be written.
pub type Completion = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

/// Why what a request needed is not as safe as it asked: a [`Completion`]'s
/// error. Each protocol turns it into its own error in one place
/// (`frontend::Refusal`'s `From`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The journal could not write the records (a full or failing disk, or
    /// a journal stopped after a failed sync): their sends are not kept.
    #[error("the journal could not write: {0}")]
    Journal(String),
    /// Redis did not confirm what was sent to it: the link failed, or too
    /// few replicas took it. The messages may yet be delivered.
    #[error("Redis did not confirm: {0}")]
    Unconfirmed(String),
    /// Redis refused something the connection sent.
    #[error("Redis did not accept a message")]
    Refused,
}

/// Where a kept message waits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Holder {
    /// A named queue.
    Queue(String),
    /// A durable subscription: (client id, subscription name).
    Durable(String, String),
    /// The retained message of a topic (one per topic, as MQTT's).
    Retained(String),
}

/// One change to what must be kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A persistent message entered a queue or durable subscription.
    Enqueue {
        /// This record's id.
        id: u64,
        /// Where it waits.
        holder: Holder,
        /// The message block.
        block: Bytes,
    },
    /// A durable subscription was created.
    Durable {
        /// This record's id.
        id: u64,
        /// Client id.
        client_id: String,
        /// Subscription name.
        name: String,
        /// Topic pattern.
        pattern: String,
        /// Selector text ("" = none).
        selector: String,
        /// The user who made it ("" = anonymous). Written last, and
        /// read only if present: journals from before it still replay.
        owner: String,
    },
    /// The message or subscription with this id is gone (acknowledged,
    /// moved, deleted).
    End {
        /// The id of the record it ends.
        id: u64,
    },
    /// A queue was created through the management interface: it lives,
    /// empty or not, until it is deleted.
    Queue {
        /// This record's id.
        id: u64,
        /// The queue's name.
        name: String,
    },
    /// Records that take effect together or not at all (a committed
    /// transaction): one journal entry under one checksum. Never nested.
    Batch(Vec<Record>),
}

const ENQUEUE: u8 = 1;
const END: u8 = 2;
const DURABLE: u8 = 3;
const BATCH: u8 = 4;
const QUEUE: u8 = 5;

impl Record {
    /// The id this record starts or ends; a batch has none of its own (0).
    pub fn id(&self) -> u64 {
        match self {
            Record::Enqueue { id, .. }
            | Record::Durable { id, .. }
            | Record::Queue { id, .. }
            | Record::End { id } => *id,
            Record::Batch(_) => 0,
        }
    }

    /// The single records this one stands for: a batch's parts, in order,
    /// or the record itself.
    pub fn into_parts(self) -> Vec<Record> {
        match self {
            Record::Batch(parts) => parts,
            single => vec![single],
        }
    }

    /// Appends the record's payload.
    pub fn encode(&self, d: &mut BytesMut) -> Result<(), herald_protocol::Error> {
        match self {
            Record::Enqueue { id, holder, block } => {
                d.put_u8(ENQUEUE);
                d.put_u64(*id);
                match holder {
                    Holder::Queue(name) => {
                        d.put_u8(0);
                        put_str16(d, name, "queue")?;
                        put_str16(d, "", "name")?;
                    }
                    Holder::Durable(client, name) => {
                        d.put_u8(1);
                        put_str16(d, client, "client id")?;
                        put_str16(d, name, "name")?;
                    }
                    Holder::Retained(topic) => {
                        d.put_u8(2);
                        put_str16(d, topic, "topic")?;
                        put_str16(d, "", "name")?;
                    }
                }
                d.put_slice(block);
            }
            Record::End { id } => {
                d.put_u8(END);
                d.put_u64(*id);
            }
            Record::Durable {
                id,
                client_id,
                name,
                pattern,
                selector,
                owner,
            } => {
                d.put_u8(DURABLE);
                d.put_u64(*id);
                put_str16(d, client_id, "client id")?;
                put_str16(d, name, "name")?;
                put_str16(d, pattern, "pattern")?;
                put_str16(d, selector, "selector")?;
                put_str16(d, owner, "owner")?;
            }
            Record::Queue { id, name } => {
                d.put_u8(QUEUE);
                d.put_u64(*id);
                put_str16(d, name, "queue")?;
            }
            Record::Batch(parts) => {
                d.put_u8(BATCH);
                let n = u32::try_from(parts.len())
                    .map_err(|_| herald_protocol::Error::invalid("batch", "too many records"))?;
                d.put_u32(n);
                for part in parts {
                    if matches!(part, Record::Batch(_)) {
                        return Err(herald_protocol::Error::invalid("batch", "nested batch"));
                    }
                    let at = d.len();
                    d.put_u32(0);
                    part.encode(d)?;
                    let len = (d.len() - at - 4) as u32;
                    d[at..at + 4].copy_from_slice(&len.to_be_bytes());
                }
            }
        }
        Ok(())
    }

    /// Decodes a payload (already checked against its CRC).
    pub fn decode(payload: &Bytes) -> Result<Record, herald_protocol::Error> {
        let mut c = Cursor::new(payload);
        let record = match c.u8("record type")? {
            ENQUEUE => {
                let id = c.u64("id")?;
                let kind = c.u8("holder kind")?;
                let a = c.str16("holder")?.to_owned();
                let b = c.str16("name")?.to_owned();
                let holder = match kind {
                    0 => Holder::Queue(a),
                    1 => Holder::Durable(a, b),
                    2 => Holder::Retained(a),
                    k => {
                        return Err(herald_protocol::Error::invalid(
                            "holder kind",
                            format!("unknown {k}"),
                        ))
                    }
                };
                let start = c.position();
                c.rest();
                Record::Enqueue {
                    id,
                    holder,
                    block: payload.slice(start..),
                }
            }
            END => Record::End { id: c.u64("id")? },
            DURABLE => Record::Durable {
                id: c.u64("id")?,
                client_id: c.str16("client id")?.to_owned(),
                name: c.str16("name")?.to_owned(),
                pattern: c.str16("pattern")?.to_owned(),
                selector: c.str16("selector")?.to_owned(),
                owner: match c.remaining() {
                    0 => String::new(),
                    _ => c.str16("owner")?.to_owned(),
                },
            },
            QUEUE => Record::Queue {
                id: c.u64("id")?,
                name: c.str16("queue")?.to_owned(),
            },
            BATCH => {
                let n = c.u32("batch count")? as usize;
                // Each part takes at least 4 + 9 bytes: the count is
                // checked before anything is allocated for it.
                if n > c.remaining() / 13 {
                    return Err(herald_protocol::Error::invalid(
                        "batch count",
                        format!("{n} records do not fit {} bytes", c.remaining()),
                    ));
                }
                let mut parts = Vec::with_capacity(n);
                for _ in 0..n {
                    let len = c.u32("part length")? as usize;
                    let start = c.position();
                    c.bytes(len, "part")?;
                    let part = Record::decode(&payload.slice(start..start + len))?;
                    if matches!(part, Record::Batch(_)) {
                        return Err(herald_protocol::Error::invalid("batch", "nested batch"));
                    }
                    parts.push(part);
                }
                Record::Batch(parts)
            }
            t => {
                return Err(herald_protocol::Error::invalid(
                    "record type",
                    format!("unknown {t}"),
                ))
            }
        };
        c.finish()?;
        Ok(record)
    }
}

/// Where the broker keeps what must survive a restart.
pub trait Store: Send + Sync {
    /// A fresh record id, greater than every id used before.
    fn next_id(&self) -> u64;

    /// Appends a record; `done` runs once it is durable. Records are
    /// applied in the order they are appended.
    fn append(&self, record: Record, done: Option<Completion>);

    /// Appends a record that need not be durable before anyone goes on
    /// (an acknowledgement's `End`: lost in a crash, it costs a
    /// redelivery): it rides the next sync. `written` runs once it was
    /// written, or with why it could not be.
    fn append_lazily(&self, record: Record, written: Completion) {
        self.append(record, Some(written));
    }

    /// Appends records that take effect together or not at all: after a
    /// crash, all of them are there or none.
    fn append_atomically(&self, records: Vec<Record>, done: Option<Completion>) {
        match records.len() {
            0 => {
                if let Some(done) = done {
                    self.barrier(done);
                }
            }
            1 => self.append(records.into_iter().next().expect("one record"), done),
            _ => self.append(Record::Batch(records), done),
        }
    }

    /// Runs `done` once every record appended so far is durable.
    fn barrier(&self, done: Completion);

    /// Why new persistent messages should not be taken now (the disk is
    /// below its free-space floor), if so.
    fn refusing(&self) -> Option<String> {
        None
    }

    /// Whether it has stopped confirming anything until a restart (a sync
    /// failed): what it holds comes back at the next start.
    fn stopped(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let records = [
            Record::Enqueue {
                id: 7,
                holder: Holder::Queue("orders".into()),
                block: Bytes::from_static(b"\x01\x02block"),
            },
            Record::Enqueue {
                id: 8,
                holder: Holder::Retained("home.kitchen.temp".into()),
                block: Bytes::from_static(b"\x01\x02kept"),
            },
            Record::Enqueue {
                id: 8,
                holder: Holder::Durable("app".into(), "daily".into()),
                block: Bytes::new(),
            },
            Record::End { id: 7 },
            Record::Durable {
                id: 9,
                client_id: "app".into(),
                name: "daily".into(),
                pattern: "sales.#".into(),
                selector: "units > 3".into(),
                owner: "alice".into(),
            },
            Record::Queue {
                id: 10,
                name: "orders.eu".into(),
            },
        ];
        for r in records {
            let mut b = BytesMut::new();
            r.encode(&mut b).unwrap();
            let bytes = b.freeze();
            assert_eq!(Record::decode(&bytes).unwrap(), r);
            for n in 0..bytes.len().min(12) {
                assert!(
                    Record::decode(&bytes.slice(..n)).is_err()
                        || matches!(r, Record::Enqueue { .. })
                );
            }
        }
        assert!(Record::decode(&Bytes::from_static(&[9])).is_err());
    }

    #[test]
    fn a_durable_record_from_before_owners_reads_as_anonymous() {
        let mut b = BytesMut::new();
        b.put_u8(DURABLE);
        b.put_u64(3);
        for field in ["app", "daily", "sales.#", ""] {
            put_str16(&mut b, field, "field").unwrap();
        }
        match Record::decode(&b.freeze()).unwrap() {
            Record::Durable { owner, name, .. } => {
                assert_eq!((owner.as_str(), name.as_str()), ("", "daily"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn batches_round_trip_and_refuse_garbage() {
        let batch = Record::Batch(vec![
            Record::Enqueue {
                id: 3,
                holder: Holder::Queue("q".into()),
                block: Bytes::from_static(b"one"),
            },
            Record::End { id: 1 },
        ]);
        let mut b = BytesMut::new();
        batch.encode(&mut b).unwrap();
        let bytes = b.freeze();
        assert_eq!(Record::decode(&bytes).unwrap(), batch);
        for n in 0..bytes.len() {
            assert!(Record::decode(&bytes.slice(..n)).is_err(), "cut at {n}");
        }
        // An absurd count is refused before anything is allocated.
        let absurd = Bytes::from_static(&[BATCH, 0xff, 0xff, 0xff, 0xff]);
        assert!(Record::decode(&absurd).is_err());
        let nested = Record::Batch(vec![Record::Batch(Vec::new())]);
        assert!(nested.encode(&mut BytesMut::new()).is_err());
    }
}
