//! `--mode scale`: --subscriptions subscriptions with distinct wildcard
//! patterns, on a herald-server and a nats-server that the bench starts,
//! each in turn: how fast they are made and ended, what each costs in the
//! server's memory, and topic 1 → 1 throughput beside them against the
//! same with none. Then, on Herald alone (NATS has no selectors),
//! --subscriptions / 10 subscriptions with selectors on the topic being
//! published to, none of which matches.
//!
//! Every pattern shares the measured topic's first level, so a matcher
//! that walked all subscriptions would pay for each of them; a matcher
//! whose cost follows the matching subscriptions pays nothing for them.
//! The subscriptions are made through plain sockets, pipelined, so the
//! rates are the server's and not a client's round trips.

use std::path::Path;
use std::time::Instant;

use bytes::BytesMut;
use herald_client::{ConnectionFactory, Result};

use super::fanout::start_nats;
use super::process::{start_herald, Process};
use super::raw::{Raw, Wire};
use super::{nats, throughput, versus_nats};

/// The measured topic: its first level is the patterns' too.
const TOPIC: &str = "scale.hot.leaf";

/// Subscriptions per connection (Herald's default
/// `max_subscriptions_per_connection` is 10,000).
const PER_CONNECTION: usize = 5_000;

/// What one run is asked to do.
pub struct Plan<'a> {
    pub subscriptions: usize,
    pub size: usize,
    pub count: u64,
    pub nats_server: &'a Path,
}

/// The `i`th pattern in `wire`'s syntax: three shapes, each distinct by
/// `i`, none matching [`TOPIC`].
fn pattern(wire: Wire, i: usize) -> String {
    let rest = match wire {
        Wire::Herald => "#",
        Wire::Nats => ">",
    };
    match i % 3 {
        0 => format!("scale.n{i}.*"),
        1 => format!("scale.*.n{i}"),
        _ => format!("scale.n{i}.{rest}"),
    }
}

/// What one batch of subscriptions measured.
struct Batch {
    made_per_sec: f64,
    ended_per_sec: f64,
    bytes_each: f64,
    /// 1 → 1 msgs/s with them, and with none.
    with: f64,
    alone: f64,
}

/// Makes `n` subscriptions from `pattern_and_selector(i)` on `server`,
/// measures `publish` beside them and alone, then ends them.
fn batch(
    server: &Process,
    wire: Wire,
    n: usize,
    pattern_and_selector: &dyn Fn(usize) -> (String, String),
    publish: &dyn Fn() -> Result<f64>,
) -> Result<Batch> {
    let alone = publish()?;
    let before = server.rss()?;
    let started = Instant::now();
    let mut connections = Vec::new();
    for first in (0..n).step_by(PER_CONNECTION) {
        let mut raw = Raw::open(server.addr, wire)?;
        let mut out = BytesMut::new();
        for i in first..(first + PER_CONNECTION).min(n) {
            let (pattern, selector) = pattern_and_selector(i);
            // Ids from 1: Herald takes request id 0 as "no receipt".
            wire.subscribe((i - first + 1) as u32, &pattern, &selector, &mut out)?;
        }
        wire.barrier(&mut out);
        raw.send(&out)?;
        connections.push((raw, (first + PER_CONNECTION).min(n) - first));
    }
    for (raw, made) in &mut connections {
        raw.await_confirmed(confirmations(wire, *made))?;
    }
    let made_per_sec = n as f64 / started.elapsed().as_secs_f64();
    let bytes_each = server.rss()?.saturating_sub(before) as f64 / n as f64;
    let with = publish()?;
    let started = Instant::now();
    for (raw, made) in &mut connections {
        let mut out = BytesMut::new();
        for sid in 1..=*made as u32 {
            wire.unsubscribe(sid, &mut out)?;
        }
        wire.barrier(&mut out);
        raw.send(&out)?;
    }
    for (raw, made) in &mut connections {
        raw.await_confirmed(confirmations(wire, *made))?;
    }
    let ended_per_sec = n as f64 / started.elapsed().as_secs_f64();
    Ok(Batch {
        made_per_sec,
        ended_per_sec,
        bytes_each,
        with,
        alone,
    })
}

