//! `herald drill`: the counting side of a cluster fault drill
//! (`scripts/cluster-drill.sh` makes the faults).
//!
//! On each node, a producer sends numbered persistent messages with
//! receipts to a queue, and another to a topic; a consumer on each node
//! competes for the queue (CLIENT acknowledgements of every tenth message
//! on the first, AUTO on the second), and a durable subscriber (CLIENT,
//! every tenth), on the first node, takes the topic. Every client fails
//! over to the other nodes when its own goes away. While it runs, the
//! fault maker appends a line to the faults file for each fault as soon
//! as it has made it: `<unix ms> <what>`.
//!
//! At the end it waits for what is still coming, then prints, for the
//! queue and for the durable subscriber: sent, receipted, delivered; lost
//! (receipted, never delivered); duplicates, whether each was marked
//! redelivered and whether any came before the first fault; and for each
//! fault how long until the first message sent after it was receipted, by
//! any producer and by every producer. It fails unless nothing was lost
//! and every duplicate was marked and came after a fault.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use herald_client::{
    AckMode, Connection, ConnectionFactory, Consumer, ConsumerOptions, Destination, Error, Message,
    Result, Session,
};

use super::ledger::{lock, Ledger, Tally};
use super::parse_duration;
use super::queue::Window;
use crate::target::Target;

/// What `herald drill` is asked to do.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The nodes' native listeners, `host:port`, comma-separated: clients
    /// start on each in turn and fail over to the others.
    #[arg(long, value_delimiter = ',', required = true)]
    nodes: Vec<String>,
    /// How long the producers send: seconds, or with a unit (90s, 10m).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    duration: Duration,
    /// Messages a second each producer sends.
    #[arg(long, default_value_t = 500)]
    rate: u64,
    /// Sends waiting for their receipt, per producer.
    #[arg(long, default_value_t = 32)]
    window: usize,
    /// Body bytes.
    #[arg(long, default_value_t = 128)]
    size: usize,
    /// The faults file: `<unix ms> <what>` a line, appended as the faults
    /// are made.
    #[arg(long)]
    faults: Option<PathBuf>,
    /// At the end, how long to wait with no new delivery before what has
    /// not arrived counts as lost.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    settle: Duration,
    /// The queue and topic's name (a fresh one for each drill on a
    /// cluster that keeps its streams).
    #[arg(long, default_value = "drill")]
    name: String,
}

/// One send's times, in unix milliseconds.
#[derive(Clone, Copy)]
struct Sent {
    at: u64,
    receipted: u64,
}

/// Numbered persistent sends to one destination through one node, with a
/// window of receipts, paced at `rate`.
struct Producer {
    factory: ConnectionFactory,
    destination: Destination,
    ledger: Arc<Ledger>,
    rate: u64,
    window: usize,
    body: Bytes,
    /// Each receipted send, in the order the receipts came.
    receipts: Arc<Mutex<Vec<Sent>>>,
}

impl Producer {
    fn spawn(self, stop: Arc<AtomicBool>) -> JoinHandle<Result<()>> {
        std::thread::spawn(move || {
            let connection = self.factory.create_connection()?;
            let session = connection.create_session(AckMode::Auto)?;
            let producer = session.create_producer(&self.destination)?;
            let window = Arc::new(Window::new(self.window));
            let every = Duration::from_secs_f64(1.0 / self.rate.max(1) as f64);
            let mut next = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                // Paced; after a stall it goes on at the pace rather than
                // catching up in one burst.
                let now = Instant::now();
                match next.checked_duration_since(now) {
                    Some(wait) => std::thread::sleep(wait),
                    None if now - next > Duration::from_secs(1) => next = now,
                    None => {}
                }
                next += every;
                let n = self.ledger.issue();
                let message = Message::bytes(self.body.clone())
                    .with_property("n", n as i64)
                    .persistent();
                window.acquire();
                let (w, ledger, receipts) =
                    (window.clone(), self.ledger.clone(), self.receipts.clone());
                let at = unix_ms(SystemTime::now());
                let queued = producer.send_async(message, move |result| {
                    match result {
                        Ok(()) => lock(&receipts).push(Sent {
                            at,
                            receipted: unix_ms(SystemTime::now()),
                        }),
                        Err(_) => ledger.failed(n),
                    }
                    w.release();
                });
                if queued.is_err() {
                    self.ledger.failed(n);
                    window.release();
                }
            }
            window.wait_all(self.window);
            connection.close()
        })
    }
}

