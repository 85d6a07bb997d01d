//! Cluster mode: queues and durable subscriptions shared by Herald nodes
//! through Redis streams (Debian's redis-server, started here on a free
//! port).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use herald_client::{AckMode, Consumer, ConsumerOptions, Destination, Message};
use herald_tests::*;
use herald_tests::{claiming_node as node, number as n};

fn job(i: i64) -> Message {
    Message::text("job").with_property("n", i).persistent()
}

/// What each consumer receives (n → times) until all of them together
/// have `total` messages and then nothing more comes for a moment.
fn receive_all(consumers: &[&Consumer], total: usize) -> Vec<BTreeMap<i64, u32>> {
    let got: Vec<Mutex<BTreeMap<i64, u32>>> = consumers.iter().map(|_| Mutex::default()).collect();
    let count = || {
        got.iter()
            .map(|g| g.lock().unwrap().values().sum::<u32>() as usize)
            .sum::<usize>()
    };
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        for (consumer, got) in consumers.iter().zip(&got) {
            let done = &done;
            s.spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    if let Some(m) = consumer.receive(Duration::from_millis(50)).unwrap() {
                        *got.lock().unwrap().entry(n(&m)).or_default() += 1;
                    }
                }
            });
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while count() < total && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        // Anything more would be a duplicate.
        std::thread::sleep(Duration::from_millis(500));
        done.store(true, Ordering::Relaxed);
    });
    got.into_iter().map(|g| g.into_inner().unwrap()).collect()
}

#[test]
fn consumers_on_two_nodes_share_a_queue_and_get_every_message_once() {
    let redis = Redis::start();
    let (a, b, c) = (node(&redis, "a"), node(&redis, "b"), node(&redis, "c"));
    let (_ca, on_a) = connect(&a);
    let (_cb, on_b) = connect(&b);
    let (_cc, on_c) = connect(&c);
    let work = Destination::queue("work");
    let consumer_a = on_a.create_consumer(&work).unwrap();
    let consumer_b = on_b.create_consumer(&work).unwrap();
    // Sent on a node without consumers: each RECEIPT comes once Redis has
    // the message.
    let producer = on_c.create_producer(&work).unwrap();
    let total = 2000;
    for i in 0..total {
        producer.send_with_receipt(job(i)).unwrap();
    }
    let got = receive_all(&[&consumer_a, &consumer_b], total as usize);
    let mut all: BTreeMap<i64, u32> = BTreeMap::new();
    for g in &got {
        assert!(!g.is_empty(), "both nodes' consumers get a share");
        for (k, v) in g {
            *all.entry(*k).or_default() += v;
        }
    }
    assert_eq!(all.len(), total as usize, "every message arrives");
    assert!(all.values().all(|&v| v == 1), "none twice");
    let read = |s: &TestServer| s.cluster().unwrap().stats.read.load(Ordering::Relaxed);
    assert_eq!(read(&a) + read(&b), total as u64);
    assert_eq!(read(&c), 0, "a node without consumers reads nothing");
}

#[test]
fn a_stopping_node_gives_back_what_it_read_and_another_redelivers_it() {
    let redis = Redis::start();
    let (a, b) = (node(&redis, "a"), node(&redis, "b"));
    let (ca, on_a) = connect(&a);
    let queue = Destination::queue("held");
    let client_ack = ca.create_session(AckMode::Client).unwrap();
    let holder = client_ack
        .create_consumer_with(&queue, ConsumerOptions::default().prefetch(5))
        .unwrap();
    let producer = on_a.create_producer(&queue).unwrap();
    for i in 0..20 {
        producer.send_with_receipt(job(i)).unwrap();
    }
    // Delivered to a's consumer and never acknowledged.
    let mut delivered = Vec::new();
    for _ in 0..5 {
        let m = holder
            .receive(Duration::from_secs(10))
            .unwrap()
            .expect("a delivery");
        assert!(!m.redelivered);
        delivered.push(n(&m));
    }
    drop(ca);
    a.shutdown();
    let (_cb, on_b) = connect(&b);
    let consumer = on_b.create_consumer(&queue).unwrap();
    let mut got = BTreeMap::new();
    while let Some(m) = consumer.receive(Duration::from_secs(2)).unwrap() {
        assert!(
            got.insert(n(&m), (m.redelivered, m.delivery_count))
                .is_none(),
            "once"
        );
    }
    assert_eq!(got.len(), 20, "{got:?}");
    for i in delivered {
        assert_eq!(got[&i], (true, 2), "{i} was delivered on a before");
    }
}

#[test]
fn transactions_reach_a_shared_queue_whole_or_not_at_all() {
    let redis = Redis::start();
    let (a, b) = (node(&redis, "a"), node(&redis, "b"));
    let (ca, _) = connect(&a);
    let (_cb, on_b) = connect(&b);
    let queue = Destination::queue("orders");
    let consumer = on_b.create_consumer(&queue).unwrap();
    let tx = ca.create_session(AckMode::Transacted).unwrap();
    let producer = tx.create_producer(&queue).unwrap();
    for i in 0..3 {
        producer.send(job(i)).unwrap();
    }
    tx.rollback().unwrap();
    for i in 10..13 {
        producer.send(job(i)).unwrap();
    }
    tx.commit().unwrap();
    let got: Vec<i64> = std::iter::from_fn(|| consumer.receive(Duration::from_secs(2)).unwrap())
        .map(|m| n(&m))
        .collect();
    assert_eq!(got, [10, 11, 12]);
    // A transacted consumer on the other node takes them back out whole:
    // acknowledgements settle the stream's entries at the commit.
    for i in 20..23 {
        producer.send(job(i)).unwrap();
    }
    tx.commit().unwrap();
    let (cb2, _) = connect(&b);
    let taker = cb2.create_session(AckMode::Transacted).unwrap();
    // Closed, not dropped: what it prefetched is back before the taker
    // subscribes.
    consumer.close().unwrap();
    let consumer = taker.create_consumer(&queue).unwrap();
    let mut taken = Vec::new();
    while let Some(m) = consumer.receive(Duration::from_secs(2)).unwrap() {
        taken.push(n(&m));
    }
    taker.rollback().unwrap();
    let again: Vec<i64> = std::iter::from_fn(|| consumer.receive(Duration::from_secs(2)).unwrap())
        .map(|m| n(&m))
        .collect();
    assert_eq!(taken, [20, 21, 22]);
    assert_eq!(again, taken, "rolled back: delivered again");
    taker.commit().unwrap();
    drop(consumer);
    let (_cb3, on_b3) = connect(&b);
    let last = on_b3.create_consumer(&queue).unwrap();
    assert!(
        last.receive(Duration::from_millis(1500)).unwrap().is_none(),
        "committed: gone"
    );
}

