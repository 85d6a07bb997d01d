//! `--mode memory`: the server's resident memory (through the management
//! API, `--admin`) idle, every half second during a burst (topic 1 → 1,
//! then 1 → --fanout, --count messages each), and every second for ten
//! seconds after it. A server that keeps a burst's memory looks like a
//! leak to whoever watches it; the target (issue 29) is back within 2 ×
//! idle within 10 s.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use herald_client::{ConnectionFactory, Result};

use super::connections::footprint;
use super::throughput;
use crate::target::Target;

const MB: f64 = 1024.0 * 1024.0;

/// Runs the burst and prints the resident memory over time.
pub fn run(target: &Target, factory: &ConnectionFactory, load: &super::Load) -> Result<()> {
    let rss = || footprint(target).map(|(rss, _)| rss);
    let idle = rss()?;
    let start = Instant::now();
    let samples = Mutex::new(vec![(0.0, idle)]);
    let burst_over = AtomicBool::new(false);
    let note = |rss: u64| {
        let mut s = samples.lock().unwrap_or_else(|e| e.into_inner());
        s.push((start.elapsed().as_secs_f64(), rss));
    };
    std::thread::scope(|scope| -> Result<()> {
        scope.spawn(|| {
            while !burst_over.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(500));
                if let Ok(r) = rss() {
                    note(r);
                }
            }
        });
        let burst = [1, load.fanout]
            .map(|subscribers| throughput::run(factory, 1, subscribers, load.size, load.count));
        burst_over.store(true, Ordering::Release);
        for report in burst {
            report?.print();
        }
        Ok(())
    })?;
    let ended = start.elapsed().as_secs_f64();
    for _ in 0..10 {
        std::thread::sleep(Duration::from_secs(1));
        note(rss()?);
    }
    let samples = samples.into_inner().unwrap_or_else(|e| e.into_inner());
    let peak = samples.iter().map(|s| s.1).max().unwrap_or(idle);
    let last = samples.last().map_or(idle, |s| s.1);
    for (at, rss) in &samples {
        let when = if *at <= ended { "burst" } else { "after" };
        println!("  +{at:5.1} s  {when}  RSS {:7.1} MB", *rss as f64 / MB);
    }
    let ratio = last as f64 / idle as f64;
    println!(
        "memory: idle {:.1} MB, peak {:.1} MB, 10 s after the burst {:.1} MB ({ratio:.2} x idle)",
        idle as f64 / MB,
        peak as f64 / MB,
        last as f64 / MB
    );
    let series: Vec<String> = samples
        .iter()
        .map(|(at, rss)| format!("[{at:.1},{rss}]"))
        .collect();
    println!(
        "{{\"scenario\":\"memory\",\"idle\":{idle},\"peak\":{peak},\"after_10s\":{last},\"ratio\":{ratio:.3},\"burst_ended_s\":{ended:.1},\"samples\":[{}]}}",
        series.join(",")
    );
    Ok(())
}
