//! Hostile clients: input built to crash, freeze or exhaust the server.
//! Each test is an attack that once worked, and checks that the attacker
//! gets a clear ERROR while everyone else is served as before.

use herald_client::{AckMode, Connection, Destination, Message};
use std::io::Write;
use std::time::Duration;

use herald_protocol::frame::{Connect, Subscribe};
use herald_protocol::stomp::StompFrame;
use herald_protocol::{DestinationKind, ErrorCode, Frame};
use herald_server::auth::hash_password;
use herald_server::config::{RoleEntry, UserEntry};
use herald_server::Config;
use herald_tests::*;

/// Sends a SUBSCRIBE with `selector` on a raw connection (the client
/// library would refuse a bad selector before sending it) and returns
/// the code of the answer: `None` for a RECEIPT.
fn raw_subscribe(raw: &mut RawClient, id: u32, pattern: &str, selector: &str) -> Option<ErrorCode> {
    let mut f = Subscribe::new(id, DestinationKind::Topic, pattern);
    f.selector = selector.to_owned();
    raw.send(&Frame::Subscribe(f), id);
    loop {
        match raw.read_frame() {
            Some((Frame::Receipt, rid)) if rid == id => return None,
            Some((Frame::Error(e), rid)) if rid == id => {
                assert!(
                    !e.fatal,
                    "a refused subscription leaves the connection up: {e:?}"
                );
                return e.error_code();
            }
            Some(_) => {}
            None => panic!("the connection closed"),
        }
    }
}

/// The server still routes: a fresh connection's subscriber gets a
/// message published after the attack.
fn still_serving(server: &TestServer) {
    let (_c, s) = connect(server);
    let consumer = subscribe(&s, "canary");
    publish(&s, "canary", "alive");
    assert_eq!(next(&consumer).body_text(), Some("alive"));
}

#[test]
fn a_deeply_nested_selector_is_refused_not_a_crash() {
    let server = start();
    let deep = format!("{}a = 1{}", "(".repeat(1000), ")".repeat(1000));
    let mut raw = RawClient::connected(&server, 0);
    assert_eq!(
        raw_subscribe(&mut raw, 1, "t", &deep),
        Some(ErrorCode::InvalidSelector)
    );
    let nots = format!("{}a = 1", "NOT ".repeat(5000));
    assert_eq!(
        raw_subscribe(&mut raw, 2, "t", &nots),
        Some(ErrorCode::InvalidSelector)
    );
    // Over STOMP too.
    let mut stomp = StompClient::connected(&server, &[]);
    stomp.send(
        &StompFrame::new("SUBSCRIBE")
            .header("id", "1")
            .header("destination", "/topic/t")
            .header("selector", &deep),
    );
    stomp.expect_error_saying("levels deep");
    // A symbol that starts no token once sent the lexer into an endless
    // loop that grew until the machine ran out of memory.
    assert_eq!(
        raw_subscribe(&mut raw, 4, "t", "€ = 1"),
        Some(ErrorCode::InvalidSelector)
    );
    // A reasonable selector still works on the same connection.
    assert_eq!(raw_subscribe(&mut raw, 3, "t", "((a = 1))"), None);
    still_serving(&server);
}

#[test]
fn a_costly_like_pattern_does_not_stall_a_worker() {
    let mut config = test_config();
    config.workers = 1;
    let server = start_with(config);
    let (_c, s) = connect(&server);
    let pattern = format!("s LIKE '{}b'", "%a".repeat(2000));
    let picky = s
        .create_consumer_with_selector(&Destination::topic("big"), &pattern)
        .unwrap();
    let p = s.create_producer(&Destination::topic("big")).unwrap();
    let long = "a".repeat(300_000);
    for _ in 0..3 {
        p.send_with_receipt(Message::text("no").with_property("s", long.as_str()))
            .unwrap();
    }
    p.send_with_receipt(Message::text("yes").with_property("s", format!("{long}b")))
        .unwrap();
    assert_eq!(next(&picky).body_text(), Some("yes"));
    still_serving(&server);
}

