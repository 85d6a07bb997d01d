//! Persistent messages and durable subscriptions across a restart of an
//! in-process server on the same data directory.

use herald_client::{AckMode, Destination, Message};
use herald_tests::*;

fn restart(server: TestServer, dir: &std::path::Path) -> TestServer {
    let mut config = test_config();
    config.data_dir = dir.to_owned();
    server.stop_keeping_data();
    start_with(config)
}

fn numbered(i: i32) -> Message {
    Message::text(i.to_string()).with_property("n", i)
}

#[test]
fn persistent_queue_messages_survive_a_restart_and_non_persistent_ones_do_not() {
    let config = test_config();
    let dir = config.data_dir.clone();
    let server = start_with(config);
    {
        let (_c, s) = connect(&server);
        let p = s.create_producer(&Destination::queue("orders")).unwrap();
        for i in 0..100 {
            p.send(numbered(i).persistent()).unwrap();
            p.send(Message::text("volatile").non_persistent()).unwrap();
        }
        // Consume and acknowledge the first ten persistent ones.
        let (_c2, s2) = {
            let c = factory(&server).create_connection().unwrap();
            let s = c.create_session(AckMode::Client).unwrap();
            (c, s)
        };
        let consumer = s2.create_consumer(&Destination::queue("orders")).unwrap();
        let mut persistent_seen = 0;
        while persistent_seen < 10 {
            if next(&consumer).body_text() != Some("volatile") {
                persistent_seen += 1;
            }
        }
        s2.acknowledge().unwrap();
    }
    let server = restart(server, &dir);
    let (_c, s) = connect(&server);
    let consumer = s.create_consumer(&Destination::queue("orders")).unwrap();
    for i in 10..100 {
        let m = next(&consumer);
        assert_eq!(
            m.property("n").and_then(|v| v.as_i64()),
            Some(i.into()),
            "{m:?}"
        );
    }
    assert_nothing(&consumer);
}

#[test]
fn after_a_clean_restart_only_what_was_delivered_comes_back_redelivered() {
    let config = test_config();
    let dir = config.data_dir.clone();
    let server = start_with(config);
    {
        let (c, s) = connect(&server);
        let p = s.create_producer(&Destination::queue("backlog")).unwrap();
        for i in 0..5 {
            p.send_with_receipt(numbered(i).persistent()).unwrap();
        }
        let acking = c.create_session(AckMode::Individual).unwrap();
        let consumer = acking
            .create_consumer_with(
                &Destination::queue("backlog"),
                herald_client::ConsumerOptions::default().prefetch(2),
            )
            .unwrap();
        let first = next(&consumer);
        acking.acknowledge_message(&first).unwrap();
        // The second is delivered and never acknowledged.
        assert_eq!(
            next(&consumer).property("n").and_then(|v| v.as_i64()),
            Some(1)
        );
    }
    let server = restart(server, &dir);
    let (_c, s) = connect(&server);
    let consumer = s.create_consumer(&Destination::queue("backlog")).unwrap();
    let got: Vec<(i64, bool, u32)> = (1..5)
        .map(|_| {
            let m = next(&consumer);
            let n = m.property("n").and_then(|v| v.as_i64()).unwrap();
            (n, m.redelivered, m.delivery_count)
        })
        .collect();
    assert_eq!(
        got,
        [(1, true, 2), (2, false, 1), (3, false, 1), (4, false, 1)]
    );
    assert_nothing(&consumer);
}

#[test]
fn a_durable_subscription_and_its_persistent_messages_survive_a_restart() {
    let config = test_config();
    let dir = config.data_dir.clone();
    let server = start_with(config);
    {
        let (_c, s) = as_client(&server, "app");
        let sub = s
            .create_durable_subscriber(&Destination::topic("sales.#"), "d")
            .unwrap();
        sub.close().unwrap();
        let (_pc, ps) = connect(&server);
        let p = ps.create_producer(&Destination::topic("sales.eu")).unwrap();
        for i in 0..5 {
            p.send(numbered(i).persistent()).unwrap();
        }
        p.send(Message::text("volatile").non_persistent()).unwrap();
        ps.create_producer(&Destination::topic("sales.eu"))
            .unwrap()
            .send_with_receipt(Message::text("sync").non_persistent())
            .unwrap();
    }
    let server = restart(server, &dir);
    let (c, s) = as_client(&server, "app");
    let sub = s
        .create_durable_subscriber(&Destination::topic("sales.#"), "d")
        .unwrap();
    for i in 0..5 {
        assert_eq!(next(&sub).property("n").and_then(|v| v.as_i64()), Some(i));
    }
    assert_nothing(&sub);
    // Deleted, it stays deleted across a restart.
    sub.close().unwrap();
    s.unsubscribe("d").unwrap();
    drop(c);
    let server = restart(server, &dir);
    assert_eq!(server.stats().subscriptions, 0);
}

#[test]
fn dead_letters_and_redelivered_messages_are_kept_too() {
    let mut config = test_config();
    config.queues.max_deliveries = 1;
    let dir = config.data_dir.clone();
    let server = start_with(config);
    {
        let (_c, s) = connect(&server);
        s.create_producer(&Destination::queue("q"))
            .unwrap()
            .send(numbered(1).persistent())
            .unwrap();
        let c2 = factory(&server).create_connection().unwrap();
        let s2 = c2.create_session(AckMode::Client).unwrap();
        let consumer = s2.create_consumer(&Destination::queue("q")).unwrap();
        next(&consumer);
        s2.recover().unwrap();
        wait_until("moved to the DLQ", || {
            s.create_browser(&Destination::queue("DLQ.q"), "")
                .unwrap()
                .messages()
                .unwrap()
                .len()
                == 1
        });
    }
    let server = restart(server, &dir);
    let (_c, s) = connect(&server);
    assert!(s
        .create_browser(&Destination::queue("q"), "")
        .unwrap()
        .messages()
        .unwrap()
        .is_empty());
    let dead = s
        .create_browser(&Destination::queue("DLQ.q"), "")
        .unwrap()
        .messages()
        .unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        dead[0]
            .property("HeraldOriginalDestination")
            .and_then(|v| v.as_str()),
        Some("queue://q")
    );
}

#[test]
fn a_producer_sends_persistent_by_default_as_in_jms_and_a_message_choice_wins() {
    let config = test_config();
    let dir = config.data_dir.clone();
    let server = start_with(config);
    {
        let (_c, s) = connect(&server);
        let q = Destination::queue("defaults");
        let kept = s.create_producer(&q).unwrap();
        assert_eq!(
            kept.delivery_mode(),
            herald_client::DeliveryMode::Persistent
        );
        kept.send(numbered(0)).unwrap();
        kept.send(numbered(1).non_persistent()).unwrap();
        let mut plain = s.create_producer(&q).unwrap();
        plain.set_delivery_mode(herald_client::DeliveryMode::NonPersistent);
        plain.send(numbered(2)).unwrap();
        plain.send_with_receipt(numbered(3).persistent()).unwrap();
        // The anonymous producer is a producer too.
        s.send(&q, numbered(4)).unwrap();
    }
    let server = restart(server, &dir);
    let (_c, s) = connect(&server);
    let consumer = s.create_consumer(&Destination::queue("defaults")).unwrap();
    let mut kept = Vec::new();
    while let Some(m) = consumer
        .receive(std::time::Duration::from_millis(300))
        .unwrap()
    {
        assert_eq!(m.delivery_mode, herald_client::DeliveryMode::Persistent);
        kept.push(m.property("n").and_then(|v| v.as_i64()).unwrap());
    }
    assert_eq!(kept, [0, 3, 4]);
}
