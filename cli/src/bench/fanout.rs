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

use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use herald_client::{AckMode, ConnectionFactory, Destination, Error, Message, Result};
use herald_protocol::frame::{Connect, Subscribe};
use herald_protocol::{Decoder, DestinationKind, Frame, FrameKind};

use super::process::{io, scratch, start_herald, wait_listening, Process};
use super::progress::Progress;
use super::throughput::Sender;
use super::{bench_topic, median, nats};

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

/// The two wire protocols the subscribers speak.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wire {
    Herald,
    Nats,
}

/// The subscribe request's id, confirmed by a RECEIPT.
const SUBSCRIBE_REQUEST: u32 = 2;

impl Wire {
    /// What a subscriber sends when it connects.
    fn hello(self, subject: &str) -> Result<Vec<u8>> {
        match self {
            Wire::Nats => Ok(format!(
                "CONNECT {{\"verbose\":false,\"pedantic\":false}}\r\nSUB {subject} 1\r\nPING\r\n"
            )
            .into_bytes()),
            Wire::Herald => {
                let mut b = BytesMut::new();
                let connect = Frame::Connect(Connect {
                    client_id: String::new(),
                    user: String::new(),
                    password: String::new(),
                    heartbeat_ms: 0,
                });
                let subscribe =
                    Frame::Subscribe(Subscribe::new(1, DestinationKind::Topic, subject));
                let bad = |e: herald_protocol::Error| Error::InvalidArgument(e.to_string());
                connect.encode(1, &mut b).map_err(bad)?;
                subscribe.encode(SUBSCRIBE_REQUEST, &mut b).map_err(bad)?;
                Ok(b.to_vec())
            }
        }
    }
}

/// One subscriber's socket and what it has read but not yet parsed.
struct Subscriber {
    stream: mio::net::TcpStream,
    buf: BytesMut,
    /// The server confirmed the subscription.
    ready: bool,
}

impl Subscriber {
    /// Takes the whole frames or lines off the buffer; returns the
    /// messages among them. `Err` on what the protocol does not allow.
    fn parse(&mut self, wire: Wire, decoder: &Decoder) -> std::result::Result<u64, String> {
        let mut messages = 0;
        match wire {
            Wire::Herald => {
                while let Some(raw) = decoder
                    .decode(&mut self.buf)
                    .map_err(|e| e.error.to_string())?
                {
                    match raw.header.kind {
                        FrameKind::Message => messages += 1,
                        FrameKind::Receipt if raw.header.request_id == SUBSCRIBE_REQUEST => {
                            self.ready = true
                        }
                        FrameKind::Error => return Err("the server sent ERROR".into()),
                        _ => {}
                    }
                }
            }
            Wire::Nats => {
                while let Some(end) = self.buf.windows(2).position(|w| w == b"\r\n") {
                    let line = &self.buf[..end];
                    if let Some(rest) = line.strip_prefix(b"MSG ") {
                        let size: usize = std::str::from_utf8(rest)
                            .ok()
                            .and_then(|r| r.rsplit(' ').next())
                            .and_then(|s| s.parse().ok())
                            .ok_or("a MSG line without a size")?;
                        if self.buf.len() < end + 2 + size + 2 {
                            break;
                        }
                        self.buf.advance(end + 2 + size + 2);
                        messages += 1;
                        continue;
                    }
                    match line {
                        b"PONG" => self.ready = true,
                        // NATS's keep-alive; the answer is best effort.
                        b"PING" => drop(self.stream.write(b"PONG\r\n")),
                        l if l.starts_with(b"-ERR") => {
                            return Err(String::from_utf8_lossy(l).into_owned())
                        }
                        _ => {}
                    }
                    self.buf.advance(end + 2);
                }
            }
        }
        Ok(messages)
    }
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
    /// the last one came.
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
            if now >= expected {
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
    let hello = wire.hello(subject)?;
    let decoder = Decoder::new(4 << 20);
    let mut subs = Vec::with_capacity(n);
    let mut progress = Progress::new("subscribing", n as u64);
    for i in 0..n {
        let mut stream = std::net::TcpStream::connect(addr).map_err(io("a subscriber"))?;
        stream.set_nodelay(true).map_err(io("a subscriber"))?;
        stream.write_all(&hello).map_err(io("a subscriber"))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(io("a subscriber"))?;
        let mut sub = Subscriber {
            stream: mio::net::TcpStream::from_std(stream.try_clone().map_err(io("a subscriber"))?),
            buf: BytesMut::with_capacity(4096),
            ready: false,
        };
        let mut chunk = [0u8; 4096];
        while !sub.ready {
            let n = stream
                .read(&mut chunk)
                .map_err(io("awaiting the subscription"))?;
            if n == 0 {
                return Err(Error::InvalidArgument(
                    "the server closed a subscriber".into(),
                ));
            }
            sub.buf.extend_from_slice(&chunk[..n]);
            sub.parse(wire, &decoder).map_err(Error::InvalidArgument)?;
        }
        stream.set_nonblocking(true).map_err(io("a subscriber"))?;
        subs.push(sub);
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
                    Ok(n) => sub.buf.extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => {
                        tally.fail(format!("a subscriber: {e}"));
                        break;
                    }
                }
                match sub.parse(wire, &decoder) {
                    Ok(n) => messages += n,
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

/// A Herald producer as a [`Sender`].
struct HeraldSender(herald_client::Producer);

impl Sender for HeraldSender {
    fn send(&mut self, body: &[u8]) -> Result<()> {
        self.0
            .send(Message::bytes(bytes::Bytes::copy_from_slice(body)))
    }

    fn drain(&mut self) -> Result<()> {
        // A lone send leaves at once; a receipted one after everything
        // before it.
        self.0
            .send_with_receipt(Message::bytes(bytes::Bytes::from_static(b"drain")))
    }
}

/// nats-server on an ephemeral port, started here.
fn start_nats(bin: &Path) -> Result<Process> {
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
            &mut HeraldSender(producer),
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
    println!(
        "\n{:<40} {:>14} {:>14} {:>8}",
        "scenario", "herald", "nats", "ratio"
    );
    let mut json = Vec::new();
    let mb = |b: u64| b as f64 / 1e6;
    for (h, n) in &rows {
        let s = h.subscribers;
        let lines = [
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
        ];
        for (name, herald, nats, higher_is_better) in lines {
            let ratio = if higher_is_better {
                herald / nats
            } else {
                nats / herald
            };
            println!("{name:<40} {herald:>14.2} {nats:>14.2} {ratio:>8.2}");
            json.push(format!(
                "{{\"scenario\":\"{name}\",\"herald\":{herald:.3},\"nats\":{nats:.3},\"ratio\":{ratio:.3}}}"
            ));
        }
    }
    println!("{{\"scenario\":\"fanout\",\"rows\":[{}]}}", json.join(","));
    Ok(())
}