#[test]
fn regular_expressions_are_bounded_in_size_and_per_connection() {
    let server = start();
    let mut raw = RawClient::connected(&server, 0);
    let huge = "s MATCHES '(?:\\p{L}|\\p{N}){200}'";
    assert_eq!(
        raw_subscribe(&mut raw, 1, "t", huge),
        Some(ErrorCode::InvalidSelector)
    );
    // Each of these compiles to a few hundred KB: the connection's budget
    // (8 MiB) takes some, then refuses the rest.
    let big = "s MATCHES '(?:\\p{L}|\\p{N}){8}'";
    let mut accepted = 0;
    let refused = loop {
        match raw_subscribe(&mut raw, 10 + accepted, "t", big) {
            None => accepted += 1,
            Some(code) => break code,
        }
        assert!(accepted < 100, "never refused");
    };
    assert_eq!(refused, ErrorCode::LimitExceeded);
    assert!(accepted >= 2, "accepted {accepted}");
    // Ending a subscription gives its room back.
    raw.send(
        &Frame::Unsubscribe(herald_protocol::frame::Unsubscribe::new(10)),
        0,
    );
    assert_eq!(raw_subscribe(&mut raw, 600, "t", big), None);
    still_serving(&server);
}

#[test]
fn patterns_of_many_wildcards_do_not_freeze_routing() {
    let server = start();
    let (_c, s) = connect(&server);
    let hashes = subscribe(&s, &format!("{}z", "#.".repeat(20)));
    let starred = subscribe(&s, &format!("{}z", "#.*.".repeat(30)));
    let forty = vec!["w"; 40].join(".");
    for topic in [forty.clone(), format!("{forty}.z")] {
        let p = s.create_producer(&Destination::topic(&topic)).unwrap();
        p.send_with_receipt(Message::text(topic.as_str())).unwrap();
    }
    let want = format!("{forty}.z");
    assert_eq!(next(&hashes).body_text(), Some(want.as_str()));
    assert_eq!(next(&starred).body_text(), Some(want.as_str()));
    assert_nothing(&hashes);
    still_serving(&server);
}

fn user(name: &str, roles: &[&str]) -> UserEntry {
    UserEntry {
        name: name.into(),
        password: hash_password(name).unwrap(),
        roles: roles.iter().map(|r| r.to_string()).collect(),
    }
}

/// Three users: `victim` reads and keeps `b.#`, `mallory` may only use
/// `a.#`, `eve` may consume and keep anything.
fn three_users() -> Config {
    let mut config = test_config();
    let role = |publish: &[&str], consume: &[&str], durable: &[&str]| RoleEntry {
        publish: publish.iter().map(|s| s.to_string()).collect(),
        consume: consume.iter().map(|s| s.to_string()).collect(),
        durable: durable.iter().map(|s| s.to_string()).collect(),
        ..RoleEntry::default()
    };
    let roles = &mut config.auth.roles;
    roles.insert("b".into(), role(&["b.#"], &["b.#"], &["b.#"]));
    roles.insert("a".into(), role(&["a.#"], &["a.#"], &[]));
    roles.insert("all".into(), role(&["#"], &["#"], &["#"]));
    config.auth.users = vec![
        user("victim", &["b"]),
        user("mallory", &["a"]),
        user("eve", &["all"]),
    ];
    config
}

fn login_as(server: &TestServer, user: &str, client_id: &str) -> herald_client::Result<Connection> {
    factory(server)
        .with_credentials(user, user)
        .with_client_id(client_id)
        .create_connection()
}

/// `user`, connected with the victim's client id, can neither delete the
/// victim's durable subscription `d` nor take it over with a subscription
/// to `pattern`; returns why the deletion was refused.
fn cannot_touch(server: &TestServer, user: &str, pattern: &str) -> herald_client::Error {
    let c = login_as(server, user, "victim-app").unwrap();
    let s = c.create_session(AckMode::Auto).unwrap();
    let e = s.unsubscribe("d").unwrap_err();
    assert_eq!(e.server_code(), Some(ErrorCode::NotAuthorized), "{e}");
    let taken = s
        .create_durable_subscriber(&Destination::topic(pattern), "d")
        .unwrap_err();
    assert_eq!(
        taken.server_code(),
        Some(ErrorCode::NotAuthorized),
        "{taken}"
    );
    drop(s);
    c.close().unwrap();
    e
}

