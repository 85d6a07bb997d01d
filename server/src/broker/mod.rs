//! Routing: who gets which message. No sockets here.
//!
//! A subscriber is addressed by a [`ConnectionRef`] (which the network layer
//! interprets) and the client's subscription id. The broker is shared by
//! every worker; its topic tree sits behind a read-write lock that is taken
//! for reading on every publish and for writing only when subscriptions
//! change, and is never held across I/O.

mod declared_topics;
mod topic_tree;

pub use declared_topics::DeclaredTopics;
pub use topic_tree::TopicTree;

use std::sync::RwLock;

use herald_protocol::{MessageView, Pattern};

use crate::config::Config;

/// Where a connection lives: the worker that owns it, its slot in that
/// worker, and a serial number that tells a reused slot from the original.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionRef {
    /// Index of the owning worker.
    pub worker: usize,
    /// Slot in the worker's connection table.
    pub slot: usize,
    /// Server-wide unique connection number.
    pub serial: u64,
}

/// One subscription of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Subscriber {
    /// The connection holding the subscription.
    pub conn: ConnectionRef,
    /// The client's id for the subscription.
    pub subscription_id: u32,
}

/// Why the broker refused a publish.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// Strict mode and the topic is not in the declared tree.
    #[error("{0}")]
    Undeclared(String),
}

/// The routing state of one server.
#[derive(Debug)]
pub struct Broker {
    topics: RwLock<TopicTree>,
    /// Strict mode's declared tree; `None` when publishing is open.
    declared: Option<DeclaredTopics>,
}

impl Broker {
    /// A broker for this configuration.
    pub fn new(config: &Config) -> Broker {
        let declared = config
            .topics
            .strict
            .then(|| DeclaredTopics::new(config.topics.declared.iter().map(String::as_str)));
        Broker {
            topics: RwLock::new(TopicTree::default()),
            declared,
        }
    }

    /// Adds a topic subscription.
    pub fn subscribe(&self, pattern: &Pattern, subscriber: Subscriber) {
        self.write().insert(pattern, subscriber);
    }

    /// Removes a topic subscription; false if it was not there.
    pub fn unsubscribe(&self, pattern: &Pattern, subscriber: &Subscriber) -> bool {
        self.write().remove(pattern, subscriber)
    }

    /// Calls `deliver` once for every subscription that matches the
    /// message's topic; returns how many did.
    pub fn publish(
        &self,
        message: &MessageView,
        mut deliver: impl FnMut(&Subscriber),
    ) -> Result<usize, RouteError> {
        let topic = message.destination();
        if let Some(declared) = &self.declared {
            declared.check(topic).map_err(RouteError::Undeclared)?;
        }
        let tree = self
            .topics
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut n = 0;
        tree.for_each_match(topic, |s| {
            n += 1;
            deliver(s)
        });
        Ok(n)
    }

    /// Number of topic subscriptions.
    pub fn subscription_count(&self) -> usize {
        self.topics.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, TopicTree> {
        // A panic elsewhere cannot leave the tree half-changed: every
        // mutation completes before it returns, so a poisoned lock is safe.
        self.topics
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