#[test]
fn receipted_messages_survive_a_redis_restart_with_appendfsync_always() {
    let dir = temp_dir("redis-aof");
    let redis = Redis::durable(&dir);
    let (a, b) = (node(&redis, "a"), node(&redis, "b"));
    let receipted = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let (factory, receipted, stop) = (factory(&a), receipted.clone(), stop.clone());
        std::thread::spawn(move || {
            let c = factory.create_connection().unwrap();
            let s = c.create_session(AckMode::Auto).unwrap();
            let p = s.create_producer(&Destination::queue("kept")).unwrap();
            let mut i = 0;
            let mut refused = 0;
            while !stop.load(Ordering::Relaxed) {
                match p.send_with_receipt(job(i)) {
                    Ok(()) => receipted.lock().unwrap().push(i),
                    // Redis away: not receipted, so not promised.
                    Err(_) => refused += 1,
                }
                i += 1;
            }
            refused
        })
    };
    let sent = || receipted.lock().unwrap().len();
    wait_until("some messages are receipted", || sent() > 200);
    let stopped = redis.stop();
    let linked = |n: &TestServer| n.cluster().unwrap().stats.connected();
    wait_until("the nodes report the outage", || !linked(&a) && !linked(&b));
    let redis = stopped.start();
    wait_until("the nodes reconnect", || linked(&a) && linked(&b));
    let before = sent();
    wait_until("messages are receipted again", || sent() > before + 200);
    stop.store(true, Ordering::Relaxed);
    let refused = producer.join().unwrap();
    assert!(refused > 0, "sends during the outage were refused");
    let (_cb, on_b) = connect(&b);
    let consumer = on_b.create_consumer(&Destination::queue("kept")).unwrap();
    let receipted = receipted.lock().unwrap().clone();
    let got = receive_all(&[&consumer], receipted.len());
    let missing: Vec<i64> = receipted
        .iter()
        .filter(|i| !got[0].contains_key(i))
        .copied()
        .collect();
    assert!(missing.is_empty(), "receipted and lost: {missing:?}");
    drop(redis);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn delivery_counts_cross_nodes_and_the_last_failure_dead_letters_to_a_shared_queue() {
    let redis = Redis::start();
    let with_max = |id| {
        let mut config = cluster_config(&redis, id);
        config.queues.max_deliveries = 3;
        start_with(config)
    };
    let (a, b, c) = (with_max("a"), with_max("b"), with_max("c"));
    let queue = Destination::queue("fragile");
    let (ca, on_a) = connect(&a);
    on_a.create_producer(&queue)
        .unwrap()
        .send_with_receipt(job(7))
        .unwrap();
    // Delivered twice on a (recovered once) and given back, unacknowledged,
    // when a stops.
    let s = ca.create_session(AckMode::Client).unwrap();
    let consumer = s.create_consumer(&queue).unwrap();
    for count in 1..=2 {
        let m = consumer.receive(Duration::from_secs(10)).unwrap().unwrap();
        assert_eq!(m.delivery_count, count);
        if count == 1 {
            s.recover().unwrap();
        }
    }
    drop(ca);
    a.shutdown();
    // The third delivery, on b, fails too: the message is dead.
    let (cb, _) = connect(&b);
    let s = cb.create_session(AckMode::Client).unwrap();
    let consumer = s.create_consumer(&queue).unwrap();
    let m = consumer.receive(Duration::from_secs(10)).unwrap().unwrap();
    assert_eq!(m.delivery_count, 3);
    s.recover().unwrap();
    // The dead-letter queue is shared too: read on a third node.
    let (_cc, on_c) = connect(&c);
    let dlq = on_c
        .create_consumer(&Destination::queue("DLQ.fragile"))
        .unwrap();
    let dead = dlq
        .receive(Duration::from_secs(10))
        .unwrap()
        .expect("dead-lettered");
    assert_eq!(n(&dead), 7);
    let reason = dead_letter_reason(&dead);
    assert!(reason.contains("3 deliveries"), "{reason}");
    assert!(
        consumer
            .receive(Duration::from_millis(1500))
            .unwrap()
            .is_none(),
        "not a fourth time"
    );
}

/// A consumer of `queue` for red messages only, two at a time.
fn red_consumer(session: &herald_client::Session, queue: &Destination) -> Consumer {
    let options = ConsumerOptions::default()
        .selector("colour = 'red'")
        .prefetch(2);
    session.create_consumer_with(queue, options).unwrap()
}

/// The numbers of the messages a browser of `queue` sees.
fn browse(session: &herald_client::Session, queue: &Destination, selector: &str) -> Vec<i64> {
    let browser = session.create_browser(queue, selector).unwrap();
    browser.messages().unwrap().iter().map(n).collect()
}

/// A sale of `units` on `topic`.
fn sale(units: i64) -> Message {
    Message::text("sale")
        .with_property("n", units)
        .with_property("units", units)
        .persistent()
}

