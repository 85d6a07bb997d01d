//! Latency: one publisher sends at a fixed rate, one subscriber records how
//! long each message took into an HDR histogram.
//!
//! Latency is measured from when a message was *due* to be sent, not from
//! when the publisher got round to it, so a stall on the publisher's side
//! shows up in the figures instead of hiding (coordinated omission). It is
//! also measured from when it was sent: the publisher sleeps until each
//! message is due, and a sleep on Linux ends tens of microseconds late
//! (the timer slack, then a wake-up on a busy core), which the first
//! figure counts against the system and the second does not.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use herald_client::{AckMode, Body, Destination, Error, Message, Result};

use super::progress::Progress;
use super::{bench_topic, wait_for};

/// Messages sent first and not recorded, while connections warm up.
pub const WARM_UP: u64 = 1000;

/// What a latency run measured.
pub struct LatencyReport {
    /// "herald", "nats", or "floor" (the machine's, [`floor`]).
    pub system: &'static str,
    pub rate: u64,
    pub size: usize,
    pub count: u64,
    pub lost: u64,
    /// Nanoseconds from due to arrival.
    pub histogram: Histogram<u64>,
    /// Nanoseconds from the send to arrival.
    pub from_sent: Histogram<u64>,
}

impl LatencyReport {
    /// A quantile in microseconds, from when each message was due.
    pub fn us(&self, q: f64) -> f64 {
        self.histogram.value_at_quantile(q) as f64 / 1000.0
    }

    /// A quantile in microseconds, from when each message was sent.
    pub fn sent_us(&self, q: f64) -> f64 {
        self.from_sent.value_at_quantile(q) as f64 / 1000.0
    }

    /// Prints a line for people and a JSON line for scripts.
    pub fn print(&self) {
        let (system, rate, size, count, lost) =
            (self.system, self.rate, self.size, self.count, self.lost);
        let (p50, p99, p999) = (self.us(0.5), self.us(0.99), self.us(0.999));
        let (s50, s99, s999) = (self.sent_us(0.5), self.sent_us(0.99), self.sent_us(0.999));
        let max = self.histogram.max() as f64 / 1000.0;
        let recorded = self.histogram.len();
        println!(
            "{system} latency at {rate} msgs/s, {size} B: p50 {p50:.1} us, p99 {p99:.1} us, p99.9 {p999:.1} us, \
             max {max:.1} us over {recorded} messages; lost {lost}; from the send: p50 {s50:.1} us, \
             p99 {s99:.1} us, p99.9 {s999:.1} us"
        );
        println!(
            "{{\"scenario\":\"latency\",\"system\":\"{system}\",\"rate\":{rate},\"size\":{size},\"count\":{count},\
             \"recorded\":{recorded},\"lost\":{lost},\"p50_us\":{p50:.1},\"p99_us\":{p99:.1},\"p999_us\":{p999:.1},\
             \"max_us\":{max:.1},\"p50_sent_us\":{s50:.1},\"p99_sent_us\":{s99:.1},\"p999_sent_us\":{s999:.1}}}"
        );
    }
}

/// The timing of one latency run, shared by the subscriber (which records
/// arrivals) and the publisher (which paces the sends).
#[derive(Clone)]
pub struct Timing {
    base: Instant,
    /// From due to arrival, and from the send to arrival.
    histograms: Arc<Mutex<[Histogram<u64>; 2]>>,
    received: Arc<AtomicU64>,
    /// How late each send was (ns after it was due), by sequence number
    /// modulo [`LATE_SLOTS`]: a message arrives long before its slot is
    /// used again (6.5 s at 10,000 msgs/s).
    late: Arc<[AtomicU64]>,
}

/// Sends whose lateness [`Timing`] remembers.
const LATE_SLOTS: usize = 1 << 16;

impl Timing {
    /// A run starting now.
    pub fn new() -> Result<Timing> {
        let histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
            .map_err(|e| Error::InvalidArgument(format!("histogram: {e}")))?;
        Ok(Timing {
            base: Instant::now(),
            histograms: Arc::new(Mutex::new([histogram.clone(), histogram])),
            received: Arc::default(),
            late: (0..LATE_SLOTS).map(|_| AtomicU64::new(0)).collect(),
        })
    }

    /// Records an arrival whose body starts with its sequence number and
    /// the time it was due (nanoseconds since the start), both big-endian.
    pub fn arrived(&self, body: &[u8]) {
        let now = self.base.elapsed().as_nanos() as u64;
        let word = |at: usize| {
            body.get(at..at + 8)
                .map_or(0, |b| u64::from_be_bytes(b.try_into().unwrap_or_default()))
        };
        let seq = word(0);
        if seq >= WARM_UP {
            let from_due = now.saturating_sub(word(8)).max(1);
            let late = self.late[seq as usize % LATE_SLOTS].load(Ordering::Acquire);
            let mut h = self.histograms.lock().unwrap_or_else(|p| p.into_inner());
            h[0].saturating_record(from_due);
            h[1].saturating_record(from_due.saturating_sub(late).max(1));
        }
        self.received.fetch_add(1, Ordering::Relaxed);
    }

