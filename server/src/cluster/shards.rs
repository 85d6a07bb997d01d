//! The Redis a cluster thread talks to ([`Redis`]): one server (plain, or
//! the primary Sentinel names), or the primaries of a Redis Cluster, each
//! command sent to the primary that serves its key's slot.
//!
//! With a Redis Cluster a thread keeps a connection per primary, made when
//! first needed, and the slot map the node last read (`CLUSTER SLOTS`,
//! shared by its threads through the [`Link`]). A command answered
//! `MOVED` (a slot that moved: a failover, a resharding) makes it read the
//! map anew and send the command again; one answered `ASK` (a slot being
//! migrated) goes once to the node named, after `ASKING`. A pipeline is
//! sent to one shard whole; if it meets a redirection or its connection
//! breaks, it fails, that shard's connection is dropped and the map read
//! again, and the thread's other shards go on. The `redis` crate's own
//! cluster client does not fit here: it routes a whole pipeline by its
//! first command, has no transactions in pipelines, refuses `PUBLISH` in
//! them, sends a keyless `WAIT` to any node, and has no pub/sub at all.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{Cmd, Connection, ErrorKind, FromRedisValue, Pipeline, RedisError, RedisResult, Value};

use super::common::{query_pipeline, recv_all, recv_pipeline, send_pipeline, Keys};
use super::link::Link;
use super::slots::{key_slot, SlotMap};

/// Redirections one command follows before it gives up.
pub(super) const REDIRECTS: usize = 3;

/// A thread's connections to Redis: one, or one per cluster primary.
pub(super) struct Redis<'a> {
    link: &'a Link,
    /// The cluster's key names.
    keys: &'a Keys,
    /// The slots; `None` for one server.
    map: Option<Arc<SlotMap>>,
    /// The generation of `map` (see [`Link::slots`]).
    generation: u64,
    /// Per primary of `map` (the one server's at 0), its connection.
    cons: Vec<Option<Connection>>,
    /// Per primary, until when it is not tried again after its
    /// connection failed: a dead primary is not asked for a connection
    /// at every command until its replica takes over.
    down: Vec<Option<Instant>>,
    /// The slots are to be read again, after the operation under way.
    stale: bool,
    /// Per primary, the id of its connection: a `WAIT` confirms only the
    /// writes made on the same connection, so a receipt must know that
    /// its write and its `WAIT` went on one.
    ids: Vec<u64>,
}

/// The id the next connection gets, unique in the process (a thread's
/// `Redis` is made again at each reconnection).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// How long a primary whose connection failed is left alone.
const DOWN_FOR: Duration = Duration::from_millis(200);

fn cluster_error(kind: ErrorKind, what: &'static str, detail: String) -> RedisError {
    RedisError::from((kind, what, detail))
}

/// Whether `e` says that the connection it came on is done with.
pub(super) fn broken(e: &RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_timeout()
}

