//! Quality of service: priority and expiry.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use herald_client::{Destination, Message};
use herald_tests::*;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn with_priority(text: &str, priority: u8) -> Message {
    let mut m = Message::text(text);
    m.priority = priority;
    m
}

#[test]
fn a_queue_delivers_higher_priority_first_and_fifo_within_one() {
    let server = start();
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("jobs")).unwrap();
    for (text, priority) in [
        ("low-1", 1),
        ("high-1", 8),
        ("normal", 4),
        ("high-2", 8),
        ("low-2", 1),
    ] {
        p.send_with_receipt(with_priority(text, priority)).unwrap();
    }
    let consumer = s.create_consumer(&Destination::queue("jobs")).unwrap();
    let got: Vec<String> = (0..5)
        .map(|_| next(&consumer).body_text().unwrap().to_owned())
        .collect();
    assert_eq!(got, ["high-1", "high-2", "normal", "low-1", "low-2"]);
}

#[test]
fn a_consumers_backlog_is_ordered_by_priority_too() {
    let server = start();
    let (_c, s) = connect(&server);
    let consumer = subscribe(&s, "alerts");
    let p = s.create_producer(&Destination::topic("alerts")).unwrap();
    for (text, priority) in [("info", 2), ("fire", 9), ("note", 2)] {
        p.send_with_receipt(with_priority(text, priority)).unwrap();
    }
    // All three are waiting in the consumer's backlog before it reads.
    wait_until("all delivered", || server.stats().messages_out == 3);
    // Three in, three out: the sum a traffic watcher reads without locks.
    assert_eq!(server.messages_moved(), 6);
    std::thread::sleep(Duration::from_millis(50));
    let got: Vec<String> = (0..3)
        .map(|_| next(&consumer).body_text().unwrap().to_owned())
        .collect();
    assert_eq!(got, ["fire", "info", "note"]);
}

#[test]
fn expired_messages_are_never_delivered_and_go_to_the_expiry_queue() {
    let server = start();
    let (_c, s) = connect(&server);
    let p = s
        .create_producer(&Destination::queue("perishable"))
        .unwrap();
    let mut soon = Message::text("stale").with_property("k", 1);
    soon.expiration = now_ms() + 100;
    p.send_with_receipt(soon).unwrap();
    let mut later = Message::text("fresh");
    later.expiration = now_ms() + 60_000;
    p.send_with_receipt(later).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let consumer = s
        .create_consumer(&Destination::queue("perishable"))
        .unwrap();
    assert_eq!(next(&consumer).body_text(), Some("fresh"));
    assert_nothing(&consumer);
    let expired = s
        .create_consumer(&Destination::queue("ExpiryQueue"))
        .unwrap();
    let m = next(&expired);
    assert_eq!(m.body_text(), Some("stale"));
    assert_eq!(
        m.property("HeraldOriginalDestination")
            .and_then(|v| v.as_str()),
        Some("queue://perishable")
    );
    assert_eq!(
        m.expiration, 0,
        "it does not expire again in the expiry queue"
    );

    // A topic message expired on arrival reaches no subscriber.
    let sub = subscribe(&s, "news");
    let mut dead_on_arrival = Message::text("old news");
    dead_on_arrival.expiration = now_ms() - 1;
    s.create_producer(&Destination::topic("news"))
        .unwrap()
        .send_with_receipt(dead_on_arrival)
        .unwrap();
    assert_nothing(&sub);
    assert_eq!(next(&expired).body_text(), Some("old news"));
}

