//! SUBSCRIBE: client → server, start receiving from a destination.
//!
//! ```text
//! u32 subscription id | u8 destination kind | str16 pattern | str16 selector
//! u8 flags | u32 prefetch | str16 durable name | [i32 priority]
//! [u8 count | count × (u8 policy | u64 value)]
//! ```
//!
//! The subscription id is the client's choice, unique on its connection;
//! every MESSAGE for this subscription carries it. Flags: bit 0,
//! *acknowledged*: the server keeps each delivery until the client ACKs it
//! (always so for queues and durable subscriptions); bit 1, *temporary*: the
//! queue is a temporary queue of this connection; bit 2, *shared*; bit 3,
//! *durable* (of a shared subscription); bit 4, *best effort*: a plain
//! topic subscription whose messages the server may drop when the client
//! falls behind, rather than slow anyone down or disconnect it; bit 5,
//! *priority*: the consumer's priority follows (higher ones are given
//! messages while they have credit, lower ones only otherwise; 0 when
//! absent); bit 6, *exclusive*: while this consumer is attached, its queue
//! delivers to one consumer at a time (as an address with `exclusive =
//! true` does; ActiveMQ's exclusive consumer); bit 7, *reader QoS*: DDS
//! reader policies follow, each a policy number and a value: 1, the
//! time-based filter (at most one sample per instance per this many ms,
//! the newest held one delivered at the window's end); 2, destination
//! order (1: by source timestamp, a sample older than the last one
//! delivered of its instance is dropped); 3, history depth (of a keyed
//! topic's kept samples, at most this many per instance for a reader that
//! joins). A policy the server does not know is refused.

use bytes::{BufMut, BytesMut};

use crate::cursor::{put_str16, Cursor};
use crate::destination::DestinationKind;
use crate::error::Error;

const FLAG_ACKNOWLEDGED: u8 = 0x01;
const FLAG_TEMPORARY: u8 = 0x02;
const FLAG_SHARED: u8 = 0x04;
const FLAG_DURABLE: u8 = 0x08;
const FLAG_BEST_EFFORT: u8 = 0x10;
const FLAG_EXCLUSIVE: u8 = 0x40;
const FLAG_PRIORITY: u8 = 0x20;
const FLAG_READER_QOS: u8 = 0x80;

const POLICY_TIME_FILTER: u8 = 1;
const POLICY_DESTINATION_ORDER: u8 = 2;
const POLICY_HISTORY: u8 = 3;

/// Starts a subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscribe {
    /// The client's id for this subscription.
    pub subscription_id: u32,
    /// Topic or queue.
    pub kind: DestinationKind,
    /// A destination name, or for topics a pattern with `*` and `#`.
    pub pattern: String,
    /// A message selector; empty = every message.
    pub selector: String,
    /// The client will ACK each delivery; unacknowledged ones are
    /// redelivered.
    pub acknowledged: bool,
    /// Most unacknowledged deliveries in flight; 0 = the server's default.
    pub prefetch: u32,
    /// For a durable topic subscription, its name; empty = not durable.
    pub durable_name: String,
    /// For a queue: it is a temporary queue of this connection, made now
    /// if need be, deleted when the connection ends, and only this
    /// connection may consume from it.
    pub temporary: bool,
    /// The named subscription (`durable_name`) is shared (JMS 2.0): its
    /// consumers, on any connections, compete for its messages.
    pub shared: bool,
    /// A shared subscription is durable. (A named subscription that is not
    /// shared is always durable.)
    pub durable: bool,
    /// DDS's best-effort reliability: messages may be dropped when this
    /// subscriber falls behind. Only for plain topic subscriptions.
    pub best_effort: bool,
    /// The consumer's priority among the consumers of its queue: higher
    /// ones are given messages while they have credit. 0 by default.
    pub priority: i32,
    /// While it is attached, its queue delivers to one consumer at a time.
    pub exclusive: bool,
    /// DDS reader policies, for a plain topic subscription (history: any).
    pub reader: ReaderQos,
}

/// A DDS reader's requested policies that the server applies to its
/// deliveries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReaderQos {
    /// Time-based filter: at most one sample per instance per this many
    /// ms (0: none); the newest held back is delivered when the window
    /// ends, so the last value is never lost.
    pub time_filter_ms: u64,
    /// Destination order by source timestamp: a sample older than the
    /// last one delivered of its instance is dropped (else by reception).
    pub by_source_timestamp: bool,
    /// Of a keyed topic's kept samples, at most this many per instance
    /// for a reader that joins (0: all kept).
    pub history: u64,
}

impl ReaderQos {
    /// Whether it asks for anything.
    pub fn is_set(&self) -> bool {
        *self != ReaderQos::default()
    }
}