impl<'a> Redis<'a> {
    /// Connects: to the one server at once; to a cluster's primaries as
    /// each is first needed, once the slots are known (read anew from any
    /// node that answers if `again`: the last connection failed, maybe on
    /// a primary that a failover has replaced since).
    pub(super) fn connect(link: &'a Link, keys: &'a Keys, again: bool) -> RedisResult<Redis<'a>> {
        let mut slots = link.slots()?;
        if again && slots.is_some() {
            slots = Some(link.read_slots()?);
        }
        match slots {
            Some((map, generation)) => Ok(Redis {
                link,
                keys,
                cons: map.primaries.iter().map(|_| None).collect(),
                down: vec![None; map.primaries.len()],
                ids: vec![0; map.primaries.len()],
                map: Some(map),
                generation,
                stale: false,
            }),
            None => Ok(Redis {
                link,
                keys,
                cons: vec![Some(link.connection()?)],
                down: vec![None],
                ids: vec![next_id()],
                map: None,
                generation: 0,
                stale: false,
            }),
        }
    }

    /// The cluster's key names.
    pub(super) fn keys(&self) -> &'a Keys {
        self.keys
    }

    /// Whether commands go to the primary of their key's slot.
    pub(super) fn sharded(&self) -> bool {
        self.map.is_some()
    }

    /// How many primaries there are (1 for one server).
    pub(super) fn shards(&self) -> usize {
        self.cons.len()
    }

    /// The primary that serves `key`, by its index.
    pub(super) fn shard_of(&self, key: &str) -> RedisResult<usize> {
        let Some(map) = &self.map else {
            return Ok(0);
        };
        let slot = key_slot(key.as_bytes());
        map.primary_of(slot).ok_or_else(|| {
            cluster_error(
                ErrorKind::ClusterDown,
                "uncovered slot",
                format!("no primary serves slot {slot} (key {key})"),
            )
        })
    }

    /// The primaries this thread has a connection to.
    pub(super) fn connected(&self) -> impl Iterator<Item = usize> + '_ {
        self.cons
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.as_ref().map(|_| i))
    }

    /// `host:port` of primary `shard` ("" for one server).
    pub(super) fn addr(&self, shard: usize) -> &str {
        self.map
            .as_ref()
            .and_then(|m| m.primaries.get(shard))
            .map_or("", String::as_str)
    }

    /// The connection to primary `shard`, made if need be.
    pub(super) fn at(&mut self, shard: usize) -> RedisResult<&mut Connection> {
        if self.cons.get(shard).is_some_and(Option::is_none) {
            if let Some(until) = self.down[shard].filter(|&t| Instant::now() < t) {
                return Err(cluster_error(
                    ErrorKind::IoError,
                    "primary down",
                    format!(
                        "{} failed; tried again in {} ms",
                        self.addr(shard),
                        until.saturating_duration_since(Instant::now()).as_millis()
                    ),
                ));
            }
            match self.link.connect_to(self.addr(shard)) {
                Ok(con) => {
                    (self.cons[shard], self.down[shard]) = (Some(con), None);
                    self.ids[shard] = next_id();
                }
                Err(e) => {
                    // Dead, or no longer the primary: left alone a moment,
                    // and the slots read again (once what is under way is
                    // answered: a shard's index must mean the same
                    // connection until then), which name its replica
                    // once that took over.
                    self.down[shard] = Some(Instant::now() + DOWN_FOR);
                    self.stale = true;
                    return Err(e);
                }
            }
        }
        let shards = self.cons.len();
        self.cons
            .get_mut(shard)
            .and_then(Option::as_mut)
            .ok_or_else(|| {
                cluster_error(
                    ErrorKind::ClientError,
                    "no such shard",
                    format!("shard {shard} of {shards}"),
                )
            })
    }

    /// Takes up the slots another of the node's threads read since this
    /// one did (cheap when none did).
    pub(super) fn follow(&mut self) {
        if self.map.is_some() && self.link.slots_generation() != self.generation {
            if let Ok(Some((map, generation))) = self.link.slots() {
                self.adopt(map, generation);
            }
        }
    }

    /// Reads the slots again, keeping the connections to primaries that
    /// still are ones.
    pub(super) fn refresh(&mut self) -> RedisResult<()> {
        let (map, generation) = self.link.read_slots()?;
        self.adopt(map, generation);
        Ok(())
    }

    fn adopt(&mut self, map: Arc<SlotMap>, generation: u64) {
        let mut cons: Vec<Option<Connection>> = map.primaries.iter().map(|_| None).collect();
        let mut down = vec![None; map.primaries.len()];
        let mut ids = vec![0; map.primaries.len()];
        if let Some(old) = &self.map {
            let was = self
                .cons
                .drain(..)
                .zip(self.down.drain(..))
                .zip(self.ids.drain(..));
            for (addr, ((con, until), id)) in old.primaries.iter().zip(was) {
                if let Some(i) = map.primaries.iter().position(|p| p == addr) {
                    (cons[i], down[i], ids[i]) = (con, until, id);
                }
            }
        }
        self.cons = cons;
        self.down = down;
        self.ids = ids;
        self.map = Some(map);
        self.generation = generation;
    }

    /// After a failure on `shard`: a broken connection is dropped, and a
    /// redirection or a lost primary has the slots read again (an error
    /// then is left for the next command to meet).
    pub(super) fn failed(&mut self, shard: usize, e: &RedisError) {
        self.failures([(shard, e)]);
    }

    /// [`Redis::failed`] for several at once, the slots read once.
    fn failures<'e>(&mut self, failed: impl IntoIterator<Item = (usize, &'e RedisError)>) {
        if !self.sharded() {
            return;
        }
        for (shard, e) in failed {
            if broken(e) {
                if let Some(con) = self.cons.get_mut(shard) {
                    // Its primary is left alone a moment, unless it was
                    // already (no new connection was tried).
                    if con.take().is_some() {
                        self.down[shard] = Some(Instant::now() + DOWN_FOR);
                        self.stale = true;
                    }
                }
            }
            self.stale |= matches!(
                e.kind(),
                ErrorKind::Moved | ErrorKind::Ask | ErrorKind::ClusterDown | ErrorKind::TryAgain
            );
        }
        if std::mem::take(&mut self.stale) {
            if let Err(why) = self.refresh() {
                log::debug!("cluster: the slots were not read again: {why}");
            }
        }
    }

    /// `cmd`, whose first key is `key`, on the primary that serves it,
    /// following redirections.
    pub(super) fn query<T: FromRedisValue>(&mut self, key: &str, cmd: &Cmd) -> RedisResult<T> {
        let mut tries = 0;
        loop {
            let shard = self.shard_of(key)?;
            let e = match self.at(shard).and_then(|con| cmd.query::<Value>(con)) {
                Ok(value) => return redis::from_owned_redis_value(value),
                Err(e) => e,
            };
            tries += 1;
            match (e.kind(), e.redirect_node()) {
                (ErrorKind::Ask, Some((addr, _))) if self.sharded() => {
                    let mut con = self.link.connect_to(addr)?;
                    redis::cmd("ASKING").query::<()>(&mut con)?;
                    return cmd.query(&mut con);
                }
                (ErrorKind::Moved, _) if self.sharded() && tries < REDIRECTS => self.refresh()?,
                _ => {
                    self.failed(shard, &e);
                    return Err(e);
                }
            }
        }
    }

    /// `pipe`, whose keys all share `key`'s slot, on the primary that
    /// serves it, again after a `MOVED` (which none of its commands
    /// passed); returns the last `keep` answers (see [`query_pipeline`]).
    pub(super) fn pipeline(
        &mut self,
        key: &str,
        pipe: &Pipeline,
        keep: usize,
    ) -> RedisResult<Vec<Value>> {
        let mut tries = 0;
        loop {
            let shard = self.shard_of(key)?;
            let e = match self.on_shard(shard, pipe, keep) {
                Ok(answers) => return Ok(answers),
                Err(e) => e,
            };
            tries += 1;
            if e.kind() != ErrorKind::Moved || tries >= REDIRECTS {
                return Err(e);
            }
        }
    }

    /// `pipe` on primary `shard`, as it is: a failure is handled as
    /// [`Redis::failed`] says, and returned.
    pub(super) fn on_shard(
        &mut self,
        shard: usize,
        pipe: &Pipeline,
        keep: usize,
    ) -> RedisResult<Vec<Value>> {
        let answered = self
            .at(shard)
            .and_then(|con| query_pipeline(con, pipe, keep));
        if let Err(e) = &answered {
            self.failed(shard, e);
        }
        answered
    }

    /// The connection to the primary that holds the keys that describe
    /// the cluster ([`Keys::control`]).
    pub(super) fn control(&mut self) -> RedisResult<&mut Connection> {
        let shard = self.shard_of(self.keys.control())?;
        self.at(shard)
    }

    /// Each of `parts` (a shard, a pipeline, how many answers to keep) on
    /// its shard, all sent before any answer is read, so that the shards
    /// work on them at once; the answers in the order of `parts` (as
    /// [`query_pipeline`] gives them), each failure handled as
    /// [`Redis::failed`] says.
    /// With each answer, the id of the connection the part went on.
    pub(super) fn on_shards(
        &mut self,
        parts: &[(usize, &Pipeline, usize)],
    ) -> Vec<(RedisResult<Vec<Value>>, u64)> {
        self.sent_then(parts, recv_pipeline)
    }

    /// [`Redis::on_shards`], with every answer kept and a refusal among
    /// them as it came: a part fails only if its connection does.
    pub(super) fn each_answer_on(
        &mut self,
        parts: &[(usize, &Pipeline)],
    ) -> Vec<(RedisResult<Vec<Value>>, u64)> {
        let parts: Vec<(usize, &Pipeline, usize)> = parts.iter().map(|&(s, p)| (s, p, 0)).collect();
        self.sent_then(&parts, |con, pipe, _| recv_all(con, pipe))
    }

    /// The primary at `addr` (`host:port`), by its index, if it is one.
    pub(super) fn shard_at(&self, addr: &str) -> Option<usize> {
        self.map.as_ref()?.primaries.iter().position(|p| p == addr)
    }

    fn sent_then(
        &mut self,
        parts: &[(usize, &Pipeline, usize)],
        recv: impl Fn(&mut Connection, &Pipeline, usize) -> RedisResult<Vec<Value>>,
    ) -> Vec<(RedisResult<Vec<Value>>, u64)> {
        let sent: Vec<RedisResult<()>> = parts
            .iter()
            .map(|&(shard, pipe, _)| self.at(shard).and_then(|con| send_pipeline(con, pipe)))
            .collect();
        let answers: Vec<(RedisResult<Vec<Value>>, u64)> = parts
            .iter()
            .zip(sent)
            .map(|(&(shard, pipe, keep), sent)| {
                let answer = sent
                    .and_then(|()| self.at(shard))
                    .and_then(|con| recv(con, pipe, keep));
                (answer, self.ids[shard])
            })
            .collect();
        self.failures(
            parts
                .iter()
                .zip(&answers)
                .filter_map(|(&(shard, _, _), (answer, _))| Some((shard, answer.as_ref().err()?))),
        );
        answers
    }

    /// `run` on every primary's connection, each answer in their order:
    /// for what looks at what one server holds (`SCAN`, `KEYS`).
    pub(super) fn each<T>(
        &mut self,
        mut run: impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> RedisResult<Vec<T>> {
        let mut answers = Vec::with_capacity(self.shards());
        for shard in 0..self.shards() {
            match self.at(shard).and_then(&mut run) {
                Ok(a) => answers.push(a),
                Err(e) => {
                    self.failed(shard, &e);
                    return Err(e);
                }
            }
        }
        Ok(answers)
    }
}

/// A command sent to the shard of a key of its, through [`Redis::query`]:
/// `redis::cmd("XLEN").arg(&key).on(shards, &key)`.
pub(super) trait Routed {
    /// Sends the command to the primary that serves `key`.
    fn on<T: FromRedisValue>(&self, shards: &mut Redis, key: &str) -> RedisResult<T>;
}

impl Routed for Cmd {
    fn on<T: FromRedisValue>(&self, shards: &mut Redis, key: &str) -> RedisResult<T> {
        shards.query(key, self)
    }
}
