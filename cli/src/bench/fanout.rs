//! `--mode fanout`: one topic with --connections / 10 and then
//! --connections subscriber connections, on a herald-server and a
//! nats-server that the bench starts, each in turn. For each: the time
//! until the last subscriber has a lone message (median and worst of
//! [`PROBES`]), deliveries per second through a burst of --count
//! deliveries (at least ten messages), and the server's
//! resident memory idle, with the subscribers, and after the burst.
//!
//! Tens of thousands of client threads would measure the bench, not the
//! server, so the subscribers are plain sockets on one `mio` poll thread:
//! each sends its protocol's connect and subscribe, waits for the server
//! to confirm, then only counts what arrives.

use std::io::{ErrorKind, Read};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use herald_client::{AckMode, ConnectionFactory, Destination, Error, Message, Result};
use herald_protocol::Decoder;

use super::process::{io, scratch, start_herald, wait_listening, Process};
use super::progress::Progress;
use super::raw::{Inbox, Raw, Wire};
use super::throughput::Sender;
use super::{bench_topic, median, nats, versus_nats};

/// Lone messages timed to the last subscriber.
const PROBES: usize = 15;

/// What one run is asked to do.
pub struct Plan<'a> {
    pub connections: usize,
    pub size: usize,
    /// Deliveries of one burst, whatever the number of subscribers.
    pub deliveries: u64,
    pub nats_server: &'a Path,
}

/// One subscriber's socket and what it has read but not yet parsed.
struct Subscriber {
    stream: mio::net::TcpStream,
    inbox: Inbox,
}

/// What the poll thread counts, for whoever waits on it.
#[derive(Default)]
struct Tally {
    delivered: AtomicU64,
    /// When the last message arrived.
    last: Mutex<Option<Instant>>,
    failed: Mutex<Option<String>>,
    stop: AtomicBool,
}

impl Tally {
    fn fail(&self, why: String) {
        self.failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(why);
    }

