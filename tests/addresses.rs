//! Settings per address (`[[addresses]]`): matched by pattern, shown by
//! the management interface, changed by a reload; memory bounds that hold
//! back only the publishers of the full queue; redelivery delays.

use std::time::{Duration, Instant};

use herald_client::{AckMode, Destination, ErrorCode, Message};
use herald_server::config::{AddressRule, FullPolicy};
use herald_server::Config;
use herald_tests::*;

fn rule(pattern: &str) -> AddressRule {
    AddressRule {
        pattern: pattern.into(),
        ..AddressRule::default()
    }
}

/// A server started from config file `file` (so that it reloads and
/// edits it), on the test's ephemeral ports.
fn from_file(file: &std::path::Path) -> TestServer {
    let mut config = Config::load(file).unwrap();
    let base = test_config();
    (config.listen, config.admin.listen, config.data_dir) =
        (base.listen, base.admin.listen, base.data_dir.clone());
    (config.stomp, config.mqtt, config.amqp) = (base.stomp, base.mqtt, base.amqp);
    start_with(config)
}

fn get(server: &TestServer, path: &str) -> serde_json::Value {
    let a = call(server, "GET", path, None, None);
    assert_eq!(a.status, 200, "{path}: {}", a.body);
    a.json()
}

#[test]
fn one_full_queue_holds_back_its_own_publishers_and_no_one_else() {
    let mut config = test_config();
    config.queues.max_memory_bytes = 1_000_000;
    config.queues.full_policy = FullPolicy::Fail;
    let server = start_with(config);
    let (_c, s) = connect(&server);
    let listener = subscribe(&s, "prices.#");
    let stuck = s.create_producer(&Destination::queue("stuck")).unwrap();
    let body = "x".repeat(27_000);
    let mut sent = 0;
    let refusal = loop {
        match stuck.send_with_receipt(Message::text(body.as_str())) {
            Ok(()) => sent += 1,
            Err(e) => break e,
        }
        assert!(sent < 500, "never refused");
        // The queues are weighed ten times a second.
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(
        refusal.server_code(),
        Some(ErrorCode::QueueFull),
        "{refusal}"
    );
    let text = refusal.to_string();
    assert!(
        text.contains("'stuck'") && text.contains("max_memory_bytes"),
        "{text}"
    );
    assert!(text.contains("refused"), "{text}");
    // Everyone else goes on: another queue, and a topic.
    let other = s.create_producer(&Destination::queue("other")).unwrap();
    for i in 0..20 {
        other
            .send_with_receipt(Message::text(i.to_string()))
            .unwrap();
        publish(&s, "prices.eu", &i.to_string());
        assert_eq!(next(&listener).body_text(), Some(i.to_string().as_str()));
    }
    let q = get(&server, "/api/queues/stuck");
    assert!(
        q["full"].as_str().unwrap().contains("max_memory_bytes"),
        "{q}"
    );
    assert_eq!(
        get(&server, "/api/queues/other")["full"],
        serde_json::Value::Null
    );
    // Drained, the queue takes messages again.
    let consumer = s.create_consumer(&Destination::queue("stuck")).unwrap();
    for _ in 0..sent {
        next(&consumer);
    }
    wait_until("the mark is lifted", || {
        stuck.send_with_receipt(Message::text("again")).is_ok()
    });
}

#[test]
fn an_address_of_its_own_size_blocks_fails_or_drops_as_it_says() {
    let mut config = test_config();
    let mut capped = rule("queue://capped.#");
    capped.max_size_bytes = Some(50_000);
    capped.full_policy = Some(FullPolicy::Drop);
    let mut failing = rule("queue://capped.fail");
    failing.full_policy = Some(FullPolicy::Fail);
    config.addresses = vec![capped, failing];
    let server = start_with(config);
    let (_c, s) = connect(&server);
    let body = "y".repeat(10_000);
    let fill = |name: &str| {
        let p = s.create_producer(&Destination::queue(name)).unwrap();
        let mut results = Vec::new();
        for _ in 0..40 {
            results.push(p.send_with_receipt(Message::text(body.as_str())));
            std::thread::sleep(Duration::from_millis(10));
        }
        results
    };
    // Drop: every send is accepted, and those past the bound are counted.
    assert!(fill("capped.drop").iter().all(Result::is_ok));
    let q = get(&server, "/api/queues/capped.drop");
    let (dropped, depth) = (q["dropped"].as_u64().unwrap(), q["depth"].as_u64().unwrap());
    assert!(dropped > 0 && depth + dropped == 40, "{q}");
    assert_eq!(q["settings"]["full_policy"], "drop");
    // Fail, on a more specific entry: refused naming the bound.
    let results = fill("capped.fail");
    let refused = results
        .iter()
        .find_map(|r| r.as_ref().err())
        .expect("refused");
    assert!(
        refused.to_string().contains("max_size_bytes (50000)"),
        "{refused}"
    );
    // A queue no entry bounds takes them all.
    assert!(fill("free").iter().all(Result::is_ok));
    assert_eq!(get(&server, "/api/queues/free")["depth"], 40);
}

#[test]
fn dead_letters_go_where_the_address_says_after_its_max_deliveries() {
    let mut config = test_config();
    let mut orders = rule("queue://orders.#");
    orders.max_deliveries = Some(2);
    orders.dead_letter = Some("queue://failed.orders".into());
    config.addresses = vec![orders];
    let server = start_with(config);
    let (_c, s) = connect(&server);
    s.create_producer(&Destination::queue("orders.eu"))
        .unwrap()
        .send_with_receipt(Message::text("bad"))
        .unwrap();
    let c = factory(&server).create_connection().unwrap();
    let client = c.create_session(AckMode::Client).unwrap();
    let consumer = client
        .create_consumer(&Destination::queue("orders.eu"))
        .unwrap();
    for _ in 0..2 {
        next(&consumer);
        client.recover().unwrap();
    }
    let dead = s
        .create_consumer(&Destination::queue("failed.orders"))
        .unwrap();
    let m = next(&dead);
    assert_eq!(m.body_text(), Some("bad"));
    assert!(dead_letter_reason(&m).contains("2 deliveries"), "{m:?}");
    let settings = &get(&server, "/api/queues/orders.eu")["settings"];
    assert_eq!(settings["max_deliveries"], 2, "{settings}");
    assert_eq!(settings["dead_letter"], "queue://failed.orders");
    assert_eq!(settings["matched"], serde_json::json!(["queue://orders.#"]));
    let queues = get(&server, "/api/queues");
    let row = queues
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "failed.orders");
    assert_eq!(row.unwrap()["dead_letter"], true, "{queues}");
}

