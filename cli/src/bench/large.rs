//! `--mode large`: 64 KiB and 1 MiB bodies, topic 1 → 1 and 1 → --fanout,
//! in MB/s delivered against what a plain socket pair moves over loopback
//! on this machine, measured here first. With --compare-nats the same
//! runs go to NATS too (its default max_payload is 1 MiB, so both sizes
//! fit). The target (issue 29) is half the loopback bandwidth end to end.
//! Then large messages proper: one body of 100 MiB and one of --volume
//! MiB (or --volume alone if it is less) streamed through a queue (the server keeps it in a file), with how
//! much this process's memory grew when the server is embedded (issue 50:
//! half the loopback, memory bounded).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Instant;

use herald_client::{AckMode, Body, ConnectionFactory, Destination, Error, Message, Result};

use super::{median, nats, throughput};

/// The body sizes measured.
const SIZES: [usize; 2] = [64 * 1024, 1024 * 1024];

/// The chunk the socket pair writes and reads at a time.
const CHUNK: usize = 256 * 1024;

/// What one run publishes, in bytes per scenario.
pub struct Plan {
    pub volume: u64,
    pub fanout: usize,
    pub rounds: u32,
    pub nats: Option<SocketAddr>,
    /// Whether the server runs in this process, whose memory is then the
    /// server's (and the bench's, a few chunks).
    pub embedded: bool,
}

/// Endless zeros, as a large body to stream.
struct Zeros;

impl Read for Zeros {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        buf.fill(0);
        Ok(buf.len())
    }
}

/// This process's resident memory in bytes, from `/proc`.
pub(super) fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// One body of `len` bytes streamed through a queue and read to the end
/// by a consumer on another connection: MB/s from the first byte sent to
/// the last read, and the most this process's memory grew meanwhile.
fn streamed(factory: &ConnectionFactory, len: u64) -> Result<(f64, u64)> {
    let queue = Destination::queue("bench.large.streamed");
    let receiving = factory.create_connection()?;
    let consumer = receiving
        .create_session(AckMode::Auto)?
        .create_consumer(&queue)?;
    let sending = factory.create_connection()?;
    let producer = sending
        .create_session(AckMode::Auto)?
        .create_producer(&queue)?;
    let base = rss();
    let started = Instant::now();
    let sender = std::thread::spawn(move || {
        producer.send_stream(Message::new(Body::Empty).non_persistent(), len, Zeros)
    });
    let m = consumer
        .receive(std::time::Duration::from_secs(60))?
        .ok_or_else(|| Error::InvalidArgument("the large message did not come".into()))?;
    let mut body = consumer.body(&m)?;
    let mut buf = vec![0u8; CHUNK];
    let (mut got, mut most) = (0u64, base);
    loop {
        match body.read(&mut buf).map_err(io("read the body"))? {
            0 => break,
            n => got += n as u64,
        }
        if got % (64 << 20) < CHUNK as u64 {
            most = most.max(rss());
        }
    }
    let seconds = started.elapsed().as_secs_f64().max(1e-9);
    sender
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))?;
    if got != len {
        return Err(Error::InvalidArgument(format!(
            "{got} of the body's {len} bytes came"
        )));
    }
    Ok((
        len as f64 / seconds / 1e6,
        most.max(rss()).saturating_sub(base),
    ))
}

fn io(context: &'static str) -> impl FnOnce(std::io::Error) -> Error {
    move |e| Error::InvalidArgument(format!("loopback {context}: {e}"))
}

/// MB/s through one TCP connection over loopback: one thread writes
/// `volume` bytes in [`CHUNK`]s, this one reads them.
pub fn loopback_bandwidth(volume: u64) -> Result<f64> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(io("bind"))?;
    let addr = listener.local_addr().map_err(io("bind"))?;
    let writer = std::thread::spawn(move || -> std::io::Result<()> {
        let mut stream = TcpStream::connect(addr)?;
        let chunk = vec![0x5au8; CHUNK];
        let mut left = volume;
        while left > 0 {
            let n = left.min(CHUNK as u64) as usize;
            stream.write_all(&chunk[..n])?;
            left -= n as u64;
        }
        Ok(())
    });
    let (mut stream, _) = listener.accept().map_err(io("accept"))?;
    let mut buf = vec![0u8; CHUNK];
    let started = Instant::now();
    let mut got = 0u64;
    while got < volume {
        match stream.read(&mut buf).map_err(io("read"))? {
            0 => break,
            n => got += n as u64,
        }
    }
    let seconds = started.elapsed().as_secs_f64().max(1e-9);
    writer
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
        .map_err(io("write"))?;
    Ok(got as f64 / seconds / 1e6)
}

