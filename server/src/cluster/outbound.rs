//! The `herald-cl-out` thread: everything this node writes to Redis
//! (topic messages for the other nodes, appends to shared queues and
//! subscription streams, settlements, commits, registry and settings
//! changes), in pipelined batches, with one `WAIT` per batch that holds a
//! receipt, and the barrier that answers a receipt once Redis has
//! answered everything before it.

use super::commands::{Command, Outcomes, Refused, Uncovered, NOT_TAKEN};
use super::common::{Keys, Reconnect};
use super::interest::INTEREST_REFRESH;
use super::shards::{broken, Redis};
use super::slots::key_slot;
use super::{durables, queues, redirect, settings, Cluster, PRIMARY_LOOK};
use crate::broker::{EntryId, SharedChanges};
use crate::frontend::Shared;
use crate::store::StoreError;
use bytes::Bytes;
use redis::Value;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::Weak;
use std::time::{Duration, Instant};

/// Messages `PUBLISH`ed in one round trip at most.
pub(super) const BATCH: usize = 1024;

/// How long the thread waits for a command before it syncs again.
const IDLE_WAIT: Duration = Duration::from_millis(20);

/// How long failed settlements wait before they are sent again.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// How long a receipt waits for `min_replicas` replicas.
pub(super) const REPLICA_WAIT: Duration = Duration::from_secs(2);

impl Command {
    /// Adds the command to `pipe`; false for a barrier, a recheck or a
    /// commit, which send nothing of their own (a commit's changes go
    /// out per slot, see `Writer::pipeline`).
    pub(super) fn add_to(&self, pipe: &mut redis::Pipeline, keys: &Keys) -> bool {
        match self {
            Command::Publish { channel, payload } => {
                pipe.cmd("PUBLISH")
                    .arg(&**channel)
                    .arg(&payload[..])
                    .ignore();
            }
            Command::Append { queue, block, .. } => queues::append(pipe, keys, queue, block, 0),
            Command::Settle { queue, entry } => queues::settle(pipe, keys, queue, &[*entry]),
            Command::Release { queue, messages } => {
                pipe.cmd("MULTI").ignore();
                for m in messages {
                    queues::append(pipe, keys, queue, &m.block, m.deliveries);
                    queues::settle(pipe, keys, queue, &[m.entry]);
                }
                pipe.cmd("EXEC").ignore();
            }
            Command::Registry {
                record,
                registered,
                by,
                step,
            } => durables::write(pipe, (record, *registered), *step, by),
            Command::Settings {
                change, node_id, ..
            } => settings::write(pipe, keys, change, node_id),
            Command::Barrier { .. }
            | Command::Recheck { .. }
            | Command::Commit { .. }
            | Command::Forget { .. } => return false,
        }
        true
    }

    /// For a write that a barrier answers for: the sender (a
    /// connection's serial, `None` for the server's own) and the write's
    /// number.
    fn write(&self) -> Option<(Option<u64>, u64)> {
        match self {
            Command::Append { from, seq, .. }
            | Command::Commit { from, seq, .. }
            | Command::Recheck { from, seq, .. } => Some((from.map(|c| c.serial), *seq)),
            Command::Settings { seq, .. } => Some((None, *seq)),
            _ => None,
        }
    }

    /// The key whose slot the command's keys share, if it has one
    /// (settlements and publishes are placed by the batch, a commit per
    /// slot).
    fn key(&self, keys: &Keys) -> Option<String> {
        match self {
            Command::Append { queue, .. }
            | Command::Release { queue, .. }
            | Command::Settle { queue, .. } => Some(keys.stream(queue)),
            Command::Registry { record, step, .. } => Some(durables::key(keys, record, *step)),
            Command::Settings { .. } => Some(keys.control().to_owned()),
            Command::Publish { channel, .. } => Some(channel.to_string()),
            Command::Barrier { .. }
            | Command::Recheck { .. }
            | Command::Commit { .. }
            | Command::Forget { .. } => None,
        }
    }

    /// Whether [`Command::add_to`] sends anything for it (it has a key).
    fn sends(&self) -> bool {
        !matches!(
            self,
            Command::Barrier { .. }
                | Command::Recheck { .. }
                | Command::Commit { .. }
                | Command::Forget { .. }
        )
    }

