//! Durable topic subscriptions: kept while the subscriber is away.

use herald_client::{ConsumerOptions, Destination, ErrorCode};
use herald_tests::*;

#[test]
fn messages_published_while_away_arrive_on_return() {
    let server = start();
    let (c, s) = as_client(&server, "reporting");
    let sub = s
        .create_durable_subscriber(&Destination::topic("sales.#"), "daily")
        .unwrap();
    let (_pc, ps) = connect(&server);
    publish(&ps, "sales.eu", "before");
    assert_eq!(next(&sub).body_text(), Some("before"));
    drop(sub);
    c.close().unwrap();

    publish(&ps, "sales.eu", "while away 1");
    publish(&ps, "weather.eu", "not for it");
    publish(&ps, "sales.na", "while away 2");

    let (_c, s) = as_client(&server, "reporting");
    let sub = s
        .create_durable_subscriber(&Destination::topic("sales.#"), "daily")
        .unwrap();
    assert_eq!(next(&sub).body_text(), Some("while away 1"));
    assert_eq!(next(&sub).body_text(), Some("while away 2"));
    assert_nothing(&sub);
}

#[test]
fn a_second_live_consumer_or_connection_is_refused() {
    let server = start();
    let (_c1, s1) = as_client(&server, "app");
    let _first = s1
        .create_durable_subscriber(&Destination::topic("t"), "d")
        .unwrap();
    let s2 = _c1.create_session(herald_client::AckMode::Auto).unwrap();
    let e = s2
        .create_durable_subscriber(&Destination::topic("t"), "d")
        .unwrap_err();
    assert_eq!(e.server_code(), Some(ErrorCode::SubscriptionInUse), "{e}");
    assert!(e.to_string().contains("'d'"));
    // JMS: a client id is one live connection's at a time.
    let e = factory(&server)
        .with_client_id("app")
        .create_connection()
        .unwrap_err();
    assert_eq!(e.server_code(), Some(ErrorCode::InvalidClientId), "{e}");
    // Free again once its connection ends.
    drop((_first, s1, s2, _c1));
    wait_until("the client id is free", || {
        factory(&server)
            .with_client_id("app")
            .create_connection()
            .is_ok()
    });
}

#[test]
fn unsubscribe_deletes_the_subscription_and_what_it_kept() {
    let server = start();
    let (c, s) = as_client(&server, "app");
    let sub = s
        .create_durable_subscriber(&Destination::topic("t"), "d")
        .unwrap();
    let e = s.unsubscribe("d").unwrap_err();
    assert_eq!(
        e.server_code(),
        Some(ErrorCode::SubscriptionInUse),
        "active: {e}"
    );
    sub.close().unwrap();
    let (_pc, ps) = connect(&server);
    publish(&ps, "t", "kept");
    s.unsubscribe("d").unwrap();
    let e = s.unsubscribe("d").unwrap_err();
    assert_eq!(e.server_code(), Some(ErrorCode::UnknownSubscription), "{e}");
    assert_eq!(server.stats().subscriptions, 0);
    let sub = s
        .create_durable_subscriber(&Destination::topic("t"), "d")
        .unwrap();
    assert_nothing(&sub);
    drop(c);
}

#[test]
fn a_client_id_is_required_and_a_new_selector_replaces_the_subscription() {
    let server = start();
    let (_c, anonymous) = connect(&server);
    let e = anonymous
        .create_durable_subscriber(&Destination::topic("t"), "d")
        .unwrap_err();
    assert_eq!(e.server_code(), Some(ErrorCode::ClientIdRequired), "{e}");

    let (c, s) = as_client(&server, "app");
    let sub = s
        .create_durable_subscriber(&Destination::topic("t"), "d")
        .unwrap();
    sub.close().unwrap();
    let (_pc, ps) = connect(&server);
    publish(&ps, "t", "for the old one");
    // Closed, not dropped: the goodbye is confirmed before the client id
    // is used again (and the session would keep a dropped handle open).
    c.close().unwrap();
    drop(s);
    let (_c, s) = as_client(&server, "app");
    let options = ConsumerOptions::default()
        .durable("d")
        .selector("JMSType = 'x'");
    let sub = s
        .create_consumer_with(&Destination::topic("t"), options)
        .unwrap();
    assert_nothing(&sub);
    assert_eq!(server.stats().subscriptions, 1, "replaced, not added");
}
