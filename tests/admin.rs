//! The management interface over real HTTP: every documented route, the
//! bad and the unauthorized requests, the metrics after known traffic,
//! and config reload.

use std::time::Duration;

use herald_client::{AckMode, Destination, Message};
use herald_server::auth::hash_password;
use herald_server::Config;
use herald_tests::*;
use serde_json::json;

fn get(server: &TestServer, path: &str) -> Answer {
    call(server, "GET", path, None, None)
}

#[test]
fn every_documented_route_answers_and_unknown_ones_do_not() {
    let server = start();
    let doc = get(&server, "/openapi.json").json();
    assert_eq!(doc["openapi"], "3.0.3");
    let paths = doc["paths"].as_object().unwrap();
    assert!(paths.len() >= 17, "{paths:?}");
    for (path, operations) in paths {
        for method in operations.as_object().unwrap().keys() {
            let concrete = path
                .replace("{name}", "nothing")
                .replace("{client_id}", "nobody")
                .replace("{id}", "999999");
            let body = (method == "post").then(|| json!({}));
            let a = call(&server, &method.to_uppercase(), &concrete, body, None);
            assert!(
                !(a.status == 404 && a.body.contains("no such route")) && a.status != 405,
                "{method} {path}: {} {}",
                a.status,
                a.body
            );
        }
    }
    let a = get(&server, "/api/nothing-here");
    assert_eq!(a.status, 404);
    assert_eq!(a.error(), "no such route");
    // The console and its script.
    assert!(get(&server, "/").body.contains("Herald console"));
    assert!(get(&server, "/console.js").body.contains("/api/queues"));
}

#[test]
fn history_over_five_minutes_or_an_hour_and_per_destination() {
    let server = start();
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("hq")).unwrap();
    p.send_with_receipt(Message::text("x")).unwrap();
    publish(&s, "ht", "y");
    wait_until("a sample with the queue and the topic", || {
        let h = get(&server, "/api/history?queue=hq&topic=ht").json();
        let last = h.as_array().unwrap().last().cloned().unwrap_or_default();
        last["queue"]["depth"] == 1 && last["topic"]["rate"].is_number()
    });
    let h = get(&server, "/api/history?queue=hq&topic=ht").json();
    let last = h.as_array().unwrap().last().unwrap().clone();
    assert!(
        last["in_rate"].is_number() && last["topic"]["rate"].is_number(),
        "{last}"
    );
    let plain = get(&server, "/api/history").json();
    assert!(plain
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s.get("queue").is_none()));
    let hour = get(&server, "/api/history?window=1h").json();
    assert!(
        !hour.as_array().unwrap().is_empty(),
        "a sample at the first tick"
    );
    // The hour's per-destination series, a point every ten seconds.
    let deadline = std::time::Instant::now() + 3 * PATIENCE;
    loop {
        let h = get(&server, "/api/history?window=1h&queue=hq&topic=ht").json();
        let last = h.as_array().unwrap().last().cloned().unwrap_or_default();
        if last["queue"]["depth"] == 1 && last["topic"]["rate"].is_number() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{h}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let a = get(&server, "/api/history?window=2d");
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(a.error().contains("5m or 1h"), "{}", a.body);
}

#[test]
fn server_health_and_readiness() {
    let server = start();
    let s = get(&server, "/api/server").json();
    assert_eq!(s["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(s["listeners"]["native"], server.local_addr().to_string());
    assert_eq!(s["health"], "ok");
    assert_eq!(get(&server, "/api/health").json()["status"], "ok");
    assert_eq!(get(&server, "/api/ready").json()["ready"], true);
}

/// The row of `/api/queues` for queue `name`.
fn queue_row(server: &TestServer, name: &str) -> serde_json::Value {
    let queues = get(server, "/api/queues").json();
    let row = queues
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == name);
    row.unwrap_or_else(|| panic!("no {name} in {queues}"))
        .clone()
}

#[test]
fn queues_are_listed_purged_and_replayed() {
    let mut config = test_config();
    config.queues.max_deliveries = 1;
    let server = start_with(config);
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("work")).unwrap();
    for i in 0..3 {
        p.send_with_receipt(Message::text(format!("job {i}")))
            .unwrap();
    }
    let work = queue_row(&server, "work");
    assert_eq!(
        (work["depth"].as_u64(), work["enqueued"].as_u64()),
        (Some(3), Some(3))
    );
    let a = call(&server, "POST", "/api/queues/work/purge", None, None);
    assert_eq!((a.status, a.json()["purged"].as_u64()), (200, Some(3)));
    let a = call(&server, "POST", "/api/queues/nothing/purge", None, None);
    assert_eq!(a.status, 404);
    assert!(a.error().contains("nothing"));

    // A message that fails once goes to DLQ.work; replay brings it back.
    p.send_with_receipt(Message::text("fragile").with_property("n", 7))
        .unwrap();
    let c = factory(&server).create_connection().unwrap();
    let cs = c.create_session(AckMode::Client).unwrap();
    let consumer = cs.create_consumer(&Destination::queue("work")).unwrap();
    next(&consumer);
    cs.recover().unwrap();
    // Closed, not dropped: a replayed message must not reach it.
    consumer.close().unwrap();
    wait_until("the message is dead-lettered", || {
        server
            .stats()
            .queues
            .iter()
            .any(|q| q.0 == "DLQ.work" && q.1 == 1)
    });
    let a = call(&server, "POST", "/api/queues/DLQ.work/replay", None, None);
    assert_eq!(a.json()["moved"].as_u64(), Some(1), "{}", a.body);
    let again = s.create_consumer(&Destination::queue("work")).unwrap();
    let m = next(&again);
    assert_eq!(m.body_text(), Some("fragile"));
    assert_eq!(m.property("n").and_then(|v| v.as_i64()), Some(7));
    assert!(m.property("HeraldDeadLetterReason").is_none());
}