#[test]
fn a_durable_subscriber_moves_from_one_node_to_another_and_resumes() {
    let redis = Redis::start();
    let (a, b, c) = (node(&redis, "a"), node(&redis, "b"), node(&redis, "c"));
    let topic = Destination::topic("sales.eu");
    let durable = || {
        ConsumerOptions::default()
            .durable("daily")
            .selector("units > 3")
    };
    let (ca, on_a) = as_client(&a, "app");
    let subscriber = on_a
        .create_consumer_with(&Destination::topic("sales.#"), durable())
        .unwrap();
    let (_cc, on_c) = connect(&c);
    let producer = on_c.create_producer(&topic).unwrap();
    // Node c appends to the subscription's stream once it has heard of it.
    until_heard(&producer, || sale(1000), &[&subscriber]);
    for units in 1..=6 {
        producer.send_with_receipt(sale(units)).unwrap();
    }
    let first: Vec<i64> = (0..2)
        .map(|_| {
            n(&subscriber
                .receive(Duration::from_secs(10))
                .unwrap()
                .unwrap())
        })
        .collect();
    assert_eq!(first, [4, 5], "the selector holds on the publishing node");
    // Closed, not dropped: the goodbye is confirmed before the client id
    // is used again (and the session would keep a dropped handle open).
    drop(subscriber);
    ca.close().unwrap();
    drop(on_a);
    // Published while the subscriber is away: kept in its stream.
    for units in 7..=9 {
        producer.send_with_receipt(sale(units)).unwrap();
    }
    producer.send_with_receipt(sale(2)).unwrap();
    let (cb, on_b) = as_client(&b, "app");
    let subscriber = on_b
        .create_consumer_with(&Destination::topic("sales.#"), durable())
        .unwrap();
    let mut rest = Vec::new();
    while let Some(m) = subscriber.receive(Duration::from_secs(2)).unwrap() {
        rest.push(n(&m));
    }
    // 6 may have been on its way to a's consumer when it left: a gave it
    // back, to the end of the stream, perhaps after 7 to 9.
    rest.sort();
    assert_eq!(rest, [6, 7, 8, 9], "resumed on b where a left off");
    // Deleted from b: a node publishing afterwards keeps nothing for it.
    drop(subscriber);
    on_b.unsubscribe("daily").unwrap();
    drop(cb);
    wait_until("c hears of the deletion", || c.stats().subscriptions == 0);
    producer.send_with_receipt(sale(50)).unwrap();
    let (_ca2, on_a2) = as_client(&a, "app");
    let again = on_a2
        .create_consumer_with(&Destination::topic("sales.#"), durable())
        .unwrap();
    assert!(
        again
            .receive(Duration::from_millis(1500))
            .unwrap()
            .is_none(),
        "a new subscription starts empty"
    );
}

#[test]
fn garbage_in_redis_is_skipped_and_the_node_goes_on() {
    let redis = Redis::start();
    let a = node(&redis, "a");
    let (_ca, on_a) = connect(&a);
    let queue = Destination::queue("work");
    let consumer = on_a.create_consumer(&queue).unwrap();
    // Entries no node could deliver: no message field, noise, a message
    // for another queue, and a megabyte of noise with a bad count.
    let mut stray = Message::text("stray");
    stray.set_destination(Some(Destination::queue("elsewhere")));
    let mut other = bytes::BytesMut::new();
    stray.encode(&mut other).unwrap();
    let noise = vec![0xA5; 1 << 20];
    let stream = &b"herald:q:{work}"[..];
    for fields in [
        &[&b"x"[..], b"y"][..],
        &[b"m", b"noise"],
        &[b"m", &other],
        &[b"m", &noise, b"d", b"many"],
    ] {
        let mut args = vec![&b"XADD"[..], stream, b"*"];
        args.extend_from_slice(fields);
        assert!(!redis.command(&args).starts_with('-'));
    }
    on_a.create_producer(&queue)
        .unwrap()
        .send_with_receipt(job(1))
        .unwrap();
    let got: Vec<i64> = std::iter::from_fn(|| consumer.receive(Duration::from_secs(2)).unwrap())
        .map(|m| n(&m))
        .collect();
    assert_eq!(got, [1], "only the real message");
    // Undeliverable entries are settled, not left to be claimed forever.
    wait_until("the stream is empty", || {
        redis.command(&[b"XLEN", stream]) == ":0"
    });

    // Registries that do not decode are skipped.
    redis.command(&[
        b"HSET",
        b"herald:{herald}:durables",
        b"durable 1:x:y",
        b"\xff\x00garbage",
    ]);
    redis.command(&[b"HSET", b"herald:{herald}:users", b"bob", b"{not json"]);
    let named_otherwise = br#"{"name": "dave", "password": "x"}"#;
    redis.command(&[b"HSET", b"herald:{herald}:users", b"carl", named_otherwise]);
    redis.command(&[
        b"HSET",
        b"herald:{herald}:roles",
        b"odd",
        br#"{"publish": 7}"#,
    ]);
    redis.command(&[b"SADD", b"herald:{herald}:topics", b"a..b"]);
    redis.command(&[b"PUBLISH", b"herald:durables", b"x"]);
    redis.command(&[b"PUBLISH", b"herald:config", b"x"]);
    // A durable subscription made now works, and no stray user appears.
    let (_cd, on_d) = as_client(&a, "app");
    let durable = on_d
        .create_consumer_with(
            &Destination::topic("t"),
            ConsumerOptions::default().durable("d"),
        )
        .unwrap();
    let p = on_a.create_producer(&Destination::topic("t")).unwrap();
    p.send_with_receipt(job(2)).unwrap();
    assert_eq!(
        n(&durable.receive(Duration::from_secs(10)).unwrap().unwrap()),
        2
    );
    let users = call(&a, "GET", "/api/users", None, None).json();
    assert_eq!(users["users"], serde_json::json!([]), "{users}");
    assert!(a.cluster().unwrap().stats.connected());
}

/// A durable subscription an older version registered (four fields, its
/// stream under the cluster's own hash tag) goes on working where that
/// version kept it, until it is deleted.
#[test]
fn a_subscription_an_older_version_registered_keeps_its_stream() {
    let redis = Redis::start();
    let mut record = Vec::new();
    for field in ["app", "old", "sales.#", ""] {
        record.extend_from_slice(&(field.len() as u32).to_be_bytes());
        record.extend_from_slice(field.as_bytes());
    }
    let registry = &b"herald:{herald}:durables"[..];
    let stream = &b"herald:{herald}:q:durable 3:app:old"[..];
    redis.command(&[b"HSET", registry, b"durable 3:app:old", &record]);
    // What it kept before the upgrade.
    let mut kept = job(1);
    kept.set_destination(Some(Destination::topic("sales.eu")));
    let mut block = bytes::BytesMut::new();
    kept.encode(&mut block).unwrap();
    assert!(!redis
        .command(&[b"XADD", stream, b"*", b"m", &block])
        .starts_with('-'));

    let a = node(&redis, "a");
    let (_c, on_a) = as_client(&a, "app");
    let old = on_a
        .create_durable_subscriber(&Destination::topic("sales.#"), "old")
        .unwrap();
    on_a.create_producer(&Destination::topic("sales.eu"))
        .unwrap()
        .send_with_receipt(job(2))
        .unwrap();
    let got: Vec<i64> = (0..2).map(|_| n(&next(&old))).collect();
    assert_eq!(got, [1, 2], "what it kept, then what came since");
    assert_eq!(redis.command(&[b"EXISTS", stream]), ":1", "where it was");
    assert_eq!(
        redis.command(&[b"HGET", registry, b"durable 3:app:old"]),
        format!("${}", record.len()),
        "not registered anew"
    );

    drop(old);
    on_a.unsubscribe("old").unwrap();
    assert_eq!(redis.command(&[b"EXISTS", stream]), ":0");
    assert_eq!(redis.command(&[b"HLEN", registry]), ":0");
}

