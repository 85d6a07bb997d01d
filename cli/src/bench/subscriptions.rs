//! Many subscriptions: topic 1 → 1 throughput with no other subscription,
//! then again with N subscriptions that never match (half of them with
//! wildcards), and the ratio. Matching a topic must not cost more with
//! subscriptions that cannot match it.

use std::time::Instant;

use herald_client::{AckMode, ConnectionFactory, Destination, Result};

use super::throughput;

/// Subscriptions one connection holds (under the server's default
/// `max_subscriptions_per_connection`).
const PER_CONNECTION: usize = 10_000;

pub fn run(
    factory: &ConnectionFactory,
    subscriptions: usize,
    size: usize,
    count: u64,
) -> Result<()> {
    let alone = throughput::run(factory, 1, 1, size, count)?;
    alone.print();
    let started = Instant::now();
    let mut held = Vec::new();
    let mut made = 0;
    while made < subscriptions {
        let connection = factory.create_connection()?;
        let session = connection.create_session(AckMode::Auto)?;
        let mut consumers = Vec::new();
        while made < subscriptions && consumers.len() < PER_CONNECTION {
            // Literal and wildcard patterns under a subtree the bench
            // never publishes to.
            let pattern = match made % 2 {
                0 => format!("noise.n{made}.leaf"),
                _ => format!("noise.n{made}.*"),
            };
            consumers.push(session.create_consumer(&Destination::topic(pattern))?);
            made += 1;
        }
        held.push((connection, session, consumers));
    }
    println!(
        "{subscriptions} subscriptions made in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let crowded = throughput::run(factory, 1, 1, size, count)?;
    crowded.print();
    let ratio = crowded.deliveries_per_sec() / alone.deliveries_per_sec();
    println!(
        "1 -> 1 with {subscriptions} other subscriptions: {ratio:.2} x the throughput with none"
    );
    println!(
        "{{\"scenario\":\"subscriptions\",\"subscriptions\":{subscriptions},\"alone\":{:.0},\"crowded\":{:.0},\"ratio\":{ratio:.3}}}",
        alone.deliveries_per_sec(),
        crowded.deliveries_per_sec()
    );
    for (connection, _, _) in held {
        connection.close()?;
    }
    Ok(())
}
