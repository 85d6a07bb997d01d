//! Cluster scenarios side by side, in one run: a persistent, receipted
//! queue (4 producers → 4 consumers, a window of receipts each) and a topic
//! 1 → 1, each on one standalone node, one clustered node, and two
//! clustered nodes (producers on one, consumers on the other). All nodes
//! run in this process; the cluster's Redis is the caller's.

use herald_client::{ConnectionFactory, Result};
use herald_server::store::FsyncPolicy;

use super::{embedded_server, queue, throughput};

/// Runs every scenario and prints a table and a JSON line.
pub fn run(redis: &str, workers: usize, fsync: FsyncPolicy, size: usize, count: u64) -> Result<()> {
    let solo = embedded_server(workers, fsync, None)?;
    let a = embedded_server(workers, fsync, Some((redis, "bench-a")))?;
    let b = embedded_server(workers, fsync, Some((redis, "bench-b")))?;
    let factory = |s: &herald_server::ServerHandle| {
        ConnectionFactory::new(&format!("herald://{}", s.local_addr()))
    };
    let (solo_f, a_f, b_f) = (factory(&solo)?, factory(&a)?, factory(&b)?);
    let plan = queue::Plan {
        producers: 4,
        queues: 1,
        consumers: 4,
        size,
        count: count.min(200_000),
        persistent: true,
        window: 1000,
        ack_every: 0,
        groups: 0,
        tagged: 0,
        priorities: false,
        paged: false,
        fill_first: false,
    };
    let mut rows = Vec::new();
    for (setup, publish, consume) in [
        ("standalone", &solo_f, &solo_f),
        ("1 clustered node", &a_f, &a_f),
        ("2 clustered nodes", &a_f, &b_f),
    ] {
        let queue = queue::run(publish, consume, &plan)?;
        let topic = throughput::run_across(publish, consume, 1, 1, size, count)?;
        topic.print();
        rows.push((setup, queue, topic.deliveries_per_sec()));
    }
    println!(
        "\n{:<20} {:>28} {:>20}",
        "setup", "persistent queue 4 -> 4 /s", "topic 1 -> 1 /s"
    );
    let mut json = Vec::new();
    for (setup, queue, topic) in &rows {
        println!("{setup:<20} {queue:>28.0} {topic:>20.0}");
        json.push(format!(
            "{{\"setup\":\"{setup}\",\"persistent_queue\":{queue:.0},\"topic\":{topic:.0}}}"
        ));
    }
    println!("{{\"scenario\":\"cluster\",\"rows\":[{}]}}", json.join(","));
    for server in [solo, a, b] {
        server.shutdown();
    }
    let _ = std::fs::remove_dir_all(super::embedded_data_dir());
    Ok(())
}
