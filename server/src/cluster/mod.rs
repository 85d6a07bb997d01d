//! Cluster mode: nodes share topics through Redis pub/sub, and queues
//! through Redis streams (see [`queues`]).
//!
//! Modules: `outbound` (the thread that writes to Redis), `inbound` (the
//! subscriber connection), [`queues`] (the thread that reads shared
//! queues), `durables` (the subscription registry), [`settings`] (shared
//! configuration), [`link`] (which Redis: one server or Sentinel's
//! primary), `resp` (the subscriber's RESP reader). This file holds the
//! state they share ([`Cluster`]), the interest in topics, and the start.
//!
//! Nothing here runs on a worker. A topic message published on this node
//! is handed to the `herald-cluster-out` thread through a bounded channel
//! (a full channel drops it and counts it: Redis pub/sub is at-most-once
//! anyway), which `PUBLISH`es it, many per round trip, on channel
//! `herald:t:<topic>`. The `herald-cluster-in` thread holds a pub/sub
//! connection `PSUBSCRIBE`d to a Redis glob for each topic pattern that
//! local subscriptions use, a superset that arriving messages are matched
//! against exactly by the topic tree, and routes what other nodes
//! published to the local subscribers, selectors evaluated here.
//!
//! Each published payload carries its origin (node id and this process's
//! start, so a restarted node is a new origin) and a sequence number: a
//! node skips its own messages, whose subscribers had them already, and a
//! message that arrives once for each of several matching globs is routed
//! once.
//!
//! Either thread reconnects with back-off when Redis goes away; the outage
//! is logged and shown in `connected`, and messages published meanwhile do
//! not reach other nodes.

mod durables;
mod inbound;
pub mod link;
mod outbound;
pub mod queues;
mod resp;
pub mod settings;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};
use herald_protocol::destination::{Pattern, PatternWord};
use herald_protocol::selector::Selector;
use herald_protocol::MessageView;
use inbound::run_inbound;
use link::Link;
use outbound::{run_outbound, Command, Outcomes, OUTBOUND_HIGH, OUTBOUND_LOW, OUTBOUND_QUEUE};
use redis::Value;

use crate::broker::delivery::Deliveries;
use crate::broker::{
    Backlog, BrowseDone, ConnectionRef, DurableRecord, EntryId, Peers, SharedChanges, SharedQueue,
};
use crate::config::{AuthSection, ClusterSection};
use crate::frontend::{hand_out, Shared};
use crate::store::{Completion, StoreError};
use crate::sync::{lock, read, write};
use resp::{Item, Subscriber};
use settings::{Change, SharedSettings};

/// The prefix of the Redis channel a topic's messages go on.
const CHANNEL: &str = "herald:t:";
/// The prefix of the Redis set of a node's globs.
const INTEREST_KEY: &str = "herald:interest:";
/// The channel on which a node says its globs changed (the message is its
/// node id).
const INTEREST_CHANNEL: &str = "herald:interest";
/// A node's set expires unless renewed, so a dead node's interest fades.
const INTEREST_TTL_S: u64 = 60;
/// How often a node renews its set and reads the others' again.
const INTEREST_REFRESH: Duration = Duration::from_secs(20);
/// Topics whose answer (does another node want them?) is remembered.
const WANTED_CACHE: usize = 65_536;
/// How often a thread connected to a Sentinel primary looks whether
/// another of the node's threads followed a failover elsewhere.
const PRIMARY_LOOK: Duration = Duration::from_millis(250);

/// Counters of the cluster link, read by the management interface.
#[derive(Debug, Default)]
pub struct ClusterStats {
    /// Messages sent to other nodes.
    pub published: AtomicU64,
    /// Messages from other nodes routed here.
    pub received: AtomicU64,
    /// Messages not sent to other nodes: the queue to Redis was full, or
    /// Redis was away.
    pub dropped: AtomicU64,
    /// Messages appended to shared queues' streams.
    pub appended: AtomicU64,
    /// Messages read from shared queues' streams for consumers here.
    pub read: AtomicU64,
    /// Messages claimed from nodes that stopped renewing their hold.
    pub claimed: AtomicU64,
    /// Both threads are connected to Redis.
    pub connected_out: AtomicBool,
    /// See `connected_out`.
    pub connected_in: AtomicBool,
    /// See `connected_out`.
    pub connected_queues: AtomicBool,
}

