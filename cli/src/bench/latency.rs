//! Latency: one publisher sends at a fixed rate, one subscriber records how
//! long each message took into an HDR histogram.
//!
//! Latency is measured from when a message was *due* to be sent, not from
//! when the publisher got round to it, so a stall on the publisher's side
//! shows up in the figures instead of hiding (coordinated omission).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use herald_client::{AckMode, Body, Destination, Error, Message, Result};

use super::progress::Progress;
use super::{bench_topic, wait_for};

/// Messages sent first and not recorded, while connections warm up.
const WARM_UP: u64 = 1000;

pub fn run(
    factory: &herald_client::ConnectionFactory,
    size: usize,
    rate: u64,
    count: u64,
) -> Result<()> {
    let destination = Destination::topic(bench_topic("latency"));
    let base = Instant::now();
    let histogram = Arc::new(Mutex::new(
        Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
            .map_err(|e| Error::InvalidArgument(format!("histogram: {e}")))?,
    ));
    let received = Arc::new(AtomicU64::new(0));

    let sub_connection = factory.create_connection()?;
    let sub_session = sub_connection.create_session(AckMode::Auto)?;
    let consumer = sub_session.create_consumer(&destination)?;
    let (h, r) = (histogram.clone(), received.clone());
    consumer.set_message_listener(move |m| {
        let now = base.elapsed().as_nanos() as u64;
        if let Body::Bytes(b) = &m.body {
            let mut stamp = [0u8; 16];
            stamp.copy_from_slice(&b[..16]);
            let seq = u64::from_be_bytes(stamp[..8].try_into().unwrap_or_default());
            let due = u64::from_be_bytes(stamp[8..].try_into().unwrap_or_default());
            if seq >= WARM_UP {
                let mut h = h.lock().unwrap_or_else(|p| p.into_inner());
                h.saturating_record(now.saturating_sub(due).max(1));
            }
        }
        r.fetch_add(1, Ordering::Relaxed);
    })?;

    let pub_connection = factory.create_connection()?;
    let pub_session = pub_connection.create_session(AckMode::Auto)?;
    let producer = pub_session.create_producer(&destination)?;
    let interval_ns = 1_000_000_000 / rate;
    let total = count + WARM_UP;
    let mut body = vec![0u8; size];
    let mut progress = Progress::new("latency", total);
    for seq in 0..total {
        let due = Duration::from_nanos(interval_ns * seq);
        let now = base.elapsed();
        if due > now {
            std::thread::sleep(due - now);
        }
        body[..8].copy_from_slice(&seq.to_be_bytes());
        body[8..16].copy_from_slice(&(due.as_nanos() as u64).to_be_bytes());
        producer.send(Message::bytes(Bytes::copy_from_slice(&body)))?;
        if seq % 1024 == 0 {
            progress.update(seq);
        }
    }
    let got = wait_for(total, &mut progress, || received.load(Ordering::Relaxed));
    progress.finish();
    let lost = total - got.min(total);
    let h = histogram.lock().unwrap_or_else(|p| p.into_inner());
    let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let (p50, p99, p999, max) = (us(0.5), us(0.99), us(0.999), h.max() as f64 / 1000.0);
    println!(
        "latency at {rate} msgs/s, {} B: p50 {p50:.1} us, p99 {p99:.1} us, p99.9 {p999:.1} us, max {max:.1} us \
         over {} messages; lost {lost}",
        body.len(),
        h.len()
    );
    println!(
        "{{\"scenario\":\"latency\",\"rate\":{rate},\"size\":{},\"count\":{count},\"recorded\":{},\"lost\":{lost},\
         \"p50_us\":{p50:.1},\"p99_us\":{p99:.1},\"p999_us\":{p999:.1},\"max_us\":{max:.1}}}",
        body.len(),
        h.len()
    );
    drop(h);
    pub_connection.close()?;
    sub_connection.close()?;
    Ok(())
}
