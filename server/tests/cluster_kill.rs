//! Cluster mode with real processes: a node killed with SIGKILL while it
//! holds unacknowledged messages of a shared queue; a live node claims
//! them once they have been idle for `claim_idle_ms` and delivers them
//! again, nothing lost and nothing twice.

use std::collections::BTreeMap;
use std::time::Duration;

use herald_client::{AckMode, ConnectionFactory, ConsumerOptions, Destination, Message};

mod common;
// Shared with the end-to-end tests, which use more of it.
#[allow(dead_code)]
#[path = "../../tests/common/redis.rs"]
mod redis;

use common::TempDir;
use redis::Redis;

/// Starts node `id` of the cluster on `redis`, claiming after a second.
fn node(redis: &Redis, id: &str, data: &TempDir) -> (std::process::Child, ConnectionFactory) {
    std::fs::create_dir_all(&data.0).unwrap();
    let config = data.0.join("herald.toml");
    std::fs::write(
        &config,
        format!(
            "[cluster]\nredis = \"{}\"\nnode_id = \"{id}\"\nclaim_idle_ms = 1000\n",
            redis.url()
        ),
    )
    .unwrap();
    let config = config.to_str().unwrap().to_owned();
    let (child, addr) = common::spawn(
        &data.0.join("data"),
        &["--listen", "127.0.0.1:0", "--config", &config],
    );
    let factory = ConnectionFactory::new(&format!("herald://{addr}")).unwrap();
    (child, factory)
}

fn n(m: &Message) -> i64 {
    m.property("n").and_then(|v| v.as_i64()).unwrap()
}

#[test]
fn messages_held_by_a_killed_node_are_claimed_and_delivered_by_another() {
    let redis = Redis::start();
    let (dir_a, dir_b) = (TempDir::new("node-a"), TempDir::new("node-b"));
    let (mut a, on_a) = node(&redis, "a", &dir_a);
    let (mut b, on_b) = node(&redis, "b", &dir_b);
    let queue = Destination::queue("jobs");

    let ca = on_a.create_connection().unwrap();
    let session = ca.create_session(AckMode::Client).unwrap();
    let holder = session
        .create_consumer_with(&queue, ConsumerOptions::default().prefetch(5))
        .unwrap();
    let cb = on_b.create_connection().unwrap();
    let producer = cb.create_session(AckMode::Auto).unwrap();
    let producer = producer.create_producer(&queue).unwrap();
    for i in 0..30 {
        let m = Message::text("job").with_property("n", i).persistent();
        producer.send_with_receipt(m).unwrap();
    }
    let mut held = Vec::new();
    for _ in 0..5 {
        let m = holder
            .receive(Duration::from_secs(10))
            .unwrap()
            .expect("a delivery on a");
        held.push(n(&m));
    }
    // Received, not acknowledged: node a holds them when it dies.
    a.kill().unwrap();
    a.wait().unwrap();
    drop(ca);

    let consumer = cb
        .create_session(AckMode::Auto)
        .unwrap()
        .create_consumer(&queue)
        .unwrap();
    let mut got = BTreeMap::new();
    while got.len() < 30 {
        let Some(m) = consumer.receive(Duration::from_secs(10)).unwrap() else {
            break;
        };
        assert!(
            got.insert(n(&m), (m.redelivered, m.delivery_count))
                .is_none(),
            "{} twice",
            n(&m)
        );
    }
    assert!(
        consumer
            .receive(Duration::from_millis(1500))
            .unwrap()
            .is_none(),
        "nothing more"
    );
    assert_eq!(got.len(), 30, "every message, a's included: {got:?}");
    for i in held {
        assert_eq!(got[&i], (true, 2), "{i} was delivered on a first");
    }
    b.kill().unwrap();
    b.wait().unwrap();
}
