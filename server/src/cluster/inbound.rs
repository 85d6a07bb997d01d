//! The `herald-cl-in` thread: the node's subscriber connection. It
//! hears this node's inbox (see [`super::interest`]) and the other nodes'
//! announcements, and routes the topic messages they send here to this
//! node's subscribers.

use super::common::Reconnect;
use super::link::Link;
use super::outbound::BUNDLE;
use super::resp::{Item, Subscriber};
use super::slots::key_slot;
use super::{link, Cluster, PRIMARY_LOOK};
use crate::broker::delivery::Deliveries;
use crate::frontend::{hand_out, Shared};
use bytes::Bytes;
use herald_protocol::{DestinationKind, MessageView};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::time::{Duration, Instant};

/// How long the inbound thread waits for a message before it looks for
/// new interest and hands out what it routed: the longest a new
/// subscription waits to hear other nodes, and the longest the last
/// message of a burst waits.
pub(super) const INTEREST_CHECK: Duration = Duration::from_millis(5);

/// How long the subscriber connection may hear nothing before it asks
/// Redis for a PONG.
pub(super) const PING_WHEN_QUIET: Duration = Duration::from_secs(1);

/// Routed messages are handed to the workers in batches under load: when
/// this many are waiting, or the first of them has waited `HAND_OUT_AFTER`.
pub(super) const HAND_OUT_BATCH: usize = 256;

/// See `HAND_OUT_BATCH`.
pub(super) const HAND_OUT_AFTER: Duration = Duration::from_micros(100);

/// A message that comes this long after the one before is not part of a
/// burst: it is handed out at once.
pub(super) const LONE_AFTER: Duration = Duration::from_micros(50);

pub(super) fn run_inbound(cluster: &Cluster, shared: &Weak<Shared>) {
    let mut reconnect = Reconnect::default();
    let link = &cluster.stats.connected_in;
    // The last sequence number routed from each origin.
    let mut last: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut out = None;
    let keys = &*cluster.keys;
    let inbox = keys.inbox(&cluster.node_id);
    // SSUBSCRIBE on a Redis Cluster: a sharded channel, heard on the
    // shard of its slot alone.
    let sharded = matches!(cluster.link, Link::Cluster { .. });
    let verb: &[u8] = if sharded { b"SSUBSCRIBE" } else { b"SUBSCRIBE" };
    while !cluster.stop.load(Ordering::Acquire) {
        let result = subscriber_for(cluster, &inbox, reconnect.again()).and_then(|mut sub| {
            // With Sentinel: the primary this connection is to.
            let primary = cluster.primary_now();
            sub.send(&[verb, inbox.as_bytes()])?;
            for channel in [
                &keys.interest_channel,
                &keys.durables_channel,
                &keys.settings_channel,
                &keys.nodes_channel,
            ] {
                sub.send(&[b"SUBSCRIBE", channel.as_bytes()])?;
            }
            // What changed while this node was away.
            cluster.others_changed.store(true, Ordering::Relaxed);
            reconnect.connected();
            link.set_up("subscriber");
            let to = Connected {
                sub: &mut sub,
                primary,
                inbox: &inbox,
            };
            serve(cluster, to, shared, &mut last, &mut out)
        });
        match result {
            Ok(()) => return,
            Err(e) => {
                link.set_down("subscriber", &e);
                if !reconnect.wait(&cluster.stop, link) {
                    return;
                }
            }
        }
    }
}

