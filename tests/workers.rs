//! Many clients across several workers; a fixed number of threads.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

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