#[test]
fn a_redelivery_waits_its_delay_and_the_delay_grows() {
    let mut config = test_config();
    let mut slow = rule("queue://retry");
    slow.redelivery_delay = Some(herald_server::addresses::Millis(300));
    slow.redelivery_multiplier = Some(2.0);
    config.addresses = vec![slow];
    let server = start_with(config);
    let (_c, s) = connect(&server);
    s.create_producer(&Destination::queue("retry"))
        .unwrap()
        .send_with_receipt(Message::text("again"))
        .unwrap();
    let c = factory(&server).create_connection().unwrap();
    let client = c.create_session(AckMode::Client).unwrap();
    let consumer = client
        .create_consumer(&Destination::queue("retry"))
        .unwrap();
    next(&consumer);
    // Not before its delay, whatever the machine's speed: 300 ms, then
    // 600 ms.
    for (attempt, delay) in [(2, 300), (3, 600)] {
        let given_back = Instant::now();
        client.recover().unwrap();
        let m = next(&consumer);
        assert!(
            given_back.elapsed() >= Duration::from_millis(delay),
            "delivery {attempt} came back after {:?}",
            given_back.elapsed()
        );
        assert_eq!(m.delivery_count, attempt);
    }
    // Meanwhile it shows as scheduled.
    client.recover().unwrap();
    let q = get(&server, "/api/queues/retry");
    assert_eq!(q["scheduled"], 1, "{q}");
    assert_eq!(q["settings"]["redelivery_delay"], "300ms");
    assert_eq!(q["settings"]["max_redelivery_delay"], "3s");
}

