//! Named topic subscriptions (durable, shared, or both) as the broker
//! keeps them, and their registration in a cluster.

use herald_protocol::destination::Pattern;

use super::address::Subscriber;
use super::queue::SharedQueue;

/// A named topic subscription: durable (kept with its messages while no
/// consumer is attached), shared (consumers compete), or both.
pub(super) struct Durable {
    pub(super) pattern: Pattern,
    pub(super) selector: String,
    /// The user who made it; "" if anonymous, or made on another node of
    /// a cluster.
    pub(super) owner: String,
    pub(super) key: u64,
    pub(super) queue: SharedQueue,
    /// Its consumers now: at most one unless it is shared.
    pub(super) consumers: Vec<Subscriber>,
    pub(super) shared: bool,
    /// Where it is kept.
    pub(super) kept: Kept,
}

impl Durable {
    /// Whether it lasts without consumers.
    pub(super) fn durable(&self) -> bool {
        match self.kept {
            Kept::No => false,
            Kept::Journal(_) => true,
            Kept::Cluster { ref record, .. } => record.durable,
        }
    }
}

/// Where a named subscription is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Kept {
    /// Nowhere: a non-durable shared subscription, which ends with its
    /// last consumer.
    No,
    /// In this node's store, under its creation record's id.
    Journal(u64),
    /// In a cluster's registry in Redis, its messages in the stream of
    /// this shared queue name (see [`DurableRecord::stream`]), which the
    /// node that publishes a matching message appends to. A non-durable
    /// shared subscription is kept there too, so that its consumers on
    /// every node share it, until no node has a consumer.
    Cluster {
        stream: String,
        record: DurableRecord,
    },
}

/// A durable subscription of a cluster: its registration, as the nodes
/// share it through Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurableRecord {
    /// Client id.
    pub client_id: String,
    /// Subscription name.
    pub name: String,
    /// Topic pattern.
    pub pattern: String,
    /// Selector text ("" = none).
    pub selector: String,
    /// It lasts without consumers; false for a non-durable shared
    /// subscription, which ends when no node has a consumer.
    pub durable: bool,
    /// Its stream has a slot of its own (on a Redis Cluster, a shard
    /// of its own); false for one registered by an older version, whose
    /// stream is on the shard of the cluster's own keys.
    pub own_slot: bool,
}

impl DurableRecord {
    /// The shared queue name of its stream: no queue can have it (a
    /// destination name has no spaces), and the lengths keep any two
    /// subscriptions apart. With its own slot, the name carries a hash of
    /// its topic, selector and kind: a subscription replaced by another
    /// of the same name has another stream, so that the old one's
    /// deletion, wherever it lands, cannot touch the new one's messages.
    pub fn stream(&self) -> String {
        match self.own_slot {
            true => format!("{OWN_SLOT}{:016x} {}", self.content_hash(), self.ids()),
            false => self.field(),
        }
    }

    /// Its field in the registry: the same whatever it subscribes to, so
    /// that registering it again replaces it.
    pub fn field(&self) -> String {
        format!("{LEGACY}{}", self.ids())
    }

    fn ids(&self) -> String {
        format!("{}:{}:{}", self.client_id.len(), self.client_id, self.name)
    }

    /// FNV-1a (64 bits) of the length-prefixed pattern and selector and
    /// the kind: the same on every node and every build, unlike std's
    /// hasher.
    fn content_hash(&self) -> u64 {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |bytes: &[u8]| {
            for b in bytes {
                hash ^= u64::from(*b);
                hash = hash.wrapping_mul(0x0100_0000_01b3);
            }
        };
        for text in [&self.pattern, &self.selector] {
            eat(&(text.len() as u64).to_be_bytes());
            eat(text.as_bytes());
        }
        eat(&[u8::from(self.durable)]);
        hash
    }
}

/// How the stream names of subscriptions registered by older versions
/// begin.
const LEGACY: &str = "durable ";
/// How the stream names of subscriptions with a slot of their own begin.
const OWN_SLOT: &str = "durable@";

/// The registry field of the subscription whose stream is `stream` (see
/// [`DurableRecord::field`]).
pub fn durable_field(stream: &str) -> String {
    match stream.strip_prefix(OWN_SLOT) {
        Some(rest) => format!(
            "{LEGACY}{}",
            rest.split_once(' ').map_or(rest, |(_, ids)| ids)
        ),
        None => stream.to_owned(),
    }
}

/// Whether `stream` (a cluster subscription's) has a slot of its own.
pub fn has_own_slot(stream: &str) -> bool {
    stream.starts_with(OWN_SLOT)
}

/// Whether a shared queue name is a cluster durable subscription's.
pub fn is_durable_stream(name: &str) -> bool {
    name.starts_with(LEGACY) || name.starts_with(OWN_SLOT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subscription_stream_is_named_after_what_it_subscribes_to() {
        let record = DurableRecord {
            client_id: "app 1".into(),
            name: "daily".into(),
            pattern: "sales.#".into(),
            selector: "units > 3".into(),
            durable: true,
            own_slot: true,
        };
        // Fixed: every node of every build names it alike.
        let stream = record.stream();
        assert_eq!(stream, "durable@2b2c95af5b1dbcbb 5:app 1:daily");
        assert_eq!(record.field(), "durable 5:app 1:daily");
        assert_eq!(durable_field(&stream), record.field());
        assert!(is_durable_stream(&stream) && has_own_slot(&stream));
        // Another selector, pattern or kind: another stream, one field.
        for other in [
            DurableRecord {
                selector: "units > 4".into(),
                ..record.clone()
            },
            DurableRecord {
                pattern: "sales.*".into(),
                ..record.clone()
            },
            DurableRecord {
                durable: false,
                ..record.clone()
            },
        ] {
            assert_ne!(other.stream(), stream);
            assert_eq!(other.field(), record.field());
        }
        // The selector's text cannot pass for the pattern's.
        let shifted = DurableRecord {
            pattern: "sales.#u".into(),
            selector: "nits > 3".into(),
            ..record.clone()
        };
        assert_ne!(shifted.stream(), stream);
        // An older version's: its stream is its field.
        let older = DurableRecord {
            own_slot: false,
            ..record.clone()
        };
        assert_eq!(older.stream(), older.field());
        assert!(is_durable_stream(&older.stream()) && !has_own_slot(&older.stream()));
        assert_eq!(durable_field(&older.stream()), older.field());
        assert!(!is_durable_stream("orders"));
    }
}