#[test]
fn browsers_and_the_management_interface_see_a_shared_queue_on_any_node() {
    let redis = Redis::start();
    let (a, b) = (node(&redis, "a"), node(&redis, "b"));
    let (_ca, on_a) = connect(&a);
    let queue = Destination::queue("browsed");
    let producer = on_a.create_producer(&queue).unwrap();
    for i in 0..5 {
        let mut m = job(i);
        m.priority = if i == 3 { 9 } else { 4 };
        producer.send_with_receipt(m).unwrap();
    }
    // Node b holds nothing of the queue: the browser reads Redis.
    let (_cb, on_b) = connect(&b);
    let all: Vec<i64> = browse(&on_b, &queue, "");
    assert_eq!(all, [3, 0, 1, 2, 4], "priority first, then oldest first");
    let odd: Vec<i64> = browse(&on_b, &queue, "n / 2 * 2 <> n");
    assert_eq!(odd, [3, 1]);
    assert!(
        on_b.create_browser(&queue, "n >").is_err(),
        "a bad selector"
    );
    let listed = call(&b, "GET", "/api/queues", None, None).json();
    let row = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "browsed")
        .unwrap_or_else(|| panic!("{listed}"))
        .clone();
    assert_eq!(row["cluster"]["stream_length"], 5, "{row}");
    assert_eq!(row["cluster"]["unacknowledged"], 0, "{row}");
    // Consumed on b: the stream empties.
    let consumer = on_b.create_consumer(&queue).unwrap();
    for _ in 0..5 {
        consumer.receive(Duration::from_secs(10)).unwrap().unwrap();
    }
    wait_until("the stream empties", || {
        let listed = call(&a, "GET", "/api/queues", None, None).json();
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|q| q["name"] == "browsed" && q["cluster"]["stream_length"] == 0)
    });
    assert!(on_b
        .create_browser(&queue, "")
        .unwrap()
        .messages()
        .unwrap()
        .is_empty());
}

#[test]
fn purge_and_replay_through_any_node_act_on_the_shared_queue() {
    let redis = Redis::start();
    let (a, b) = (node(&redis, "a"), node(&redis, "b"));
    let (_ca, on_a) = connect(&a);
    let post = |node: &TestServer, path: &str| call(node, "POST", path, None, None);
    let doomed = Destination::queue("doomed");
    let producer = on_a.create_producer(&doomed).unwrap();
    for i in 0..10 {
        producer.send_with_receipt(job(i)).unwrap();
    }
    // Node b holds nothing of it: what it purges is in Redis.
    let purged = post(&b, "/api/queues/doomed/purge");
    assert_eq!(purged.status, 200, "{}", purged.body);
    assert_eq!(purged.json()["purged"], 10);
    assert!(on_a
        .create_browser(&doomed, "")
        .unwrap()
        .messages()
        .unwrap()
        .is_empty());
    assert_eq!(post(&b, "/api/queues/nowhere/purge").status, 404);

    // A dead letter that knows where it came from goes back; one that
    // does not stays.
    let dlq = Destination::queue("DLQ.work2");
    let dead = on_a.create_producer(&dlq).unwrap();
    dead.send_with_receipt(job(1).with_property("HeraldOriginalDestination", "queue://work2"))
        .unwrap();
    dead.send_with_receipt(job(2)).unwrap();
    let replayed = post(&b, "/api/queues/DLQ.work2/replay");
    assert_eq!(replayed.status, 200, "{}", replayed.body);
    assert_eq!(replayed.json()["moved"], 1);
    let back = on_a
        .create_consumer(&Destination::queue("work2"))
        .unwrap()
        .receive(Duration::from_secs(10))
        .unwrap()
        .expect("replayed");
    assert_eq!(n(&back), 1);
    assert!(back.property("HeraldOriginalDestination").is_none());
    let stayed: Vec<i64> = browse(&on_a, &dlq, "");
    assert_eq!(stayed, [2]);
}

#[test]
fn a_shared_subscription_spans_nodes_and_ends_with_its_last_consumer() {
    let redis = Redis::start();
    let (a, b, c) = (node(&redis, "a"), node(&redis, "b"), node(&redis, "c"));
    let news = Destination::topic("news.#");
    let (ca, on_a) = connect(&a);
    let (cb, on_b) = connect(&b);
    let on_a_reader = on_a.create_shared_consumer(&news, "readers").unwrap();
    let on_b_reader = on_b.create_shared_consumer(&news, "readers").unwrap();
    let (_cc, on_c) = connect(&c);
    let producer = on_c
        .create_producer(&Destination::topic("news.eu"))
        .unwrap();
    // Node c appends to the subscription once it has heard of it.
    until_heard(&producer, || job(-1), &[&on_a_reader, &on_b_reader]);
    for i in 0..100 {
        producer.send_with_receipt(job(i)).unwrap();
    }
    let got = receive_all(&[&on_a_reader, &on_b_reader], 100);
    let mut all: BTreeMap<i64, u32> = BTreeMap::new();
    for g in &got {
        for (k, v) in g {
            *all.entry(*k).or_default() += v;
        }
    }
    assert_eq!(all.len(), 100, "every message, to one of the consumers");
    assert!(all.values().all(|&v| v == 1), "once, not once per node");

    // One node's consumer leaving does not end it; the last one does.
    drop(on_a_reader);
    drop(ca);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(redis.command(&[b"HLEN", b"herald:{herald}:durables"]), ":1");
    producer.send_with_receipt(job(200)).unwrap();
    let m = on_b_reader
        .receive(Duration::from_secs(10))
        .unwrap()
        .unwrap();
    assert_eq!(n(&m), 200);
    drop(on_b_reader);
    drop(cb);
    wait_until("the subscription ends", || {
        redis.command(&[b"HLEN", b"herald:{herald}:durables"]) == ":0"
    });
    wait_until("c forgets it", || c.stats().subscriptions == 0);
    producer.send_with_receipt(job(300)).unwrap();
    let (_ca2, on_a2) = connect(&a);
    let again = on_a2.create_shared_consumer(&news, "readers").unwrap();
    assert!(
        again
            .receive(Duration::from_millis(1500))
            .unwrap()
            .is_none(),
        "a new shared subscription starts empty"
    );
}