#[test]
fn depth_leaves_out_expired_messages_and_only_dead_letter_queues_replay() {
    let server = start();
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("timed")).unwrap();
    p.send_with_receipt(Message::text("stale").with_ttl(Duration::from_millis(1)))
        .unwrap();
    p.send_with_receipt(Message::text("later").with_delivery_delay(Duration::from_secs(60)))
        .unwrap();
    p.send_with_receipt(Message::text("now")).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let timed = queue_row(&server, "timed");
    assert_eq!(
        (timed["depth"].as_u64(), timed["scheduled"].as_u64()),
        (Some(1), Some(1))
    );
    let a = call(&server, "POST", "/api/queues/timed/replay", None, None);
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(a.error().contains("not a dead-letter queue"), "{}", a.body);
    // A consumer's dispatch sets the expired one aside: the expiry queue
    // says when it expired, as a time a person reads.
    let consumer = s.create_consumer(&Destination::queue("timed")).unwrap();
    assert_eq!(next(&consumer).body_text(), Some("now"));
    let expired = s
        .create_consumer(&Destination::queue("ExpiryQueue"))
        .unwrap();
    let reason = dead_letter_reason(&next(&expired));
    let time = reason.strip_prefix("expired at ").unwrap_or_default();
    assert!(
        time.len() == 24 && time.ends_with('Z') && time.as_bytes()[10] == b'T',
        "{reason}"
    );
}

#[test]
fn publishing_over_http_and_bad_requests_that_change_nothing() {
    let server = start();
    let (_c, s) = connect(&server);
    let sub = subscribe(&s, "news.#");
    let body = json!({"destination": "topic://news.eu", "body": "hello", "properties": {"n": 3, "hot": true, "tag": "x"}});
    let a = call(&server, "POST", "/api/publish", Some(body), None);
    assert_eq!(
        (a.status, a.json()["routed"].as_u64()),
        (200, Some(1)),
        "{}",
        a.body
    );
    let m = next(&sub);
    assert_eq!(m.body_text(), Some("hello"));
    assert_eq!(m.property("n").and_then(|v| v.as_i64()), Some(3));
    let a = call(
        &server,
        "POST",
        "/api/publish",
        Some(json!({"destination": "queue://kept", "body": "on disk", "persistent": true})),
        None,
    );
    assert_eq!(a.json()["persistent"], true);

    for bad in [
        json!({"body": "no destination"}),
        json!({"destination": "topic://a..b"}),
        json!({"destination": "queue://q", "priority": 12}),
        json!({"destination": "queue://q", "properties": {"nested": {"a": 1}}}),
        json!({"destination": "queue://q", "surprise": 1}),
    ] {
        let a = call(&server, "POST", "/api/publish", Some(bad.clone()), None);
        assert_eq!(a.status, 400, "{bad}: {}", a.body);
        assert_eq!(a.json()["status"], 400);
        assert!(!a.error().is_empty());
    }
    // The protocols' frame limit holds here too, and says so.
    let big = "x".repeat(test_config().max_frame_size as usize + 1);
    let a = call(
        &server,
        "POST",
        "/api/publish",
        Some(json!({"destination": "queue://q", "body": big})),
        None,
    );
    assert_eq!(a.status, 413, "{}", a.error());
    assert!(
        a.error().contains("exceeds max_frame_size"),
        "{}",
        a.error()
    );
    let url = format!("http://{}/api/publish", server.admin_addr().unwrap());
    let garbage = ureq::post(&url)
        .set("Content-Type", "application/json")
        .send_string("{not json");
    assert!(matches!(garbage, Err(ureq::Error::Status(400, _))));
    assert_nothing(&sub);
    assert!(
        !server.stats().queues.iter().any(|q| q.0 == "q"),
        "nothing was made"
    );
}

