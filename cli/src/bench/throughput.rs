//! Throughput: publishers send as fast as they can; subscribers on their
//! own connections count what arrives and check each publisher's order.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    /// A probe arrived: the subscription is heard from the publishers'
    /// node.
    probed: std::sync::atomic::AtomicBool,
}

/// A subscriber notes the time of every this many arrivals (and of the
/// last one expected): a run that loses messages is timed to the last
/// note, at most this many arrivals short.
const STAMP_EVERY: u64 = 1024;

/// The body of a warm-up message across nodes (shorter than any measured
/// one, which has at least 16 bytes).
const PROBE: &[u8] = b"probe";

/// `publishers` each send `count` messages of `size` bytes (at least 12:
/// a sequence number and the publisher's index) to `subscribers`.
pub fn run(
    factory: &herald_client::ConnectionFactory,
    publishers: usize,
    subscribers: usize,
    size: usize,
    count: u64,
) -> Result<ThroughputReport> {
    run_across(factory, factory, publishers, subscribers, size, count)
}

/// [`run`] with the subscribers on the server of `subscribe_to` (another
/// node of a cluster) and the publishers on that of `publish_to`.
pub fn run_across(
    publish_to: &herald_client::ConnectionFactory,
    subscribe_to: &herald_client::ConnectionFactory,
    publishers: usize,
    subscribers: usize,
    size: usize,
    count: u64,
) -> Result<ThroughputReport> {
    let topic = bench_topic("throughput");
    run_topic(
        publish_to,
        subscribe_to,
        &topic,
        (publishers, subscribers),
        (size, 0),
        count,
    )
}