#[test]
fn selectors_on_different_nodes_each_get_their_messages() {
    let redis = Redis::start();
    let (a, b) = (node(&redis, "a"), node(&redis, "b"));
    let (_ca, on_a) = connect(&a);
    let paint = Destination::queue("paint");
    let colour = |c: &str, i: i64| job(i).with_property("colour", c);
    let red = red_consumer(&on_a, &paint);
    let producer = on_a.create_producer(&paint).unwrap();
    for i in 0..5 {
        producer.send_with_receipt(colour("blue", i)).unwrap();
    }
    for i in 10..13 {
        producer.send_with_receipt(colour("red", i)).unwrap();
    }
    // Node a reads past the blue ones, which its consumer does not take.
    let reds: Vec<i64> = (0..3)
        .map(|_| n(&red.receive(Duration::from_secs(10)).unwrap().expect("red")))
        .collect();
    assert_eq!(reds, [10, 11, 12]);
    // The blue ones wait on a only until a passes them on; a consumer of
    // them on b gets each once.
    let (_cb, on_b) = connect(&b);
    let blue = on_b
        .create_consumer_with(
            &paint,
            ConsumerOptions::default().selector("colour = 'blue'"),
        )
        .unwrap();
    let got = receive_all(&[&blue], 5);
    assert_eq!(got[0].keys().copied().collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
    assert!(got[0].values().all(|&v| v == 1), "{got:?}");
    assert!(red.receive(Duration::from_millis(300)).unwrap().is_none());
}

#[test]
fn a_node_reads_past_messages_its_consumers_selectors_do_not_take() {
    let redis = Redis::start();
    // Claims and passing on come only after 30 s: not within this test.
    let a = start_with(cluster_config(&redis, "a"));
    let (_ca, on_a) = connect(&a);
    let paint = Destination::queue("paint");
    let red = red_consumer(&on_a, &paint);
    let producer = on_a.create_producer(&paint).unwrap();
    for i in 0..5 {
        producer
            .send_with_receipt(job(i).with_property("colour", "blue"))
            .unwrap();
    }
    producer
        .send_with_receipt(job(10).with_property("colour", "red"))
        .unwrap();
    let m = red
        .receive(Duration::from_secs(5))
        .unwrap()
        .expect("red, read past the blue ones");
    assert_eq!(n(&m), 10);
}

/// A queue's consumer group or whole stream that goes away under a
/// consuming node (a failover to a replica that never had it, or an
/// operator's DEL) is made again, and consuming goes on.
#[test]
fn a_lost_consumer_group_or_stream_is_made_again_and_consuming_goes_on() {
    let redis = Redis::start();
    let a = node(&redis, "a");
    let (_ca, on_a) = connect(&a);
    let queue = Destination::queue("regroup");
    let consumer = on_a.create_consumer(&queue).unwrap();
    let producer = on_a.create_producer(&queue).unwrap();
    let stream = &b"herald:q:{regroup}"[..];
    let destroy: &[&[u8]] = &[b"XGROUP", b"DESTROY", stream, b"herald"];
    let delete: &[&[u8]] = &[b"DEL", stream];
    for (round, lose) in [(0, None), (1, Some(destroy)), (2, Some(delete))] {
        if let Some(command) = lose {
            // Everything so far is settled, so nothing comes twice.
            wait_until("the stream is empty", || {
                redis.command(&[b"XLEN", stream]) == ":0"
            });
            assert!(!redis.command(command).starts_with('-'));
        }
        for k in 0..5 {
            producer.send_with_receipt(job(round * 10 + k)).unwrap();
        }
        for k in 0..5 {
            assert_eq!(n(&next(&consumer)), round * 10 + k, "round {round}");
        }
    }
    assert_nothing(&consumer);
}

#[test]
fn messages_of_a_shared_queue_are_browsed_deleted_moved_and_copied_through_any_node() {
    let redis = Redis::start();
    let (a, b) = (node(&redis, "a"), node(&redis, "b"));
    let (_ca, on_a) = connect(&a);
    let queue = Destination::queue("ops");
    let producer = on_a.create_producer(&queue).unwrap();
    for i in 0..5 {
        producer.send_with_receipt(job(i)).unwrap();
    }
    let on = |node: &TestServer, method: &str, path: &str, body: Option<serde_json::Value>| {
        call(node, method, path, body, None)
    };
    // Node b holds nothing of it: the page comes from the stream.
    let page = on(&b, "GET", "/api/queues/ops/messages", None);
    assert_eq!(page.status, 200, "{}", page.body);
    let page = page.json();
    assert_eq!(page["total"], 5, "{page}");
    let ids: Vec<String> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            assert_eq!(
                (m["state"].as_str(), m["holder"].as_str()),
                (Some("ready"), None)
            );
            m["id"].as_str().unwrap().to_owned()
        })
        .collect();
    let selected = on(
        &b,
        "GET",
        "/api/queues/ops/messages?selector=n%20%3E%202&limit=1",
        None,
    );
    assert_eq!(
        (
            selected.json()["total"].clone(),
            selected.json()["messages"].as_array().map(Vec::len)
        ),
        (2.into(), Some(1))
    );
    assert_eq!(
        on(&b, "GET", "/api/queues/ops/messages?selector=n%20%3E", None).status,
        400
    );
    assert_eq!(
        on(&b, "GET", "/api/queues/nowhere/messages", None).status,
        404
    );

    // Delete one, once.
    let path = |id: &str, what: &str| format!("/api/queues/ops/messages/{id}{what}");
    assert_eq!(on(&b, "DELETE", &path(&ids[0], ""), None).status, 200);
    let again = on(&b, "DELETE", &path(&ids[0], ""), None);
    assert_eq!(again.status, 404, "{}", again.body);
    // Copy one (it stays, the copy has an id of its own), move another.
    let to = |q: &str| Some(serde_json::json!({"to": format!("queue://{q}")}));
    let copied = on(&b, "POST", &path(&ids[1], "/copy"), to("ops.copies"));
    assert_eq!(copied.status, 200, "{}", copied.body);
    let moved = on(&b, "POST", &path(&ids[2], "/move"), to("ops.moved"));
    assert_eq!(moved.status, 200, "{}", moved.body);
    let bad = on(
        &b,
        "POST",
        &path(&ids[3], "/move"),
        Some(serde_json::json!({"to": "queue://a..b"})),
    );
    assert_eq!(bad.status, 400, "{}", bad.body);
    let left = |node: &TestServer, q: &str| -> Vec<i64> {
        let page = on(node, "GET", &format!("/api/queues/{q}/messages"), None).json();
        page["messages"]
            .as_array()
            .unwrap_or_else(|| panic!("{page}"))
            .iter()
            .map(|m| m["properties"]["n"].as_i64().unwrap())
            .collect()
    };
    // A move to a topic goes to its subscribers (here, on the node asked).
    let (_cb, on_b) = connect(&b);
    let news = on_b
        .create_consumer(&Destination::topic("ops.news"))
        .unwrap();
    let to_topic = Some(serde_json::json!({"to": "topic://ops.news"}));
    assert_eq!(
        on(&b, "POST", &path(&ids[4], "/move"), to_topic).status,
        200
    );
    assert_eq!(
        n(&news.receive(PATIENCE).unwrap().expect("moved to the topic")),
        4
    );
    assert_eq!(left(&a, "ops"), [1, 3]);
    let copies = on(&a, "GET", "/api/queues/ops.copies/messages", None).json();
    assert_eq!(copies["total"], 1, "{copies}");
    assert_ne!(copies["messages"][0]["id"].as_str(), Some(ids[1].as_str()));
    let moved_away = on_a
        .create_consumer(&Destination::queue("ops.moved"))
        .unwrap();
    assert_eq!(n(&moved_away.receive(PATIENCE).unwrap().expect("moved")), 2);

    // A message a node has read is in flight: shown with its holder, and
    // neither deleted nor moved.
    let session = _ca.create_session(AckMode::Client).unwrap();
    let holder = session
        .create_consumer_with(&queue, ConsumerOptions::default().prefetch(1))
        .unwrap();
    let held = holder.receive(PATIENCE).unwrap().expect("one");
    assert_eq!(n(&held), 1);
    let page = on(&b, "GET", "/api/queues/ops/messages", None).json();
    let first = &page["messages"][0];
    assert_eq!(first["state"], "in flight", "{page}");
    assert!(
        first["holder"].as_str().is_some_and(|h| h.starts_with("a")),
        "{page}"
    );
    let refused = on(&b, "DELETE", &path(&ids[1], ""), None);
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert!(refused.error().contains("in flight"), "{}", refused.body);
    assert_eq!(
        on(&b, "POST", &path(&ids[1], "/move"), to("ops.moved")).status,
        409
    );
    // Nor is its queue deleted while a node consumes it.
    let in_use = on(&b, "DELETE", "/api/queues/ops", None);
    assert_eq!(in_use.status, 409, "{}", in_use.body);
    assert!(
        in_use.error().contains("consumers on node"),
        "{}",
        in_use.body
    );
    assert_eq!(left(&a, "ops").len(), 2, "nothing half-done");
    // Once it is closed (what it held given back), the queue goes, with
    // its two messages.
    drop(holder);
    session.close().unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    let deleted = on(&b, "DELETE", "/api/queues/ops", None);
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    assert_eq!(deleted.json()["messages"], 2, "{}", deleted.body);
    assert_eq!(on(&b, "GET", "/api/queues/ops/messages", None).status, 404);
    assert_eq!(on(&b, "DELETE", "/api/queues/ops", None).status, 404);

    // A queue created through one node is every node's, before anything
    // is sent to it; created twice, it is not new the second time.
    let create = |node: &TestServer| {
        let made = on(
            node,
            "POST",
            "/api/queues",
            Some(serde_json::json!({"name": "fresh"})),
        );
        assert_eq!(made.status, 200, "{}", made.body);
        made.json()["created"].clone()
    };
    assert_eq!(create(&a), true);
    assert_eq!(create(&b), false);
    let listed = on(&b, "GET", "/api/queues", None).json();
    let row = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "fresh")
        .unwrap_or_else(|| panic!("{listed}"))
        .clone();
    assert_eq!(row["cluster"]["stream_length"], 0, "{row}");
    assert_eq!(
        on(&b, "GET", "/api/queues/fresh/messages", None).json()["total"],
        0
    );
}

