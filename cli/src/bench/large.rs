//! `--mode large`: 64 KiB and 1 MiB bodies, topic 1 → 1 and 1 → --fanout,
//! in MB/s delivered against what a plain socket pair moves over loopback
//! on this machine, measured here first. With --compare-nats the same
//! runs go to NATS too (its default max_payload is 1 MiB, so both sizes
//! fit). The target (issue 29) is half the loopback bandwidth end to end.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Instant;

use herald_client::{ConnectionFactory, Error, Result};

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
        "{{\"scenario\":\"large\",\"loopback_mb_per_sec\":{loopback:.1},\"rows\":[{}]}}",
        json.join(",")
    );
    Ok(())
}
