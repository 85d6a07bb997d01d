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
fn node(redis: &Redis, id: &str, data: &TempDir) -> (common::Running, ConnectionFactory) {
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

/// The same under load: a producer on b streams numbered, receipted
/// messages while consumers on both nodes take them (a's acknowledging
/// every tenth, so that it always holds some), and a is killed mid-stream.
/// Every receipted number arrives; what comes twice (a delivered it and
/// its acknowledgement died with it) is marked redelivered.
#[test]
fn a_node_killed_mid_stream_under_load_loses_nothing_receipted() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Mutex;

    let redis = Redis::start();
    let (dir_a, dir_b) = (TempDir::new("load-a"), TempDir::new("load-b"));
    let (mut a, on_a) = node(&redis, "a", &dir_a);
    let (mut b, on_b) = node(&redis, "b", &dir_b);
    let queue = Destination::queue("stream");
    let got = Mutex::new(BTreeMap::<i64, u32>::new());
    let (unmarked, on_a_count) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let stop = AtomicBool::new(false);
    let count = |m: &Message| {
        let mut got = got.lock().unwrap();
        let seen = got.entry(n(m)).or_default();
        if *seen > 0 && !m.redelivered {
            unmarked.fetch_add(1, Ordering::Relaxed);
        }
        *seen += 1;
    };
    let total = 3000;
    let (ca, cb) = (
        on_a.create_connection().unwrap(),
        on_b.create_connection().unwrap(),
    );
    let receipted = std::thread::scope(|s| {
        s.spawn(|| {
            let session = ca.create_session(AckMode::Client).unwrap();
            let options = ConsumerOptions::default().prefetch(50);
            let consumer = session.create_consumer_with(&queue, options).unwrap();
            // Until node a dies under it.
            while let Ok(next) = consumer.receive(Duration::from_millis(20)) {
                if let Some(m) = next {
                    count(&m);
                    if on_a_count.fetch_add(1, Ordering::Relaxed) % 10 == 9 {
                        let _ = session.acknowledge();
                    }
                }
            }
        });
        s.spawn(|| {
            let session = cb.create_session(AckMode::Auto).unwrap();
            let consumer = session.create_consumer(&queue).unwrap();
            while !stop.load(Ordering::Relaxed) {
                if let Some(m) = consumer.receive(Duration::from_millis(20)).unwrap() {
                    count(&m);
                }
            }
        });
        let sending = cb.create_session(AckMode::Auto).unwrap();
        let producer = sending.create_producer(&queue).unwrap();
        let mut receipted = Vec::new();
        for k in 0..total {
            if k == total / 3 {
                a.kill().unwrap();
                a.wait().unwrap();
            }
            let m = Message::text("job").with_property("n", k).persistent();
            if producer.send_with_receipt(m).is_ok() {
                receipted.push(k);
            }
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while receipted
            .iter()
            .any(|k| !got.lock().unwrap().contains_key(k))
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        // Anything more would be a duplicate.
        std::thread::sleep(Duration::from_millis(1500));
        stop.store(true, Ordering::Relaxed);
        receipted
    });
    let got = got.into_inner().unwrap();
    let lost: Vec<_> = receipted.iter().filter(|k| !got.contains_key(k)).collect();
    assert!(lost.is_empty(), "receipted and lost: {lost:?}");
    assert_eq!(receipted.len(), total as usize, "b receipted every send");
    assert!(on_a_count.into_inner() > 0, "a took a share before it died");
    assert_eq!(unmarked.into_inner(), 0, "twice, not marked redelivered");
    let twice = got.values().filter(|&&v| v > 1).count();
    eprintln!("{twice} messages came twice, marked redelivered");
    b.kill().unwrap();
    b.wait().unwrap();
}
