//! Which nodes are in the cluster: each node keeps a Redis hash of what an
//! operator wants to know of it (its version, when it started, where its
//! listeners are), renewed with its interest and expiring unless renewed,
//! so that a stopped node drops out of the list within a minute.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use redis::Value;

use super::common::{query_pipeline, scan_prefix, Keys};

/// The prefix of a node's hash: `P:{P}:node:`. (A node says it announced
/// itself anew on `Keys::nodes_channel`, and the others read the list
/// again.)
fn node_key(keys: &Keys) -> String {
    keys.own("node:")
}

/// A node's hash expires this long after it was last written.
pub(super) const NODE_TTL_S: i64 = 60;

/// A node as the others see it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeView {
    /// Its `cluster.node_id`.
    pub id: String,
    /// What it says of itself: `version`, `started` and `seen` (ms since
    /// the epoch), and its listeners' addresses (`native`, `admin`, ...).
    pub facts: BTreeMap<String, String>,
}

impl NodeView {
    /// A number among its facts.
    pub fn ms(&self, fact: &str) -> Option<u64> {
        self.facts.get(fact).and_then(|v| v.parse().ok())
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Writes this node's hash, `facts` and when it was seen, and tells the
/// others.
pub(super) fn announce(
    con: &mut redis::Connection,
    keys: &Keys,
    node_id: &str,
    facts: &[(String, String)],
) -> redis::RedisResult<()> {
    let key = format!("{}{node_id}", node_key(keys));
    let mut pipe = redis::pipe();
    pipe.cmd("MULTI").del(&key);
    let mut all: Vec<(&str, String)> = vec![("seen", now_ms().to_string())];
    all.extend(facts.iter().map(|(k, v)| (k.as_str(), v.clone())));
    pipe.hset_multiple(&key, &all).expire(&key, NODE_TTL_S);
    pipe.cmd("EXEC").publish(&keys.nodes_channel, node_id);
    query_pipeline(con, &pipe, 0).map(drop)
}

/// Removes this node's hash (it stops), and tells the others.
pub(super) fn withdraw(
    con: &mut redis::Connection,
    keys: &Keys,
    node_id: &str,
) -> redis::RedisResult<()> {
    let mut pipe = redis::pipe();
    pipe.del(format!("{}{node_id}", node_key(keys)))
        .publish(&keys.nodes_channel, node_id);
    query_pipeline(con, &pipe, 0).map(drop)
}

/// Reads every node's hash, this node's among them, by id: the nodes of
/// the cluster whose key names `names` gives.
pub(super) fn load(con: &mut redis::Connection, names: &Keys) -> redis::RedisResult<Vec<NodeView>> {
    let prefix = node_key(names);
    let keys = scan_prefix(con, &prefix)?;
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    for key in &keys {
        pipe.hgetall(key);
    }
    let answers = query_pipeline(con, &pipe, keys.len())?;
    let mut nodes: Vec<NodeView> = keys
        .iter()
        .zip(answers)
        .filter_map(|(key, answer)| {
            let facts: BTreeMap<String, String> = redis::from_redis_value(&answer).ok()?;
            // Expired between the two round trips.
            if facts.is_empty() || matches!(answer, Value::Nil) {
                return None;
            }
            Some(NodeView {
                id: key.strip_prefix(&prefix).unwrap_or(key).to_owned(),
                facts,
            })
        })
        .collect();
    nodes.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(nodes)
}
