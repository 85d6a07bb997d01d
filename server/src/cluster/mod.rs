//! Cluster mode: nodes share topics through Redis pub/sub, and queues
//! through Redis streams (see [`queues`]), on one Redis, the primary
//! Sentinel names, or the primaries of a Redis Cluster.
//!
//! Modules: [`threads`] (starting and stopping the three threads),
//! `outbound` (the thread that writes to Redis, fed `commands`; `redirect`
//! sends again what met `MOVED` or `ASK`), `inbound` (the subscriber
//! connection), [`queues`] (the thread that reads shared queues, fed
//! [`requests`]), `peers` (the broker's `Peers`, implemented by sending
//! those), `durables` (the subscription registry), [`settings`] (shared
//! configuration), [`nodes`] (the node list), [`link`] (which Redis),
//! `shards` and [`slots`] (a thread's connections, one per primary of a
//! Redis Cluster, and its slot map), `resp` (the subscriber's RESP
//! reader), `common` (stream names, pipelined round trips, link state),
//! `interest` (which topics the other nodes want, and their inboxes),
//! `manage` (an operator's work on a shared queue's stream), `replies`
//! (Redis's answers to the stream commands, parsed). This file holds the
//! state the threads share ([`Cluster`]).
//!
//! Nothing here runs on a worker. A topic message published on this node
//! goes to the inbox of each other node whose interest (the topic
//! patterns of its subscriptions, kept in Redis) covers it: it is handed
//! to the `herald-cl-out` thread through a bounded channel (a full channel
//! drops it and counts it: Redis pub/sub is at-most-once anyway), which
//! `PUBLISH`es it (`SPUBLISH` on a Redis Cluster), bundled under load, on
//! channel `herald:in:{<node id>}`. The `herald-cl-in` thread listens on
//! this node's inbox and routes what arrives to the local subscribers,
//! selectors evaluated here.
//!
//! Each published payload carries its origin (node id and this process's
//! start, so a restarted node is a new origin) and a sequence number, so
//! that a node routes each message once.
//!
//! Every thread reconnects with back-off when Redis goes away; the outage
//! is logged and shown in `connected`, and topic messages published
//! meanwhile do not reach other nodes.

mod commands;
mod common;
mod durables;
mod exclusive;
mod groups;
mod inbound;
mod interest;
pub mod link;
mod manage;
pub mod nodes;
mod outbound;
mod peers;
pub mod queues;
mod redirect;
mod replies;
pub mod requests;
mod resp;
pub mod settings;
mod shards;
pub mod slots;
pub mod threads;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use crate::log_limit::LogLimit;
pub use commands::Refused;
use commands::{Command, Outcomes, OUTBOUND_HIGH, OUTBOUND_LOW};
use common::{query_pipeline, reread, scan_prefix};
pub use common::{Keys, LinkState};
use interest::{Inboxes, Others, INTEREST_REFRESH, INTEREST_TTL_S, WANTED_CACHE};
use link::Link;

use crate::auth::AuthConfigError;
use crate::broker::{Backlog, DurableRecord, Peers};
use crate::config::AuthSection;
use crate::frontend::Shared;
use crate::store::Completion;
use crate::sync::{lock, read, write};
use settings::{Change, SharedSettings};

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
    /// Runs of a batch's commands sent again where a redirection (MOVED,
    /// ASK: a resharding or a failover on a Redis Cluster) said.
    pub redirected: AtomicU64,
    /// Receipts refused, by why ([`Refused::ALL`]'s order).
    pub receipts_refused: [AtomicU64; Refused::ALL.len()],
    /// The last `WAIT` of a shard saw fewer replicas than
    /// `cluster.min_replicas`: persistent sends there are refused.
    pub replicas_short: AtomicBool,
    /// The limit on saying that `replicas_short` changed.
    pub replicas_log: LogLimit,
    /// The publisher thread's link to Redis.
    pub connected_out: LinkState,
    /// The subscriber thread's.
    pub connected_in: LinkState,
    /// The queue reader thread's.
    pub connected_queues: LinkState,
}

impl ClusterStats {
    /// Whether every thread of the link is connected to Redis.
    pub fn connected(&self) -> bool {
        self.links().iter().all(|l| l.is_up())
    }

    /// Times the threads connected to Redis again after a failure.
    pub fn reconnects(&self) -> u64 {
        self.links()
            .iter()
            .map(|l| l.reconnects.load(Ordering::Relaxed))
            .sum()
    }

