//! Cluster mode: Herald nodes that share topics through a real Redis
//! (Debian's redis-server, started here on a free port).

use std::sync::atomic::Ordering;
use std::time::Duration;

use herald_client::{AckMode, Consumer, ConsumerOptions, Destination, Message, Session};
use herald_server::auth::hash_password;
use herald_server::config::{RoleEntry, UserEntry};
use herald_tests::*;
use serde_json::json;

fn node(redis: &Redis, id: &str) -> TestServer {
    start_with(cluster_config(redis, id))
}

/// Publishes on `topic` from `from` until `consumer` (subscribed on
/// another node) hears it: that node has told Redis of its subscriptions.
fn heard(from: &Session, topic: &str, consumer: &Consumer) {
    let producer = from.create_producer(&Destination::topic(topic)).unwrap();
    until_heard(&producer, || Message::text("probe"), &[consumer]);
}

/// The texts a consumer receives until it is quiet for a moment.
fn texts(consumer: &Consumer) -> Vec<String> {
    let mut got = Vec::new();
    while let Some(m) = consumer.receive(Duration::from_millis(300)).unwrap() {
        got.push(m.body_text().unwrap_or_default().to_owned());
    }
    got
}

#[test]
fn topics_reach_subscribers_on_every_node_once_with_wildcards_and_selectors() {
    let redis = Redis::start();
    let (a, b, c) = (node(&redis, "a"), node(&redis, "b"), node(&redis, "c"));
    let (_ca, on_a) = connect(&a);
    let (_cb, on_b) = connect(&b);
    let exact = subscribe(&on_b, "sales.eu.phones");
    let star = subscribe(&on_b, "sales.*.phones");
    // Overlaps `sales.*.phones`: Redis sends a message once for each
    // matching glob, and the node must route it once.
    let hash = subscribe(&on_b, "sales.#");
    let selected = on_b
        .create_consumer_with(
            &Destination::topic("sales.#"),
            ConsumerOptions::default().selector("units > 2"),
        )
        .unwrap();
    let local = subscribe(&on_a, "sales.#");
    let probe = subscribe(&on_b, "probe");
    heard(&on_a, "probe", &probe);
    while local.receive(Duration::from_millis(100)).unwrap().is_some() {}

    for (topic, units) in [
        ("sales.eu.phones", 1),
        ("sales.us.phones", 5),
        ("sales.eu.tv", 3),
        ("other.thing", 9),
    ] {
        let producer = on_a.create_producer(&Destination::topic(topic)).unwrap();
        producer
            .send_with_receipt(Message::text(topic).with_property("units", units))
            .unwrap();
    }
    assert_eq!(texts(&exact), ["sales.eu.phones"]);
    assert_eq!(texts(&star), ["sales.eu.phones", "sales.us.phones"]);
    assert_eq!(
        texts(&hash),
        ["sales.eu.phones", "sales.us.phones", "sales.eu.tv"]
    );
    assert_eq!(texts(&selected), ["sales.us.phones", "sales.eu.tv"]);
    // The publisher's own node delivers once, not again from Redis.
    assert_eq!(
        texts(&local),
        ["sales.eu.phones", "sales.us.phones", "sales.eu.tv"]
    );
    // Node c has no subscribers: Redis sends it nothing.
    let stats = &c.cluster().unwrap().stats;
    assert_eq!(stats.received.load(Ordering::Relaxed), 0);
    assert!(b.cluster().unwrap().stats.received.load(Ordering::Relaxed) >= 3);
    // Nor does b once its subscribers are gone.
    drop((exact, star, hash, selected, probe));
    let before = b.cluster().unwrap().stats.received.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(200));
    let producer = on_a
        .create_producer(&Destination::topic("sales.eu.phones"))
        .unwrap();
    producer.send_with_receipt(Message::text("late")).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let after = b.cluster().unwrap().stats.received.load(Ordering::Relaxed);
    assert_eq!(after, before, "b still hears topics nobody there wants");

    // Each node lists every node, itself marked, with where it listens;
    // one that stops leaves the list.
    let nodes = |on: &TestServer| {
        call(on, "GET", "/api/server", None, None).json()["cluster"]["nodes"].clone()
    };
    wait_until("a lists a, b and c with their admin addresses", || {
        let list = nodes(&a);
        let ids: Vec<_> = list
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["id"].clone())
            .collect();
        ids == [json!("a"), json!("b"), json!("c")]
            && list
                .as_array()
                .unwrap()
                .iter()
                .all(|n| n["admin"].is_string())
    });
    let list = nodes(&a);
    let b_row = &list[1];
    assert_eq!(b_row["this"], false, "{list}");
    assert_eq!(list[0]["this"], true, "{list}");
    assert_eq!(b_row["native"], json!(b.local_addr().to_string()), "{list}");
    assert_eq!(
        b_row["admin"],
        json!(format!("http://{}/", b.admin_addr().unwrap())),
        "{list}"
    );
    assert!(b_row["last_seen_s"].as_u64().unwrap() < 30, "{list}");
    assert!(b_row["started"].as_str().unwrap().ends_with('Z'), "{list}");
    c.shutdown();
    wait_until("a no longer lists c", || {
        nodes(&a).as_array().unwrap().len() == 2
    });
}