#[test]
fn nobody_else_can_delete_or_take_over_a_durable_subscription() {
    let server = start_with(three_users());
    let victim = login_as(&server, "victim", "victim-app").unwrap();
    let s = victim.create_session(AckMode::Auto).unwrap();
    s.create_durable_subscriber(&Destination::topic("b.x"), "d")
        .unwrap()
        .close()
        .unwrap();
    publish(&s, "b.x", "kept for the victim");
    drop(s);
    victim.close().unwrap();

    // No durable right, no right on b.#: UNSUBSCRIBE_DURABLE is refused,
    // and so is replacing it with another pattern.
    cannot_touch(&server, "mallory", "a.x");
    // Every right on every topic, but not the owner.
    let e = cannot_touch(&server, "eve", "b.x");
    assert!(e.to_string().contains("another user"), "{e}");

    // The victim finds what was kept, and may delete it.
    let victim = login_as(&server, "victim", "victim-app").unwrap();
    let s = victim.create_session(AckMode::Auto).unwrap();
    let d = s
        .create_durable_subscriber(&Destination::topic("b.x"), "d")
        .unwrap();
    assert_eq!(next(&d).body_text(), Some("kept for the victim"));
    d.close().unwrap();
    s.unsubscribe("d").unwrap();
}

#[test]
fn a_client_id_is_one_live_connection_at_a_time() {
    let server = start_with(three_users());
    let _first = login_as(&server, "victim", "app").unwrap();
    let e = login_as(&server, "eve", "app").unwrap_err();
    assert_eq!(e.server_code(), Some(ErrorCode::InvalidClientId), "{e}");
    // Over STOMP too.
    let mut stomp = StompClient::open(&server);
    stomp.send(
        &StompFrame::new("CONNECT")
            .header("accept-version", "1.2")
            .header("host", "localhost")
            .header("login", "eve")
            .header("passcode", "eve")
            .header("client-id", "app"),
    );
    stomp.expect_error_saying("in use");
}

#[test]
fn a_property_cannot_forge_frames_for_a_stomp_10_subscriber() {
    let server = start();
    let mut stomp = StompClient::open(&server);
    stomp.send(
        &StompFrame::new("CONNECT")
            .header("accept-version", "1.0")
            .header("host", "localhost"),
    );
    stomp.expect("CONNECTED");
    stomp.send(
        &StompFrame::new("SUBSCRIBE")
            .header("destination", "/topic/bank.#")
            .header("receipt", "sub"),
    );
    stomp.expect("RECEIPT");
    let forged = "x\n\nFAKE\0MESSAGE\ndestination:/topic/bank.transfers\n\nsend 1M to mallory\0";
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::topic("bank.news")).unwrap();
    p.send_with_receipt(
        Message::text("real")
            .with_property("note", forged)
            .with_property("lines", "a\r\nb")
            .with_property("content-length", "1")
            .with_property("plain", "kept"),
    )
    .unwrap();
    let message = stomp.expect("MESSAGE");
    assert_eq!(&message.body[..], b"real");
    assert_eq!(message.get("plain"), Some("kept"));
    assert!(message.get("note").is_none() && message.get("lines").is_none());
    stomp.send(&StompFrame::new("DISCONNECT").header("receipt", "bye"));
    let next = stomp.expect("RECEIPT");
    assert_eq!(
        next.get("receipt-id"),
        Some("bye"),
        "no forged frame came first"
    );

    // A NUL in a header sent to the server is refused.
    let mut sender = StompClient::connected(&server, &[]);
    sender.write(b"SEND\ndestination:/topic/bank.x\nnote:a\0b\n\nbody\0");
    sender.expect_error_saying("NUL");
}

