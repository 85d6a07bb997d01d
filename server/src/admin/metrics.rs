//! `/metrics`: the broker's figures, encoded by `prometheus-client` from a
//! registry filled at each scrape, as OpenMetrics for a scraper that asks
//! for it and in the Prometheus text format 0.0.4 otherwise.

use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::state::{process_footprint, AppState};

type Labels = Vec<(&'static str, String)>;

fn gauge(registry: &mut Registry, name: &str, help: &str, value: i64) {
    let g: Gauge = Gauge::default();
    g.set(value);
    registry.register(name, help, g);
}

fn counter(registry: &mut Registry, name: &str, help: &str, value: u64) {
    let c: Counter = Counter::default();
    c.inc_by(value);
    registry.register(name, help, c);
}

/// A family of counters or gauges, one per label set.
fn family<M, F>(registry: &mut Registry, name: &str, help: &str, rows: Vec<(Labels, F)>)
where
    M: Default + std::fmt::Debug + 'static,
    F: Fn(&M),
    Family<Labels, M>: prometheus_client::registry::Metric,
{
    let f: Family<Labels, M> = Family::default();
    for (labels, set) in rows {
        set(&f.get_or_create(&labels));
    }
    registry.register(name, help, f);
}

pub(crate) async fn metrics(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
) -> Response {
    let s = &state.shared;
    let mut r = Registry::default();
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    if let Some(c) = &state.cluster {
        let st = &c.stats;
        gauge(
            &mut r,
            "herald_cluster_connected",
            "Linked to Redis (1) or not (0)",
            st.connected().into(),
        );
        let rows = [
            (
                "herald_cluster_published",
                "Topic messages sent to other nodes",
                &st.published,
            ),
            (
                "herald_cluster_received",
                "Topic messages from other nodes",
                &st.received,
            ),
            (
                "herald_cluster_dropped",
                "Topic messages not sent to other nodes",
                &st.dropped,
            ),
            (
                "herald_cluster_queue_appended",
                "Messages appended to shared queues' streams",
                &st.appended,
            ),
            (
                "herald_cluster_queue_read",
                "Shared queue messages read for consumers here",
                &st.read,
            ),
            (
                "herald_cluster_queue_claimed",
                "Shared queue messages claimed from nodes that stopped",
                &st.claimed,
            ),
            (
                "herald_cluster_redirected",
                "Runs of commands sent again where a Redis Cluster redirection said",
                &st.redirected,
            ),
        ];
        for (name, help, value) in rows {
            counter(&mut r, name, help, value.load(Ordering::Relaxed));
        }
        family::<Counter, _>(
            &mut r,
            "herald_cluster_receipts_refused",
            "Receipts refused by the cluster, by why: Redis unreachable, a write not taken, too few replicas",
            crate::cluster::Refused::ALL
                .iter()
                .zip(&st.receipts_refused)
                .map(|(why, n)| {
                    let n = n.load(Ordering::Relaxed);
                    (vec![("reason", why.name().to_owned())], move |c: &Counter| {
                        c.inc_by(n);
                    })
                })
                .collect(),
        );
        gauge(
            &mut r,
            "herald_cluster_replicas_short",
            "1 while a Redis shard confirms fewer replicas than cluster.min_replicas",
            i64::from(st.replicas_short.load(Ordering::Relaxed)),
        );
        counter(
            &mut r,
            "herald_cluster_reconnects",
            "Times a cluster thread connected to Redis again after a failure",
            st.reconnects(),
        );
        if let Some(primary) = c.link.primary() {
            counter(
                &mut r,
                "herald_cluster_primary_changes",
                "Times this node followed the Sentinel primary to another server",
                primary.changes,
            );
        }
    }
    if let Some((rss, threads)) = process_footprint() {
        let (rss, threads) = (rss as i64, threads as i64);
        gauge(
            &mut r,
            "process_resident_memory_bytes",
            "Resident memory",
            rss,
        );
        gauge(&mut r, "process_threads", "Threads of the process", threads);
    }
    gauge(
        &mut r,
        "herald_connections",
        "Open connections",
        s.open_connections.load(Ordering::Relaxed) as i64,
    );
    gauge(
        &mut r,
        "herald_subscriptions",
        "Subscriptions in the topic tree",
        s.broker.subscription_count() as i64,
    );
    let memory = s.broker.memory();
    gauge(
        &mut r,
        "herald_queued_bytes",
        "Bytes of messages held in queues, as last weighed",
        memory.used() as i64,
    );
    gauge(
        &mut r,
        "herald_memory_blocked",
        "1 while queued messages are over queues.max_memory_bytes and publishers are held back",
        i64::from(memory.over()),
    );
    let sum = |f: fn(&crate::frontend::WorkerStats) -> &AtomicU64| {
        s.stats.iter().map(|w| load(f(w))).sum::<u64>()
    };
    counter(
        &mut r,
        "herald_messages_in",
        "Messages published",
        sum(|w| &w.messages_in),
    );
    counter(
        &mut r,
        "herald_messages_out",
        "Messages delivered",
        sum(|w| &w.messages_out),
    );
    counter(
        &mut r,
        "herald_slow_consumer_dropped",
        "Messages dropped for slow consumers",
        sum(|w| &w.dropped),
    );
    counter(
        &mut r,
        "herald_slow_consumers_disconnected",
        "Connections cut off for reading too slowly (slow_consumer = \"disconnect\")",
        sum(|w| &w.slow_consumers),
    );
    counter(
        &mut r,
        "herald_worker_stalls",
        "Times a worker was found making no progress for seconds",
        sum(|w| &w.stalls),
    );
    gauge(
        &mut r,
        "herald_workers_stalled",
        "Workers making no progress now: their connections are not served",
        s.stats
            .iter()
            .filter(|w| w.stalled.load(std::sync::atomic::Ordering::Relaxed))
            .count() as i64,
    );
    counter(
        &mut r,
        "herald_publisher_pauses",
        "Times a publisher paused while a subscriber drained a backlog",
        sum(|w| &w.publisher_pauses),
    );
    counter(
        &mut r,
        "herald_connections_moved",
        "Publishers moved to the worker of the connections they publish to",
        sum(|w| &w.moved_in),
    );
    let c = s.broker.counters();
    counter(
        &mut r,
        "herald_redeliveries",
        "Deliveries given back for redelivery",
        load(&c.redelivered),
    );
    counter(
        &mut r,
        "herald_dead_lettered",
        "Messages moved to a dead-letter queue",
        load(&c.dead_lettered),
    );
    counter(
        &mut r,
        "herald_expired",
        "Messages that expired before delivery",
        load(&c.expired),
    );

    let destinations = state.destination_counts();
    let labels = |kind: herald_protocol::DestinationKind, name: &str| -> Labels {
        let kind = match kind {
            herald_protocol::DestinationKind::Topic => "topic",
            herald_protocol::DestinationKind::Queue => "queue",
        };
        vec![("kind", kind.to_owned()), ("destination", name.to_owned())]
    };
    let rows = |f: fn(&crate::frontend::DestinationCounts) -> u64| {
        destinations
            .iter()
            .map(|((k, n), c)| {
                (labels(*k, n), move |m: &Counter| {
                    m.inc_by(f(c));
                })
            })
            .collect::<Vec<_>>()
    };
    family(
        &mut r,
        "herald_destination_messages_in",
        "Messages published, per destination",
        rows(|c| c.messages_in),
    );
    family(
        &mut r,
        "herald_destination_bytes_in",
        "Bytes published, per destination",
        rows(|c| c.bytes_in),
    );
    family(
        &mut r,
        "herald_destination_deliveries",
        "Deliveries routed, per destination",
        rows(|c| c.deliveries),
    );
    family(
        &mut r,
        "herald_destination_bytes_out",
        "Bytes of the deliveries routed, per destination",
        rows(|c| c.bytes_out),
    );

    let queues = s.broker.queue_stats();
    type Figure = fn(&crate::broker::QueueStats) -> i64;
    let q = |f: Figure| {
        queues
            .iter()
            .map(|q| {
                (vec![("queue", q.name.clone())], move |g: &Gauge| {
                    g.set(f(q));
                })
            })
            .collect::<Vec<_>>()
    };
    let gauges: [(&str, &str, Figure); 7] = [
        ("herald_queue_depth", "Messages waiting in a queue", |q| {
            q.depth as i64
        }),
        (
            "herald_queue_in_flight",
            "Deliveries not yet acknowledged",
            |q| q.in_flight as i64,
        ),
        ("herald_queue_consumers", "Consumers of a queue", |q| {
            q.consumers as i64
        }),
        (
            "herald_queue_memory_bytes",
            "Bytes of the messages a queue holds in memory, when last weighed",
            |q| q.bytes as i64,
        ),
        (
            "herald_queue_paged",
            "Messages in a queue's page files",
            |q| q.paged as i64,
        ),
        (
            "herald_queue_paged_bytes",
            "Bytes of a queue's messages in its page files",
            |q| q.paged_bytes as i64,
        ),
        (
            "herald_queue_paging_stopped",
            "1 while a queue would page and cannot (a write failed, or the disk is at its floor)",
            |q| i64::from(q.paging_stopped),
        ),
    ];
    for (name, help, f) in gauges {
        family(&mut r, name, help, q(f));
    }
    let qc = |f: fn(&crate::broker::QueueStats) -> u64| {
        queues
            .iter()
            .map(|q| {
                (vec![("queue", q.name.clone())], move |c: &Counter| {
                    c.inc_by(f(q));
                })
            })
            .collect::<Vec<_>>()
    };
    type Count = fn(&crate::broker::QueueStats) -> u64;
    let counters: [(&str, &str, Count); 3] = [
        ("herald_queue_enqueued", "Messages enqueued", |q| q.enqueued),
        ("herald_queue_acknowledged", "Messages acknowledged", |q| {
            q.acknowledged
        }),
        (
            "herald_queue_dropped",
            "Sends a full queue dropped (full_policy = \"drop\")",
            |q| q.dropped,
        ),
    ];
    for (name, help, f) in counters {
        family(&mut r, name, help, qc(f));
    }

    let busy: Family<Labels, Counter<f64, AtomicU64>> = Family::default();
    for (i, w) in s.stats.iter().enumerate() {
        let seconds = load(&w.busy_ns) as f64 / 1e9;
        busy.get_or_create(&vec![("worker", i.to_string())])
            .inc_by(seconds);
    }
    r.register(
        "herald_worker_busy_seconds",
        "Time a worker spent working, not waiting",
        busy,
    );
    if let Some(journal) = &state.journal {
        r.register(
            "herald_journal_append_seconds",
            "Journal writes",
            journal.append.clone(),
        );
        r.register(
            "herald_journal_fsync_seconds",
            "Journal syncs",
            journal.sync.clone(),
        );
        let damage = journal.damage;
        let stopped = journal.stopped.load(Ordering::Relaxed);
        let space = &journal.space;
        for (name, help, value) in [
            (
                "herald_journal_low_space",
                "1 while the journal's disk is below journal.min_free_bytes: persistent messages are held or refused",
                u64::from(space.low.load(Ordering::Relaxed)),
            ),
            (
                "herald_journal_free_bytes",
                "Bytes free on the journal's disk when last looked",
                space.free.load(Ordering::Relaxed),
            ),
            (
                "herald_journal_min_free_bytes",
                "The journal's free-space floor (journal.min_free_bytes)",
                space.floor,
            ),
            (
                "herald_journal_stopped",
                "1 once a journal sync failed: persistent sends fail until a restart",
                u64::from(stopped),
            ),
            (
                "herald_journal_damaged_segments",
                "Damaged journal segments set aside as *.corrupt at start",
                damage.segments,
            ),
            (
                "herald_journal_damaged_bytes",
                "Journal bytes skipped at start because they did not read",
                damage.bytes,
            ),
            (
                "herald_journal_damaged_records",
                "Whole journal records skipped at start",
                damage.records,
            ),
        ] {
            gauge(&mut r, name, help, value as i64);
        }
    }

    if let Some(large) = state.shared.broker.large() {
        let (held, bytes, arriving) = large.counts();
        for (name, help, value) in [
            (
                "herald_large_bodies",
                "Large messages' bodies kept in files under data_dir/large",
                held,
            ),
            (
                "herald_large_body_bytes",
                "Bytes of those bodies on disk",
                bytes,
            ),
            (
                "herald_large_bodies_arriving",
                "Large messages' bodies still being sent by their clients",
                arriving,
            ),
            (
                "herald_large_failing",
                "1 while large messages' bodies cannot be written (but for a full disk)",
                u64::from(large.failing().is_some()),
            ),
        ] {
            gauge(&mut r, name, help, value as i64);
        }
    }

    let mut text = String::new();
    if let Err(e) = encode(&mut text, &r) {
        return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response();
    }
    if wants_openmetrics(&headers) {
        let kind = "application/openmetrics-text; version=1.0.0; charset=utf-8";
        return ([(header::CONTENT_TYPE, kind)], text).into_response();
    }
    let kind = "text/plain; version=0.0.4; charset=utf-8";
    ([(header::CONTENT_TYPE, kind)], classic(&text)).into_response()
}

/// Whether the scraper asked for OpenMetrics (Prometheus does, first);
/// anything else, `Accept: text/plain;version=0.0.4` or none, gets the
/// classic text format that promtool and older parsers read.
fn wants_openmetrics(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"))
}

/// The OpenMetrics text `open` in the Prometheus text format 0.0.4: a
/// counter's HELP and TYPE name its `_total` sample, as its samples do;
/// no `# UNIT` and no `# EOF`; the types 0.0.4 lacks are `untyped`.
fn classic(open: &str) -> String {
    let counters: std::collections::HashSet<&str> = open
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(open.len() + 64 * counters.len());
    for line in open.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| Some((p, line.strip_prefix(p)?)));
        match meta {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let name = match counters.contains(name) {
                    true => format!("{name}_total"),
                    false => name.to_owned(),
                };
                let tail = match (prefix, tail) {
                    ("# TYPE ", "info" | "stateset" | "gaugehistogram" | "unknown") => "untyped",
                    _ => tail,
                };
                out.push_str(prefix);
                out.push_str(&name);
                out.push(' ');
                out.push_str(tail);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_classic_format_names_counters_by_their_samples_and_has_no_eof() {
        let open = "# HELP herald_messages_in Messages published.\n\
                    # TYPE herald_messages_in counter\n\
                    herald_messages_in_total 11\n\
                    # HELP herald_queued_bytes Bytes.\n\
                    # TYPE herald_queued_bytes gauge\n\
                    # UNIT herald_queued_bytes bytes\n\
                    herald_queued_bytes 3\n\
                    # EOF\n";
        assert_eq!(
            classic(open),
            "# HELP herald_messages_in_total Messages published.\n\
             # TYPE herald_messages_in_total counter\n\
             herald_messages_in_total 11\n\
             # HELP herald_queued_bytes Bytes.\n\
             # TYPE herald_queued_bytes gauge\n\
             herald_queued_bytes 3\n"
        );
    }
}