#[test]
fn messages_leave_a_queue_without_consumers_when_they_expire_and_are_counted() {
    let server = start();
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("idle")).unwrap();
    for i in 0..3 {
        let mut m = Message::text("x").with_property("n", i);
        m.expiration = now_ms() + 300;
        p.send_with_receipt(m).unwrap();
    }
    let mut kept = Message::text("kept");
    kept.expiration = now_ms() + 60_000;
    p.send_with_receipt(kept).unwrap();
    // No consumer ever comes: they leave anyway, once expired.
    wait_until("the expired messages reach the expiry queue", || {
        server
            .stats()
            .queues
            .iter()
            .any(|q| q.0 == "ExpiryQueue" && q.1 == 3)
    });
    let depth = |name: &str| {
        server
            .stats()
            .queues
            .iter()
            .find(|q| q.0 == name)
            .map(|q| q.1)
    };
    assert_eq!(depth("idle"), Some(1));
    let listed = call(&server, "GET", "/api/queues/idle/messages", None, None).json();
    assert_eq!(
        listed["messages"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
    let metrics = call(&server, "GET", "/metrics", None, None).body;
    assert!(metrics.contains("herald_expired_total 3"), "{metrics}");
}

#[test]
fn expired_messages_can_be_dropped_instead() {
    let mut config = test_config();
    config.queues.expiry_queue = String::new();
    let server = start_with(config);
    let (_c, s) = connect(&server);
    let mut m = Message::text("gone");
    m.expiration = now_ms() - 1;
    s.create_producer(&Destination::queue("q"))
        .unwrap()
        .send_with_receipt(m)
        .unwrap();
    let consumer = s.create_consumer(&Destination::queue("q")).unwrap();
    assert_nothing(&consumer);
    assert!(!server.stats().queues.iter().any(|q| q.0 == "ExpiryQueue"));
}

#[test]
fn a_delivery_delay_holds_messages_back_on_queues_and_topics() {
    let server = start();
    let (_c, s) = connect(&server);
    let queue_consumer = s.create_consumer(&Destination::queue("later")).unwrap();
    let topic_consumer = subscribe(&s, "later");
    let mut q = s.create_producer(&Destination::queue("later")).unwrap();
    let mut t = s.create_producer(&Destination::topic("later")).unwrap();
    q.set_delivery_delay(Duration::from_millis(400));
    t.set_delivery_delay(Duration::from_millis(400));
    let sent = std::time::Instant::now();
    q.send_with_receipt(Message::text("queued")).unwrap();
    t.send_with_receipt(Message::text("published")).unwrap();
    q.set_delivery_delay(Duration::ZERO);
    q.send_with_receipt(Message::text("at once")).unwrap();
    assert_eq!(
        next(&queue_consumer).body_text(),
        Some("at once"),
        "undelayed ones are not held up"
    );
    assert!(queue_consumer
        .receive(Duration::from_millis(200))
        .unwrap()
        .is_none());
    assert!(topic_consumer
        .receive(Duration::from_millis(10))
        .unwrap()
        .is_none());
    assert_eq!(next(&queue_consumer).body_text(), Some("queued"));
    assert_eq!(next(&topic_consumer).body_text(), Some("published"));
    assert!(sent.elapsed() >= Duration::from_millis(400));
    assert!(s
        .create_browser(&Destination::queue("later"), "")
        .unwrap()
        .messages()
        .unwrap()
        .is_empty());
}

#[test]
fn a_delayed_persistent_message_waits_across_a_restart() {
    let config = test_config();
    let dir = config.data_dir.clone();
    let server = start_with(config);
    let sent = std::time::Instant::now();
    {
        let (_c, s) = connect(&server);
        let mut p = s.create_producer(&Destination::queue("scheduled")).unwrap();
        p.set_delivery_delay(Duration::from_millis(700));
        p.send(Message::text("after the restart").persistent())
            .unwrap();
    }
    server.stop_keeping_data();
    let mut config = test_config();
    config.data_dir = dir;
    let server = start_with(config);
    let (_c, s) = connect(&server);
    let consumer = s.create_consumer(&Destination::queue("scheduled")).unwrap();
    let m = next(&consumer);
    assert_eq!(m.body_text(), Some("after the restart"));
    assert!(m.delivery_time > 0);
    assert!(
        sent.elapsed() >= Duration::from_millis(700),
        "not before its delivery time"
    );
}

#[test]
fn retained_topics_give_late_subscribers_their_last_messages_first() {
    let mut config = test_config();
    config.topics.retain = vec![herald_server::config::RetainRule {
        pattern: "sensors.#".into(),
        last: 2,
    }];
    let server = start_with(config);
    let (_c, s) = connect(&server);
    for (topic, text) in [
        ("sensors.a", "a1"),
        ("sensors.a", "a2"),
        ("sensors.a", "a3"),
        ("sensors.b", "b1"),
        ("other", "o1"),
    ] {
        publish(&s, topic, text);
    }
    let late = subscribe(&s, "sensors.#");
    let got: Vec<String> = (0..3)
        .map(|_| next(&late).body_text().unwrap().to_owned())
        .collect();
    assert_eq!(
        got,
        ["a2", "a3", "b1"],
        "the last two of each topic, oldest first"
    );
    publish(&s, "sensors.b", "b2");
    assert_eq!(next(&late).body_text(), Some("b2"), "then live ones");
    assert_nothing(&late);
    let picky = s
        .create_consumer_with_selector(
            &Destination::topic("sensors.*"),
            "JMSTimestamp > 0 AND 1 = 0",
        )
        .unwrap();
    assert_nothing(&picky);
    let one = subscribe(&s, "sensors.a");
    let got: Vec<String> = (0..2)
        .map(|_| next(&one).body_text().unwrap().to_owned())
        .collect();
    assert_eq!(got, ["a2", "a3"]);
    let none = subscribe(&s, "other");
    assert_nothing(&none);
}