#[test]
fn topics_show_traffic_and_strict_mode_declares_through_the_api() {
    let mut config = test_config();
    config.topics.strict = true;
    config.topics.declared = vec!["sales.eu".into()];
    let server = start_with(config);
    let (_c, s) = connect(&server);
    let _sub = subscribe(&s, "sales.*");
    for _ in 0..4 {
        publish(&s, "sales.eu", "x");
    }
    let t = get(&server, "/api/topics").json();
    assert_eq!(t["strict"], true);
    let eu = t["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "sales.eu")
        .unwrap()
        .clone();
    assert_eq!(
        (eu["messages_in"].as_u64(), eu["deliveries"].as_u64()),
        (Some(4), Some(4))
    );
    assert!(eu["rate"].is_number(), "{eu}");
    assert_eq!(
        t["patterns"][0],
        json!({"pattern": "sales.*", "subscribers": 1})
    );
    // Publishing to sales.us is refused until it is declared.
    let p = s.create_producer(&Destination::topic("sales.us")).unwrap();
    assert!(p.send_with_receipt(Message::text("x")).is_err());
    let a = call(
        &server,
        "POST",
        "/api/topics",
        Some(json!({"name": "sales.us"})),
        None,
    );
    assert_eq!(a.status, 200, "{}", a.body);
    p.send_with_receipt(Message::text("x")).unwrap();
    let a = call(&server, "DELETE", "/api/topics/sales", None, None);
    assert_eq!(a.status, 200);
    assert!(
        p.send_with_receipt(Message::text("x")).is_err(),
        "the subtree went"
    );
    assert_eq!(
        call(&server, "DELETE", "/api/topics/sales", None, None).status,
        404
    );
    let a = call(
        &server,
        "POST",
        "/api/topics",
        Some(json!({"name": "a..b"})),
        None,
    );
    assert_eq!(a.status, 409);
}

fn delete_trail(server: &TestServer) -> u16 {
    call(
        server,
        "DELETE",
        "/api/subscriptions/keeper/trail",
        None,
        None,
    )
    .status
}

#[test]
fn subscriptions_and_connections_are_listed_and_can_be_ended() {
    let server = start();
    let c = factory(&server)
        .with_client_id("keeper")
        .create_connection()
        .unwrap();
    let s = c.create_session(AckMode::Auto).unwrap();
    let d = s
        .create_durable_subscriber(&Destination::topic("audit.#"), "trail")
        .unwrap();
    let plain = s
        .create_consumer_with_selector(&Destination::topic("x.*"), "n > 1")
        .unwrap();
    // Three published, one of them delivered: the connection's counts.
    let p = s.create_producer(&Destination::topic("x.y")).unwrap();
    for n in [1, 2, 0] {
        p.send_with_receipt(Message::text("m").with_property("n", n))
            .unwrap();
    }
    assert!(plain.receive(Duration::from_secs(5)).unwrap().is_some());
    let subs = get(&server, "/api/subscriptions").json();
    let list = subs.as_array().unwrap();
    assert!(
        list.iter()
            .any(|s| s["pattern"] == "x.*" && s["selector"] == "n > 1"),
        "{subs}"
    );
    assert!(
        list.iter()
            .any(|s| s["name"] == "trail" && s["client_id"] == "keeper" && s["durable"] == true),
        "{subs}"
    );
    // In use: refused. Without its consumer: deleted.
    assert_eq!(delete_trail(&server), 409);
    d.close().unwrap();
    assert_eq!(delete_trail(&server), 200);
    assert_eq!(delete_trail(&server), 404);

    let conns = get(&server, "/api/connections").json();
    let me = conns
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["client_id"] == "keeper")
        .unwrap()
        .clone();
    assert_eq!(me["protocol"], "herald");
    assert_eq!(me["subscriptions"].as_u64(), Some(1));
    assert!(me["bytes_in"].as_u64().unwrap() > 0);
    assert_eq!(me["messages_in"].as_u64(), Some(3), "{me}");
    assert_eq!(me["messages_out"].as_u64(), Some(1), "{me}");
    let id = me["id"].as_u64().unwrap();
    assert_eq!(
        call(
            &server,
            "DELETE",
            &format!("/api/connections/{id}"),
            None,
            None
        )
        .status,
        200
    );
    wait_until("the connection is closed", || c.is_closed());
    assert_eq!(
        call(&server, "DELETE", "/api/connections/abc", None, None).status,
        400
    );
    assert_eq!(
        call(&server, "DELETE", "/api/connections/999999", None, None).status,
        404
    );
}

#[test]
fn metrics_count_known_traffic() {
    let server = start();
    let (_c, s) = connect(&server);
    let _sub = subscribe(&s, "m.#");
    for _ in 0..5 {
        publish(&s, "m.one", "x");
    }
    let p = s.create_producer(&Destination::queue("mq")).unwrap();
    for _ in 0..2 {
        p.send(Message::text("y").persistent()).unwrap();
    }
    // Published through the API: counted like the rest.
    let body = json!({"destination": "topic://m.one", "body": "z"});
    assert_eq!(
        call(&server, "POST", "/api/publish", Some(body), None).status,
        200
    );
    // Temporary destinations are summed under one label.
    for _ in 0..3 {
        let temp = s.create_temporary_queue();
        let _reader = s.create_consumer(&temp).unwrap();
        s.create_producer(&temp)
            .unwrap()
            .send_with_receipt(Message::text("t"))
            .unwrap();
    }
    wait_until("every message counted", || server.stats().messages_in == 11);
    let text = get(&server, "/metrics").body;
    assert!(!text.contains("destination=\"temp."), "{text}");
    for line in [
        "herald_messages_in_total 11",
        "herald_destination_messages_in_total{kind=\"queue\",destination=\"(temporary)\"} 3",
        "herald_destination_messages_in_total{kind=\"topic\",destination=\"m.one\"} 6",
        "herald_destination_deliveries_total{kind=\"topic\",destination=\"m.one\"} 6",
        "herald_queue_depth{queue=\"mq\"} 2",
        "herald_queue_enqueued_total{queue=\"mq\"} 2",
        "herald_connections 1",
    ] {
        assert!(text.contains(line), "missing {line} in\n{text}");
    }
    for name in [
        "herald_messages_in_total",
        "herald_messages_out_total",
        "herald_redeliveries_total",
        "herald_dead_lettered_total",
        "herald_expired_total",
        "herald_slow_consumer_dropped_total",
        "herald_subscriptions",
        "herald_queue_in_flight",
        "herald_worker_busy_seconds_total",
        "herald_journal_append_seconds_bucket",
        "herald_journal_fsync_seconds_count",
    ] {
        assert!(text.contains(name), "missing {name}");
    }
}