    /// Redis did not take the command (`why`).
    pub(super) fn fail(self, why: &str, outcomes: &mut Outcomes) {
        if let Some((sender, seq)) = self.write() {
            outcomes.wrote(sender, seq, NOT_TAKEN);
            return;
        }
        match self {
            Command::Publish { .. } => outcomes.dropped += 1,
            retry @ (Command::Settle { .. }
            | Command::Release { .. }
            | Command::Registry { .. }) => outcomes.retry.push(retry),
            Command::Barrier {
                from, covers, done, ..
            } => {
                // It fails anyway: what it covers is answered for.
                let _ = outcomes.cover(from.map(|c| c.serial), covers, |_| true);
                outcomes.refused[Refused::Unreachable as usize] += 1;
                done(Err(StoreError::Unconfirmed(why.to_owned())));
            }
            forget @ Command::Forget { .. } => forget.done(outcomes, |_| true, why),
            _ => {}
        }
    }

    /// Redis answered everything before this command: a barrier answers
    /// for the writes it covers, those on a connection `confirmed` does
    /// not hold counting as not replicated (`short` says so).
    pub(super) fn done(
        self,
        outcomes: &mut Outcomes,
        confirmed: impl Fn(u64) -> bool,
        short: &str,
    ) {
        if let Command::Forget { serial } = self {
            outcomes.writes.remove(&Some(serial));
            return;
        }
        // A receipt that follows a registry change follows all of it: a
        // subscription made before a send keeps what was sent.
        if matches!(self, Command::Barrier { .. }) && !outcomes.next.is_empty() {
            outcomes.next.push(self);
            return;
        }
        if let Command::Registry {
            record,
            registered,
            by,
            step: durables::Step::Stream,
        } = self
        {
            outcomes.next.push(Command::Registry {
                record,
                registered,
                by,
                step: durables::Step::Control,
            });
            return;
        }
        if let Command::Barrier { from, covers, done } = self {
            let answer = match outcomes.cover(from.map(|c| c.serial), covers, confirmed) {
                Ok(()) => Ok(()),
                Err(Uncovered::NotTaken) => Err((Refused::NotTaken, StoreError::Refused)),
                Err(Uncovered::Unreplicated) => Err((
                    Refused::Unreplicated,
                    StoreError::Unconfirmed(short.to_owned()),
                )),
            };
            done(answer.map_err(|(why, e)| {
                outcomes.refused[why as usize] += 1;
                e
            }))
        }
    }
}

pub(super) fn run_outbound(cluster: &Cluster, rx: &Receiver<Command>, shared: &Weak<Shared>) {
    let mut writer = Writer {
        cluster,
        rx,
        shared,
        outcomes: Outcomes::default(),
        batch: Vec::with_capacity(BATCH),
        retry_at: None,
    };
    let mut reconnect = Reconnect::default();
    let link = &cluster.stats.connected_out;
    while !cluster.stop.load(Ordering::Acquire) {
        let mut redis = match Redis::connect(&cluster.link, &cluster.keys, reconnect.again()) {
            Ok(redis) => redis,
            Err(e) => {
                link.set_down("publisher", &e);
                writer.fail_waiting(&e.to_string());
                if !reconnect.wait(&cluster.stop, link) {
                    return;
                }
                continue;
            }
        };
        reconnect.connected();
        link.set_up("publisher");
        if writer.serve(&mut redis) == Served::Stopped {
            // The node leaves the list at once rather than in a minute.
            let withdrawn = redis
                .control()
                .and_then(|con| super::nodes::withdraw(con, &cluster.keys, &cluster.node_id));
            if let Err(e) = withdrawn {
                log::debug!("cluster: this node's entry stays until it expires: {e}");
            }
            return;
        }
        // What waits is sent on the next connection, or fails if none
        // can be made.
        if !reconnect.wait(&cluster.stop, link) {
            break;
        }
    }
    // Stopping: what is left fails, so that nobody waits for it.
    let next = std::mem::take(&mut writer.outcomes.next);
    for command in writer.batch.drain(..).chain(next).chain(rx.try_iter()) {
        command.fail("the server is stopping", &mut writer.outcomes);
    }
}

/// How a connection's service ended.
#[derive(PartialEq, Eq)]
enum Served {
    /// The link broke, or Redis refused to sync: connect again.
    LinkLost,
    /// The server stops, or the channel closed.
    Stopped,
}

/// The outbound thread's state across connections.
struct Writer<'a> {
    cluster: &'a Cluster,
    rx: &'a Receiver<Command>,
    shared: &'a Weak<Shared>,
    outcomes: Outcomes,
    /// The commands of the round trip under way.
    batch: Vec<Command>,
    /// Not before then are failed settlements sent again: a shard that
    /// is down refuses them at once, and would be asked in a loop.
    retry_at: Option<Instant>,
}