impl ClusterStats {
    /// Whether every thread of the link is connected to Redis.
    pub fn connected(&self) -> bool {
        [
            &self.connected_out,
            &self.connected_in,
            &self.connected_queues,
        ]
        .iter()
        .all(|c| c.load(Ordering::Relaxed))
    }
}

/// This node's side of the cluster: what the broker calls.
pub struct Cluster {
    /// The configured node id.
    pub node_id: String,
    /// Node id and process start: what payloads name as their origin, and
    /// this node's consumer name in the queues' consumer groups.
    origin: Vec<u8>,
    next_seq: AtomicU64,
    outbound: Sender<Command>,
    /// Commands in `outbound`.
    queued: AtomicUsize,
    /// Shared queues with consumers here.
    consumed: Mutex<HashMap<String, queues::Consumed>>,
    /// The streams of non-durable shared subscriptions, which end when
    /// no node has a consumer.
    ephemeral: Mutex<std::collections::HashSet<String>>,
    /// Work for the queue thread.
    requests: Sender<queues::Request>,
    /// See `ClusterSection::claim_idle_ms`.
    claim_idle: Duration,
    /// Raised while `outbound` is fuller than `OUTBOUND_HIGH`.
    backlog: Arc<Backlog>,
    /// Local subscriptions per Redis glob; a glob is subscribed to while
    /// its count is above zero.
    interest: Mutex<HashMap<String, usize>>,
    /// The local globs changed since they were last written to Redis.
    own_changed: AtomicBool,
    /// Another node's globs changed: read them again.
    others_changed: AtomicBool,
    /// The registry of durable subscriptions changed: read it again.
    durables_changed: AtomicBool,
    /// The registry's epoch as last read (see `durables::EPOCH`).
    durables_epoch: AtomicU64,
    /// The shared declared topics, users or roles changed: read them
    /// again.
    settings_changed: AtomicBool,
    /// What the cluster shares of its configuration, as last read.
    settings: Mutex<SharedSettings>,
    /// This node's `[auth]`, from its config file, under the shared users
    /// and roles.
    base_auth: Mutex<AuthSection>,
    /// What the other nodes subscribe to.
    others: RwLock<Others>,
    changes: Mutex<mpsc::Sender<(String, bool)>>,
    /// Counters.
    pub stats: ClusterStats,
    stop: AtomicBool,
    /// Stops the queue reader, which stops first.
    stop_queues: AtomicBool,
    /// Where Redis is: one server, or the primary Sentinel names.
    pub link: Link,
    /// Replicas that must have what a receipt confirms (Redis `WAIT`).
    min_replicas: u32,
}

/// The prefix of the Redis stream keys that hold shared queues' and
/// cluster subscriptions' messages.
const STREAM_PREFIX: &str = "herald:q:";

/// The Redis stream that holds the messages of the shared queue (or
/// cluster subscription stream) `name`.
fn stream_key(name: &str) -> String {
    format!("{STREAM_PREFIX}{name}")
}

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

