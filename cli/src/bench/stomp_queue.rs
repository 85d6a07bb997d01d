//! A queue 1 → N over STOMP, against any STOMP broker: Herald's listener,
//! or ActiveMQ's for the side-by-side in docs/benchmarks.md, with the same
//! client (the crate's own codec on raw sockets). Plain, with the messages
//! in `JMSXGroupID` groups, and with each consumer at a priority of its
//! own (`activemq.priority`, which Herald reads too). Every message is
//! counted at its consumer, and a group found at two consumers or out of
//! order is counted as a violation.

use std::collections::HashMap;
use std::io::{BufWriter, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use herald_client::{Error, Result};
use herald_protocol::stomp::StompFrame;

use super::progress::Progress;
use super::stomp::{connect, expect_receipt, io, next_frame, within_window};
use super::{bench_topic, wait_for};

/// What each consumer asks the broker to send ahead.
const PREFETCH: &str = "1000";

/// One run's shape.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub consumers: usize,
    pub size: usize,
    pub count: u64,
    /// Messages in this many groups; 0 = none (the messages then carry a
    /// header as long, so that the two differ in what the broker does).
    pub groups: usize,
    /// Each consumer at a priority of its own.
    pub priorities: bool,
}

/// Per group: the consumer that had it and the last number it saw.
type Owners = Arc<Mutex<HashMap<String, (usize, u64)>>>;

/// Runs `plan` against the STOMP broker at `addr`; returns the rate at
/// the consumers, messages a second.
pub fn run(addr: SocketAddr, plan: Plan) -> Result<f64> {
    let queue = format!("/queue/{}", bench_topic("stomp-queue"));
    let received = Arc::new(AtomicU64::new(0));
    let violations = Arc::new(AtomicU64::new(0));
    let last = Arc::new(Mutex::new(None::<Instant>));
    let owners = Owners::default();
    let mut readers = Vec::new();
    let mut sockets = Vec::new();
    for k in 0..plan.consumers {
        let (mut stream, decoder, mut inbound) = connect(addr)?;
        let mut subscribe = StompFrame::new("SUBSCRIBE")
            .header("id", "0")
            .header("destination", queue.as_str())
            .header("ack", "auto")
            .header("activemq.prefetchSize", PREFETCH)
            .header("receipt", "subscribed");
        if plan.priorities {
            subscribe = subscribe.header("activemq.priority", k.to_string());
        }
        let mut buf = BytesMut::new();
        subscribe.encode(true, &mut buf);
        stream.write_all(&buf).map_err(io("SUBSCRIBE"))?;
        expect_receipt(&mut stream, &decoder, &mut inbound)?;
        sockets.push(stream.try_clone().map_err(io("SUBSCRIBE"))?);
        let (received, violations, last, owners) = (
            received.clone(),
            violations.clone(),
            last.clone(),
            owners.clone(),
        );
        readers.push(std::thread::spawn(move || loop {
            let f = match next_frame(&mut stream, &decoder, &mut inbound) {
                Ok(f) => f,
                // Closed once the run is over.
                Err(_) => return,
            };
            if f.command != "MESSAGE" {
                continue;
            }
            if let (Some(group), Some(n)) = (
                f.get("JMSXGroupID"),
                f.get("n").and_then(|n| n.parse::<u64>().ok()),
            ) {
                let mut owners = owners.lock().unwrap_or_else(|p| p.into_inner());
                let seen = owners.entry(group.to_owned()).or_insert((k, n));
                if seen.0 != k || seen.1 > n {
                    violations.fetch_add(1, Ordering::Relaxed);
                }
                *seen = (k, n);
            }
            received.fetch_add(1, Ordering::Relaxed);
            *last.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        }));
    }
    let (publisher, _, _) = connect(addr)?;
    let mut out = BufWriter::with_capacity(64 * 1024, publisher);
    let body = Bytes::from(vec![7u8; plan.size]);
    let (tag, width) = match plan.groups {
        0 => ("XJMSGroupID", 8),
        _ => ("JMSXGroupID", 0),
    };
    let started = Instant::now();
    let mut progress = Progress::new("stomp queue", plan.count);
    let mut frame = BytesMut::new();
    for i in 0..plan.count {
        within_window(i, &received, &mut out, &mut progress)?;
        let group = match plan.groups {
            0 => format!("{:0width$}", 0),
            g => format!("g{}", i % g as u64),
        };
        frame.clear();
        StompFrame::new("SEND")
            .header("destination", queue.as_str())
            .header("persistent", "false")
            .header("n", i.to_string())
            .header(tag, group)
            .body(body.clone())
            .encode(true, &mut frame);
        out.write_all(&frame).map_err(io("SEND"))?;
    }
    out.flush().map_err(io("SEND"))?;
    let got = wait_for(plan.count, &mut progress, || {
        received.load(Ordering::Relaxed)
    });
    progress.finish();
    let last = *last.lock().unwrap_or_else(|p| p.into_inner());
    let (seconds, rate) = super::rate(started, last, got);
    let violations = violations.load(Ordering::Relaxed);
    println!(
        "stomp queue 1 -> {}, {} B, {} groups, priorities {}: {got} of {} in {seconds:.3} s: \
         {rate:.0} msgs/s; group violations {violations}",
        plan.consumers, plan.size, plan.groups, plan.priorities, plan.count
    );
    drop(out);
    for s in sockets {
        let _ = s.shutdown(std::net::Shutdown::Both);
    }
    for r in readers {
        let _ = r.join();
    }
    if got < plan.count {
        return Err(Error::InvalidArgument(format!(
            "{} of {} messages arrived",
            got, plan.count
        )));
    }
    Ok(rate)
}