/// What one batch asks of Redis: a pipeline per shard it touches.
pub(super) struct Asked {
    /// Topic messages in it.
    published: u64,
    /// The oldest registry epoch a message in it was routed with, if one
    /// was (see `Peers::recheck`): the registry's shard's pipeline reads
    /// the epoch after its appends.
    oldest: Option<u64>,
    /// It holds a receipt: each pipeline ends with a `WAIT`.
    pub(super) wait: bool,
    pub(super) parts: Vec<Part>,
    /// Per command of the batch, the parts it went in, or why it could
    /// not go (no primary serves its slot).
    pub(super) placed: Vec<Result<Vec<usize>, NotSent>>,
    /// The part that reads the epoch.
    pub(super) epoch: Option<usize>,
}

/// One shard's share of a batch.
pub(super) struct Part {
    pub(super) shard: usize,
    pub(super) pipe: redis::Pipeline,
    /// On a Redis Cluster, its runs of commands that a redirection sends
    /// again elsewhere (see `redirect`).
    pub(super) groups: Vec<Group>,
}

/// A run of one part's commands that stands or falls together (a batch
/// command's, or a bundle's, or a queue's settlements), all for one slot.
pub(super) struct Group {
    /// The batch commands it carries, by index.
    pub(super) commands: Vec<usize>,
    /// Its commands in the part's pipeline.
    pub(super) range: std::ops::Range<usize>,
    /// The key whose slot they share.
    pub(super) key: String,
}

/// Why a batch command was not sent (it fails, and is not retried).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum NotSent {
    /// No primary serves the slot of its key.
    #[error("no primary serves slot {slot} (key {key})")]
    Uncovered {
        /// The slot.
        slot: u16,
        /// The key.
        key: String,
    },
    /// Redirected more often than a command follows.
    #[error("redirected too many times")]
    Redirected,
    /// Sent by `ASK` to a node that is not a primary this node knows.
    #[error("ASK names {0}, which is not a primary this node knows")]
    UnknownNode(String),
}

/// A batch's parts, being made.
struct Parts<'r, 'l> {
    redis: &'r Redis<'l>,
    /// Per shard, its part's index in `parts`.
    of_shard: HashMap<usize, usize>,
    parts: Vec<Part>,
}

impl Parts<'_, '_> {
    /// The index of the part for `key`'s shard, made if need be.
    fn for_key(&mut self, key: &str) -> Result<usize, NotSent> {
        let shard = self.redis.shard_of(key).map_err(|_| NotSent::Uncovered {
            slot: key_slot(key.as_bytes()),
            key: key.to_owned(),
        })?;
        Ok(self.for_shard(shard))
    }

    /// Adds batch command `i` to the part for its shard; `None` for one
    /// that sends nothing of its own. With one Redis there is one shard,
    /// and no key to work out (and allocate) per message.
    fn add_command(&mut self, i: usize, command: &Command) -> Option<Result<usize, NotSent>> {
        if !self.redis.sharded() {
            let at = command.sends().then(|| self.for_shard(0))?;
            command.add_to(&mut self.parts[at].pipe, self.redis.keys());
            return Some(Ok(at));
        }
        let keys = self.redis.keys();
        let key = command.key(keys)?;
        Some(self.add_group(key, &[i], |pipe| {
            command.add_to(pipe, keys);
        }))
    }

    /// The index of the part for `shard`, made if need be.
    fn for_shard(&mut self, shard: usize) -> usize {
        *self.of_shard.entry(shard).or_insert_with(|| {
            self.parts.push(Part {
                shard,
                pipe: redis::pipe(),
                groups: Vec::new(),
            });
            self.parts.len() - 1
        })
    }

    /// Adds what `add` writes to the part for `key`; returns its index.
    fn add(&mut self, key: &str, add: impl FnOnce(&mut redis::Pipeline)) -> Result<usize, NotSent> {
        let at = self.for_key(key)?;
        add(&mut self.parts[at].pipe);
        Ok(at)
    }

