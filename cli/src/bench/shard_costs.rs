//! What each operation costs on a Redis Cluster, in CPU seconds per
//! million messages: the Redis shards', and a Herald node's cluster
//! threads' and workers' apart from the clients that drive them, the
//! pieces a capacity projection for bigger machines is made of
//! (docs/deployment.md). Two clustered nodes run in this process; their
//! threads are told apart by name (`herald-cl-out`, `herald-cl-in`,
//! `herald-cl-q`, `herald-worker-N`) and by which node started them, and
//! read from `/proc/self/task`. The operations run one after the other, each alone:
//! persistent receipted sends to 16 queues nobody consumes yet, through
//! node a; their delivery and acknowledgement to consumers on node a; and
//! a topic published on node a to a subscriber on node b.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use herald_client::{AckMode, ConnectionFactory, Destination, Error, Message, Result};
use herald_server::store::FsyncPolicy;

use super::client::{cpu_seconds, stat_seconds};
use super::process::{io, Process};
use super::queue::Window;
use super::{bench_topic, embedded_config, start_embedded, throughput};

/// Queues the sends are dealt over, a producer and later a consumer each.
const QUEUES: usize = 16;

/// CPU seconds per thread of this process, by thread id, with its name.
fn threads() -> Result<HashMap<u32, (String, f64)>> {
    let mut all = HashMap::new();
    for entry in std::fs::read_dir("/proc/self/task").map_err(io("reading /proc/self/task"))? {
        let entry = entry.map_err(io("reading /proc/self/task"))?;
        let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        // A thread that ends meanwhile is left out.
        let (Ok(name), Ok(stat)) = (
            std::fs::read_to_string(entry.path().join("comm")),
            std::fs::read_to_string(entry.path().join("stat")),
        ) else {
            continue;
        };
        if let Some(seconds) = stat_seconds(&stat) {
            all.insert(tid, (name.trim().to_owned(), seconds));
        }
    }
    Ok(all)
}

/// The threads started since `before` was read. (A thread names itself
/// once it runs, so names are read later, at the measurement.)
fn started_since(before: &HashMap<u32, (String, f64)>) -> Result<HashSet<u32>> {
    Ok(threads()?
        .into_keys()
        .filter(|tid| !before.contains_key(tid))
        .collect())
}

/// The server threads a [`Cost`] counts, by the start of their names.
const THREADS: [&str; 4] = [
    "herald-cl-out",
    "herald-cl-in",
    "herald-cl-q",
    "herald-worker",
];

/// Where CPU went during one operation.
struct Cost {
    operation: &'static str,
    rate: f64,
    /// CPU seconds per million messages: the Redis shards together; per
    /// node (a, b), each of [`THREADS`]; this whole process (the nodes and
    /// every client).
    redis: f64,
    threads: [[f64; THREADS.len()]; 2],
    process: f64,
}

/// A snapshot of every CPU counter a [`Cost`] is made of.
struct Snapshot {
    redis: f64,
    threads: HashMap<u32, (String, f64)>,
    process: f64,
}

fn snapshot(redis: &[Process]) -> Result<Snapshot> {
    let redis = redis
        .iter()
        .map(|r| cpu_seconds(&r.child.id().to_string()))
        .sum::<Result<f64>>()?;
    Ok(Snapshot {
        redis,
        threads: threads()?,
        process: cpu_seconds("self")?,
    })
}

