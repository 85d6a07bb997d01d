//! Client failover: a connection that loses its server dials the listed
//! servers again with back-off, subscribes its consumers again (durable
//! ones included), tells the exception listener, holds sends back for a
//! while and fails them clearly when the server stays away.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use herald_client::{
    AckMode, Connection, ConnectionFactory, Destination, Error, ErrorCode, Message,
};
use herald_tests::*;

/// Events the exception listener heard, as text.
type Events = Arc<Mutex<Vec<String>>>;

fn listen(c: &Connection) -> Events {
    let events = Events::default();
    let sink = events.clone();
    c.set_exception_listener(move |e| {
        let what = match &e {
            Error::Interrupted(_) => "interrupted".to_owned(),
            Error::Resumed(_) => "resumed".to_owned(),
            other => format!("{other} {:?}", other.server_code()),
        };
        sink.lock().unwrap().push(what);
    });
    events
}

fn heard(events: &Events, what: &str) -> usize {
    events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e.contains(what))
        .count()
}

fn failing_over(url: &str) -> ConnectionFactory {
    ConnectionFactory::new(url)
        .unwrap()
        .with_reconnect(100, Duration::from_millis(20))
}

fn restart_on(addr: SocketAddr, dir: &std::path::Path) -> TestServer {
    let mut config = test_config();
    config.listen = addr;
    config.data_dir = dir.to_owned();
    start_with(config)
}

#[test]
fn a_restarted_server_gets_the_consumers_back_and_unacknowledged_messages_come_again() {
    let config = test_config();
    let dir = config.data_dir.clone();
    let server = start_with(config);
    let addr = server.local_addr();
    let c = failing_over(&format!("herald://{addr}"))
        .with_client_id("survivor")
        .create_connection()
        .unwrap();
    let events = listen(&c);
    let s = c.create_session(AckMode::Client).unwrap();
    let topic = subscribe(&s, "news.#");
    let durable = s
        .create_durable_subscriber(&Destination::topic("audit.#"), "trail")
        .unwrap();
    let queue = s.create_consumer(&Destination::queue("work")).unwrap();
    let p = s.create_producer(&Destination::queue("work")).unwrap();
    p.send(Message::text("job 1").persistent()).unwrap();
    let first = next(&queue);
    assert!(!first.redelivered);

    server.stop_keeping_data();
    let server = restart_on(addr, &dir);
    wait_until("the connection resumes", || heard(&events, "resumed") == 1);
    assert_eq!(heard(&events, "interrupted"), 1);

    // Never acknowledged: it comes again, from the journal, marked
    // redelivered (the restarted server cannot know it was delivered, so
    // it marks whatever it kept); the stale delivery is not acknowledged
    // on the new session.
    let again = next(&queue);
    assert_eq!(again.body_text(), Some("job 1"));
    assert!(
        again.redelivered,
        "kept from before the restart: it may have been delivered"
    );
    s.acknowledge().unwrap();
    // Every consumer is subscribed again, the durable one resumed.
    let (_pc, ps) = connect(&server);
    publish(&ps, "news.today", "fresh");
    publish(&ps, "audit.login", "kept");
    assert_eq!(next(&topic).body_text(), Some("fresh"));
    assert_eq!(next(&durable).body_text(), Some("kept"));
    // Sends work again.
    p.send_with_receipt(Message::text("job 2")).unwrap();
    assert_eq!(next(&queue).body_text(), Some("job 2"));
    drop(server);
}

#[test]
fn a_dead_server_is_left_for_the_next_one_in_the_list() {
    let a = start();
    let b = start();
    let url = format!("herald://{},{}", a.local_addr(), b.local_addr());
    let c = failing_over(&url).create_connection().unwrap();
    let events = listen(&c);
    let s = c.create_session(AckMode::Auto).unwrap();
    let sub = subscribe(&s, "prices.*");
    let p = s
        .create_producer(&Destination::topic("prices.eur"))
        .unwrap();
    p.send_with_receipt(Message::text("on a")).unwrap();
    assert_eq!(next(&sub).body_text(), Some("on a"));
    a.shutdown();
    wait_until("the connection resumes on b", || {
        heard(&events, "resumed") == 1
    });
    p.send_with_receipt(Message::text("on b")).unwrap();
    assert_eq!(next(&sub).body_text(), Some("on b"));
    let (_bc, bs) = connect(&b);
    publish(&bs, "prices.usd", "from b");
    assert_eq!(next(&sub).body_text(), Some("from b"));
}