    /// [`Parts::add`] for what batch commands `commands` write: on a Redis
    /// Cluster it is a [`Group`] of the part.
    fn add_group(
        &mut self,
        key: String,
        commands: &[usize],
        add: impl FnOnce(&mut redis::Pipeline),
    ) -> Result<usize, NotSent> {
        let at = self.for_key(&key)?;
        let part = &mut self.parts[at];
        let start = part.pipe.len();
        add(&mut part.pipe);
        if self.redis.sharded() {
            part.groups.push(Group {
                commands: commands.to_vec(),
                range: start..part.pipe.len(),
                key,
            });
        }
        Ok(at)
    }
}

/// A batch's answers: per part, what it answered (the epoch and the
/// replicas kept) or why it failed, and the id of the connection it went
/// on.
pub(super) type Answers = Vec<(redis::RedisResult<Vec<Value>>, u64)>;

impl Writer<'_> {
    /// While there is no connection: what waits would reach nobody in
    /// time, so it fails.
    fn fail_waiting(&mut self, why: &str) {
        let waiting: Vec<Command> = self.rx.try_iter().collect();
        self.cluster.dequeued(waiting.len());
        let next = std::mem::take(&mut self.outcomes.next);
        for command in next.into_iter().chain(waiting) {
            command.fail(why, &mut self.outcomes);
        }
        self.cluster.count_dropped(&mut self.outcomes);
    }

    /// Writes batch after batch on `con` until it breaks or the server
    /// stops.
    fn serve(&mut self, redis: &mut Redis) -> Served {
        let cluster = self.cluster;
        // Written and read again at once on every (re)connection.
        cluster.own_changed.store(true, Ordering::Relaxed);
        cluster.others_changed.store(true, Ordering::Relaxed);
        cluster.durables_changed.store(true, Ordering::Relaxed);
        cluster.settings_changed.store(true, Ordering::Relaxed);
        cluster.announce.store(true, Ordering::Relaxed);
        let mut due = Instant::now() + INTEREST_REFRESH;
        let (primary, mut looked) = (cluster.primary_now(), Instant::now());
        loop {
            if looked.elapsed() >= PRIMARY_LOOK {
                looked = Instant::now();
                if cluster.primary_moved(&primary) {
                    let e = "the node follows the primary elsewhere";
                    cluster.stats.connected_out.set_down("publisher", e);
                    return Served::LinkLost;
                }
            }
            redis.follow();
            let synced = redis.control().and_then(|con| {
                cluster.sync_interest(con, &mut due)?;
                cluster.sync_durables(con, self.shared)?;
                cluster.sync_settings(con, self.shared)
            });
            if let Err(e) = synced {
                cluster.stats.connected_out.set_down("publisher", &e);
                return Served::LinkLost;
            }
            match self.fill() {
                Some(true) => {}
                Some(false) => continue,
                None => return Served::Stopped,
            }
            let mut asked = self.pipeline(redis);
            let answered = self.send(redis, &mut asked);
            if let Err(e) = self.answer(redis, answered, &asked) {
                cluster.stats.connected_out.set_down("publisher", &e);
                return Served::LinkLost;
            }
        }
    }

    /// Fills the batch: what is to be retried, then what waits, up to a
    /// batch's size. Some(false) if nothing came within 20 ms (time to
    /// sync again), None if the server stops or the channel closed.
    fn fill(&mut self) -> Option<bool> {
        let cluster = self.cluster;
        if cluster.stop.load(Ordering::Acquire) {
            // What still fails at a stop is left: a settlement never
            // made lets another node claim and redeliver the message.
            self.outcomes.retry.clear();
        }
        self.batch.append(&mut self.outcomes.next);
        let now = Instant::now();
        if self.retry_at.is_none_or(|at| now >= at) {
            self.retry_at = None;
            self.batch.append(&mut self.outcomes.retry);
        }
        if self.batch.is_empty() {
            let wait = self.retry_at.map_or(IDLE_WAIT, |at| {
                at.saturating_duration_since(now).min(IDLE_WAIT)
            });
            match self.rx.recv_timeout(wait) {
                Ok(first) => {
                    cluster.dequeued(1);
                    self.batch.push(first);
                }
                Err(RecvTimeoutError::Timeout) if !cluster.stop.load(Ordering::Acquire) => {
                    return Some(false)
                }
                Err(_) => return None,
            }
        }
        let before = self.batch.len();
        // With a WAIT per batch, bigger batches share its replication
        // round trip (as the journal's group commit shares a sync).
        let most = match cluster.min_replicas {
            0 => BATCH,
            _ => 4 * BATCH,
        };
        while self.batch.len() < most {
            match self.rx.try_recv() {
                Ok(next) => self.batch.push(next),
                Err(TryRecvError::Empty) | Err(TryRecvError::Disconnected) => break,
            }
        }
        cluster.dequeued(self.batch.len() - before);
        Some(true)
    }

    /// The batch as a pipeline per shard: the topic messages for each
    /// inbox bundled, settlements of a queue in one XACK and one XDEL, a
    /// commit's changes in a MULTI/EXEC per slot (on a Redis Cluster a
    /// transaction is atomic per queue), then the registry's epoch if a
    /// message needs it and a WAIT in each if a receipt does.
    fn pipeline(&self, redis: &Redis) -> Asked {
        let stats = &self.cluster.stats;
        let mut parts = Parts {
            redis,
            of_shard: HashMap::new(),
            parts: Vec::new(),
        };
        let mut published = 0;
        let mut placed: Vec<Result<Vec<usize>, NotSent>> = Vec::with_capacity(self.batch.len());
        let mut settled: HashMap<&str, (Vec<EntryId>, Vec<usize>)> = HashMap::new();
        let mut bundles: HashMap<&str, (Bundle, Vec<usize>)> = HashMap::new();
        for (i, command) in self.batch.iter().enumerate() {
            placed.push(Ok(Vec::new()));
            match command {
                Command::Settle { queue, entry } => {
                    let (entries, commands) = settled.entry(queue).or_default();
                    entries.push(*entry);
                    commands.push(i);
                    continue;
                }
                Command::Publish { channel, payload } => {
                    let (bundle, commands) = bundles.entry(channel).or_default();
                    bundle.add(payload);
                    commands.push(i);
                    published += 1;
                    continue;
                }
                Command::Append { .. } => {
                    stats.appended.fetch_add(1, Ordering::Relaxed);
                }
                Command::Commit { changes, .. } => {
                    let n = changes.sends.len() as u64;
                    stats.appended.fetch_add(n, Ordering::Relaxed);
                    placed[i] = commit(&mut parts, i, changes);
                    continue;
                }
                _ => {}
            }
            if let Some(at) = parts.add_command(i, command) {
                placed[i] = at.map(|at| vec![at]);
            }
        }
        for (channel, (bundle, commands)) in &bundles {
            let at = parts.add_group(channel.to_string(), commands, |pipe| {
                bundle.flush(pipe, channel, redis.sharded())
            });
            for &i in commands {
                placed[i] = at.clone().map(|at| vec![at]);
            }
        }
        for (queue, (entries, commands)) in &settled {
            let keys = redis.keys();
            let at = parts.add_group(keys.stream(queue), commands, |pipe| {
                queues::settle(pipe, keys, queue, entries)
            });
            for &i in commands {
                placed[i] = at.clone().map(|at| vec![at]);
            }
        }
        let oldest = self
            .batch
            .iter()
            .filter_map(|c| match c {
                Command::Recheck { epoch, .. } => Some(*epoch),
                _ => None,
            })
            .min();
        let epoch = oldest.and_then(|_| {
            parts
                .add(&durables::epoch(redis.keys()), |pipe| {
                    pipe.cmd("GET").arg(durables::epoch(redis.keys()));
                })
                .ok()
        });
        // A receipt in this batch: what it confirms must be on enough
        // replicas too, or a failover could lose it. One WAIT per shard
        // for the whole batch, as the journal syncs once per group.
        let min = self.cluster.min_replicas;
        let wait = min > 0
            && self
                .batch
                .iter()
                .any(|c| matches!(c, Command::Barrier { .. }));
        if wait {
            // Writes of earlier batches are waited for too: on every
            // shard this thread has a connection to (on one that had no
            // writes, WAIT answers at once).
            for shard in redis.connected() {
                parts.for_shard(shard);
            }
        }
        let mut parts = parts.parts;
        if wait {
            for part in &mut parts {
                part.pipe
                    .cmd("WAIT")
                    .arg(min)
                    .arg(REPLICA_WAIT.as_millis() as u64);
            }
        }
        Asked {
            published,
            oldest,
            wait,
            parts,
            placed,
            epoch,
        }
    }

    /// Sends the batch's parts and reads their answers; then, if the
    /// registry moved since a message was routed, rechecks the batch's
    /// messages (a failure of that is the registry's part's).
    fn send(&self, redis: &mut Redis, asked: &mut Asked) -> Answers {
        let keep = usize::from(asked.wait);
        let mut answers = match redis.sharded() {
            true => redirect::send(
                redis,
                asked,
                (keep, self.cluster.min_replicas),
                &self.cluster.stats.redirected,
            ),
            false => {
                let plan: Vec<(usize, &redis::Pipeline, usize)> = asked
                    .parts
                    .iter()
                    .enumerate()
                    .map(|(i, p)| {
                        let epoch = usize::from(asked.epoch == Some(i));
                        (p.shard, &p.pipe, keep + epoch)
                    })
                    .collect();
                redis.on_shards(&plan)
            }
        };
        let (Some(oldest), Some(at)) = (asked.oldest, asked.epoch) else {
            return answers;
        };
        let now = match &answers[at].0 {
            Ok(kept) => kept.first().map(redis::from_redis_value::<Option<u64>>),
            Err(_) => return answers,
        };
        let rechecked = match now {
            Some(Ok(Some(now))) if now > oldest => {
                recheck(self.cluster, redis, self.shared, &self.batch, now)
            }
            Some(Err(e)) => Err(e),
            _ => Ok(None),
        };
        match rechecked {
            // The recheck's replicas count as that part's.
            Ok(Some(replicas)) => {
                if let Ok(kept) = &mut answers[at].0 {
                    kept.push(Value::Int(replicas));
                }
            }
            Ok(None) => {}
            Err(e) => answers[at].0 = Err(e),
        }
        answers
    }

    /// Completes the batch's commands with Redis's answers: a command
    /// fails with the first failed part it went in. Returns the error if
    /// the one Redis was lost (on a Redis Cluster a lost shard fails its
    /// parts, and the others go on).
    fn answer(&mut self, redis: &Redis, answers: Answers, asked: &Asked) -> redis::RedisResult<()> {
        let cluster = self.cluster;
        let failed: Vec<Option<(String, bool)>> = answers
            .iter()
            .map(|(a, _)| {
                let e = a.as_ref().err()?;
                let redirected = e.redirect_node().is_some()
                    || matches!(
                        e.kind(),
                        redis::ErrorKind::ClusterDown | redis::ErrorKind::TryAgain
                    );
                let lost = broken(e);
                if !lost && !redirected {
                    log::warn!("cluster: Redis refused a batch: {e}");
                }
                Some((e.to_string(), lost || redirected))
            })
            .collect();
        // The one Redis is lost: everything fails, and the thread
        // connects again.
        let lost = answers
            .iter()
            .filter(|_| !redis.sharded())
            .find_map(|(a, _)| a.as_ref().err().filter(|e| broken(e)));
        if let Some(e) = lost {
            let why = e.to_string();
            for command in self.batch.drain(..) {
                command.fail(&why, &mut self.outcomes);
            }
            cluster.count_dropped(&mut self.outcomes);
            return Err(redis::RedisError::from(std::io::Error::other(why)));
        }
        // The connections on which this batch's WAIT saw enough replicas
        // have every write made on them so far replicated.
        let min = cluster.min_replicas;
        let confirmed: HashSet<u64> = answers
            .iter()
            .filter(|_| asked.wait)
            .filter_map(|(a, id)| {
                let replicas = redis::from_redis_value::<i64>(a.as_ref().ok()?.last()?).ok()?;
                (replicas >= i64::from(min)).then_some(*id)
            })
            .collect();
        if asked.wait {
            // Health says so while a shard's WAIT sees too few replicas.
            let short = answers
                .iter()
                .any(|(a, id)| a.is_ok() && !confirmed.contains(id));
            let stats = &cluster.stats;
            if stats.replicas_short.swap(short, Ordering::Relaxed) != short {
                if let Some(held) = stats.replicas_log.allow() {
                    let held = crate::log_limit::held_back(held);
                    match short {
                        true => log::warn!(
                            "cluster: Redis confirms fewer replicas than cluster.min_replicas = {min}: \
                             persistent sends are refused until it does{held}"
                        ),
                        false => log::info!(
                            "cluster: Redis confirms cluster.min_replicas = {min} replicas again{held}"
                        ),
                    }
                }
            }
        }
        let short = format!(
            "a Redis shard did not confirm cluster.min_replicas = {min} replicas within {} ms",
            REPLICA_WAIT.as_millis()
        );
        // This node learns its own changes from Redis too (it skips its
        // own announcements), in case a read of the registry raced with
        // the write.
        for command in &self.batch {
            match command {
                Command::Registry { .. } => &cluster.durables_changed,
                Command::Settings { .. } => &cluster.settings_changed,
                _ => continue,
            }
            .store(true, Ordering::Relaxed);
        }
        let lost_publishes = asked
            .placed
            .iter()
            .zip(&self.batch)
            .filter(|(placed, c)| {
                matches!(c, Command::Publish { .. }) && went(placed, &failed).is_err()
            })
            .count() as u64;
        cluster
            .stats
            .published
            .fetch_add(asked.published - lost_publishes, Ordering::Relaxed);
        // Without replicas to wait for, a write Redis took is as safe as
        // it gets.
        let confirmed = |id| min == 0 || confirmed.contains(&id);
        for (command, placed) in self.batch.drain(..).zip(&asked.placed) {
            // A registry change's stream, and whether this is its last step.
            let change = match &command {
                Command::Registry { record, step, .. } => {
                    Some((record.stream(), *step == durables::Step::Control))
                }
                _ => None,
            };
            let parts = match went(placed, &failed) {
                Err((why, retry)) => {
                    let before = self.outcomes.retry.len();
                    command.fail(&why, &mut self.outcomes);
                    // A refusal would be refused again.
                    if !retry {
                        self.outcomes.retry.truncate(before);
                        if let Some((stream, _)) = &change {
                            cluster.registered(stream);
                        }
                    }
                    continue;
                }
                Ok(()) => placed.as_deref().unwrap_or_default(),
            };
            // A receipt needs the connections its writes went on to have
            // confirmed them: a write on a connection since lost, or on
            // one whose WAIT fell short, is not known to be replicated.
            if let (Some((sender, seq)), true) = (command.write(), min > 0) {
                let wrote: &[usize] = match &command {
                    Command::Recheck { .. } => asked.epoch.as_slice(),
                    _ => parts,
                };
                for &p in wrote {
                    self.outcomes.wrote(sender, seq, answers[p].1);
                }
            }
            if let Some((stream, true)) = &change {
                cluster.registered(stream);
            }
            command.done(&mut self.outcomes, confirmed, &short);
        }
        if failed.iter().any(Option::is_some) && !self.outcomes.retry.is_empty() {
            self.retry_at = Some(Instant::now() + RETRY_PAUSE);
        }
        cluster.count_dropped(&mut self.outcomes);
        Ok(())
    }
}