#[test]
fn a_kept_message_waits_out_its_redelivery_delay_across_a_restart() {
    let config = || {
        let mut config = test_config();
        let mut slow = rule("queue://retry.kept");
        slow.redelivery_delay = Some(herald_server::addresses::Millis(1500));
        config.addresses = vec![slow];
        config
    };
    let first = config();
    let dir = first.data_dir.clone();
    let server = start_with(first);
    let (_c, s) = connect(&server);
    s.send(&Destination::queue("retry.kept"), Message::text("later"))
        .unwrap();
    let c = factory(&server).create_connection().unwrap();
    let client = c.create_session(AckMode::Client).unwrap();
    let consumer = client
        .create_consumer(&Destination::queue("retry.kept"))
        .unwrap();
    next(&consumer);
    let given_back = Instant::now();
    client.recover().unwrap();
    drop((c, _c));
    server.stop_keeping_data();
    let mut again = config();
    again.data_dir = dir;
    let server = start_with(again);
    let (_c, s) = connect(&server);
    let consumer = s
        .create_consumer(&Destination::queue("retry.kept"))
        .unwrap();
    let m = next(&consumer);
    assert!(
        given_back.elapsed() >= Duration::from_millis(1500),
        "came back {:?} after it was given back",
        given_back.elapsed()
    );
    assert_eq!((m.body_text(), m.delivery_count), (Some("later"), 2));
    assert_nothing(&consumer);
}

#[test]
fn a_reload_puts_new_settings_in_force_and_a_bad_entry_is_refused() {
    let dir = temp_dir("addresses-reload");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("herald.toml");
    let write = |max_deliveries: u32| {
        let text = format!(
            "[[addresses]]\nmatch = \"queue://jobs.#\"\nmax_deliveries = {max_deliveries}\n"
        );
        std::fs::write(&file, text).unwrap();
    };
    write(4);
    let server = from_file(&file);
    let (_c, s) = connect(&server);
    s.create_producer(&Destination::queue("jobs.a"))
        .unwrap()
        .send_with_receipt(Message::text("j"))
        .unwrap();
    let deliveries = |server: &TestServer| {
        get(server, "/api/queues/jobs.a")["settings"]["max_deliveries"].clone()
    };
    assert_eq!(deliveries(&server), 4);
    write(7);
    let a = call(&server, "POST", "/api/reload", None, None);
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(
        deliveries(&server),
        7,
        "an existing queue takes the new settings"
    );
    let resolved = get(&server, "/api/addresses?destination=queue://jobs.new");
    assert_eq!(resolved["settings"]["max_deliveries"], 7, "{resolved}");
    assert_eq!(resolved["entries"][0]["match"], "queue://jobs.#");
    // Refused naming the entry and the key; the old settings stay.
    std::fs::write(
        &file,
        "[[addresses]]\nmatch = \"queue://jobs.#\"\nredelivery_delay = \"5 parsecs\"\n",
    )
    .unwrap();
    let a = call(&server, "POST", "/api/reload", None, None);
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(a.error().contains("redelivery_delay"), "{}", a.body);
    std::fs::write(
        &file,
        "[[addresses]]\nmatch = \"queue://jobs.#\"\nmax_deliveries = 0\n",
    )
    .unwrap();
    let a = call(&server, "POST", "/api/reload", None, None);
    assert!(
        a.error().contains("addresses[0].max_deliveries"),
        "{}",
        a.body
    );
    assert_eq!(deliveries(&server), 7);
    let bad = call(
        &server,
        "GET",
        "/api/addresses?destination=nowhere://x",
        None,
        None,
    );
    assert_eq!(bad.status, 400, "{}", bad.body);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn groups_stay_whole_and_in_order_when_a_consumer_goes_halfway() {
    const GROUPS: i64 = 100;
    const MESSAGES: i64 = 10_000;
    let server = start();
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("grouped")).unwrap();
    let send = |range: std::ops::Range<i64>| {
        for i in range {
            let m = Message::text(i.to_string())
                .with_property("JMSXGroupID", format!("g{}", i % GROUPS))
                .with_property("n", i);
            p.send(m).unwrap();
        }
        p.send_with_receipt(Message::text("sync").with_property("n", -1i64))
            .unwrap();
    };
    // (consumer, group, n) in the order each consumer got them.
    let (tx, rx) = std::sync::mpsc::channel::<(usize, i64)>();
    let consumers: Vec<_> = (0..4)
        .map(|k| {
            let (c, s) = connect(&server);
            let consumer = s
                .create_consumer_with(
                    &Destination::queue("grouped"),
                    herald_client::ConsumerOptions::default().prefetch(50),
                )
                .unwrap();
            let tx = tx.clone();
            consumer
                .set_message_listener(move |m: Message| {
                    let n = m.property("n").and_then(|v| v.as_i64()).unwrap();
                    tx.send((k, n)).unwrap();
                })
                .unwrap();
            (c, s, consumer)
        })
        .collect();
    drop(tx);
    send(0..MESSAGES / 2);
    let mut got: Vec<(usize, i64)> = Vec::new();
    let take = |until: i64, got: &mut Vec<(usize, i64)>| {
        while got.iter().filter(|(_, n)| *n >= 0).count() < until as usize {
            got.push(rx.recv_timeout(PATIENCE).expect("every message arrives"));
        }
    };
    take(MESSAGES / 2, &mut got);
    consumers[0].2.close().unwrap();
    send(MESSAGES / 2..MESSAGES);
    take(MESSAGES, &mut got);
    got.retain(|(_, n)| *n >= 0);
    let mut seen = std::collections::HashSet::new();
    let duplicates = got.iter().filter(|(_, n)| !seen.insert(*n)).count();
    assert_eq!((seen.len() as i64, duplicates), (MESSAGES, 0), "each once");
    for g in 0..GROUPS {
        let of_group: Vec<(usize, i64)> = got
            .iter()
            .copied()
            .filter(|(_, n)| n % GROUPS == g)
            .collect();
        let order: Vec<i64> = of_group.iter().map(|(_, n)| *n).collect();
        assert!(
            order.windows(2).all(|w| w[0] < w[1]),
            "group {g} out of order: {order:?}"
        );
        let mut owners: Vec<usize> = of_group.iter().map(|(k, _)| *k).collect();
        owners.dedup();
        assert!(
            owners.len() == 1 || (owners.len() == 2 && owners[0] == 0),
            "group {g} moved between {owners:?}"
        );
    }
}

