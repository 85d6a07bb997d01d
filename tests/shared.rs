//! Shared subscriptions (JMS 2.0): consumers on any connection share one
//! topic subscription, each message going to one of them.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use herald_client::{Destination, ErrorCode, Message};
use herald_tests::*;

#[test]
fn consumers_of_a_shared_subscription_split_its_messages_and_it_ends_with_them() {
    let server = start();
    let topic = Destination::topic("events.#");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut members = Vec::new();
    for _ in 0..2 {
        let (c, s) = connect(&server);
        let consumer = s.create_shared_consumer(&topic, "workers").unwrap();
        let seen = seen.clone();
        consumer
            .set_message_listener(move |m| {
                seen.lock().unwrap().push(m.body_text().unwrap().to_owned())
            })
            .unwrap();
        members.push((c, s, consumer));
    }
    let (_c, s) = connect(&server);
    let everyone = subscribe(&s, "events.#");
    let p = s
        .create_producer(&Destination::topic("events.click"))
        .unwrap();
    for i in 0..100 {
        p.send(Message::text(i.to_string())).unwrap();
    }
    for _ in 0..100 {
        next(&everyone);
    }
    wait_until("the shared subscription got all 100", || {
        seen.lock().unwrap().len() == 100
    });
    let unique: HashSet<_> = seen.lock().unwrap().iter().cloned().collect();
    assert_eq!(unique.len(), 100, "each message to one member");
    assert_eq!(
        server.stats().subscriptions,
        2,
        "one shared subscription and the plain one"
    );
    for (c, _, _) in members {
        c.close().unwrap();
    }
    wait_until(
        "the shared subscription ended with its last consumer",
        || server.stats().subscriptions == 1,
    );
}

#[test]
fn a_shared_durable_subscription_keeps_messages_while_nobody_consumes() {
    let server = start();
    let topic = Destination::topic("orders");
    let (c1, s1) = connect(&server);
    let a = s1
        .create_shared_durable_consumer(&topic, "billing")
        .unwrap();
    let (_c2, s2) = connect(&server);
    let b = s2
        .create_shared_durable_consumer(&topic, "billing")
        .unwrap();
    drop((a, b));
    c1.close().unwrap();
    let (_pc, ps) = connect(&server);
    publish(&ps, "orders", "kept");
    let (_c3, s3) = connect(&server);
    let back = s3
        .create_shared_durable_consumer(&topic, "billing")
        .unwrap();
    assert_eq!(next(&back).body_text(), Some("kept"));
    // A non-durable shared consumer cannot join the durable one in use.
    let (_c4, s4) = connect(&server);
    let e = s4.create_shared_consumer(&topic, "billing").unwrap_err();
    assert_eq!(
        e.server_code(),
        Some(ErrorCode::SubscriptionInUse),
        "non-durable shared vs durable shared: {e}"
    );
}
