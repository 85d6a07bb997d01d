//! Cluster mode through Redis Sentinel: nodes find the primary through the
//! sentinels, follow it through a failover and wait for a replica before a
//! receipt; a configuration that cannot work (no sentinel answers, an
//! unknown service, a password Redis refuses) stops the start. Debian's
//! redis-server, in its normal and sentinel modes, on free ports.

use std::time::{Duration, Instant};

use herald_client::{Destination, Message};
use herald_server::Server;
use herald_tests::*;

/// A primary, one replica and three sentinels.
struct Ha {
    sentinels: Vec<Sentinel>,
    /// The first replica (the primary after a failover).
    replica: Redis,
    primary: Option<Redis>,
}

impl Ha {
    fn start(dir: &std::path::Path) -> Ha {
        let primary = Redis::start();
        let replica = Redis::replica_of(&primary);
        wait_until("the replica has caught up", || {
            primary.command(&[b"WAIT", b"1", b"100"]) == ":1"
        });
        let sentinels = (0..3).map(|_| Sentinel::watching(&primary, dir)).collect();
        Ha {
            sentinels,
            replica,
            primary: Some(primary),
        }
    }

    fn url(&self, service: &str) -> String {
        let addrs: Vec<String> = self.sentinels.iter().map(Sentinel::addr).collect();
        format!("redis+sentinel://{}/{service}", addrs.join(","))
    }
}

fn node(ha: &Ha, id: &str) -> TestServer {
    let mut config = test_config();
    config.cluster.redis = ha.url("herald");
    config.cluster.node_id = id.into();
    start_with(config)
}

/// Numbered persistent message `n`.
fn numbered(n: i64) -> Message {
    Message::text("m").with_property("n", n).persistent()
}

/// A failover under way: both nodes are to follow the primary to `new`
/// within `within`.
struct Failover<'a> {
    nodes: [&'a TestServer; 2],
    new: &'a str,
    within: Duration,
    /// What it means if no receipt comes within `within`.
    stalled: &'a str,
}

