//! Queues: N producers → M competing consumers, persistent or not.
//!
//! Consumers acknowledge every message (AUTO), or with `ack_every` in
//! CLIENT mode, every that many at once (with twice as many prefetched, so
//! a batch is never waiting for credit). Persistent producers keep a
//! window of asynchronous sends in flight, each completed by its RECEIPT
//! once the journal has it, so the journal's group commit has company;
//! every receipt is counted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use bytes::Bytes;
use herald_client::{AckMode, ConnectionFactory, ConsumerOptions, Destination, Message, Result};

use super::progress::Progress;
use super::{bench_topic, wait_for};

/// What one run is asked to do.
#[derive(Clone)]
pub struct Plan {
    pub producers: usize,
    pub consumers: usize,
    /// Queues the producers and consumers are dealt over, in turn.
    pub queues: usize,
    pub size: usize,
    pub count: u64,
    pub persistent: bool,
    /// Persistent sends in flight per producer.
    pub window: usize,
    /// 0: AUTO acknowledgements; otherwise CLIENT, every this many.
    pub ack_every: u32,
    /// Messages go in this many JMSXGroupID groups, in turn; 0 = none.
    pub groups: usize,
    /// Messages carry a property as long as a group's that puts them in
    /// no group: a plain queue's baseline for a grouped one, so that the
    /// two differ in what the server does only.
    pub tagged: usize,
    /// Each consumer has a priority of its own (the first the highest).
    pub priorities: bool,
    /// The queue is named under `bench.paged.`, which the embedded server
    /// pages past 1 MiB (a server of one's own needs that
    /// `[[addresses]]` entry).
    pub paged: bool,
    /// The producers fill the queue before the consumers start: the rate
    /// in, then the rate out, of a queue that holds all of it.
    pub fill_first: bool,
}

/// A counting gate for in-flight sends.
pub struct Window {
    free: Mutex<usize>,
    freed: Condvar,
}

impl Window {
    /// A window of `size` sends.
    pub fn new(size: usize) -> Window {
        Window {
            free: Mutex::new(size),
            freed: Condvar::new(),
        }
    }

    /// Waits for room for one more send.
    pub fn acquire(&self) {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        while *free == 0 {
            free = self.freed.wait(free).unwrap_or_else(|p| p.into_inner());
        }
        *free -= 1;
    }

    /// One send is answered.
    pub fn release(&self) {
        *self.free.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        self.freed.notify_one();
    }