/// A listening consumer, with what keeps it alive.
type Listening = (Connection, Arc<Session>, Consumer);

/// A consumer counting into `ledger`; with CLIENT acknowledgements it
/// acknowledges every tenth message (and those before it), so that its
/// node always holds some unacknowledged when it is killed.
fn consume(
    factory: &ConnectionFactory,
    destination: &Destination,
    options: ConsumerOptions,
    mode: AckMode,
    ledger: &Arc<Ledger>,
    delivered: &Arc<AtomicU64>,
) -> Result<Listening> {
    let connection = factory.create_connection()?;
    let session = Arc::new(connection.create_session(mode)?);
    let consumer = session.create_consumer_with(destination, options)?;
    let (ledger, delivered, acks) = (ledger.clone(), delivered.clone(), session.clone());
    let mut taken = 0u64;
    consumer.set_message_listener(move |m| {
        ledger.received(&m);
        delivered.fetch_add(1, Ordering::Relaxed);
        taken += 1;
        if mode == AckMode::Client && taken.is_multiple_of(10) {
            if let Err(e) = acks.acknowledge() {
                eprintln!("drill: an acknowledgement failed: {e}");
            }
        }
    })?;
    Ok((connection, session, consumer))
}

/// Connections that start on node `first` and fail over to the others,
/// for as long as the drill lasts.
fn factory(target: &Target, nodes: &[String], first: usize) -> Result<ConnectionFactory> {
    let order: Vec<&str> = (0..nodes.len())
        .map(|i| nodes[(first + i) % nodes.len()].as_str())
        .collect();
    let factory = ConnectionFactory::new(&format!("herald://{}", order.join(",")))?
        .with_reconnect(u32::MAX, Duration::from_millis(50))
        .with_request_timeout(Duration::from_secs(10));
    Ok(match &target.user {
        Some(user) => {
            factory.with_credentials(user.clone(), target.password.clone().unwrap_or_default())
        }
        None => factory,
    })
}

