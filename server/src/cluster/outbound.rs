//! The `herald-cluster-out` thread: everything this node writes to Redis
//! (topic messages for the other nodes, appends to shared queues and
//! subscription streams, settlements, commits, registry and settings
//! changes), in pipelined batches, with one `WAIT` per batch that holds a
//! receipt, and the barrier that answers a receipt once Redis has
//! answered everything before it.

use super::commands::{Command, Outcomes};
use super::common::{back_off, link_down, link_up, query_pipeline};
use super::interest::INTEREST_REFRESH;
use super::{durables, queues, settings, Cluster, PRIMARY_LOOK};
use crate::broker::EntryId;
use crate::frontend::Shared;
use crate::store::StoreError;
use bytes::Bytes;
use redis::Value;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::Weak;
use std::time::{Duration, Instant};

/// Messages `PUBLISH`ed in one round trip at most.
pub(super) const BATCH: usize = 1024;

/// How long a receipt waits for `min_replicas` replicas.
pub(super) const REPLICA_WAIT: Duration = Duration::from_secs(2);

impl Command {
    /// Adds the command to `pipe`; false for a barrier or a recheck,
    /// which send nothing of their own.
    pub(super) fn add_to(&self, pipe: &mut redis::Pipeline) -> bool {
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
    pub(super) fn fail(self, why: &str, outcomes: &mut Outcomes) {
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
                done(Err(StoreError::Unconfirmed(why.to_owned())));
            }
        }
    }

    /// Redis answered everything before this command.
    pub(super) fn done(self, outcomes: &mut Outcomes) {
        if let Command::Barrier { from, done } = self {
            match outcomes.failed.remove(&from.map(|c| c.serial)) {
                true => done(Err(StoreError::Refused)),
                false => done(Ok(())),
            }
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
    };
    let mut attempt = 0;
    while !cluster.stop.load(Ordering::Acquire) {
        let mut con = match cluster.link.connection() {
            Ok(con) => con,
            Err(e) => {
                link_down(&cluster.stats.connected_out, "publisher", &e);
                writer.fail_waiting(&e.to_string());
                if !back_off(&cluster.stop, &mut attempt) {
                    return;
                }
                continue;
            }
        };
        attempt = 0;
        link_up(&cluster.stats.connected_out, "publisher");
        if writer.serve(&mut con) == Served::Stopped {
            // The node leaves the list at once rather than in a minute.
            if let Err(e) = super::nodes::withdraw(&mut con, &cluster.node_id) {
                log::debug!("cluster: this node's entry stays until it expires: {e}");
            }
            return;
        }
    }
    // Stopping: what is left fails, so that nobody waits for it.
    for command in writer.batch.drain(..).chain(rx.try_iter()) {
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
}

/// What one batch's pipeline asks of Redis besides its commands.
struct Asked {
    /// Topic messages in it.
    published: u64,
    /// The oldest registry epoch a message in it was routed with, if one
    /// was (see `Peers::recheck`): the pipeline reads the epoch.
    oldest: Option<u64>,
    /// It holds a receipt: the pipeline ends with a `WAIT`.
    wait: bool,
}

impl Writer<'_> {
    /// While there is no connection: what waits would reach nobody in
    /// time, so it fails.
    fn fail_waiting(&mut self, why: &str) {
        let waiting: Vec<Command> = self.rx.try_iter().collect();
        self.cluster.dequeued(waiting.len());
        for command in waiting {
            command.fail(why, &mut self.outcomes);
        }
        self.cluster.count_dropped(&mut self.outcomes);
    }

    /// Writes batch after batch on `con` until it breaks or the server
    /// stops.
    fn serve(&mut self, con: &mut redis::Connection) -> Served {
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
                    link_down(&cluster.stats.connected_out, "publisher", e);
                    return Served::LinkLost;
                }
            }
            let synced = cluster
                .sync_interest(con, &mut due)
                .and_then(|()| cluster.sync_durables(con, self.shared))
                .and_then(|()| cluster.sync_settings(con, self.shared));
            if let Err(e) = synced {
                link_down(&cluster.stats.connected_out, "publisher", &e);
                return Served::LinkLost;
            }
            match self.fill() {
                Some(true) => {}
                Some(false) => continue,
                None => return Served::Stopped,
            }
            let (pipe, asked) = self.pipeline();
            let answered = self.send(con, pipe, &asked);
            if let Err(e) = self.answer(answered, asked.published) {
                link_down(&cluster.stats.connected_out, "publisher", &e);
                return Served::LinkLost;
            }
        }
    }

    /// Fills the batch: what is to be retried, then what waits, up to a
    /// batch's size. Some(false) if nothing came within 20 ms (time to
    /// sync again), None if the server stops or the channel closed.
    fn fill(&mut self) -> Option<bool> {
        let cluster = self.cluster;
        self.batch.append(&mut self.outcomes.retry);
        if self.batch.is_empty() {
            match self.rx.recv_timeout(Duration::from_millis(20)) {
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

    /// The batch as one pipeline: consecutive topic messages bundled,
    /// settlements of a queue in one XACK and one XDEL, then the
    /// registry's epoch if a message needs it and a WAIT if a receipt
    /// does.
    fn pipeline(&self) -> (redis::Pipeline, Asked) {
        let stats = &self.cluster.stats;
        let mut pipe = redis::pipe();
        let mut published = 0;
        let mut settled: HashMap<&str, Vec<EntryId>> = HashMap::new();
        let mut bundle = Bundle::default();
        for command in &self.batch {
            match command {
                Command::Settle { queue, entry } => {
                    settled.entry(queue).or_default().push(*entry);
                    continue;
                }
                Command::Publish { channel, payload } => {
                    bundle.add(&mut pipe, channel, payload);
                    published += 1;
                    continue;
                }
                Command::Append { .. } => {
                    stats.appended.fetch_add(1, Ordering::Relaxed);
                }
                Command::Commit { changes, .. } => {
                    let n = changes.sends.len() as u64;
                    stats.appended.fetch_add(n, Ordering::Relaxed);
                }
                _ => {}
            }
            bundle.flush(&mut pipe);
            command.add_to(&mut pipe);
        }
        bundle.flush(&mut pipe);
        for (queue, entries) in &settled {
            queues::settle(&mut pipe, queue, entries);
        }
        let oldest = self
            .batch
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
        let min = self.cluster.min_replicas;
        let wait = min > 0
            && self
                .batch
                .iter()
                .any(|c| matches!(c, Command::Barrier { .. }));
        if wait {
            pipe.cmd("WAIT")
                .arg(min)
                .arg(REPLICA_WAIT.as_millis() as u64);
        }
        let asked = Asked {
            published,
            oldest,
            wait,
        };
        (pipe, asked)
    }

    /// Sends the pipeline and reads its answers, rechecking the batch's
    /// messages if the registry moved; returns how many replicas
    /// confirmed, if a WAIT was due.
    fn send(
        &self,
        con: &mut redis::Connection,
        pipe: redis::Pipeline,
        asked: &Asked,
    ) -> redis::RedisResult<Option<i64>> {
        let keep = usize::from(asked.oldest.is_some()) + usize::from(asked.wait);
        let answers = query_pipeline(con, &pipe, keep)?;
        let mut answers = answers.iter();
        let mut next = || answers.next().unwrap_or(&Value::Nil);
        let epoch = match asked.oldest {
            Some(_) => redis::from_redis_value::<Option<u64>>(next())?,
            None => None,
        };
        let replicas = match asked.wait {
            true => Some(redis::from_redis_value::<i64>(next())?),
            false => None,
        };
        match (asked.oldest, epoch) {
            (Some(oldest), Some(now)) if now > oldest => {
                let more = recheck(self.cluster, con, self.shared, &self.batch, now)?;
                Ok(replicas.into_iter().chain(more).min())
            }
            _ => Ok(replicas),
        }
    }

    /// Completes the batch's commands with Redis's answer. Returns the
    /// error if the link was lost (a refusal is not: it would be refused
    /// again, so nothing is retried).
    fn answer(
        &mut self,
        answered: redis::RedisResult<Option<i64>>,
        published: u64,
    ) -> redis::RedisResult<()> {
        let cluster = self.cluster;
        let replicas = match answered {
            Ok(replicas) => replicas,
            Err(e) => {
                let why = e.to_string();
                let lost_link = e.is_io_error() || e.is_connection_dropped();
                for command in self.batch.drain(..) {
                    command.fail(&why, &mut self.outcomes);
                }
                if !lost_link {
                    log::warn!("cluster: Redis refused a batch: {why}");
                    self.outcomes.retry.clear();
                }
                cluster.count_dropped(&mut self.outcomes);
                return match lost_link {
                    true => Err(e),
                    false => Ok(()),
                };
            }
        };
        // Written on the primary, but not replicated enough: the receipts
        // fail (the messages may yet be delivered).
        let min = cluster.min_replicas;
        let short = replicas.filter(|&n| n < i64::from(min)).map(|n| {
            format!(
                "only {n} of cluster.min_replicas = {min} Redis replicas confirmed within {} ms",
                REPLICA_WAIT.as_millis()
            )
        });
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
        cluster
            .stats
            .published
            .fetch_add(published, Ordering::Relaxed);
        for command in self.batch.drain(..) {
            match (&short, &command) {
                (Some(why), Command::Barrier { .. }) => command.fail(why, &mut self.outcomes),
                _ => command.done(&mut self.outcomes),
            }
        }
        Ok(())
    }
}

/// Appends the messages of `batch` that were routed knowing a registry
/// older than `epoch` to the streams of the subscriptions registered
/// since, having read the registry again. Returns how many replicas
/// confirmed them, if a WAIT was due.
pub(super) fn recheck(
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
        query_pipeline(con, &pipe, 0)?;
        return Ok(None);
    }
    pipe.cmd("WAIT")
        .arg(min)
        .arg(REPLICA_WAIT.as_millis() as u64);
    let answers = query_pipeline(con, &pipe, 1)?;
    answers
        .first()
        .map(redis::from_redis_value::<i64>)
        .transpose()
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

/// Consecutive publishes to one channel, being bundled.
#[derive(Default)]
pub(super) struct Bundle<'a> {
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