/// A subscriber connection to the server that carries `inbox`: the one
/// Redis, or on a Redis Cluster the primary of the inbox's slot (the
/// slots read anew if `again`, after a failure).
fn subscriber_for(cluster: &Cluster, inbox: &str, again: bool) -> std::io::Result<Subscriber> {
    let info = match cluster.link.slots().map_err(std::io::Error::other)? {
        None => cluster
            .link
            .client()
            .map(|c| c.get_connection_info().clone()),
        Some((mut map, _)) => {
            if again {
                map = cluster.link.read_slots().map_err(std::io::Error::other)?.0;
            }
            let slot = key_slot(inbox.as_bytes());
            let addr = map
                .primary_of(slot)
                .and_then(|i| map.primaries.get(i))
                .ok_or_else(|| std::io::Error::other(format!("no primary serves slot {slot}")))?;
            redis::Client::open(cluster.link.url_for(addr)).map(|c| c.get_connection_info().clone())
        }
    }
    .map_err(std::io::Error::other)?;
    Subscriber::connect(&info, INTEREST_CHECK)
}

/// A subscriber connection, the Sentinel primary it is to (`None`
/// otherwise), and the inbox it hears.
pub(super) struct Connected<'a> {
    sub: &'a mut Subscriber,
    primary: Option<String>,
    inbox: &'a str,
}

/// Routes messages from other nodes until the cluster stops (`Ok`) or
/// Redis fails (`Err`).
pub(super) fn serve(
    cluster: &Cluster,
    to: Connected<'_>,
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
    let (sub, primary, inbox) = (to.sub, to.primary, to.inbox.as_bytes());
    let mut looked = Instant::now();
    loop {
        if cluster.stop.load(Ordering::Acquire) {
            return Ok(());
        }
        // Another of this node's threads followed a failover: follow it
        // now rather than after this connection's own timeout.
        if looked.elapsed() >= PRIMARY_LOOK {
            looked = Instant::now();
            if cluster.primary_moved(&primary) {
                return Err(std::io::Error::other(
                    "the node follows the primary elsewhere",
                ));
            }
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
        let (kind, channel, payload) = match &items[..] {
            [Item::Bulk(Some(kind)), Item::Bulk(Some(channel)), Item::Bulk(Some(payload))] => {
                (&kind[..], &channel[..], payload)
            }
            // Confirmations of subscribing are the only other replies.
            _ => continue,
        };
        match kind {
            b"message" | b"smessage" if channel == inbox => {}
            // Another node's globs, the registry or the settings changed.
            b"message" => {
                if &payload[..] != cluster.node_id.as_bytes() {
                    let changed = match channel {
                        c if c == cluster.keys.durables_channel.as_bytes() => {
                            &cluster.durables_changed
                        }
                        c if c == cluster.keys.settings_channel.as_bytes() => {
                            &cluster.settings_changed
                        }
                        c if c == cluster.keys.nodes_channel.as_bytes() => &cluster.nodes_changed,
                        _ => &cluster.others_changed,
                    };
                    changed.store(true, Ordering::Release);
                }
                continue;
            }
            // The inbox's slot moved to another shard (a resharding, a
            // failover): hear it there.
            b"sunsubscribe" => {
                return Err(std::io::Error::other(
                    "the inbox's slot moved to another shard",
                ))
            }
            _ => continue,
        }
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
            route(cluster, &shared, block, out);
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
            log::warn!("cluster: a malformed message on this node's inbox was ignored");
        }
    }
}

/// Calls `take` with each payload a PUBLISH carries (one, or a bundle's),
/// until it returns false; false if it did, or the bundle is malformed.
pub(super) fn unbundle(payload: &[u8], mut take: impl FnMut(&[u8]) -> bool) -> bool {
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
pub(super) struct Inbound<'a> {
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
pub(super) fn route(cluster: &Cluster, shared: &Shared, block: Bytes, out: &mut Deliveries) {
    // Checked as any client's message is: a peer is not trusted further.
    let view = match MessageView::parse(block) {
        Ok(view) => view,
        Err(e) => {
            log::warn!("cluster: an invalid message from another node was ignored: {e}");
            return;
        }
    };
    if view.destination_kind != DestinationKind::Topic {
        log::warn!(
            "cluster: a message for queue {} came on this node's inbox; ignored",
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
}