fn secured_config(extra_user: bool) -> String {
    let admin = hash_password("root").unwrap();
    let reader = hash_password("look").unwrap();
    let mut text = format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\n[stomp]\nenabled = false\nwebsocket_enabled = false\n\
         [mqtt]\nenabled = false\nwebsocket_enabled = false\n\
         [auth]\nfailed_login_delay_ms = 10\n\
         [[auth.users]]\nname = \"ops\"\npassword = \"{admin}\"\nroles = [\"admin\"]\n\
         [[auth.users]]\nname = \"viewer\"\npassword = \"{reader}\"\nroles = [\"reader\"]\n\
         [[auth.users]]\nname = \"watcher\"\npassword = \"{reader}\"\nroles = [\"monitor\"]\n"
    );
    if extra_user {
        let new = hash_password("fresh").unwrap();
        text.push_str(&format!(
            "[[auth.users]]\nname = \"newcomer\"\npassword = \"{new}\"\nroles = [\"admin\"]\n"
        ));
    }
    text.push_str(
        "[auth.roles.admin]\nadmin = true\n[auth.roles.reader]\nconsume = [\"#\"]\n\
         [auth.roles.monitor]\nmonitor = true\n",
    );
    text
}

fn secured_server(file: &std::path::Path) -> TestServer {
    let mut config = Config::load(file).unwrap();
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.amqp.enabled = false;
    config.data_dir = temp_dir("admin-auth");
    start_with(config)
}