#[test]
fn chosen_dead_letters_of_a_shared_queue_are_replayed_through_any_node() {
    let redis = Redis::start();
    let (a, b) = (node(&redis, "a"), node(&redis, "b"));
    let (_ca, on_a) = connect(&a);
    let dlq = Destination::queue("DLQ.work3");
    let dead = on_a.create_producer(&dlq).unwrap();
    for i in 0..3 {
        dead.send_with_receipt(job(i).with_property("HeraldOriginalDestination", "queue://work3"))
            .unwrap();
    }
    dead.send_with_receipt(job(3)).unwrap();
    let page = call(&b, "GET", "/api/queues/DLQ.work3/messages", None, None).json();
    let ids: Vec<String> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 4, "{page}");
    // The first and the one with no origin, and one that is not there.
    let body = serde_json::json!({"ids": [ids[0], ids[3], "no-such-id"]});
    let replayed = call(&b, "POST", "/api/queues/DLQ.work3/replay", Some(body), None);
    assert_eq!(replayed.status, 200, "{}", replayed.body);
    let replayed = replayed.json();
    assert_eq!(replayed["moved"], 1, "{replayed}");
    assert_eq!(
        replayed["failed"].as_array().map(Vec::len),
        Some(2),
        "{replayed}"
    );
    let back = on_a
        .create_consumer(&Destination::queue("work3"))
        .unwrap()
        .receive(PATIENCE)
        .unwrap()
        .expect("replayed");
    assert_eq!(n(&back), 0);
    // The one that could not go stayed, with the two not chosen.
    let stayed: Vec<i64> = browse(&on_a, &dlq, "");
    let mut stayed = stayed;
    stayed.sort();
    assert_eq!(stayed, [1, 2, 3]);
}