/// The confirmations a batch of `n` requests and its barrier get.
fn confirmations(wire: Wire, n: usize) -> u64 {
    match wire {
        Wire::Herald => n as u64,
        Wire::Nats => 1,
    }
}

/// Runs both servers and prints the table.
pub fn run(plan: &Plan) -> Result<()> {
    let n = plan.subscriptions;
    // A server of its own for each batch: memory freed by one would be
    // reused by the next.
    let on_herald = |n: usize, pattern_and_selector: &dyn Fn(usize) -> (String, String)| {
        let (herald, _) = start_herald("scale", &["herald-server listening on "])?;
        let factory = ConnectionFactory::new(&format!("herald://{}", herald.addr))?;
        let publish = || -> Result<f64> {
            let r = throughput::run_topic(
                &factory,
                &factory,
                TOPIC,
                (1, 1),
                (plan.size, 0),
                plan.count,
            )?;
            r.print();
            Ok(r.deliveries_per_sec())
        };
        batch(&herald, Wire::Herald, n, pattern_and_selector, &publish)
    };
    let h = on_herald(n, &|i| (pattern(Wire::Herald, i), String::new()))?;
    let selectors = (n / 10).max(1);
    let s = on_herald(selectors, &|i| (TOPIC.to_owned(), format!("n = {i}")))?;
    let nats = start_nats(plan.nats_server)?;
    let publish = || -> Result<f64> {
        let r = nats::throughput_on(nats.addr, TOPIC, 1, plan.size, plan.count)?;
        r.print();
        Ok(r.deliveries_per_sec())
    };
    let t = batch(
        &nats,
        Wire::Nats,
        n,
        &|i| (pattern(Wire::Nats, i), String::new()),
        &publish,
    )?;
    drop(nats);

    let rows = [
        (
            format!("{n} patterns: subscribed per s"),
            h.made_per_sec,
            t.made_per_sec,
            true,
        ),
        (
            format!("{n} patterns: unsubscribed per s"),
            h.ended_per_sec,
            t.ended_per_sec,
            true,
        ),
        (
            format!("{n} patterns: server bytes each"),
            h.bytes_each,
            t.bytes_each,
            false,
        ),
        (
            "1 -> 1 msgs/s, no other subscription".to_owned(),
            h.alone,
            t.alone,
            true,
        ),
        (
            format!("1 -> 1 msgs/s beside {n} patterns"),
            h.with,
            t.with,
            true,
        ),
        (
            format!("beside {n} patterns / alone"),
            h.with / h.alone,
            t.with / t.alone,
            true,
        ),
    ];
    let json = versus_nats(rows.into());
    println!(
        "\nHerald, {selectors} selectors on the published topic (none matching): \
         {:.0} subscribed/s, {:.0} unsubscribed/s, {:.0} bytes each, 1 -> 1 {:.0} msgs/s \
         ({:.2} x the {:.0} with none)",
        s.made_per_sec,
        s.ended_per_sec,
        s.bytes_each,
        s.with,
        s.with / s.alone,
        s.alone
    );
    println!(
        "{{\"scenario\":\"scale\",\"subscriptions\":{n},\"rows\":[{}],\"selectors\":{{\"count\":{selectors},\
         \"subscribed_per_sec\":{:.0},\"unsubscribed_per_sec\":{:.0},\"bytes_each\":{:.0},\"with\":{:.0},\
         \"alone\":{:.0},\"ratio\":{:.3}}}}}",
        json,
        s.made_per_sec,
        s.ended_per_sec,
        s.bytes_each,
        s.with,
        s.alone,
        s.with / s.alone
    );
    Ok(())
}
