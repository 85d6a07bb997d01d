//! `herald bench`: throughput (1 → N) and latency at a fixed rate, against
//! a running server or one embedded in this process.
//!
//! Every figure is measured at the subscribers: a message counts when a
//! subscriber's listener has it. Lost messages are counted, not hidden.
//! Each scenario ends with one JSON line for scripts.

mod amqp;
mod client;
mod cluster;
mod connections;
pub mod drill;
mod fanout;
mod keyed;
mod large;
mod latency;
mod ledger;
mod machine;
mod memory;
mod mqtt;
mod nats;
mod persistent;
mod process;
mod progress;
mod queue;
mod raw;
mod scale;
mod shard_costs;
mod shards;
mod soak;
mod stomp;
mod stomp_queue;
mod subscriptions;
mod throughput;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use herald_client::{ConnectionFactory, Error, Result};
use herald_server::config::{JournalSection, StompSection};
use herald_server::store::FsyncPolicy;
use herald_server::{Config, Server};

use crate::target::Target;

/// Which measurements to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Throughput and latency.
    All,
    /// Messages per second on a topic, --publishers → --subscribers.
    Throughput,
    /// Latency percentiles at a fixed publish rate.
    Latency,
    /// N producers → M competing consumers on a queue.
    Queue,
    /// Topic 1 → 1 over the native protocol, then over STOMP.
    Stomp,
    /// A queue 1 → --consumers over STOMP on the broker at --stomp (any
    /// STOMP broker: ActiveMQ's too), plain, then with --groups N
    /// JMSXGroupID groups and with --priorities (consumer priorities), in
    /// turn, --rounds times; medians and ratios to the plain queue.
    StompQueue,
    /// Topic 1 → 1 alone, then with --subscriptions that never match.
    Subscriptions,
    /// Topic 1 → 1 and 1 → --fanout over the native protocol, then over
    /// AMQP 1.0 (--amqp), and the cost of AMQP per message against native.
    Amqp,
    /// The server's resident memory (through --admin) idle, during a
    /// burst (1 → 1 and 1 → --fanout, --count each) and for 10 s after.
    Memory,
    /// --connections idle connections: the server's memory per connection
    /// and its threads, through the management API (--admin)
    Connections,
    /// A persistent receipted queue and a topic 1 -> 1, each on one
    /// standalone node, one clustered node and two clustered nodes (all
    /// in this process, the cluster through --cluster-redis), side by side
    Cluster,
    /// Persistent receipted queues (16, a producer and a consumer each) on
    /// one Redis beside a Redis Cluster of three primaries, both started
    /// here, and each Redis server's CPU per million messages; then, on
    /// the Redis Cluster, the CPU of each operation (queue send, delivery
    /// and ack, a topic across two nodes) in Redis and in a node's cluster
    /// threads and workers
    Shards,
    /// A mixed load for --duration at --rate: persistent and plain queues
    /// and topics, consumers that come and go, a slow one, a reconnecting
    /// producer; throughput and resident memory over time (the server's,
    /// through --admin, or this process's with --embedded), and every
    /// message counted by number at the end.
    Soak,
    /// 64 KiB and 1 MiB bodies, 1 -> 1 and 1 -> --fanout, in MB/s against
    /// a plain socket pair over loopback (and NATS with --compare-nats).
    /// The server's max_frame_size must be above 1 MiB (the default is).
    Large,
    /// The disk's fdatasync latency (in --sync-dir), then a synchronous
    /// persistent send's, its floor's (a socket round trip around a write
    /// and its fdatasync, no broker) and a receipted plain send's
    /// (--latency-count of each), then the receipted throughput of 1, 4 and 16 producers with
    /// windows of 1 and 100 (at most --count sends each).
    Persistent,
    /// One topic with --connections / 10, then --connections subscriber
    /// connections, on a herald-server and a nats-server (--nats-server)
    /// that the bench starts: the time until the last subscriber has a
    /// message, deliveries/s and each server's memory.
    Fanout,
    /// --subscriptions distinct wildcard patterns on a herald-server and a
    /// nats-server (--nats-server) that the bench starts: subscribe and
    /// unsubscribe rates, memory each, 1 -> 1 beside them; then a tenth
    /// as many selectors on Herald.
    Scale,
    /// Topic 1 -> 1 with the Rust client at both ends against a raw
    /// driver, alternating, on a herald-server the bench starts: rates,
    /// and the CPU per message of the clients and of the server.
    Client,
    /// A keyed topic (DDS instances, --instances of them, each keeping
    /// its last sample) beside a plain topic, 1 -> 1, --rounds times:
    /// medians, their ratio, and with --embedded the memory per instance.
    Keyed,
}

