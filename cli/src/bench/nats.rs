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

use herald_client::{Error, Result};

use super::bench_topic;
use super::latency::{LatencyReport, Timing};
use super::throughput::{one_to_many, Arrivals, Sender, ThroughputReport};

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

/// One publisher → `subscribers`, as fast as the publisher goes.
pub fn throughput(
    addr: SocketAddr,
    subscribers: usize,
    size: usize,
    count: u64,
) -> Result<ThroughputReport> {
    throughput_on(
        addr,
        &bench_topic("nats-throughput"),
        subscribers,
        size,
        count,
    )
}

/// [`throughput`] on `subject`.
pub fn throughput_on(
    addr: SocketAddr,
    subject: &str,
    subscribers: usize,
    size: usize,
    count: u64,
) -> Result<ThroughputReport> {
    let subscribe = |mut arrivals: Arrivals| {
        Nats::connect(addr)?.subscribe(subject, move |body| arrivals.arrived(body))
    };
    let mut sender = sender(addr, subject)?;
    one_to_many("nats", (subscribers, size, count), subscribe, &mut sender)
}

/// A publisher to `subject` on its own connection.
pub fn sender(addr: SocketAddr, subject: &str) -> Result<SubjectSender> {
    Ok(SubjectSender {
        nats: Nats::connect(addr)?,
        subject: subject.to_owned(),
    })
}

/// A publisher and the subject it sends to.
pub struct SubjectSender {
    nats: Nats,
    subject: String,
}

impl Sender for SubjectSender {
    fn send(&mut self, body: &[u8]) -> Result<()> {
        self.nats.publish(&self.subject, body)
    }

    fn drain(&mut self) -> Result<()> {
        self.nats.round_trip()
    }
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
