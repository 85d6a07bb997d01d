//! `--mode persistent`: what a persistent send costs against the disk it
//! waits for. First the disk: appends of one record's size to a file in
//! --sync-dir, each followed by `fdatasync`; then the same writes into
//! zeros written beforehand, each followed by `fdatasync`, as the journal
//! writes (it reserves zeros ahead of its records, so that a sync commits
//! no new file size). Then
//! one synchronous persistent send at a time to a queue (the send returns
//! once the server's journal has synced it), timed one by one. Then the
//! throughput of 1, 4 and 16 producers with 1 and 100 sends in flight
//! each, every send receipted. The target (issue 29) is a synchronous
//! send's p50 within 1.3 × one fdatasync. Beside the send, the machine's
//! floor for it ([`sync_floor`]): one loopback round trip around one
//! write into zeros and its `fdatasync`, with no thread handing anything
//! on.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use herald_client::{AckMode, ConnectionFactory, Destination, Error, Message, Result};

use super::process::io;
use super::queue;
use super::{bench_topic, median};

/// What one run is asked to do.
pub struct Plan {
    pub size: usize,
    /// Syncs and synchronous sends timed.
    pub samples: u64,
    /// Most sends of one throughput run.
    pub count: u64,
    /// Where the disk is timed: the server's data directory's disk.
    pub sync_dir: PathBuf,
    pub rounds: u32,
}

/// A journal record's framing around a message body, roughly: the
/// appends timed on the disk are this much longer than the body.
const RECORD_OVERHEAD: usize = 64;

/// Producers and windows of the throughput runs.
const PRODUCERS: [usize; 3] = [1, 4, 16];
const WINDOWS: [usize; 2] = [1, 100];

/// Latencies, sorted, and their percentiles in microseconds.
struct Latencies(Vec<Duration>);

impl Latencies {
    fn new(mut samples: Vec<Duration>) -> Latencies {
        samples.sort_unstable();
        Latencies(samples)
    }

    fn us(&self, q: f64) -> f64 {
        let at = ((self.0.len() as f64 * q) as usize).min(self.0.len().saturating_sub(1));
        self.0.get(at).map_or(0.0, |d| d.as_secs_f64() * 1e6)
    }
}

/// Times `samples` writes of `len` bytes to a new file in `dir`, each
/// made durable with `fdatasync`: appends, or if `reserved` writes into
/// zeros written (and synced) beforehand.
fn disk_syncs(dir: &Path, len: usize, samples: u64, reserved: bool) -> Result<Latencies> {
    let io = |e: std::io::Error| Error::InvalidArgument(format!("{}: {e}", dir.display()));
    let path = dir.join(format!("herald-bench-sync-{}", std::process::id()));
    let mut file = std::fs::File::create(&path).map_err(io)?;
    if reserved {
        let zeros = vec![0u8; len * samples as usize];
        file.write_all(&zeros).map_err(io)?;
        file.sync_data().map_err(io)?;
        std::io::Seek::rewind(&mut file).map_err(io)?;
    }
    let record = vec![0x5au8; len];
    let timed = (0..samples)
        .map(|_| {
            let began = Instant::now();
            file.write_all(&record)?;
            file.sync_data()?;
            Ok(began.elapsed())
        })
        .collect::<std::io::Result<Vec<_>>>();
    let _ = std::fs::remove_file(&path);
    Ok(Latencies::new(timed.map_err(io)?))
}