#[test]
fn with_users_reading_needs_monitor_and_changing_needs_admin() {
    let dir = temp_dir("admin-conf");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("herald.toml");
    std::fs::write(&file, secured_config(false)).unwrap();
    let server = secured_server(&file);
    let a = call(&server, "GET", "/api/queues", None, None);
    assert_eq!(a.status, 401);
    assert_eq!(a.json()["status"], 401);
    let a = call(&server, "GET", "/api/queues", None, Some(("ops", "wrong")));
    assert_eq!(a.status, 401);
    assert!(a.error().contains("invalid user name or password"));
    // The console's page and script load without a login: they hold no
    // data, and the page asks for one itself. A 401 asks a browser for
    // basic auth, but not when the console asks (X-Herald): it shows its
    // own form rather than the browser's prompt.
    for path in ["/", "/console.js"] {
        assert_eq!(call(&server, "GET", path, None, None).status, 200, "{path}");
    }
    let url = format!("http://{}/api/queues", server.admin_addr().unwrap());
    let challenge = |request: ureq::Request| match request.call() {
        Err(ureq::Error::Status(401, r)) => r.header("www-authenticate").map(str::to_owned),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        challenge(ureq::get(&url)).as_deref(),
        Some("Basic realm=\"herald\"")
    );
    assert_eq!(challenge(ureq::get(&url).set("X-Herald", "console")), None);
    // A plain user may see that the server is up, and nothing else:
    // connections, users and subscriptions are what an attacker wants.
    let viewer = Some(("viewer", "look"));
    assert_eq!(
        call(&server, "GET", "/api/health", None, viewer).status,
        200
    );
    for path in [
        "/api/queues",
        "/api/connections",
        "/api/users",
        "/api/subscriptions",
        "/metrics",
    ] {
        let a = call(&server, "GET", path, None, viewer);
        assert_eq!(a.status, 403, "{path}");
        assert!(a.error().contains("'monitor'"), "{}", a.body);
        let watched = call(&server, "GET", path, None, Some(("watcher", "look")));
        assert_eq!(watched.status, 200, "{path}");
    }
    // A connection that logged in shows its user (its login is checked
    // on another thread, after CONNECT).
    let _client = factory(&server)
        .with_credentials("viewer", "look")
        .create_connection()
        .unwrap();
    let listed = call(
        &server,
        "GET",
        "/api/connections",
        None,
        Some(("watcher", "look")),
    );
    assert!(
        listed.body.contains("\"user\":\"viewer\""),
        "{}",
        listed.body
    );
    // The configuration in effect, its secrets hidden.
    let s = call(
        &server,
        "GET",
        "/api/server",
        None,
        Some(("watcher", "look")),
    );
    assert!(!s.body.contains("argon2"), "{}", s.body);
    let settings = &s.json()["settings"];
    assert_eq!(settings["auth"]["users"][0]["password"], "(hidden)");
    assert_eq!(settings["max_frame_size"], 16 << 20);
    assert_eq!(s.json()["journal"]["fsync"], "batch");
    let a = call(
        &server,
        "POST",
        "/api/queues/x/purge",
        None,
        Some(("watcher", "look")),
    );
    assert_eq!(a.status, 403);
    assert!(a.error().contains("'admin'"), "{}", a.body);
    assert_eq!(
        call(
            &server,
            "POST",
            "/api/queues/x/purge",
            None,
            Some(("ops", "root"))
        )
        .status,
        404
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// What the user added by a reload gets when it asks for the server.
fn newcomer(server: &TestServer) -> u16 {
    let credentials = Some(("newcomer", "fresh"));
    call(server, "GET", "/api/server", None, credentials).status
}

#[test]
fn reload_takes_new_users_and_refuses_a_bad_file() {
    let dir = temp_dir("admin-reload");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("herald.toml");
    std::fs::write(&file, secured_config(false)).unwrap();
    let server = secured_server(&file);
    let ops = Some(("ops", "root"));
    assert_eq!(newcomer(&server), 401);
    std::fs::write(&file, secured_config(true)).unwrap();
    let a = call(&server, "POST", "/api/reload", None, ops);
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(newcomer(&server), 200);
    // A bad file is refused with the reason; the old config stays.
    std::fs::write(&file, "[auth]\nrequired = \"sometimes\"\n").unwrap();
    let a = call(&server, "POST", "/api/reload", None, ops);
    assert_eq!(a.status, 400);
    assert!(a.error().contains("required"), "{}", a.body);
    assert_eq!(newcomer(&server), 200);
    // A server on its embedded defaults has nothing to reload.
    let plain = start();
    assert_eq!(call(&plain, "POST", "/api/reload", None, None).status, 400);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn users_and_roles_are_changed_in_the_config_file_and_take_effect_at_once() {
    let dir = temp_dir("admin-users");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("herald.toml");
    std::fs::write(&file, secured_config(false)).unwrap();
    let server = secured_server(&file);
    let ops = Some(("ops", "root"));
    let put = |path: &str, body: serde_json::Value| call(&server, "PUT", path, Some(body), ops);
    assert_eq!(newcomer(&server), 401);
    // A role and a user with it: hashed here, written, in force.
    let a = put("/api/roles/auditors", json!({"monitor": true}));
    assert_eq!(a.status, 200, "{}", a.body);
    let a = put(
        "/api/users/newcomer",
        json!({"password": "fresh", "roles": ["auditors"]}),
    );
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(newcomer(&server), 200);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("name = \"newcomer\""), "{text}");
    assert!(!text.contains("fresh"), "only the hash is kept: {text}");
    assert!(text.contains("[auth.roles.auditors]"), "{text}");
    let listed = call(&server, "GET", "/api/users", None, ops).json();
    assert_eq!(listed["editable"], true);
    assert!(listed["roles"]["auditors"]["monitor"] == true, "{listed}");
    // A monitor may look and not change.
    let creds = Some(("newcomer", "fresh"));
    let a = call(&server, "PUT", "/api/roles/x", Some(json!({})), creds);
    assert_eq!(a.status, 403, "{}", a.body);
    // Roles changed without the password; then a role no one defined,
    // an empty password, garbage and a role in use are refused, and the
    // file stays as it was.
    let a = put("/api/users/newcomer", json!({"roles": []}));
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(newcomer(&server), 403, "no role: no monitor");
    let before = std::fs::read_to_string(&file).unwrap();
    for (path, body, why) in [
        (
            "/api/users/newcomer",
            json!({"roles": ["nobody"]}),
            "nobody",
        ),
        ("/api/users/ghost", json!({"roles": []}), "give a password"),
        ("/api/users/ghost", json!({"password": ""}), "empty"),
        ("/api/users/ghost", json!({"password": 3}), "password"),
        (
            "/api/roles/bad",
            json!({"publish": ["queue:a*b"]}),
            "auth.roles",
        ),
    ] {
        let a = put(path, body);
        assert_eq!(a.status, 400, "{path}: {}", a.body);
        assert!(a.error().contains(why), "{path}: {}", a.body);
    }
    let a = put("/api/users/newcomer", json!({"roles": ["auditors"]}));
    assert_eq!(a.status, 200, "{}", a.body);
    let in_use = call(&server, "DELETE", "/api/roles/auditors", None, ops);
    assert_eq!(in_use.status, 400, "{}", in_use.body);
    assert!(in_use.error().contains("auditors"), "{}", in_use.body);
    // Removed: no more logins; removing again is a 404.
    let gone = call(&server, "DELETE", "/api/users/newcomer", None, ops);
    assert_eq!(gone.status, 200, "{}", gone.body);
    assert_eq!(newcomer(&server), 401);
    let again = call(&server, "DELETE", "/api/users/newcomer", None, ops);
    assert_eq!(again.status, 404, "{}", again.body);
    assert_eq!(
        call(&server, "DELETE", "/api/roles/auditors", None, ops).status,
        200
    );
    assert!(std::fs::read_to_string(&file).unwrap().len() < before.len());
    // What is left is a config the server starts from.
    Config::load(&file).unwrap();
    // On embedded defaults there is no file to keep users in.
    let plain = start();
    let a = call(
        &plain,
        "PUT",
        "/api/users/ann",
        Some(json!({"password": "x"})),
        None,
    );
    assert_eq!(a.status, 409, "{}", a.body);
    assert!(a.error().contains("--config"), "{}", a.body);
    let _ = std::fs::remove_dir_all(dir);
}

/// The ids of a queue's messages, as the API lists them.
fn message_ids(server: &TestServer, queue: &str) -> Vec<String> {
    let page = get(server, &format!("/api/queues/{queue}/messages?limit=1000")).json();
    page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect()
}

/// A consumer that holds one message at a time.
fn one_at_a_time(session: &herald_client::Session, queue: &str) -> herald_client::Consumer {
    let one = herald_client::ConsumerOptions {
        prefetch: 1,
        ..herald_client::ConsumerOptions::default()
    };
    session
        .create_consumer_with(&Destination::queue(queue), one)
        .unwrap()
}

/// Has a CLIENT-mode session take one message and give it back: with
/// `max_deliveries = 1` it is dead-lettered. (One at a time: recover
/// gives back all the session holds.)
fn kill_one(session: &herald_client::Session, queue: &str) {
    let consumer = one_at_a_time(session, queue);
    next(&consumer);
    session.recover().unwrap();
    consumer.close().unwrap();
}

#[test]
fn messages_are_browsed_deleted_moved_copied_and_replayed_one_by_one() {
    let mut config = test_config();
    config.queues.max_deliveries = 1;
    let server = start_with(config);
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("orders")).unwrap();
    for i in 0..6 {
        let m = Message::text(format!("order {i}"))
            .with_property("n", i)
            .with_content_type("text/plain; charset=utf-8");
        p.send_with_receipt(m.persistent()).unwrap();
    }
    // Paged and filtered, without consuming.
    let page = get(&server, "/api/queues/orders/messages?offset=1&limit=2").json();
    assert_eq!(
        (page["total"].as_u64(), page["limit"].as_u64()),
        (Some(6), Some(2))
    );
    let bodies: Vec<&str> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["body"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(bodies, ["order 1", "order 2"]);
    let first = &page["messages"][0];
    assert_eq!(
        (&first["state"], &first["persistent"], &first["properties"]),
        (&json!("ready"), &json!(true), &json!({"n": 1}))
    );
    assert_eq!(first["content_type"], "text/plain; charset=utf-8");
    let selected = get(&server, "/api/queues/orders/messages?selector=n%20%3E%203").json();
    assert_eq!(selected["total"], 2);
    for (path, status, words) in [
        (
            "/api/queues/orders/messages?selector=n%20%3D%3D%201",
            400,
            "use = for equality",
        ),
        ("/api/queues/orders/messages?limit=0", 400, "limit 0"),
        ("/api/queues/orders/messages?surprise=1", 400, "surprise"),
        ("/api/queues/nothing/messages", 404, "no queue 'nothing'"),
    ] {
        let a = get(&server, path);
        assert_eq!(a.status, status, "{path}: {}", a.body);
        assert!(a.error().contains(words), "{path}: {}", a.body);
    }
    assert_eq!(
        queue_row(&server, "orders")["depth"],
        6,
        "browsing took nothing"
    );

    let ids = message_ids(&server, "orders");
    let path = |id: &str, what: &str| format!("/api/queues/orders/messages/{id}{what}");
    // Delete one, then it is gone.
    assert_eq!(
        call(&server, "DELETE", &path(&ids[0], ""), None, None).status,
        200
    );
    let a = call(&server, "DELETE", &path(&ids[0], ""), None, None);
    assert_eq!(a.status, 404, "{}", a.body);
    // Move one: it leaves; copy one: it stays, and its copy has an id of
    // its own.
    let to = |d: &str| Some(json!({ "to": d }));
    let a = call(
        &server,
        "POST",
        &path(&ids[1], "/move"),
        to("queue://elsewhere"),
        None,
    );
    assert_eq!(
        (a.status, &a.json()["to"]),
        (200, &json!("queue://elsewhere")),
        "{}",
        a.body
    );
    let a = call(
        &server,
        "POST",
        &path(&ids[2], "/copy"),
        to("elsewhere"),
        None,
    );
    assert_eq!(a.status, 200, "{}", a.body);
    let copy = a.json()["copy"].as_str().unwrap().to_owned();
    assert_ne!(copy, ids[2]);
    assert_eq!(message_ids(&server, "elsewhere"), [ids[1].clone(), copy]);
    assert_eq!(message_ids(&server, "orders"), ids[2..]);
    let moved = get(&server, "/api/queues/elsewhere/messages").json();
    assert_eq!(
        moved["messages"][0]["properties"]["n"], 1,
        "a move keeps the properties"
    );
    for (body, words) in [
        (to("queue://bad..name"), "empty word"),
        (to("smtp://x"), "queue://NAME or topic://NAME"),
        (Some(json!({})), "to"),
    ] {
        let a = call(&server, "POST", &path(&ids[3], "/move"), body, None);
        assert_eq!(a.status, 400, "{}", a.body);
        assert!(a.error().contains(words), "{}", a.body);
    }
    assert_eq!(
        message_ids(&server, "orders"),
        ids[2..],
        "nothing half-done"
    );

    // Dead letters say where they came from and why; replayed by id.
    let cs = factory(&server).create_connection().unwrap();
    let client = cs.create_session(AckMode::Client).unwrap();
    kill_one(&client, "orders");
    kill_one(&client, "orders");
    wait_until("two dead letters", || {
        message_ids(&server, "DLQ.orders").len() == 2
    });
    let dead = get(&server, "/api/queues/DLQ.orders/messages").json();
    let letter = &dead["messages"][0];
    assert_eq!(letter["dead_letter"]["from"], "queue://orders");
    assert!(
        letter["dead_letter"]["reason"]
            .as_str()
            .unwrap()
            .contains("1 deliveries"),
        "{letter}"
    );
    let dead_ids = message_ids(&server, "DLQ.orders");
    // One is taken by a consumer meanwhile: it is not replayed, and says
    // why; the other goes back.
    let taker = one_at_a_time(&client, "DLQ.orders");
    next(&taker);
    let taken = message_ids(&server, "DLQ.orders")
        .into_iter()
        .find(|id| {
            let page = get(&server, "/api/queues/DLQ.orders/messages").json();
            page["messages"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["id"] == id.as_str() && m["state"] == "in flight")
        })
        .expect("one in flight");
    let too_many = json!({ "ids": vec!["ID:x"; 1001] });
    let a = call(
        &server,
        "POST",
        "/api/queues/DLQ.orders/replay",
        Some(too_many),
        None,
    );
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(a.error().contains("at most 1000"), "{}", a.body);
    let body = json!({"ids": [dead_ids[0].clone(), dead_ids[1].clone(), "ID:none"]});
    let a = call(
        &server,
        "POST",
        "/api/queues/DLQ.orders/replay",
        Some(body),
        None,
    );
    assert_eq!(a.status, 200, "{}", a.body);
    let report = a.json();
    assert_eq!(report["moved"], 1, "{report}");
    let failed = report["failed"].as_array().unwrap();
    assert_eq!(failed.len(), 2, "{report}");
    assert!(failed
        .iter()
        .any(|f| f["id"] == taken.as_str() && f["error"].as_str().unwrap().contains("in flight")));
    let back = dead_ids.iter().find(|id| **id != taken).unwrap();
    let home = message_ids(&server, "orders");
    assert!(home.contains(back), "replayed home: {back} not in {home:?}");
}

#[test]
fn queues_are_created_and_deleted_through_the_api() {
    let server = start();
    let create = |body| call(&server, "POST", "/api/queues", Some(body), None);
    let a = create(json!({"name": "made"}));
    assert_eq!(
        (a.status, &a.json()["created"]),
        (200, &json!(true)),
        "{}",
        a.body
    );
    assert_eq!(
        create(json!({"name": "queue://made"})).json()["created"],
        false
    );
    assert_eq!(queue_row(&server, "made")["depth"], 0);
    for bad in [
        json!({"name": "topic://t"}),
        json!({"name": "a..b"}),
        json!({}),
    ] {
        assert_eq!(create(bad.clone()).status, 400, "{bad}");
    }
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("made")).unwrap();
    for _ in 0..3 {
        p.send_with_receipt(Message::text("x")).unwrap();
    }
    let consumer = s.create_consumer(&Destination::queue("busy")).unwrap();
    let a = call(&server, "DELETE", "/api/queues/busy", None, None);
    assert_eq!(a.status, 409, "{}", a.body);
    assert!(a.error().contains("1 consumer(s)"), "{}", a.body);
    consumer.close().unwrap();
    let a = call(&server, "DELETE", "/api/queues/made", None, None);
    assert_eq!(
        (a.status, &a.json()["messages"]),
        (200, &json!(3)),
        "{}",
        a.body
    );
    let a = call(&server, "DELETE", "/api/queues/made", None, None);
    assert_eq!(a.status, 404, "{}", a.body);
    assert!(!get(&server, "/api/queues").body.contains("\"made\""));
}

#[test]
fn a_created_queue_outlives_a_restart_until_it_is_deleted() {
    let config = test_config();
    let server = start_with(config.clone());
    let create = |server: &TestServer, name: &str| {
        let a = call(
            server,
            "POST",
            "/api/queues",
            Some(json!({"name": name})),
            None,
        );
        assert_eq!(a.status, 200, "{}", a.body);
    };
    create(&server, "kept.empty");
    create(&server, "kept.then.deleted");
    // A queue made by a first send is not kept once empty.
    let (c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("by.send")).unwrap();
    p.send_with_receipt(Message::text("x")).unwrap();
    let consumer = s.create_consumer(&Destination::queue("by.send")).unwrap();
    next(&consumer);
    drop(c);
    let a = call(
        &server,
        "DELETE",
        "/api/queues/kept.then.deleted",
        None,
        None,
    );
    assert_eq!(a.status, 200, "{}", a.body);
    server.stop_keeping_data();

    let server = start_with(config.clone());
    let names: Vec<String> = get(&server, "/api/queues")
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(names.contains(&"kept.empty".to_owned()), "{names:?}");
    assert!(
        !names.contains(&"kept.then.deleted".to_owned()),
        "{names:?}"
    );
    assert!(!names.contains(&"by.send".to_owned()), "{names:?}");
    // Deleted now: gone at the next start too.
    let a = call(&server, "DELETE", "/api/queues/kept.empty", None, None);
    assert_eq!(a.status, 200, "{}", a.body);
    server.stop_keeping_data();
    let server = start_with(config);
    assert!(!get(&server, "/api/queues").body.contains("kept.empty"));
}

#[test]
fn a_move_needs_the_right_to_publish_where_it_goes() {
    let dir = temp_dir("admin-move");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("herald.toml");
    let mut text = secured_config(false);
    let mover = hash_password("m").unwrap();
    text.push_str(&format!(
        "[[auth.users]]\nname = \"mover\"\npassword = \"{mover}\"\nroles = [\"mover\"]\n\
         [auth.roles.mover]\nadmin = true\npublish = [\"queue:allowed.#\"]\n"
    ));
    std::fs::write(&file, text).unwrap();
    let server = secured_server(&file);
    let mover = Some(("mover", "m"));
    let body = json!({"destination": "queue://held", "body": "x"});
    let a = call(&server, "POST", "/api/publish", Some(body), mover);
    assert_eq!(a.status, 200, "{}", a.body);
    let page = call(&server, "GET", "/api/queues/held/messages", None, mover).json();
    let id = page["messages"][0]["id"].as_str().unwrap().to_owned();
    let path = format!("/api/queues/held/messages/{id}/move");
    let a = call(
        &server,
        "POST",
        &path,
        Some(json!({"to": "forbidden"})),
        mover,
    );
    assert_eq!(a.status, 403, "{}", a.body);
    assert!(a.error().contains("publish"), "{}", a.body);
    let a = call(
        &server,
        "POST",
        &path,
        Some(json!({"to": "allowed.q"})),
        mover,
    );
    assert_eq!(a.status, 200, "{}", a.body);
    // A monitor reads, and changes nothing.
    let watcher = Some(("watcher", "look"));
    assert_eq!(
        call(
            &server,
            "GET",
            "/api/queues/allowed.q/messages",
            None,
            watcher
        )
        .status,
        200
    );
    let a = call(
        &server,
        "DELETE",
        &format!("/api/queues/allowed.q/messages/{id}"),
        None,
        watcher,
    );
    assert_eq!(a.status, 403, "{}", a.body);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn metrics_come_as_openmetrics_to_who_asks_and_as_classic_text_otherwise() {
    let server = start();
    let url = format!("http://{}/metrics", server.admin_addr().unwrap());
    let scrape = |accept: Option<&str>| {
        let mut request = ureq::get(&url);
        if let Some(accept) = accept {
            request = request.set("Accept", accept);
        }
        let answer = request.call().unwrap();
        let kind = answer.content_type().to_owned();
        (kind, answer.into_string().unwrap())
    };
    // As Prometheus asks.
    let (kind, open) = scrape(Some(
        "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
    ));
    assert_eq!(kind, "application/openmetrics-text");
    assert!(open.ends_with("# EOF\n"));
    assert!(
        open.contains("# TYPE herald_messages_in counter\n"),
        "{open}"
    );
    for accept in [Some("text/plain;version=0.0.4"), None] {
        let (kind, text) = scrape(accept);
        assert_eq!(kind, "text/plain", "{accept:?}");
        assert!(!text.contains("# EOF"), "{accept:?}");
        // Each TYPE names the samples that follow it.
        assert!(
            text.contains("# TYPE herald_messages_in_total counter\nherald_messages_in_total 0\n"),
            "{text}"
        );
    }
}

#[test]
fn the_monitoring_files_name_only_metrics_the_server_exports() {
    let server = start();
    let (_c, s) = connect(&server);
    let _consumer = s.create_consumer(&Destination::queue("DLQ.q")).unwrap();
    publish(&s, "t", "x");
    let exported = get(&server, "/metrics").body;
    // Cluster mode's metrics exist only on a node of a cluster.
    let cluster_metrics = include_str!("../server/src/admin/metrics.rs");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dashboard =
        std::fs::read_to_string(root.join("docs/monitoring/grafana-dashboard.json")).unwrap();
    serde_json::from_str::<serde_json::Value>(&dashboard).expect("the dashboard is JSON");
    let alerts = std::fs::read_to_string(root.join("docs/monitoring/herald-alerts.yml")).unwrap();
    // The guides name them in backquotes as a scrape shows them, `_total`
    // and all (and name other things herald_ too: crates in RUST_LOG).
    let guides = ["docs/operations.md", "docs/deployment.md"]
        .map(|doc| (std::fs::read_to_string(root.join(doc)).unwrap(), "`herald_"));
    let mut named = 0;
    let files = [(dashboard, "herald_"), (alerts, "herald_")];
    for (text, marker) in files.into_iter().chain(guides) {
        for (at, _) in text.match_indices(marker) {
            let at = at + marker.len() - "herald_".len();
            let name: String = text[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            named += 1;
            let registered = name.strip_suffix("_total").unwrap_or(&name);
            let known = exported.contains(&format!("\n{name}"))
                || (name.starts_with("herald_cluster_")
                    && cluster_metrics.contains(&format!("\"{registered}\"")));
            assert!(known, "{name} is not a metric the server exports");
        }
    }
    assert!(named > 20, "{named} names checked");
}

#[test]
fn a_topic_shows_its_subscriptions_and_retained_messages() {
    let server = start();
    let (_c, s) = as_client(&server, "app");
    let durable = herald_client::ConsumerOptions {
        durable_name: Some("daily".into()),
        selector: Some("edition > 0".into()),
        ..herald_client::ConsumerOptions::default()
    };
    let d = s
        .create_consumer_with(&Destination::topic("news.#"), durable)
        .unwrap();
    d.close().unwrap();
    let _plain = subscribe(&s, "news.today");
    let _elsewhere = subscribe(&s, "sport.#");
    let mut kept = Message::text("kept").with_property("edition", 2);
    kept.retain = true;
    s.create_producer(&Destination::topic("news.today"))
        .unwrap()
        .send_with_receipt(kept)
        .unwrap();
    let t = get(&server, "/api/topics/news.today").json();
    assert_eq!(t["messages_in"], 1, "{t}");
    let subs = t["subscriptions"].as_array().unwrap();
    assert_eq!(subs.len(), 2, "sport.# does not take it: {t}");
    let daily = subs.iter().find(|s| s["durable"] == true).unwrap();
    assert_eq!(
        (
            &daily["name"],
            &daily["selector"],
            &daily["backlog"],
            &daily["connection"]
        ),
        (
            &json!("daily"),
            &json!("edition > 0"),
            &json!(1),
            &json!(null)
        )
    );
    assert_eq!(t["retained"][0]["body"]["text"], "kept");
    assert_eq!(t["retained"][0]["properties"]["edition"], 2);
    let a = get(&server, "/api/topics/a..b");
    assert_eq!(a.status, 400, "{}", a.body);
    let quiet = get(&server, "/api/topics/nothing.here").json();
    assert_eq!(
        (
            quiet["messages_in"].as_u64(),
            quiet["subscriptions"].as_array().map(Vec::len)
        ),
        (Some(0), Some(0))
    );
}