#[test]
fn exclusive_queues_and_consumer_priorities_choose_the_consumer() {
    let mut config = test_config();
    let mut single = rule("queue://single");
    single.exclusive = Some(true);
    config.addresses = vec![single];
    let server = start_with(config);
    let (_c, s) = connect(&server);
    let options = herald_client::ConsumerOptions::default;
    // Exclusive: the first consumer has everything until it goes.
    let (_c1, s1) = connect(&server);
    let first = s1.create_consumer(&Destination::queue("single")).unwrap();
    let second = s.create_consumer(&Destination::queue("single")).unwrap();
    let p = s.create_producer(&Destination::queue("single")).unwrap();
    for i in 0..10 {
        p.send_with_receipt(Message::text(i.to_string())).unwrap();
    }
    for i in 0..5 {
        assert_eq!(next(&first).body_text(), Some(i.to_string().as_str()));
    }
    assert_nothing(&second);
    first.close().unwrap();
    drop(s1);
    for i in 5..10 {
        assert_eq!(next(&second).body_text(), Some(i.to_string().as_str()));
    }
    // Priority: the higher consumer takes all while it has credit.
    let low = s
        .create_consumer_with(&Destination::queue("ranked"), options().priority(-1))
        .unwrap();
    let (_c2, s2) = connect(&server);
    let high = s2
        .create_consumer_with(
            &Destination::queue("ranked"),
            options().priority(9).prefetch(5),
        )
        .unwrap();
    let p = s.create_producer(&Destination::queue("ranked")).unwrap();
    for i in 0..4 {
        p.send_with_receipt(Message::text(i.to_string())).unwrap();
    }
    for _ in 0..4 {
        next(&high);
    }
    assert_nothing(&low);
}

