//! Starting the cluster's threads, and stopping them.

use super::inbound::run_inbound;
use super::link::Link;
use super::outbound::run_outbound;
use super::shards::{Redis, Routed};
use super::{queues, Cluster, ClusterStats, Keys};
use crate::config::ClusterSection;
use crate::frontend::Shared;
use crate::sync::lock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The running cluster threads.
pub struct ClusterHandle {
    cluster: Arc<Cluster>,
    threads: Vec<JoinHandle<()>>,
}

impl ClusterHandle {
    /// The cluster link.
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// Stops the threads and waits for them: the queue reader first, so
    /// that what it gives back is sent before the others stop.
    pub fn stop(self) {
        let mut threads = self.threads.into_iter();
        self.cluster.stop_queues.store(true, Ordering::Release);
        if let Some(queues) = threads.next() {
            let _ = queues.join();
        }
        self.cluster.stop.store(true, Ordering::Release);
        for t in threads {
            let _ = t.join();
        }
    }
}

/// How many connections listen on node `node_id`'s inbox, if any do: a
/// node of that id runs already (a node that died has no connection
/// left), and two would hear each other's messages and take each other's
/// place in the registry.
fn inbox_heard(shards: &mut Redis, node_id: &str) -> redis::RedisResult<Option<u64>> {
    let inbox = shards.keys().inbox(node_id);
    let verb = if shards.sharded() {
        "SHARDNUMSUB"
    } else {
        "NUMSUB"
    };
    let mut heard = None;
    // A node of this id that stopped a moment ago may not have been seen
    // to leave yet: asked three times, 100 ms apart.
    for _ in 0..3 {
        let counts: Vec<(String, u64)> = redis::cmd("PUBSUB")
            .arg(verb)
            .arg(&inbox)
            .on(shards, &inbox)?;
        heard = counts.first().map(|(_, n)| *n).filter(|&n| n > 0);
        if heard.is_none() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(heard)
}

/// The keys that builds before the Redis Cluster key layout wrote for the
/// cluster itself (docs/operations.md, "Upgrades").
const OLDER_LAYOUT: [&str; 5] = [
    "herald:durables",
    "herald:durables:epoch",
    "herald:topics",
    "herald:users",
    "herald:roles",
];

/// Which of [`OLDER_LAYOUT`]'s keys one Redis holds: nodes of such a build
/// name every key otherwise, so they and this node would not see each
/// other's queues and subscriptions, and what they kept would lie unread.
/// (Those builds never ran on a Redis Cluster, nor had another prefix.)
fn older_layout(shards: &mut Redis) -> redis::RedisResult<Vec<&'static str>> {
    if shards.sharded() || shards.keys().prefix() != "herald" {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    for key in OLDER_LAYOUT {
        pipe.cmd("EXISTS").arg(key);
    }
    let held: Vec<bool> = pipe.query(shards.control()?)?;
    Ok(OLDER_LAYOUT
        .into_iter()
        .zip(held)
        .filter_map(|(key, held)| held.then_some(key))
        .collect())
}

/// The set, under no cluster's prefix, in which every node notes its
/// cluster's `cluster.key_prefix`: how a node learns which other clusters
/// share its Redis.
const PREFIXES: &str = "herald-prefixes";

/// Notes this node's key prefix, and returns the other clusters that have
/// running nodes on this Redis: each one's prefix and node ids.
fn neighbours(shards: &mut Redis) -> redis::RedisResult<Vec<(String, Vec<String>)>> {
    let own = shards.keys().prefix();
    let listed: Vec<String> = redis::cmd("SMEMBERS").arg(PREFIXES).on(shards, PREFIXES)?;
    redis::cmd("SADD")
        .arg(PREFIXES)
        .arg(own)
        .on::<()>(shards, PREFIXES)?;
    let mut found = Vec::new();
    for prefix in listed {
        if prefix == own || crate::config::check_key_prefix(&prefix).is_err() {
            continue;
        }
        let keys = Keys::new(&prefix);
        let shard = shards.shard_of(keys.control())?;
        let running = super::nodes::load(shards.at(shard)?, &keys)?;
        if !running.is_empty() {
            found.push((prefix, running.into_iter().map(|n| n.id).collect()));
        }
    }
    Ok(found)
}

/// Starts the cluster threads for `shared`'s broker and registers the
/// cluster with it.
pub fn start(section: &ClusterSection, shared: &Arc<Shared>) -> std::io::Result<ClusterHandle> {
    let link = Link::parse(&section.redis)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let refused = |e: &dyn std::fmt::Display| {
        std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            format!("cluster.redis {}: {e}", section.redis),
        )
    };
    // With Sentinel, a wrong sentinel list or service name is a mistake to
    // report now, and with a Redis Cluster a node that is not one or slots
    // that no primary serves: a plain Redis that is not up yet is waited
    // for instead, and so is a cluster none of whose nodes answers.
    match &link {
        Link::Sentinel { .. } => {
            link.client().map_err(|e| refused(&e))?;
        }
        Link::Cluster { .. } => match link.read_slots() {
            Ok((map, _)) => {
                if let Some(&(first, last)) = map.uncovered().first() {
                    let n: usize = map
                        .uncovered()
                        .iter()
                        .map(|(a, b)| usize::from(b - a) + 1)
                        .sum();
                    return Err(refused(&format_args!(
                        "{n} of the cluster's 16384 slots are served by no primary (the first: {first}-{last}); assign them (redis-cli --cluster fix) before starting Herald"
                    )));
                }
                log::info!(
                    "cluster: Redis Cluster of {} primaries: {}",
                    map.primaries.len(),
                    map.primaries.join(", ")
                );
            }
            Err(e) if e.detail() == Some(super::link::NOT_A_CLUSTER) => {
                return Err(refused(&format_args!(
                    "{e}: use redis:// for one Redis, or point redis+cluster:// at nodes started with cluster-enabled yes"
                )))
            }
            Err(e) => log::warn!("cluster: no Redis Cluster node answers yet ({e}); going on"),
        },
        Link::Direct(_) => {}
    }
    let node_id = section.node_id();
    let started = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let origin = format!("{node_id}/{started:x}").into_bytes();
    let (outbound, outbound_rx) = mpsc::channel();
    let (requests, requests_rx) = mpsc::channel();
    let cluster = Arc::new(Cluster {
        node_id,
        keys: Arc::new(Keys::new(&section.key_prefix)),
        origin,
        next_seq: AtomicU64::new(0),
        writes: AtomicU64::new(0),
        outbound,
        queued: AtomicUsize::new(0),
        consumed: Mutex::new(HashMap::new()),
        ephemeral: Mutex::default(),
        joined: Mutex::default(),
        registering: Mutex::default(),
        requests,
        claim_idle: Duration::from_millis(section.claim_idle_ms.into()),
        backlog: Arc::default(),
        interest: Mutex::new(HashMap::new()),
        own_changed: AtomicBool::new(true),
        others_changed: AtomicBool::new(true),
        durables_changed: AtomicBool::new(true),
        durables_epoch: AtomicU64::new(0),
        settings_changed: AtomicBool::new(true),
        settings: Mutex::default(),
        base_auth: Mutex::new(shared.config.auth.clone()),
        others: RwLock::default(),
        announce: AtomicBool::new(true),
        nodes_changed: AtomicBool::new(true),
        facts: Mutex::new(vec![
            ("version".into(), env!("CARGO_PKG_VERSION").into()),
            ("started".into(), (started / 1_000_000).to_string()),
        ]),
        nodes: Mutex::default(),
        neighbours: Mutex::default(),
        stats: ClusterStats::default(),
        stop: AtomicBool::new(false),
        stop_queues: AtomicBool::new(false),
        min_replicas: section
            .min_replicas
            .unwrap_or(u32::from(!matches!(link, Link::Direct(_)))),
        link,
    });
    shared.broker.join_cluster(cluster.clone());
    // The durable subscriptions, before anyone publishes here if Redis
    // answers now; otherwise once the outbound thread connects.
    let weak = Arc::downgrade(shared);
    // The other nodes' interest too, so that the first messages published
    // here reach them.
    let loaded = Redis::connect(&cluster.link, &cluster.keys, false).and_then(|mut shards| {
        if let Some(n) = inbox_heard(&mut shards, &cluster.node_id)? {
            return Ok(Some(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!(
                    "cluster.node_id '{}' is in use: {n} running node(s) listen on its inbox {}; give each node a cluster.node_id of its own",
                    cluster.node_id,
                    cluster.keys.inbox(&cluster.node_id)
                ),
            )));
        }
        let older = older_layout(&mut shards)?;
        if !older.is_empty() {
            return Ok(Some(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "cluster.redis: Redis holds keys that an older Herald build wrote ({}); its nodes name every key otherwise and would not see this node's queues and subscriptions: stop them, and rename the keys as docs/operations.md says (\"From a build before the Redis Cluster key layout\")",
                    older.join(", ")
                ),
            )));
        }
        // A Redis user whose ACL allows this cluster's keys alone cannot
        // write the shared set: the other clusters go unlisted then.
        let others = neighbours(&mut shards).unwrap_or_else(|e| {
            log::info!("cluster: other clusters on this Redis are not listed: {e}");
            Vec::new()
        });
        let con = shards.control()?;
        if !others.is_empty() && super::nodes::load(con, &cluster.keys)?.is_empty() {
            let list: Vec<String> = others
                .iter()
                .map(|(prefix, ids)| format!("'{prefix}' ({})", ids.join(", ")))
                .collect();
            log::warn!(
                "cluster: no running node uses cluster.key_prefix '{}', while nodes of other key prefixes share this Redis: {}; nodes of one cluster need the same cluster.key_prefix (this node is the first of another cluster, or it is set wrong)",
                cluster.keys.prefix(),
                list.join("; ")
            );
        }
        *lock(&cluster.neighbours) = others;
        let con = shards.control()?;
        cluster.sync_durables(con, &weak)?;
        cluster.sync_settings(con, &weak)?;
        cluster.read_others(con).map(|()| None)
    });
    if let Ok(Some(refusal)) = loaded {
        return Err(refusal);
    }
    if let Err(e) = loaded {
        // Refused credentials do not pass by waiting: say so now.
        let refused = e.kind() == redis::ErrorKind::AuthenticationFailed
            || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"));
        if refused {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "cluster.redis: Redis refuses this node ({e}); give the password in the URL (redis://:PASSWORD@host:port)"
                ),
            ));
        }
        log::warn!("cluster: Redis does not answer yet ({e}); going on");
    }
    let out = {
        let (cluster, shared) = (cluster.clone(), Arc::downgrade(shared));
        std::thread::Builder::new()
            .name("herald-cl-out".into())
            .spawn(move || run_outbound(&cluster, &outbound_rx, &shared))?
    };
    let inbound = {
        let (cluster, shared) = (cluster.clone(), Arc::downgrade(shared));
        std::thread::Builder::new()
            .name("herald-cl-in".into())
            .spawn(move || run_inbound(&cluster, &shared))?
    };
    let queues = {
        let (cluster, shared) = (cluster.clone(), Arc::downgrade(shared));
        std::thread::Builder::new()
            .name("herald-cl-q".into())
            .spawn(move || queues::run(&cluster, &requests_rx, &shared))?
    };
    log::info!(
        "cluster: node {} through {}",
        cluster.node_id,
        section.redis
    );
    Ok(ClusterHandle {
        cluster,
        threads: vec![queues, out, inbound],
    })
}