/// [`run_across`] on `topic`; with `keys` above 0, message `seq` carries
/// the property `sensor_id` = `seq % keys` (a keyed topic's instance).
pub fn run_topic(
    publish_to: &herald_client::ConnectionFactory,
    subscribe_to: &herald_client::ConnectionFactory,
    topic: &str,
    (publishers, subscribers): (usize, usize),
    (size, keys): (usize, u64),
    count: u64,
) -> Result<ThroughputReport> {
    let destination = Destination::topic(topic);
    // What each subscriber expects, probes aside.
    let expected = count * publishers as u64;
    let mut connections = Vec::new();
    let mut counters = Vec::new();
    for _ in 0..subscribers {
        let connection = subscribe_to.create_connection()?;
        let session = connection.create_session(AckMode::Auto)?;
        let consumer = session.create_consumer(&destination)?;
        let counter = Arc::new(Counter::default());
        let c = counter.clone();
        let mut expected_seq = vec![0u64; publishers];
        let mut received = 0u64;
        consumer.set_message_listener(move |m| {
            if let herald_client::Body::Bytes(b) = &m.body {
                if &b[..] == PROBE {
                    c.probed.store(true, Ordering::Relaxed);
                    return;
                }
                let seq = b.get(..8).map_or(u64::MAX, |s| {
                    u64::from_be_bytes(s.try_into().unwrap_or_default())
                });
                let from = b.get(8..12).map_or(usize::MAX, |s| {
                    u32::from_be_bytes(s.try_into().unwrap_or_default()) as usize
                });
                match expected_seq.get_mut(from) {
                    Some(expected) if seq == *expected => *expected = seq + 1,
                    Some(expected) => {
                        c.out_of_order.fetch_add(1, Ordering::Relaxed);
                        *expected = seq + 1;
                    }
                    None => {
                        c.out_of_order.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            // Counted here and published with a plain store: this thread
            // is the only writer, and a locked add per message was the
            // bench's, not the client's, cost.
            received += 1;
            c.received.store(received, Ordering::Relaxed);
            // The clock only now and then, and at the last message: read
            // for each, it was a tenth of the listener's cost, which is
            // the bench's and not the client library's.
            if received.is_multiple_of(STAMP_EVERY) || received == expected {
                *c.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
            }
        })?;
        counters.push(counter);
        connections.push((connection, session, consumer));
    }

    let mut producers = Vec::new();
    for _ in 0..publishers {
        let connection = publish_to.create_connection()?;
        let session = connection.create_session(AckMode::Auto)?;
        let producer = session.create_producer(&destination)?;
        producers.push((connection, session, producer));
    }
    if !std::ptr::eq(publish_to, subscribe_to) {
        // Another node hears the subscriptions a moment after they are
        // made: probe until every subscriber has heard one.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !counters.iter().all(|c| c.probed.load(Ordering::Relaxed)) {
            if Instant::now() > deadline {
                return Err(herald_client::Error::InvalidArgument(
                    "the subscribers' node never heard the publishers' node".into(),
                ));
            }
            producers[0]
                .2
                .send_with_receipt(Message::bytes(Bytes::from_static(PROBE)))?;
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let progress = Mutex::new(Progress::new("publishing", count));
    let started = Instant::now();
    std::thread::scope(|scope| -> Result<()> {
        let threads: Vec<_> = producers
            .iter()
            .enumerate()
            .map(|(index, (_, _, producer))| {
                let progress = &progress;
                scope.spawn(move || -> Result<()> {
                    let mut body = vec![0u8; size];
                    body[8..12].copy_from_slice(&(index as u32).to_be_bytes());
                    for seq in 0..count {
                        body[..8].copy_from_slice(&seq.to_be_bytes());
                        let mut m = Message::bytes(Bytes::copy_from_slice(&body)).non_persistent();
                        if keys > 0 {
                            m = m.with_property("sensor_id", (seq % keys) as i64);
                        }
                        producer.send(m)?;
                        if index == 0 && seq % 65_536 == 0 {
                            progress
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .update(seq);
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap_or_else(|p| std::panic::resume_unwind(p))?;
        }
        Ok(())
    })?;
    let published = started.elapsed();
    progress
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .finish();

    let expected = count * (publishers * subscribers) as u64;
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
        publishers,
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
    let producers = producers.into_iter().map(|(c, _, _)| c);
    for connection in producers.chain(connections.into_iter().map(|(c, _, _)| c)) {
        connection.close()?;
    }
    Ok(report)
}

/// What a throughput run measured.
pub struct ThroughputReport {
    /// "herald" or "nats".
    pub system: &'static str,
    pub publishers: usize,
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
        let expected = self.count * (self.publishers * self.subscribers) as u64;
        expected - self.received.min(expected)
    }

    /// Prints a line for people and a JSON line for scripts.
    pub fn print(&self) {
        let (system, publishers, subscribers, size, count) = (
            self.system,
            self.publishers,
            self.subscribers,
            self.size,
            self.count,
        );
        let (received, out_of_order, seconds) = (self.received, self.out_of_order, self.seconds);
        let expected = count * (publishers * subscribers) as u64;
        let lost = self.lost();
        let deliveries_per_sec = self.deliveries_per_sec();
        let per_subscriber = deliveries_per_sec / subscribers as f64;
        let mb_per_sec = deliveries_per_sec * size as f64 / 1e6;
        println!(
            "{system} throughput {publishers} -> {subscribers}, {size} B: {received} of {expected} delivered in {seconds:.3} s \
             ({:.3} s to publish): {per_subscriber:.0} msgs/s per subscriber, {deliveries_per_sec:.0} deliveries/s, \
             {mb_per_sec:.1} MB/s; lost {lost}, out of order {out_of_order}",
            self.published.as_secs_f64()
        );
        println!(
            "{{\"scenario\":\"throughput\",\"system\":\"{system}\",\"publishers\":{publishers},\"subscribers\":{subscribers},\"size\":{size},\
             \"count\":{count},\"expected\":{expected},\"received\":{received},\"lost\":{lost},\
             \"out_of_order\":{out_of_order},\"seconds\":{seconds:.6},\"msgs_per_sec_per_subscriber\":{per_subscriber:.0},\
             \"deliveries_per_sec\":{deliveries_per_sec:.0},\"mb_per_sec\":{mb_per_sec:.1}}}"
        );
    }
}

/// The publishing side of a run over another protocol (NATS, MQTT).
pub trait Sender {
    /// Sends one body.
    fn send(&mut self, body: &[u8]) -> Result<()>;
    /// Returns once the server has handled everything sent.
    fn drain(&mut self) -> Result<()>;
}

/// Counts one subscriber's arrivals by the sequence number in each body's
/// first 8 bytes, and those out of order, into a run's totals.
pub struct Arrivals {
    totals: Arc<Counter>,
    expected: u64,
}

impl Arrivals {
    /// Takes one arrival.
    pub fn arrived(&mut self, body: &[u8]) {
        let seq = body.get(..8).map_or(u64::MAX, |b| {
            u64::from_be_bytes(b.try_into().unwrap_or_default())
        });
        if seq != self.expected {
            self.totals.out_of_order.fetch_add(1, Ordering::Relaxed);
        }
        self.expected = seq.wrapping_add(1);
        self.totals.received.fetch_add(1, Ordering::Relaxed);
        *self.totals.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }
}

/// One publisher → `subscribers` over another protocol, as fast as the
/// publisher goes: `subscribe` starts one subscriber that hands each body
/// to the `Arrivals` it is given; `sender` publishes.
pub fn one_to_many(
    system: &'static str,
    (subscribers, size, count): (usize, usize, u64),
    mut subscribe: impl FnMut(Arrivals) -> Result<()>,
    sender: &mut impl Sender,
) -> Result<ThroughputReport> {
    let totals = Arc::new(Counter::default());
    for _ in 0..subscribers {
        subscribe(Arrivals {
            totals: totals.clone(),
            expected: 0,
        })?;
    }
    let mut body = vec![0u8; size];
    let mut progress = Progress::new("publishing", count);
    let started = Instant::now();
    for seq in 0..count {
        body[..8].copy_from_slice(&seq.to_be_bytes());
        sender.send(&body)?;
        if seq % 65_536 == 0 {
            progress.update(seq);
        }
    }
    sender.drain()?;
    let published = started.elapsed();
    progress.finish();
    let expected = count * subscribers as u64;
    let mut progress = Progress::new("receiving", expected);
    let got = wait_for(expected, &mut progress, || {
        totals.received.load(Ordering::Relaxed)
    });
    progress.finish();
    let last = *totals.last.lock().unwrap_or_else(|p| p.into_inner());
    Ok(ThroughputReport {
        system,
        publishers: 1,
        subscribers,
        size,
        count,
        received: got,
        out_of_order: totals.out_of_order.load(Ordering::Relaxed),
        seconds: super::rate(started, last, got).0,
        published,
    })
}
