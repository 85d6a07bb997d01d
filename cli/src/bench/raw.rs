//! Subscribers as plain sockets, for scenarios where client threads would
//! measure the bench rather than the server (thousands of connections,
//! hundreds of thousands of subscriptions): Herald's native frames or
//! NATS's text protocol, written in batches, with what comes back counted
//! as messages or confirmations.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use herald_client::{Error, Result};
use herald_protocol::frame::{Connect, Subscribe, Unsubscribe};
use herald_protocol::{Decoder, DestinationKind, Frame, FrameKind};

use super::process::io;

/// The two wire protocols the subscribers speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    Herald,
    Nats,
}

fn bad(e: herald_protocol::Error) -> Error {
    Error::InvalidArgument(e.to_string())
}

impl Wire {
    /// Opens a session.
    pub fn connect(self, out: &mut BytesMut) -> Result<()> {
        match self {
            Wire::Nats => {
                out.extend_from_slice(b"CONNECT {\"verbose\":false,\"pedantic\":false}\r\n");
                Ok(())
            }
            Wire::Herald => Frame::Connect(Connect {
                client_id: String::new(),
                user: String::new(),
                password: String::new(),
                // Silent for a minute at most (the server closes a
                // connection it has not heard from in twice that).
                heartbeat_ms: 60_000,
            })
            .encode(0, out)
            .map_err(bad),
        }
    }

    /// Subscribes `sid` to `pattern` (Herald: with `selector`, confirmed
    /// by a RECEIPT; NATS has no selectors).
    pub fn subscribe(
        self,
        sid: u32,
        pattern: &str,
        selector: &str,
        out: &mut BytesMut,
    ) -> Result<()> {
        match self {
            Wire::Nats => {
                out.extend_from_slice(format!("SUB {pattern} {sid}\r\n").as_bytes());
                Ok(())
            }
            Wire::Herald => {
                let mut subscribe = Subscribe::new(sid, DestinationKind::Topic, pattern);
                subscribe.selector = selector.to_owned();
                Frame::Subscribe(subscribe).encode(sid, out).map_err(bad)
            }
        }
    }

    /// Ends subscription `sid` (Herald: confirmed by a RECEIPT).
    pub fn unsubscribe(self, sid: u32, out: &mut BytesMut) -> Result<()> {
        match self {
            Wire::Nats => {
                out.extend_from_slice(format!("UNSUB {sid}\r\n").as_bytes());
                Ok(())
            }
            Wire::Herald => Frame::Unsubscribe(Unsubscribe::new(sid))
                .encode(sid, out)
                .map_err(bad),
        }
    }

    /// What confirms everything sent before it: nothing more for Herald,
    /// whose requests each get a RECEIPT; a PING for NATS (one PONG).
    pub fn barrier(self, out: &mut BytesMut) {
        if self == Wire::Nats {
            out.extend_from_slice(b"PING\r\n");
        }
    }
}

/// What a batch of input held.
#[derive(Debug, Default, Clone, Copy)]
pub struct Parsed {
    /// Messages delivered.
    pub messages: u64,
    /// RECEIPTs (Herald) or PONGs (NATS).
    pub confirmed: u64,
}

/// Bytes read from one connection and not yet parsed.
#[derive(Default)]
pub struct Inbox {
    pub buf: BytesMut,
}

impl Inbox {
    /// Takes the whole frames or lines off the buffer and counts them;
    /// NATS's PINGs are answered on `reply`, best effort. `Err` on an
    /// error from the server or what its protocol does not allow.
    pub fn parse(
        &mut self,
        wire: Wire,
        decoder: &Decoder,
        reply: &mut impl Write,
    ) -> std::result::Result<Parsed, String> {
        let mut parsed = Parsed::default();
        match wire {
            Wire::Herald => {
                while let Some(raw) = decoder
                    .decode(&mut self.buf)
                    .map_err(|e| e.error.to_string())?
                {
                    match raw.header.kind {
                        FrameKind::Message => parsed.messages += 1,
                        FrameKind::Receipt => parsed.confirmed += 1,
                        FrameKind::Error => {
                            let why = Frame::decode(raw)
                                .map_or_else(|e| e.to_string(), |f| format!("{f:?}"));
                            return Err(format!("the server refused: {why}"));
                        }
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
                        parsed.messages += 1;
                        continue;
                    }
                    match line {
                        b"PONG" => parsed.confirmed += 1,
                        b"PING" => drop(reply.write(b"PONG\r\n")),
                        l if l.starts_with(b"-ERR") => {
                            return Err(String::from_utf8_lossy(l).into_owned())
                        }
                        _ => {}
                    }
                    self.buf.advance(end + 2);
                }
            }
        }
        Ok(parsed)
    }
}

/// A blocking connection that writes batches and waits for them to be
/// confirmed.
pub struct Raw {
    pub stream: TcpStream,
    pub inbox: Inbox,
    pub wire: Wire,
    decoder: Decoder,
}