/// Arguments of `herald bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to measure.
    #[arg(long, value_enum, default_value_t = Mode::All)]
    mode: Mode,
    /// Subscribers for the throughput run (each on its own connection).
    #[arg(long, default_value_t = 1)]
    subscribers: usize,
    /// Publishers for the throughput run (each on its own connection and
    /// thread, each sending --count messages).
    #[arg(long, default_value_t = 1)]
    publishers: usize,
    /// Message body size in bytes (at least 16: the body carries a
    /// sequence number and a timestamp).
    #[arg(long, default_value_t = 128)]
    size: usize,
    /// Messages published in the throughput run.
    #[arg(long, default_value_t = 1_000_000)]
    count: u64,
    /// Messages per second in the latency run.
    #[arg(long, default_value_t = 10_000)]
    rate: u64,
    /// Messages published in the latency run.
    #[arg(long, default_value_t = 50_000)]
    latency_count: u64,
    /// Start a server inside this process on an ephemeral port instead of
    /// using --server.
    #[arg(long)]
    embedded: bool,
    /// Worker threads of the embedded server (0 = one per core).
    #[arg(long, default_value_t = 0)]
    workers: usize,
    /// Producers in the queue run (each on its own connection).
    #[arg(long, default_value_t = 1)]
    producers: usize,
    /// Competing consumers in the queue run.
    #[arg(long, default_value_t = 1)]
    consumers: usize,
    /// Persistent messages in the queue run (each receipted after the
    /// journal has it).
    #[arg(long)]
    persistent: bool,
    /// Persistent sends in flight per producer.
    #[arg(long, default_value_t = 1000)]
    window: usize,
    /// Queue consumers acknowledge in CLIENT mode, every this many
    /// messages at once; 0 = AUTO, each one.
    #[arg(long, default_value_t = 0)]
    ack_every: u32,
    /// --mode queue: also run with the messages in this many JMSXGroupID
    /// groups, side by side with the plain queue, --rounds times.
    #[arg(long, default_value_t = 0)]
    groups: usize,
    /// --mode keyed: the instances of the keyed topic (values of
    /// `sensor_id` the messages cycle through).
    #[arg(long, default_value_t = 100_000)]
    instances: u64,
    /// --mode queue: also run with each consumer at a priority of its
    /// own, side by side with the plain queue, --rounds times.
    #[arg(long)]
    priorities: bool,
    /// --mode queue: fill the queue, then drain it, in memory and paging
    /// to disk (a queue under bench.paged., which the embedded server
    /// pages past 1 MiB), side by side, --rounds times.
    #[arg(long)]
    paged: bool,
    /// The embedded server's journal fsync policy: always, batch or never.
    #[arg(long, default_value = "batch")]
    fsync: String,
    /// The STOMP listener for --mode stomp (ignored with --embedded).
    #[arg(long, default_value = "127.0.0.1:61613")]
    stomp: SocketAddr,
    /// The AMQP listener for --mode amqp (ignored with --embedded).
    #[arg(long, default_value = "127.0.0.1:5672")]
    amqp: SocketAddr,
    /// Run the topic scenarios (1 -> 1, 1 -> --fanout, latency) against
    /// Herald and then against the NATS server at this address, with the
    /// same load, and print the ratios: through each one's client, and
    /// through the same raw driver at both (the servers alone).
    #[arg(long)]
    compare_nats: Option<SocketAddr>,
    /// Run the MQTT scenarios (QoS 0 1 -> 1 and 1 -> --fanout, QoS 1
    /// 1 -> 1, latency at --rate, memory per idle connection) against a
    /// herald-server and a mosquitto that the bench starts, side by side,
    /// and print the ratios.
    #[arg(long)]
    compare_mosquitto: bool,
    /// Run the AMQP 1.0 topic scenarios (1 -> 1, 1 -> --fanout, latency
    /// at --rate) against a herald-server and a RabbitMQ (with its
    /// rabbitmq_amqp1_0 plugin) that the bench starts, side by side, and
    /// Herald's native protocol, and print the ratios. Run as root: the
    /// broker runs as the rabbitmq user.
    #[arg(long)]
    compare_rabbitmq: bool,
    /// The rabbitmq-server script for --compare-rabbitmq.
    #[arg(long, default_value = "rabbitmq-server")]
    rabbitmq: PathBuf,
    /// The mosquitto binary for --compare-mosquitto.
    #[arg(long, default_value = "mosquitto")]
    mosquitto: PathBuf,
    /// Idle connections of --compare-mosquitto's memory scenario.
    #[arg(long, default_value_t = 2000)]
    mqtt_connections: usize,
    /// Subscribers of the fan-out scenario of --compare-nats and
    /// --compare-mosquitto.
    #[arg(long, default_value_t = 10)]
    fanout: usize,
    /// Rounds of --compare-nats and --compare-mosquitto: each scenario
    /// runs against Herald and the other server in turn this many times,
    /// and the medians are compared.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=99))]
    rounds: u32,
    /// Subscriptions that never match, for --mode subscriptions and
    /// --mode scale.
    #[arg(long, default_value_t = 100_000)]
    subscriptions: usize,
    /// Another node of the same cluster: the throughput run is measured
    /// with everyone on --server, then with the subscribers on this one,
    /// and the two compared; --mode queue puts its consumers on it.
    #[arg(long)]
    subscriber_server: Option<String>,
    /// Idle connections for --mode connections.
    #[arg(long, default_value_t = 10_000)]
    connections: usize,
    /// The Redis of --mode cluster (redis:// or redis+sentinel://).
    #[arg(long)]
    cluster_redis: Option<String>,
    /// How long --mode soak runs: a number of seconds, or with a unit
    /// (90s, 10m, 1h).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    duration: Duration,
    /// MiB published per scenario of --mode large.
    #[arg(long, default_value_t = 1024)]
    volume: u64,
    /// Where --mode persistent times the disk's fdatasync: a directory on
    /// the disk of the server's data directory (default: the system's
    /// temporary directory).
    #[arg(long)]
    sync_dir: Option<PathBuf>,
    /// The nats-server binary for --mode fanout and --mode scale.
    #[arg(long, default_value = "nats-server")]
    nats_server: PathBuf,
    /// --mode client: hold the server to the first vCPU and this process
    /// to the second (with `taskset`), so that each has a core of its
    /// own: what the library can do, not its share of cores it competes
    /// for with the server.
    #[arg(long)]
    pin: bool,
}

