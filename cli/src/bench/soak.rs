//! A soak: a mixed load held for a long time, to show that memory levels
//! off and that nothing is lost while clients come and go.
//!
//! For `duration`, at a paced total `rate`:
//! - a persistent queue, fed through a window of receipted asynchronous
//!   sends by a producer that closes its connection and opens a new one
//!   every [`RECONNECT_EVERY`];
//! - a non-persistent queue;
//! - topic messages over four topics, to two wildcard subscribers.
//!
//! The queues have a steady consumer each (CLIENT acknowledgements), the
//! persistent one a slow consumer too, and short-lived workers come and go
//! on both: each connects, takes a few messages, acknowledges all but the
//! last and closes, so that one comes again, marked redelivered.
//!
//! Every message carries its number. Throughput and resident memory are
//! printed as they go; at the end, for each stream, what was sent and
//! receipted, what was delivered, lost, delivered twice (and whether each
//! second delivery was marked redelivered) and dead-lettered.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use herald_client::{
    AckMode, Connection, ConnectionFactory, Consumer, ConsumerOptions, Destination, Error, Message,
    Result, Session,
};

use super::bench_topic;
use super::ledger::Ledger;
use super::queue::Window;

/// How often the persistent producer reconnects.
const RECONNECT_EVERY: Duration = Duration::from_secs(20);
/// How often a short-lived worker comes.
const WORKER_EVERY: Duration = Duration::from_millis(500);
/// Persistent sends in flight.
const WINDOW: usize = 100;

/// What one soak is asked to do.
pub struct Plan {
    pub duration: Duration,
    /// Messages per second, all streams together.
    pub rate: u64,
    pub size: usize,
}

/// Sends `stream`'s next numbers at `rate` per second until `stop`, in
/// turn to each of `destinations`; persistent sends go through a window of
/// receipts.
struct Producer {
    destinations: Vec<Destination>,
    stream: Arc<Ledger>,
    persistent: bool,
    rate: u64,
    size: usize,
}

impl Producer {
    fn spawn(
        self,
        factory: ConnectionFactory,
        stop: Arc<AtomicBool>,
        published: Arc<AtomicU64>,
    ) -> JoinHandle<Result<()>> {
        std::thread::spawn(move || {
            let body = Bytes::from(vec![b's'; self.size]);
            let started = Instant::now();
            let window = Arc::new(Window::new(WINDOW));
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let connection = factory.create_connection()?;
                let session = connection.create_session(AckMode::Auto)?;
                let producers = self
                    .destinations
                    .iter()
                    .map(|d| session.create_producer(d))
                    .collect::<Result<Vec<_>>>()?;
                let until = Instant::now() + RECONNECT_EVERY;
                while !stop.load(Ordering::Relaxed) && (!self.persistent || Instant::now() < until)
                {
                    // Paced: the n-th message leaves at n / rate seconds.
                    let due = started + Duration::from_secs_f64(sent as f64 / self.rate as f64);
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    let n = self.stream.issue();
                    let producer = &producers[n as usize % producers.len()];
                    let message = Message::bytes(body.clone()).with_property("n", n as i64);
                    sent += 1;
                    published.fetch_add(1, Ordering::Relaxed);
                    if !self.persistent {
                        if producer.send(message.non_persistent()).is_err() {
                            self.stream.failed(n);
                        }
                        continue;
                    }
                    window.acquire();
                    let (w, s) = (window.clone(), self.stream.clone());
                    let queued = producer.send_async(message.persistent(), move |result| {
                        if result.is_err() {
                            s.failed(n);
                        }
                        w.release();
                    });
                    if queued.is_err() {
                        self.stream.failed(n);
                        window.release();
                    }
                }
                window.wait_all(WINDOW);
                connection.close()?;
            }
            Ok(())
        })
    }
}

/// A listening consumer, with what keeps it alive.
type Listening = (Connection, Arc<Session>, Consumer);

/// A consumer that counts into `stream`; `slow` sleeps on each message.
fn consumer(
    factory: &ConnectionFactory,
    destination: &Destination,
    stream: &Arc<Ledger>,
    delivered: &Arc<AtomicU64>,
    slow: Option<Duration>,
) -> Result<Listening> {
    let connection = factory.create_connection()?;
    let session = Arc::new(connection.create_session(AckMode::Client)?);
    let options = ConsumerOptions::default().prefetch(if slow.is_some() { 10 } else { 0 });
    let c = session.create_consumer_with(destination, options)?;
    let (s, d, acks) = (stream.clone(), delivered.clone(), session.clone());
    c.set_message_listener(move |m| {
        d.fetch_add(1, Ordering::Relaxed);
        s.received(&m);
        if let Some(pause) = slow {
            std::thread::sleep(pause);
        }
        if let Err(e) = acks.acknowledge() {
            eprintln!("soak: acknowledge failed: {e}");
        }
    })?;
    Ok((connection, session, c))
}