#[test]
fn sends_wait_for_the_server_then_fail_clearly_and_work_once_it_is_back() {
    let config = test_config();
    let dir = config.data_dir.clone();
    let server = start_with(config);
    let addr = server.local_addr();
    let mut factory = failing_over(&format!("herald://{addr}"));
    let mut config = factory.config().clone();
    config.send_timeout_ms = 300;
    factory = ConnectionFactory::from_config(config).unwrap();
    let c = factory.create_connection().unwrap();
    let events = listen(&c);
    let s = c.create_session(AckMode::Auto).unwrap();
    let p = s.create_producer(&Destination::queue("outbox")).unwrap();
    server.stop_keeping_data();
    wait_until("the loss is noticed", || heard(&events, "interrupted") == 1);
    let e = p.send(Message::text("during the outage")).unwrap_err();
    assert!(
        matches!(e, Error::ConnectionLost(_))
            && e.to_string().contains("did not come back within 300 ms"),
        "{e}"
    );
    let before = c.connection_id();
    let server = restart_on(addr, &dir);
    wait_until("the connection resumes", || heard(&events, "resumed") == 1);
    p.send_with_receipt(Message::text("after")).unwrap();
    let (_oc, observer) = connect(&server);
    let q = observer
        .create_consumer(&Destination::queue("outbox"))
        .unwrap();
    let after = next(&q);
    assert_eq!(
        after.body_text(),
        Some("after"),
        "the failed send did not go"
    );
    // Its id is of the new session's connection.
    let now = format!("ID:{}-", c.connection_id());
    assert_ne!(c.connection_id(), before);
    assert!(
        after.message_id().starts_with(&now),
        "{}",
        after.message_id()
    );
    assert_nothing(&q);
}

#[test]
fn reconnection_gives_up_after_its_attempts() {
    let server = start();
    let c = ConnectionFactory::new(&format!("herald://{}", server.local_addr()))
        .unwrap()
        .with_reconnect(3, Duration::from_millis(10))
        .create_connection()
        .unwrap();
    let events = listen(&c);
    let s = c.create_session(AckMode::Auto).unwrap();
    let sub = subscribe(&s, "x");
    server.shutdown();
    wait_until("the connection is given up", || c.is_closed());
    assert_eq!(heard(&events, "interrupted"), 1);
    assert_eq!(heard(&events, "gave up after 3 reconnection attempts"), 1);
    assert!(
        sub.receive(Duration::from_millis(10)).is_err(),
        "consumers end"
    );
}

#[test]
fn a_transaction_interrupted_by_a_failover_cannot_commit() {
    let config = test_config();
    let dir = config.data_dir.clone();
    let server = start_with(config);
    let addr = server.local_addr();
    let c = failing_over(&format!("herald://{addr}"))
        .create_connection()
        .unwrap();
    let events = listen(&c);
    let s = c.create_session(AckMode::Transacted).unwrap();
    let p = s.create_producer(&Destination::queue("ledger")).unwrap();
    p.send(Message::text("before").persistent()).unwrap();
    server.stop_keeping_data();
    let server = restart_on(addr, &dir);
    wait_until("the connection resumes", || heard(&events, "resumed") == 1);
    p.send(Message::text("after").persistent()).unwrap();
    let e = s.commit().unwrap_err();
    assert_eq!(
        e.server_code(),
        Some(ErrorCode::TransactionRolledBack),
        "{e}"
    );
    // The next transaction is a fresh one.
    p.send(Message::text("next").persistent()).unwrap();
    s.commit().unwrap();
    let (_oc, observer) = connect(&server);
    let q = observer
        .create_consumer(&Destination::queue("ledger"))
        .unwrap();
    assert_eq!(next(&q).body_text(), Some("next"));
    assert_nothing(&q);
}

#[test]
fn without_failover_a_lost_connection_ends_as_before() {
    let server = start();
    let c = factory(&server).create_connection().unwrap();
    let events = listen(&c);
    server.shutdown();
    wait_until("the loss is reported", || c.is_closed());
    assert_eq!(heard(&events, "interrupted"), 0);
    assert_eq!(
        heard(&events, "ServerShutdown").max(heard(&events, "connection lost")),
        1
    );
}