/// The load of a side-by-side comparison with another server.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    pub size: usize,
    pub count: u64,
    pub fanout: usize,
    pub rate: u64,
    pub latency_count: u64,
    pub rounds: u32,
}

impl Load {
    fn of(args: &Args) -> Load {
        Load {
            size: args.size,
            count: args.count,
            fanout: args.fanout,
            rate: args.rate,
            latency_count: args.latency_count,
            rounds: args.rounds,
        }
    }
}

/// "90", "90s", "10m" or "1h".
pub(crate) fn parse_duration(text: &str) -> std::result::Result<Duration, String> {
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text}: not a number of seconds, minutes (m) or hours (h)"))?;
    let seconds = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(format!("{text}: the unit is s, m or h")),
    };
    match seconds {
        0 => Err("the duration must be above 0".into()),
        s => Ok(Duration::from_secs(s)),
    }
}

/// How long the subscribers may make no progress before the rest counts
/// as lost.
const STALL: Duration = Duration::from_secs(3);

/// The raw driver's message id where it measures the server alone: short,
/// as a NATS message has none.
const RAW_ID: &str = "ID:raw-driver";

pub fn run(target: &Target, args: Args) -> Result<()> {
    if args.size < 16 {
        return Err(Error::InvalidArgument(format!(
            "--size {} is below 16",
            args.size
        )));
    }
    if [
        args.subscribers,
        args.publishers,
        args.producers,
        args.consumers,
        args.window,
        args.connections,
    ]
    .contains(&0)
        || args.count == 0
        || args.rate == 0
        || args.latency_count == 0
    {
        return Err(Error::InvalidArgument(
            "--subscribers, --producers, --consumers, --window, --count, --rate and --latency-count must be above 0"
                .into(),
        ));
    }
    let fsync = match args.fsync.as_str() {
        "always" => FsyncPolicy::Always,
        "batch" => FsyncPolicy::Batch,
        "never" => FsyncPolicy::Never,
        other => {
            return Err(Error::InvalidArgument(format!(
                "--fsync {other}: not always, batch or never"
            )))
        }
    };
    if args.compare_mosquitto {
        // Both servers are processes of their own, started here.
        println!("{}", machine::describe());
        return mqtt::compare(&mqtt::Plan {
            mosquitto: &args.mosquitto,
            load: Load::of(&args),
            connections: args.mqtt_connections,
        });
    }
    if args.mode == Mode::Fanout {
        println!("{}", machine::describe());
        return fanout::run(&fanout::Plan {
            connections: args.connections,
            size: args.size,
            deliveries: args.count,
            nats_server: &args.nats_server,
        });
    }
    if args.mode == Mode::Client {
        println!("{}", machine::describe());
        return client::run(&client::Plan {
            size: args.size,
            count: args.count,
            rounds: args.rounds,
            pin: args.pin,
        });
    }
    if args.mode == Mode::Scale {
        println!("{}", machine::describe());
        return scale::run(&scale::Plan {
            subscriptions: args.subscriptions,
            size: args.size,
            count: args.count,
            nats_server: &args.nats_server,
        });
    }
    if args.compare_rabbitmq {
        println!("{}", machine::describe());
        return amqp::compare(&amqp::Plan {
            rabbitmq: &args.rabbitmq,
            load: Load::of(&args),
        });
    }
    let embedded = match args.embedded {
        true => Some(embedded_server(args.workers, fsync, None)?),
        false => None,
    };
    let factory = match &embedded {
        Some(server) => ConnectionFactory::new(&format!("herald://{}", server.local_addr()))?,
        None => target.factory()?,
    };
    println!("{}", machine::describe());
    let server_desc = match &embedded {
        Some(_) => format!(
            "embedded ({} workers)",
            Config {
                workers: args.workers,
                ..Config::default()
            }
            .worker_count()
        ),
        None => factory.address(),
    };
    println!("server: {server_desc}");
    if args.mode == Mode::Keyed {
        let plan = keyed::Plan {
            instances: args.instances,
            size: args.size,
            count: args.count,
            rounds: args.rounds,
            embedded: embedded.is_some(),
        };
        keyed::run(&factory, &plan)?;
    }
    if args.mode == Mode::Large {
        let plan = large::Plan {
            volume: args.volume.max(1) << 20,
            fanout: args.fanout,
            rounds: args.rounds,
            nats: args.compare_nats,
            embedded: embedded.is_some(),
        };
        large::run(&factory, &plan)?;
    } else if let Some(nats) = args.compare_nats {
        compare(&factory, nats, &args)?;
    } else {
        if matches!(args.mode, Mode::All | Mode::Throughput) {
            let (publishers, subscribers) = (args.publishers, args.subscribers);
            let one = throughput::run(&factory, publishers, subscribers, args.size, args.count)?;
            one.print();
            if let Some(url) = &args.subscriber_server {
                let other = ConnectionFactory::new(url)?;
                let across = throughput::run_across(
                    &factory,
                    &other,
                    publishers,
                    subscribers,
                    args.size,
                    args.count,
                )?;
                across.print();
                let (one, across) = (one.deliveries_per_sec(), across.deliveries_per_sec());
                println!(
                    "across nodes: {across:.0} deliveries/s, one node: {one:.0}, ratio {:.2}",
                    across / one
                );
                println!(
                    "{{\"scenario\":\"across_nodes\",\"one_node\":{one:.0},\"across\":{across:.0},\"ratio\":{:.3}}}",
                    across / one
                );
            }
        }
        if matches!(args.mode, Mode::All | Mode::Latency) {
            latency::run(&factory, args.size, args.rate, args.latency_count)?.print();
            // Beside it, what this machine allows for the same path.
            latency::floor(args.size, args.rate, args.latency_count)?.print();
        }
    }
    if args.mode == Mode::Stomp {
        let stomp_addr = match &embedded {
            Some(server) => server.stomp_addr().unwrap_or(args.stomp),
            None => args.stomp,
        };
        throughput::run(&factory, 1, 1, args.size, args.count)?.print();
        stomp::run(stomp_addr, args.size, args.count)?;
    }
    if args.mode == Mode::StompQueue {
        let stomp_addr = match &embedded {
            Some(server) => server.stomp_addr().unwrap_or(args.stomp),
            None => args.stomp,
        };
        stomp_queue_variants(stomp_addr, &args)?;
    }
    if args.mode == Mode::Amqp {
        let amqp_addr = match &embedded {
            Some(server) => server.amqp_addr().unwrap_or(args.amqp),
            None => args.amqp,
        };
        amqp::run(&factory, amqp_addr, &Load::of(&args))?;
    }
    if args.mode == Mode::Persistent {
        let plan = persistent::Plan {
            size: args.size,
            samples: args.latency_count,
            count: args.count,
            sync_dir: args.sync_dir.clone().unwrap_or_else(std::env::temp_dir),
            rounds: args.rounds,
        };
        persistent::run(&factory, &plan)?;
    }
    if args.mode == Mode::Subscriptions {
        subscriptions::run(&factory, args.subscriptions, args.size, args.count)?;
    }
    if args.mode == Mode::Connections {
        if embedded.is_some() {
            return Err(Error::InvalidArgument(
                "--mode connections measures a server of its own: use --server and --admin, not --embedded"
                    .into(),
            ));
        }
        connections::run(target, &factory.address(), args.connections)?;
    }
    if args.mode == Mode::Memory {
        if embedded.is_some() {
            return Err(Error::InvalidArgument(
                "--mode memory measures a server of its own: use --server and --admin, not --embedded"
                    .into(),
            ));
        }
        memory::run(target, &factory, &Load::of(&args))?;
    }
    if args.mode == Mode::Soak {
        let plan = soak::Plan {
            duration: args.duration,
            rate: args.rate,
            size: args.size,
        };
        let footprint = || match embedded {
            Some(_) => herald_server::admin::process_footprint()
                .map(|(rss, _)| rss)
                .ok_or_else(|| "this process's memory is read from /proc, on Linux".to_owned()),
            None => connections::footprint(target)
                .map(|(rss, _)| rss)
                .map_err(|e| e.to_string()),
        };
        soak::run(&factory, &plan, &footprint)?;
    }
    if args.mode == Mode::Queue {
        if embedded.is_some() {
            println!("journal: fsync = {}", args.fsync);
        }
        let plan = queue::Plan {
            producers: args.producers,
            queues: 1,
            consumers: args.consumers,
            size: args.size,
            count: args.count,
            persistent: args.persistent,
            window: args.window,
            ack_every: args.ack_every,
            groups: 0,
            tagged: 0,
            priorities: false,
            paged: false,
            fill_first: false,
        };
        let other = args
            .subscriber_server
            .as_deref()
            .map(ConnectionFactory::new)
            .transpose()?;
        let consumers_at = other.as_ref().unwrap_or(&factory);
        match args.groups > 0 || args.priorities || args.paged {
            true => queue_variants(&factory, consumers_at, plan, &args)?,
            false => drop(queue::run(&factory, consumers_at, &plan)?),
        }
    }
    if args.mode == Mode::Shards {
        shards::run(args.workers, fsync, args.size, args.count)?;
    }
    if args.mode == Mode::Cluster {
        let Some(redis) = &args.cluster_redis else {
            return Err(Error::InvalidArgument(
                "--mode cluster starts its own nodes on --cluster-redis URL".into(),
            ));
        };
        cluster::run(redis, args.workers, fsync, args.size, args.count)?;
    }
    if let Some(server) = embedded {
        server.shutdown();
        let _ = std::fs::remove_dir_all(embedded_data_dir());
    }
    Ok(())
}