impl Raw {
    /// Connects and opens a session.
    pub fn open(addr: SocketAddr, wire: Wire) -> Result<Raw> {
        let stream = TcpStream::connect(addr).map_err(io("a raw connection"))?;
        stream.set_nodelay(true).map_err(io("a raw connection"))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(io("a raw connection"))?;
        let mut raw = Raw {
            stream,
            inbox: Inbox::default(),
            wire,
            decoder: Decoder::new(4 << 20),
        };
        let mut hello = BytesMut::new();
        wire.connect(&mut hello)?;
        raw.send(&hello)?;
        Ok(raw)
    }

    /// Writes `batch`.
    pub fn send(&mut self, batch: &[u8]) -> Result<()> {
        self.stream.write_all(batch).map_err(io("a raw connection"))
    }

    /// Reads until `confirmations` RECEIPTs or PONGs have come; returns
    /// the messages that came meanwhile.
    pub fn await_confirmed(&mut self, confirmations: u64) -> Result<u64> {
        let mut total = Parsed::default();
        let mut chunk = vec![0u8; 64 * 1024];
        while total.confirmed < confirmations {
            let parsed = self.read_some(&mut chunk)?;
            total.confirmed += parsed.confirmed;
            total.messages += parsed.messages;
        }
        Ok(total.messages)
    }

    /// One read into `chunk`, and what it completed.
    fn read_some(&mut self, chunk: &mut [u8]) -> Result<Parsed> {
        let n = self.stream.read(chunk).map_err(io("a raw connection"))?;
        if n == 0 {
            return Err(Error::InvalidArgument(
                "the server closed a raw connection".into(),
            ));
        }
        self.inbox.buf.extend_from_slice(&chunk[..n]);
        self.inbox
            .parse(self.wire, &self.decoder, &mut self.stream)
            .map_err(Error::InvalidArgument)
    }
}

/// The raw driver, the same for both servers: one publisher writing
/// ready-made messages (Herald's SEND frames, NATS's `PUB`s) in 64 KiB
/// writes, and `subscribers` plain sockets, each counting what arrives on
/// a thread of its own. Deliveries per second, from the first write to
/// the last arrival. Nothing in it costs per message but the parse that
/// finds each message's end, so the server's cost is what it measures.
/// Herald's messages carry `message_id` (NATS's have none).
pub fn drive(
    addr: SocketAddr,
    wire: Wire,
    (size, count): (usize, u64),
    subscribers: usize,
    message_id: &str,
) -> Result<f64> {
    let topic = super::bench_topic("raw");
    let mut counting = Vec::with_capacity(subscribers);
    for sid in 0..subscribers as u32 {
        let mut subscriber = Raw::open(addr, wire)?;
        let mut subscribe = BytesMut::new();
        wire.subscribe(sid + 1, &topic, "", &mut subscribe)?;
        wire.barrier(&mut subscribe);
        subscriber.send(&subscribe)?;
        subscriber.await_confirmed(1)?;
        counting.push(std::thread::spawn(move || -> Result<std::time::Instant> {
            let mut chunk = vec![0u8; 256 * 1024];
            let mut got = 0;
            subscriber
                .stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .map_err(io("a raw subscriber"))?;
            while got < count {
                got += subscriber.read_some(&mut chunk)?.messages;
            }
            Ok(std::time::Instant::now())
        }));
    }
    let mut publisher = Raw::open(addr, wire)?;
    let frame = message_frame(wire, &topic, size, message_id)?;
    let per_batch = (64 * 1024 / frame.len()).max(1) as u64;
    let batch = frame.repeat(per_batch as usize);
    let began = std::time::Instant::now();
    let mut sent = 0;
    while sent < count {
        let n = per_batch.min(count - sent);
        publisher.send(&batch[..n as usize * frame.len()])?;
        sent += n;
    }
    let mut last = began;
    for c in counting {
        last = last.max(c.join().unwrap_or_else(|p| std::panic::resume_unwind(p))?);
    }
    Ok((count * subscribers as u64) as f64 / last.duration_since(began).as_secs_f64())
}

/// One message of `size` bytes to `topic`, as `wire` sends it.
fn message_frame(wire: Wire, topic: &str, size: usize, message_id: &str) -> Result<BytesMut> {
    let body = vec![7u8; size];
    let mut frame = BytesMut::new();
    match wire {
        Wire::Nats => {
            frame.extend_from_slice(format!("PUB {topic} {size}\r\n").as_bytes());
            frame.extend_from_slice(&body);
            frame.extend_from_slice(b"\r\n");
        }
        Wire::Herald => {
            let mut message = herald_client::Message::bytes(bytes::Bytes::from(body));
            message.set_destination(Some(herald_client::Destination::topic(topic)));
            message.set_message_id(message_id);
            herald_protocol::codec::encode_frame(&mut frame, FrameKind::Send, 0, |d| {
                message.encode(d)
            })
            .map_err(bad)?;
        }
    }
    Ok(frame)
}