#[test]
fn an_exclusive_consumer_native_or_stomp_takes_every_message_while_attached() {
    let server = start();
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("solo")).unwrap();
    let plain = s.create_consumer(&Destination::queue("solo")).unwrap();
    // Native: ConsumerOptions::exclusive.
    let (_c1, s1) = connect(&server);
    let solo = s1
        .create_consumer_with(
            &Destination::queue("solo"),
            herald_client::ConsumerOptions::default().exclusive(),
        )
        .unwrap();
    for i in 0..6 {
        p.send_with_receipt(Message::text(i.to_string())).unwrap();
    }
    for i in 0..6 {
        assert_eq!(next(&solo).body_text(), Some(i.to_string().as_str()));
    }
    assert_nothing(&plain);
    solo.close().unwrap();
    // STOMP: ActiveMQ's activemq.exclusive header; a bad value is refused.
    let mut stomp = StompClient::connected(&server, &[]);
    let subscribe = |value: &str| {
        herald_protocol::stomp::StompFrame::new("SUBSCRIBE")
            .header("id", "1")
            .header("destination", "/queue/solo")
            .header("activemq.exclusive", value)
            .header("receipt", "r")
    };
    stomp.send(&subscribe("true"));
    stomp.expect("RECEIPT");
    for i in 6..9 {
        p.send_with_receipt(Message::text(i.to_string())).unwrap();
        let m = stomp.expect("MESSAGE");
        assert_eq!(&m.body[..], i.to_string().as_bytes());
    }
    assert_nothing(&plain);
    let mut bad = StompClient::connected(&server, &[]);
    bad.send(&subscribe("yes"));
    bad.expect_error_saying("activemq.exclusive 'yes' is not true or false");
}

#[test]
fn address_defaults_last_values_and_auto_create_apply_on_send() {
    let mut config = test_config();
    let mut prices = rule("queue://prices");
    prices.last_value_key = Some("ticker".into());
    let mut urgent = rule("queue://urgent");
    urgent.default_priority = Some(8);
    urgent.default_ttl = Some(herald_server::addresses::Millis(60_000));
    let mut fixed = rule("queue://fixed.#");
    fixed.auto_create = Some(false);
    config.addresses = vec![prices, urgent, fixed];
    let server = start_with(config);
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("prices")).unwrap();
    for (ticker, price) in [("ACME", 1), ("INIT", 7), ("ACME", 2), ("ACME", 3)] {
        let m = Message::text(price.to_string()).with_property("ticker", ticker);
        p.send_with_receipt(m).unwrap();
    }
    p.send_with_receipt(Message::text("no key")).unwrap();
    let c = s.create_consumer(&Destination::queue("prices")).unwrap();
    let got: Vec<String> = (0..3)
        .map(|_| next(&c).body_text().unwrap().to_owned())
        .collect();
    assert_eq!(got, ["7", "3", "no key"]);
    assert_nothing(&c);
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let p = s.create_producer(&Destination::queue("urgent")).unwrap();
    p.send_with_receipt(Message::text("u")).unwrap();
    let m = next(&s.create_consumer(&Destination::queue("urgent")).unwrap());
    assert_eq!(m.priority, 8);
    assert!(m.expiration >= before + 60_000, "{}", m.expiration);
    // Not made on first use: refused until it is created.
    let p = s.create_producer(&Destination::queue("fixed.a")).unwrap();
    let e = p.send_with_receipt(Message::text("x")).unwrap_err();
    assert_eq!(e.server_code(), Some(ErrorCode::InvalidDestination), "{e}");
    assert!(e.to_string().contains("auto_create = false"), "{e}");
    let e = s
        .create_consumer(&Destination::queue("fixed.a"))
        .unwrap_err();
    assert_eq!(e.server_code(), Some(ErrorCode::InvalidDestination), "{e}");
    let a = call(
        &server,
        "POST",
        "/api/queues",
        Some(serde_json::json!({"name": "fixed.a"})),
        None,
    );
    assert_eq!(a.status, 200, "{}", a.body);
    p.send_with_receipt(Message::text("x")).unwrap();
}

fn divert(name: &str, from: &str, to: &str) -> herald_server::config::DivertRule {
    herald_server::config::DivertRule {
        name: name.into(),
        from: from.into(),
        to: to.into(),
        selector: String::new(),
        exclusive: false,
    }
}

