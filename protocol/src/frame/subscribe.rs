//! SUBSCRIBE: client → server, start receiving from a destination.
//!
//! ```text
//! u32 subscription id | u8 destination kind | str16 pattern | str16 selector
//! u8 flags | u32 prefetch | str16 durable name | [i32 priority]
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
//! true` does; ActiveMQ's exclusive consumer).

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
            | FLAG_EXCLUSIVE;
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
        d.put_u8(flags);
        d.put_u32(self.prefetch);
        put_str16(d, &self.durable_name, "durable name")?;
        if self.priority != 0 {
            d.put_i32(self.priority);
        }
        Ok(())
    }
}