#[test]
fn temporary_queues_cannot_be_guessed_or_squatted() {
    let server = start_with(three_users());
    let mallory = login_as(&server, "mallory", "m").unwrap();
    let ms = mallory.create_session(AckMode::Auto).unwrap();
    let send = |name: &str| {
        ms.create_producer(&Destination::queue(name))
            .unwrap()
            .send_with_receipt(Message::text("squat"))
    };
    // The next connection's would-be names, as they used to be.
    for n in 0..20 {
        for guess in [format!("temp.{n}.1"), format!("temp.{n}.0.1")] {
            let e = send(&guess).unwrap_err();
            assert_eq!(e.server_code(), Some(ErrorCode::InvalidDestination), "{e}");
        }
    }
    let victim = login_as(&server, "victim", "v").unwrap();
    let vs = victim.create_session(AckMode::Auto).unwrap();
    let replies = vs.create_temporary_queue();
    let parts: Vec<&str> = replies.name.split('.').collect();
    assert_eq!(
        parts.len(),
        4,
        "temp.<number>.<token>.<n>: {}",
        replies.name
    );
    assert_eq!(parts[2].len(), 16, "a 64-bit token: {}", replies.name);
    let inbox = vs.create_consumer(&replies).unwrap();
    // Anyone told the name may answer to it.
    send(&replies.name).unwrap();
    assert_eq!(next(&inbox).body_text(), Some("squat"));
    // Once its connection ends, it is gone, and sends are refused.
    drop((inbox, vs));
    victim.close().unwrap();
    wait_until("the temporary queue is deleted", || {
        send(&replies.name).is_err_and(|e| e.server_code() == Some(ErrorCode::InvalidDestination))
    });
}

#[test]
fn once_users_exist_anonymous_clients_may_do_nothing_by_default() {
    let server = start_with(three_users());
    let (_c, s) = connect(&server);
    let e = s.create_consumer(&Destination::topic("#")).unwrap_err();
    assert_eq!(e.server_code(), Some(ErrorCode::NotAuthorized), "{e}");
    let e = s
        .create_producer(&Destination::topic("b.x"))
        .unwrap()
        .send_with_receipt(Message::text("anonymous"))
        .unwrap_err();
    assert_eq!(e.server_code(), Some(ErrorCode::NotAuthorized), "{e}");
    let mut stomp = StompClient::connected(&server, &[]);
    stomp.send(
        &StompFrame::new("SUBSCRIBE")
            .header("id", "1")
            .header("destination", "/topic/b.#"),
    );
    stomp.expect_error();
    // A user still has their rights.
    let victim = login_as(&server, "victim", "v").unwrap();
    let vs = victim.create_session(AckMode::Auto).unwrap();
    let inbox = vs.create_consumer(&Destination::topic("b.#")).unwrap();
    publish(&vs, "b.x", "mine");
    assert_eq!(next(&inbox).body_text(), Some("mine"));
}

/// A CONNECT frame's bytes.
fn connect_bytes() -> Vec<u8> {
    let mut b = bytes::BytesMut::new();
    Frame::Connect(Connect::default())
        .encode(1, &mut b)
        .unwrap();
    b.to_vec()
}

#[test]
fn before_connect_only_a_small_frame_is_taken() {
    let server = start();
    let mut raw = RawClient::open(&server);
    // A CONNECT that says a megabyte follows: refused on its header alone.
    let mut header = connect_bytes()[..12].to_vec();
    header[8..12].copy_from_slice(&(1u32 << 20).to_be_bytes());
    raw.write(&header);
    let e = raw.expect_fatal(ErrorCode::FrameTooLarge);
    assert!(
        e.message.contains("exceeds max_connect_frame_size (8192)"),
        "{e:?}"
    );
    // Over STOMP, a CONNECT frame past the limit too.
    let mut stomp = StompClient::open(&server);
    let padding = "x".repeat(10_000);
    stomp.write(format!("CONNECT\naccept-version:1.2\npad:{padding}\n\n\0").as_bytes());
    stomp.expect_error_saying("exceeds max_connect_frame_size (8192)");
    // After CONNECT, frames up to max_frame_size are fine.
    let (_c, s) = connect(&server);
    let consumer = subscribe(&s, "big");
    publish(&s, "big", &"y".repeat(500_000));
    assert_eq!(next(&consumer).body_text().map(str::len), Some(500_000));
}

/// Writes `bytes` one at a time, `gap` apart, until the server closes the
/// connection; returns how many were left unsent.
fn trickle(mut stream: std::net::TcpStream, bytes: Vec<u8>, gap: Duration) -> usize {
    for (i, b) in bytes.iter().enumerate() {
        if stream.write_all(&[*b]).is_err() {
            return bytes.len() - i;
        }
        std::thread::sleep(gap);
    }
    0
}