/// The plain queue and its variants (groups, consumer priorities) in
/// turn, `--rounds` times, and the ratio of each variant's median rate to
/// the plain queue's.
fn queue_variants(
    factory: &ConnectionFactory,
    consumers_at: &ConnectionFactory,
    plain: queue::Plan,
    args: &Args,
) -> Result<()> {
    // With groups, the plain queue's messages carry a property as long.
    let plain = queue::Plan {
        tagged: args.groups,
        ..plain
    };
    let plain = queue::Plan {
        fill_first: args.paged,
        ..plain
    };
    let mut variants = vec![("plain", plain.clone())];
    if args.paged {
        let paged = queue::Plan {
            paged: true,
            ..plain.clone()
        };
        variants.push(("paged", paged));
    }
    if args.groups > 0 {
        let grouped = queue::Plan {
            groups: args.groups,
            tagged: 0,
            ..plain.clone()
        };
        variants.push(("groups", grouped));
    }
    if args.priorities {
        let ranked = queue::Plan {
            priorities: true,
            ..plain.clone()
        };
        variants.push(("priorities", ranked));
    }
    side_by_side("queue", &variants, args.rounds, |plan| {
        queue::run(factory, consumers_at, plan)
    })
}

/// Runs each variant in turn, `rounds` times, and prints each one's
/// median rate and its ratio to the first's.
fn side_by_side<P>(
    label: &str,
    variants: &[(&str, P)],
    rounds: u32,
    mut run: impl FnMut(&P) -> Result<f64>,
) -> Result<()> {
    let mut rates = vec![Vec::new(); variants.len()];
    for _ in 0..rounds {
        for (i, (_, plan)) in variants.iter().enumerate() {
            rates[i].push(run(plan)?);
        }
    }
    let base = median(rates[0].clone());
    for ((name, _), rates) in variants.iter().zip(rates) {
        let m = median(rates);
        println!(
            "{label} {name}: median {m:.0} msgs/s over {rounds} rounds, {:.2} x plain",
            m / base
        );
    }
    Ok(())
}