#[test]
fn diverts_file_copies_in_the_broker_and_keep_them_across_a_restart() {
    let mut config = test_config();
    let mut eu = divert("eu", "topic://sales.#", "queue://eu-orders");
    eu.selector = "region = 'EU'".into();
    let mut audit = divert("audit", "queue://payments", "queue://audited");
    audit.exclusive = true;
    config.diverts = vec![eu, audit];
    let dir = config.data_dir.clone();
    let server = start_with(config.clone());
    let (_c, s) = connect(&server);
    let live = subscribe(&s, "sales.#");
    let p = s.create_producer(&Destination::topic("sales.eu")).unwrap();
    for (n, region) in [(1, "EU"), (2, "US"), (3, "EU")] {
        let m = Message::text(n.to_string())
            .with_property("region", region)
            .persistent();
        p.send_with_receipt(m).unwrap();
    }
    // The topic's own subscribers have every message, the divert's queue
    // the selected ones, nobody holding a subscription for it.
    let heard: Vec<String> = (0..3)
        .map(|_| next(&live).body_text().unwrap().to_owned())
        .collect();
    assert_eq!(heard, ["1", "2", "3"]);
    // Exclusive: the queue it was sent to never has it.
    s.create_producer(&Destination::queue("payments"))
        .unwrap()
        .send_with_receipt(Message::text("pay").persistent())
        .unwrap();
    assert_eq!(get(&server, "/api/queues/audited")["depth"], 1);
    assert!(call(&server, "GET", "/api/queues/payments", None, None).status == 404);
    let topics = get(&server, "/api/topics");
    assert_eq!(topics["diverts"][0]["name"], "eu", "{topics}");
    drop((live, p, s, _c));
    server.stop_keeping_data();
    config.data_dir = dir;
    let server = start_with(config);
    let (_c, s) = connect(&server);
    let queue = s.create_consumer(&Destination::queue("eu-orders")).unwrap();
    for n in ["1", "3"] {
        let m = next(&queue);
        assert_eq!(m.body_text(), Some(n));
        let from = m.property("HeraldDivertedFrom").and_then(|v| v.as_str());
        assert_eq!(from, Some("topic://sales.eu"));
        assert_eq!(m.destination(), Some(&Destination::queue("eu-orders")));
    }
    assert_nothing(&queue);
    let audited = s.create_consumer(&Destination::queue("audited")).unwrap();
    assert_eq!(next(&audited).body_text(), Some("pay"));
}

#[test]
fn diverts_are_changed_through_the_api_and_a_loop_is_refused() {
    let dir = temp_dir("diverts-api");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("herald.toml");
    std::fs::write(&file, "# diverts come and go through the API\n").unwrap();
    let server = from_file(&file);
    let put = |name: &str, body: serde_json::Value| {
        call(
            &server,
            "PUT",
            &format!("/api/diverts/{name}"),
            Some(body),
            None,
        )
    };
    let a = put(
        "ab",
        serde_json::json!({"from": "queue://a", "to": "queue://b"}),
    );
    assert_eq!(a.status, 200, "{}", a.body);
    let (_c, s) = connect(&server);
    s.create_producer(&Destination::queue("a"))
        .unwrap()
        .send_with_receipt(Message::text("x"))
        .unwrap();
    assert_eq!(get(&server, "/api/queues/b")["depth"], 1);
    // b -> a would close a loop: refused, naming it; nothing changes.
    let a = put(
        "ba",
        serde_json::json!({"from": "queue://b", "to": "queue://a"}),
    );
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(a.error().contains("loop"), "{}", a.body);
    let a = put(
        "bad",
        serde_json::json!({"from": "queue://a", "to": "queue://c", "selector": "x = = 1"}),
    );
    assert!(a.error().contains("selector"), "{}", a.body);
    let a = put("bad", serde_json::json!({"from": "queue://a"}));
    assert_eq!(a.status, 400, "{}", a.body);
    let listed = get(&server, "/api/diverts");
    assert_eq!(listed["diverts"].as_array().unwrap().len(), 1, "{listed}");
    assert!(std::fs::read_to_string(&file)
        .unwrap()
        .contains("[[diverts]]"));
    let a = call(&server, "DELETE", "/api/diverts/ab", None, None);
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(
        call(&server, "DELETE", "/api/diverts/ab", None, None).status,
        404
    );
    assert!(get(&server, "/api/diverts")["diverts"]
        .as_array()
        .unwrap()
        .is_empty());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_paging_queue_holds_its_overflow_on_disk_in_order_and_across_a_restart() {
    const N: i64 = 2000;
    let mut config = test_config();
    let mut big = rule("queue://big");
    big.max_size_bytes = Some(200_000);
    big.full_policy = Some(FullPolicy::Page);
    config.addresses = vec![big];
    let dir = config.data_dir.clone();
    let server = start_with(config.clone());
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("big")).unwrap();
    let other = s.create_producer(&Destination::queue("other")).unwrap();
    let body = "p".repeat(1000);
    for n in 0..N {
        let m = Message::text(body.as_str())
            .with_property("n", n)
            .persistent();
        p.send_with_receipt(m).unwrap();
        if n % 100 == 0 {
            // Nobody else is held back meanwhile.
            other.send_with_receipt(Message::text("o")).unwrap();
        }
    }
    let q = get(&server, "/api/queues/big");
    assert_eq!(q["depth"], N, "{q}");
    let paged = q["paged"].as_u64().unwrap();
    assert!(paged >= 1500, "{q}");
    assert!(q["bytes"].as_u64().unwrap() < 500_000, "memory held: {q}");
    assert_eq!(q["settings"]["full_policy"], "page");
    assert!(q["paged_bytes"].as_u64().unwrap() > paged * 1000, "{q}");
    drop((p, other, s, _c));
    server.stop_keeping_data();
    config.data_dir = dir;
    let server = start_with(config);
    let q = get(&server, "/api/queues/big");
    assert_eq!(q["depth"], N, "every receipted message is back: {q}");
    assert!(
        q["paged"].as_u64().unwrap() >= 1500,
        "paged again as it was kept: {q}"
    );
    let (_c, s) = connect(&server);
    let consumer = s.create_consumer(&Destination::queue("big")).unwrap();
    for n in 0..N {
        let m = next(&consumer);
        assert_eq!(
            m.property("n").and_then(|v| v.as_i64()),
            Some(n),
            "in order, once"
        );
    }
    assert_nothing(&consumer);
    let q = get(&server, "/api/queues/big");
    assert_eq!(
        (q["depth"].as_u64(), q["paged"].as_u64()),
        (Some(0), Some(0)),
        "{q}"
    );
}

