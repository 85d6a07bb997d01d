//! Authentication and authorization: users with Argon2 hashes, roles with
//! destination patterns, refused logins (delayed) and refused operations
//! (the connection stays usable), the same users over STOMP, and the
//! per-connection limit on requests waiting for the journal.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use herald_client::{AckMode, Connection, Destination, ErrorCode, Message};
use herald_server::auth::hash_password;
use herald_server::config::{RoleEntry, UserEntry};
use herald_server::Config;
use herald_tests::*;

fn user(name: &str, password: &str, roles: &[&str]) -> UserEntry {
    UserEntry {
        name: name.into(),
        password: hash_password(password).unwrap(),
        roles: roles.iter().map(|r| r.to_string()).collect(),
    }
}

fn patterns(p: &[&str]) -> Vec<String> {
    p.iter().map(|s| s.to_string()).collect()
}

fn secured(required: bool, delay_ms: u32) -> Config {
    let mut config = test_config();
    config.auth.required = required;
    config.auth.failed_login_delay_ms = delay_ms;
    config.auth.roles.insert(
        "orders".into(),
        RoleEntry {
            publish: patterns(&["queue:orders.#", "topic:events.#"]),
            consume: patterns(&["queue:orders.#", "topic:events.eu.*"]),
            browse: patterns(&["queue:orders.#"]),
            ..RoleEntry::default()
        },
    );
    config.auth.roles.insert(
        "archivist".into(),
        RoleEntry {
            consume: patterns(&["topic:events.#"]),
            durable: patterns(&["topic:events.#"]),
            ..RoleEntry::default()
        },
    );
    // Anonymous connections (the tests' observers) may publish and
    // consume anything, but keep nothing.
    config.auth.roles.insert(
        "anyone".into(),
        RoleEntry {
            publish: patterns(&["#"]),
            consume: patterns(&["#"]),
            ..RoleEntry::default()
        },
    );
    config.auth.anonymous_role = "anyone".into();
    config.auth.users = vec![
        user("alice", "wonderland", &["orders"]),
        user("arch", "ive", &["archivist"]),
    ];
    config
}

fn login(server: &TestServer, user: &str, password: &str) -> herald_client::Result<Connection> {
    factory(server)
        .with_credentials(user, password)
        .create_connection()
}

fn code(e: &herald_client::Error) -> Option<ErrorCode> {
    e.server_code()
}

#[test]
fn wrong_passwords_and_unknown_users_are_refused_after_the_delay() {
    let server = start_with(secured(false, 300));
    for (user, password) in [("alice", "wrong"), ("mallory", "wonderland")] {
        let started = Instant::now();
        let e = login(&server, user, password).unwrap_err();
        assert_eq!(code(&e), Some(ErrorCode::AuthenticationFailed), "{e}");
        assert!(
            e.to_string().contains("invalid user name or password"),
            "{e}"
        );
        assert!(started.elapsed() >= Duration::from_millis(300), "delayed");
    }
    login(&server, "alice", "wonderland").unwrap();
}