/// Starts the cluster threads for `shared`'s broker and registers the
/// cluster with it.
pub fn start(section: &ClusterSection, shared: &Arc<Shared>) -> std::io::Result<ClusterHandle> {
    let link = Link::parse(&section.redis)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // With Sentinel, a wrong sentinel list or service name is a mistake to
    // report now: a plain Redis that is not up yet is waited for instead.
    if let Link::Sentinel { .. } = link {
        link.client().map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                format!("cluster.redis {}: {e}", section.redis),
            )
        })?;
    }
    let node_id = section.node_id();
    let started = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let origin = format!("{node_id}/{started:x}").into_bytes();
    let (outbound, outbound_rx) = mpsc::channel();
    let (changes, changes_rx) = mpsc::channel();
    let (requests, requests_rx) = mpsc::channel();
    let cluster = Arc::new(Cluster {
        node_id,
        origin,
        next_seq: AtomicU64::new(0),
        outbound,
        queued: AtomicUsize::new(0),
        consumed: Mutex::new(HashMap::new()),
        ephemeral: Mutex::default(),
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
        changes: Mutex::new(changes),
        stats: ClusterStats::default(),
        stop: AtomicBool::new(false),
        stop_queues: AtomicBool::new(false),
        min_replicas: section
            .min_replicas
            .unwrap_or(u32::from(matches!(link, Link::Sentinel { .. }))),
        link,
    });
    shared.broker.join_cluster(cluster.clone());
    // The durable subscriptions, before anyone publishes here if Redis
    // answers now; otherwise once the outbound thread connects.
    let weak = Arc::downgrade(shared);
    let loaded = cluster.link.connection().and_then(|mut con| {
        cluster.sync_durables(&mut con, &weak)?;
        cluster.sync_settings(&mut con, &weak)
    });
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
            .name("herald-cluster-out".into())
            .spawn(move || run_outbound(&cluster, &outbound_rx, &shared))?
    };
    let inbound = {
        let (cluster, shared) = (cluster.clone(), Arc::downgrade(shared));
        std::thread::Builder::new()
            .name("herald-cluster-in".into())
            .spawn(move || run_inbound(&cluster, &changes_rx, &shared))?
    };
    let queues = {
        let (cluster, shared) = (cluster.clone(), Arc::downgrade(shared));
        std::thread::Builder::new()
            .name("herald-cluster-q".into())
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

/// The globs other nodes subscribe to, and which topics they cover.
#[derive(Default)]
struct Others {
    /// Read from Redis at least once: until then every topic is sent.
    loaded: bool,
    globs: Vec<String>,
    /// Topic → whether a glob covers it.
    wanted: crate::FastMap<String, bool>,
}

impl Cluster {
    /// With Sentinel, the primary the node uses now, to remember when a
    /// thread connects.
    fn primary_now(&self) -> Option<String> {
        self.link.primary().map(|p| p.addr)
    }

    /// Whether the node followed the primary away from `connected_to`
    /// (what [`Cluster::primary_now`] said at the connection): a thread
    /// that is idle on a primary that stopped answering would not notice
    /// by itself.
    fn primary_moved(&self, connected_to: &Option<String>) -> bool {
        connected_to.is_some() && self.primary_now() != *connected_to
    }

    /// Whether another node subscribes to something that covers `topic`:
    /// if none does, its messages are not sent to Redis at all.
    fn wanted(&self, topic: &str) -> bool {
        let others = read(&self.others);
        if !others.loaded {
            return true;
        }
        if let Some(&wanted) = others.wanted.get(topic) {
            return wanted;
        }
        drop(others);
        let mut others = write(&self.others);
        let channel = format!("{CHANNEL}{topic}");
        let wanted = others
            .globs
            .iter()
            .any(|g| glob_matches(g.as_bytes(), channel.as_bytes()));
        if others.wanted.len() >= WANTED_CACHE {
            others.wanted.clear();
        }
        others.wanted.insert(topic.to_owned(), wanted);
        wanted
    }

    /// The globs this node's subscriptions need now.
    fn globs(&self) -> Vec<String> {
        let interest = lock(&self.interest);
        interest.keys().cloned().collect()
    }

    /// Writes this node's globs to its set in Redis and tells the others.
    fn write_interest(&self, con: &mut redis::Connection) -> redis::RedisResult<()> {
        let globs = self.globs();
        let key = format!("{INTEREST_KEY}{}", self.node_id);
        let mut pipe = redis::pipe();
        pipe.cmd("MULTI").del(&key);
        if !globs.is_empty() {
            pipe.sadd(&key, &globs);
            pipe.expire(&key, INTEREST_TTL_S as i64);
        }
        pipe.cmd("EXEC").publish(INTEREST_CHANNEL, &self.node_id);
        query_pipeline(con, &pipe, 0).map(drop)
    }

    /// Reads the other nodes' globs.
    fn read_others(&self, con: &mut redis::Connection) -> redis::RedisResult<()> {
        let own = format!("{INTEREST_KEY}{}", self.node_id);
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{INTEREST_KEY}*"))
            .query(con)?;
        let mut globs = Vec::new();
        for key in keys.into_iter().filter(|k| *k != own) {
            let members: Vec<String> = redis::cmd("SMEMBERS").arg(&key).query(con)?;
            globs.extend(members);
        }
        globs.sort();
        globs.dedup();
        let mut others = write(&self.others);
        *others = Others {
            loaded: true,
            globs,
            wanted: crate::FastMap::default(),
        };
        Ok(())
    }

    /// Keeps this node's set and its view of the others' current.
    fn sync_interest(
        &self,
        con: &mut redis::Connection,
        due: &mut Instant,
    ) -> redis::RedisResult<()> {
        let now = Instant::now();
        if now >= *due {
            *due = now + INTEREST_REFRESH;
            self.own_changed.store(true, Ordering::Relaxed);
            self.others_changed.store(true, Ordering::Relaxed);
            self.durables_changed.store(true, Ordering::Relaxed);
            self.settings_changed.store(true, Ordering::Relaxed);
        }
        if self.own_changed.swap(false, Ordering::AcqRel) {
            if let Err(e) = self.write_interest(con) {
                self.own_changed.store(true, Ordering::Relaxed);
                return Err(e);
            }
        }
        if self.others_changed.swap(false, Ordering::AcqRel) {
            if let Err(e) = self.read_others(con) {
                self.others_changed.store(true, Ordering::Relaxed);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Reads the registry of durable subscriptions again if it changed,
    /// and makes the broker's match it.
    fn sync_durables(
        &self,
        con: &mut redis::Connection,
        shared: &Weak<Shared>,
    ) -> redis::RedisResult<()> {
        reread(
            &self.durables_changed,
            || durables::load(con),
            |(epoch, records)| {
                *lock(&self.ephemeral) = records
                    .iter()
                    .filter(|r| !r.durable)
                    .map(|r| crate::broker::cluster_durable_stream(&r.client_id, &r.name))
                    .collect();
                if let Some(shared) = shared.upgrade() {
                    shared.broker.sync_durables(records);
                }
                // After the topic tree has them: a message routed knowing
                // this epoch was routed to them.
                self.durables_epoch.store(epoch, Ordering::Release);
            },
        )
    }

    /// Reads the shared declared topics, users and roles again if they
    /// changed, and applies them.
    fn sync_settings(
        &self,
        con: &mut redis::Connection,
        shared: &Weak<Shared>,
    ) -> redis::RedisResult<()> {
        reread(
            &self.settings_changed,
            || settings::load(con),
            |loaded| {
                let changed = *lock(&self.settings) != loaded;
                *lock(&self.settings) = loaded;
                if let Some(shared) = shared.upgrade().filter(|_| changed) {
                    self.apply_settings(&shared);
                }
            },
        )
    }

    /// What the cluster shares of its configuration, as last read (or
    /// changed here).
    pub fn settings(&self) -> SharedSettings {
        lock(&self.settings).clone()
    }

    /// `[auth]` as this node applies it: its file's, the shared users and
    /// roles over it.
    pub fn auth(&self) -> AuthSection {
        lock(&self.settings).auth_over(&lock(&self.base_auth))
    }

    /// Applies the shared settings: declared topics are the config
    /// file's and the shared ones; users and roles as [`Cluster::auth`].
    fn apply_settings(&self, shared: &Shared) {
        let topics = lock(&self.settings).topics.clone();
        let file = &shared.config.topics.declared;
        shared
            .broker
            .set_declared(file.iter().chain(&topics).map(String::as_str));
        if let Err(e) = shared.auth.reload(&self.auth()) {
            log::warn!("cluster: the shared users and roles were not applied: {e}");
        }
    }

    /// Makes a change to the shared configuration: applied here at once,
    /// written to Redis and announced to the other nodes; `done` runs once
    /// Redis answered.
    pub fn change(&self, shared: &Shared, change: Change, done: Completion) {
        {
            let mut settings = lock(&self.settings);
            *settings = settings.with(&change);
        }
        self.apply_settings(shared);
        self.send(Command::Settings {
            change,
            node_id: self.node_id.clone(),
        });
        self.send(Command::Barrier { from: None, done });
    }

    /// This node, as the registry's writes name it.
    fn member(&self) -> durables::Member {
        durables::Member {
            node_id: self.node_id.clone(),
            origin: String::from_utf8_lossy(&self.origin).into_owned(),
            ttl_ms: self.claim_idle.as_millis() as u64,
        }
    }

    /// Lists every shared queue in Redis with its stream's length and
    /// unacknowledged entries; `done` runs on the queue thread.
    pub fn streams(&self, done: queues::StreamsDone) {
        self.ask(queues::Request::Streams { done });
    }

    /// Takes up to `limit` messages of a shared queue that no node has
    /// read (see `queues::Request::Take`); `done` runs on the queue
    /// thread. Each must then be settled or given back.
    pub fn take(&self, queue: &str, limit: usize, done: queues::TakeDone) {
        self.ask(queues::Request::Take {
            queue: queue.to_owned(),
            limit,
            done,
        });
    }

    /// Gives messages this node took back to a shared queue, with their
    /// delivery counts, for any node.
    pub fn give_back(&self, queue: &str, messages: Vec<queues::Held>) {
        if !messages.is_empty() {
            self.send(Command::Release {
                queue: queue.to_owned(),
                messages,
            });
        }
    }

    fn ask(&self, request: queues::Request) {
        if let Err(mpsc::SendError(request)) = self.requests.send(request) {
            request.fail("the cluster link stopped");
        }
    }

    /// Whether users and roles would still make sense after `change`: the
    /// error a login would meet otherwise.
    pub fn check(&self, change: &Change) -> Result<(), String> {
        let next = lock(&self.settings).with(change);
        crate::auth::Users::from_config(&next.auth_over(&lock(&self.base_auth)))
            .map(drop)
            .map_err(|(key, why)| format!("{key}: {why}"))
    }

    /// A reload read this node's config file again: its `[auth]` goes
    /// under the shared users and roles.
    pub fn reload_auth(&self, shared: &Shared, file: AuthSection) -> Result<(), String> {
        *lock(&self.base_auth) = file;
        shared.auth.reload(&self.auth())
    }

    /// Hands a command to the outbound thread. Counted before it is
    /// queued, so that the thread never takes off more than was added.
    fn send(&self, command: Command) -> usize {
        let queued = self.queued.fetch_add(1, Ordering::Relaxed) + 1;
        if let Err(mpsc::SendError(command)) = self.outbound.send(command) {
            // The thread is gone (the server is stopping).
            self.queued.fetch_sub(1, Ordering::Relaxed);
            command.fail("the cluster link stopped", &mut Outcomes::default());
        }
        queued
    }

    /// Raises the backlog signal when `queued` commands wait (while Redis
    /// is there to take them); returns it while it is up.
    fn pressure(&self, queued: usize) -> Option<Arc<Backlog>> {
        if queued > OUTBOUND_HIGH && self.stats.connected_out.load(Ordering::Relaxed) {
            self.backlog.set(true);
        }
        self.backlog.is_high().then(|| self.backlog.clone())
    }

    /// Counts the topic messages `outcomes` lost.
    fn count_dropped(&self, outcomes: &mut Outcomes) {
        let n = std::mem::take(&mut outcomes.dropped);
        self.stats.dropped.fetch_add(n, Ordering::Relaxed);
    }

    /// `n` commands left the outbound queue.
    fn dequeued(&self, n: usize) {
        let left = self
            .queued
            .fetch_sub(n, Ordering::Relaxed)
            .saturating_sub(n);
        if left <= OUTBOUND_LOW || !self.stats.connected_out.load(Ordering::Relaxed) {
            self.backlog.set(false);
        }
    }
}

impl Peers for Cluster {
    /// See `queues::Request::Browse`: `done` runs on the queue thread.
    fn browse(&self, queue: &str, selector: Option<Arc<Selector>>, limit: usize, done: BrowseDone) {
        self.ask(queues::Request::Browse {
            queue: queue.to_owned(),
            selector,
            limit,
            done,
        });
    }

    fn published(&self, topic: &str, block: &Bytes) -> Option<Arc<Backlog>> {
        if !self.wanted(topic) {
            return None;
        }
        // While Redis is away nobody drains the queue: publishers go on,
        // and what the queue cannot take is dropped.
        if self.queued.load(Ordering::Relaxed) >= OUTBOUND_QUEUE {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            return self.backlog.is_high().then(|| self.backlog.clone());
        }
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let mut payload = BytesMut::with_capacity(1 + self.origin.len() + 8 + block.len());
        payload.put_u8(self.origin.len() as u8);
        payload.put_slice(&self.origin);
        payload.put_u64(seq);
        payload.put_slice(block);
        let queued = self.send(Command::Publish {
            channel: format!("{CHANNEL}{topic}"),
            payload: payload.freeze(),
        });
        self.pressure(queued)
    }

    fn interest(&self, pattern: &Pattern, interested: bool) {
        let glob = redis_glob(pattern);
        let mut interest = lock(&self.interest);
        let count = interest.entry(glob.clone()).or_default();
        let changed = if interested {
            *count += 1;
            *count == 1
        } else {
            *count = count.saturating_sub(1);
            *count == 0
        };
        if *count == 0 {
            interest.remove(&glob);
        }
        if changed {
            self.own_changed.store(true, Ordering::Release);
            let changes = lock(&self.changes);
            let _ = changes.send((glob, interested));
        }
    }

    fn queue_send(
        &self,
        queue: &str,
        block: &Bytes,
        from: Option<ConnectionRef>,
    ) -> Option<Arc<Backlog>> {
        let queued = self.send(Command::Append {
            queue: queue.to_owned(),
            block: block.clone(),
            from,
        });
        self.pressure(queued)
    }

    fn commit(&self, changes: SharedChanges, from: Option<ConnectionRef>) {
        self.send(Command::Commit { changes, from });
    }

    fn settle(&self, queue: &str, entry: EntryId) {
        self.send(Command::Settle {
            queue: queue.to_owned(),
            entry,
        });
    }

    fn barrier(&self, from: Option<ConnectionRef>, done: Completion) {
        self.send(Command::Barrier { from, done });
    }

    fn consuming(&self, name: &str, queue: &SharedQueue, attached: bool) {
        queues::consuming(self, name, queue, attached);
    }

    fn durable(&self, stream: &str, record: Option<&DurableRecord>) {
        let mut ephemeral = lock(&self.ephemeral);
        match record {
            Some(r) if !r.durable => ephemeral.insert(stream.to_owned()),
            _ => ephemeral.remove(stream),
        };
        drop(ephemeral);
        self.send(Command::Registry {
            stream: stream.to_owned(),
            record: record.cloned(),
            by: self.member(),
        });
    }

    fn durables_epoch(&self) -> u64 {
        self.durables_epoch.load(Ordering::Acquire)
    }

    fn recheck(
        &self,
        topic: &str,
        block: &Bytes,
        seen: (u64, Vec<String>),
        from: Option<ConnectionRef>,
    ) {
        let (epoch, appended) = seen;
        self.send(Command::Recheck {
            topic: topic.to_owned(),
            block: block.clone(),
            epoch,
            appended,
            from,
        });
    }
}

/// The Redis glob for a topic pattern's channel: a superset of the
/// topics it matches (Redis's `*` also spans dots), which the topic tree
/// then matches exactly. Glob characters in literal words are escaped.
pub fn redis_glob(pattern: &Pattern) -> String {
    let mut glob = String::from(CHANNEL);
    for (i, word) in pattern.words().iter().enumerate() {
        match word {
            // `#` matches any number of words, none included: everything
            // from here on, without the dot before it.
            PatternWord::Hash => {
                if i > 0 {
                    glob.pop();
                }
                glob.push('*');
                return glob;
            }
            PatternWord::Star => glob.push('*'),
            PatternWord::Literal(w) => {
                for c in w.chars() {
                    if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                        glob.push('\\');
                    }
                    glob.push(c);
                }
            }
        }
        glob.push('.');
    }
    glob.pop();
    glob
}

/// Whether `text` matches a Redis glob made by [`redis_glob`]: `*`, `?`
/// and `\`-escaped characters (no `[` sets, which it never makes).
fn glob_matches(glob: &[u8], text: &[u8]) -> bool {
    // Where the last `*` was, and the text position it has swallowed to.
    let (mut g, mut t, mut star) = (0, 0, None);
    while t < text.len() {
        match glob.get(g) {
            Some(b'*') => {
                star = Some((g, t));
                g += 1;
                continue;
            }
            Some(b'?') => {
                g += 1;
                t += 1;
                continue;
            }
            Some(b'\\') if glob.get(g + 1) == Some(&text[t]) => {
                g += 2;
                t += 1;
                continue;
            }
            Some(&c) if c != b'\\' && c == text[t] => {
                g += 1;
                t += 1;
                continue;
            }
            _ => {}
        }
        match star {
            Some((sg, st)) => {
                g = sg + 1;
                t = st + 1;
                star = Some((sg, st + 1));
            }
            None => return false,
        }
    }
    glob[g..].iter().all(|&c| c == b'*')
}

/// Sends `pipe` and reads its answers, giving up at the first that does
/// not come. (The `redis` crate's own reading goes on to wait
/// `ANSWER_TIMEOUT` for each of the others, which on a silent server adds
/// up to five seconds a command.) Returns the last `keep` answers, or the
/// first error Redis answered with; on an I/O error the connection is
/// done with.
fn query_pipeline(
    con: &mut redis::Connection,
    pipe: &redis::Pipeline,
    keep: usize,
) -> redis::RedisResult<Vec<Value>> {
    let n = pipe.cmd_iter().count();
    con.send_packed_command(&pipe.get_packed_pipeline())?;
    let mut kept = Vec::with_capacity(keep);
    let mut refused = None;
    for i in 0..n {
        let answer = con.recv_response()?;
        if let Value::ServerError(e) = &answer {
            refused.get_or_insert_with(|| redis::RedisError::from(e.clone()));
        }
        if i + keep >= n {
            kept.push(answer);
        }
    }
    match refused {
        Some(e) => Err(e),
        None => Ok(kept),
    }
}

/// Reads something from Redis again if `changed` says so, and hands it
/// to `apply`; a failed read leaves `changed` set for the next try.
fn reread<T>(
    changed: &AtomicBool,
    load: impl FnOnce() -> redis::RedisResult<T>,
    apply: impl FnOnce(T),
) -> redis::RedisResult<()> {
    if !changed.swap(false, Ordering::AcqRel) {
        return Ok(());
    }
    match load() {
        Ok(loaded) => {
            apply(loaded);
            Ok(())
        }
        Err(e) => {
            changed.store(true, Ordering::Relaxed);
            Err(e)
        }
    }
}

/// Sleeps before reconnecting, longer each time up to two seconds; false
/// if the cluster stops meanwhile.
fn back_off(stop: &AtomicBool, attempt: &mut u32) -> bool {
    let delay = Duration::from_millis(100u64 << (*attempt).min(4)).min(Duration::from_secs(2));
    *attempt += 1;
    let mut slept = Duration::ZERO;
    while slept < delay {
        if stop.load(Ordering::Acquire) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
        slept += Duration::from_millis(20);
    }
    !stop.load(Ordering::Acquire)
}

/// Marks one side of the link up, and says so when it changes.
fn link_up(flag: &AtomicBool, side: &str) {
    if !flag.swap(true, Ordering::AcqRel) {
        log::info!("cluster: {side} connected to Redis");
    }
}

/// See [`link_up`].
fn link_down(flag: &AtomicBool, side: &str, why: impl std::fmt::Display) {
    if flag.swap(false, Ordering::AcqRel) {
        log::warn!("cluster: {side} lost Redis ({why}); reconnecting");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(p: &str) -> String {
        redis_glob(&Pattern::parse(p).unwrap())
    }

    #[test]
    fn globs_cover_what_patterns_match() {
        assert_eq!(glob("sales.eu"), "herald:t:sales.eu");
        assert_eq!(glob("sales.*.phones"), "herald:t:sales.*.phones");
        assert_eq!(glob("sales.#"), "herald:t:sales*");
        assert_eq!(glob("#"), "herald:t:*");
        assert_eq!(glob("a.#.z"), "herald:t:a*");
    }

    #[test]
    fn globs_match_as_redis_matches_them() {
        let m = |g: &str, t: &str| glob_matches(g.as_bytes(), t.as_bytes());
        assert!(m("herald:t:a.b", "herald:t:a.b"));
        assert!(!m("herald:t:a.b", "herald:t:a.bc"));
        assert!(m("herald:t:a.*.c", "herald:t:a.x.y.c"));
        assert!(m("herald:t:a*", "herald:t:a"));
        assert!(m("herald:t:*", "herald:t:"));
        assert!(m("herald:t:a?c", "herald:t:abc"));
        assert!(!m("herald:t:a*c", "herald:t:abd"));
        assert!(m("herald:t:a\\*", "herald:t:a*"));
        assert!(!m("herald:t:a\\*", "herald:t:ab"));
        // Every pattern's glob covers every topic the pattern matches.
        for (pattern, topic) in [
            ("a.#.z", "a.z"),
            ("a.#", "a"),
            ("*.b", "x.b"),
            ("#", "q.r.s"),
        ] {
            let glob = redis_glob(&Pattern::parse(pattern).unwrap());
            assert!(m(&glob, &format!("{CHANNEL}{topic}")), "{pattern} {topic}");
        }
    }
}
