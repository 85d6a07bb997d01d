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
            Kept::Cluster { durable, .. } => durable,
        }
    }

    /// Its registration, as the cluster's registry holds it.
    pub(super) fn record(&self, client_id: &str, name: &str) -> DurableRecord {
        DurableRecord {
            client_id: client_id.to_owned(),
            name: name.to_owned(),
            pattern: self.pattern.to_string(),
            selector: self.selector.clone(),
            durable: self.durable(),
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
    /// this shared queue name (see [`cluster_durable_stream`]), which the
    /// node that publishes a matching message appends to. A non-durable
    /// shared subscription is kept there too, so that its consumers on
    /// every node share it, until no node has a consumer.
    Cluster { stream: String, durable: bool },
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
}

/// The shared queue name of a cluster durable subscription's stream: no
/// queue can have it (a destination name has no spaces), and the lengths
/// keep any two subscriptions apart.
pub fn cluster_durable_stream(client_id: &str, name: &str) -> String {
    format!("durable {}:{client_id}:{name}", client_id.len())
}

/// Whether a shared queue name is a cluster durable subscription's.
pub fn is_durable_stream(name: &str) -> bool {
    name.starts_with("durable ")
}