/// The machine's floor for a synchronous persistent send: a sender
/// thread writes `len` bytes to a loopback socket and waits for a byte
/// back; a thread on the other end reads them whole, writes them into
/// zeros of a file in `dir`, `fdatasync`s it and answers. Two threads,
/// the sync between a request and its answer and nothing else: no
/// broker's send, which must also reach a journal thread and come back
/// to the thread that owns the connection, does better here.
fn sync_floor(dir: &Path, len: usize, samples: u64) -> Result<Latencies> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(io("the floor's listener"))?;
    let mut sender = TcpStream::connect(listener.local_addr().map_err(io("an address"))?)
        .map_err(io("the floor's sender"))?;
    let (mut receiver, _) = listener.accept().map_err(io("the floor's listener"))?;
    for s in [&sender, &receiver] {
        s.set_nodelay(true).map_err(io("TCP_NODELAY"))?;
    }
    let path = dir.join(format!("herald-bench-floor-{}", std::process::id()));
    let mut file = std::fs::File::create(&path).map_err(io("the floor's file"))?;
    let prepared = file
        .write_all(&vec![0u8; len * samples as usize])
        .and_then(|()| file.sync_data())
        .and_then(|()| std::io::Seek::rewind(&mut file));
    if let Err(e) = prepared {
        let _ = std::fs::remove_file(&path);
        return Err(io("the floor's file")(e));
    }
    let keeper = std::thread::spawn(move || -> std::io::Result<()> {
        let mut record = vec![0u8; len];
        while receiver.read_exact(&mut record).is_ok() {
            file.write_all(&record)?;
            file.sync_data()?;
            receiver.write_all(&[1])?;
        }
        Ok(())
    });
    let record = vec![0x5au8; len];
    let mut answer = [0u8];
    let timed = (0..samples)
        .map(|_| {
            let began = Instant::now();
            sender.write_all(&record)?;
            sender.read_exact(&mut answer)?;
            Ok(began.elapsed())
        })
        .collect::<std::io::Result<Vec<_>>>();
    drop(sender);
    let kept = keeper.join();
    let _ = std::fs::remove_file(&path);
    match kept {
        Ok(Err(e)) => return Err(io("the floor's keeper")(e)),
        Err(_) => return Err(Error::InvalidArgument("the floor's keeper panicked".into())),
        Ok(Ok(())) => {}
    }
    Ok(Latencies::new(timed.map_err(io("the floor's sender"))?))
}

/// Times `samples` synchronous sends, one after the other, to a queue
/// that a consumer drains: persistent ones wait for the journal's sync,
/// the others time the round trip alone.
fn sync_sends(
    factory: &ConnectionFactory,
    (size, persistent): (usize, bool),
    samples: u64,
) -> Result<Latencies> {
    let destination = Destination::queue(bench_topic("persistent"));
    let consumers = factory.create_connection()?;
    let session = consumers.create_session(AckMode::Auto)?;
    let consumer = session.create_consumer(&destination)?;
    consumer.set_message_listener(|_| {})?;
    let connection = factory.create_connection()?;
    let producer = connection
        .create_session(AckMode::Auto)?
        .create_producer(&destination)?;
    let body = Bytes::from(vec![7u8; size]);
    let timed = (0..samples)
        .map(|_| {
            let began = Instant::now();
            let message = Message::bytes(body.clone());
            producer.send_with_receipt(match persistent {
                true => message.persistent(),
                false => message.non_persistent(),
            })?;
            Ok(began.elapsed())
        })
        .collect::<Result<Vec<_>>>()?;
    connection.close()?;
    consumers.close()?;
    Ok(Latencies::new(timed))
}