/// Short-lived workers, one every [`WORKER_EVERY`], on each queue in
/// turn: each takes a few messages, acknowledges all but the last, and
/// closes.
fn workers(
    factory: ConnectionFactory,
    queues: Vec<(Destination, Arc<Ledger>)>,
    delivered: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> JoinHandle<Result<()>> {
    std::thread::spawn(move || {
        let mut round = 0usize;
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(WORKER_EVERY);
            let (destination, stream) = &queues[round % queues.len()];
            round += 1;
            let connection = factory.create_connection()?;
            let session = connection.create_session(AckMode::Individual)?;
            let c = session
                .create_consumer_with(destination, ConsumerOptions::default().prefetch(5))?;
            let take = round % 7;
            for i in 0..take {
                let Some(m) = c.receive(Duration::from_millis(200))? else {
                    break;
                };
                delivered.fetch_add(1, Ordering::Relaxed);
                stream.received(&m);
                if i + 1 < take {
                    session.acknowledge_message(&m)?;
                }
            }
            connection.close()?;
        }
        Ok(())
    })
}

/// Resident bytes of the server: from its management API, or of this
/// process when the server is embedded; or why they cannot be read.
type Footprint<'a> = &'a dyn Fn() -> std::result::Result<u64, String>;

pub fn run(factory: &ConnectionFactory, plan: &Plan, footprint: Footprint<'_>) -> Result<()> {
    let base = bench_topic("soak");
    let (pq, q) = (
        Destination::queue(format!("{base}.pq")),
        Destination::queue(format!("{base}.q")),
    );
    let topics: Vec<Destination> = (0..4)
        .map(|i| Destination::topic(format!("{base}.t.{i}")))
        .collect();
    let (persistent, plain, topic) = (
        Ledger::new("persistent queue"),
        Ledger::new("queue"),
        Ledger::new("topic"),
    );
    let subscribers = [
        Ledger::new("topic subscriber 1"),
        Ledger::new("topic subscriber 2"),
    ];
    let delivered = Arc::new(AtomicU64::new(0));
    let published = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));

    let mut connections = vec![
        consumer(factory, &pq, &persistent, &delivered, None)?,
        consumer(
            factory,
            &pq,
            &persistent,
            &delivered,
            Some(Duration::from_millis(5)),
        )?,
        consumer(factory, &q, &plain, &delivered, None)?,
    ];
    let pattern = Destination::topic(format!("{base}.t.*"));
    for s in &subscribers {
        connections.push(consumer(factory, &pattern, s, &delivered, None)?);
    }
    // Each subscriber expects every topic message: they share its numbers.
    let third = (plan.rate / 3).max(1);
    let producers = [
        (vec![pq.clone()], persistent.clone(), true),
        (vec![q.clone()], plain.clone(), false),
        (topics, topic.clone(), false),
    ]
    .into_iter()
    .map(|(destinations, stream, persistent)| {
        Producer {
            destinations,
            stream,
            persistent,
            rate: third,
            size: plan.size,
        }
        .spawn(factory.clone(), stop.clone(), published.clone())
    })
    .collect::<Vec<_>>();
    let churn = workers(
        factory.clone(),
        vec![(pq.clone(), persistent.clone()), (q.clone(), plain.clone())],
        delivered.clone(),
        stop.clone(),
    );

    let every = (plan.duration / 20).clamp(Duration::from_secs(1), Duration::from_secs(30));
    println!(
        "soak: {} s at {} msgs/s ({} B), sampled every {} s",
        plan.duration.as_secs(),
        plan.rate,
        plan.size,
        every.as_secs()
    );
    if let Err(why) = footprint() {
        // Said once, up front: a soak is run for its memory figures too.
        eprintln!("soak: the server's resident memory is not measured: {why}");
    }
    println!(
        "{:>8} {:>12} {:>12} {:>10}",
        "seconds", "published/s", "delivered/s", "rss MB"
    );
    let started = Instant::now();
    let mut samples: Vec<(f64, f64, f64, Option<u64>)> = Vec::new();
    let (mut last_pub, mut last_del, mut last_at) = (0, 0, started);
    while started.elapsed() < plan.duration {
        std::thread::sleep(every.min(plan.duration.saturating_sub(started.elapsed())));
        let (p, d, now) = (
            published.load(Ordering::Relaxed),
            delivered.load(Ordering::Relaxed),
            Instant::now(),
        );
        let span = now.duration_since(last_at).as_secs_f64().max(1e-9);
        let sample = (
            now.duration_since(started).as_secs_f64(),
            (p - last_pub) as f64 / span,
            (d - last_del) as f64 / span,
            footprint().ok(),
        );
        (last_pub, last_del, last_at) = (p, d, now);
        let rss = sample
            .3
            .map_or("-".into(), |b| format!("{:.1}", b as f64 / 1e6));
        println!(
            "{:>8.0} {:>12.0} {:>12.0} {rss:>10}",
            sample.0, sample.1, sample.2
        );
        samples.push(sample);
    }
    stop.store(true, Ordering::Relaxed);
    for handle in producers.into_iter().chain([churn]) {
        handle
            .join()
            .map_err(|_| Error::InvalidArgument("a soak thread panicked".into()))??;
    }
    // Let the consumers finish what is queued.
    let mut quiet = (delivered.load(Ordering::Relaxed), Instant::now());
    while quiet.1.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(100));
        let d = delivered.load(Ordering::Relaxed);
        if d != quiet.0 {
            quiet = (d, Instant::now());
        }
    }
    for (c, ..) in connections {
        c.close()?;
    }
    for (destination, stream) in [(&pq, &persistent), (&q, &plain)] {
        stream.dead.store(
            drain(factory, &dead_letters(destination))?,
            Ordering::Relaxed,
        );
    }
    // The subscribers were each sent every topic message.
    for s in &subscribers {
        s.expect_as(&topic);
    }
    report(
        &[
            persistent,
            plain,
            subscribers[0].clone(),
            subscribers[1].clone(),
        ],
        &samples,
    );
    Ok(())
}

