//! `--mode client`: what the client library costs applications. Topic
//! 1 → 1 on a herald-server that the bench starts, in alternating rounds:
//! once with the Rust client at both ends (as `--mode throughput`), once
//! with a raw driver (a publisher writing ready-made SEND frames in 64 KiB
//! writes, their message ids as long as the client's, a subscriber
//! counting MESSAGE frames off a plain socket). For
//! each: messages per second, and the CPU time per message of this
//! process (both ends) and of the server, read from /proc. The targets
//! (issue 29): the client within 10 % of the raw driver, and its CPU per
//! message no more than the server's. With `--pin` the server and this
//! process each have a vCPU of their own, which measures the library's
//! own ceiling rather than its share of two vCPUs it competes for.

use herald_client::{ConnectionFactory, Error, Result};

use super::process::{io, start_herald};
use super::raw::{self, Wire};
use super::{median, throughput};

/// What one run is asked to do.
pub struct Plan {
    pub size: usize,
    pub count: u64,
    pub rounds: u32,
    /// The server on the first vCPU, this process on the second.
    pub pin: bool,
}

/// Holds every thread of process `pid` to vCPU `cpu` (threads it starts
/// later inherit it), with util-linux's `taskset`.
fn pin(pid: u32, cpu: u32) -> Result<()> {
    let status = std::process::Command::new("taskset")
        .args(["--all-tasks", "--pid", "--cpu-list"])
        .arg(cpu.to_string())
        .arg(pid.to_string())
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(io("running taskset (util-linux) for --pin"))?;
    if !status.success() {
        return Err(Error::InvalidArgument(format!(
            "--pin: taskset could not hold process {pid} to vCPU {cpu} ({status}); it needs two"
        )));
    }
    Ok(())
}

/// CPU seconds (user and system) that process `pid` has used.
pub(super) fn cpu_seconds(pid: &str) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(io("reading /proc/PID/stat"))?;
    stat_seconds(&stat)
        .ok_or_else(|| Error::InvalidArgument(format!("no CPU times in /proc/{pid}/stat")))
}

/// The CPU seconds (user and system) in a process's or a thread's
/// `/proc/.../stat` line.
pub(super) fn stat_seconds(stat: &str) -> Option<f64> {
    // The fields after the command's closing parenthesis; utime and stime
    // are the 14th and 15th of the whole line, in clock ticks.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    Some((ticks(11)? + ticks(12)?) / CLOCK_TICKS)
}

/// Linux's `USER_HZ`, the unit of /proc's CPU times, on every
/// architecture it runs on.
const CLOCK_TICKS: f64 = 100.0;

/// One round's figures.
struct Round {
    rate: f64,
    /// Microseconds of CPU per message: this process, the server.
    here_us: f64,
    server_us: f64,
}

/// Runs `run` (which returns the messages per second) and times the CPU
/// both processes spent on it.
fn timed(server: u32, count: u64, run: impl FnOnce() -> Result<f64>) -> Result<Round> {
    let server = server.to_string();
    let (here, there) = (cpu_seconds("self")?, cpu_seconds(&server)?);
    let rate = run()?;
    let per = |before: f64, now: f64| (now - before) / count as f64 * 1e6;
    Ok(Round {
        rate,
        here_us: per(here, cpu_seconds("self")?),
        server_us: per(there, cpu_seconds(&server)?),
    })
}

/// Alternates the client and the raw driver, and prints the medians.
pub fn run(plan: &Plan) -> Result<()> {
    let (server, _) = start_herald("client", &["herald-server listening on "])?;
    let pid = server.child.id();
    if plan.pin {
        // Before this process starts its clients' threads, which inherit
        // its vCPU.
        pin(pid, 0)?;
        pin(std::process::id(), 1)?;
        println!("pinned: the server to vCPU 0, this process to vCPU 1");
    }
    let factory = ConnectionFactory::new(&format!("herald://{}", server.addr))?;
    // The driver's messages as long as the client's: the connection's id,
    // the producer's number and a number of as many digits as most of the
    // run's, so that the server carries the same bytes for both.
    let message_id = format!(
        "ID:{}-1-{}",
        factory.create_connection()?.connection_id(),
        plan.count / 2
    );
    println!(
        "the raw driver's messages carry the id {message_id}, as long as most of the client's"
    );
    let (mut client, mut driver) = (Vec::new(), Vec::new());
    for _ in 0..plan.rounds {
        client.push(timed(pid, plan.count, || {
            let report = throughput::run(&factory, 1, 1, plan.size, plan.count)?;
            report.print();
            Ok(report.deliveries_per_sec())
        })?);
        driver.push(timed(pid, plan.count, || {
            raw::drive(
                server.addr,
                Wire::Herald,
                (plan.size, plan.count),
                1,
                &message_id,
            )
        })?);
        let last = driver.last().map_or(0.0, |r| r.rate);
        println!("raw driver 1 -> 1, {} B: {last:.0} msgs/s", plan.size);
    }
    let medians = |rounds: &[Round]| {
        [
            median(rounds.iter().map(|r| r.rate).collect()),
            median(rounds.iter().map(|r| r.here_us).collect()),
            median(rounds.iter().map(|r| r.server_us).collect()),
        ]
    };
    let ([c_rate, c_here, c_server], [r_rate, r_here, r_server]) =
        (medians(&client), medians(&driver));
    println!(
        "\n{:<12} {:>12} {:>22} {:>22}",
        "", "msgs/s", "this process us/msg", "server us/msg"
    );
    println!(
        "{:<12} {c_rate:>12.0} {c_here:>22.3} {c_server:>22.3}",
        "client"
    );
    println!(
        "{:<12} {r_rate:>12.0} {r_here:>22.3} {r_server:>22.3}",
        "raw driver"
    );
    println!(
        "client / raw driver: {:.2} x the throughput; the client's CPU per message is {:.2} x the server's",
        c_rate / r_rate,
        c_here / c_server
    );
    println!(
        "{{\"scenario\":\"client\",\"size\":{},\"count\":{},\"client_msgs_per_sec\":{c_rate:.0},\
         \"raw_msgs_per_sec\":{r_rate:.0},\"client_over_raw\":{:.3},\"client_cpu_us\":{c_here:.3},\
         \"client_server_cpu_us\":{c_server:.3},\"raw_cpu_us\":{r_here:.3},\"raw_server_cpu_us\":{r_server:.3},\
         \"client_cpu_over_server\":{:.3},\"pinned\":{}}}",
        plan.size,
        plan.count,
        c_rate / r_rate,
        c_here / c_server,
        plan.pin
    );
    Ok(())
}
