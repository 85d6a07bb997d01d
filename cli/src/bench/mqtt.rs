//! MQTT: Herald's listener against Mosquitto, side by side in one run
//! (`herald bench --compare-mosquitto`). The bench starts both servers as
//! processes of their own on ephemeral ports (`herald-server` from beside
//! this binary, `mosquitto` from the PATH or `--mosquitto`), and drives
//! them with the same MQTT 3.1.1 client code: QoS 0 throughput 1 → 1 and
//! 1 → N, QoS 1 throughput 1 → 1 (PUBACKs both ways, a window of them in
//! flight), latency at a fixed rate, and the resident memory each server
//! adds for idle connections. Bodies carry the sequence number and due
//! time in their first 16 bytes, as in the other scenarios.

use std::io::{BufWriter, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use herald_client::{Error, Result};
use herald_protocol::mqtt::{
    self, Connect, Decoder, Packet, Properties, Publish, QoS, Subscribe, SubscribeOptions, Version,
};

use super::latency::{LatencyReport, Timing};
use super::process::{io, scratch, start_herald, wait_listening, Process};
use super::progress::Progress;
use super::throughput::{one_to_many, Arrivals, Sender, ThroughputReport};
use super::{bench_topic, median};

/// QoS 1 publishes a publisher has in flight at most, and the servers'
/// window towards subscribers (Herald's receive maximum, Mosquitto's
/// max_inflight_messages): the same for both.
const WINDOW: u64 = 1000;

/// Debian's `mosquitto` on an ephemeral port, without persistence, with
/// the same window as Herald, no limit on what it queues for a client
/// (its default drops QoS 1 messages past 1,000) and TCP_NODELAY, as
/// Herald sets it (without, Nagle's algorithm holds lone messages back).
fn start_mosquitto(bin: &Path) -> Result<Process> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(io("a free port"))?
        .port();
    let dir = scratch("mosquitto")?;
    let conf = dir.join("mosquitto.conf");
    let text = format!(
        "listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\nlog_dest none\n\
         max_inflight_messages {WINDOW}\nmax_queued_messages 0\nset_tcp_nodelay true\n"
    );
    std::fs::write(&conf, text).map_err(io("writing mosquitto.conf"))?;
    let child = Command::new(bin)
        .arg("-c")
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| {
            Error::InvalidArgument(format!(
                "{}: {e} (Debian's mosquitto package, or --mosquitto PATH)",
                bin.display()
            ))
        })?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let process = Process {
        name: "mosquitto",
        child,
        addr,
        dir,
    };
    wait_listening(&process, Duration::from_secs(10))?;
    Ok(process)
}

/// Bytes of one packet, as 3.1.1.
fn packet(p: &Packet) -> BytesMut {
    let mut b = BytesMut::new();
    mqtt::encode(p, Version::V311, &mut b);
    b
}

/// Reads whole packets off a socket into one buffer, and hands each to a
/// callback as its first byte and body, without decoding more than that:
/// the bench's clients must cost less than the servers they measure.
struct Packets {
    stream: TcpStream,
    buf: Vec<u8>,
    start: usize,
}

impl Packets {
    fn new(stream: TcpStream) -> Packets {
        Packets {
            stream,
            buf: Vec::with_capacity(256 * 1024),
            start: 0,
        }
    }

    /// A packet's length (fixed header included) and its header's, if the
    /// whole packet is buffered.
    fn whole(bytes: &[u8]) -> Option<(usize, usize)> {
        let mut length = 0usize;
        for (i, b) in bytes.iter().enumerate().skip(1).take(4) {
            length |= usize::from(b & 0x7f) << (7 * (i - 1));
            if b & 0x80 == 0 {
                let header = i + 1;
                return (bytes.len() >= header + length).then_some((header + length, header));
            }
        }
        None
    }