    /// Waits until all `size` sends are answered.
    pub fn wait_all(&self, size: usize) {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        while *free < size {
            free = self.freed.wait(free).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Runs `plan` with the producers on `factory` and the consumers on
/// `consumers_at` (another node of a cluster, or the same); returns the
/// messages consumed per second.
pub fn run(
    factory: &ConnectionFactory,
    consumers_at: &ConnectionFactory,
    plan: &Plan,
) -> Result<f64> {
    let base = bench_topic(if plan.paged { "paged" } else { "queue" });
    let destinations: Vec<Destination> = match plan.queues {
        0 | 1 => vec![Destination::queue(base)],
        n => (0..n)
            .map(|i| Destination::queue(format!("{base}.{i}")))
            .collect(),
    };
    let received = Arc::new(AtomicU64::new(0));
    let last = Arc::new(Mutex::new(None::<Instant>));
    let attach = || attach(consumers_at, plan, &destinations, (&received, &last));
    let mut consumers = match plan.fill_first {
        true => Vec::new(),
        false => attach()?,
    };
    let receipted = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut started = Instant::now();
    let per = plan.count / plan.producers as u64;
    let mut threads: Vec<_> = (0..plan.producers)
        .map(|p| {
            let n = if p == 0 {
                plan.count - per * (plan.producers as u64 - 1)
            } else {
                per
            };
            let destination = destinations[p % destinations.len()].clone();
            let factory = factory.clone();
            let (receipted, failed) = (receipted.clone(), failed.clone());
            let (size, persistent, window) = (plan.size, plan.persistent, plan.window);
            // Group names made once: the send loop only clones them.
            let (property, tags) = match plan.groups {
                0 => ("XJMSGroupID", plan.tagged),
                n => ("JMSXGroupID", n),
            };
            let groups: Vec<herald_client::Value> = (0..tags)
                .map(|g| herald_client::Value::from(format!("g{g}")))
                .collect();
            std::thread::spawn(move || -> Result<()> {
                let connection = factory.create_connection()?;
                let session = connection.create_session(AckMode::Auto)?;
                let producer = session.create_producer(&destination)?;
                let gate = Arc::new(Window::new(window));
                let body = Bytes::from(vec![7u8; size]);
                for i in 0..n as usize {
                    let mut message = Message::bytes(body.clone());
                    if !groups.is_empty() {
                        message.set_property(property, groups[i % groups.len()].clone());
                    }
                    if !persistent {
                        producer.send(message.non_persistent())?;
                        continue;
                    }
                    gate.acquire();
                    let (g, r, f) = (gate.clone(), receipted.clone(), failed.clone());
                    producer.send_async(message.persistent(), move |result| {
                        match result {
                            Ok(()) => r.fetch_add(1, Ordering::Relaxed),
                            Err(_) => f.fetch_add(1, Ordering::Relaxed),
                        };
                        g.release();
                    })?;
                }
                gate.wait_all(window);
                connection.close()
            })
        })
        .collect();
    if plan.fill_first {
        for t in std::mem::take(&mut threads) {
            t.join().map_err(|_| {
                herald_client::Error::InvalidArgument("a producer thread panicked".into())
            })??;
        }
        let seconds = started.elapsed().as_secs_f64();
        println!(
            "queue filled: {} messages in {seconds:.3} s: {:.0} msgs/s in",
            plan.count,
            plan.count as f64 / seconds
        );
        started = Instant::now();
        consumers = attach()?;
    }
    let mut progress = Progress::new("queue", plan.count);
    let got = wait_for(plan.count, &mut progress, || {
        received.load(Ordering::Relaxed)
    });
    progress.finish();
    for t in threads {
        match t.join() {
            Ok(result) => result?,
            Err(_) => {
                return Err(herald_client::Error::InvalidArgument(
                    "a producer thread panicked".into(),
                ))
            }
        }
    }
    let last = *last.lock().unwrap_or_else(|p| p.into_inner());
    let (seconds, rate) = super::rate(started, last, got);
    let lost = plan.count - got.min(plan.count);
    let (receipted, failed) = (
        receipted.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
    );
    let kind = if plan.persistent {
        "persistent"
    } else {
        "non-persistent"
    };
    println!(
        "queue {} -> {} over {} queue(s), {kind}, {} B, ack {}: {got} of {} consumed in {seconds:.3} s: {rate:.0} msgs/s; \
         receipted {receipted}, failed {failed}, lost {lost}",
        plan.producers,
        plan.consumers,
        destinations.len(),
        plan.size,
        match plan.ack_every {
            0 => "auto".to_owned(),
            n => format!("client every {n}"),
        },
        plan.count
    );
    println!(
        "{{\"scenario\":\"queue\",\"producers\":{},\"consumers\":{},\"persistent\":{},\"ack_every\":{},\"size\":{},\"count\":{},\
         \"consumed\":{got},\"receipted\":{receipted},\"failed\":{failed},\"lost\":{lost},\"seconds\":{seconds:.6},\
         \"msgs_per_sec\":{rate:.0}}}",
        plan.producers,
        plan.consumers,
        plan.persistent,
        plan.ack_every,
        plan.size,
        plan.count
    );
    for (connection, _, _) in consumers {
        connection.close()?;
    }
    Ok(rate)
}

/// The consumers of `plan` on `destinations`, counting into `received`
/// and noting when the last message came.
#[allow(clippy::type_complexity)]
fn attach(
    consumers_at: &ConnectionFactory,
    plan: &Plan,
    destinations: &[Destination],
    (received, last): (&Arc<AtomicU64>, &Arc<Mutex<Option<Instant>>>),
) -> Result<
    Vec<(
        herald_client::Connection,
        Arc<herald_client::Session>,
        herald_client::Consumer,
    )>,
> {
    let mut consumers = Vec::new();
    for c in 0..plan.consumers {
        let destination = &destinations[c % destinations.len()];
        let connection = consumers_at.create_connection()?;
        let every = plan.ack_every;
        let mode = if every == 0 {
            AckMode::Auto
        } else {
            AckMode::Client
        };
        let session = Arc::new(connection.create_session(mode)?);
        let mut options = ConsumerOptions::default().prefetch(every.saturating_mul(2));
        if plan.priorities {
            options = options.priority(-(c as i32));
        }
        let consumer = session.create_consumer_with(destination, options)?;
        let (r, l, s) = (received.clone(), last.clone(), session.clone());
        let mut unacked = 0;
        consumer.set_message_listener(move |_| {
            r.fetch_add(1, Ordering::Relaxed);
            *l.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
            unacked += 1;
            if every != 0 && unacked == every {
                unacked = 0;
                if let Err(e) = s.acknowledge() {
                    eprintln!("acknowledge failed: {e}");
                }
            }
        })?;
        consumers.push((connection, session, consumer));
    }
    Ok(consumers)
}