/// Runs `operation` (which returns its rate) over `count` messages and
/// says where the CPU went.
fn measure(
    (operation, count): (&'static str, u64),
    redis: &[Process],
    nodes: &[HashSet<u32>; 2],
    run: impl FnOnce() -> Result<f64>,
) -> Result<Cost> {
    let before = snapshot(redis)?;
    let rate = run()?;
    let after = snapshot(redis)?;
    let millions = count as f64 / 1e6;
    let used = |node: &HashSet<u32>, prefix: &str| {
        node.iter()
            .filter_map(|tid| {
                let (name, now) = after.threads.get(tid)?;
                let then = before.threads.get(tid).map_or(0.0, |(_, t)| *t);
                name.starts_with(prefix).then_some(now - then)
            })
            .sum::<f64>()
            / millions
    };
    Ok(Cost {
        operation,
        rate,
        redis: (after.redis - before.redis) / millions,
        threads: [0, 1].map(|n| THREADS.map(|prefix| used(&nodes[n], prefix))),
        process: (after.process - before.process) / millions,
    })
}

/// Sends `count` persistent messages with receipts (a window of 100 per
/// producer) to `queues`, a producer each; returns the rate.
fn send(
    factory: &ConnectionFactory,
    queues: &[Destination],
    size: usize,
    count: u64,
) -> Result<f64> {
    let per = count / queues.len() as u64;
    let failed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let producers: Vec<_> = queues
        .iter()
        .map(|queue| {
            let (factory, queue, failed) = (factory.clone(), queue.clone(), failed.clone());
            std::thread::spawn(move || -> Result<()> {
                let connection = factory.create_connection()?;
                let session = connection.create_session(AckMode::Auto)?;
                let producer = session.create_producer(&queue)?;
                let window = Arc::new(Window::new(100));
                let body = Bytes::from(vec![7u8; size]);
                for _ in 0..per {
                    window.acquire();
                    let (w, f) = (window.clone(), failed.clone());
                    producer.send_async(Message::bytes(body.clone()).persistent(), move |r| {
                        if r.is_err() {
                            f.fetch_add(1, Ordering::Relaxed);
                        }
                        w.release();
                    })?;
                }
                window.wait_all(100);
                connection.close()
            })
        })
        .collect();
    for producer in producers {
        producer
            .join()
            .map_err(|_| Error::InvalidArgument("a producer thread panicked".into()))??;
    }
    match failed.load(Ordering::Relaxed) {
        0 => Ok((per * queues.len() as u64) as f64 / started.elapsed().as_secs_f64()),
        n => Err(Error::InvalidArgument(format!("{n} sends were refused"))),
    }
}

/// Consumes `count` messages from `queues` (AUTO acknowledgements, a
/// consumer each); returns the rate.
fn drain(factory: &ConnectionFactory, queues: &[Destination], count: u64) -> Result<f64> {
    let got = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut consumers = Vec::new();
    for queue in queues {
        let connection = factory.create_connection()?;
        let session = connection.create_session(AckMode::Auto)?;
        let consumer = session.create_consumer(queue)?;
        let got = got.clone();
        consumer.set_message_listener(move |_| {
            got.fetch_add(1, Ordering::Relaxed);
        })?;
        consumers.push((connection, session, consumer));
    }
    let (mut seen, mut moved) = (0, Instant::now());
    while seen < count {
        std::thread::sleep(Duration::from_millis(5));
        let now = got.load(Ordering::Relaxed);
        if now != seen {
            (seen, moved) = (now, Instant::now());
        } else if moved.elapsed() > Duration::from_secs(10) {
            return Err(Error::InvalidArgument(format!(
                "{seen} of {count} messages came"
            )));
        }
    }
    let rate = count as f64 / started.elapsed().as_secs_f64();
    for (connection, _, _) in consumers {
        connection.close()?;
    }
    Ok(rate)
}

/// Measures each operation with two nodes on the Redis Cluster at `url`
/// (its servers `shards`), and prints a table and a JSON line.
pub fn run(
    url: &str,
    shards: &[Process],
    workers: usize,
    fsync: FsyncPolicy,
    size: usize,
    count: u64,
) -> Result<()> {
    let count = count.min(400_000) / QUEUES as u64 * QUEUES as u64;
    // Without replicas: a receipt waits for none.
    let node = |id| {
        let mut config = embedded_config(workers, fsync, Some((url, id)));
        config.cluster.min_replicas = Some(0);
        start_embedded(config)
    };
    let before = threads()?;
    let a = node("costs-a")?;
    let of_a = started_since(&before)?;
    let before = threads()?;
    let b = node("costs-b")?;
    let nodes = [of_a, started_since(&before)?];
    let factory = |s: &herald_server::ServerHandle| {
        ConnectionFactory::new(&format!("herald://{}", s.local_addr()))
    };
    let (on_a, on_b) = (factory(&a)?, factory(&b)?);
    let base = bench_topic("costs");
    let queues: Vec<Destination> = (0..QUEUES)
        .map(|i| Destination::queue(format!("{base}.{i}")))
        .collect();
    let costs = [
        measure(("queue send", count), shards, &nodes, || {
            send(&on_a, &queues, size, count)
        })?,
        measure(("queue delivery + ack", count), shards, &nodes, || {
            drain(&on_a, &queues, count)
        })?,
        measure(("topic, node a -> b", count), shards, &nodes, || {
            Ok(throughput::run_across(&on_a, &on_b, 1, 1, size, count)?.deliveries_per_sec())
        })?,
    ];
    a.shutdown();
    b.shutdown();
    println!(
        "\nCPU s per million messages, {size} B, Redis Cluster of 3 primaries, no replicas; each node's threads, a / b:\n{:<22} {:>9} {:>9} {:>11} {:>11} {:>11} {:>11} {:>8}",
        "operation", "msgs/s", "Redis (3)", "cl-out", "cl-in", "cl-q", "workers", "process"
    );
    let mut json = Vec::new();
    for c in &costs {
        let each: Vec<String> = (0..THREADS.len())
            .map(|t| format!("{:.2} / {:.2}", c.threads[0][t], c.threads[1][t]))
            .collect();
        println!(
            "{:<22} {:>9.0} {:>9.2} {:>11} {:>11} {:>11} {:>11} {:>8.2}",
            c.operation, c.rate, c.redis, each[0], each[1], each[2], each[3], c.process
        );
        let threads: Vec<String> = THREADS
            .iter()
            .enumerate()
            .map(|(t, name)| format!("\"{name}\":[{:.3},{:.3}]", c.threads[0][t], c.threads[1][t]))
            .collect();
        json.push(format!(
            "{{\"operation\":\"{}\",\"msgs_per_sec\":{:.0},\"redis\":{:.3},{},\"process\":{:.3}}}",
            c.operation,
            c.rate,
            c.redis,
            threads.join(","),
            c.process
        ));
    }
    println!(
        "{{\"scenario\":\"shard_costs\",\"size\":{size},\"count\":{count},\"cpu_s_per_million\":[{}]}}",
        json.join(",")
    );
    Ok(())
}