    /// Calls `each` with every packet until it says stop (false) or the
    /// connection ends; then whether it was told to stop.
    fn each(&mut self, mut each: impl FnMut(u8, &[u8]) -> bool) -> bool {
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            while let Some((len, header)) = Self::whole(&self.buf[self.start..]) {
                let at = self.start;
                self.start += len;
                if !each(self.buf[at], &self.buf[at + header..at + len]) {
                    return true;
                }
            }
            self.buf.drain(..self.start);
            self.start = 0;
            match self.stream.read(&mut chunk) {
                Ok(0) | Err(_) => return false,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// The next packet, decoded (for the handshakes).
    fn next(&mut self) -> Result<Packet> {
        let mut packet = None;
        self.each(|first, body| {
            let mut whole = BytesMut::from(&[first][..]);
            mqtt::wire::put_varint(&mut whole, body.len() as u32);
            whole.extend_from_slice(body);
            packet = Some(
                Decoder::with_version(Version::V311, 1 << 24)
                    .decode(&mut whole)
                    .map_err(|e| Error::InvalidArgument(format!("MQTT from the server: {e}"))),
            );
            false
        });
        match packet {
            Some(Ok(Some(p))) => Ok(p),
            Some(Err(e)) => Err(e),
            _ => Err(Error::InvalidArgument("MQTT server closed".into())),
        }
    }
}

/// A PUBLISH's payload: after the topic, and after the packet id at QoS 1
/// and 2. `None` for another packet.
fn payload(first: u8, body: &[u8]) -> Option<(&[u8], Option<u16>)> {
    if first >> 4 != 3 {
        return None;
    }
    let topic = usize::from(u16::from_be_bytes([*body.first()?, *body.get(1)?]));
    let mut at = 2 + topic;
    let id = match (first >> 1) & 3 {
        0 => None,
        _ => {
            at += 2;
            Some(u16::from_be_bytes([*body.get(at - 2)?, *body.get(at - 1)?]))
        }
    };
    Some((body.get(at..)?, id))
}

/// A connection after CONNACK: its writer and its reader.
fn connect(addr: SocketAddr, client_id: &str) -> Result<(BufWriter<TcpStream>, Packets)> {
    let stream = TcpStream::connect(addr).map_err(io("connect"))?;
    stream.set_nodelay(true).map_err(io("connect"))?;
    let mut writer =
        BufWriter::with_capacity(64 * 1024, stream.try_clone().map_err(io("connect"))?);
    let mut reader = Packets::new(stream);
    let connect = Connect {
        version: Version::V311,
        clean: true,
        keep_alive: 0,
        properties: Properties::default(),
        client_id: client_id.to_owned(),
        will: None,
        username: None,
        password: None,
    };
    writer
        .write_all(&packet(&Packet::Connect(Box::new(connect))))
        .and_then(|()| writer.flush())
        .map_err(io("connect"))?;
    match reader.next()? {
        Packet::ConnAck(a) if a.code == 0 => Ok((writer, reader)),
        other => Err(Error::InvalidArgument(format!(
            "CONNACK expected, got {other:?}"
        ))),
    }
}

/// Subscribes at `qos` and hands each payload to `on_message` on a thread
/// of its own (acknowledging QoS 1 ones) until the connection ends.
fn subscribe(
    addr: SocketAddr,
    topic: &str,
    qos: QoS,
    mut on_message: impl FnMut(&[u8]) + Send + 'static,
) -> Result<()> {
    let (mut writer, mut reader) = connect(addr, "")?;
    let options = SubscribeOptions {
        qos,
        no_local: false,
        retain_as_published: false,
        retain_handling: 0,
    };
    let subscribe = Subscribe {
        packet_id: 1,
        properties: Properties::default(),
        filters: vec![(topic.to_owned(), options)],
    };
    writer
        .write_all(&packet(&Packet::Subscribe(subscribe)))
        .and_then(|()| writer.flush())
        .map_err(io("subscribe"))?;
    match reader.next()? {
        Packet::SubAck(a) if a.codes.first() == Some(&(qos as u8)) => {}
        other => {
            return Err(Error::InvalidArgument(format!(
                "SUBACK expected, got {other:?}"
            )))
        }
    }
    std::thread::spawn(move || {
        reader.each(|first, body| {
            let Some((message, id)) = payload(first, body) else {
                return true;
            };
            on_message(message);
            let Some([hi, lo]) = id.map(u16::to_be_bytes) else {
                return true;
            };
            // PUBACKs gather in the writer; it flushes when full, and the
            // server's window is far larger than what it holds.
            writer.write_all(&[0x40, 0x02, hi, lo]).is_ok()
                && (writer.buffer().len() < 1024 || writer.flush().is_ok())
        });
    });
    Ok(())
}

/// A PUBLISH for one topic and body size, encoded once: each message
/// patches its packet id and body into a copy.
struct Template {
    bytes: Vec<u8>,
    /// Where the packet id is, at QoS 1.
    id_at: Option<usize>,
    body_at: usize,
}

impl Template {
    fn new(topic: &str, size: usize, qos: QoS) -> Template {
        let p = Publish {
            dup: false,
            qos,
            retain: false,
            topic: topic.to_owned(),
            packet_id: (qos != QoS::AtMostOnce).then_some(1),
            properties: Properties::default(),
            payload: Bytes::from(vec![0u8; size]),
        };
        let bytes = packet(&Packet::Publish(p)).to_vec();
        let body_at = bytes.len() - size;
        let id_at = (qos != QoS::AtMostOnce).then(|| body_at - 2);
        Template {
            bytes,
            id_at,
            body_at,
        }
    }
}

/// A publisher: PUBACKs and PINGRESPs counted by a reader thread.
struct Publisher {
    writer: BufWriter<TcpStream>,
    acked: Arc<AtomicU64>,
    pongs: Arc<AtomicU64>,
    sent: u64,
    next_id: u16,
}

impl Publisher {
    fn new(addr: SocketAddr) -> Result<Publisher> {
        let (writer, mut reader) = connect(addr, "")?;
        let (acked, pongs) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (a, p) = (acked.clone(), pongs.clone());
        std::thread::spawn(move || {
            reader.each(|first, _| {
                match first >> 4 {
                    4 => a.fetch_add(1, Ordering::Release),
                    13 => p.fetch_add(1, Ordering::Release),
                    _ => 0,
                };
                true
            })
        });
        Ok(Publisher {
            writer,
            acked,
            pongs,
            sent: 0,
            next_id: 1,
        })
    }

    /// Publishes `body` (the template's size) as the template says.
    fn publish(&mut self, template: &mut Template, body: &[u8]) -> Result<()> {
        if let Some(at) = template.id_at {
            // A window of QoS 1 publishes in flight.
            while self.sent - self.acked.load(Ordering::Acquire) >= WINDOW {
                self.writer.flush().map_err(io("write"))?;
                std::thread::yield_now();
            }
            self.sent += 1;
            template.bytes[at..at + 2].copy_from_slice(&self.next_id.to_be_bytes());
            self.next_id = self.next_id.wrapping_add(1).max(1);
        }
        let at = template.body_at;
        template.bytes[at..].copy_from_slice(body);
        self.writer.write_all(&template.bytes).map_err(io("write"))
    }

    /// Waits until the server has handled everything sent: every PUBACK,
    /// and a PINGRESP after the rest.
    fn drain(&mut self) -> Result<()> {
        let pongs = self.pongs.load(Ordering::Acquire);
        self.writer
            .write_all(&packet(&Packet::PingReq))
            .and_then(|()| self.writer.flush())
            .map_err(io("write"))?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.pongs.load(Ordering::Acquire) == pongs
            || self.acked.load(Ordering::Acquire) < self.sent
        {
            if Instant::now() > deadline {
                return Err(Error::InvalidArgument("the server never answered".into()));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(())
    }
}

/// One publisher → `subscribers` at `qos`, as fast as the publisher goes.
fn throughput(
    server: &Process,
    subscribers: usize,
    size: usize,
    count: u64,
    qos: QoS,
) -> Result<ThroughputReport> {
    let topic = bench_topic("mqtt").replace('.', "/");
    let subscribe = |mut arrivals: Arrivals| {
        subscribe(server.addr, &topic, qos, move |body| arrivals.arrived(body))
    };
    let mut sender = TopicSender {
        publisher: Publisher::new(server.addr)?,
        template: Template::new(&topic, size, qos),
    };
    one_to_many(
        server.name,
        (subscribers, size, count),
        subscribe,
        &mut sender,
    )
}

/// A publisher and the PUBLISH it sends.
struct TopicSender {
    publisher: Publisher,
    template: Template,
}

impl Sender for TopicSender {
    fn send(&mut self, body: &[u8]) -> Result<()> {
        self.publisher.publish(&mut self.template, body)
    }

    fn drain(&mut self) -> Result<()> {
        self.publisher.drain()
    }
}

/// One publisher at a fixed rate, one subscriber timing each message from
/// when it was due; QoS 0.
fn latency(server: &Process, size: usize, rate: u64, count: u64) -> Result<LatencyReport> {
    let topic = bench_topic("mqtt-latency").replace('.', "/");
    let timing = Timing::new()?;
    let t = timing.clone();
    subscribe(server.addr, &topic, QoS::AtMostOnce, move |body| {
        t.arrived(body)
    })?;
    let mut publisher = Publisher::new(server.addr)?;
    let mut template = Template::new(&topic, size, QoS::AtMostOnce);
    timing.run(server.name, rate, size, count, |body| {
        publisher.publish(&mut template, body)?;
        // A lone message leaves at once.
        publisher.writer.flush().map_err(io("write"))
    })
}

/// Connections kept open.
type Idle = Vec<(BufWriter<TcpStream>, Packets)>;

/// The resident memory a server adds per idle MQTT connection, over
/// `count` of them (CONNECT sent, CONNACK read, then nothing; with
/// `published`, one QoS 0 message each before the nothing), and the
/// connections: kept open, later ones cannot reuse what they hold.
fn idle_bytes(server: &Process, count: usize, published: bool) -> Result<(f64, Idle)> {
    let before = server.rss()?;
    let mut streams = Vec::with_capacity(count);
    let mut progress = Progress::new("idle MQTT connections", count as u64);
    let once = Template::new("idle/once", 128, QoS::AtMostOnce);
    for i in 0..count {
        let (mut writer, reader) = connect(server.addr, &format!("idle-{published}-{i}"))?;
        if published {
            writer
                .write_all(&once.bytes)
                .and_then(|()| writer.flush())
                .map_err(io("publish"))?;
        }
        streams.push((writer, reader));
        if i % 256 == 0 {
            progress.update(i as u64);
        }
    }
    progress.finish();
    // Let the server's allocator settle after the burst.
    std::thread::sleep(Duration::from_millis(500));
    let after = server.rss()?;
    Ok((after.saturating_sub(before) as f64 / count as f64, streams))
}

/// What `--compare-mosquitto` runs.
pub struct Plan<'a> {
    pub mosquitto: &'a Path,
    pub load: super::Load,
    pub connections: usize,
}

/// Every scenario against Herald and Mosquitto in turn, `rounds` times,
/// and the medians side by side.
pub fn compare(plan: &Plan<'_>) -> Result<()> {
    let (herald, _) = start_herald("herald-mqtt", &["herald-server MQTT listening on "])?;
    let mosquitto = start_mosquitto(plan.mosquitto)?;
    println!(
        "comparing MQTT: herald-server at {} and {} at {}, {} rounds, medians",
        herald.addr,
        plan.mosquitto.display(),
        mosquitto.addr,
        plan.load.rounds
    );
    let servers = [&herald, &mosquitto];
    // (scenario, herald, mosquitto, higher is better)
    let mut rows: Vec<(String, f64, f64, bool)> = Vec::new();
    // Memory first, while both servers are fresh: later, what the
    // throughput runs freed would hold the new connections. Then
    // connections that published once: what a quiet device costs.
    let mut open = Vec::new();
    for (published, what) in [(false, ""), (true, " that published once")] {
        let mut idle = [0.0; 2];
        for (i, server) in servers.iter().enumerate() {
            let (bytes, streams) = idle_bytes(server, plan.connections, published)?;
            idle[i] = bytes;
            open.push(streams);
        }
        let name = format!("bytes per idle connection{what} ({})", plan.connections);
        rows.push((name, idle[0], idle[1], false));
    }
    drop(open);
    for (subscribers, qos) in [
        (1, QoS::AtMostOnce),
        (plan.load.fanout, QoS::AtMostOnce),
        (1, QoS::AtLeastOnce),
    ] {
        let mut rates = [vec![], vec![]];
        let mut lost = [0, 0];
        for _ in 0..plan.load.rounds {
            for (i, server) in servers.iter().enumerate() {
                let r = throughput(server, subscribers, plan.load.size, plan.load.count, qos)?;
                r.print();
                rates[i].push(r.deliveries_per_sec());
                lost[i] += r.lost();
            }
        }
        let [h, m] = rates;
        let name = format!(
            "QoS {} 1 -> {subscribers} deliveries/s (lost {} / {})",
            qos as u8, lost[0], lost[1]
        );
        rows.push((name, median(h), median(m), true));
    }
    let quantiles = [(0.5, "p50"), (0.99, "p99")];
    let mut us = [[vec![], vec![]], [vec![], vec![]]];
    for _ in 0..plan.load.rounds {
        for (i, server) in servers.iter().enumerate() {
            let r = latency(
                server,
                plan.load.size,
                plan.load.rate,
                plan.load.latency_count,
            )?;
            r.print();
            for (q, (quantile, _)) in quantiles.iter().enumerate() {
                us[q][i].push(r.us(*quantile));
            }
        }
    }
    for ((_, label), [h, m]) in quantiles.iter().zip(us) {
        let name = format!("QoS 0 latency {label} us at {}/s", plan.load.rate);
        rows.push((name, median(h), median(m), false));
    }
    println!(
        "\n{:<52} {:>14} {:>14} {:>8}",
        "scenario", "herald", "mosquitto", "ratio"
    );
    let mut json = Vec::new();
    for (name, h, m, higher_is_better) in rows {
        // Above 1: Herald does better.
        let ratio = if higher_is_better { h / m } else { m / h };
        println!("{name:<52} {h:>14.1} {m:>14.1} {ratio:>8.2}");
        json.push(format!(
            "{{\"scenario\":\"{name}\",\"herald\":{h:.1},\"mosquitto\":{m:.1},\"ratio\":{ratio:.3}}}"
        ));
    }
    println!(
        "{{\"scenario\":\"mqtt_comparison\",\"rows\":[{}]}}",
        json.join(",")
    );
    Ok(())
}
