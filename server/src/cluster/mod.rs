//! Cluster mode: nodes share topics through Redis pub/sub, and queues
//! through Redis streams (see [`queues`]).
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
pub mod link;
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
use herald_protocol::MessageView;
use link::Link;
use redis::Value;

use crate::broker::delivery::Deliveries;
use crate::broker::{
    Backlog, ConnectionRef, DurableRecord, EntryId, Peers, SharedChanges, SharedQueue,
};
use crate::config::{AuthSection, ClusterSection};
use crate::net::{hand_out, Shared};
use crate::store::Completion;
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
/// Commands waiting for the outbound thread, past which topic messages
/// are dropped (queue messages and settlements never are).
const OUTBOUND_QUEUE: usize = 65_536;
/// Past this many waiting, publishers pause (while Redis is there).
const OUTBOUND_HIGH: usize = OUTBOUND_QUEUE / 4;
/// Publishers go on once no more than this many wait.
const OUTBOUND_LOW: usize = OUTBOUND_QUEUE / 16;
/// Messages `PUBLISH`ed in one round trip at most.
const BATCH: usize = 1024;
/// How long the inbound thread waits for a message before it looks for
/// new interest and hands out what it routed: the longest a new
/// subscription waits to hear other nodes, and the longest the last
/// message of a burst waits.
const INTEREST_CHECK: Duration = Duration::from_millis(5);
/// How long the subscriber connection may hear nothing before it asks
/// Redis for a PONG.
const PING_WHEN_QUIET: Duration = Duration::from_secs(1);
/// Routed messages are handed to the workers in batches under load: when
/// this many are waiting, or the first of them has waited `HAND_OUT_AFTER`.
const HAND_OUT_BATCH: usize = 256;
/// See `HAND_OUT_BATCH`.
const HAND_OUT_AFTER: Duration = Duration::from_micros(100);
/// A message that comes this long after the one before is not part of a
/// burst: it is handed out at once.
const LONE_AFTER: Duration = Duration::from_micros(50);

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