#[test]
fn nodes_reconnect_to_a_restarted_redis_and_say_so() {
    let mut redis = Redis::start();
    let (a, b) = (node(&redis, "a"), node(&redis, "b"));
    let (_ca, on_a) = connect(&a);
    let (_cb, on_b) = connect(&b);
    let feed = subscribe(&on_b, "feed");
    heard(&on_a, "feed", &feed);
    let stopped = redis.stop();
    let linked = |n: &TestServer| n.cluster().unwrap().stats.connected();
    // A publish while Redis is away finds the link down.
    let producer = on_a.create_producer(&Destination::topic("feed")).unwrap();
    wait_until("the nodes notice Redis is gone", || {
        let _ = producer.send(Message::text("lost").non_persistent());
        !linked(&a) && !linked(&b)
    });
    // Meanwhile what needs no Redis flows: a topic between one node's
    // clients (receipted), a temporary queue.
    let local = subscribe(&on_a, "local.feed");
    publish(&on_a, "local.feed", "here");
    assert_eq!(next(&local).body_text(), Some("here"));
    let temp = on_a.create_temporary_queue();
    let temp_consumer = on_a.create_consumer(&temp).unwrap();
    on_a.send(&temp, Message::text("to me").persistent())
        .unwrap();
    assert!(temp_consumer.receive(PATIENCE).unwrap().is_some());
    // A persistent send to a shared queue fails soon, saying why.
    let started = std::time::Instant::now();
    let e = on_a
        .create_producer(&Destination::queue("shared"))
        .unwrap()
        .send_with_receipt(Message::text("not kept").persistent())
        .unwrap_err();
    assert!(e.to_string().contains("Redis"), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    eprintln!("while Redis is away: {e} (after {:?})", started.elapsed());
    let health = call(&a, "GET", "/api/health", None, None);
    assert_eq!(health.status, 503, "{}", health.body);
    assert_eq!(health.json()["reasons"][0]["reason"], "redis_unreachable");
    assert_eq!(call(&a, "GET", "/api/ready", None, None).status, 503);
    redis = stopped.start();
    wait_until("the nodes reconnect", || linked(&a) && linked(&b));
    wait_until("health is ok again", || {
        call(&a, "GET", "/api/health", None, None).status == 200
    });
    // Subscriptions are made again on the new Redis, and messages cross.
    heard(&on_a, "feed", &feed);
    drop(redis);
}

#[test]
fn a_node_sends_redis_only_topics_another_node_subscribes_to() {
    let redis = Redis::start();
    let (a, b) = (node(&redis, "a"), node(&redis, "b"));
    let (_ca, on_a) = connect(&a);
    let (_cb, on_b) = connect(&b);
    let wanted = subscribe(&on_b, "wanted.*");
    heard(&on_a, "wanted.probe", &wanted);
    let sent = || a.cluster().unwrap().stats.published.load(Ordering::Relaxed);
    let before = sent();
    // Nobody elsewhere subscribes to `local.only`: it stays on node a.
    let local = subscribe(&on_a, "local.only");
    let producer = on_a
        .create_producer(&Destination::topic("local.only"))
        .unwrap();
    for _ in 0..20 {
        producer.send_with_receipt(Message::text("here")).unwrap();
    }
    assert_eq!(texts(&local).len(), 20);
    assert_eq!(sent(), before, "a sent Redis topics nobody elsewhere wants");
    // Once b subscribes, a hears of it and sends.
    let now_wanted = subscribe(&on_b, "local.*");
    heard(&on_a, "local.only", &now_wanted);
    assert!(sent() > before);
}

#[test]
fn a_node_whose_id_a_running_node_has_is_refused_at_start_and_a_restart_is_not() {
    let redis = Redis::start();
    let (a, b) = (node(&redis, "a"), node(&redis, "b"));
    let (_ca, on_a) = connect(&a);
    let (_cb, on_b) = connect(&b);
    // a hears its inbox once b's messages reach it.
    heard(&on_b, "id.probe", &subscribe(&on_a, "id.probe"));
    let e = herald_server::Server::start(cluster_config(&redis, "a"))
        .err()
        .expect("a second node 'a' is refused")
        .to_string();
    assert!(
        e.contains("cluster.node_id 'a' is in use") && e.contains("herald:in:{a}"),
        "{e}"
    );
    // Stopped (or dead: its connections close), its id is free again.
    drop(on_a);
    a.shutdown();
    let again = node(&redis, "a");
    let (_c, on_again) = connect(&again);
    heard(&on_b, "id.again", &subscribe(&on_again, "id.again"));
}

/// Keys of a build from before the Redis Cluster key layout: its nodes
/// and this build's would not see each other's queues, so a node of this
/// build refuses to start until they are renamed.
#[test]
fn a_redis_that_holds_an_older_builds_keys_stops_the_start_until_they_are_renamed() {
    let redis = Redis::start();
    redis.command(&[b"SADD", b"herald:topics", b"orders.eu"]);
    redis.command(&[b"INCR", b"herald:durables:epoch"]);
    let e = herald_server::Server::start(cluster_config(&redis, "a"))
        .err()
        .expect("refused")
        .to_string();
    assert!(
        e.contains("an older Herald build wrote (herald:durables:epoch, herald:topics)")
            && e.contains("docs/operations.md"),
        "{e}"
    );
    // Renamed as docs/operations.md says: the node starts, and goes on
    // from what the older build kept.
    for key in ["topics", "durables:epoch"] {
        let (from, to) = (format!("herald:{key}"), format!("herald:{{herald}}:{key}"));
        assert_eq!(
            redis.command(&[b"RENAME", from.as_bytes(), to.as_bytes()]),
            "+OK"
        );
    }
    let a = node(&redis, "a");
    let (_c, on_a) = as_client(&a, "app");
    on_a.create_durable_subscriber(&Destination::topic("orders.#"), "kept")
        .unwrap();
    let epoch = &b"herald:{herald}:durables:epoch"[..];
    assert_eq!(redis.command(&[b"INCRBY", epoch, b"0"]), ":2");
}

/// Two clusters of different `cluster.key_prefix` share one Redis apart:
/// a queue of one name is two queues, a topic does not cross, and each
/// lists only its own nodes. A node names the other clusters it found
/// running, so that one given the wrong prefix is noticed.
#[test]
fn clusters_of_different_key_prefixes_share_one_redis_apart() {
    let redis = Redis::start();
    let a = node(&redis, "a");
    let nodes = |on: &TestServer| {
        let server = call(on, "GET", "/api/server", None, None).json();
        let list = server["cluster"]["nodes"].as_array().unwrap().clone();
        list.iter().map(|n| n["id"].clone()).collect::<Vec<_>>()
    };
    wait_until("a has announced itself", || nodes(&a) == [json!("a")]);
    let mut config = cluster_config(&redis, "b");
    config.cluster.key_prefix = "other".into();
    let b = start_with(config);
    let server = call(&b, "GET", "/api/server", None, None).json();
    assert_eq!(server["cluster"]["key_prefix"], "other", "{server}");
    assert_eq!(
        server["cluster"]["other_clusters"],
        json!([{"key_prefix": "herald", "nodes": ["a"]}]),
        "{server}"
    );

    let (_ca, on_a) = connect(&a);
    let (_cb, on_b) = connect(&b);
    let jobs = Destination::queue("jobs");
    let (for_a, for_b) = (
        on_a.create_consumer(&jobs).unwrap(),
        on_b.create_consumer(&jobs).unwrap(),
    );
    let news_on_b = subscribe(&on_b, "news");
    for (session, text) in [(&on_a, "to a"), (&on_b, "to b")] {
        let producer = session.create_producer(&jobs).unwrap();
        producer
            .send_with_receipt(Message::text(text).persistent())
            .unwrap();
    }
    for (consumer, text) in [(&for_a, "to a"), (&for_b, "to b")] {
        let m = consumer.receive(Duration::from_secs(10)).unwrap().unwrap();
        assert_eq!(m.body_text(), Some(text));
        assert!(consumer
            .receive(Duration::from_millis(300))
            .unwrap()
            .is_none());
    }
    assert_eq!(redis.command(&[b"EXISTS", b"herald:q:{jobs}"]), ":1");
    assert_eq!(redis.command(&[b"EXISTS", b"other:q:{jobs}"]), ":1");
    publish(&on_a, "news", "a's");
    assert!(news_on_b
        .receive(Duration::from_millis(500))
        .unwrap()
        .is_none());
    wait_until("b lists itself alone", || nodes(&b) == [json!("b")]);
    assert_eq!(nodes(&a), [json!("a")]);
}

/// A Redis user allowed its cluster's keys alone (an ACL, as when
/// clusters share a Redis): the node works; only the shared set of
/// prefixes is out of its reach, and other clusters go unlisted.
#[test]
fn a_node_whose_redis_user_may_touch_its_prefix_alone_works() {
    let redis = Redis::start();
    let acl = redis.command(&[b"ACL", b"SETUSER", b"default", b"resetkeys", b"~tenant:*"]);
    assert_eq!(acl, "+OK");
    let mut config = cluster_config(&redis, "a");
    config.cluster.key_prefix = "tenant".into();
    let a = start_with(config);
    let (_c, on_a) = connect(&a);
    let jobs = Destination::queue("jobs");
    let consumer = on_a.create_consumer(&jobs).unwrap();
    on_a.create_producer(&jobs)
        .unwrap()
        .send_with_receipt(Message::text("kept").persistent())
        .unwrap();
    let m = consumer.receive(Duration::from_secs(10)).unwrap().unwrap();
    assert_eq!(m.body_text(), Some("kept"));
    let server = call(&a, "GET", "/api/server", None, None).json();
    assert_eq!(server["cluster"]["other_clusters"], json!([]), "{server}");
    redis.command(&[b"ACL", b"SETUSER", b"default", b"~*"]);
    assert_eq!(redis.command(&[b"EXISTS", b"herald-prefixes"]), ":0");
}

#[test]
fn garbage_from_redis_is_ignored_and_the_node_goes_on() {
    let redis = Redis::start();
    let (a, b) = (node(&redis, "a"), node(&redis, "b"));
    let (_ca, on_a) = connect(&a);
    let (_cb, on_b) = connect(&b);
    let feed = subscribe(&on_b, "feed");
    heard(&on_a, "feed", &feed);
    // A payload too short for its header, an origin longer than the
    // payload, a header with a block that is no message, an empty one,
    // and a huge one of noise.
    let mut no_message = vec![1, b'x'];
    no_message.extend_from_slice(&1u64.to_be_bytes());
    no_message.extend_from_slice(b"not a message block");
    for payload in [
        &b"\x05ab"[..],
        &[200, 1, 2, 3][..],
        &no_message[..],
        &[][..],
        &vec![0xA5; 4 << 20][..],
    ] {
        redis.command(&[b"PUBLISH", b"herald:in:{b}", payload]);
    }
    // A real message from node a, then nothing else: the garbage reached
    // nobody, and the node still routes.
    on_a.create_producer(&Destination::topic("feed"))
        .unwrap()
        .send_with_receipt(Message::text("after"))
        .unwrap();
    assert_eq!(texts(&feed), ["after"]);
    assert!(b.cluster().unwrap().stats.connected_in.is_up());
}

/// A node of a cluster in strict mode whose logins are required, with one
/// administrator, `root`, in its config file.
fn secured_node(redis: &Redis, id: &str) -> TestServer {
    let mut config = cluster_config(redis, id);
    config.topics.strict = true;
    config.topics.declared = vec!["sales".into()];
    config.auth.required = true;
    config.auth.failed_login_delay_ms = 10;
    let everything = vec!["#".to_owned()];
    config.auth.roles.insert(
        "root".into(),
        RoleEntry {
            publish: everything.clone(),
            consume: everything,
            admin: true,
            ..RoleEntry::default()
        },
    );
    config.auth.users.push(UserEntry {
        name: "root".into(),
        password: hash_password("secret").unwrap(),
        roles: vec!["root".into()],
    });
    start_with(config)
}

/// Publishes on `topic` as `user` (password `secret`) through `server`;
/// the error if refused.
fn publish_as(server: &TestServer, user: &str, topic: &str) -> Result<(), String> {
    let factory = factory(server).with_credentials(user, "secret");
    let c = factory.create_connection().map_err(|e| e.to_string())?;
    let s = c.create_session(AckMode::Auto).map_err(|e| e.to_string())?;
    let p = s
        .create_producer(&Destination::topic(topic))
        .map_err(|e| e.to_string())?;
    p.send_with_receipt(Message::text("x"))
        .map_err(|e| e.to_string())
}

#[test]
fn users_roles_and_declared_topics_changed_through_one_node_apply_on_every_node() {
    let redis = Redis::start();
    let (a, b) = (secured_node(&redis, "a"), secured_node(&redis, "b"));
    let root = Some(("root", "secret"));
    let put = |node: &TestServer, path: &str, body: serde_json::Value| {
        call(node, "PUT", path, Some(body), root)
    };
    let role = json!({"publish": ["topic:orders.#"], "consume": ["topic:orders.#"]});
    assert_eq!(put(&a, "/api/roles/traders", role).status, 200);
    let ann = json!({"password": hash_password("secret").unwrap(), "roles": ["traders"]});
    assert_eq!(put(&a, "/api/users/ann", ann).status, 200);
    // Bodies that are not what the routes take.
    for (path, body) in [
        (
            "/api/users/x",
            json!({"password": "h", "roles": [], "extra": 1}),
        ),
        ("/api/users/x", json!({"roles": ["traders"]})),
        ("/api/roles/r", json!({"publish": "not a list"})),
        ("/api/roles/r", json!([1, 2])),
    ] {
        let a = put(&b, path, body);
        assert_eq!(a.status, 400, "{path}: {}", a.body);
    }
    // A password given as such is hashed here; the user logs in anywhere.
    let plain = put(&b, "/api/users/x", json!({"password": "secret"}));
    assert_eq!(plain.status, 200, "{}", plain.body);
    wait_until("a knows x", || {
        publish_as(&a, "x", "sales").is_err_and(|e| e.contains("lacks"))
    });
    // A user whose role nobody defined is refused before anything changes.
    let stray = json!({"password": hash_password("x").unwrap(), "roles": ["nobody"]});
    let refused = put(&b, "/api/users/stray", stray);
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert!(refused.error().contains("nobody"), "{}", refused.body);

    // b applies a's change without a restart: ann logs in there; her
    // topic is not declared yet.
    wait_until("b knows ann", || {
        publish_as(&b, "ann", "orders.new").is_err_and(|e| e.contains("declared"))
    });
    let declared = call(
        &a,
        "POST",
        "/api/topics",
        Some(json!({"name": "orders.new"})),
        root,
    );
    assert_eq!(declared.status, 200, "{}", declared.body);
    wait_until("b has orders declared", || {
        publish_as(&b, "ann", "orders.new").is_ok()
    });
    // Her role's permissions hold on b too.
    let refused = publish_as(&b, "ann", "sales").unwrap_err();
    assert!(!refused.contains("declared"), "{refused}");
    let listed = call(&b, "GET", "/api/users", None, root).json();
    assert!(
        listed["users"]
            .as_array()
            .unwrap()
            .iter()
            .any(|u| u["name"] == "ann" && u["source"] == "cluster"),
        "{listed}"
    );

    // A role in use stays; a user removed on b can no longer log in on a.
    let in_use = call(&b, "DELETE", "/api/roles/traders", None, root);
    assert_eq!(in_use.status, 409, "{}", in_use.body);
    assert_eq!(call(&b, "DELETE", "/api/users/ann", None, root).status, 200);
    wait_until("a forgets ann", || {
        publish_as(&a, "ann", "orders.new").is_err_and(|e| !e.contains("declared"))
    });
    let undeclared = call(&b, "DELETE", "/api/topics/orders.new", None, root);
    assert_eq!(undeclared.status, 200, "{}", undeclared.body);
    wait_until("a no longer declares orders.new", || {
        publish_as(&a, "root", "orders.new").is_err_and(|e| e.contains("declared"))
    });
    assert_eq!(
        publish_as(&a, "root", "sales"),
        Ok(()),
        "the file's topics stay"
    );

    // A single node keeps its users in its config file.
    let single = start();
    let a = call(
        &single,
        "PUT",
        "/api/users/ann",
        Some(json!({"password": "x"})),
        None,
    );
    assert_eq!(a.status, 409, "{}", a.body);
}

/// How many durable and shared subscriptions Redis's registry holds, as
/// Redis answers it (`:N`).
fn registered(redis: &Redis) -> String {
    redis.command(&[b"HLEN", b"herald:{herald}:durables"])
}

/// A STOMP durable subscription's RECEIPT comes once Redis's registry has
/// it, and an UNSUBSCRIBE's that deletes it once the entry is gone, as
/// the native protocol's do: what is sent after either, through any
/// node, is kept for the subscription or is not.
#[test]
fn a_stomp_durable_subscription_and_its_deletion_are_in_redis_by_their_receipts() {
    use herald_protocol::stomp::StompFrame;
    let redis = Redis::start();
    let a = node(&redis, "a");
    for round in 0..5 {
        let client_id = format!("stomp-{round}");
        let mut s = StompClient::connected(&a, &[("client-id", &client_id)]);
        s.send(
            &StompFrame::new("SUBSCRIBE")
                .header("id", "d")
                .header("destination", "/topic/orders.#")
                .header("activemq.subscriptionName", "kept")
                .header("receipt", "made"),
        );
        s.expect("RECEIPT");
        assert_eq!(registered(&redis), ":1", "round {round}: made");
        s.send(
            &StompFrame::new("UNSUBSCRIBE")
                .header("id", "d")
                .header("activemq.subscriptionName", "kept")
                .header("receipt", "gone"),
        );
        s.expect("RECEIPT");
        assert_eq!(registered(&redis), ":0", "round {round}: deleted");
    }
}

/// An MQTT persistent session's SUBACK comes once Redis's registry has its
/// durable subscription, and its UNSUBACK once the entry is gone: what is
/// published after either, through any node, is kept for the
/// subscription or is not. A shared subscription's SUBACK comes once its
/// group is registered; the group ends when its last member anywhere
/// leaves, which the cluster learns after the UNSUBACK.
#[test]
fn mqtt_subacks_and_unsubacks_come_once_redis_has_the_change() {
    use herald_protocol::mqtt::{Packet, Properties, QoS, Unsubscribe, Version};
    let redis = Redis::start();
    let a = node(&redis, "a");
    let unsubscribe = |c: &mut MqttClient, filter: &str| {
        let packet_id = c.packet_id();
        c.send(&Packet::Unsubscribe(Unsubscribe {
            packet_id,
            properties: Properties::default(),
            filters: vec![filter.to_owned()],
        }));
        match c.read() {
            Some(Packet::UnsubAck(ack)) => assert_eq!(ack.packet_id, packet_id),
            other => panic!("expected UNSUBACK, got {other:?}"),
        }
    };
    for round in 0..5 {
        let mut connect = MqttClient::connect_packet(Version::V311, &format!("kept-{round}"));
        connect.clean = false;
        let (mut c, ack) = MqttClient::connect_with(&a, connect);
        assert_eq!(ack.code, 0);
        c.subscribe("orders/#", QoS::AtLeastOnce);
        assert_eq!(registered(&redis), ":1", "round {round}: subscribed");
        unsubscribe(&mut c, "orders/#");
        assert_eq!(registered(&redis), ":0", "round {round}: unsubscribed");

        let mut s = MqttClient::connected(&a, Version::V5, &format!("member-{round}"));
        s.subscribe("$share/pickers/orders/#", QoS::AtLeastOnce);
        assert_eq!(registered(&redis), ":1", "round {round}: the group");
        // Ended by its last member here at once, not when this node's
        // mark in it would expire (cluster.claim_idle_ms, 30 s), even when
        // made and left within one pass of the queue reader.
        unsubscribe(&mut s, "$share/pickers/orders/#");
        wait_until("the group ends with its last member", || {
            registered(&redis) == ":0"
        });
    }
}

/// An AMQP durable subscription's attach is answered once Redis's
/// registry has it, and a link closed for good deletes it, answered once
/// the registry no longer has it, as the native protocol's RECEIPTs are.
/// A drain asked for while the attach waits is answered after it.
#[test]
fn an_amqp_durable_subscriptions_attach_and_detach_come_once_redis_has_the_change() {
    use herald_protocol::amqp::performative::Detach;
    use herald_protocol::amqp::Performative;
    let redis = Redis::start();
    let a = node(&redis, "a");
    for round in 0..5 {
        let mut c = AmqpClient::opened(&a, &format!("amqp-kept-{round}"));
        c.together(|c| {
            c.attach_receiver_from(0, durable_source("topic://orders"));
            c.flow(0, 0, 3, true);
        });
        assert!(matches!(
            c.next(false),
            Got::Amqp(0, Performative::Attach(_))
        ));
        assert_eq!(registered(&redis), ":1", "round {round}: made");
        match c.next(false) {
            Got::Amqp(0, Performative::Flow(f)) => {
                assert!(f.drain, "round {round}: {f:?}");
                assert_eq!((f.delivery_count, f.link_credit), (Some(3), Some(0)));
            }
            other => panic!("round {round}: the drain's answer, not {other:?}"),
        }
        c.perform(
            0,
            Performative::Detach(Detach {
                handle: 0,
                closed: true,
                error: None,
            }),
        );
        match c.next(false) {
            Got::Amqp(0, Performative::Detach(d)) => assert!(d.closed && d.error.is_none()),
            other => panic!("expected a detach, got {other:?}"),
        }
        assert_eq!(registered(&redis), ":0", "round {round}: deleted");
    }
}
