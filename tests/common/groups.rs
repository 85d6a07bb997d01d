//! Message groups as consumers see them: what each got, and the checks
//! that each group went to one consumer at a time, in order.

use std::collections::BTreeMap;
use std::time::Instant;

use herald_client::{
    AckMode, Connection, Consumer, ConsumerOptions, Destination, Message, Producer,
};
use herald_server::ServerHandle;

/// What one consumer got of grouped messages, in order: (group, number,
/// redelivered, when).
pub type GroupLog = Vec<(i64, i64, bool, Instant)>;

/// Message `n` of group `g` (properties `g` and `n`, and `JMSXGroupID`
/// `g<g>`), persistent.
pub fn grouped(g: i64, n: i64) -> Message {
    Message::text("job")
        .with_property("JMSXGroupID", format!("g{g}"))
        .with_property("g", g)
        .with_property("n", n)
        .persistent()
}

/// Connections to two nodes, two consumers of a queue on each (each on
/// a session of its own, prefetch 2: the first node's first) and a
/// producer on each.
pub struct TwoNodes {
    /// The consumers, the first node's first.
    pub consumers: Vec<Consumer>,
    producers: [Producer; 2],
    _connections: [Connection; 2],
}

impl TwoNodes {
    /// Connects to `nodes`, with consumers of `queue` and producers, and
    /// sends message 0 of each of `groups` groups.
    pub fn start(nodes: [&ServerHandle; 2], queue: &Destination, groups: i64) -> TwoNodes {
        let connections = nodes.map(|node| crate::connect(node).0);
        let consumers = [0, 0, 1, 1]
            .iter()
            .map(|&i| {
                connections[i]
                    .create_session(AckMode::Auto)
                    .unwrap()
                    .create_consumer_with(queue, ConsumerOptions::default().prefetch(2))
                    .unwrap()
            })
            .collect();
        let producers = [0, 1].map(|i| {
            let session = connections[i].create_session(AckMode::Auto).unwrap();
            session.create_producer(queue).unwrap()
        });
        let two = TwoNodes {
            consumers,
            producers,
            _connections: connections,
        };
        two.send(0, groups);
        two
    }

    /// Sends message `i` of each of `groups` groups, receipted, through
    /// the nodes in turn.
    pub fn send(&self, i: i64, groups: i64) {
        for g in 0..groups {
            let via = &self.producers[((g + i) % 2) as usize];
            via.send_with_receipt(grouped(g, i)).unwrap();
        }
    }
}

/// Adds what `m` (a [`grouped`] message) is to `log`.
pub fn log_grouped(log: &mut GroupLog, m: &Message) {
    let g = m
        .property("g")
        .and_then(|v| v.as_i64())
        .expect("a g property");
    log.push((g, crate::number(m), m.redelivered, Instant::now()));
}

/// Asserts that the consumers' `logs` hold all `total` messages, those
/// that came twice marked redelivered, and that each group went to one
/// consumer at a time, in order but for redelivered ones, and moved at
/// most `moves` times (a move takes a consumer or a node going, or the
/// nodes sharing the partitions anew; two consumers taking turns would
/// make one at nearly every message).
pub fn assert_groups_held(logs: &[GroupLog], total: usize, moves: usize) {
    let mut seen: BTreeMap<(i64, i64), u32> = BTreeMap::new();
    for (g, i, redelivered, _) in logs.iter().flatten() {
        let times = seen.entry((*g, *i)).or_default();
        *times += 1;
        assert!(*times == 1 || *redelivered, "g{g}-{i} came twice unmarked");
    }
    assert_eq!(seen.len(), total, "every message came");
    let mut by_group: BTreeMap<i64, Vec<(Instant, usize, i64, bool)>> = BTreeMap::new();
    for (c, log) in logs.iter().enumerate() {
        for (g, i, redelivered, at) in log {
            by_group
                .entry(*g)
                .or_default()
                .push((*at, c, *i, *redelivered));
        }
    }
    for (g, mut got) in by_group {
        got.sort_by_key(|m| m.0);
        let mut owners: Vec<usize> = got.iter().map(|m| m.1).collect();
        owners.dedup();
        let seen: Vec<(usize, i64, bool)> = got.iter().map(|m| (m.1, m.2, m.3)).collect();
        assert!(
            owners.len() <= moves + 1,
            "g{g} moved {} times: (consumer, n, redelivered) {seen:?}",
            owners.len() - 1
        );
        let mut last = -1;
        for (_, c, i, redelivered) in &got {
            if !redelivered {
                assert!(*i > last, "g{g}: {i} after {last} (consumer {c})");
            }
            last = last.max(*i);
        }
    }
}