/// How long a receipt waits for `min_replicas` replicas.
const REPLICA_WAIT: Duration = Duration::from_secs(2);

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
        pipe.atomic().del(&key).ignore();
        if !globs.is_empty() {
            pipe.sadd(&key, &globs).ignore();
            pipe.expire(&key, INTEREST_TTL_S as i64).ignore();
        }
        pipe.publish(INTEREST_CHANNEL, &self.node_id).ignore();
        pipe.query(con)
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

    /// Reads a shared queue's messages for a browser (see
    /// `queues::Request::Browse`); `done` runs on the queue thread.
    pub fn browse(
        &self,
        queue: &str,
        selector: Option<Arc<herald_protocol::selector::Selector>>,
        limit: usize,
        done: queues::BrowseDone,
    ) {
        self.ask(queues::Request::Browse {
            queue: queue.to_owned(),
            selector,
            limit,
            done,
        });
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

/// What the outbound thread does in Redis, in the order given.
enum Command {
    /// Publish a topic message for the other nodes.
    Publish { channel: String, payload: Bytes },
    /// Append a message to a shared queue's stream.
    Append {
        queue: String,
        block: Bytes,
        from: Option<ConnectionRef>,
    },
    /// A shared queue's entry is done with: acknowledge and delete it.
    Settle { queue: String, entry: EntryId },
    /// A committed transaction's changes, in MULTI/EXEC.
    Commit {
        changes: SharedChanges,
        from: Option<ConnectionRef>,
    },
    /// Messages this node read and gives back for other nodes: appended
    /// anew with their delivery counts, their old entries settled, in
    /// MULTI/EXEC.
    Release {
        queue: String,
        messages: Vec<queues::Held>,
    },
    /// Register a durable subscription (`Some`: its encoded record) or
    /// delete one, and announce it.
    Registry {
        stream: String,
        record: Option<DurableRecord>,
        by: durables::Member,
    },
    /// Change the shared configuration, and announce it.
    Settings { change: Change, node_id: String },
    /// A persistent topic message routed knowing the registry at
    /// `epoch`, to the streams `appended`; see `Peers::recheck`.
    Recheck {
        topic: String,
        block: Bytes,
        epoch: u64,
        appended: Vec<String>,
        from: Option<ConnectionRef>,
    },
    /// Answer once everything before it was answered.
    Barrier {
        from: Option<ConnectionRef>,
        done: Completion,
    },
}

/// What became of commands that did not reach Redis.
#[derive(Default)]
struct Outcomes {
    /// Connections (by serial: one may move between workers meanwhile)
    /// something of whose was not accepted: their next barrier fails.
    failed: std::collections::HashSet<Option<u64>>,
    /// Settlements to send again once Redis is back: acknowledging twice
    /// is harmless, never acknowledging would hold the entry forever.
    retry: Vec<Command>,
    /// Topic messages lost.
    dropped: u64,
}

impl Command {
    /// Adds the command to `pipe`; false for a barrier or a recheck,
    /// which send nothing of their own.
    fn add_to(&self, pipe: &mut redis::Pipeline) -> bool {
        match self {
            Command::Publish { channel, payload } => {
                pipe.cmd("PUBLISH").arg(channel).arg(&payload[..]).ignore();
            }
            Command::Append { queue, block, .. } => queues::append(pipe, queue, block, 0),
            Command::Settle { queue, entry } => queues::settle(pipe, queue, &[*entry]),
            Command::Commit { changes, .. } => {
                pipe.cmd("MULTI").ignore();
                for (queue, block) in &changes.sends {
                    queues::append(pipe, queue, block, 0);
                }
                for (queue, entry) in &changes.settled {
                    queues::settle(pipe, queue, &[*entry]);
                }
                pipe.cmd("EXEC").ignore();
            }
            Command::Release { queue, messages } => {
                pipe.cmd("MULTI").ignore();
                for m in messages {
                    queues::append(pipe, queue, &m.block, m.deliveries);
                    queues::settle(pipe, queue, &[m.entry]);
                }
                pipe.cmd("EXEC").ignore();
            }
            Command::Registry { stream, record, by } => {
                durables::write(pipe, stream, record.as_ref(), by)
            }
            Command::Settings { change, node_id } => settings::write(pipe, change, node_id),
            Command::Barrier { .. } | Command::Recheck { .. } => return false,
        }
        true
    }

    /// Redis did not take the command (`why`).
    fn fail(self, why: &str, outcomes: &mut Outcomes) {
        match self {
            Command::Publish { .. } => outcomes.dropped += 1,
            Command::Append { from, .. }
            | Command::Commit { from, .. }
            | Command::Recheck { from, .. } => {
                outcomes.failed.insert(from.map(|c| c.serial));
            }
            Command::Settings { .. } => {
                outcomes.failed.insert(None);
            }
            retry @ (Command::Settle { .. }
            | Command::Release { .. }
            | Command::Registry { .. }) => outcomes.retry.push(retry),
            Command::Barrier { from, done } => {
                outcomes.failed.remove(&from.map(|c| c.serial));
                done(Err(format!("Redis did not confirm: {why}")));
            }
        }
    }

    /// Redis answered everything before this command.
    fn done(self, outcomes: &mut Outcomes) {
        if let Command::Barrier { from, done } = self {
            match outcomes.failed.remove(&from.map(|c| c.serial)) {
                true => done(Err("Redis did not accept a message".into())),
                false => done(Ok(())),
            }
        }
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

fn run_outbound(cluster: &Cluster, rx: &Receiver<Command>, shared: &Weak<Shared>) {
    let mut attempt = 0;
    let mut outcomes = Outcomes::default();
    let mut batch = Vec::with_capacity(BATCH);
    while !cluster.stop.load(Ordering::Acquire) {
        let mut con = match cluster.link.connection() {
            Ok(con) => con,
            Err(e) => {
                link_down(&cluster.stats.connected_out, "publisher", &e);
                // What waits meanwhile would reach nobody in time.
                let waiting: Vec<Command> = rx.try_iter().collect();
                cluster.dequeued(waiting.len());
                let why = e.to_string();
                for command in waiting {
                    command.fail(&why, &mut outcomes);
                }
                cluster.count_dropped(&mut outcomes);
                if !back_off(&cluster.stop, &mut attempt) {
                    return;
                }
                continue;
            }
        };
        attempt = 0;
        link_up(&cluster.stats.connected_out, "publisher");
        // Written and read again at once on every (re)connection.
        cluster.own_changed.store(true, Ordering::Relaxed);
        cluster.others_changed.store(true, Ordering::Relaxed);
        cluster.durables_changed.store(true, Ordering::Relaxed);
        cluster.settings_changed.store(true, Ordering::Relaxed);
        let mut due = Instant::now() + INTEREST_REFRESH;
        loop {
            let synced = cluster
                .sync_interest(&mut con, &mut due)
                .and_then(|()| cluster.sync_durables(&mut con, shared))
                .and_then(|()| cluster.sync_settings(&mut con, shared));
            if let Err(e) = synced {
                link_down(&cluster.stats.connected_out, "publisher", &e);
                break;
            }
            batch.append(&mut outcomes.retry);
            if batch.is_empty() {
                match rx.recv_timeout(Duration::from_millis(20)) {
                    Ok(first) => {
                        cluster.dequeued(1);
                        batch.push(first);
                    }
                    Err(RecvTimeoutError::Timeout) if !cluster.stop.load(Ordering::Acquire) => {
                        continue
                    }
                    Err(_) => return,
                }
            }
            let before = batch.len();
            // With a WAIT per batch, bigger batches share its replication
            // round trip (as the journal's group commit shares a sync).
            let most = match cluster.min_replicas {
                0 => BATCH,
                _ => 4 * BATCH,
            };
            while batch.len() < most {
                match rx.try_recv() {
                    Ok(next) => batch.push(next),
                    Err(TryRecvError::Empty) | Err(TryRecvError::Disconnected) => break,
                }
            }
            cluster.dequeued(batch.len() - before);
            let mut pipe = redis::pipe();
            let mut published = 0;
            // Settlements of one queue go in one XACK and one XDEL.
            let mut settled: HashMap<&str, Vec<EntryId>> = HashMap::new();
            let mut bundle = Bundle::default();
            for command in &batch {
                if let Command::Settle { queue, entry } = command {
                    settled.entry(queue).or_default().push(*entry);
                    continue;
                }
                if let Command::Publish { channel, payload } = command {
                    bundle.add(&mut pipe, channel, payload);
                    published += 1;
                    continue;
                }
                bundle.flush(&mut pipe);
                command.add_to(&mut pipe);
                match command {
                    Command::Append { .. } => {
                        cluster.stats.appended.fetch_add(1, Ordering::Relaxed);
                    }
                    Command::Commit { changes, .. } => {
                        let n = changes.sends.len() as u64;
                        cluster.stats.appended.fetch_add(n, Ordering::Relaxed);
                    }
                    _ => {}
                }
            }
            bundle.flush(&mut pipe);
            for (queue, entries) in &settled {
                queues::settle(&mut pipe, queue, entries);
            }
            // The registry's epoch, if a message here was routed knowing
            // an older one (see `Peers::recheck`).
            let oldest = batch
                .iter()
                .filter_map(|c| match c {
                    Command::Recheck { epoch, .. } => Some(*epoch),
                    _ => None,
                })
                .min();
            if oldest.is_some() {
                pipe.cmd("GET").arg(durables::EPOCH);
            }
            // A receipt in this batch: what it confirms must be on enough
            // replicas too, or a failover could lose it. One WAIT for the
            // whole batch, as the journal syncs once per group.
            let min = cluster.min_replicas;
            let wait = min > 0 && batch.iter().any(|c| matches!(c, Command::Barrier { .. }));
            if wait {
                pipe.cmd("WAIT")
                    .arg(min)
                    .arg(REPLICA_WAIT.as_millis() as u64);
            }
            let answered = pipe.query::<Vec<Value>>(&mut con).and_then(|answers| {
                let mut answers = answers.iter();
                let mut next = || answers.next().unwrap_or(&Value::Nil);
                let epoch = match oldest {
                    Some(_) => redis::from_redis_value::<Option<u64>>(next())?,
                    None => None,
                };
                let replicas = match wait {
                    true => Some(redis::from_redis_value::<i64>(next())?),
                    false => None,
                };
                match (oldest, epoch) {
                    (Some(oldest), Some(now)) if now > oldest => {
                        let more = recheck(cluster, &mut con, shared, &batch, now)?;
                        Ok(replicas.into_iter().chain(more).min())
                    }
                    _ => Ok(replicas),
                }
            });
            match answered {
                Ok(replicas) => {
                    // Written on the primary, but not replicated enough: the
                    // receipts fail (the messages may yet be delivered).
                    let short = replicas.filter(|&n| n < i64::from(min)).map(|n| {
                        format!(
                            "only {n} of cluster.min_replicas = {min} Redis replicas confirmed within {} ms",
                            REPLICA_WAIT.as_millis()
                        )
                    });
                    // This node learns its own changes from Redis too (it
                    // skips its own announcements), in case a read of the
                    // registry raced with the write.
                    for command in &batch {
                        match command {
                            Command::Registry { .. } => &cluster.durables_changed,
                            Command::Settings { .. } => &cluster.settings_changed,
                            _ => continue,
                        }
                        .store(true, Ordering::Relaxed);
                    }
                    cluster
                        .stats
                        .published
                        .fetch_add(published, Ordering::Relaxed);
                    for command in batch.drain(..) {
                        match (&short, &command) {
                            (Some(why), Command::Barrier { .. }) => {
                                command.fail(why, &mut outcomes)
                            }
                            _ => command.done(&mut outcomes),
                        }
                    }
                }
                Err(e) => {
                    let why = e.to_string();
                    // A refusal (not a lost link) would be refused again.
                    let lost_link = e.is_io_error() || e.is_connection_dropped();
                    for command in batch.drain(..) {
                        command.fail(&why, &mut outcomes);
                    }
                    if !lost_link {
                        log::warn!("cluster: Redis refused a batch: {why}");
                        outcomes.retry.clear();
                    }
                    cluster.count_dropped(&mut outcomes);
                    if lost_link {
                        link_down(&cluster.stats.connected_out, "publisher", &e);
                        break;
                    }
                }
            }
        }
    }
    // Stopping: what is left fails, so that nobody waits for it.
    for command in batch.drain(..).chain(rx.try_iter()) {
        command.fail("the server is stopping", &mut outcomes);
    }
}

/// Appends the messages of `batch` that were routed knowing a registry
/// older than `epoch` to the streams of the subscriptions registered
/// since, having read the registry again. Returns how many replicas
/// confirmed them, if a WAIT was due.
fn recheck(
    cluster: &Cluster,
    con: &mut redis::Connection,
    shared: &Weak<Shared>,
    batch: &[Command],
    epoch: u64,
) -> redis::RedisResult<Option<i64>> {
    cluster.durables_changed.store(true, Ordering::Relaxed);
    cluster.sync_durables(con, shared)?;
    let Some(shared) = shared.upgrade() else {
        return Ok(None);
    };
    let mut pipe = redis::pipe();
    let mut added = 0;
    for command in batch {
        let Command::Recheck {
            topic,
            block,
            epoch: seen,
            appended,
            ..
        } = command
        else {
            continue;
        };
        if *seen >= epoch {
            continue;
        }
        for stream in shared.broker.streams_for(topic, block) {
            if !appended.contains(&stream) {
                queues::append(&mut pipe, &stream, block, 0);
                added += 1;
            }
        }
    }
    if added == 0 {
        return Ok(None);
    }
    log::info!("cluster: {added} appends to subscriptions registered on another node while their messages were routed here");
    cluster.stats.appended.fetch_add(added, Ordering::Relaxed);
    let min = cluster.min_replicas;
    if min == 0 {
        pipe.query::<()>(con)?;
        return Ok(None);
    }
    pipe.cmd("WAIT")
        .arg(min)
        .arg(REPLICA_WAIT.as_millis() as u64);
    Ok(pipe.query::<Vec<i64>>(con)?.first().copied())
}

fn run_inbound(cluster: &Cluster, changes: &Receiver<(String, bool)>, shared: &Weak<Shared>) {
    let mut attempt = 0;
    // The last sequence number routed from each origin.
    let mut last: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut out = None;
    while !cluster.stop.load(Ordering::Acquire) {
        let result = cluster
            .link
            .client()
            .map_err(std::io::Error::other)
            .and_then(|client| Subscriber::connect(client.get_connection_info(), INTEREST_CHECK))
            .and_then(|mut sub| {
                // Changes sent before this point are in the map already.
                while changes.try_recv().is_ok() {}
                for glob in cluster.globs() {
                    sub.send(&[b"PSUBSCRIBE", glob.as_bytes()])?;
                }
                sub.send(&[b"SUBSCRIBE", INTEREST_CHANNEL.as_bytes()])?;
                sub.send(&[b"SUBSCRIBE", durables::CHANNEL.as_bytes()])?;
                sub.send(&[b"SUBSCRIBE", settings::CHANNEL.as_bytes()])?;
                // What changed while this node was away.
                cluster.others_changed.store(true, Ordering::Relaxed);
                attempt = 0;
                link_up(&cluster.stats.connected_in, "subscriber");
                serve(cluster, &mut sub, changes, shared, &mut last, &mut out)
            });
        match result {
            Ok(()) => return,
            Err(e) => {
                link_down(&cluster.stats.connected_in, "subscriber", &e);
                if !back_off(&cluster.stop, &mut attempt) {
                    return;
                }
            }
        }
    }
}

/// Routes messages from other nodes until the cluster stops (`Ok`) or
/// Redis fails (`Err`).
fn serve(
    cluster: &Cluster,
    sub: &mut Subscriber,
    changes: &Receiver<(String, bool)>,
    shared: &Weak<Shared>,
    last: &mut HashMap<Vec<u8>, u64>,
    out: &mut Option<Deliveries>,
) -> std::io::Result<()> {
    // Messages routed and not handed out yet, and when the first came.
    let mut pending: (usize, Option<Instant>) = (0, None);
    // When the last message came.
    let mut previous: Option<Instant> = None;
    // When Redis was last heard, and when a PING went unanswered since.
    let (mut heard, mut pinged) = (Instant::now(), None::<Instant>);
    loop {
        if cluster.stop.load(Ordering::Acquire) {
            return Ok(());
        }
        // A quiet connection is asked for a PONG: a Redis that stopped
        // answering without closing it is left after ANSWER_TIMEOUT.
        if heard.elapsed() >= PING_WHEN_QUIET {
            match pinged {
                None => {
                    sub.send(&[b"PING"])?;
                    pinged = Some(Instant::now());
                }
                Some(at) if at.elapsed() >= link::ANSWER_TIMEOUT => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "no answer to a PING within {} s",
                            link::ANSWER_TIMEOUT.as_secs()
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
        while let Ok((glob, interested)) = changes.try_recv() {
            let verb: &[u8] = if interested {
                b"PSUBSCRIBE"
            } else {
                b"PUNSUBSCRIBE"
            };
            sub.send(&[verb, glob.as_bytes()])?;
        }
        let Some(shared) = shared.upgrade() else {
            return Ok(());
        };
        let reply = sub.next()?;
        if reply.is_some() {
            (heard, pinged) = (Instant::now(), None);
        }
        let items = match reply {
            Some(Ok(items)) => items,
            Some(Err(why)) => return Err(std::io::Error::other(format!("Redis refused: {why}"))),
            None => {
                if let Some(out) = out.as_mut() {
                    hand_out(&shared, out);
                }
                pending = (0, None);
                continue;
            }
        };
        // Another node's globs, or the durable subscriptions, changed.
        if let [Item::Bulk(Some(kind)), Item::Bulk(Some(channel)), Item::Bulk(Some(node))] =
            &items[..]
        {
            if &kind[..] == b"message" && &node[..] != cluster.node_id.as_bytes() {
                let changed = match &channel[..] {
                    c if c == durables::CHANNEL.as_bytes() => &cluster.durables_changed,
                    c if c == settings::CHANNEL.as_bytes() => &cluster.settings_changed,
                    _ => &cluster.others_changed,
                };
                changed.store(true, Ordering::Release);
            }
            continue;
        }
        // Confirmations of (un)subscribing are the only other replies.
        let [Item::Bulk(Some(kind)), _, Item::Bulk(Some(channel)), Item::Bulk(Some(payload))] =
            &items[..]
        else {
            continue;
        };
        if &kind[..] != b"pmessage" {
            continue;
        }
        let channel = String::from_utf8_lossy(channel);
        let whole = unbundle(payload, |one| {
            let Some(inbound) = Inbound::parse(one) else {
                return false;
            };
            if inbound.origin == cluster.origin.as_slice() {
                return true;
            }
            match last.get_mut(inbound.origin) {
                Some(s) if inbound.seq <= *s => return true,
                Some(s) => *s = inbound.seq,
                None => {
                    last.insert(inbound.origin.to_vec(), inbound.seq);
                }
            }
            let block = payload.slice_ref(inbound.block);
            let out = out.get_or_insert_with(|| Deliveries::new(shared.workers.len()));
            route(cluster, &shared, &channel, block, out);
            let now = Instant::now();
            let lone = previous.is_none_or(|p| now - p >= LONE_AFTER);
            previous = Some(now);
            let oldest = *pending.1.get_or_insert(now);
            pending.0 += 1;
            if lone || pending.0 >= HAND_OUT_BATCH || now - oldest >= HAND_OUT_AFTER {
                hand_out(&shared, out);
                pending = (0, None);
            }
            true
        });
        if !whole {
            log::warn!("cluster: a malformed message on {channel} was ignored");
        }
    }
}

/// Marks a PUBLISH that carries several payloads for one channel: a zero
/// byte (no single payload starts with one: its origin is never empty),
/// then each payload after its length (u32, big-endian). Under load the
/// outbound thread bundles consecutive messages for one topic, which
/// spares Redis a command, and the other nodes a reply to parse, per
/// message.
const BUNDLE: u8 = 0;
/// Payload bytes one bundle carries at most.
const BUNDLE_BYTES: usize = 64 * 1024;

/// Consecutive publishes to one channel, being bundled.
#[derive(Default)]
struct Bundle<'a> {
    channel: Option<&'a str>,
    payloads: Vec<&'a Bytes>,
    bytes: usize,
}

impl<'a> Bundle<'a> {
    /// Adds a publish; one to another channel, or past the size, sends
    /// what was bundled first.
    fn add(&mut self, pipe: &mut redis::Pipeline, channel: &'a str, payload: &'a Bytes) {
        if self.channel != Some(channel) || self.bytes + payload.len() > BUNDLE_BYTES {
            self.flush(pipe);
            self.channel = Some(channel);
        }
        self.bytes += 4 + payload.len();
        self.payloads.push(payload);
    }

    /// Adds the PUBLISH of what was bundled to `pipe`: a lone payload as
    /// it is.
    fn flush(&mut self, pipe: &mut redis::Pipeline) {
        let Some(channel) = self.channel.take() else {
            return;
        };
        match &self.payloads[..] {
            [one] => {
                pipe.cmd("PUBLISH").arg(channel).arg(&one[..]).ignore();
            }
            many => {
                let mut b = Vec::with_capacity(1 + self.bytes);
                b.push(BUNDLE);
                for p in many {
                    b.extend_from_slice(&(p.len() as u32).to_be_bytes());
                    b.extend_from_slice(p);
                }
                pipe.cmd("PUBLISH").arg(channel).arg(b).ignore();
            }
        }
        self.payloads.clear();
        self.bytes = 0;
    }
}

/// Calls `take` with each payload a PUBLISH carries (one, or a bundle's),
/// until it returns false; false if it did, or the bundle is malformed.
fn unbundle(payload: &[u8], mut take: impl FnMut(&[u8]) -> bool) -> bool {
    let Some(mut rest) = payload.strip_prefix(&[BUNDLE]) else {
        return take(payload);
    };
    while !rest.is_empty() {
        let Some((len, tail)) = rest.split_first_chunk::<4>() else {
            return false;
        };
        let Some((one, tail)) = tail.split_at_checked(u32::from_be_bytes(*len) as usize) else {
            return false;
        };
        if !take(one) {
            return false;
        }
        rest = tail;
    }
    true
}

/// A payload from another node.
struct Inbound<'a> {
    origin: &'a [u8],
    seq: u64,
    block: &'a [u8],
}

impl<'a> Inbound<'a> {
    fn parse(payload: &'a [u8]) -> Option<Inbound<'a>> {
        let (&len, rest) = payload.split_first()?;
        let (origin, rest) = rest.split_at_checked(len as usize)?;
        let (seq, block) = rest.split_first_chunk::<8>()?;
        Some(Inbound {
            origin,
            seq: u64::from_be_bytes(*seq),
            block,
        })
    }
}

/// Routes a message from another node to this node's subscribers.
fn route(cluster: &Cluster, shared: &Shared, channel: &str, block: Bytes, out: &mut Deliveries) {
    // Checked as any client's message is: a peer is not trusted further.
    let view = match MessageView::parse(block) {
        Ok(view) => view,
        Err(e) => {
            log::warn!("cluster: an invalid message on {channel} was ignored: {e}");
            return;
        }
    };
    if channel.strip_prefix(CHANNEL) != Some(view.destination()) {
        log::warn!(
            "cluster: a message for {} came on {channel}; ignored",
            view.destination()
        );
        return;
    }
    shared.broker.publish_from_peer(&view, out);
    cluster.stats.received.fetch_add(1, Ordering::Relaxed);
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

    #[test]
    fn payloads_from_peers_are_parsed_or_refused() {
        let mut p = vec![3];
        p.extend_from_slice(b"n/1");
        p.extend_from_slice(&7u64.to_be_bytes());
        p.extend_from_slice(b"block");
        let i = Inbound::parse(&p).unwrap();
        assert_eq!((i.origin, i.seq, i.block), (&b"n/1"[..], 7, &b"block"[..]));
        for cut in 0..12 {
            assert!(Inbound::parse(&p[..cut]).is_none(), "{cut}");
        }
        assert!(Inbound::parse(&[200, 1, 2]).is_none());
    }

    #[test]
    fn bundles_carry_each_payload_and_refuse_truncation() {
        let payloads: Vec<Bytes> = [&b"\x01one"[..], b"\x02two!", b"\x03"]
            .iter()
            .map(|p| Bytes::copy_from_slice(p))
            .collect();
        let mut pipe = redis::pipe();
        let mut bundle = Bundle::default();
        for p in &payloads {
            bundle.add(&mut pipe, "herald:t:x", p);
        }
        bundle.add(&mut pipe, "herald:t:y", &payloads[0]);
        bundle.flush(&mut pipe);
        // Two PUBLISHes: a bundle of three on x, a lone payload on y.
        let packed = pipe.get_packed_pipeline();
        let text = String::from_utf8_lossy(&packed);
        assert_eq!(text.matches("PUBLISH").count(), 2, "{text}");

        let mut b = vec![BUNDLE];
        for p in &payloads {
            b.extend_from_slice(&(p.len() as u32).to_be_bytes());
            b.extend_from_slice(p);
        }
        let mut seen = Vec::new();
        assert!(unbundle(&b, |one| {
            seen.push(one.to_vec());
            true
        }));
        assert_eq!(
            seen,
            payloads.iter().map(|p| p.to_vec()).collect::<Vec<_>>()
        );
        for cut in 1..b.len() {
            let mut n = 0;
            let whole = unbundle(&b[..cut], |_| {
                n += 1;
                true
            });
            // A cut at a payload's end is a shorter bundle; any other is
            // malformed.
            assert!(whole == [1, 9, 18].contains(&cut), "{cut}");
        }
        assert!(unbundle(b"\x01lone", |one| one == b"\x01lone"));
    }
}
