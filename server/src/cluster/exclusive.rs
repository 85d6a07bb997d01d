//! Exclusive queues across the nodes of a cluster: one node at a time
//! reads an exclusive queue's stream, for its consumers, while it holds
//! the queue's lease in Redis (`<stream key>:active`, the node's consumer
//! name, expiring after `claim_idle_ms` unless renewed). The node's own
//! queue then gives the messages to one of its consumers at a time, as on
//! a single node.
//!
//! The lease moves when its holder's last consumer of the queue leaves or
//! it stops (it lets the lease go, leaving what it read pending in the
//! stream rather than appending it anew, which would reorder it), or when
//! it dies (the lease expires). A node that takes the lease claims every
//! entry left pending before it reads new ones, so that they come first,
//! in their order; those delivered before come marked redelivered.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use redis::Value;

use super::common::Keys;
use super::shards::{Redis, Routed};

/// Renews the lease `KEYS[1]` for `ARGV[2]` ms if node `ARGV[1]` holds it.
const RENEW: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
    return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0";
/// Deletes the lease `KEYS[1]` if node `ARGV[1]` holds it.
const RELEASE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
    return redis.call('DEL', KEYS[1]) end return 0";

/// How often a node that does not hold a lease tries to take it.
const RETRY: Duration = Duration::from_millis(50);

/// What a node may do with an exclusive queue's stream now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Gate {
    /// Read it: this node holds the lease.
    Read,
    /// Read it, after claiming what other nodes left pending: this node
    /// has just taken the lease.
    Taken,
    /// Leave it: another node holds the lease.
    Closed,
}

/// The leases of exclusive queues, as this node sees them.
#[derive(Default)]
pub(super) struct Leases {
    /// Queues whose lease this node holds, and when it last renewed it.
    held: HashMap<String, Instant>,
    /// Queues whose lease another node held at this node's last try.
    tried: HashMap<String, Instant>,
}

impl Leases {
    /// Whether node `me` may read exclusive queue `name` now: it holds
    /// its lease (renewed every third of `lease`) or takes it.
    pub(super) fn gate(
        &mut self,
        (shards, keys, me): (&mut Redis, &Keys, &str),
        name: &str,
        lease: Duration,
    ) -> redis::RedisResult<Gate> {
        let key = lease_key(keys, name);
        let ms = lease.as_millis() as u64;
        if let Some(renewed) = self.held.get(name) {
            if renewed.elapsed() < lease / 3 {
                return Ok(Gate::Read);
            }
            let kept: i64 = redis::cmd("EVAL")
                .arg(RENEW)
                .arg(1)
                .arg(&key)
                .arg(me)
                .arg(ms)
                .on(shards, &key)?;
            if kept == 1 {
                self.held.insert(name.to_owned(), Instant::now());
                return Ok(Gate::Read);
            }
            log::warn!(
                "cluster: exclusive queue {name}: this node's lease expired before it was renewed; it reads no more of it until it has the lease again"
            );
            self.held.remove(name);
        }
        if self.tried.get(name).is_some_and(|t| t.elapsed() < RETRY) {
            return Ok(Gate::Closed);
        }
        let set: Value = redis::cmd("SET")
            .arg(&key)
            .arg(me)
            .arg("NX")
            .arg("PX")
            .arg(ms)
            .on(shards, &key)?;
        if set != Value::Okay {
            self.tried.insert(name.to_owned(), Instant::now());
            return Ok(Gate::Closed);
        }
        self.tried.remove(name);
        self.held.insert(name.to_owned(), Instant::now());
        Ok(Gate::Taken)
    }

    /// Whether this node holds the lease of `name`.
    pub(super) fn holds(&self, name: &str) -> bool {
        self.held.contains_key(name)
    }

    /// Lets the lease of `name` go, if this node holds it.
    pub(super) fn release(
        &mut self,
        (shards, keys, me): (&mut Redis, &Keys, &str),
        name: &str,
    ) -> redis::RedisResult<()> {
        self.tried.remove(name);
        if self.held.remove(name).is_none() {
            return Ok(());
        }
        let key = lease_key(keys, name);
        redis::cmd("EVAL")
            .arg(RELEASE)
            .arg(1)
            .arg(&key)
            .arg(me)
            .on::<i64>(shards, &key)
            .map(drop)
    }

    /// The queues whose lease this node holds.
    pub(super) fn held(&self) -> Vec<String> {
        self.held.keys().cloned().collect()
    }
}

/// The lease of exclusive queue `name`: beside its stream, in its slot.
fn lease_key(keys: &Keys, name: &str) -> String {
    format!("{}:active", keys.stream(name))
}
