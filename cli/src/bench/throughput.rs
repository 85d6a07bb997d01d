//! Throughput: one publisher sends as fast as it can; N subscribers on
//! their own connections count what arrives and check the order.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use herald_client::{AckMode, Destination, Message, Result};

use super::progress::Progress;
use super::{bench_topic, wait_for};

#[derive(Default)]
struct Counter {
    received: AtomicU64,
    out_of_order: AtomicU64,
    /// When the last message arrived.
    last: Mutex<Option<Instant>>,
}

pub fn run(
    factory: &herald_client::ConnectionFactory,
    subscribers: usize,
    size: usize,
    count: u64,
) -> Result<()> {
    let topic = bench_topic("throughput");
    let destination = Destination::topic(topic);
    let mut connections = Vec::new();
    let mut counters = Vec::new();
    for _ in 0..subscribers {
        let connection = factory.create_connection()?;
        let session = connection.create_session(AckMode::Auto)?;
        let consumer = session.create_consumer(&destination)?;
        let counter = Arc::new(Counter::default());
        let c = counter.clone();
        let mut expected_seq = 0u64;
        consumer.set_message_listener(move |m| {
            if let herald_client::Body::Bytes(b) = &m.body {
                let seq = b.get(..8).map_or(u64::MAX, |s| {
                    u64::from_be_bytes(s.try_into().unwrap_or_default())
                });
                if seq != expected_seq {
                    c.out_of_order.fetch_add(1, Ordering::Relaxed);
                }
                expected_seq = seq + 1;
            }
            c.received.fetch_add(1, Ordering::Relaxed);
            *c.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        })?;
        counters.push(counter);
        connections.push((connection, session, consumer));
    }

    let publisher = factory.create_connection()?;
    let session = publisher.create_session(AckMode::Auto)?;
    let producer = session.create_producer(&destination)?;
    let mut body = vec![0u8; size];
    let mut progress = Progress::new("publishing", count);
    let started = Instant::now();
    for seq in 0..count {
        body[..8].copy_from_slice(&seq.to_be_bytes());
        producer.send(Message::bytes(Bytes::copy_from_slice(&body)))?;
        if seq % 65_536 == 0 {
            progress.update(seq);
        }
    }
    let published = started.elapsed();
    progress.finish();

    let expected = count * subscribers as u64;
    let mut progress = Progress::new("receiving", expected);
    let total = || {
        counters
            .iter()
            .map(|c| c.received.load(Ordering::Relaxed))
            .sum::<u64>()
    };
    let received = wait_for(expected, &mut progress, total);
    progress.finish();
    let last = counters
        .iter()
        .filter_map(|c| *c.last.lock().unwrap_or_else(|p| p.into_inner()))
        .max()
        .unwrap_or(started);
    let seconds = last.duration_since(started).as_secs_f64().max(1e-9);
    let lost = expected - received.min(expected);
    let out_of_order: u64 = counters
        .iter()
        .map(|c| c.out_of_order.load(Ordering::Relaxed))
        .sum();
    let deliveries_per_sec = received as f64 / seconds;
    let per_subscriber = deliveries_per_sec / subscribers as f64;
    let mb_per_sec = deliveries_per_sec * size as f64 / 1e6;
    println!(
        "throughput 1 -> {subscribers}, {size} B: {received} of {expected} delivered in {seconds:.3} s \
         ({:.3} s to publish): {per_subscriber:.0} msgs/s per subscriber, {deliveries_per_sec:.0} deliveries/s, \
         {mb_per_sec:.1} MB/s; lost {lost}, out of order {out_of_order}",
        published.as_secs_f64()
    );
    println!(
        "{{\"scenario\":\"throughput\",\"publishers\":1,\"subscribers\":{subscribers},\"size\":{size},\
         \"count\":{count},\"expected\":{expected},\"received\":{received},\"lost\":{lost},\
         \"out_of_order\":{out_of_order},\"seconds\":{seconds:.6},\"msgs_per_sec_per_subscriber\":{per_subscriber:.0},\
         \"deliveries_per_sec\":{deliveries_per_sec:.0},\"mb_per_sec\":{mb_per_sec:.1}}}"
    );
    publisher.close()?;
    for (connection, _, _) in connections {
        connection.close()?;
    }
    Ok(())
}
