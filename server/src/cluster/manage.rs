//! An operator's work on a shared queue's stream, for the management
//! interface: a page of its messages without consuming them, one message
//! found by id (taken out of the stream for a delete or a move, left for
//! a copy), and the queue deleted (created: its stream and group made, in
//! `queues`). All on the queue thread's connection.
//!
//! A message some node has read (pending in the group: delivered, or
//! waiting in that node for its consumers) is in flight, as on a single
//! node, and is neither deleted nor moved: the check and the `XDEL` run
//! in one script, so no node reads the entry in between.
//!
//! A queue's messages are in its own stream and in those of the
//! partitions of its message groups (see `super::groups`): each of these
//! works on all of them, the queue's own first.

use bytes::Bytes;
use herald_protocol::message::MessageRef;
use herald_protocol::selector::Selector;
use redis::Value;

use super::common::PARTITIONS;
use super::replies::{array, bulk, consumers, entries, int, pending_entries, GROUP};
use super::requests::{Dropped, Held, Listed, Page, Picked};
use super::shards::{Redis, Routed};
use super::slots::key_slot;
use crate::broker::EntryId;

/// Entries read from a stream per round trip.
const CHUNK: usize = 512;

/// A member that read a stream this recently has consumers: a node reads
/// every few milliseconds while its consumers have credit, and holds what
/// it read (pending) while they have none.
const RECENT_MS: u64 = 1000;