/// Runs every size and fan-out, `rounds` times each, and prints MB/s
/// delivered (all subscribers together) against the loopback's.
pub fn run(factory: &ConnectionFactory, plan: &Plan) -> Result<()> {
    let loopback = median(
        (0..plan.rounds)
            .map(|_| loopback_bandwidth(plan.volume))
            .collect::<Result<Vec<_>>>()?,
    );
    println!("loopback: {loopback:.0} MB/s through one socket pair ({CHUNK} B writes)");
    let mut rows = Vec::new();
    for size in SIZES {
        let count = (plan.volume / size as u64).max(16);
        for subscribers in [1, plan.fanout] {
            let (mut herald, mut other, mut lost) = (vec![], vec![], 0);
            for _ in 0..plan.rounds {
                let h = throughput::run(factory, 1, subscribers, size, count)?;
                h.print();
                lost += h.lost();
                herald.push(h.deliveries_per_sec() * size as f64 / 1e6);
                if let Some(addr) = plan.nats {
                    let n = nats::throughput(addr, subscribers, size, count)?;
                    n.print();
                    other.push(n.deliveries_per_sec() * size as f64 / 1e6);
                }
            }
            rows.push((size, subscribers, median(herald), median(other), lost));
        }
    }
    println!(
        "\n{:<24} {:>12} {:>12} {:>12} {:>8}",
        "scenario", "herald MB/s", "of loopback", "nats MB/s", "ratio"
    );
    let mut json = Vec::new();
    for (size, subscribers, herald, nats, lost) in rows {
        let name = format!("{} KiB 1 -> {subscribers}", size / 1024);
        let share = herald / loopback;
        let (nats_text, ratio_text) = match plan.nats {
            Some(_) => (format!("{nats:.0}"), format!("{:.2}", herald / nats)),
            None => ("-".into(), "-".into()),
        };
        println!(
            "{name:<24} {herald:>12.0} {:>11.0}% {nats_text:>12} {ratio_text:>8}{}",
            share * 100.0,
            match lost {
                0 => String::new(),
                n => format!("  (lost {n})"),
            }
        );
        json.push(format!(
            "{{\"size\":{size},\"subscribers\":{subscribers},\"herald_mb_per_sec\":{herald:.1},\
             \"of_loopback\":{share:.3},\"nats_mb_per_sec\":{nats:.1},\"lost\":{lost}}}"
        ));
    }
    println!(
        "\n{:<24} {:>12} {:>12} {:>16}",
        "streamed (one body)", "herald MB/s", "of loopback", "memory grew MiB"
    );
    // 100 MiB and --volume, or --volume alone if it is less.
    let mut sizes = vec![(100 << 20).min(plan.volume), plan.volume];
    sizes.dedup();
    for len in sizes {
        let (mut rates, mut grown) = (vec![], 0);
        for _ in 0..plan.rounds {
            let (rate, g) = streamed(factory, len)?;
            rates.push(rate);
            grown = grown.max(g);
        }
        let rate = median(rates);
        let grown_text = match plan.embedded {
            true => format!("{}", grown >> 20),
            false => "-".into(),
        };
        println!(
            "{:<24} {rate:>12.0} {:>11.0}% {grown_text:>16}",
            format!("{} MiB", len >> 20),
            rate / loopback * 100.0
        );
        json.push(format!(
            "{{\"streamed\":{len},\"herald_mb_per_sec\":{rate:.1},\"of_loopback\":{:.3},\"memory_grew\":{}}}",
            rate / loopback,
            match plan.embedded {
                true => grown.to_string(),
                false => "null".into(),
            }
        ));
    }
    println!(
        "{{\"scenario\":\"large\",\"loopback_mb_per_sec\":{loopback:.1},\"rows\":[{}]}}",
        json.join(",")
    );
    Ok(())
}