#[test]
fn by_default_a_queue_over_the_servers_memory_bound_pages_and_its_publisher_goes_on() {
    let mut config = test_config();
    config.queues.max_memory_bytes = 1_000_000;
    let server = start_with(config);
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("deep")).unwrap();
    let body = "d".repeat(20_000);
    for n in 0..150 {
        let m = Message::text(body.as_str()).with_property("n", n);
        p.send_with_receipt(m).unwrap();
        // The queues are weighed ten times a second.
        std::thread::sleep(Duration::from_millis(2));
    }
    let q = get(&server, "/api/queues/deep");
    assert!(q["paged"].as_u64().unwrap() > 0, "{q}");
    assert_eq!(q["depth"], 150, "{q}");
    let consumer = s.create_consumer(&Destination::queue("deep")).unwrap();
    for n in 0..150 {
        let m = next(&consumer);
        assert_eq!(m.property("n").and_then(|v| v.as_i64()), Some(n));
    }
}

#[test]
fn a_message_paged_while_its_consumer_waits_with_credit_reaches_it() {
    // A consumer holding the one message the queue keeps in memory: the
    // next one is paged, and read back at once for the credit it has left.
    let mut config = test_config();
    let mut one = rule("queue://one");
    one.max_messages = Some(1);
    config.addresses = vec![one];
    let server = start_with(config);
    let (_c, s) = connect(&server);
    let c = factory(&server).create_connection().unwrap();
    let held = c.create_session(AckMode::Client).unwrap();
    let consumer = held.create_consumer(&Destination::queue("one")).unwrap();
    let p = s.create_producer(&Destination::queue("one")).unwrap();
    for n in 0..3 {
        p.send_with_receipt(Message::text(n.to_string())).unwrap();
    }
    for n in 0..3 {
        assert_eq!(next(&consumer).body_text(), Some(n.to_string().as_str()));
    }
    assert!(get(&server, "/api/queues/one")["paged"].as_u64() == Some(0));
}

#[test]
fn a_transaction_commits_into_a_paging_queue_at_its_message_limit() {
    let mut config = test_config();
    config.queues.max_messages = 3;
    let server = start_with(config);
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("tx")).unwrap();
    for n in 0..3 {
        p.send_with_receipt(Message::text(n.to_string())).unwrap();
    }
    let c = factory(&server).create_connection().unwrap();
    let t = c.create_session(AckMode::Transacted).unwrap();
    let out = t.create_producer(&Destination::queue("tx")).unwrap();
    for n in 3..6 {
        out.send(Message::text(n.to_string())).unwrap();
    }
    t.commit().unwrap();
    assert_eq!(get(&server, "/api/queues/tx")["paged"], 3);
    let consumer = s.create_consumer(&Destination::queue("tx")).unwrap();
    for n in 0..6 {
        assert_eq!(next(&consumer).body_text(), Some(n.to_string().as_str()));
    }
}