    /// Sends `count` messages (after the warm-up ones) of `size` bytes,
    /// each at its due time, through `send`; waits for them to arrive and
    /// reports.
    pub fn run(
        &self,
        system: &'static str,
        rate: u64,
        size: usize,
        count: u64,
        mut send: impl FnMut(&[u8]) -> Result<()>,
    ) -> Result<LatencyReport> {
        let interval_ns = 1_000_000_000 / rate;
        let total = count + WARM_UP;
        let mut body = vec![0u8; size];
        let mut progress = Progress::new("latency", total);
        for seq in 0..total {
            let due = Duration::from_nanos(interval_ns * seq);
            let now = self.base.elapsed();
            if due > now {
                std::thread::sleep(due - now);
            }
            let late = self.base.elapsed().saturating_sub(due).as_nanos() as u64;
            self.late[seq as usize % LATE_SLOTS].store(late, Ordering::Release);
            body[..8].copy_from_slice(&seq.to_be_bytes());
            body[8..16].copy_from_slice(&(due.as_nanos() as u64).to_be_bytes());
            send(&body)?;
            if seq % 1024 == 0 {
                progress.update(seq);
            }
        }
        let got = wait_for(total, &mut progress, || {
            self.received.load(Ordering::Relaxed)
        });
        progress.finish();
        let [histogram, from_sent] = self
            .histograms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        Ok(LatencyReport {
            system,
            rate,
            size,
            count,
            lost: total - got.min(total),
            histogram,
            from_sent,
        })
    }
}

/// One Herald publisher at `rate`, one subscriber.
pub fn run(
    factory: &herald_client::ConnectionFactory,
    size: usize,
    rate: u64,
    count: u64,
) -> Result<LatencyReport> {
    let destination = Destination::topic(bench_topic("latency"));
    let timing = Timing::new()?;
    let sub_connection = factory.create_connection()?;
    let sub_session = sub_connection.create_session(AckMode::Auto)?;
    let consumer = sub_session.create_consumer(&destination)?;
    let t = timing.clone();
    consumer.set_message_listener(move |m| {
        if let Body::Bytes(b) = &m.body {
            t.arrived(b);
        }
    })?;
    let pub_connection = factory.create_connection()?;
    let pub_session = pub_connection.create_session(AckMode::Auto)?;
    let producer = pub_session.create_producer(&destination)?;
    let report = timing.run("herald", rate, size, count, |body| {
        producer.send(Message::bytes(Bytes::copy_from_slice(body)).non_persistent())
    })?;
    pub_connection.close()?;
    sub_connection.close()?;
    Ok(report)
}

/// The machine's floor for the same path: the publisher writes to a
/// loopback socket, a relay thread (blocking reads, one write for each)
/// passes the bytes on to the subscriber's socket, and the subscriber
/// reads each message whole. Three threads and two hops, as through a
/// broker, with nothing done between them: no server does better here.
pub fn floor(size: usize, rate: u64, count: u64) -> Result<LatencyReport> {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    let io = |what: &'static str| move |e: std::io::Error| Error::io(what, e);
    let inward = TcpListener::bind("127.0.0.1:0").map_err(io("the floor's relay"))?;
    let outward = TcpListener::bind("127.0.0.1:0").map_err(io("the floor's relay"))?;
    let mut publisher = TcpStream::connect(inward.local_addr().map_err(io("an address"))?)
        .map_err(io("the floor's publisher"))?;
    let mut subscriber = TcpStream::connect(outward.local_addr().map_err(io("an address"))?)
        .map_err(io("the floor's subscriber"))?;
    let (mut from, _) = inward.accept().map_err(io("the floor's relay"))?;
    let (mut to, _) = outward.accept().map_err(io("the floor's relay"))?;
    for s in [&publisher, &to] {
        s.set_nodelay(true).map_err(io("TCP_NODELAY"))?;
    }
    let relay = std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = from.read(&mut buf) {
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
    });
    let timing = Timing::new()?;
    let t = timing.clone();
    let total = count + WARM_UP;
    let reader = std::thread::spawn(move || {
        let mut body = vec![0u8; size];
        for _ in 0..total {
            if subscriber.read_exact(&mut body).is_err() {
                break;
            }
            t.arrived(&body);
        }
    });
    let report = timing.run("floor", rate, size, count, |body| {
        publisher
            .write_all(body)
            .map_err(io("the floor's publisher"))
    })?;
    drop(publisher);
    let _ = (reader.join(), relay.join());
    Ok(report)
}