impl Subscribe {
    /// A plain subscription: no selector, not acknowledged, not durable.
    pub fn new(
        subscription_id: u32,
        kind: DestinationKind,
        pattern: impl Into<String>,
    ) -> Subscribe {
        Subscribe {
            subscription_id,
            kind,
            pattern: pattern.into(),
            selector: String::new(),
            acknowledged: false,
            prefetch: 0,
            durable_name: String::new(),
            temporary: false,
            shared: false,
            durable: false,
            best_effort: false,
            priority: 0,
            exclusive: false,
            reader: ReaderQos::default(),
        }
    }

    pub(super) fn decode(body: &[u8]) -> Result<Subscribe, Error> {
        let mut c = Cursor::new(body);
        let subscription_id = c.u32("subscription id")?;
        let kind = DestinationKind::from_u8(c.u8("destination kind")?)?;
        let pattern = c.str16("pattern")?.to_owned();
        let selector = c.str16("selector")?.to_owned();
        let flags = c.u8("flags")?;
        let known = FLAG_ACKNOWLEDGED
            | FLAG_TEMPORARY
            | FLAG_SHARED
            | FLAG_DURABLE
            | FLAG_BEST_EFFORT
            | FLAG_PRIORITY
            | FLAG_EXCLUSIVE
            | FLAG_READER_QOS;
        if flags & !known != 0 {
            return Err(Error::invalid(
                "flags",
                format!("unknown bits 0x{flags:02x}"),
            ));
        }
        let prefetch = c.u32("prefetch")?;
        let durable_name = c.str16("durable name")?.to_owned();
        let priority = match flags & FLAG_PRIORITY {
            0 => 0,
            _ => c.u32("priority")? as i32,
        };
        let mut reader = ReaderQos::default();
        if flags & FLAG_READER_QOS != 0 {
            for _ in 0..c.u8("reader policy count")? {
                let policy = c.u8("reader policy")?;
                let value = c.u64("reader policy value")?;
                match policy {
                    POLICY_TIME_FILTER => reader.time_filter_ms = value,
                    POLICY_DESTINATION_ORDER => reader.by_source_timestamp = value == 1,
                    POLICY_HISTORY => reader.history = value,
                    other => {
                        return Err(Error::invalid(
                            "reader policy",
                            format!("unknown policy {other}"),
                        ))
                    }
                }
            }
        }
        let f = Subscribe {
            subscription_id,
            kind,
            pattern,
            selector,
            acknowledged: flags & FLAG_ACKNOWLEDGED != 0,
            prefetch,
            durable_name,
            temporary: flags & FLAG_TEMPORARY != 0,
            shared: flags & FLAG_SHARED != 0,
            durable: flags & FLAG_DURABLE != 0,
            best_effort: flags & FLAG_BEST_EFFORT != 0,
            priority,
            exclusive: flags & FLAG_EXCLUSIVE != 0,
            reader,
        };
        c.finish()?;
        Ok(f)
    }

    pub(super) fn encode(&self, d: &mut BytesMut) -> Result<(), Error> {
        d.put_u32(self.subscription_id);
        d.put_u8(self.kind as u8);
        put_str16(d, &self.pattern, "pattern")?;
        put_str16(d, &self.selector, "selector")?;
        let mut flags = 0;
        if self.acknowledged {
            flags |= FLAG_ACKNOWLEDGED;
        }
        if self.temporary {
            flags |= FLAG_TEMPORARY;
        }
        if self.shared {
            flags |= FLAG_SHARED;
        }
        if self.durable {
            flags |= FLAG_DURABLE;
        }
        if self.best_effort {
            flags |= FLAG_BEST_EFFORT;
        }
        if self.priority != 0 {
            flags |= FLAG_PRIORITY;
        }
        if self.exclusive {
            flags |= FLAG_EXCLUSIVE;
        }
        if self.reader.is_set() {
            flags |= FLAG_READER_QOS;
        }
        d.put_u8(flags);
        d.put_u32(self.prefetch);
        put_str16(d, &self.durable_name, "durable name")?;
        if self.priority != 0 {
            d.put_i32(self.priority);
        }
        if self.reader.is_set() {
            let r = &self.reader;
            let policies = [
                (POLICY_TIME_FILTER, r.time_filter_ms),
                (POLICY_DESTINATION_ORDER, u64::from(r.by_source_timestamp)),
                (POLICY_HISTORY, r.history),
            ];
            let set: Vec<_> = policies.iter().filter(|(_, v)| *v != 0).collect();
            d.put_u8(set.len() as u8);
            for (policy, value) in set {
                d.put_u8(*policy);
                d.put_u64(*value);
            }
        }
        Ok(())
    }
}