#[test]
fn browsers_and_the_management_interface_see_paged_messages_and_take_none() {
    let mut config = test_config();
    let mut five = rule("queue://browsed");
    five.max_messages = Some(5);
    config.addresses = vec![five];
    let server = start_with(config);
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("browsed")).unwrap();
    for n in 0..40 {
        p.send_with_receipt(Message::text(format!("m{n}")).with_property("n", n))
            .unwrap();
    }
    assert_eq!(get(&server, "/api/queues/browsed")["paged"], 35);
    let browsed = |selector: &str| -> Vec<i64> {
        let browser = s
            .create_browser(&Destination::queue("browsed"), selector)
            .unwrap();
        let found = browser.messages().unwrap();
        found
            .iter()
            .map(|m| m.property("n").and_then(|v| v.as_i64()).unwrap())
            .collect()
    };
    assert_eq!(browsed(""), (0..40).collect::<Vec<_>>());
    assert_eq!(browsed("n >= 30"), (30..40).collect::<Vec<_>>());
    // A page of them from the management interface, past the memory's.
    let page = get(&server, "/api/queues/browsed/messages?offset=20&limit=3");
    assert_eq!(page["total"], 40, "{page}");
    let rows: Vec<(&str, &str)> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["body"]["text"].as_str().unwrap(),
                m["state"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(rows, [("m20", "paged"), ("m21", "paged"), ("m22", "paged")]);
    let selected = get(
        &server,
        "/api/queues/browsed/messages?selector=n%20%3C%203&limit=2",
    );
    assert_eq!(selected["messages"].as_array().unwrap().len(), 2);
    // Nothing was taken: a consumer gets every one, in order.
    let consumer = s.create_consumer(&Destination::queue("browsed")).unwrap();
    for n in 0..40 {
        assert_eq!(
            next(&consumer).property("n").and_then(|v| v.as_i64()),
            Some(n)
        );
    }
}

#[test]
fn a_last_value_replaces_a_paged_one_and_one_in_memory_once_paging_starts() {
    let mut config = test_config();
    let mut ticks = rule("queue://ticks.*");
    ticks.last_value_key = Some("ticker".into());
    ticks.max_messages = Some(2);
    // Read back one at a time: each is delivered before the next is read.
    ticks.max_size_bytes = Some(100);
    config.addresses = vec![ticks];
    let server = start_with(config.clone());
    let (_c, s) = connect(&server);
    // A1 waits in memory and the rest page: A2 replaces A1 at once, and
    // A3 and B2 the A2 and B1 in the page files as they are read back.
    let sends = [("A", 1), ("B", 1), ("A", 2), ("C", 1), ("A", 3), ("B", 2)];
    for queue in ["ticks.a", "ticks.b"] {
        let p = s.create_producer(&Destination::queue(queue)).unwrap();
        for (ticker, n) in sends {
            let m = Message::text(format!("{ticker}{n}")).with_property("ticker", ticker);
            p.send_with_receipt(m.persistent()).unwrap();
        }
    }
    let latest = ["C1", "A3", "B2"];
    let drain = |s: &herald_client::Session, queue: &str| -> Vec<String> {
        let consumer = s.create_consumer(&Destination::queue(queue)).unwrap();
        let got = (0..3)
            .map(|_| next(&consumer).body_text().unwrap().to_owned())
            .collect();
        assert!(consumer
            .receive(Duration::from_millis(200))
            .unwrap()
            .is_none());
        got
    };
    assert_eq!(drain(&s, "ticks.a"), latest);
    drop((s, _c));
    server.stop_keeping_data();
    // After a restart, the one replaced while paged has ended, and the
    // other queue's come back replaced the same way.
    let server = start_with(config);
    let (_c, s) = connect(&server);
    assert_eq!(drain(&s, "ticks.b"), latest);
    let none = s.create_consumer(&Destination::queue("ticks.a")).unwrap();
    assert!(none.receive(Duration::from_millis(200)).unwrap().is_none());
}