/// Whether a command `placed` so went through: the first failure among
/// its parts (`failed`, per part), and whether it may be retried.
fn went(
    placed: &Result<Vec<usize>, NotSent>,
    failed: &[Option<(String, bool)>],
) -> Result<(), (String, bool)> {
    match placed {
        Err(why) => Err((why.to_string(), true)),
        Ok(parts) => match parts.iter().find_map(|&p| failed[p].as_ref()) {
            Some((why, retry)) => Err((why.clone(), *retry)),
            None => Ok(()),
        },
    }
}

/// Adds a committed transaction's changes, batch command `i`, to `parts`:
/// one MULTI/EXEC per slot (one for the one Redis). Returns the parts it
/// went in.
fn commit(parts: &mut Parts, i: usize, changes: &SharedChanges) -> Result<Vec<usize>, NotSent> {
    let (sharded, keys) = (parts.redis.sharded(), parts.redis.keys());
    let slot = |queue: &str| match sharded {
        true => key_slot(keys.stream(queue).as_bytes()),
        false => 0,
    };
    let mut by_slot: std::collections::BTreeMap<u16, (&str, Vec<usize>, Vec<usize>)> =
        Default::default();
    for (i, (queue, _)) in changes.sends.iter().enumerate() {
        by_slot
            .entry(slot(queue))
            .or_insert((queue, Vec::new(), Vec::new()))
            .1
            .push(i);
    }
    for (i, (queue, _)) in changes.settled.iter().enumerate() {
        by_slot
            .entry(slot(queue))
            .or_insert((queue, Vec::new(), Vec::new()))
            .2
            .push(i);
    }
    let mut went = Vec::new();
    for (queue, sends, settles) in by_slot.values() {
        let at = parts.add_group(keys.stream(queue), &[i], |pipe| {
            pipe.cmd("MULTI").ignore();
            for &n in sends {
                let (queue, block) = &changes.sends[n];
                queues::append(pipe, keys, queue, block, 0);
            }
            for &n in settles {
                let (queue, entry) = &changes.settled[n];
                queues::settle(pipe, keys, queue, &[*entry]);
            }
            pipe.cmd("EXEC").ignore();
        })?;
        if !went.contains(&at) {
            went.push(at);
        }
    }
    Ok(went)
}

