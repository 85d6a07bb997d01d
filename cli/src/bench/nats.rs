//! The topic scenarios against a NATS server, for `--compare-nats`: the
//! same message sizes, counts and bodies (sequence number and due time in
//! the first 16 bytes), counted and timed at the subscribers the same way,
//! so Herald's and NATS's figures come from one run on one machine.
//!
//! The NATS side speaks the protocol over a plain buffered socket: `PUB`
//! frames through a `BufWriter`, `MSG` frames parsed from a `BufReader`,
//! `PING`/`PONG` to know the server has seen everything sent before.

use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use herald_client::{Error, Result};

use super::latency::{LatencyReport, Timing};
use super::progress::Progress;
use super::throughput::ThroughputReport;
use super::{bench_topic, wait_for};

fn io(context: &str) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| Error::InvalidArgument(format!("NATS {context}: {e}"))
}

/// A connection after the handshake, split into its two halves.
struct Nats {
    reader: BufReader<TcpStream>,
    writer: BufWriter<TcpStream>,
}

impl Nats {
    fn connect(addr: SocketAddr) -> Result<Nats> {
        let stream = TcpStream::connect(addr).map_err(io("connect"))?;
        stream.set_nodelay(true).map_err(io("connect"))?;
        let reader =
            BufReader::with_capacity(256 * 1024, stream.try_clone().map_err(io("connect"))?);
        let writer = BufWriter::with_capacity(64 * 1024, stream);
        let mut nats = Nats { reader, writer };
        let info = nats.line()?;
        if !info.starts_with("INFO ") {
            return Err(Error::InvalidArgument(format!(
                "NATS greeted with {info:?}"
            )));
        }
        nats.send(b"CONNECT {\"verbose\":false,\"pedantic\":false,\"echo\":false}\r\n")?;
        nats.round_trip()?;
        Ok(nats)
    }

    fn line(&mut self) -> Result<String> {
        let mut line = String::new();
        if self.reader.read_line(&mut line).map_err(io("read"))? == 0 {
            return Err(Error::InvalidArgument("NATS closed the connection".into()));
        }
        Ok(line.trim_end().to_owned())
    }

    fn send(&mut self, bytes: &[u8]) -> Result<()> {
        self.writer.write_all(bytes).map_err(io("write"))
    }

    /// PING, then read until PONG: everything sent before has been handled.
    fn round_trip(&mut self) -> Result<()> {
        self.send(b"PING\r\n")?;
        self.writer.flush().map_err(io("write"))?;
        loop {
            match self.line()?.as_str() {
                "PONG" => return Ok(()),
                "PING" => self.send(b"PONG\r\n")?,
                l if l.starts_with("-ERR") => {
                    return Err(Error::InvalidArgument(format!("NATS: {l}")))
                }
                _ => {}
            }
        }
    }

    fn publish(&mut self, subject: &str, body: &[u8]) -> Result<()> {
        write!(self.writer, "PUB {subject} {}\r\n", body.len()).map_err(io("write"))?;
        self.writer.write_all(body).map_err(io("write"))?;
        self.writer.write_all(b"\r\n").map_err(io("write"))
    }

    /// Subscribes, and once the server has the subscription, hands each
    /// message body to `on_message` on a thread of its own until the
    /// connection ends.
    fn subscribe(
        mut self,
        subject: &str,
        mut on_message: impl FnMut(&[u8]) + Send + 'static,
    ) -> Result<()> {
        self.send(format!("SUB {subject} 1\r\n").as_bytes())?;
        self.round_trip()?;
        std::thread::spawn(move || {
            let mut body = Vec::new();
            loop {
                let Ok(line) = self.line() else {
                    return;
                };
                if let Some(rest) = line.strip_prefix("MSG ") {
                    let size: usize = rest
                        .rsplit(' ')
                        .next()
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0);
                    body.resize(size + 2, 0);
                    if self.reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    on_message(&body[..size]);
                } else if line == "PING" {
                    let pong = self
                        .send(b"PONG\r\n")
                        .and_then(|()| self.writer.flush().map_err(io("write")));
                    if pong.is_err() {
                        return;
                    }
                }
            }
        });
        Ok(())
    }
}

fn sequence(body: &[u8], at: usize) -> u64 {
    body.get(at..at + 8).map_or(u64::MAX, |b| {
        u64::from_be_bytes(b.try_into().unwrap_or_default())
    })
}

/// One publisher → `subscribers`, as fast as the publisher goes.
pub fn throughput(
    addr: SocketAddr,
    subscribers: usize,
    size: usize,
    count: u64,
) -> Result<ThroughputReport> {
    let subject = bench_topic("nats-throughput");
    let received = Arc::new(AtomicU64::new(0));
    let out_of_order = Arc::new(AtomicU64::new(0));
    let last = Arc::new(Mutex::new(None::<Instant>));
    for _ in 0..subscribers {
        let (r, o, l) = (received.clone(), out_of_order.clone(), last.clone());
        let mut expected = 0u64;
        Nats::connect(addr)?.subscribe(&subject, move |body| {
            let seq = sequence(body, 0);
            if seq != expected {
                o.fetch_add(1, Ordering::Relaxed);
            }
            expected = seq + 1;
            r.fetch_add(1, Ordering::Relaxed);
            *l.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        })?;
    }
    let mut publisher = Nats::connect(addr)?;
    let mut body = vec![0u8; size];
    let mut progress = Progress::new("publishing to NATS", count);
    let started = Instant::now();
    for seq in 0..count {
        body[..8].copy_from_slice(&seq.to_be_bytes());
        publisher.publish(&subject, &body)?;
        if seq % 65_536 == 0 {
            progress.update(seq);
        }
    }
    publisher.round_trip()?;
    let published = started.elapsed();
    progress.finish();
    let expected = count * subscribers as u64;
    let mut progress = Progress::new("receiving from NATS", expected);
    let got = wait_for(expected, &mut progress, || received.load(Ordering::Relaxed));
    progress.finish();
    let last = *last.lock().unwrap_or_else(|p| p.into_inner());
    Ok(ThroughputReport {
        system: "nats",
        publishers: 1,
        subscribers,
        size,
        count,
        received: got,
        out_of_order: out_of_order.load(Ordering::Relaxed),
        seconds: super::rate(started, last, got).0,
        published,
    })
}

/// One publisher at a fixed rate, one subscriber timing each message from
/// when it was due.
pub fn latency(addr: SocketAddr, size: usize, rate: u64, count: u64) -> Result<LatencyReport> {
    let subject = bench_topic("nats-latency");
    let timing = Timing::new()?;
    let t = timing.clone();
    Nats::connect(addr)?.subscribe(&subject, move |body| t.arrived(body))?;
    let mut publisher = Nats::connect(addr)?;
    timing.run("nats", rate, size, count, |body| {
        publisher.publish(&subject, body)?;
        // A lone message leaves at once, as the Herald client's does.
        publisher.writer.flush().map_err(io("write"))
    })
}