    /// Waits until `expected` deliveries, or none for three seconds; when
    /// the last one came. More than expected is an error.
    fn wait_for(&self, expected: u64) -> Result<Option<Instant>> {
        let mut seen = (self.delivered.load(Ordering::Relaxed), Instant::now());
        loop {
            if let Some(why) = self
                .failed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
            {
                return Err(Error::InvalidArgument(why));
            }
            let now = self.delivered.load(Ordering::Relaxed);
            if now > expected {
                // A delivery not sent, or sent twice: every figure after it
                // would time the wrong message.
                return Err(Error::InvalidArgument(format!(
                    "{now} deliveries where {expected} were due"
                )));
            }
            if now == expected {
                return Ok(*self.last.lock().unwrap_or_else(|p| p.into_inner()));
            }
            if now != seen.0 {
                seen = (now, Instant::now());
            } else if seen.1.elapsed() > Duration::from_secs(3) {
                return Err(Error::InvalidArgument(format!(
                    "{now} of {expected} deliveries, then nothing for 3 s"
                )));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// Connects `n` subscribers to `subject` and waits until the server has
/// confirmed every subscription.
fn connect(addr: SocketAddr, wire: Wire, subject: &str, n: usize) -> Result<Vec<Subscriber>> {
    let mut subscribe = BytesMut::new();
    wire.subscribe(1, subject, "", &mut subscribe)?;
    wire.barrier(&mut subscribe);
    let mut subs = Vec::with_capacity(n);
    let mut progress = Progress::new("subscribing", n as u64);
    for i in 0..n {
        let mut raw = Raw::open(addr, wire)?;
        raw.send(&subscribe)?;
        raw.await_confirmed(1)?;
        raw.stream
            .set_nonblocking(true)
            .map_err(io("a subscriber"))?;
        subs.push(Subscriber {
            stream: mio::net::TcpStream::from_std(raw.stream),
            inbox: raw.inbox,
        });
        if i % 512 == 0 {
            progress.update(i as u64);
        }
    }
    progress.finish();
    Ok(subs)
}

/// Reads every subscriber until told to stop, counting into `tally`.
fn poll(mut subs: Vec<Subscriber>, wire: Wire, tally: &Tally) -> Result<()> {
    let mut poll = mio::Poll::new().map_err(io("a poll"))?;
    for (i, sub) in subs.iter_mut().enumerate() {
        poll.registry()
            .register(&mut sub.stream, mio::Token(i), mio::Interest::READABLE)
            .map_err(io("registering a subscriber"))?;
    }
    let decoder = Decoder::new(4 << 20);
    let mut events = mio::Events::with_capacity(1024);
    let mut chunk = vec![0u8; 256 * 1024];
    while !tally.stop.load(Ordering::Relaxed) {
        poll.poll(&mut events, Some(Duration::from_millis(50)))
            .map_err(io("polling"))?;
        for event in &events {
            let Some(sub) = subs.get_mut(event.token().0) else {
                continue;
            };
            let mut messages = 0;
            loop {
                match sub.stream.read(&mut chunk) {
                    Ok(0) => {
                        tally.fail("the server closed a subscriber".into());
                        break;
                    }
                    Ok(n) => sub.inbox.buf.extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => {
                        tally.fail(format!("a subscriber: {e}"));
                        break;
                    }
                }
                match sub.inbox.parse(wire, &decoder, &mut sub.stream) {
                    Ok(parsed) => messages += parsed.messages,
                    Err(why) => tally.fail(why),
                }
            }
            if messages > 0 {
                *tally.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
                tally.delivered.fetch_add(messages, Ordering::Relaxed);
            }
        }
    }
    Ok(())
}

/// What one system measured with one number of subscribers.
struct Row {
    subscribers: usize,
    /// Milliseconds until the last subscriber had a lone message.
    last_median_ms: f64,
    last_worst_ms: f64,
    deliveries_per_sec: f64,
    rss_idle: u64,
    rss_subscribed: u64,
    rss_after: u64,
}

/// Runs the scenarios on one server: subscribers through `wire`, the
/// publisher through `sender`.
fn measure(
    server: &Process,
    wire: Wire,
    (subscribers, size, deliveries): (usize, usize, u64),
    subject: &str,
    sender: &mut dyn Sender,
) -> Result<Row> {
    let rss_idle = server.rss()?;
    let subs = connect(server.addr, wire, subject, subscribers)?;
    let tally = Tally::default();
    std::thread::scope(|scope| -> Result<Row> {
        let poller = scope.spawn(|| poll(subs, wire, &tally));
        let result = (|| {
            std::thread::sleep(Duration::from_millis(300));
            let rss_subscribed = server.rss()?;
            let n = subscribers as u64;
            let mut body = vec![0u8; size];
            let mut sent = 0u64;
            let mut lasts = Vec::new();
            for _ in 0..PROBES {
                body[..8].copy_from_slice(&sent.to_be_bytes());
                let began = Instant::now();
                sender.send(&body)?;
                sender.drain()?;
                sent += 1;
                let last = tally.wait_for(sent * n)?.unwrap_or(began);
                lasts.push(last.duration_since(began).as_secs_f64() * 1e3);
                std::thread::sleep(Duration::from_millis(20));
            }
            let burst = (deliveries / n).max(10);
            let began = Instant::now();
            for _ in 0..burst {
                body[..8].copy_from_slice(&sent.to_be_bytes());
                sender.send(&body)?;
                sent += 1;
            }
            sender.drain()?;
            let last = tally.wait_for(sent * n)?.unwrap_or(began);
            let seconds = last.duration_since(began).as_secs_f64().max(1e-9);
            std::thread::sleep(Duration::from_millis(300));
            let worst = lasts.iter().copied().fold(0.0, f64::max);
            Ok(Row {
                subscribers,
                last_median_ms: median(lasts),
                last_worst_ms: worst,
                deliveries_per_sec: (burst * n) as f64 / seconds,
                rss_idle,
                rss_subscribed,
                rss_after: server.rss()?,
            })
        })();
        tally.stop.store(true, Ordering::Relaxed);
        poller
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))?;
        result
    })
}

/// A Herald producer and its connection as a [`Sender`].
struct HeraldSender<'a>(herald_client::Producer, &'a herald_client::Connection);

impl Sender for HeraldSender<'_> {
    fn send(&mut self, body: &[u8]) -> Result<()> {
        self.0
            .send(Message::bytes(bytes::Bytes::copy_from_slice(body)).non_persistent())
    }