#[test]
fn a_waiting_failed_login_holds_up_nobody_else() {
    let server = start_with(secured(false, 3000));
    let done = Arc::new(AtomicBool::new(false));
    let guesser = {
        let (factory, done) = (factory(&server), done.clone());
        std::thread::spawn(move || {
            let r = factory
                .with_credentials("alice", "guess")
                .create_connection();
            done.store(true, Ordering::SeqCst);
            r.is_err()
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    // Same server, same workers: a good login and traffic go through
    // while the failed one is still held back.
    let (c, s) = {
        let c = login(&server, "alice", "wonderland").unwrap();
        let s = c.create_session(AckMode::Auto).unwrap();
        (c, s)
    };
    let q = s
        .create_consumer(&Destination::queue("orders.new"))
        .unwrap();
    s.create_producer(&Destination::queue("orders.new"))
        .unwrap()
        .send_with_receipt(Message::text("hi"))
        .unwrap();
    assert_eq!(next(&q).body_text(), Some("hi"));
    assert!(
        !done.load(Ordering::SeqCst),
        "the failed login is still waiting"
    );
    assert!(guesser.join().unwrap(), "and is refused in the end");
    drop(c);
}

#[test]
fn when_required_anonymous_connections_are_refused() {
    let server = start_with(secured(true, 10));
    let e = factory(&server).create_connection().unwrap_err();
    assert_eq!(code(&e), Some(ErrorCode::AuthenticationFailed), "{e}");
    assert!(e.to_string().contains("requires a user name"), "{e}");
    login(&server, "alice", "wonderland").unwrap();
}

#[test]
fn anonymous_connections_have_the_anonymous_role_unless_required() {
    let server = start_with(secured(false, 10));
    let (_c, s) = connect(&server);
    let sub = subscribe(&s, "#");
    publish(&s, "anything.at.all", "ok");
    assert_eq!(next(&sub).body_text(), Some("ok"));
    let e = s
        .create_durable_subscriber(&Destination::topic("events.#"), "mine")
        .unwrap_err();
    assert_eq!(code(&e), Some(ErrorCode::NotAuthorized), "{e}");
}

#[test]
fn refused_operations_name_the_permission_and_the_connection_goes_on() {
    let server = start_with(secured(false, 10));
    let c = login(&server, "alice", "wonderland").unwrap();
    let s = c.create_session(AckMode::Auto).unwrap();

    // Publish: allowed on queue:orders.#, refused on another queue.
    let e = s
        .create_producer(&Destination::queue("payroll"))
        .unwrap()
        .send_with_receipt(Message::text("raise"))
        .unwrap_err();
    assert_eq!(code(&e), Some(ErrorCode::NotAuthorized), "{e}");
    assert!(
        e.to_string().contains("'publish'") && e.to_string().contains("payroll"),
        "{e}"
    );

    // Subscribe: a pattern wider than the grant is refused, a narrower one
    // is allowed.
    let e = s
        .create_consumer(&Destination::topic("events.#"))
        .unwrap_err();
    assert_eq!(code(&e), Some(ErrorCode::NotAuthorized), "{e}");
    assert!(e.to_string().contains("'consume'"), "{e}");
    let eu = s
        .create_consumer(&Destination::topic("events.eu.*"))
        .unwrap();

    // Browse: allowed for orders only.
    let e = s
        .create_browser(&Destination::queue("payroll"), "")
        .unwrap()
        .messages()
        .unwrap_err();
    assert_eq!(code(&e), Some(ErrorCode::NotAuthorized), "{e}");

    // Durable subscriptions need the durable permission.
    let c2 = factory(&server)
        .with_credentials("alice", "wonderland")
        .with_client_id("alice-app")
        .create_connection()
        .unwrap();
    let s2 = c2.create_session(AckMode::Auto).unwrap();
    let e = s2
        .create_durable_subscriber(&Destination::topic("events.eu.*"), "keep")
        .unwrap_err();
    assert!(e.to_string().contains("'durable'"), "{e}");

    // Still usable after all that.
    s.create_producer(&Destination::topic("events.eu.fr"))
        .unwrap()
        .send_with_receipt(Message::text("bonjour"))
        .unwrap();
    assert_eq!(next(&eu).body_text(), Some("bonjour"));
    let browser = s
        .create_browser(&Destination::queue("orders.new"), "")
        .unwrap();
    assert!(browser.messages().unwrap().is_empty());
}

#[test]
fn a_user_with_the_durable_permission_keeps_a_subscription() {
    let server = start_with(secured(false, 10));
    let c = factory(&server)
        .with_credentials("arch", "ive")
        .with_client_id("archive")
        .create_connection()
        .unwrap();
    let s = c.create_session(AckMode::Auto).unwrap();
    let d = s
        .create_durable_subscriber(&Destination::topic("events.#"), "all")
        .unwrap();
    let (_pc, ps) = connect(&server);
    publish(&ps, "events.us", "kept");
    assert_eq!(next(&d).body_text(), Some("kept"));
}

#[test]
fn a_forbidden_send_rolls_its_transaction_back() {
    let server = start_with(secured(false, 10));
    let c = login(&server, "alice", "wonderland").unwrap();
    let errors = Arc::new(Mutex::new(Vec::new()));
    let sink = errors.clone();
    c.set_exception_listener(move |e| sink.lock().unwrap().push(e.to_string()));
    let s = c.create_session(AckMode::Transacted).unwrap();
    s.create_producer(&Destination::queue("orders.a"))
        .unwrap()
        .send(Message::text("allowed"))
        .unwrap();
    s.create_producer(&Destination::queue("payroll"))
        .unwrap()
        .send(Message::text("forbidden"))
        .unwrap();
    let e = s.commit().unwrap_err();
    assert_eq!(code(&e), Some(ErrorCode::TransactionRolledBack), "{e}");
    assert!(e.to_string().contains("'publish'"), "{e}");
    wait_until("the refused send is reported", || {
        !errors.lock().unwrap().is_empty()
    });
    let (_oc, observer) = connect(&server);
    assert_nothing(
        &observer
            .create_consumer(&Destination::queue("orders.a"))
            .unwrap(),
    );
}

/// A STOMP 1.2 CONNECT with these credentials.
fn stomp_connect(login: &str, passcode: &str) -> herald_protocol::stomp::StompFrame {
    herald_protocol::stomp::StompFrame::new("CONNECT")
        .header("accept-version", "1.2")
        .header("login", login)
        .header("passcode", passcode)
}

#[test]
fn credentials_given_to_a_server_without_users_are_said_to_be_unchecked() {
    let server = start();
    let c = factory(&server)
        .with_credentials("alice", "anything")
        .create_connection()
        .unwrap();
    let notice = c.server_notice().expect("a notice");
    assert!(
        notice.contains("authentication is off") && notice.contains("'alice'"),
        "{notice}"
    );
    let (anonymous, _) = connect(&server);
    assert_eq!(
        anonymous.server_notice(),
        None,
        "nothing to say without credentials"
    );
    let mut stomp = StompClient::open(&server);
    stomp.send(&stomp_connect("alice", "x"));
    let connected = stomp.expect("CONNECTED");
    assert!(
        connected
            .get("notice")
            .is_some_and(|n| n.contains("authentication is off")),
        "{connected:?}"
    );
}

#[test]
fn stomp_logins_use_the_same_users() {
    let server = start_with(secured(true, 10));
    let mut bad = StompClient::open(&server);
    bad.send(&stomp_connect("alice", "nope"));
    let e = bad.expect_error();
    assert!(
        e.get("message")
            .unwrap_or_default()
            .contains("invalid user name"),
        "{e:?}"
    );
    let mut good =
        StompClient::connected(&server, &[("login", "alice"), ("passcode", "wonderland")]);
    good.send(
        &herald_protocol::stomp::StompFrame::new("SEND")
            .header("destination", "/queue/payroll")
            .header("receipt", "r1"),
    );
    let e = good.expect_error();
    assert!(
        e.get("message").unwrap_or_default().contains("'publish'"),
        "{e:?}"
    );
}

#[test]
fn requests_waiting_for_the_journal_are_limited_per_connection() {
    let mut config = test_config();
    config.max_pending_receipts = 1;
    config.journal.fsync = herald_server::store::FsyncPolicy::Always;
    let server = start_with(config);
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("q")).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    for i in 0..200 {
        let tx = tx.clone();
        p.send_async(Message::text(i.to_string()).persistent(), move |r| {
            tx.send(r.err().and_then(|e| e.server_code())).unwrap()
        })
        .unwrap();
    }
    let outcomes: Vec<Option<ErrorCode>> = (0..200).map(|_| rx.recv().unwrap()).collect();
    let refused = outcomes
        .iter()
        .filter(|c| **c == Some(ErrorCode::LimitExceeded))
        .count();
    assert!(refused > 0, "some sends found the limit reached");
    assert!(outcomes.iter().any(Option::is_none), "some went through");
    assert_eq!(
        refused + outcomes.iter().filter(|c| c.is_none()).count(),
        200
    );
    // The connection is still usable.
    p.send(Message::text("after").persistent()).unwrap();
}

#[test]
fn a_bad_auth_config_is_refused_at_start() {
    let mut config = secured(false, 10);
    config.auth.users[0].password = "wonderland".into();
    let e = herald_server::Server::start(config).err().expect("refused");
    assert!(e.to_string().contains("auth.users.password"), "{e}");
}
