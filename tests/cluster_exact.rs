//! Cluster mode, every message counted by number: producers and consumers
//! on two nodes, and Redis connections cut mid-stream (issue 18, part 1).
//! A binary of its own: these runs are heavy, and other cluster tests
//! would wait behind them for their probes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use herald_client::{AckMode, Consumer, Destination, Message};
use herald_tests::*;
use herald_tests::{claiming_node as node, number as n};

/// Consumes from `consumer` in `session` until `stop`, acknowledging each
/// message in CLIENT mode; counts each number, and in `seen` each numbered
/// message.
fn count_until(
    session: &herald_client::Session,
    consumer: &Consumer,
    seen: &AtomicUsize,
    stop: &AtomicBool,
) -> BTreeMap<i64, u32> {
    let mut got = BTreeMap::new();
    while !stop.load(Ordering::Relaxed) {
        if let Some(m) = consumer.receive(Duration::from_millis(50)).unwrap() {
            if n(&m) >= 0 {
                *got.entry(n(&m)).or_default() += 1;
                seen.fetch_add(1, Ordering::Relaxed);
            }
            if session.ack_mode() == AckMode::Client {
                session.acknowledge().unwrap();
            }
        }
    }
    got
}

/// Producers on two nodes send 10,000 numbered messages to a shared queue
/// and to a topic with a durable subscriber; the queue's consumers (on
/// `consumer_nodes` of them, acknowledging as `mode` says) and the durable
/// subscriber each get every number exactly once.
fn exactly_once(consumer_nodes: usize, mode: AckMode, persistent: bool) {
    let redis = Redis::start();
    let nodes = [node(&redis, "a"), node(&redis, "b")];
    let queue = Destination::queue("exact");
    let topic = Destination::topic("exact.t");
    let consuming: Vec<_> = nodes[..consumer_nodes]
        .iter()
        .map(|server| {
            let c = factory(server).create_connection().unwrap();
            let s = c.create_session(mode).unwrap();
            let consumer = s.create_consumer(&queue).unwrap();
            (c, s, consumer)
        })
        .collect();
    let (_dc, durable_session) = as_client(&nodes[1], "auditor");
    let durable = durable_session
        .create_durable_subscriber(&topic, "all")
        .unwrap();
    let (_pc, probe) = connect(&nodes[0]);
    let probe = probe.create_producer(&topic).unwrap();
    until_heard(
        &probe,
        || Message::text("probe").with_property("n", -1),
        &[&durable],
    );
    let per_node = 5000;
    let total = 2 * per_node as usize;
    let (in_queue, in_topic, stop) = (
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicBool::new(false),
    );
    let (queue_counts, topic_counts) = std::thread::scope(|s| {
        let readers: Vec<_> = consuming
            .iter()
            .map(|(_, session, consumer)| {
                s.spawn(|| count_until(session, consumer, &in_queue, &stop))
            })
            .collect();
        let topic_reader = s.spawn(|| count_until(&durable_session, &durable, &in_topic, &stop));
        for (i, server) in nodes.iter().enumerate() {
            let (queue, topic) = (&queue, &topic);
            s.spawn(move || {
                let (_c, session) = connect(server);
                let to_queue = session.create_producer(queue).unwrap();
                let to_topic = session.create_producer(topic).unwrap();
                for k in 0..per_node {
                    let mut m = Message::text("m").with_property("n", i as i64 * per_node + k);
                    if persistent {
                        m = m.persistent();
                    }
                    to_queue.send(m.clone()).unwrap();
                    to_topic.send(m).unwrap();
                }
            });
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while (in_queue.load(Ordering::Relaxed) < total || in_topic.load(Ordering::Relaxed) < total)
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        // Anything more would be a duplicate.
        std::thread::sleep(Duration::from_secs(1));
        stop.store(true, Ordering::Relaxed);
        let queue_counts: Vec<_> = readers.into_iter().map(|r| r.join().unwrap()).collect();
        (queue_counts, topic_reader.join().unwrap())
    });
    let mut all: BTreeMap<i64, u32> = BTreeMap::new();
    for counts in &queue_counts {
        for (k, v) in counts {
            *all.entry(*k).or_default() += v;
        }
    }
    for (what, counts) in [("queue", all), ("durable subscription", topic_counts)] {
        let lost = (0..2 * per_node)
            .filter(|k| !counts.contains_key(k))
            .count();
        let twice: Vec<_> = counts.iter().filter(|(_, v)| **v > 1).collect();
        assert_eq!(
            (lost, twice.len()),
            (0, 0),
            "{what}, consumers on {consumer_nodes} node(s), {mode:?}, persistent {persistent}: \
             lost {lost}, twice {twice:?}"
        );
    }
    if consumer_nodes == 2 {
        assert!(
            queue_counts.iter().all(|c| !c.is_empty()),
            "both nodes get a share"
        );
    }
}

#[test]
fn ten_thousand_numbered_messages_arrive_exactly_once_on_one_and_two_nodes() {
    exactly_once(1, AckMode::Auto, true);
    exactly_once(2, AckMode::Client, true);
    exactly_once(2, AckMode::Auto, false);
    exactly_once(1, AckMode::Client, false);
}

#[test]
fn cut_redis_connections_lose_nothing_receipted_and_mark_what_comes_twice() {
    let redis = Redis::start();
    let (a, b) = (node(&redis, "a"), node(&redis, "b"));
    let (_ca, on_a) = connect(&a);
    let cb = factory(&b).create_connection().unwrap();
    let on_b = cb.create_session(AckMode::Client).unwrap();
    let work = Destination::queue("cut");
    let consumer = on_b.create_consumer(&work).unwrap();
    let producer = on_a.create_producer(&work).unwrap();
    let total = 3000i64;
    let (mut receipted, mut unknown) = (Vec::new(), Vec::new());
    let mut got: BTreeMap<i64, u32> = BTreeMap::new();
    let mut unmarked_twice = Vec::new();
    let mut take = |consumer: &Consumer, got: &mut BTreeMap<i64, u32>| {
        while let Some(m) = consumer.receive(Duration::from_millis(1)).unwrap() {
            let k = n(&m);
            let seen = got.entry(k).or_default();
            if *seen > 0 && !m.redelivered {
                unmarked_twice.push(k);
            }
            *seen += 1;
            // An acknowledgement cut off with the link has an unknown
            // outcome, as a send's has: its message may come again, marked
            // redelivered (checked above). Any other refusal is a failure.
            if let Err(e) = on_b.acknowledge() {
                assert!(e.to_string().contains("Redis did not confirm"), "{e}");
            }
        }
    };
    for k in 0..total {
        if k % 1000 == 500 {
            // Every node's Redis connections are cut: they reconnect.
            redis.command(&[b"CLIENT", b"KILL", b"TYPE", b"normal"]);
        }
        match producer.send_with_receipt(Message::text("job").with_property("n", k).persistent()) {
            Ok(()) => receipted.push(k),
            Err(_) => unknown.push(k),
        }
        take(&consumer, &mut got);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while receipted.iter().any(|k| !got.contains_key(k)) && Instant::now() < deadline {
        take(&consumer, &mut got);
        std::thread::sleep(Duration::from_millis(20));
    }
    let lost: Vec<_> = receipted.iter().filter(|k| !got.contains_key(k)).collect();
    assert!(
        lost.is_empty(),
        "receipted and lost: {lost:?} (unknown outcome: {unknown:?})"
    );
    assert!(
        unmarked_twice.is_empty(),
        "twice, not marked redelivered: {unmarked_twice:?}"
    );
    assert!(
        got.keys()
            .all(|k| receipted.contains(k) || unknown.contains(k)),
        "only what was sent"
    );
}

/// A durable subscription made on one node keeps every persistent message
/// receipted after it was made, whichever node the message was sent
/// through: the other node may not have heard of the subscription yet
/// when it routes the next message, and checks the registry's epoch
/// before the receipt instead, routing the message again if it changed.
#[test]
fn a_durable_subscription_keeps_what_another_node_receipts_right_after_it_is_made() {
    let redis = Redis::start();
    let nodes = [node(&redis, "a"), node(&redis, "b")];
    let topic = Destination::topic("fresh.t");
    let (_pc, publisher) = connect(&nodes[1]);
    let producer = publisher.create_producer(&topic).unwrap();
    let count = 20;
    let mut subscribers = Vec::new();
    for i in 0..count {
        let (c, s) = as_client(&nodes[0], &format!("fresh-{i}"));
        let d = s.create_durable_subscriber(&topic, "kept").unwrap();
        // Persistent: returns once receipted.
        let m = Message::text("x").with_property("n", i).persistent();
        producer.send(m).unwrap();
        subscribers.push((c, s, d, i));
    }
    for (_c, _s, d, i) in &subscribers {
        let expected: Vec<i64> = (*i..count).collect();
        let mut got = Vec::new();
        while got.len() < expected.len() {
            match d.receive(Duration::from_secs(5)).unwrap() {
                Some(m) => got.push(n(&m)),
                None => break,
            }
        }
        // Anything more would be a duplicate.
        while let Some(m) = d.receive(Duration::from_millis(100)).unwrap() {
            got.push(n(&m));
        }
        assert_eq!(got, expected, "subscriber {i}");
    }
}

/// Consumers hand a queue over between nodes mid-stream: the one on node
/// a closes (a gives back what it read and had not delivered), one on b
/// takes over, a comes back and b's closes. Every receipted number
/// arrives; one that comes twice is marked redelivered. (There is no
/// local path beside the stream: a message sent to a shared queue through
/// the node its consumer is on goes through the stream too.)
#[test]
fn consumers_handed_over_between_nodes_mid_stream_lose_nothing() {
    let redis = Redis::start();
    let nodes = [node(&redis, "a"), node(&redis, "b")];
    let queue = Destination::queue("handover");
    let total = 3000i64;
    let got = std::sync::Mutex::new(BTreeMap::<i64, u32>::new());
    let unmarked = AtomicUsize::new(0);
    let count = |m: &Message| {
        let mut got = got.lock().unwrap();
        let seen = got.entry(n(m)).or_default();
        if *seen > 0 && !m.redelivered {
            unmarked.fetch_add(1, Ordering::Relaxed);
        }
        *seen += 1;
    };
    let sent = AtomicUsize::new(0);
    let receipted = std::thread::scope(|s| {
        let producing = s.spawn(|| {
            let (_c, session) = connect(&nodes[0]);
            let producer = session.create_producer(&queue).unwrap();
            let mut receipted = Vec::new();
            for k in 0..total {
                let m = Message::text("job").with_property("n", k).persistent();
                if producer.send(m).is_ok() {
                    receipted.push(k);
                }
                sent.fetch_add(1, Ordering::Relaxed);
            }
            receipted
        });
        // Consumes on `node` (CLIENT acknowledgements, a prefetch of 50)
        // until the producer has sent `until` messages, then closes.
        // Returns how many it took.
        let consume_until = |node: usize, until: usize| {
            let c = factory(&nodes[node]).create_connection().unwrap();
            let session = c.create_session(AckMode::Client).unwrap();
            let options = herald_client::ConsumerOptions::default().prefetch(50);
            let consumer = session.create_consumer_with(&queue, options).unwrap();
            let mut took = 0;
            while sent.load(Ordering::Relaxed) < until {
                if let Some(m) = consumer.receive(Duration::from_millis(20)).unwrap() {
                    count(&m);
                    took += 1;
                    session.acknowledge().unwrap();
                }
            }
            c.close().unwrap();
            took
        };
        let took = [consume_until(0, 1000), consume_until(1, 2000)];
        assert!(took.iter().all(|&t| t > 0), "each took a share: {took:?}");
        let last = factory(&nodes[0]).create_connection().unwrap();
        let session = last.create_session(AckMode::Auto).unwrap();
        let consumer = session.create_consumer(&queue).unwrap();
        let receipted = producing.join().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while got.lock().unwrap().len() < receipted.len() && Instant::now() < deadline {
            if let Some(m) = consumer.receive(Duration::from_millis(50)).unwrap() {
                count(&m);
            }
        }
        // Anything more would be a duplicate.
        while let Some(m) = consumer.receive(Duration::from_millis(500)).unwrap() {
            count(&m);
        }
        receipted
    });
    let got = got.into_inner().unwrap();
    let lost: Vec<_> = receipted.iter().filter(|k| !got.contains_key(k)).collect();
    assert!(lost.is_empty(), "receipted and lost: {lost:?}");
    assert_eq!(receipted.len(), total as usize, "every send receipted");
    assert_eq!(unmarked.into_inner(), 0, "twice, not marked redelivered");
}