#[test]
fn the_connect_deadline_counts_from_the_accept_not_the_last_byte() {
    let mut config = test_config();
    config.connect_timeout_ms = 1000;
    let server = start_with(config);
    let gap = Duration::from_millis(100);
    // Native: a CONNECT of 60 bytes at 10 a second would take 6 s.
    let mut raw = RawClient::open(&server);
    let mut slow = connect_bytes();
    slow.resize(slow.len().max(60), 0);
    let len = (slow.len() - 12) as u32;
    slow[8..12].copy_from_slice(&len.to_be_bytes());
    let writer = raw.stream.try_clone().unwrap();
    let sender = std::thread::spawn(move || trickle(writer, slow, gap));
    let (e, _) = raw.expect_error();
    assert_eq!(e.error_code(), Some(ErrorCode::HeartbeatTimeout), "{e:?}");
    assert!(e.message.contains("no CONNECT"), "{e:?}");
    assert!(
        sender.join().unwrap() > 0,
        "closed before the CONNECT was whole"
    );
    // STOMP: a header line at 10 bytes a second.
    let stomp = std::net::TcpStream::connect(server.stomp_addr().unwrap()).unwrap();
    let line =
        b"CONNECT\naccept-version:1.2\nhost:localhost\nlogin:a-very-slow-client\n\n\0".to_vec();
    let left = trickle(stomp, line, gap);
    assert!(
        left > 0,
        "the STOMP connection was closed before its CONNECT was whole"
    );
    still_serving(&server);
}

#[test]
fn stomp_ids_names_and_transactions_are_bounded() {
    let server = start();
    let long = "n".repeat(1000);
    for (command, header) in [("BEGIN", "transaction"), ("SUBSCRIBE", "id")] {
        let mut stomp = StompClient::connected(&server, &[]);
        stomp.send(
            &StompFrame::new(command)
                .header(header, &long)
                .header("destination", "/topic/t"),
        );
        stomp.expect_error_saying("max_id_length");
    }
    let mut stomp = StompClient::connected(&server, &[]);
    stomp.send(
        &StompFrame::new("SEND")
            .header("destination", "/topic/t")
            .header("receipt", &long),
    );
    stomp.expect_error();
    // Open transactions count against a limit of their own.
    let mut stomp = StompClient::connected(&server, &[]);
    let most = test_config().max_transactions_per_connection;
    for n in 0..most {
        stomp.send(
            &StompFrame::new("BEGIN")
                .header("transaction", format!("tx{n}"))
                .header("receipt", format!("r{n}")),
        );
        stomp.expect("RECEIPT");
    }
    stomp.send(&StompFrame::new("BEGIN").header("transaction", "one-more"));
    stomp.expect_error_saying("max_transactions_per_connection");
    still_serving(&server);
}

#[test]
fn heart_beats_are_bounded_both_ways() {
    let mut config = test_config();
    config.stomp.idle_timeout_ms = 300;
    let server = start_with(config);
    // A STOMP client that offers no heart-beat is closed when idle.
    let mut quiet = StompClient::connected(&server, &[("heart-beat", "0,0")]);
    quiet.expect_error_saying("nothing received");
    // A native client asking for a 49-day interval gets the maximum.
    let mut raw = RawClient::open(&server);
    raw.send(
        &Frame::Connect(Connect {
            heartbeat_ms: 49 * 24 * 3600 * 1000,
            ..Connect::default()
        }),
        1,
    );
    match raw.read_frame() {
        Some((Frame::Connected(c), _)) => {
            assert_eq!(c.heartbeat_ms, test_config().max_heartbeat_ms)
        }
        other => panic!("{other:?}"),
    }
    // A client id longer than max_id_length is refused.
    let mut raw = RawClient::open(&server);
    raw.send(
        &Frame::Connect(Connect {
            client_id: "c".repeat(1000),
            ..Connect::default()
        }),
        1,
    );
    raw.expect_fatal(ErrorCode::LimitExceeded);
}

/// Threads of this process that tokio's blocking pool started (named
/// `tokio-runtime-worker`, cut to 15 characters by the kernel).
fn blocking_pool_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.unwrap().path().join("comm")).ok())
        .filter(|name| name.starts_with("tokio-runtime"))
        .count()
}