    fn drain(&mut self) -> Result<()> {
        // PONG comes after everything sent before PING was routed, as with
        // NATS; a message would reach the subscribers and be counted.
        self.1.ping()
    }
}

/// nats-server on an ephemeral port, started here.
pub(super) fn start_nats(bin: &Path) -> Result<Process> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(io("a free port"))?
        .port();
    let child = Command::new(bin)
        .args(["-a", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| {
            Error::InvalidArgument(format!("{}: {e} (or --nats-server PATH)", bin.display()))
        })?;
    let process = Process {
        name: "nats",
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        dir: scratch("nats")?,
    };
    wait_listening(&process, Duration::from_secs(10))?;
    Ok(process)
}

/// Both servers, both numbers of subscribers; prints the table.
pub fn run(plan: &Plan) -> Result<()> {
    let counts = [(plan.connections / 10).max(1), plan.connections];
    let mut rows = Vec::new();
    for subscribers in counts {
        let (herald, _) = start_herald("fanout", &["herald-server listening on "])?;
        let subject = bench_topic("fanout");
        let factory = ConnectionFactory::new(&format!("herald://{}", herald.addr))?;
        let connection = factory.create_connection()?;
        let producer = connection
            .create_session(AckMode::Auto)?
            .create_producer(&Destination::topic(subject.clone()))?;
        let h = measure(
            &herald,
            Wire::Herald,
            (subscribers, plan.size, plan.deliveries),
            &subject,
            &mut HeraldSender(producer, &connection),
        )?;
        connection.close()?;
        drop(herald);
        let nats = start_nats(plan.nats_server)?;
        let subject = bench_topic("fanout");
        let mut sender = nats::sender(nats.addr, &subject)?;
        let n = measure(
            &nats,
            Wire::Nats,
            (subscribers, plan.size, plan.deliveries),
            &subject,
            &mut sender,
        )?;
        drop(nats);
        rows.push((h, n));
    }
    let mb = |b: u64| b as f64 / 1e6;
    let mut lines = Vec::new();
    for (h, n) in &rows {
        let s = h.subscribers;
        lines.extend([
            (
                format!("{s} subs: deliveries/s"),
                h.deliveries_per_sec,
                n.deliveries_per_sec,
                true,
            ),
            (
                format!("{s} subs: to the last, median ms"),
                h.last_median_ms,
                n.last_median_ms,
                false,
            ),
            (
                format!("{s} subs: to the last, worst ms"),
                h.last_worst_ms,
                n.last_worst_ms,
                false,
            ),
            (
                format!("{s} subs: RSS idle MB"),
                mb(h.rss_idle),
                mb(n.rss_idle),
                false,
            ),
            (
                format!("{s} subs: RSS subscribed MB"),
                mb(h.rss_subscribed),
                mb(n.rss_subscribed),
                false,
            ),
            (
                format!("{s} subs: RSS after the burst MB"),
                mb(h.rss_after),
                mb(n.rss_after),
                false,
            ),
        ]);
    }
    let json = versus_nats(lines);
    println!("{{\"scenario\":\"fanout\",\"rows\":[{json}]}}");
    Ok(())
}