    fn links(&self) -> [&LinkState; 3] {
        [
            &self.connected_out,
            &self.connected_in,
            &self.connected_queues,
        ]
    }
}

/// This node's side of the cluster: what the broker calls.
pub struct Cluster {
    /// The configured node id.
    pub node_id: String,
    /// The names of the cluster's keys and channels.
    pub keys: Arc<Keys>,
    /// Node id and process start: what payloads name as their origin, and
    /// this node's consumer name in the queues' consumer groups.
    origin: Vec<u8>,
    next_seq: AtomicU64,
    /// Writes numbered so far (see `commands::Outcomes`): a barrier asked
    /// for now covers those.
    writes: AtomicU64,
    outbound: Sender<Command>,
    /// Commands in `outbound`.
    queued: AtomicUsize,
    /// Shared queues with consumers here.
    consumed: Mutex<HashMap<String, requests::Consumed>>,
    /// The streams of non-durable shared subscriptions, which end when
    /// no node has a consumer.
    ephemeral: Mutex<std::collections::HashSet<String>>,
    /// Those of them this node registered (marked alive in them) and has
    /// not left: kept apart from `ephemeral`, which each read of the
    /// registry replaces, and may replace with a read made before the
    /// registration landed.
    joined: Mutex<std::collections::HashSet<String>>,
    /// Subscription streams whose registry change this node sent and
    /// Redis has not yet answered in full (by stream, how many): a read
    /// of the registry made meanwhile may lack them, and is not taken as
    /// saying they are gone.
    registering: Mutex<HashMap<String, usize>>,
    /// Work for the queue thread.
    requests: Sender<requests::Request>,
    /// See `ClusterSection::claim_idle_ms`.
    claim_idle: Duration,
    /// Raised while `outbound` is fuller than `OUTBOUND_HIGH`.
    backlog: Arc<Backlog>,
    /// Local subscriptions per Redis glob; a glob is in this node's
    /// interest set while its count is above zero.
    interest: Mutex<HashMap<String, usize>>,
    /// The local globs changed since they were last written to Redis.
    own_changed: AtomicBool,
    /// Another node's globs changed: read them again.
    others_changed: AtomicBool,
    /// The registry of durable subscriptions changed: read it again.
    durables_changed: AtomicBool,
    /// The registry's epoch as last read (see `durables::epoch`).
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
    /// Announce this node again (then read the list).
    announce: AtomicBool,
    /// Another node announced itself: read the list of nodes again.
    nodes_changed: AtomicBool,
    /// What this node announces of itself (see [`nodes`]).
    facts: Mutex<Vec<(String, String)>>,
    /// Every node, this one among them, as last read.
    nodes: Mutex<Vec<nodes::NodeView>>,
    /// The other clusters (key prefix, node ids) whose running nodes use
    /// the same Redis, as seen at start.
    pub neighbours: Mutex<Vec<(String, Vec<String>)>>,
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

impl Cluster {
    /// Replicas that must have what a receipt confirms.
    pub fn min_replicas(&self) -> u32 {
        self.min_replicas
    }

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

    /// The inboxes of the other nodes that subscribe to something that
    /// covers `topic`: if none does, its messages are not sent to Redis
    /// at all.
    fn wanted(&self, topic: &str) -> Inboxes {
        let others = read(&self.others);
        if let Some(inboxes) = others.wanted.get(topic) {
            return inboxes.clone();
        }
        drop(others);
        let mut others = write(&self.others);
        let inboxes = others.wanting(topic);
        if others.wanted.len() >= WANTED_CACHE {
            others.wanted.clear();
        }
        others.wanted.insert(topic.to_owned(), inboxes.clone());
        inboxes
    }

    /// The globs this node's subscriptions need now.
    fn globs(&self) -> Vec<String> {
        let interest = lock(&self.interest);
        interest.keys().cloned().collect()
    }

    /// Writes this node's globs to its set in Redis and tells the others.
    fn write_interest(&self, con: &mut redis::Connection) -> redis::RedisResult<()> {
        let globs = self.globs();
        let key = self.keys.own(&format!("interest:{}", self.node_id));
        let mut pipe = redis::pipe();
        pipe.cmd("MULTI").del(&key);
        if !globs.is_empty() {
            pipe.sadd(&key, &globs);
            pipe.expire(&key, INTEREST_TTL_S as i64);
        }
        pipe.cmd("EXEC")
            .publish(&self.keys.interest_channel, &self.node_id);
        query_pipeline(con, &pipe, 0).map(drop)
    }

