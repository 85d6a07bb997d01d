//! Many clients across several workers; a fixed number of threads.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use herald_client::{Destination, Message};
use herald_tests::*;

#[test]
fn a_hundred_clients_on_several_workers_all_receive() {
    let mut config = test_config();
    config.workers = 4;
    let server = start_with(config);
    let received = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for i in 0..100 {
        let (c, s) = connect(&server);
        let consumer = subscribe(&s, if i % 2 == 0 { "news.#" } else { "news.*" });
        let received = received.clone();
        consumer
            .set_message_listener(move |_| {
                received.fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
        clients.push((c, s, consumer));
    }
    let per_worker = server.stats().connections_per_worker;
    assert_eq!(per_worker.iter().sum::<usize>(), 100);
    assert!(
        per_worker.iter().all(|&n| n >= 20),
        "spread over every worker: {per_worker:?}"
    );

    let (_pc, ps) = connect(&server);
    let producer = ps
        .create_producer(&Destination::topic("news.flash"))
        .unwrap();
    for i in 0..50 {
        producer.send(Message::text(format!("{i}"))).unwrap();
    }
    wait_until("every client got every message", || {
        received.load(Ordering::Relaxed) == 100 * 50
    });
    assert_eq!(server.stats().messages_out, 5000);
}

#[test]
fn messages_cross_workers_in_order() {
    let mut config = test_config();
    config.workers = 3;
    let server = start_with(config);
    // Round-robin placement puts consecutive connections on different
    // workers: the publisher is on one, the subscribers on the others.
    let subs: Vec<_> = (0..3)
        .map(|_| {
            let (c, s) = connect(&server);
            let consumer = subscribe(&s, "orders");
            (c, s, consumer)
        })
        .collect();
    let (_pc, ps) = connect(&server);
    let producer = ps.create_producer(&Destination::topic("orders")).unwrap();
    for i in 0..1000 {
        producer.send(Message::text(i.to_string())).unwrap();
    }
    for (_, _, consumer) in &subs {
        for i in 0..1000 {
            assert_eq!(next(consumer).body_text(), Some(i.to_string().as_str()));
        }
    }
}

/// Sends `count` numbered messages one at a time, each alone on the wire
/// (a pause after each), so that the server reads them one by one.
fn trickle(producer: &herald_client::Producer, from: u32, count: u32) {
    trickle_every(producer, (from, count), Duration::from_micros(300));
}

/// [`trickle`] with `pause` after each message.
fn trickle_every(producer: &herald_client::Producer, (from, count): (u32, u32), pause: Duration) {
    for i in from..from + count {
        producer.send(Message::text(i.to_string())).unwrap();
        std::thread::sleep(pause);
    }
}

#[test]
fn a_publisher_moves_to_its_subscribers_worker_and_stays_whole() {
    let server = start_with(test_config());
    let (_sc, ss) = connect(&server);
    let consumer = subscribe(&ss, "moving");
    // Round-robin placement: the publisher is on the other worker.
    let (pc, ps) = as_client(&server, "mover");
    assert_eq!(server.stats().connections_per_worker, vec![1, 1]);
    let producer = ps.create_producer(&Destination::topic("moving")).unwrap();
    let mut sent = 0;
    let deadline = std::time::Instant::now() + PATIENCE;
    while server.stats().connections_moved == 0 {
        assert!(std::time::Instant::now() < deadline, "never moved");
        trickle(&producer, sent, 10);
        sent += 10;
    }
    // A burst right behind the move: nothing overtakes what was sent
    // before it.
    for i in sent..sent + 2000 {
        producer.send(Message::text(i.to_string())).unwrap();
    }
    for i in 0..sent + 2000 {
        assert_eq!(next(&consumer).body_text(), Some(i.to_string().as_str()));
    }
    let stats = server.stats();
    assert_eq!(stats.connections_moved, 1);
    let mut per_worker = stats.connections_per_worker;
    per_worker.sort_unstable();
    assert_eq!(per_worker, vec![0, 2], "both on one worker");

    // The moved connection does all a connection does, where it lives now.
    producer
        .send_with_receipt(Message::text("receipted"))
        .unwrap();
    assert_eq!(next(&consumer).body_text(), Some("receipted"));
    let own = subscribe(&ps, "own");
    publish(&ss, "own", "to the moved one");
    assert_eq!(next(&own).body_text(), Some("to the moved one"));
    drop(own);

    // The management interface finds it where it went.
    let conns = call(&server, "GET", "/api/connections", None, None).json();
    let id = conns
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["client_id"] == "mover")
        .expect("listed")["id"]
        .as_u64()
        .unwrap();
    let path = format!("/api/connections/{id}");
    assert_eq!(call(&server, "DELETE", &path, None, None).status, 200);
    wait_until("the moved connection is closed", || pc.is_closed());
    wait_until("the server has let it go", || {
        server.stats().connections_per_worker.iter().sum::<usize>() == 1
    });
}

#[test]
fn the_connection_listing_misses_none_while_publishers_move() {
    let server = start_with(test_config());
    let (_sc, ss) = as_client(&server, "listener");
    let consumer = subscribe(&ss, "listed");
    consumer.set_message_listener(|_| {}).unwrap();
    // Round-robin placement: every other publisher is on the other
    // worker, and moves to the subscriber's as it publishes.
    let publishers: Vec<_> = (0..12)
        .map(|i| as_client(&server, &format!("publisher-{i}")))
        .collect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let threads: Vec<_> = publishers
        .iter()
        .map(|(_, s)| {
            let producer = s.create_producer(&Destination::topic("listed")).unwrap();
            let stop = stop.clone();
            // Twelve publishers at the single one's pace would keep the
            // subscriber's worker over half busy, and a publisher moves
            // only to a worker under that (MOVE_MAX_LOAD): on a slow or
            // busy machine none ever moved. Each goes at a tenth of it.
            std::thread::spawn(move || {
                let mut sent = 0;
                while !stop.load(Ordering::Relaxed) {
                    trickle_every(&producer, (sent, 10), Duration::from_millis(3));
                    sent += 10;
                }
            })
        })
        .collect();
    let mut expected: Vec<String> = (0..12).map(|i| format!("publisher-{i}")).collect();
    expected.push("listener".into());
    expected.sort();
    let deadline = std::time::Instant::now() + PATIENCE;
    let mut listings = 0;
    // Listed again and again while they move, and twice after.
    let mut after = 0;
    while after < 2 {
        if server.stats().connections_moved >= 6 {
            after += 1;
        }
        assert!(std::time::Instant::now() < deadline, "never all moved");
        let conns = call(&server, "GET", "/api/connections", None, None).json();
        let mut ids: Vec<String> = conns
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["client_id"].as_str().unwrap().to_owned())
            .collect();
        ids.sort();
        assert_eq!(ids, expected, "listing {listings}");
        listings += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(server.stats().connections_moved, 6);
}

#[test]
fn a_publisher_to_every_worker_or_with_subscriptions_stays() {
    let server = start_with(test_config());
    let subs: Vec<_> = (0..2)
        .map(|_| {
            let (c, s) = connect(&server);
            let consumer = subscribe(&s, "spread");
            (c, s, consumer)
        })
        .collect();
    // On worker 0 with one subscriber, publishing to both workers.
    let (_pc, ps) = connect(&server);
    let producer = ps.create_producer(&Destination::topic("spread")).unwrap();
    trickle(&producer, 0, 200);
    // On worker 1, subscribed to something itself, publishing only to
    // worker 0's subscriber.
    let (_qc, qs) = connect(&server);
    let _own = subscribe(&qs, "elsewhere");
    let (_rc, rs) = connect(&server);
    let only = subscribe(&rs, "narrow");
    let narrow = qs.create_producer(&Destination::topic("narrow")).unwrap();
    trickle(&narrow, 0, 200);
    for (_, _, consumer) in &subs {
        for i in 0..200 {
            assert_eq!(next(consumer).body_text(), Some(i.to_string().as_str()));
        }
    }
    for i in 0..200 {
        assert_eq!(next(&only).body_text(), Some(i.to_string().as_str()));
    }
    assert_eq!(server.stats().connections_moved, 0);
    assert_eq!(server.stats().connections_per_worker, vec![3, 2]);
}
