//! Persistent receipted queues on one Redis beside a Redis Cluster of
//! three primaries, side by side in one run: 16 queues, a producer and a
//! consumer on each, through one clustered node in this process; and the
//! CPU seconds each Redis server used per million messages, read from
//! `/proc`. Both are started here (Debian's redis-server and redis-cli),
//! without replicas, so that both do the same work (`min_replicas` 0).
//! Then the cost of each operation on the Redis Cluster ([`super::shard_costs`]).

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use herald_client::{ConnectionFactory, Error, Result};
use herald_server::store::FsyncPolicy;

use super::client::cpu_seconds;
use super::process::{io, scratch, wait_listening, Process};
use super::{embedded_config, queue, start_embedded};

/// The queues of a run.
const QUEUES: usize = 16;

/// A redis-server on a free port, in cluster mode if `cluster`.
fn redis(name: &'static str, cluster: bool) -> Result<Process> {
    let free = || -> Result<u16> {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .map_err(io("a free port"))
    };
    let port = free()?;
    let dir = scratch(&format!("{name}-{port}"))?;
    let mut command = Command::new("redis-server");
    command
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(&dir);
    if cluster {
        command
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-port", &free()?.to_string()])
            .args(["--cluster-config-file", "nodes.conf"]);
    }
    let child = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(io("starting redis-server (Debian's redis-server package)"))?;
    let process = Process {
        name,
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        dir,
    };
    wait_listening(&process, Duration::from_secs(10))?;
    Ok(process)
}

/// Three primaries joined into one Redis Cluster, every slot served.
fn redis_cluster() -> Result<Vec<Process>> {
    let nodes = (0..3)
        .map(|_| redis("redis-shard", true))
        .collect::<Result<Vec<_>>>()?;
    let made = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(nodes.iter().map(|n| n.addr.to_string()))
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(io("redis-cli --cluster create"))?;
    if !made.success() {
        return Err(Error::InvalidArgument(
            "redis-cli --cluster create failed".into(),
        ));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for node in &nodes {
        loop {
            let info = Command::new("redis-cli")
                .args(["-p", &node.addr.port().to_string(), "CLUSTER", "INFO"])
                .output()
                .map_err(io("redis-cli CLUSTER INFO"))?;
            if String::from_utf8_lossy(&info.stdout).contains("cluster_state:ok") {
                break;
            }
            if Instant::now() > deadline {
                return Err(Error::InvalidArgument(
                    "the Redis Cluster never came up".into(),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(nodes)
}

/// One setup's figures.
struct Row {
    setup: &'static str,
    rate: f64,
    /// Per Redis server, CPU seconds per million messages.
    redis_cpu: Vec<f64>,
    /// This process's (the node and its 32 clients), the same.
    here_cpu: f64,
}

/// The queues through one node on `url`; the CPU of `servers` meanwhile.
fn measure(
    setup: &'static str,
    url: &str,
    servers: &[Process],
    (workers, fsync, plan): (usize, FsyncPolicy, &queue::Plan),
) -> Result<Row> {
    let mut config = embedded_config(workers, fsync, Some((url, "bench-shards")));
    config.cluster.min_replicas = Some(0);
    let node = start_embedded(config)?;
    let factory = ConnectionFactory::new(&format!("herald://{}", node.local_addr()))?;
    let pids: Vec<String> = servers.iter().map(|s| s.child.id().to_string()).collect();
    let cpu = || {
        pids.iter()
            .map(|p| cpu_seconds(p))
            .chain([cpu_seconds("self")])
            .collect::<Result<Vec<_>>>()
    };
    let before = cpu()?;
    let rate = queue::run(&factory, &factory, plan)?;
    let after = cpu()?;
    node.shutdown();
    let millions = plan.count as f64 / 1e6;
    let mut redis_cpu: Vec<f64> = before
        .iter()
        .zip(&after)
        .map(|(b, a)| (a - b) / millions)
        .collect();
    let here_cpu = redis_cpu.pop().unwrap_or_default();
    Ok(Row {
        setup,
        rate,
        redis_cpu,
        here_cpu,
    })
}

/// Runs both setups and prints a table and a JSON line.
pub fn run(workers: usize, fsync: FsyncPolicy, size: usize, count: u64) -> Result<()> {
    let plan = queue::Plan {
        producers: QUEUES,
        consumers: QUEUES,
        queues: QUEUES,
        size,
        count: count.min(400_000),
        persistent: true,
        window: 100,
        ack_every: 0,
        groups: 0,
        tagged: 0,
        priorities: false,
        paged: false,
        fill_first: false,
    };
    let one = [redis("redis", false)?];
    let shards = redis_cluster()?;
    let one_url = format!("redis://{}", one[0].addr);
    let shards_url = format!("redis+cluster://{}", shards[0].addr);
    let rows = [
        measure("one Redis", &one_url, &one, (workers, fsync, &plan))?,
        measure(
            "Redis Cluster, 3 shards",
            &shards_url,
            &shards,
            (workers, fsync, &plan),
        )?,
    ];
    println!(
        "\n{:<24} {:>18} {:>30} {:>26}",
        "setup",
        format!("{QUEUES} queues msgs/s"),
        "Redis CPU s/M msgs, each",
        "node+clients CPU s/M msgs"
    );
    let mut json = Vec::new();
    for row in &rows {
        let cpu: Vec<String> = row.redis_cpu.iter().map(|c| format!("{c:.2}")).collect();
        println!(
            "{:<24} {:>18.0} {:>30} {:>26.2}",
            row.setup,
            row.rate,
            cpu.join(" "),
            row.here_cpu
        );
        json.push(format!(
            "{{\"setup\":\"{}\",\"msgs_per_sec\":{:.0},\"redis_cpu_s_per_million\":[{}],\"node_and_clients_cpu_s_per_million\":{:.2}}}",
            row.setup,
            row.rate,
            cpu.join(","),
            row.here_cpu
        ));
    }
    println!(
        "{{\"scenario\":\"shards\",\"queues\":{QUEUES},\"size\":{size},\"count\":{},\"rows\":[{}]}}",
        plan.count,
        json.join(",")
    );
    super::shard_costs::run(&shards_url, &shards, workers, fsync, size, count)?;
    let _ = std::fs::remove_dir_all(super::embedded_data_dir());
    Ok(())
}