/// [`queue_variants`] over STOMP, against the broker at `addr`.
fn stomp_queue_variants(addr: SocketAddr, args: &Args) -> Result<()> {
    let plain = stomp_queue::Plan {
        consumers: args.consumers,
        size: args.size,
        count: args.count,
        groups: 0,
        priorities: false,
    };
    let mut variants = vec![("plain", plain)];
    if args.groups > 0 {
        let groups = args.groups;
        variants.push(("groups", stomp_queue::Plan { groups, ..plain }));
    }
    if args.priorities {
        let priorities = true;
        variants.push((
            "priorities",
            stomp_queue::Plan {
                priorities,
                ..plain
            },
        ));
    }
    let label = format!("stomp queue at {addr}");
    side_by_side(&label, &variants, args.rounds, |plan| {
        stomp_queue::run(addr, *plan)
    })
}

/// The topic scenarios on Herald and on NATS, one after the other, and the
/// ratios.
fn compare(
    factory: &herald_client::ConnectionFactory,
    nats_addr: SocketAddr,
    args: &Args,
) -> Result<()> {
    println!(
        "comparing with the NATS server at {nats_addr}, {} rounds, medians",
        args.rounds
    );
    let mut rows: Vec<Versus> = Vec::new();
    for subscribers in [1, args.fanout] {
        let (mut h_rates, mut n_rates, mut h_lost, mut n_lost) = (vec![], vec![], 0, 0);
        for _ in 0..args.rounds {
            let h = throughput::run(factory, 1, subscribers, args.size, args.count)?;
            h.print();
            let n = nats::throughput(nats_addr, subscribers, args.size, args.count)?;
            n.print();
            h_rates.push(h.deliveries_per_sec());
            n_rates.push(n.deliveries_per_sec());
            h_lost += h.lost();
            n_lost += n.lost();
        }
        let name = format!("1 -> {subscribers} deliveries/s (lost {h_lost} / {n_lost})");
        rows.push((name, median(h_rates), median(n_rates), true));
    }
    // The servers alone: the same raw driver at both (what the Herald
    // client costs is `--mode client`'s to measure).
    let herald_addr = std::net::ToSocketAddrs::to_socket_addrs(&factory.address())
        .map_err(|e| Error::InvalidArgument(format!("{}: {e}", factory.address())))?
        .next()
        .ok_or_else(|| Error::InvalidArgument(format!("{}: no address", factory.address())))?;
    for subscribers in [1, args.fanout] {
        let (mut h_rates, mut n_rates) = (vec![], vec![]);
        for _ in 0..args.rounds {
            let load = (args.size, args.count);
            let h = raw::drive(herald_addr, raw::Wire::Herald, load, subscribers, RAW_ID)?;
            let n = raw::drive(nats_addr, raw::Wire::Nats, load, subscribers, RAW_ID)?;
            println!("raw driver 1 -> {subscribers}: herald {h:.0}, nats {n:.0} deliveries/s");
            h_rates.push(h);
            n_rates.push(n);
        }
        let name = format!("raw driver 1 -> {subscribers} deliveries/s");
        rows.push((name, median(h_rates), median(n_rates), true));
    }
    let quantiles = [(0.5, "p50"), (0.99, "p99"), (0.999, "p99.9")];
    let (mut h_us, mut n_us) = (vec![vec![]; 3], vec![vec![]; 3]);
    for _ in 0..args.rounds {
        let h = latency::run(factory, args.size, args.rate, args.latency_count)?;
        h.print();
        let n = nats::latency(nats_addr, args.size, args.rate, args.latency_count)?;
        n.print();
        for (i, (q, _)) in quantiles.iter().enumerate() {
            h_us[i].push(h.us(*q));
            n_us[i].push(n.us(*q));
        }
    }
    // What this machine allows for the same path, whichever server.
    latency::floor(args.size, args.rate, args.latency_count)?.print();
    for ((_, label), (h, n)) in quantiles.iter().zip(h_us.into_iter().zip(n_us)) {
        rows.push((
            format!("latency {label} us at {}/s", args.rate),
            median(h),
            median(n),
            false,
        ));
    }
    let json = versus_nats(rows);
    println!("{{\"scenario\":\"comparison\",\"rows\":[{}]}}", json);
    Ok(())
}