pub fn run(target: &Target, args: Args) -> Result<()> {
    if args.nodes.is_empty() || args.rate == 0 || args.window == 0 {
        return Err(Error::InvalidArgument(
            "a drill needs --nodes, and --rate and --window above 0".into(),
        ));
    }
    let queue = Destination::queue(format!("{}.queue", args.name));
    let topic = Destination::topic(format!("{}.topic", args.name));
    let (queued, subscribed) = (Ledger::new("queue"), Ledger::new("durable subscriber"));
    let delivered = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let factories = (0..args.nodes.len())
        .map(|i| factory(target, &args.nodes, i))
        .collect::<Result<Vec<_>>>()?;

    let durable = factories[0]
        .clone()
        .with_client_id(format!("{}-durable", args.name));
    let mut listening = vec![consume(
        &durable,
        &topic,
        ConsumerOptions::default().durable(&args.name),
        AckMode::Client,
        &subscribed,
        &delivered,
    )?];
    for (i, f) in factories.iter().enumerate() {
        let mode = [AckMode::Client, AckMode::Auto][i % 2];
        let options = ConsumerOptions::default();
        listening.push(consume(f, &queue, options, mode, &queued, &delivered)?);
    }

    let mut receipts: Vec<Arc<Mutex<Vec<Sent>>>> = Vec::new();
    let mut producers = Vec::new();
    for f in &factories {
        for (destination, ledger) in [(&queue, &queued), (&topic, &subscribed)] {
            let sent = Arc::new(Mutex::new(Vec::new()));
            receipts.push(sent.clone());
            let producer = Producer {
                factory: f.clone(),
                destination: destination.clone(),
                ledger: ledger.clone(),
                rate: args.rate,
                window: args.window,
                body: Bytes::from(vec![b'd'; args.size]),
                receipts: sent,
            };
            producers.push(producer.spawn(stop.clone()));
        }
    }
    let started = SystemTime::now();
    println!(
        "drill: {} producers at {} msgs/s each for {} s, through {}",
        producers.len(),
        args.rate,
        args.duration.as_secs(),
        args.nodes.join(", ")
    );
    println!(
        "{:>8} {:>12} {:>12} {:>12}",
        "seconds", "receipted", "failed", "delivered"
    );
    let begun = Instant::now();
    let mut seconds = 0u64;
    while begun.elapsed() < args.duration {
        std::thread::sleep(Duration::from_secs(1).min(args.duration - begun.elapsed()));
        seconds += 1;
        if seconds.is_multiple_of(5) {
            progress(begun, &receipts, &[&queued, &subscribed], &delivered);
        }
    }
    stop.store(true, Ordering::Relaxed);
    for handle in producers {
        handle
            .join()
            .map_err(|_| Error::InvalidArgument("a producer thread panicked".into()))??;
    }
    // What was receipted may still be coming: claimed after a dead node's
    // hold lapses, or read again after a failover.
    let mut last = (delivered.load(Ordering::Relaxed), Instant::now());
    while !(queued.complete() && subscribed.complete()) && last.1.elapsed() < args.settle {
        std::thread::sleep(Duration::from_millis(200));
        let d = delivered.load(Ordering::Relaxed);
        if d != last.0 {
            last = (d, Instant::now());
        }
    }
    progress(begun, &receipts, &[&queued, &subscribed], &delivered);
    for (connection, ..) in listening {
        connection.close()?;
    }
    let faults = match &args.faults {
        Some(path) => read_faults(path)?,
        None => Vec::new(),
    };
    report(started, &[queued, subscribed], &faults, &receipts)
}

fn progress(
    begun: Instant,
    receipts: &[Arc<Mutex<Vec<Sent>>>],
    ledgers: &[&Arc<Ledger>],
    delivered: &AtomicU64,
) {
    let receipted: usize = receipts.iter().map(|r| lock(r).len()).sum();
    let failed: u64 = ledgers
        .iter()
        .map(|l| {
            let t = l.tally();
            t.issued - t.expected
        })
        .sum();
    println!(
        "{:>8} {:>12} {:>12} {:>12}",
        begun.elapsed().as_secs(),
        receipted,
        failed,
        delivered.load(Ordering::Relaxed)
    );
}

/// A fault: when it was made, and what it was.
struct Fault {
    at: u64,
    what: String,
}

fn read_faults(path: &PathBuf) -> Result<Vec<Fault>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::InvalidArgument(format!(
            "cannot read the faults file {}: {e}",
            path.display()
        ))
    })?;
    let mut faults = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (at, what) = line.split_once(' ').unwrap_or((line, ""));
        let at = at.parse().map_err(|_| {
            Error::InvalidArgument(format!(
                "{}: \"{line}\" does not start with unix milliseconds",
                path.display()
            ))
        })?;
        faults.push(Fault {
            at,
            what: what.trim().to_owned(),
        });
    }
    faults.sort_by_key(|f| f.at);
    Ok(faults)
}

/// For one producer: how long after `at` the first message it sent from
/// then on was receipted.
fn recovered_after(sends: &[Sent], at: u64) -> Option<u64> {
    sends
        .iter()
        .filter(|s| s.at >= at)
        .map(|s| s.receipted)
        .min()
        .map(|r| r - at)
}

