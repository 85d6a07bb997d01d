//! A keyed topic (DDS instances) beside a plain topic: 1 -> 1 through
//! each in turn, `--rounds` times, every message carrying a `sensor_id`
//! of `--instances` values; on the keyed topic each value is an
//! instance that keeps its last sample (`bench.keyed.#`, which the
//! embedded server keys; a server of one's own needs the same
//! `[[addresses]]` entry). Medians and their ratio, and with `--embedded`
//! what this process's memory grew by per instance.

use herald_client::{ConnectionFactory, Result};

use super::throughput::run_topic;
use super::{bench_topic, large::rss, side_by_side};

/// The topics the embedded server keys by `sensor_id`.
pub(super) const KEYED: &str = "topic://bench.keyed.#";

/// What a run measures.
pub struct Plan {
    /// Values of `sensor_id`: instances of the keyed topic.
    pub instances: u64,
    pub size: usize,
    pub count: u64,
    pub rounds: u32,
    /// The server runs in this process: its memory is this process's.
    pub embedded: bool,
}

/// Runs the plain and the keyed topic in turn and prints the medians.
pub fn run(factory: &ConnectionFactory, plan: &Plan) -> Result<()> {
    let (plain, keyed) = (bench_topic("plain"), bench_topic("keyed"));
    let before = rss();
    let variants = [("plain", plain.as_str()), ("keyed", keyed.as_str())];
    side_by_side("topic", &variants, plan.rounds, |topic| {
        let report = run_topic(
            factory,
            factory,
            topic,
            (1, 1),
            (plan.size, plan.instances),
            plan.count,
        )?;
        Ok(report.deliveries_per_sec())
    })?;
    if plan.embedded {
        let grown = rss().saturating_sub(before);
        println!(
            "keyed topic: {} instances, this process grew {:.1} MB over the rounds: {:.0} bytes per instance at most",
            plan.instances,
            grown as f64 / 1e6,
            grown as f64 / plan.instances.max(1) as f64
        );
    }
    Ok(())
}