#[test]
fn password_guessing_is_throttled_and_costs_no_threads() {
    let mut config = three_users();
    config.auth.failed_login_delay_ms = 10;
    config.auth.max_failed_logins = 5;
    config.auth.roles.insert(
        "ops".into(),
        RoleEntry {
            admin: true,
            ..RoleEntry::default()
        },
    );
    config.auth.users.push(user("ops", &["ops"]));
    let server = start_with(config);
    // The management interface checks passwords on the one auth thread,
    // not one blocking thread (and 19 MiB) per request. Other tests run
    // servers in this process at the same time, so the process's thread
    // count says nothing; tokio's blocking pool, which the checks used to
    // run on, would show as threads of that name.
    let guesses: Vec<_> = (0..30)
        .map(|i| {
            let admin = server.admin_addr().unwrap();
            std::thread::spawn(move || {
                let url = format!("http://{admin}/api/server");
                use base64::Engine;
                let token =
                    base64::engine::general_purpose::STANDARD.encode(format!("ops:wrong{i}"));
                match ureq::get(&url)
                    .set("Authorization", &format!("Basic {token}"))
                    .call()
                {
                    Err(ureq::Error::Status(code, _)) => code,
                    other => panic!("{other:?}"),
                }
            })
        })
        .collect();
    let codes: Vec<u16> = guesses.into_iter().map(|g| g.join().unwrap()).collect();
    assert!(codes.iter().all(|c| *c == 401), "{codes:?}");
    assert_eq!(
        blocking_pool_threads(),
        0,
        "no password check ran on tokio's blocking pool"
    );
    // This user failed too often from this address: even the right
    // password is refused unchecked, over the native protocol too, until
    // the window passes, and the refusal says for how long.
    let e = login_as(&server, "ops", "o").unwrap_err();
    assert_eq!(
        e.server_code(),
        Some(ErrorCode::AuthenticationFailed),
        "{e}"
    );
    let said = e.to_string();
    assert!(
        said.contains("too many failed logins as 'ops' from 127.0.0.1: locked out for")
            && said.contains("auth.max_failed_logins"),
        "{said}"
    );
    // Another user from the same address is not locked out; nor is a
    // connection that gives no name a guess that would lock anyone out.
    login_as(&server, "victim", "v").unwrap();
    for _ in 0..6 {
        let _ = factory(&server).create_connection();
    }
    login_as(&server, "victim", "v2").unwrap();
}

fn health(server: &TestServer) -> serde_json::Value {
    call(server, "GET", "/api/health", None, None).json()
}

#[test]
fn queued_messages_are_bounded_by_a_global_memory_limit() {
    let mut config = test_config();
    config.queues.max_memory_bytes = 4 << 20;
    config.queues.full_policy = herald_server::config::FullPolicy::Fail;
    let server = start_with(config);
    let (_c, s) = connect(&server);
    let megabyte = "m".repeat(1000 * 1000);
    let producers: Vec<_> = ["q1", "q2", "q3"]
        .iter()
        .map(|q| s.create_producer(&Destination::queue(*q)).unwrap())
        .collect();
    let mut sent = 0;
    let refusal = loop {
        match producers[sent % 3].send_with_receipt(Message::text(megabyte.as_str())) {
            Ok(()) => sent += 1,
            Err(e) => break e,
        }
        assert!(sent < 100, "never refused");
        // The queues are weighed ten times a second.
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        refusal.server_code(),
        Some(ErrorCode::QueueFull),
        "{refusal}"
    );
    assert!(
        refusal.to_string().contains("max_memory_bytes"),
        "{refusal}"
    );
    // Refused, not held: the reason says which.
    assert!(
        refusal
            .to_string()
            .contains("are refused until consumers drain it"),
        "{refusal}"
    );
    assert!((4..40).contains(&sent), "{sent} sent");
    let h = health(&server);
    assert_eq!(h["reasons"][0]["reason"], "memory_limit", "{h}");
    assert_eq!(h["memory"]["publishers_blocked"], true, "{h}");
    let metrics = call(&server, "GET", "/metrics", None, None).body;
    assert!(metrics.contains("herald_memory_blocked 1"), "{metrics}");
    // Consumers drain the queues, and publishing goes on by itself.
    for q in ["q1", "q2", "q3"] {
        let consumer = s.create_consumer(&Destination::queue(q)).unwrap();
        while consumer
            .receive(Duration::from_millis(200))
            .unwrap()
            .is_some()
        {}
    }
    wait_until("the limit is left", || health(&server)["status"] == "ok");
    producers[0]
        .send_with_receipt(Message::text("after"))
        .unwrap();
}