#[test]
fn a_redelivery_delay_holds_on_the_node_a_message_is_given_back_to() {
    let redis = Redis::start();
    let with_delay = |id| {
        let mut config = cluster_config(&redis, id);
        let mut rule = herald_server::config::AddressRule {
            pattern: "queue://later".into(),
            ..Default::default()
        };
        rule.redelivery_delay = Some(herald_server::addresses::Millis(1500));
        config.addresses = vec![rule];
        start_with(config)
    };
    let (a, b) = (with_delay("a"), with_delay("b"));
    let queue = Destination::queue("later");
    let (ca, on_a) = connect(&a);
    on_a.create_producer(&queue)
        .unwrap()
        .send_with_receipt(job(1))
        .unwrap();
    let s = ca.create_session(AckMode::Client).unwrap();
    let consumer = s.create_consumer(&queue).unwrap();
    consumer.receive(Duration::from_secs(10)).unwrap().unwrap();
    let (_cb, on_b) = connect(&b);
    let waiting = on_b.create_consumer(&queue).unwrap();
    // Given back to wait out its delay, then handed to another node as
    // its consumer here leaves: the wait goes with it.
    let given_back = Instant::now();
    s.recover().unwrap();
    consumer.close().unwrap();
    let m = waiting
        .receive(Duration::from_secs(10))
        .unwrap()
        .expect("redelivered on b");
    assert!(
        given_back.elapsed() >= Duration::from_millis(1500),
        "came back {:?} after it was given back",
        given_back.elapsed()
    );
    assert_eq!((n(&m), m.delivery_count), (1, 2));
}

#[test]
fn an_exclusive_queue_delivers_through_one_node_at_a_time_and_moves_in_order() {
    let redis = Redis::start();
    let exclusive = |id| {
        let mut config = cluster_config(&redis, id);
        config.cluster.claim_idle_ms = 1000;
        config.addresses = vec![herald_server::config::AddressRule {
            pattern: "queue://solo".into(),
            exclusive: Some(true),
            ..Default::default()
        }];
        start_with(config)
    };
    let (a, b) = (exclusive("a"), exclusive("b"));
    let queue = Destination::queue("solo");
    let (ca, on_a) = connect(&a);
    let first = ca
        .create_session(AckMode::Auto)
        .unwrap()
        .create_consumer_with(&queue, ConsumerOptions::default().prefetch(4))
        .unwrap();
    // Consumers on both nodes (the first node's holding the lease), then
    // the messages, sent through both: the first node's consumer gets
    // every one while it lives.
    wait_until("the first node holds the lease", || {
        redis.command(&[b"EXISTS", b"herald:q:{solo}:active"]) == ":1"
    });
    let (_cb, on_b) = connect(&b);
    let second = on_b.create_consumer(&queue).unwrap();
    let (via_a, via_b) = (
        on_a.create_producer(&queue).unwrap(),
        on_b.create_producer(&queue).unwrap(),
    );
    for i in 0..30 {
        let via = if i % 2 == 0 { &via_a } else { &via_b };
        via.send_with_receipt(job(i)).unwrap();
    }
    for i in 0..10 {
        let m = first
            .receive(Duration::from_secs(10))
            .unwrap()
            .expect("on a");
        assert_eq!(n(&m), i);
    }
    assert!(second
        .receive(Duration::from_millis(700))
        .unwrap()
        .is_none());
    // The first goes with some delivered to its client and not consumed:
    // the rest come through the other node, in order, those once.
    first.close().unwrap();
    for i in 10..30 {
        let m = second
            .receive(Duration::from_secs(10))
            .unwrap()
            .expect("on b");
        assert_eq!(n(&m), i);
    }
    assert!(second
        .receive(Duration::from_millis(300))
        .unwrap()
        .is_none());
}

#[test]
fn a_message_claimed_from_a_node_that_died_waits_out_its_redelivery_delay() {
    let redis = Redis::start();
    let mut config = cluster_config(&redis, "b");
    config.cluster.claim_idle_ms = 1000;
    let mut rule = herald_server::config::AddressRule {
        pattern: "queue://late".into(),
        ..Default::default()
    };
    rule.redelivery_delay = Some(herald_server::addresses::Millis(2000));
    config.addresses = vec![rule];
    let b = start_with(config);
    let queue = Destination::queue("late");
    let (_cb, on_b) = connect(&b);
    on_b.create_producer(&queue)
        .unwrap()
        .send_with_receipt(job(1))
        .unwrap();
    // A node that read it and died: a member of the group that holds it
    // and never renews.
    let stream: &[u8] = b"herald:q:{late}";
    redis.command(&[b"XGROUP", b"CREATE", stream, b"herald", b"0", b"MKSTREAM"]);
    let read = redis.command(&[
        b"XREADGROUP",
        b"GROUP",
        b"herald",
        b"ghost",
        b"COUNT",
        b"1",
        b"STREAMS",
        stream,
        b">",
    ]);
    assert_eq!(read, "*1", "the ghost read it");
    let died = Instant::now();
    let consumer = on_b.create_consumer(&queue).unwrap();
    let m = consumer
        .receive(Duration::from_secs(10))
        .unwrap()
        .expect("claimed and redelivered");
    // Claimed once idle a second, then delayed two more.
    assert!(
        died.elapsed() >= Duration::from_millis(2900),
        "came back {:?} after its node died",
        died.elapsed()
    );
    assert_eq!(n(&m), 1);
    assert!(m.redelivered, "marked redelivered");
}