fn report(
    started: SystemTime,
    ledgers: &[Arc<Ledger>],
    faults: &[Fault],
    receipts: &[Arc<Mutex<Vec<Sent>>>],
) -> Result<()> {
    let start = unix_ms(started);
    let first_fault = faults.first().map(|f| f.at);
    let mut failures = Vec::new();
    let mut json = Vec::new();
    for ledger in ledgers {
        let Tally {
            issued,
            expected,
            delivered,
            lost,
            duplicates,
            unmarked,
        } = ledger.tally();
        let early = ledger
            .first_duplicate()
            .map(unix_ms)
            .is_some_and(|d| first_fault.is_none_or(|f| d < f));
        println!(
            "{}: sent {issued}, receipted {expected}, delivered {delivered}, lost {lost}, \
             duplicates {duplicates} ({unmarked} not marked redelivered{})",
            ledger.name,
            if early {
                ", some before the first fault"
            } else {
                ""
            }
        );
        if lost > 0 {
            failures.push(format!(
                "{}: {lost} receipted messages lost (numbers {:?}{})",
                ledger.name,
                ledger.missing(10),
                if lost > 10 { " ..." } else { "" }
            ));
        }
        if unmarked > 0 {
            failures.push(format!(
                "{}: {unmarked} duplicates not marked redelivered",
                ledger.name
            ));
        }
        if early {
            failures.push(format!("{}: a duplicate before any fault", ledger.name));
        }
        json.push(format!(
            "{{\"receiver\":\"{}\",\"sent\":{issued},\"receipted\":{expected},\"delivered\":{delivered},\
             \"lost\":{lost},\"duplicates\":{duplicates},\"unmarked\":{unmarked},\"early\":{early}}}",
            ledger.name
        ));
    }
    let mut recoveries = Vec::new();
    for fault in faults {
        let sends: Vec<Vec<Sent>> = receipts.iter().map(|r| lock(r).clone()).collect();
        let each: Vec<Option<u64>> = sends.iter().map(|s| recovered_after(s, fault.at)).collect();
        let first = each.iter().flatten().min().copied();
        let every = match each.iter().all(Option::is_some) {
            true => each.iter().flatten().max().copied(),
            false => None,
        };
        let ms = |v: Option<u64>| v.map_or("never".to_owned(), |v| format!("{v} ms"));
        println!(
            "fault at +{:.1} s, {}: first receipt after {}, every producer receipting after {}",
            fault.at.saturating_sub(start) as f64 / 1000.0,
            fault.what,
            ms(first),
            ms(every)
        );
        let js = |v: Option<u64>| v.map_or("null".to_owned(), |v| v.to_string());
        recoveries.push(format!(
            "{{\"fault\":\"{}\",\"first_receipt_ms\":{},\"every_producer_ms\":{}}}",
            fault.what.replace(['"', '\\'], "'"),
            js(first),
            js(every)
        ));
    }
    println!(
        "{{\"scenario\":\"drill\",\"receivers\":[{}],\"faults\":[{}]}}",
        json.join(","),
        recoveries.join(",")
    );
    match failures.is_empty() {
        true => {
            println!("drill passed: nothing receipted was lost, every duplicate was marked and came after a fault");
            Ok(())
        }
        false => Err(Error::InvalidArgument(format!(
            "the drill failed: {}",
            failures.join("; ")
        ))),
    }
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_faults_file_is_read_in_time_order_and_garbage_is_named() {
        let dir = std::env::temp_dir().join(format!("herald-drill-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("faults");
        std::fs::write(&path, "200 kill b\n\n100 kill a\n").unwrap();
        let faults = read_faults(&path).unwrap();
        let read: Vec<(u64, &str)> = faults.iter().map(|f| (f.at, f.what.as_str())).collect();
        assert_eq!(read, [(100, "kill a"), (200, "kill b")]);
        std::fs::write(&path, "soon kill a\n").unwrap();
        let e = read_faults(&path).err().unwrap().to_string();
        assert!(e.contains("soon kill a"), "{e}");
        let e = read_faults(&dir.join("none")).err().unwrap().to_string();
        assert!(e.contains("cannot read the faults file"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn recovery_is_the_first_receipt_of_a_message_sent_after_the_fault() {
        let sends = [
            // Sent before the fault, receipted after it: not a recovery.
            Sent {
                at: 90,
                receipted: 101,
            },
            Sent {
                at: 100,
                receipted: 900,
            },
            Sent {
                at: 400,
                receipted: 700,
            },
        ];
        assert_eq!(recovered_after(&sends, 100), Some(600));
        assert_eq!(recovered_after(&sends, 500), None);
    }
}