/// A row of a comparison with NATS: its name, Herald's figure, NATS's,
/// and whether higher is better.
type Versus = (String, f64, f64, bool);

/// Prints `rows` as a table, each with the ratio that says how many times
/// better Herald is (above 1: Herald wins); returns them as JSON objects,
/// joined with commas.
fn versus_nats(rows: Vec<Versus>) -> String {
    let width = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    println!(
        "\n{:<width$} {:>14} {:>14} {:>8}",
        "scenario", "herald", "nats", "ratio"
    );
    let mut json = Vec::new();
    for (name, herald, nats, higher_is_better) in rows {
        let ratio = match higher_is_better {
            true => herald / nats,
            false => nats / herald,
        };
        println!("{name:<width$} {herald:>14.2} {nats:>14.2} {ratio:>8.2}");
        json.push(format!(
            "{{\"scenario\":\"{name}\",\"herald\":{herald:.3},\"nats\":{nats:.3},\"ratio\":{ratio:.3}}}"
        ));
    }
    json.join(",")
}

/// The middle value (the upper one of an even count).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// The embedded server's journal directory, private to this process.
fn embedded_data_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("herald-bench-{}", std::process::id()))
}

/// A server in this process on ephemeral ports, with its journal under
/// [`embedded_data_dir`]; `cluster`: (Redis URL, node id) to join a
/// cluster, each node with a journal directory of its own.
fn embedded_server(
    workers: usize,
    fsync: FsyncPolicy,
    cluster: Option<(&str, &str)>,
) -> Result<herald_server::ServerHandle> {
    start_embedded(embedded_config(workers, fsync, cluster))
}