/// Runs the three parts and prints a table and a JSON line.
pub fn run(factory: &ConnectionFactory, plan: &Plan) -> Result<()> {
    // p50 and p99 of the disk (appends, and writes into zeros), the
    // persistent send, its floor and the round trip.
    let mut runs: [[Vec<f64>; 2]; 5] = Default::default();
    let len = plan.size + RECORD_OVERHEAD;
    for _ in 0..plan.rounds {
        let timed = [
            disk_syncs(&plan.sync_dir, len, plan.samples, false)?,
            disk_syncs(&plan.sync_dir, len, plan.samples, true)?,
            sync_sends(factory, (plan.size, true), plan.samples)?,
            sync_floor(&plan.sync_dir, len, plan.samples)?,
            sync_sends(factory, (plan.size, false), plan.samples)?,
        ];
        for (run, t) in runs.iter_mut().zip(&timed) {
            run[0].push(t.us(0.5));
            run[1].push(t.us(0.99));
        }
        let [append, zeros, send, floor, trip] = timed.map(|t| (t.us(0.5), t.us(0.99)));
        println!(
            "fdatasync of {len} B writes in {}, appended: p50 {:.1} us, p99 {:.1} us; into zeros: p50 {:.1} us, \
             p99 {:.1} us; synchronous persistent send: p50 {:.1} us, p99 {:.1} us; its floor: p50 {:.1} us, \
             p99 {:.1} us; the send not persistent (the round trip): p50 {:.1} us, p99 {:.1} us",
            plan.sync_dir.display(),
            append.0,
            append.1,
            zeros.0,
            zeros.1,
            send.0,
            send.1,
            floor.0,
            floor.1,
            trip.0,
            trip.1
        );
    }
    let [[disk_p50, disk_p99], [zeros_p50, zeros_p99], [send_p50, send_p99], [floor_p50, floor_p99], [trip_p50, trip_p99]] =
        runs.map(|r| r.map(median));
    let mut rows = Vec::new();
    for producers in PRODUCERS {
        for window in WINDOWS {
            // Enough sends for some hundreds of syncs, whatever the window.
            let count = ((300 * producers * window) as u64).min(plan.count);
            let rates = (0..plan.rounds)
                .map(|_| {
                    queue::run(
                        factory,
                        factory,
                        &queue::Plan {
                            producers,
                            consumers: 1,
                            queues: 1,
                            size: plan.size,
                            count,
                            persistent: true,
                            window,
                            ack_every: 0,
                            groups: 0,
                            tagged: 0,
                            priorities: false,
                            paged: false,
                            fill_first: false,
                        },
                    )
                })
                .collect::<Result<Vec<_>>>()?;
            rows.push((producers, window, median(rates)));
        }
    }
    println!(
        "\nfdatasync of an append p50 {disk_p50:.1} us, p99 {disk_p99:.1} us; of a write into zeros p50 \
         {zeros_p50:.1} us, p99 {zeros_p99:.1} us; synchronous persistent send p50 {send_p50:.1} us \
         ({:.2} x the append's fdatasync, {:.2} x the other), p99 {send_p99:.1} us; its floor p50 \
         {floor_p50:.1} us ({:.2} x the append's fdatasync), p99 {floor_p99:.1} us; round trip p50 \
         {trip_p50:.1} us, p99 {trip_p99:.1} us",
        send_p50 / disk_p50,
        send_p50 / zeros_p50,
        floor_p50 / disk_p50
    );
    println!("{:<12} {:>8} {:>14}", "producers", "window", "msgs/s");
    for (producers, window, rate) in &rows {
        println!("{producers:<12} {window:>8} {rate:>14.0}");
    }
    let rows: Vec<String> = rows
        .iter()
        .map(|(p, w, r)| format!("{{\"producers\":{p},\"window\":{w},\"msgs_per_sec\":{r:.0}}}"))
        .collect();
    println!(
        "{{\"scenario\":\"persistent\",\"size\":{},\"fdatasync_p50_us\":{disk_p50:.1},\"fdatasync_p99_us\":{disk_p99:.1},\
         \"fdatasync_into_zeros_p50_us\":{zeros_p50:.1},\"fdatasync_into_zeros_p99_us\":{zeros_p99:.1},\
         \"send_p50_us\":{send_p50:.1},\"send_p99_us\":{send_p99:.1},\"floor_p50_us\":{floor_p50:.1},\"floor_p99_us\":{floor_p99:.1},\"round_trip_p50_us\":{trip_p50:.1},\"round_trip_p99_us\":{trip_p99:.1},\"send_over_fdatasync\":{:.3},\"send_over_fdatasync_into_zeros\":{:.3},\"send_over_floor\":{:.3},\"rows\":[{}]}}",
        plan.size,
        send_p50 / disk_p50,
        send_p50 / zeros_p50,
        send_p50 / floor_p50,
        rows.join(",")
    );
    Ok(())
}
