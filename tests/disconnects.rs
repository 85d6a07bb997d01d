//! Queue consumers that go away while they hold deliveries, for every
//! reason the server has to end a connection (too slow a reader, silence,
//! an administrator, a protocol error, a killed process): what they held
//! goes to the next consumer once, the queue forgets them, and the worker
//! they were on goes back to idle.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use herald_client::{ConsumerOptions, Destination, Message};
use herald_protocol::stomp::StompFrame;
use herald_tests::*;

const QUEUE: &str = "rq";
/// Each message's body: large enough that a few hundred fill any socket
/// buffer and the pending limit below.
const BODY: usize = 60 * 1024;

fn server() -> TestServer {
    let mut config = test_config();
    config.max_pending_bytes = 1 << 20;
    config.max_frame_size = 64 * 1024;
    config.workers = 1;
    start_with(config)
}

/// A STOMP consumer of the queue that acknowledges nothing, so that
/// everything it is sent stays in flight.
fn holder(server: &TestServer, heart_beat: &str) -> StompClient {
    let mut c = StompClient::connected(server, &[("heart-beat", heart_beat)]);
    c.send(
        &StompFrame::new("SUBSCRIBE")
            .header("id", "0")
            .header("destination", format!("/queue/{QUEUE}"))
            .header("ack", "client-individual")
            .header("receipt", "subscribed"),
    );
    c.expect("RECEIPT");
    c
}

/// Publishes `count` numbered messages to the queue, receipted.
fn publish(server: &TestServer, count: usize) {
    let (_c, session) = connect(server);
    let producer = session.create_producer(&Destination::queue(QUEUE)).unwrap();
    let pad = "x".repeat(BODY);
    for i in 0..count {
        let mut m = Message::text(pad.clone());
        m.set_property("n", i as i64);
        producer.send_with_receipt(m).unwrap();
    }
}

/// The queue's (consumers, in flight) as the management API shows them.
fn queue_view(server: &TestServer) -> (u64, u64) {
    let queues = call(server, "GET", "/api/queues", None, None).json();
    let q = queues
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == QUEUE)
        .cloned()
        .unwrap_or_default();
    (
        q["consumers"].as_u64().unwrap_or(0),
        q["in_flight"].as_u64().unwrap_or(0),
    )
}

/// Waits until the queue has no consumer and nothing in flight, then
/// checks that its worker is idle: less than a quarter of a second's work
/// in a second, and the server still takes connections.
fn settles(server: &TestServer) {
    wait_until("the queue to forget its consumer", || {
        queue_view(server) == (0, 0)
    });
    let busy = |s: &TestServer| s.stats().worker_busy_ns.iter().sum::<u64>();
    let before = busy(server);
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let worked = busy(server) - before;
    let elapsed = started.elapsed().as_nanos() as u64;
    assert!(
        worked < elapsed / 4,
        "the worker worked {worked} ns of {elapsed}"
    );
    let health = call(server, "GET", "/api/ready", None, None);
    assert_eq!(health.status, 200, "{}", health.body);
}

/// Every one of `count` messages reaches a new consumer exactly once.
fn all_delivered_once(server: &TestServer, count: usize) {
    let (_c, session) = connect(server);
    // A few at a time: the server's pending limit is small here.
    let consumer = session
        .create_consumer_with(
            &Destination::queue(QUEUE),
            ConsumerOptions::default().prefetch(4),
        )
        .unwrap();
    let mut seen = BTreeSet::new();
    while seen.len() < count {
        let m = consumer
            .receive(Duration::from_secs(10))
            .unwrap()
            .unwrap_or_else(|| panic!("{} of {count} delivered", seen.len()));
        let n = m.property("n").and_then(|v| v.as_i64()).unwrap();
        assert!(seen.insert(n), "message {n} delivered twice");
    }
    assert!(consumer
        .receive(Duration::from_millis(200))
        .unwrap()
        .is_none());
}

/// A consumer holding `count` deliveries (its heart-beat header as given)
/// is taken away by `end`, which gives back the client if it is to stay
/// open; then the queue forgets it, its worker goes idle and a new
/// consumer gets every message once.
fn taken_away(
    heart_beat: &str,
    count: usize,
    end: impl FnOnce(&TestServer, StompClient) -> Option<StompClient>,
) {
    let server = server();
    let holder = holder(&server, heart_beat);
    publish(&server, count);
    let _kept = end(&server, holder);
    settles(&server);
    all_delivered_once(&server, count);
}

/// Waits until every delivery is in flight to the holder.
fn held(server: &TestServer, count: usize) {
    wait_until("the deliveries to be in flight", || {
        queue_view(server).1 == count as u64
    });
}

#[test]
fn a_slow_queue_consumer_cut_off_leaves_its_worker_idle_and_its_messages_to_others() {
    // 24 MB for a reader that reads nothing: past its socket buffers and
    // the 1 MiB pending limit.
    taken_away("0,0", 400, |_, slow| Some(slow));
}

#[test]
fn a_silent_queue_consumer_closed_leaves_its_messages_to_others() {
    // It promises a heart-beat every 100 ms and sends none.
    taken_away("100,0", 20, |_, silent| Some(silent));
}

#[test]
fn a_queue_consumer_closed_by_an_administrator_leaves_its_messages_to_others() {
    taken_away("0,0", 20, |server, closed| {
        held(server, 20);
        close_all_connections(server);
        Some(closed)
    });
}

#[test]
fn a_queue_consumer_that_breaks_the_protocol_leaves_its_messages_to_others() {
    taken_away("0,0", 20, |server, mut broken| {
        held(server, 20);
        broken.write(b"NOT-A-COMMAND\n\n\0");
        Some(broken)
    });
}

#[test]
fn a_killed_queue_consumer_leaves_its_messages_to_others() {
    taken_away("0,0", 20, |server, killed| {
        held(server, 20);
        drop(killed);
        None
    });
}