/// Starts a server in this process.
fn start_embedded(config: Config) -> Result<herald_server::ServerHandle> {
    Server::start(config).map_err(|e| Error::InvalidArgument(e.to_string()))
}

/// The configuration of [`embedded_server`].
fn embedded_config(workers: usize, fsync: FsyncPolicy, cluster: Option<(&str, &str)>) -> Config {
    let mut config = Config {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        workers,
        data_dir: embedded_data_dir(),
        journal: JournalSection {
            fsync,
            ..JournalSection::default()
        },
        stomp: StompSection {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            websocket_enabled: false,
            ..StompSection::default()
        },
        mqtt: herald_server::config::MqttSection {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            websocket_enabled: false,
            ..Default::default()
        },
        amqp: herald_server::config::AmqpSection {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            ..Default::default()
        },
        admin: herald_server::config::AdminSection {
            enabled: false,
            ..Default::default()
        },
        ..Config::default()
    };
    // The queues of `--mode queue --paged` page past 1 MiB; the topics
    // of `--mode keyed` keep each instance's last sample.
    config.addresses = vec![
        herald_server::config::AddressRule {
            pattern: "queue://bench.paged.#".into(),
            max_size_bytes: Some(1 << 20),
            full_policy: Some(herald_server::config::FullPolicy::Page),
            ..Default::default()
        },
        herald_server::config::AddressRule {
            pattern: keyed::KEYED.into(),
            key: Some(vec!["sensor_id".into()]),
            durability: Some(herald_server::addresses::Durability::TransientLocal),
            max_instances: Some(10_000_000),
            ..Default::default()
        },
    ];
    if let Some((redis, node)) = cluster {
        config.cluster.redis = redis.to_owned();
        config.cluster.node_id = node.to_owned();
        config.data_dir = config.data_dir.join(node);
    }
    config
}

/// A topic no other bench run uses.
fn bench_topic(kind: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static RUN: AtomicU64 = AtomicU64::new(0);
    format!(
        "bench.{kind}.p{}.r{}",
        std::process::id(),
        RUN.fetch_add(1, Ordering::Relaxed)
    )
}

/// Seconds from `started` to the last arrival (at least a nanosecond),
/// and `got` per second over them.
fn rate(started: std::time::Instant, last: Option<std::time::Instant>, got: u64) -> (f64, f64) {
    let seconds = last
        .unwrap_or(started)
        .duration_since(started)
        .as_secs_f64()
        .max(1e-9);
    (seconds, got as f64 / seconds)
}

/// Waits until `received()` reaches `expected` or stops moving for
/// [`STALL`]; returns the final count.
fn wait_for(expected: u64, progress: &mut progress::Progress, received: impl Fn() -> u64) -> u64 {
    let mut last = received();
    let mut last_change = std::time::Instant::now();
    loop {
        let now = received();
        progress.update(now);
        if now >= expected {
            return now;
        }
        if now != last {
            last = now;
            last_change = std::time::Instant::now();
        } else if last_change.elapsed() > STALL {
            return now;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