    /// Reads the other nodes' globs.
    fn read_others(&self, con: &mut redis::Connection) -> redis::RedisResult<()> {
        let prefix = self.keys.own("interest:");
        let others: Vec<(String, String)> = scan_prefix(con, &prefix)?
            .into_iter()
            .filter_map(|key| {
                let node = key.strip_prefix(&prefix)?.to_owned();
                (node != self.node_id).then_some((key, node))
            })
            .collect();
        let mut pipe = redis::pipe();
        for (key, _) in &others {
            pipe.cmd("SMEMBERS").arg(key);
        }
        let answers = query_pipeline(con, &pipe, others.len())?;
        let mut nodes = Vec::with_capacity(others.len());
        for ((_, node), answer) in others.iter().zip(answers) {
            let globs: Vec<String> = redis::from_redis_value(&answer)?;
            nodes.push((Arc::from(self.keys.inbox(node)), globs));
        }
        nodes.sort();
        let mut others = write(&self.others);
        *others = Others {
            nodes,
            wanted: crate::collections::FastMap::default(),
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
            self.announce.store(true, Ordering::Relaxed);
        }
        if self.announce.swap(false, Ordering::AcqRel) {
            let facts = lock(&self.facts).clone();
            if let Err(e) = nodes::announce(con, &self.keys, &self.node_id, &facts) {
                self.announce.store(true, Ordering::Relaxed);
                return Err(e);
            }
            self.nodes_changed.store(true, Ordering::Relaxed);
        }
        if self.nodes_changed.swap(false, Ordering::AcqRel) {
            match nodes::load(con, &self.keys) {
                Ok(all) => *lock(&self.nodes) = all,
                Err(e) => {
                    self.nodes_changed.store(true, Ordering::Relaxed);
                    return Err(e);
                }
            }
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

    /// Redis answered (or refused for good) the last step of a registry
    /// change to `stream` that this node sent.
    fn registered(&self, stream: &str) {
        let mut registering = lock(&self.registering);
        if let Some(count) = registering.get_mut(stream) {
            *count -= 1;
            if *count == 0 {
                registering.remove(stream);
            }
        }
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
            || {
                // Before the read: a change answered after it began may be
                // missing from it.
                let in_flight = lock(&self.registering).keys().cloned().collect();
                durables::load(con, &self.keys).map(|(epoch, records)| (epoch, records, in_flight))
            },
            |(epoch, records, in_flight)| {
                *lock(&self.ephemeral) = records
                    .iter()
                    .filter(|r| !r.durable)
                    .map(DurableRecord::stream)
                    .collect();
                if let Some(shared) = shared.upgrade() {
                    shared.broker.sync_durables(records, &in_flight);
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
            || settings::load(con, &self.keys),
            |loaded| {
                let changed = *lock(&self.settings) != loaded;
                *lock(&self.settings) = loaded;
                if let Some(shared) = shared.upgrade().filter(|_| changed) {
                    self.apply_settings(&shared);
                }
            },
        )
    }

    /// Every node, this one among them, as last read (every
    /// `INTEREST_REFRESH`, and when the link comes up).
    pub fn nodes(&self) -> Vec<nodes::NodeView> {
        lock(&self.nodes).clone()
    }

    /// Adds to what this node announces of itself (its listeners, once
    /// they are bound), and announces it.
    pub fn advertise(&self, facts: impl IntoIterator<Item = (String, String)>) {
        let mut own = lock(&self.facts);
        for (key, value) in facts {
            own.retain(|(k, _)| *k != key);
            own.push((key, value));
        }
        self.announce.store(true, Ordering::Relaxed);
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
        let seq = self.number_write();
        self.send(Command::Settings {
            change,
            node_id: self.node_id.clone(),
            seq,
        });
        self.send(Command::Barrier {
            from: None,
            covers: seq,
            done,
        });
    }

    /// This node, as the registry's writes name it.
    fn member(&self) -> durables::Member {
        durables::Member {
            keys: self.keys.clone(),
            node_id: self.node_id.clone(),
            origin: String::from_utf8_lossy(&self.origin).into_owned(),
            ttl_ms: self.claim_idle.as_millis() as u64,
        }
    }

    /// Lists every shared queue in Redis with its stream's length and
    /// unacknowledged entries; `done` runs on the queue thread.
    pub fn streams(&self, done: requests::StreamsDone) {
        self.ask(requests::Request::Streams { done });
    }

    /// Takes up to `limit` messages of a shared queue that no node has
    /// read (see `requests::Request::Take`); `done` runs on the queue
    /// thread. Each must then be settled or given back.
    pub fn take(&self, queue: &str, limit: usize, done: requests::TakeDone) {
        self.ask(requests::Request::Take {
            queue: queue.to_owned(),
            limit,
            done,
        });
    }

    /// A page of a shared queue's messages, without consuming them;
    /// `done` runs on the queue thread.
    pub fn page(
        &self,
        queue: &str,
        selector: Option<Arc<herald_protocol::selector::Selector>>,
        page: (usize, usize),
        done: requests::Done<Option<requests::Page>>,
    ) {
        self.ask(requests::Request::Page {
            queue: queue.to_owned(),
            selector,
            page,
            done,
        });
    }

    /// The message `id` of a shared queue, taken out of its stream if
    /// `take` and no node holds it.
    pub fn pick(&self, queue: &str, id: &str, take: bool, done: requests::Done<requests::Picked>) {
        self.ask(requests::Request::Pick {
            queue: queue.to_owned(),
            id: id.to_owned(),
            take,
            done,
        });
    }

    /// Moves a message of a shared queue that no node holds (`held`, as
    /// [`Cluster::pick`] found it) to the shared queue `to`, as `block`,
    /// in one step in Redis.
    pub fn move_entry(
        &self,
        queue: &str,
        held: requests::Held,
        (to, block): (&str, bytes::Bytes),
        done: requests::Done<requests::Picked>,
    ) {
        self.ask(requests::Request::Move {
            queue: queue.to_owned(),
            held,
            to: to.to_owned(),
            block,
            done,
        });
    }

    /// Makes a shared queue's stream, so that every node lists it before
    /// anything is sent to it; `done` says whether it is new.
    pub fn create_queue(&self, queue: &str, done: requests::Done<bool>) {
        self.ask(requests::Request::Create {
            queue: queue.to_owned(),
            done,
        });
    }

    /// Deletes a shared queue that no node consumes.
    pub fn drop_queue(&self, queue: &str, done: requests::Done<requests::Dropped>) {
        self.ask(requests::Request::Drop {
            queue: queue.to_owned(),
            done,
        });
    }

    /// Gives messages this node took back to a shared queue, with their
    /// delivery counts, for any node.
    pub fn give_back(&self, queue: &str, messages: Vec<requests::Held>) {
        if !messages.is_empty() {
            self.send(Command::Release {
                queue: queue.to_owned(),
                messages,
            });
        }
    }

    fn ask(&self, request: requests::Request) {
        if let Err(mpsc::SendError(request)) = self.requests.send(request) {
            request.fail("the cluster link stopped");
        }
    }

    /// Whether users and roles would still make sense after `change`: the
    /// error a login would meet otherwise.
    pub fn check(&self, change: &Change) -> Result<(), AuthConfigError> {
        let next = lock(&self.settings).with(change);
        crate::auth::Users::from_config(&next.auth_over(&lock(&self.base_auth))).map(drop)
    }

    /// A reload read this node's config file again: its `[auth]` goes
    /// under the shared users and roles.
    pub fn reload_auth(&self, shared: &Shared, file: AuthSection) -> Result<(), AuthConfigError> {
        *lock(&self.base_auth) = file;
        shared.auth.reload(&self.auth())
    }

    /// Hands a command to the outbound thread. Counted before it is
    /// queued, so that the thread never takes off more than was added.
    /// Numbers a write that a barrier answers for.
    fn number_write(&self) -> u64 {
        self.writes.fetch_add(1, Ordering::AcqRel) + 1
    }

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
        if queued > OUTBOUND_HIGH && self.stats.connected_out.is_up() {
            self.backlog.set(true);
        }
        self.backlog.is_high().then(|| self.backlog.clone())
    }

    /// Counts the topic messages `outcomes` lost.
    fn count_dropped(&self, outcomes: &mut Outcomes) {
        let n = std::mem::take(&mut outcomes.dropped);
        self.stats.dropped.fetch_add(n, Ordering::Relaxed);
        let refused = std::mem::take(&mut outcomes.refused);
        for (count, n) in self.stats.receipts_refused.iter().zip(refused) {
            count.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// `n` commands left the outbound queue.
    fn dequeued(&self, n: usize) {
        let left = self
            .queued
            .fetch_sub(n, Ordering::Relaxed)
            .saturating_sub(n);
        if left <= OUTBOUND_LOW || !self.stats.connected_out.is_up() {
            self.backlog.set(false);
        }
    }
}
