//! AMQP 1.0: Herald's listener against Debian's RabbitMQ with its
//! `rabbitmq_amqp1_0` plugin, side by side in one run, and against
//! Herald's native protocol (`herald bench --compare-rabbitmq`). The bench
//! starts both servers as processes of their own on ephemeral ports and
//! drives both with the same AMQP client code (written here on
//! `herald_protocol::amqp`): topic throughput 1 → 1 and 1 → N with
//! pre-settled transfers under the receivers' credit, and latency at a
//! fixed rate. Herald's native client runs the same scenarios against the
//! same Herald. Bodies carry the sequence number and due time in their
//! first 16 bytes, as in the other scenarios.

use std::io::{BufWriter, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use herald_client::{ConnectionFactory, Error, Result};
use herald_protocol::amqp::message::{Body, Message};
use herald_protocol::amqp::performative::{Attach, Begin, Flow, Open};
use herald_protocol::amqp::terminus::{LinkTarget, Source, Target};
use herald_protocol::amqp::{FrameHeader, FrameKind, Performative, ProtocolHeader, Sasl, Value};

use super::latency::{self, LatencyReport, Timing};
use super::process::{io, scratch, start_herald, wait_listening, Process};
use super::throughput::{self, one_to_many, Arrivals, Sender, ThroughputReport};
use super::{bench_topic, median};

/// Credit each receiver keeps granting, renewed at half.
const CREDIT: u32 = 5000;

/// A server and how its topics are addressed.
struct Server {
    /// What the reports call it.
    name: &'static str,
    /// RabbitMQ's node, stopped first when this is dropped.
    _node: Option<Node>,
    /// The server process, stopped when this is dropped (none when the
    /// bench measures a server it did not start).
    _process: Option<Process>,
    /// Its AMQP listener.
    addr: SocketAddr,
    /// The address of topic `name`: Herald's `topic://name`, RabbitMQ's
    /// `/topic/name` (through `amq.topic`).
    topic: fn(&str) -> String,
}

/// A RabbitMQ node, stopped with `rabbitmqctl` when dropped: its script
/// runs the broker as the `rabbitmq` user, so killing the script leaves
/// the broker running.
struct Node(String);

impl Drop for Node {
    fn drop(&mut self) {
        let _ = Command::new("rabbitmqctl")
            .args(["-n", &self.0, "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn fail(what: String) -> Error {
    Error::InvalidArgument(what)
}

/// Debian's RabbitMQ on ephemeral ports, its own node, files and AMQP 1.0
/// plugin. Its script runs the broker as the `rabbitmq` user, whose the
/// scratch directory is made.
fn start_rabbitmq(bin: &Path) -> Result<(Node, Process)> {
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .map_err(io("a free port"))
    };
    let (port, dist) = (free()?, free()?);
    let dir = scratch("rabbitmq")?;
    std::fs::write(dir.join("enabled_plugins"), "[rabbitmq_amqp1_0].\n")
        .and_then(|()| std::fs::write(dir.join("rabbitmq.conf"), "loopback_users = none\n"))
        .map_err(io("writing RabbitMQ's config"))?;
    let owned = Command::new("chown")
        .args(["-R", "rabbitmq:rabbitmq"])
        .arg(&dir)
        .status()
        .map_err(io("chown"))?;
    if !owned.success() {
        return Err(fail(
            "the scratch directory could not be given to the rabbitmq user (run as root)".into(),
        ));
    }
    let node = format!("herald-bench-{}@localhost", std::process::id());
    let child = Command::new(bin)
        .current_dir(&dir)
        .env("RABBITMQ_NODENAME", &node)
        .env("RABBITMQ_NODE_PORT", port.to_string())
        .env("RABBITMQ_DIST_PORT", dist.to_string())
        .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
        .env("RABBITMQ_LOG_BASE", dir.join("log"))
        .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir.join("enabled_plugins"))
        .env("RABBITMQ_CONFIG_FILE", dir.join("rabbitmq"))
        .env("RABBITMQ_FEATURE_FLAGS_FILE", dir.join("feature_flags"))
        .env("RABBITMQ_PLUGINS_EXPAND_DIR", dir.join("plugins"))
        .env("ERL_CRASH_DUMP", dir.join("erl_crash.dump"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| {
            fail(format!(
                "{}: {e} (Debian's rabbitmq-server package, or --rabbitmq PATH)",
                bin.display()
            ))
        })?;
    let node = Node(node);
    let process = Process {
        name: "rabbitmq",
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        dir,
    };
    wait_listening(&process, Duration::from_secs(60))?;
    Ok((node, process))
}

/// Reads whole frames off a socket into one buffer and hands each to a
/// callback as its channel, performative and payload.
struct Frames {
    stream: TcpStream,
    buf: Vec<u8>,
    start: usize,
}

/// What a frame carried, decoded.
enum Got {
    Sasl(Sasl),
    Amqp(Performative),
}

impl Frames {
    fn fill(&mut self) -> Result<()> {
        self.buf.drain(..self.start);
        self.start = 0;
        let mut chunk = [0u8; 64 * 1024];
        match self.stream.read(&mut chunk) {
            Ok(0) => Err(fail("the AMQP server closed".into())),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(())
            }
            Err(e) => Err(io("read")(e)),
        }
    }

    /// The server's protocol header.
    fn header(&mut self) -> Result<ProtocolHeader> {
        while self.buf.len() - self.start < 8 {
            self.fill()?;
        }
        let h = ProtocolHeader::read(&self.buf[self.start..])
            .map_err(|e| fail(format!("AMQP header: {e}")))?
            .ok_or_else(|| fail("no AMQP header".into()))?;
        self.start += 8;
        Ok(h)
    }

    /// Calls `each` with every frame's kind and body (heart-beats
    /// skipped), undecoded, until it says stop (false) or fails; an error
    /// if the connection ends first.
    fn each_raw(&mut self, mut each: impl FnMut(FrameKind, &[u8]) -> Result<bool>) -> Result<()> {
        loop {
            while let Ok(Some(h)) = FrameHeader::read(&self.buf[self.start..], u32::MAX) {
                let size = h.size as usize;
                if self.buf.len() - self.start < size {
                    break;
                }
                let at = self.start;
                self.start += size;
                if size == h.body_offset {
                    continue;
                }
                if !each(h.kind, &self.buf[at + h.body_offset..at + size])? {
                    return Ok(());
                }
            }
            self.fill()?;
        }
    }

    /// Calls `each` with every frame (heart-beats skipped), decoded, until
    /// it says stop (false); an error if the connection ends first.
    fn each(&mut self, mut each: impl FnMut(Got) -> bool) -> Result<()> {
        self.each_raw(|kind, body| {
            let (value, _) = Value::decode(body).map_err(|e| fail(format!("AMQP: {e}")))?;
            let got = match kind {
                FrameKind::Sasl => {
                    Got::Sasl(Sasl::from_value(value).map_err(|e| fail(e.to_string()))?)
                }
                FrameKind::Amqp => {
                    Got::Amqp(Performative::from_value(value).map_err(|e| fail(e.to_string()))?)
                }
            };
            Ok(each(got))
        })
    }

    /// The next frame.
    fn next(&mut self) -> Result<Got> {
        let mut got = None;
        self.each(|g| {
            got = Some(g);
            false
        })?;
        got.ok_or_else(|| fail("no frame".into()))
    }
}

/// Writes one frame.
fn frame(out: &mut impl Write, kind: FrameKind, body: &Value, payload: &[u8]) -> Result<()> {
    let mut encoded = Vec::with_capacity(64 + payload.len());
    body.encode(&mut encoded);
    let mut head = Vec::with_capacity(8);
    FrameHeader::write(kind, 0, encoded.len() + payload.len(), &mut head);
    out.write_all(&head)
        .and_then(|()| out.write_all(&encoded))
        .and_then(|()| out.write_all(payload))
        .map_err(io("write"))
}

fn perform(out: &mut impl Write, p: Performative) -> Result<()> {
    frame(out, FrameKind::Amqp, &p.to_value(), &[])
}

/// A connection through SASL PLAIN (guest, which both servers take),
/// open, and one session on channel 0, with one link attached: its writer
/// and its reader.
fn connect(addr: SocketAddr, link: Attach) -> Result<(BufWriter<TcpStream>, Frames)> {
    let stream = TcpStream::connect(addr).map_err(io("connect"))?;
    stream.set_nodelay(true).map_err(io("connect"))?;
    let mut w = BufWriter::with_capacity(64 * 1024, stream.try_clone().map_err(io("connect"))?);
    let mut r = Frames {
        stream,
        buf: Vec::with_capacity(256 * 1024),
        start: 0,
    };
    let flush = |w: &mut BufWriter<TcpStream>| w.flush().map_err(io("write"));
    w.write_all(&ProtocolHeader::Sasl.bytes())
        .map_err(io("write"))?;
    flush(&mut w)?;
    r.header()?;
    r.next()?;
    let init = Sasl::Init {
        mechanism: "PLAIN".into(),
        initial_response: Some(Bytes::from_static(b"\0guest\0guest")),
        hostname: Some("localhost".into()),
    };
    frame(&mut w, FrameKind::Sasl, &init.to_value(), &[])?;
    flush(&mut w)?;
    match r.next()? {
        Got::Sasl(Sasl::Outcome { code: 0, .. }) => {}
        _ => return Err(fail("SASL PLAIN was refused".into())),
    }
    w.write_all(&ProtocolHeader::Amqp.bytes())
        .map_err(io("write"))?;
    // Each connection its own container id: Herald takes it as the
    // client id, one connection each.
    static CONNECTIONS: AtomicU64 = AtomicU64::new(0);
    let n = CONNECTIONS.fetch_add(1, Ordering::Relaxed);
    let open = Open {
        container_id: format!("herald-bench-{}-{n}", std::process::id()),
        hostname: Some("localhost".into()),
        max_frame_size: 1 << 16,
        channel_max: 0,
        idle_time_out: 0,
        offered_capabilities: vec![],
        desired_capabilities: vec![],
        properties: Value::Null,
    };
    perform(&mut w, Performative::Open(open))?;
    let begin = Begin {
        remote_channel: None,
        next_outgoing_id: 0,
        incoming_window: u32::MAX >> 1,
        outgoing_window: u32::MAX >> 1,
        handle_max: 1,
    };
    perform(&mut w, Performative::Begin(begin))?;
    perform(&mut w, Performative::Attach(Box::new(link)))?;
    flush(&mut w)?;
    r.header()?;
    // open, begin, attach.
    let mut answered = 0;
    while answered < 3 {
        match r.next()? {
            Got::Amqp(Performative::Open(_) | Performative::Begin(_)) => answered += 1,
            Got::Amqp(Performative::Attach(a)) if !is_null(&a.source) || !is_null(&a.target) => {
                answered += 1
            }
            Got::Amqp(Performative::Detach(d)) => {
                return Err(fail(format!("the link was refused: {:?}", d.error)))
            }
            Got::Amqp(Performative::Close(e)) => return Err(fail(format!("closed: {e:?}"))),
            _ => {}
        }
    }
    Ok((w, r))
}

fn is_null(v: &Value) -> bool {
    *v == Value::Null
}

fn link(name: &str, receiver: bool, address: &str) -> Attach {
    let (source, target) = match receiver {
        true => (
            Source {
                node: Target {
                    address: Some(address.into()),
                    ..Target::default()
                },
                ..Source::default()
            }
            .to_value(),
            LinkTarget::Target(Target::default()).to_value(),
        ),
        false => (
            Source::default().to_value(),
            LinkTarget::Target(Target {
                address: Some(address.into()),
                ..Target::default()
            })
            .to_value(),
        ),
    };
    Attach {
        name: name.into(),
        handle: 0,
        role_receiver: receiver,
        // Settled: at most once, as the native and NATS scenarios are.
        snd_settle_mode: 1,
        rcv_settle_mode: 0,
        source,
        target,
        initial_delivery_count: (!receiver).then_some(0),
        max_message_size: 0,
        offered_capabilities: vec![],
        desired_capabilities: vec![],
        properties: Value::Null,
    }
}

fn flow(delivery_count: u32, credit: u32, echo: bool) -> Performative {
    Performative::Flow(Flow {
        next_incoming_id: Some(0),
        incoming_window: u32::MAX >> 1,
        next_outgoing_id: 0,
        outgoing_window: u32::MAX >> 1,
        handle: Some(0),
        delivery_count: Some(delivery_count),
        link_credit: Some(credit),
        available: None,
        drain: false,
        echo,
    })
}

/// Receives from `address` on a thread of its own, handing each body to
/// `on_message`, granting credit as it goes, until the connection ends.
fn subscribe(
    addr: SocketAddr,
    (address, name, size): (&str, &str, usize),
    mut on_message: impl FnMut(&[u8]) + Send + 'static,
) -> Result<()> {
    let (mut w, mut r) = connect(addr, link(name, true, address))?;
    perform(&mut w, flow(0, CREDIT, false))?;
    w.flush().map_err(io("write"))?;
    std::thread::spawn(move || {
        let mut received: u32 = 0;
        let mut partial = Vec::new();
        let _ = r.each_raw(|kind, body| {
            if kind != FrameKind::Amqp || !body.starts_with(&[0x00, 0x53, 0x14]) {
                return Ok(true);
            }
            // The bench's bodies end the message, in a data section of
            // their size: taken from the end without decoding the rest.
            match data_at_end(body, size) {
                Some(message) if partial.is_empty() => on_message(message),
                _ => {
                    // Anything else (several frames): decoded.
                    let (value, used) = Value::decode(body).map_err(|e| fail(e.to_string()))?;
                    let Ok(Performative::Transfer(t)) = Performative::from_value(value) else {
                        return Ok(true);
                    };
                    partial.extend_from_slice(&body[used..]);
                    if t.more {
                        return Ok(true);
                    }
                    if let Ok(Message {
                        body: Body::Data(parts),
                        ..
                    }) = Message::decode(&partial)
                    {
                        if let Some(body) = parts.first() {
                            on_message(body);
                        }
                    }
                    partial.clear();
                }
            }
            received = received.wrapping_add(1);
            if received.is_multiple_of(CREDIT / 2) {
                perform(&mut w, flow(received, CREDIT, false))?;
                w.flush().map_err(io("write"))?;
            }
            Ok(true)
        });
    });
    Ok(())
}

/// The last `size` bytes of a frame, if a data section of that size
/// holds them (a vbin8 or vbin32).
fn data_at_end(frame: &[u8], size: usize) -> Option<&[u8]> {
    let at = frame.len().checked_sub(size)?;
    let head = &frame[..at];
    let small = u8::try_from(size).ok().map(|n| [0x00, 0x53, 0x75, 0xa0, n]);
    let large = {
        let mut h = [0x00, 0x53, 0x75, 0xb0, 0, 0, 0, 0];
        h[4..].copy_from_slice(&u32::try_from(size).ok()?.to_be_bytes());
        h
    };
    let found = small.is_some_and(|h| head.ends_with(&h)) || head.ends_with(&large);
    found.then(|| &frame[at..])
}

/// A sender on one link: what its credit allows, counted by a reader
/// thread from the server's flows.
struct AmqpSender {
    writer: BufWriter<TcpStream>,
    /// The delivery count the credit reaches (delivery count + credit).
    allowed: Arc<AtomicU64>,
    /// Detaches received: a drain waits for the answer to its own.
    detached: Arc<AtomicU64>,
    /// Transfers sent.
    sent: Arc<AtomicU64>,
}

impl AmqpSender {
    fn new(addr: SocketAddr, address: &str) -> Result<AmqpSender> {
        let (writer, mut r) = connect(addr, link("bench-out", false, address))?;
        let (allowed, detached) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let sent = Arc::new(AtomicU64::new(0));
        let (a, f, s) = (allowed.clone(), detached.clone(), sent.clone());
        // The sender sleeps while it has no credit, woken by the flow
        // that brings more: a spinning sender would take the CPU from
        // the server it waits for.
        let sender = std::thread::current();
        std::thread::spawn(move || {
            let _ = r.each(|got| {
                if let Got::Amqp(Performative::Flow(flow)) = &got {
                    // RabbitMQ leaves the delivery count out: its credit
                    // counts from what was sent when it came.
                    let count = flow
                        .delivery_count
                        .map_or_else(|| s.load(Ordering::Acquire), u64::from);
                    if let Some(credit) = flow.link_credit {
                        a.store(count + u64::from(credit), Ordering::Release);
                        sender.unpark();
                    }
                }
                if let Got::Amqp(Performative::Detach(_)) = got {
                    f.fetch_add(1, Ordering::Release);
                }
                true
            });
        });
        Ok(AmqpSender {
            writer,
            allowed,
            detached,
            sent,
        })
    }

    fn send(&mut self, body: &[u8]) -> Result<()> {
        let sent = self.sent.load(Ordering::Relaxed);
        if sent >= self.allowed.load(Ordering::Acquire) {
            self.writer.flush().map_err(io("write"))?;
            while sent >= self.allowed.load(Ordering::Acquire) {
                std::thread::park_timeout(Duration::from_millis(1));
            }
        }
        // A transfer written by hand, its delivery id and tag patched in:
        // the bench's client must cost less than the servers it measures.
        let id = (sent as u32).to_be_bytes();
        let mut frame = [0u8; 8 + 20 + 8];
        let size = frame.len() + body.len();
        frame[..4].copy_from_slice(&(size as u32).to_be_bytes());
        frame[4..8].copy_from_slice(&[2, 0, 0, 0]);
        // transfer: list8 of 5 fields (15 bytes): handle 0, delivery-id,
        // delivery-tag, message-format 0, settled.
        frame[8..13].copy_from_slice(&[0x00, 0x53, 0x14, 0xc0, 15]);
        frame[13..15].copy_from_slice(&[5, 0x43]);
        frame[15] = 0x70;
        frame[16..20].copy_from_slice(&id);
        frame[20..22].copy_from_slice(&[0xa0, 4]);
        frame[22..26].copy_from_slice(&id);
        frame[26..28].copy_from_slice(&[0x43, 0x41]);
        // One data section: a vbin32 of the body.
        frame[28..32].copy_from_slice(&[0x00, 0x53, 0x75, 0xb0]);
        frame[32..36].copy_from_slice(&(body.len() as u32).to_be_bytes());
        self.writer
            .write_all(&frame)
            .and_then(|()| self.writer.write_all(body))
            .map_err(io("write"))?;
        self.sent.store(sent + 1, Ordering::Release);
        Ok(())
    }

    /// Waits until the server has taken everything sent: it answers a
    /// detach sent after it (an echoed flow would do, but RabbitMQ does
    /// not echo). The sender is done then.
    fn drain(&mut self) -> Result<()> {
        let detach = herald_protocol::amqp::performative::Detach {
            handle: 0,
            closed: true,
            error: None,
        };
        perform(&mut self.writer, Performative::Detach(detach))?;
        self.writer.flush().map_err(io("write"))?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.detached.load(Ordering::Acquire) == 0 {
            if Instant::now() > deadline {
                return Err(fail("the server never answered".into()));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(())
    }
}

impl Drop for AmqpSender {
    fn drop(&mut self) {
        // Its reader thread ends with the connection.
        let _ = self.writer.get_ref().shutdown(std::net::Shutdown::Both);
    }
}

impl Sender for AmqpSender {
    fn send(&mut self, body: &[u8]) -> Result<()> {
        AmqpSender::send(self, body)
    }

    fn drain(&mut self) -> Result<()> {
        AmqpSender::drain(self)
    }
}

/// One sender → `subscribers` on a topic, as fast as the sender goes.
fn amqp_throughput(
    server: &Server,
    subscribers: usize,
    size: usize,
    count: u64,
) -> Result<ThroughputReport> {
    let address = (server.topic)(&bench_topic("amqp"));
    let mut n = 0;
    let subscribe = |mut arrivals: Arrivals| {
        n += 1;
        let name = format!("bench-in-{n}");
        subscribe(server.addr, (&address, &name, size), move |body| {
            arrivals.arrived(body)
        })
    };
    let mut sender = AmqpSender::new(server.addr, &address)?;
    one_to_many(
        server.name,
        (subscribers, size, count),
        subscribe,
        &mut sender,
    )
}

/// One sender at a fixed rate, one receiver timing each message from
/// when it was due.
fn amqp_latency(server: &Server, size: usize, rate: u64, count: u64) -> Result<LatencyReport> {
    let address = (server.topic)(&bench_topic("amqp-latency"));
    let timing = Timing::new()?;
    let t = timing.clone();
    subscribe(
        server.addr,
        (&address, "bench-latency", size),
        move |body| t.arrived(body),
    )?;
    let mut sender = AmqpSender::new(server.addr, &address)?;
    timing.run(server.name, rate, size, count, |body| {
        sender.send(body)?;
        // A lone message leaves at once.
        sender.writer.flush().map_err(io("write"))
    })
}

/// `--mode amqp`: topic throughput 1 → 1 and 1 → `fanout` on one Herald,
/// over its native protocol (`native`) and over AMQP (`addr`) in turn,
/// `rounds` times, and the medians with AMQP's cost per message.
pub fn run(native: &ConnectionFactory, addr: SocketAddr, load: &super::Load) -> Result<()> {
    let herald = Server {
        name: "herald amqp",
        _node: None,
        _process: None,
        addr,
        topic: |name| format!("topic://{name}"),
    };
    println!("AMQP 1.0 at {addr}, native at {}", native.address());
    for subscribers in [1, load.fanout] {
        let (mut amqp, mut plain) = (vec![], vec![]);
        for _ in 0..load.rounds {
            let a = amqp_throughput(&herald, subscribers, load.size, load.count)?;
            a.print();
            let n = throughput::run(native, 1, subscribers, load.size, load.count)?;
            n.print();
            amqp.push(a.deliveries_per_sec());
            plain.push(n.deliveries_per_sec());
        }
        let (amqp, plain) = (median(amqp), median(plain));
        println!(
            "1 -> {subscribers}: amqp {amqp:.0} deliveries/s, native {plain:.0}, cost of AMQP per message {:.2}x",
            plain / amqp
        );
        println!(
            "{{\"scenario\":\"amqp_vs_native\",\"subscribers\":{subscribers},\"amqp\":{amqp:.1},\"native\":{plain:.1},\"cost_vs_native\":{:.3}}}",
            plain / amqp
        );
    }
    Ok(())
}

/// What `--compare-rabbitmq` runs.
pub struct Plan<'a> {
    pub rabbitmq: &'a Path,
    pub load: super::Load,
}

/// Every scenario against Herald over AMQP, Herald's native protocol and
/// RabbitMQ over AMQP in turn, `rounds` times, and the medians side by
/// side.
pub fn compare(plan: &Plan<'_>) -> Result<()> {
    let (process, addrs) = start_herald(
        "herald-amqp",
        &[
            "herald-server AMQP listening on ",
            "herald-server listening on ",
        ],
    )?;
    let herald = Server {
        name: "herald amqp",
        _node: None,
        _process: Some(process),
        addr: addrs[0],
        topic: |name| format!("topic://{name}"),
    };
    let native = ConnectionFactory::new(&format!("herald://{}", addrs[1]))?;
    let (node, rabbit) = start_rabbitmq(plan.rabbitmq)?;
    let rabbit = Server {
        name: "rabbitmq amqp",
        addr: rabbit.addr,
        _node: Some(node),
        _process: Some(rabbit),
        topic: |name| format!("/topic/{name}"),
    };
    println!(
        "comparing AMQP 1.0: herald-server at {} (native at {}) and RabbitMQ at {}, {} rounds, medians",
        herald.addr, addrs[1], rabbit.addr, plan.load.rounds
    );
    // (scenario, herald AMQP, herald native, RabbitMQ AMQP, higher is better)
    let mut rows: Vec<(String, [f64; 3], bool)> = Vec::new();
    for subscribers in [1, plan.load.fanout] {
        let mut rates = [vec![], vec![], vec![]];
        let mut lost = [0; 3];
        for _ in 0..plan.load.rounds {
            let runs = [
                amqp_throughput(&herald, subscribers, plan.load.size, plan.load.count)?,
                throughput::run(&native, 1, subscribers, plan.load.size, plan.load.count)?,
                amqp_throughput(&rabbit, subscribers, plan.load.size, plan.load.count)?,
            ];
            for (i, r) in runs.iter().enumerate() {
                r.print();
                rates[i].push(r.deliveries_per_sec());
                lost[i] += r.lost();
            }
        }
        let name = format!(
            "1 -> {subscribers} deliveries/s (lost {} / {} / {})",
            lost[0], lost[1], lost[2]
        );
        rows.push((name, rates.map(median), true));
    }
    let quantiles = [(0.5, "p50"), (0.99, "p99"), (0.999, "p99.9")];
    let mut us: Vec<[Vec<f64>; 3]> = quantiles.iter().map(|_| [vec![], vec![], vec![]]).collect();
    for _ in 0..plan.load.rounds {
        let runs = [
            amqp_latency(
                &herald,
                plan.load.size,
                plan.load.rate,
                plan.load.latency_count,
            )?,
            latency::run(
                &native,
                plan.load.size,
                plan.load.rate,
                plan.load.latency_count,
            )?,
            amqp_latency(
                &rabbit,
                plan.load.size,
                plan.load.rate,
                plan.load.latency_count,
            )?,
        ];
        for (i, r) in runs.iter().enumerate() {
            r.print();
            for (q, (quantile, _)) in quantiles.iter().enumerate() {
                us[q][i].push(r.us(*quantile));
            }
        }
    }
    for ((_, label), values) in quantiles.iter().zip(us) {
        let name = format!("latency {label} us at {}/s", plan.load.rate);
        rows.push((name, values.map(median), false));
    }
    println!(
        "\n{:<46} {:>13} {:>13} {:>13} {:>9} {:>9}",
        "scenario", "herald amqp", "herald native", "rabbitmq amqp", "vs rmq", "vs native"
    );
    let mut json = Vec::new();
    for (name, [amqp, native, rmq], higher_is_better) in rows {
        // Above 1: Herald's AMQP does better than RabbitMQ's; its cost
        // against Herald's native protocol.
        let (vs_rmq, vs_native) = match higher_is_better {
            true => (amqp / rmq, native / amqp),
            false => (rmq / amqp, amqp / native),
        };
        println!(
            "{name:<46} {amqp:>13.1} {native:>13.1} {rmq:>13.1} {vs_rmq:>9.2} {vs_native:>9.2}"
        );
        json.push(format!(
            "{{\"scenario\":\"{name}\",\"herald_amqp\":{amqp:.1},\"herald_native\":{native:.1},\"rabbitmq_amqp\":{rmq:.1},\"vs_rabbitmq\":{vs_rmq:.3},\"cost_vs_native\":{vs_native:.3}}}"
        ));
    }
    println!(
        "{{\"scenario\":\"amqp_comparison\",\"rows\":[{}]}}",
        json.join(",")
    );
    Ok(())
}