/// Appends the messages of `batch` that were routed knowing a registry
/// older than `epoch` to the streams of the subscriptions registered
/// since, having read the registry again. Returns how many replicas
/// confirmed them (the fewest on any stream's shard), if a WAIT was due.
pub(super) fn recheck(
    cluster: &Cluster,
    redis: &mut Redis,
    shared: &Weak<Shared>,
    batch: &[Command],
    epoch: u64,
) -> redis::RedisResult<Option<i64>> {
    cluster.durables_changed.store(true, Ordering::Relaxed);
    cluster.sync_durables(redis.control()?, shared)?;
    let Some(shared) = shared.upgrade() else {
        return Ok(None);
    };
    let keys = redis.keys();
    // Per stream: each has a slot of its own.
    let mut pipes: HashMap<String, redis::Pipeline> = HashMap::new();
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
                let pipe = pipes
                    .entry(keys.stream(&stream))
                    .or_insert_with(redis::pipe);
                queues::append(pipe, keys, &stream, block, 0);
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
    let mut fewest = None;
    for (key, mut pipe) in pipes {
        if min == 0 {
            redis.pipeline(&key, &pipe, 0)?;
            continue;
        }
        pipe.cmd("WAIT")
            .arg(min)
            .arg(REPLICA_WAIT.as_millis() as u64);
        let answers = redis.pipeline(&key, &pipe, 1)?;
        if let Some(replicas) = answers.first() {
            let replicas = redis::from_redis_value::<i64>(replicas)?;
            fewest = Some(fewest.map_or(replicas, |f: i64| f.min(replicas)));
        }
    }
    Ok(fewest)
}