#[test]
fn message_groups_hold_across_consumers_on_two_nodes_and_move_in_order() {
    const GROUPS: i64 = 20;
    const EACH: i64 = 20;
    let redis = Redis::start();
    let (a, b) = (node(&redis, "a"), node(&redis, "b"));
    // Each group's first message, then the nodes share the partitions.
    let mut two = TwoNodes::start([&a, &b], &Destination::queue("grouped"), GROUPS);
    let holders = r"local seen, n = {}, 0
        for k = 1, 16 do
          local v = redis.call('GET', 'herald:q:{grouped}:g' .. k .. ':active')
          if v and not seen[v] then seen[v] = true; n = n + 1 end
        end
        return n";
    wait_until("both nodes read partitions", || {
        redis.command(&[b"EVAL", holders.as_bytes(), b"0"]) == ":2"
    });
    let received = std::sync::atomic::AtomicUsize::new(0);
    let close_a = AtomicBool::new(false);
    let logs: Vec<GroupLog> = std::thread::scope(|s| {
        let threads: Vec<_> = std::mem::take(&mut two.consumers)
            .into_iter()
            .enumerate()
            .map(|(i, consumer)| {
                let (received, close_a) = (&received, &close_a);
                s.spawn(move || {
                    let mut log = GroupLog::new();
                    let quiet = Duration::from_millis(1500);
                    while let Some(m) = consumer.receive(quiet).unwrap() {
                        log_grouped(&mut log, &m);
                        received.fetch_add(1, Ordering::SeqCst);
                        // Slow enough that a backlog stays.
                        std::thread::sleep(Duration::from_millis(2));
                        // Node a's consumers go halfway, some messages
                        // delivered to them and not consumed.
                        if i < 2 && close_a.load(Ordering::SeqCst) {
                            consumer.close().unwrap();
                            break;
                        }
                    }
                    log
                })
            })
            .collect();
        for i in 1..EACH {
            two.send(i, GROUPS);
            if received.load(Ordering::SeqCst) >= (GROUPS * EACH / 2) as usize {
                close_a.store(true, Ordering::SeqCst);
            }
        }
        close_a.store(true, Ordering::SeqCst);
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    assert!(
        logs[..2].iter().any(|l| !l.is_empty()) && logs[2..].iter().any(|l| !l.is_empty()),
        "consumers on both nodes got groups"
    );
    assert_groups_held(&logs, (GROUPS * EACH) as usize, 3);
}

#[test]
fn grouped_messages_of_a_shared_queue_are_browsed_counted_purged_and_deleted() {
    let redis = Redis::start();
    let (a, b) = (node(&redis, "a"), node(&redis, "b"));
    let (_ca, on_a) = connect(&a);
    let queue = Destination::queue("mixed");
    let producer = on_a.create_producer(&queue).unwrap();
    let send = |from: i64| {
        for i in from..from + 6 {
            let m = match i % 2 {
                0 => job(i).with_property("JMSXGroupID", format!("g{i}")),
                _ => job(i),
            };
            producer.send_with_receipt(m).unwrap();
        }
    };
    send(0);
    // In the queue's stream and its groups' partitions, all seen from a
    // node that holds none of them.
    let partitions = redis.command(&[b"KEYS", b"herald:q:{mixed}:g*"]);
    assert_eq!(partitions, "*3", "three groups' partitions");
    let (_cb, on_b) = connect(&b);
    let mut all = browse(&on_b, &queue, "");
    all.sort_unstable();
    assert_eq!(all, [0, 1, 2, 3, 4, 5]);
    let listed = call(&b, "GET", "/api/queues", None, None).json();
    let row = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "mixed")
        .unwrap_or_else(|| panic!("{listed}"))
        .clone();
    assert_eq!(row["cluster"]["stream_length"], 6, "{row}");
    let page = call(&b, "GET", "/api/queues/mixed/messages", None, None).json();
    assert_eq!(page["total"], 6, "{page}");
    let purged = call(&b, "POST", "/api/queues/mixed/purge", None, None);
    assert_eq!(purged.json()["purged"], 6, "{}", purged.body);
    assert!(browse(&on_b, &queue, "").is_empty());
    // Deleted with its partitions, once the purge's read is a second old
    // (a node that read it within a second counts as consuming it).
    send(10);
    wait_until("the queue is deleted", || {
        call(&b, "DELETE", "/api/queues/mixed", None, None).status == 200
    });
    assert_eq!(redis.command(&[b"KEYS", b"herald:q:{mixed}*"]), "*0");
}

#[test]
fn a_partition_of_groups_whose_node_died_is_taken_with_its_messages_in_order() {
    let redis = Redis::start();
    let b = node(&redis, "b");
    let queue = Destination::queue("orphaned");
    let (_cb, on_b) = connect(&b);
    let producer = on_b.create_producer(&queue).unwrap();
    for i in 0..6 {
        producer.send_with_receipt(grouped(1, i)).unwrap();
    }
    // Group g1 is in partition 6 (see the server's unit test). A node
    // that read three of it, holds its lease and died.
    let stream: &[u8] = b"herald:q:{orphaned}:g6";
    redis.command(&[b"XGROUP", b"CREATE", stream, b"herald", b"0"]);
    let read = redis.command(&[
        b"XREADGROUP",
        b"GROUP",
        b"herald",
        b"ghost",
        b"COUNT",
        b"3",
        b"STREAMS",
        stream,
        b">",
    ]);
    assert_eq!(read, "*1", "the ghost read them");
    let lease = redis.command(&[
        b"SET",
        b"herald:q:{orphaned}:g6:active",
        b"ghost",
        b"PX",
        b"1500",
    ]);
    assert_eq!(lease, "+OK");
    // Once its lease expires, the next node takes the partition: what the
    // dead one read first, marked redelivered, then the rest, in order.
    let consumer = on_b.create_consumer(&queue).unwrap();
    for i in 0..6 {
        let m = consumer
            .receive(Duration::from_secs(10))
            .unwrap()
            .expect("taken over");
        assert_eq!((n(&m), m.redelivered), (i, i < 3));
    }
    assert!(consumer
        .receive(Duration::from_millis(300))
        .unwrap()
        .is_none());
}