impl Failover<'_> {
    /// Sends numbered messages from `next` on until one is receipted (the
    /// sends before fail or wait: their outcome is unknown), waits until
    /// both nodes use the new primary, sends `more` after it, and checks
    /// that every message from the first receipted on arrives. Returns
    /// how long after `since` both nodes used the new primary.
    fn receipted_from_then_on(
        &self,
        producer: &herald_client::Producer,
        consumer: &herald_client::Consumer,
        mut next: i64,
        more: i64,
        since: Instant,
    ) -> Duration {
        let first = loop {
            assert!(since.elapsed() < self.within, "{}", self.stalled);
            next += 1;
            if producer.send_with_receipt(numbered(next - 1)).is_ok() {
                break next - 1;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        wait_until("both nodes use the new primary", || {
            self.nodes.iter().all(|n| primary_of(n) == self.new)
        });
        let failover = since.elapsed();
        let last = next + more - 1;
        for k in next..=last {
            producer.send_with_receipt(numbered(k)).unwrap();
        }
        let mut got = std::collections::BTreeSet::new();
        while !got.contains(&last) {
            let m = consumer.receive(PATIENCE).unwrap().expect("delivered");
            got.insert(m.property("n").and_then(|v| v.as_i64()).unwrap());
        }
        let missing: Vec<i64> = (first..=last).filter(|k| !got.contains(k)).collect();
        assert!(missing.is_empty(), "receipted and lost: {missing:?}");
        failover
    }
}

fn primary_of(server: &TestServer) -> String {
    let health = call(server, "GET", "/api/health", None, None).json();
    health["cluster"]["primary"]["addr"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn nodes_find_the_primary_through_the_sentinels_and_follow_a_failover() {
    let dir = temp_dir("sentinel");
    let mut ha = Ha::start(&dir);
    let old = format!("127.0.0.1:{}", ha.primary.as_ref().unwrap().port);
    let new = format!("127.0.0.1:{}", ha.replica.port);
    let (a, b) = (node(&ha, "a"), node(&ha, "b"));
    assert_eq!(primary_of(&a), old);
    let (_ca, on_a) = connect(&a);
    let (_cb, on_b) = connect(&b);
    let q = Destination::queue("ha");
    let consumer = on_b.create_consumer(&q).unwrap();
    let producer = on_a.create_producer(&q).unwrap();
    for n in 0..50 {
        producer.send_with_receipt(numbered(n)).unwrap();
    }
    for n in 0..50 {
        let m = consumer.receive(PATIENCE).unwrap().expect("delivered");
        assert_eq!(m.property("n").and_then(|v| v.as_i64()), Some(n));
    }

    // The primary dies; the sentinels promote the replica, and a new
    // replica joins it (receipts wait for one: cluster.min_replicas is 1
    // with Sentinel).
    drop(ha.primary.take());
    let started = Instant::now();
    let _spare = Redis::replica_of(&ha.replica);
    // Sends during the failover fail with an error (their outcome is
    // unknown) or wait; from the first receipted one on, every receipted
    // message arrives.
    let failover = Failover {
        nodes: [&a, &b],
        new: &new,
        within: Duration::from_secs(30),
        stalled: "no failover",
    }
    .receipted_from_then_on(&producer, &consumer, 50, 49, started);
    let health = call(&a, "GET", "/api/health", None, None).json();
    assert!(
        health["cluster"]["primary"]["since_ms"].as_u64() > Some(0),
        "{health}"
    );
    assert_eq!(health["cluster"]["primary"]["changes"], 1, "{health}");
    let metrics = call(&a, "GET", "/metrics", None, None).body;
    assert!(
        metrics.contains("herald_cluster_primary_changes_total 1"),
        "{metrics}"
    );
    eprintln!("failover: {} ms", failover.as_millis());
}

/// A primary that stops answering without closing its connections (its
/// process frozen, as a partition or a machine gone would look): the
/// sentinels promote the replica, and the nodes leave the frozen server
/// once a command or a PING goes unanswered for 5 s, and follow. Every
/// message receipted from then on arrives, and topics cross nodes again.
#[test]
fn a_primary_that_stops_answering_is_left_for_the_promoted_replica() {
    let dir = temp_dir("sentinel-frozen");
    let ha = Ha::start(&dir);
    let new = format!("127.0.0.1:{}", ha.replica.port);
    let (a, b) = (node(&ha, "a"), node(&ha, "b"));
    let (_ca, on_a) = connect(&a);
    let (_cb, on_b) = connect(&b);
    let q = Destination::queue("frozen");
    let consumer = on_b.create_consumer(&q).unwrap();
    let producer = on_a.create_producer(&q).unwrap();
    producer.send_with_receipt(numbered(0)).unwrap();
    assert!(consumer.receive(PATIENCE).unwrap().is_some());

    // Made before the fault, heard from a only once both subscriber
    // connections have left the frozen server.
    let heard = on_b.create_consumer(&Destination::topic("after")).unwrap();
    ha.primary.as_ref().unwrap().freeze();
    let started = Instant::now();
    let _spare = Redis::replica_of(&ha.replica);
    let failover = Failover {
        nodes: [&a, &b],
        new: &new,
        within: Duration::from_secs(60),
        stalled: "the nodes never left the frozen primary",
    }
    .receipted_from_then_on(&producer, &consumer, 1, 21, started);
    // Topics cross nodes again: both subscriber connections left the
    // frozen server too, and a node's interest written just before the
    // freeze (lost with it) is written again once its outbound thread
    // follows: within seconds; a loaded machine gets 40.
    let publisher = on_a.create_producer(&Destination::topic("after")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        publisher.send_with_receipt(Message::text("again")).unwrap();
        if heard.receive(Duration::from_millis(50)).unwrap().is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "topics never crossed again");
    }
    ha.primary.as_ref().unwrap().thaw();
    eprintln!("left the frozen primary after {} ms", failover.as_millis());
}

#[test]
fn a_sentinel_list_that_names_no_primary_stops_the_start_with_a_reason() {
    let dir = temp_dir("sentinel-bad");
    let ha = Ha::start(&dir);
    for (url, says) in [
        (
            "redis+sentinel://127.0.0.1:1,127.0.0.1:2/herald".to_owned(),
            "127.0.0.1:2",
        ),
        (ha.url("nosuchservice"), "no service named 'nosuchservice'"),
        (
            "redis+sentinel://127.0.0.1:1".to_owned(),
            "names no service",
        ),
    ] {
        let mut config = test_config();
        config.cluster.redis = url.clone();
        let e = Server::start(config).err().expect("refused").to_string();
        assert!(e.contains(says), "{url}: {e}");
    }
}

#[test]
fn a_receipt_waits_for_a_replica_and_fails_without_one() {
    let dir = temp_dir("sentinel-wait");
    let ha = Ha::start(&dir);
    let a = node(&ha, "a");
    let (_c, s) = connect(&a);
    let p = s
        .create_producer(&Destination::queue("replicated"))
        .unwrap();
    p.send_with_receipt(Message::text("kept twice").persistent())
        .unwrap();
    // The only replica goes: Redis can no longer confirm a second copy.
    let Ha { replica, .. } = ha;
    drop(replica);
    let e = p
        .send_with_receipt(Message::text("on the primary only").persistent())
        .unwrap_err();
    assert!(e.to_string().contains("min_replicas"), "{e}");
    // Health says why and the refusal is counted; the node stays ready
    // (non-persistent traffic goes on, and only a receipt learns that a
    // replica is back).
    let health = call(&a, "GET", "/api/health", None, None);
    assert_eq!(health.status, 503, "{}", health.body);
    let health = health.json();
    assert_eq!(health["status"], "degraded", "{health}");
    assert_eq!(health["reasons"][0]["reason"], "replicas_short", "{health}");
    assert_eq!(call(&a, "GET", "/api/ready", None, None).status, 200);
    let metrics = call(&a, "GET", "/metrics", None, None).body;
    assert!(
        metrics.contains("herald_cluster_receipts_refused_total{reason=\"unreplicated\"} 1"),
        "{metrics}"
    );
    // Traffic that needs no receipt goes on.
    p.send(Message::text("fire and forget").non_persistent())
        .unwrap();
}

#[test]
fn a_redis_that_wants_a_password_the_node_lacks_stops_the_start() {
    let redis = Redis::with_password("s3cret");
    for url in [
        redis.url(),
        format!("redis://:wrong@127.0.0.1:{}", redis.port),
    ] {
        let mut config = test_config();
        config.cluster.redis = url.clone();
        let e = Server::start(config).err().expect("refused").to_string();
        assert!(e.contains("refuses this node"), "{url}: {e}");
    }
    let mut config = test_config();
    config.cluster.redis = format!("redis://:s3cret@127.0.0.1:{}", redis.port);
    let server = start_with(config);
    wait_until("connected", || server.cluster().unwrap().stats.connected());
}