fn dead_letters(queue: &Destination) -> Destination {
    Destination::queue(format!("DLQ.{}", queue.name))
}

/// Consumes what waits in `queue`; returns how many.
fn drain(factory: &ConnectionFactory, queue: &Destination) -> Result<u64> {
    let connection = factory.create_connection()?;
    let session = connection.create_session(AckMode::Auto)?;
    let c = session.create_consumer(queue)?;
    let mut n = 0;
    while c.receive(Duration::from_millis(500))?.is_some() {
        n += 1;
    }
    connection.close()?;
    Ok(n)
}

fn report(streams: &[Arc<Ledger>], samples: &[(f64, f64, f64, Option<u64>)]) {
    let mut json = Vec::new();
    for s in streams {
        let t = s.tally();
        let (expected, delivered, lost, duplicates, unmarked) =
            (t.expected, t.delivered, t.lost, t.duplicates, t.unmarked);
        let dead = s.dead.load(Ordering::Relaxed);
        println!(
            "{}: expected {expected}, delivered {delivered}, lost {lost}, duplicates {duplicates} \
             ({unmarked} not marked redelivered), dead-lettered {dead}",
            s.name
        );
        json.push(format!(
            "{{\"stream\":\"{}\",\"expected\":{expected},\"delivered\":{delivered},\"lost\":{lost},\
             \"duplicates\":{duplicates},\"unmarked_duplicates\":{unmarked},\"dead_lettered\":{dead}}}",
            s.name
        ));
    }
    let rss: Vec<String> = samples
        .iter()
        .map(|(at, _, _, rss)| match rss {
            Some(rss) => format!("[{at:.0},{rss}]"),
            None => format!("[{at:.0},null]"),
        })
        .collect();
    // Memory levels off if the last quarter grew little over the second.
    let quarter = |i: usize| samples.get(i).and_then(|s| s.3);
    if let (Some(early), Some(late)) = (quarter(samples.len() / 4), quarter(samples.len() - 1)) {
        println!(
            "rss: {:.1} MB a quarter in, {:.1} MB at the end ({:+.1} %)",
            early as f64 / 1e6,
            late as f64 / 1e6,
            (late as f64 / early as f64 - 1.0) * 100.0
        );
    }
    println!(
        "{{\"scenario\":\"soak\",\"streams\":[{}],\"rss\":[{}]}}",
        json.join(","),
        rss.join(",")
    );
}
