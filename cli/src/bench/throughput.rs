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
) -> Result<ThroughputReport> {
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
        .max();
    let report = ThroughputReport {
        system: "herald",
        subscribers,
        size,
        count,
        received,
        out_of_order: counters
            .iter()
            .map(|c| c.out_of_order.load(Ordering::Relaxed))
            .sum(),
        seconds: super::rate(started, last, received).0,
        published,
    };
    publisher.close()?;
    for (connection, _, _) in connections {
        connection.close()?;
    }
    Ok(report)
}

/// What a throughput run measured.
pub struct ThroughputReport {
    /// "herald" or "nats".
    pub system: &'static str,
    pub subscribers: usize,
    pub size: usize,
    pub count: u64,
    pub received: u64,
    pub out_of_order: u64,
    /// From the first publish to the last arrival.
    pub seconds: f64,
    /// How long publishing took.
    pub published: std::time::Duration,
}

impl ThroughputReport {
    /// Deliveries a second, all subscribers together.
    pub fn deliveries_per_sec(&self) -> f64 {
        self.received as f64 / self.seconds
    }

    /// Deliveries that never came.
    pub fn lost(&self) -> u64 {
        let expected = self.count * self.subscribers as u64;
        expected - self.received.min(expected)
    }

    /// Prints a line for people and a JSON line for scripts.
    pub fn print(&self) {
        let (system, subscribers, size, count) =
            (self.system, self.subscribers, self.size, self.count);
        let (received, out_of_order, seconds) = (self.received, self.out_of_order, self.seconds);
        let expected = count * subscribers as u64;
        let lost = self.lost();
        let deliveries_per_sec = self.deliveries_per_sec();
        let per_subscriber = deliveries_per_sec / subscribers as f64;
        let mb_per_sec = deliveries_per_sec * size as f64 / 1e6;
        println!(
            "{system} throughput 1 -> {subscribers}, {size} B: {received} of {expected} delivered in {seconds:.3} s \
             ({:.3} s to publish): {per_subscriber:.0} msgs/s per subscriber, {deliveries_per_sec:.0} deliveries/s, \
             {mb_per_sec:.1} MB/s; lost {lost}, out of order {out_of_order}",
            self.published.as_secs_f64()
        );
        println!(
            "{{\"scenario\":\"throughput\",\"system\":\"{system}\",\"publishers\":1,\"subscribers\":{subscribers},\"size\":{size},\
             \"count\":{count},\"expected\":{expected},\"received\":{received},\"lost\":{lost},\
             \"out_of_order\":{out_of_order},\"seconds\":{seconds:.6},\"msgs_per_sec_per_subscriber\":{per_subscriber:.0},\
             \"deliveries_per_sec\":{deliveries_per_sec:.0},\"mb_per_sec\":{mb_per_sec:.1}}}"
        );
    }
}