/// Marks a PUBLISH that carries several payloads for one channel: a zero
/// byte (no single payload starts with one: its origin is never empty),
/// then each payload after its length (u32, big-endian). Under load the
/// outbound thread bundles consecutive messages for one topic, which
/// spares Redis a command, and the other nodes a reply to parse, per
/// message.
pub(super) const BUNDLE: u8 = 0;

/// Payload bytes one bundle carries at most.
pub(super) const BUNDLE_BYTES: usize = 64 * 1024;

/// Publishes to one channel, being bundled: each bundle carries at most
/// [`BUNDLE_BYTES`] of payloads.
#[derive(Default)]
pub(super) struct Bundle<'a> {
    payloads: Vec<&'a Bytes>,
}

impl<'a> Bundle<'a> {
    /// Adds a publish.
    fn add(&mut self, payload: &'a Bytes) {
        self.payloads.push(payload);
    }

    /// Adds the PUBLISHes (SPUBLISHes if `sharded`: on a Redis Cluster)
    /// of what was bundled to `pipe`: a lone payload as it is, more in
    /// bundles of up to [`BUNDLE_BYTES`].
    fn flush(&self, pipe: &mut redis::Pipeline, channel: &str, sharded: bool) {
        let verb = if sharded { "SPUBLISH" } else { "PUBLISH" };
        let mut rest = &self.payloads[..];
        while !rest.is_empty() {
            let mut bytes = 0;
            let n = rest
                .iter()
                .take_while(|p| {
                    bytes += 4 + p.len();
                    bytes <= BUNDLE_BYTES
                })
                .count()
                .max(1);
            let (these, after) = rest.split_at(n);
            rest = after;
            match these {
                [one] => {
                    pipe.cmd(verb).arg(channel).arg(&one[..]).ignore();
                }
                many => {
                    let mut b = Vec::with_capacity(1 + bytes);
                    b.push(BUNDLE);
                    for p in many {
                        b.extend_from_slice(&(p.len() as u32).to_be_bytes());
                        b.extend_from_slice(p);
                    }
                    pipe.cmd(verb).arg(channel).arg(b).ignore();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::inbound::unbundle;
    use super::*;

    #[test]
    fn bundles_carry_each_payload_and_refuse_truncation() {
        let payloads: Vec<Bytes> = [&b"\x01one"[..], b"\x02two!", b"\x03"]
            .iter()
            .map(|p| Bytes::copy_from_slice(p))
            .collect();
        let mut pipe = redis::pipe();
        let mut bundle = Bundle::default();
        for p in &payloads {
            bundle.add(p);
        }
        bundle.flush(&mut pipe, "herald:in:{x}", false);
        let mut lone = Bundle::default();
        lone.add(&payloads[0]);
        lone.flush(&mut pipe, "herald:in:{y}", false);
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