#[test]
fn over_the_memory_limit_a_blocked_publisher_waits_then_goes_on() {
    let mut config = test_config();
    config.queues.max_memory_bytes = 2 << 20;
    config.queues.full_policy = herald_server::config::FullPolicy::Block;
    let server = start_with(config);
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("big")).unwrap();
    let megabyte = "m".repeat(1000 * 1000);
    for _ in 0..3 {
        p.send_with_receipt(Message::text(megabyte.as_str()))
            .unwrap();
    }
    wait_until("the limit is reached", || {
        health(&server)["reasons"][0]["reason"] == "memory_limit"
    });
    let sender = std::thread::spawn(move || {
        p.send_with_receipt(Message::text("held")).unwrap();
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !sender.is_finished(),
        "the send waits while the queues are full"
    );
    let (_c2, s2) = connect(&server);
    let consumer = s2.create_consumer(&Destination::queue("big")).unwrap();
    for _ in 0..3 {
        next(&consumer);
    }
    sender.join().unwrap();
    assert_eq!(next(&consumer).body_text(), Some("held"));
}

/// A request as a web page of another site could make it: no X-Herald
/// header, with these headers.
fn from_a_browser(server: &TestServer, method: &str, path: &str, headers: &[(&str, &str)]) -> u16 {
    let url = format!("http://{}{path}", server.admin_addr().unwrap());
    let mut request = ureq::request(method, &url).timeout(Duration::from_secs(10));
    for (name, value) in headers {
        request = request.set(name, value);
    }
    let result = match method {
        "GET" => request.call(),
        _ => request.send_string("confirm=1"),
    };
    match result {
        Ok(r) => r.status(),
        Err(ureq::Error::Status(code, _)) => code,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn the_management_interface_refuses_cross_site_requests() {
    let server = start();
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("precious")).unwrap();
    for _ in 0..5 {
        p.send_with_receipt(Message::text("keep me")).unwrap();
    }
    let form = ("Content-Type", "application/x-www-form-urlencoded");
    for (method, path) in [
        ("POST", "/api/queues/precious/purge"),
        ("POST", "/api/reload"),
        ("POST", "/api/queues/DLQ.precious/replay"),
        ("DELETE", "/api/topics/x"),
    ] {
        // A plain form post, from another site or from none.
        let other_site = [form, ("Origin", "https://evil.example")];
        assert_eq!(
            from_a_browser(&server, method, path, &other_site),
            403,
            "{path}"
        );
        assert_eq!(
            from_a_browser(&server, method, path, &[form]),
            403,
            "{path}"
        );
    }
    // DNS rebinding: a page of evil.example whose name now points here.
    let rebound = [("Host", "evil.example:8161")];
    assert_eq!(
        from_a_browser(&server, "GET", "/api/connections", &rebound),
        403
    );
    // Nothing was purged; the console's own way still works.
    let a = call(&server, "POST", "/api/queues/precious/purge", None, None);
    assert_eq!(a.json()["purged"], 5, "{}", a.body);
    let admin = server.admin_addr().unwrap();
    let own = [
        ("Origin", &*format!("http://{admin}")),
        ("X-Herald", "console"),
    ];
    assert_eq!(
        from_a_browser(&server, "POST", "/api/queues/precious/purge", &own),
        200
    );
}

#[test]
fn a_page_of_another_site_cannot_open_a_stomp_websocket() {
    let server = start();
    let addr = server.stomp_ws_addr().unwrap();
    let upgrade = |origin: &str| {
        let mut ws = std::net::TcpStream::connect(addr).unwrap();
        ws.set_read_timeout(Some(PATIENCE)).unwrap();
        write!(
            ws,
            "GET /stomp HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: v12.stomp\r\n\
             Origin: {origin}\r\n\r\n"
        )
        .unwrap();
        let mut answer = [0u8; 64];
        let n = std::io::Read::read(&mut ws, &mut answer).unwrap();
        String::from_utf8_lossy(&answer[..n]).into_owned()
    };
    assert!(upgrade("https://evil.example").starts_with("HTTP/1.1 400"));
    assert!(upgrade("http://localhost:8161").starts_with("HTTP/1.1 101"));
}