/// Takes an entry out of a stream (`KEYS[1]`) unless it is pending in
/// the group (`ARGV[1]`): with a second key, appends `ARGV[3]` (the
/// message as it goes on) to that stream first, in the same step, so that
/// a move is never lost nor doubled, whatever fails. Answers
/// `{"held", consumer}`, `{"gone"}` or `{"ok"}`. A stream without the
/// group has nothing pending.
const TAKE_UNLESS_HELD: &str = r"
local p = redis.pcall('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if type(p) == 'table' and p.err == nil and #p > 0 then
  return {'held', p[1][2]}
end
if #redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2]) == 0 then
  return {'gone'}
end
if KEYS[2] then
  redis.call('XADD', KEYS[2], '*', 'm', ARGV[3])
end
redis.call('XDEL', KEYS[1], ARGV[2])
return {'ok'}
";

/// Answers which of the streams `KEYS` exist, by their places from 0.
const EXISTING: &str = "local found = {} \
    for i, key in ipairs(KEYS) do \
      if redis.call('EXISTS', key) == 1 then table.insert(found, i - 1) end \
    end return found";

/// The streams of `queue` that exist, by their part (see
/// [`EntryId::part`]): one round trip, as they are all in its slot.
pub(super) fn parts(shards: &mut Redis, queue: &str) -> redis::RedisResult<Vec<u8>> {
    let keys = shards.keys();
    let streams: Vec<String> = (0..=PARTITIONS)
        .map(|part| keys.entry_stream(queue, part))
        .collect();
    let found: Value = redis::cmd("EVAL")
        .arg(EXISTING)
        .arg(streams.len())
        .arg(&streams)
        .on(shards, &streams[0])?;
    Ok(array(found)
        .iter()
        .filter_map(int)
        .map(|part| part as u8)
        .collect())
}

/// Whether the queue has a stream.
pub(super) fn exists(shards: &mut Redis, queue: &str) -> redis::RedisResult<bool> {
    Ok(!parts(shards, queue)?.is_empty())
}

/// Every entry of `queue`'s streams that holds a message, in order in
/// each, a chunk at a time, until `each` says stop.
pub(super) fn scan(
    shards: &mut Redis,
    queue: &str,
    mut each: impl FnMut(EntryId, Bytes, u32) -> bool,
) -> redis::RedisResult<()> {
    for part in parts(shards, queue)? {
        let key = shards.keys().entry_stream(queue, part);
        let mut after = "-".to_owned();
        loop {
            let page: Value = redis::cmd("XRANGE")
                .arg(&key)
                .arg(&after)
                .arg("+")
                .arg("COUNT")
                .arg(CHUNK)
                .on(shards, &key)?;
            let page = entries(page);
            let Some((last, _)) = page.last() else {
                break;
            };
            after = format!("({last}");
            for (entry, fields) in page {
                if let Some(block) = fields.block {
                    if !each(EntryId { part, ..entry }, block, fields.deliveries) {
                        return Ok(());
                    }
                }
            }
        }
    }
    Ok(())
}

/// The member holding each pending entry of `queue`.
fn holders(
    shards: &mut Redis,
    queue: &str,
) -> redis::RedisResult<std::collections::HashMap<EntryId, String>> {
    let mut held = std::collections::HashMap::new();
    for part in parts(shards, queue)? {
        let key = shards.keys().entry_stream(queue, part);
        let mut after = "-".to_owned();
        // A stream whose group is not made yet has nothing pending.
        while let Ok(reply) = redis::cmd("XPENDING")
            .arg(&key)
            .arg(GROUP)
            .arg(&after)
            .arg("+")
            .arg(CHUNK)
            .on::<Value>(shards, &key)
        {
            let lines = pending_entries(reply);
            let Some(last) = lines.last().map(|p| p.entry) else {
                break;
            };
            after = format!("({last}");
            held.extend(
                lines
                    .into_iter()
                    .map(|p| (EntryId { part, ..p.entry }, p.consumer)),
            );
        }
    }
    Ok(held)
}

/// How many entries `queue`'s streams hold.
fn length(shards: &mut Redis, queue: &str) -> redis::RedisResult<u64> {
    let mut total = 0;
    for part in parts(shards, queue)? {
        let key = shards.keys().entry_stream(queue, part);
        total += redis::cmd("XLEN").arg(&key).on::<u64>(shards, &key)?;
    }
    Ok(total)
}

/// A page of `queue`'s messages that `selector` selects (`None`: no such
/// queue).
pub(super) fn page(
    shards: &mut Redis,
    queue: &str,
    selector: Option<&Selector>,
    (offset, limit): (usize, usize),
) -> redis::RedisResult<Option<Page>> {
    if !exists(shards, queue)? {
        return Ok(None);
    }
    let mut total = 0;
    let mut chosen = Vec::new();
    scan(shards, queue, |entry, block, deliveries| {
        let selected =
            MessageRef::read(&block).is_ok_and(|view| selector.is_none_or(|s| s.matches(&view)));
        if selected {
            if total >= offset && chosen.len() < limit {
                chosen.push((entry, block, deliveries));
            }
            total += 1;
        }
        // Without a selector the streams' length is the total: the scan
        // ends with the page, so that a long queue does not hold up the
        // thread that also reads for this node's consumers.
        selector.is_some() || chosen.len() < limit
    })?;
    if selector.is_none() {
        total = length(shards, queue)? as usize;
    }
    let holders = match chosen.is_empty() {
        true => Default::default(),
        false => holders(shards, queue)?,
    };
    let messages = chosen
        .into_iter()
        .map(|(entry, block, deliveries)| Listed {
            block,
            deliveries,
            holder: holders.get(&entry).cloned(),
        })
        .collect();
    Ok(Some(Page { total, messages }))
}

/// The message `id` of `queue`, taken out of the stream if `take`.
pub(super) fn pick(
    shards: &mut Redis,
    queue: &str,
    id: &str,
    take: bool,
) -> redis::RedisResult<Picked> {
    if !exists(shards, queue)? {
        return Ok(Picked::NoQueue);
    }
    let mut found = None;
    scan(shards, queue, |entry, block, deliveries| {
        let matches = MessageRef::read(&block).is_ok_and(|m| m.message_id == id);
        if matches {
            found = Some(Held {
                entry,
                block,
                deliveries,
            });
        }
        !matches
    })?;
    let Some(held) = found else {
        return Ok(Picked::NoMessage);
    };
    if !take {
        return Ok(match holders(shards, queue)?.remove(&held.entry) {
            Some(member) => Picked::InFlight(member),
            None => Picked::Found(held),
        });
    }
    take_unless_held(shards, queue, held, None)
}

/// Moves entry `held` of `queue` to the shared queue `to`, as `block`,
/// unless a node holds it: one script, so that nothing is lost or doubled.
/// On a Redis Cluster, two queues of different slots cannot be in one
/// script: the copy is appended first and taken back if the entry cannot
/// go, so that a failure in between leaves the message in both (delivered
/// twice at worst), never in neither.
pub(super) fn move_entry(
    shards: &mut Redis,
    queue: &str,
    held: Held,
    (to, block): (&str, &Bytes),
) -> redis::RedisResult<Picked> {
    let to_key = shards.keys().stream_for(to, block);
    if !shards.sharded()
        || key_slot(shards.keys().stream(queue).as_bytes()) == key_slot(to_key.as_bytes())
    {
        return take_unless_held(shards, queue, held, Some((to, block)));
    }
    let copy: String = redis::cmd("XADD")
        .arg(&to_key)
        .arg("*")
        .arg("m")
        .arg(&block[..])
        .on(shards, &to_key)?;
    let taken = take_unless_held(shards, queue, held, None)?;
    if !matches!(taken, Picked::Found(_)) {
        redis::cmd("XDEL")
            .arg(&to_key)
            .arg(&copy)
            .on::<()>(shards, &to_key)?;
    }
    Ok(taken)
}

/// Runs [`TAKE_UNLESS_HELD`] on `held`'s entry, appending to `onto` first
/// if given.
fn take_unless_held(
    shards: &mut Redis,
    queue: &str,
    held: Held,
    onto: Option<(&str, &Bytes)>,
) -> redis::RedisResult<Picked> {
    // EVAL, not EVALSHA: an operator's request, rare enough to send the
    // script each time.
    let mut eval = redis::cmd("EVAL");
    eval.arg(TAKE_UNLESS_HELD)
        .arg(1 + usize::from(onto.is_some()));
    let key = shards.keys().entry_stream(queue, held.entry.part);
    eval.arg(&key);
    if let Some((to, block)) = onto {
        eval.arg(shards.keys().stream_for(to, block));
    }
    eval.arg(GROUP).arg(held.entry.to_string());
    if let Some((_, block)) = onto {
        eval.arg(&block[..]);
    }
    let reply = array(eval.on(shards, &key)?);
    Ok(match reply.first().and_then(bulk) {
        Some(b"held") => Picked::InFlight(
            reply
                .get(1)
                .and_then(bulk)
                .map(|m| String::from_utf8_lossy(m).into_owned())
                .unwrap_or_default(),
        ),
        // Settled by a consumer since it was found.
        Some(b"gone") => Picked::NoMessage,
        Some(b"ok") => Picked::Found(held),
        _ => {
            return Err(redis::RedisError::from((
                redis::ErrorKind::TypeError,
                "an answer the take script does not give",
            )))
        }
    })
}

/// Deletes `queue`'s streams, their groups with them, unless a node
/// holds messages of it or read it within [`RECENT_MS`] (it has
/// consumers).
pub(super) fn drop_queue(shards: &mut Redis, queue: &str) -> redis::RedisResult<Dropped> {
    let parts = parts(shards, queue)?;
    if parts.is_empty() {
        return Ok(Dropped::NoQueue);
    }
    let streams: Vec<String> = parts
        .iter()
        .map(|&part| shards.keys().entry_stream(queue, part))
        .collect();
    for key in &streams {
        let members = redis::cmd("XINFO")
            .arg("CONSUMERS")
            .arg(key)
            .arg(GROUP)
            .on::<Value>(shards, key)
            .map(consumers)
            .unwrap_or_default();
        if let Some(m) = members
            .iter()
            .find(|m| m.pending > 0 || m.idle_ms < RECENT_MS)
        {
            return Ok(Dropped::InUse(m.name.clone(), m.pending));
        }
    }
    let length = length(shards, queue)?;
    redis::cmd("DEL")
        .arg(&streams)
        .arg(super::groups::readers_key(shards.keys(), queue))
        .on::<()>(shards, &streams[0])?;
    Ok(Dropped::Dropped(length))
}
