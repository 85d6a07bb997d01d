//! Crash safety: the real binary, killed with SIGKILL mid-stream, restarted
//! on the same data directory. Every message whose RECEIPT the producer got
//! is delivered after the restart unless its acknowledgement was confirmed
//! before the crash, and none whose acknowledgement was confirmed comes
//! back. A corrupt journal tail is recovered from.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use std::io::Read;

use herald_client::{AckMode, ConnectionFactory, ConsumerOptions, Destination, Message};
use herald_protocol::amqp::performative::{Attach, Begin, Open, Transfer};
use herald_protocol::amqp::terminus::{LinkTarget, Target};
use herald_protocol::amqp::{FrameHeader, FrameKind, Performative, ProtocolHeader, Sasl, Value};

mod common;

use common::TempDir;

fn start(data: &Path) -> (common::Running, ConnectionFactory) {
    let (child, addr) = common::spawn(data, &["--listen", "127.0.0.1:0"]);
    (
        child,
        ConnectionFactory::new(&format!("herald://{addr}")).unwrap(),
    )
}

/// A data directory, and a directory with a config file holding `toml`
/// for [`start_with_config`].
fn with_config(label: &str, toml: &str) -> (TempDir, TempDir) {
    let data = TempDir::new(label);
    let etc = TempDir::new(&format!("{label}-config"));
    std::fs::create_dir_all(&etc.0).unwrap();
    std::fs::write(etc.0.join("herald.toml"), toml).unwrap();
    (data, etc)
}

/// The binary on `data` with the config file in `etc`.
fn start_with_config(data: &Path, etc: &Path) -> (common::Running, ConnectionFactory) {
    let config = etc.join("herald.toml");
    let args = [
        "--listen",
        "127.0.0.1:0",
        "--config",
        config.to_str().unwrap(),
    ];
    let (child, addr) = common::spawn(data, &args);
    (
        child,
        ConnectionFactory::new(&format!("herald://{addr}")).unwrap(),
    )
}

fn n(m: &Message) -> i64 {
    m.property("n").and_then(|v| v.as_i64()).unwrap()
}

/// Everything left in `queue`, by number.
fn drain(factory: &ConnectionFactory, queue: &str) -> Vec<i64> {
    drain_marked(factory, queue)
        .into_iter()
        .map(|(n, _)| n)
        .collect()
}

/// Everything left in `queue`: each number, and whether it came marked
/// redelivered.
fn drain_marked(factory: &ConnectionFactory, queue: &str) -> Vec<(i64, bool)> {
    let c = factory.create_connection().unwrap();
    let s = c.create_session(AckMode::Auto).unwrap();
    let consumer = s.create_consumer(&Destination::queue(queue)).unwrap();
    let mut got = Vec::new();
    while let Some(m) = consumer.receive(Duration::from_millis(500)).unwrap() {
        got.push((n(&m), m.redelivered));
    }
    got
}

#[test]
fn receipted_messages_survive_sigkill_and_acknowledged_ones_stay_gone() {
    let data = TempDir::new("kill");
    let (mut server, factory) = start(&data.0);
    let receipted = Arc::new(Mutex::new(BTreeSet::new()));
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    // The batch whose ACK was sent when the server died: the journal may
    // have its End records even though the RECEIPT never came back, so
    // whether these come again is unknown (JMS says as much).
    let unsettled = Arc::new(Mutex::new(BTreeSet::new()));
    let stop = Arc::new(AtomicBool::new(false));

    let producer = {
        let (factory, receipted) = (factory.clone(), receipted.clone());
        std::thread::spawn(move || {
            let c = factory.create_connection().unwrap();
            let s = c.create_session(AckMode::Auto).unwrap();
            let p = s.create_producer(&Destination::queue("crash")).unwrap();
            for i in 0.. {
                let m = Message::text(format!("message {i}"))
                    .with_property("n", i)
                    .persistent();
                match p.send(m) {
                    Ok(()) => {
                        receipted.lock().unwrap().insert(i);
                    }
                    Err(e) => {
                        eprintln!("producer stopped: {e}");
                        return;
                    }
                }
            }
        })
    };
    let consumer = {
        let (factory, acked, stop) = (factory.clone(), acked.clone(), stop.clone());
        let unsettled = unsettled.clone();
        std::thread::spawn(move || {
            let c = factory.create_connection().unwrap();
            let s = c.create_session(AckMode::Client).unwrap();
            let options = ConsumerOptions::default().prefetch(50);
            let consumer = s
                .create_consumer_with(&Destination::queue("crash"), options)
                .unwrap();
            let mut batch = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                match consumer.receive(Duration::from_millis(50)) {
                    Ok(Some(m)) => batch.push(n(&m)),
                    Ok(None) => {}
                    Err(_) => return,
                }
                // Acknowledge every tenth message's batch; only confirmed
                // acknowledgements count.
                if batch.len() == 10 {
                    if s.acknowledge().is_err() {
                        unsettled.lock().unwrap().extend(batch);
                        return;
                    }
                    acked.lock().unwrap().extend(batch.drain(..));
                }
            }
        })
    };

    let deadline = Instant::now() + Duration::from_secs(30);
    while receipted.lock().unwrap().len() < 3000 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    server.kill().unwrap();
    server.wait().unwrap();
    stop.store(true, Ordering::Relaxed);
    producer.join().unwrap();
    consumer.join().unwrap();

    let receipted = receipted.lock().unwrap().clone();
    let acked = acked.lock().unwrap().clone();
    let unsettled = unsettled.lock().unwrap().clone();
    assert!(unsettled.len() <= 10, "{unsettled:?}");
    assert!(
        receipted.len() >= 1000,
        "the producer got going: {}",
        receipted.len()
    );
    assert!(!acked.is_empty(), "the consumer acknowledged some");

    let (mut server, factory) = start(&data.0);
    let marked = drain_marked(&factory, "crash");
    // After a crash the server cannot know what was delivered: whatever
    // it kept may have been, and says so.
    assert!(marked.iter().all(|&(_, redelivered)| redelivered));
    let after: BTreeSet<i64> = marked.into_iter().map(|(n, _)| n).collect();
    let lost: Vec<_> = receipted
        .iter()
        .filter(|i| !acked.contains(i) && !unsettled.contains(i) && !after.contains(i))
        .collect();
    assert!(
        lost.is_empty(),
        "{} receipted, unacknowledged and lost, first {:?}",
        lost.len(),
        &lost[..lost.len().min(20)]
    );
    let back: Vec<_> = acked.iter().filter(|i| after.contains(i)).collect();
    assert!(
        back.is_empty(),
        "{} acknowledged yet delivered again, first {:?}",
        back.len(),
        &back[..back.len().min(20)]
    );
    server.kill().unwrap();
    server.wait().unwrap();
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "hlog"))
        .filter(|p| std::fs::metadata(p).unwrap().len() > 16)
        .collect();
    v.sort();
    v
}

#[test]
fn a_truncated_or_bit_flipped_last_segment_is_recovered_from() {
    for damage in ["truncate", "flip"] {
        let data = TempDir::new(damage);
        let (mut server, factory) = start(&data.0);
        {
            let c = factory.create_connection().unwrap();
            let s = c.create_session(AckMode::Auto).unwrap();
            let p = s.create_producer(&Destination::queue("q")).unwrap();
            for i in 0..20 {
                p.send(
                    Message::text("x".repeat(100))
                        .with_property("n", i)
                        .persistent(),
                )
                .unwrap();
            }
        }
        server.kill().unwrap();
        server.wait().unwrap();
        let last = segments(&data.0).pop().unwrap();
        let mut bytes = std::fs::read(&last).unwrap();
        // The killed server left the zeros it reserved after its records.
        let end = bytes.len() - bytes.iter().rev().take_while(|&&b| b == 0).count();
        assert!(end < bytes.len(), "zeros reserved ahead of the records");
        match damage {
            "truncate" => bytes.truncate(end - 7),
            _ => bytes[end - 50] ^= 0x01,
        }
        std::fs::write(&last, &bytes).unwrap();
        let (mut server, factory) = start(&data.0);
        assert_eq!(
            drain(&factory, "q"),
            (0..19).collect::<Vec<_>>(),
            "{damage}: all but the damaged last record"
        );
        server.kill().unwrap();
        server.wait().unwrap();
    }
}

/// A kept message given back to wait out its redelivery delay waits it
/// out after a SIGKILL too, and comes back marked redelivered, once.
#[test]
fn a_redelivery_delay_holds_across_a_sigkill() {
    let toml = "[[addresses]]\nmatch = \"queue://retry\"\nredelivery_delay = \"2s\"\n";
    let (data, etc) = with_config("redelay", toml);
    let start = || start_with_config(&data.0, &etc.0);
    let (mut server, factory) = start();
    let c = factory.create_connection().unwrap();
    let s = c.create_session(AckMode::Client).unwrap();
    s.send(
        &Destination::queue("retry"),
        Message::text("later").with_property("n", 1),
    )
    .unwrap();
    let consumer = s.create_consumer(&Destination::queue("retry")).unwrap();
    assert!(consumer.receive(Duration::from_secs(10)).unwrap().is_some());
    let given_back = Instant::now();
    s.recover().unwrap();
    // A persistent send receipted after the recover: the journal has
    // everything before it on disk.
    s.send(&Destination::queue("barrier"), Message::text("b"))
        .unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    let (_server, factory) = start();
    let c = factory.create_connection().unwrap();
    let s = c.create_session(AckMode::Auto).unwrap();
    let consumer = s.create_consumer(&Destination::queue("retry")).unwrap();
    let m = consumer.receive(Duration::from_secs(30)).unwrap().unwrap();
    assert!(
        given_back.elapsed() >= Duration::from_secs(2),
        "came back {:?} after it was given back",
        given_back.elapsed()
    );
    assert_eq!((n(&m), m.redelivered), (1, true));
    assert!(consumer
        .receive(Duration::from_millis(500))
        .unwrap()
        .is_none());
}

/// Transactions that move messages from one queue to another (consume ten,
/// send ten, commit) while the server is killed: afterwards every message
/// is in exactly one of the two queues. A commit is all or nothing, its
/// acknowledgements included, and an uncommitted transaction leaves no
/// trace.
#[test]
fn transactions_killed_mid_stream_are_all_or_nothing() {
    const TOTAL: i64 = 3000;
    let data = TempDir::new("tx-kill");
    let (mut server, factory) = start(&data.0);
    {
        let c = factory.create_connection().unwrap();
        let s = c.create_session(AckMode::Auto).unwrap();
        let p = s.create_producer(&Destination::queue("in")).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        for i in 0..TOTAL {
            let m = Message::text("payload").with_property("n", i).persistent();
            let tx = tx.clone();
            p.send_async(m, move |r| tx.send(r).unwrap()).unwrap();
        }
        for _ in 0..TOTAL {
            rx.recv().unwrap().unwrap();
        }
    }
    let committed = Arc::new(Mutex::new(0usize));
    let mover = {
        let (factory, committed) = (factory.clone(), committed.clone());
        std::thread::spawn(move || {
            let c = factory.create_connection().unwrap();
            let s = c.create_session(AckMode::Transacted).unwrap();
            let options = ConsumerOptions::default().prefetch(20);
            let input = s
                .create_consumer_with(&Destination::queue("in"), options)
                .unwrap();
            let out = s.create_producer(&Destination::queue("out")).unwrap();
            loop {
                for _ in 0..10 {
                    let Ok(Some(m)) = input.receive(Duration::from_secs(5)) else {
                        return;
                    };
                    let moved = Message::text("moved")
                        .with_property("n", n(&m))
                        .persistent();
                    if out.send(moved).is_err() {
                        return;
                    }
                }
                if s.commit().is_err() {
                    return;
                }
                *committed.lock().unwrap() += 1;
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while *committed.lock().unwrap() < 50 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    server.kill().unwrap();
    server.wait().unwrap();
    mover.join().unwrap();
    let committed = *committed.lock().unwrap();
    assert!(committed >= 10, "the mover got going: {committed} commits");

    let (mut server, factory) = start(&data.0);
    let mut all = drain(&factory, "in");
    let moved = drain(&factory, "out");
    assert!(
        moved.len() >= committed * 10,
        "{} moved, {committed} commits confirmed",
        moved.len()
    );
    assert_eq!(moved.len() % 10, 0, "whole transactions only");
    all.extend(moved);
    all.sort_unstable();
    assert_eq!(
        all,
        (0..TOTAL).collect::<Vec<_>>(),
        "each message exactly once"
    );
    server.kill().unwrap();
    server.wait().unwrap();
}

/// Writes one AMQP frame.
fn amqp_frame(w: &mut impl std::io::Write, kind: FrameKind, body: &Value, payload: &[u8]) {
    let mut encoded = Vec::new();
    body.encode(&mut encoded);
    let mut b = Vec::new();
    FrameHeader::write(kind, 0, encoded.len() + payload.len(), &mut b);
    b.extend_from_slice(&encoded);
    b.extend_from_slice(payload);
    w.write_all(&b).unwrap();
}

/// Reads AMQP frames and hands each performative to `each` until it says
/// stop or the connection ends.
fn amqp_frames(r: &mut impl std::io::Read, mut each: impl FnMut(Performative) -> bool) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        while let Ok(Some(h)) = FrameHeader::read(&buf, u32::MAX) {
            let size = h.size as usize;
            if buf.len() < size {
                break;
            }
            let frame: Vec<u8> = buf.drain(..size).collect();
            let body = &frame[h.body_offset..];
            if body.is_empty() || h.kind != FrameKind::Amqp {
                continue;
            }
            if let Ok(p) = Performative::from_value(Value::decode(body).unwrap().0) {
                if !each(p) {
                    return;
                }
            }
        }
        match r.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

#[test]
fn amqp_messages_accepted_before_a_sigkill_are_all_there_after_it_once() {
    use std::io::Write;
    let data = TempDir::new("amqp-kill");
    let amqp_line = ["herald-server AMQP listening on "];
    let (mut server, addrs) = common::spawn_announcing(&data.0, &[], &amqp_line);
    let stream = std::net::TcpStream::connect(&addrs[1]).unwrap();
    let mut w = std::io::BufWriter::new(stream.try_clone().unwrap());
    // SASL ANONYMOUS, open, begin, a sender to queue://amqp-crash: sent
    // at once, the answers read by the reader thread.
    w.write_all(&ProtocolHeader::Sasl.bytes()).unwrap();
    let init = Sasl::Init {
        mechanism: "ANONYMOUS".into(),
        initial_response: None,
        hostname: None,
    };
    amqp_frame(&mut w, FrameKind::Sasl, &init.to_value(), &[]);
    w.write_all(&ProtocolHeader::Amqp.bytes()).unwrap();
    let open = Open {
        container_id: "crash".into(),
        hostname: None,
        max_frame_size: 65536,
        channel_max: 0,
        idle_time_out: 0,
        offered_capabilities: vec![],
        desired_capabilities: vec![],
        properties: Value::Null,
    };
    let begin = Begin {
        remote_channel: None,
        next_outgoing_id: 0,
        incoming_window: 1 << 20,
        outgoing_window: 1 << 20,
        handle_max: 0,
    };
    let target = LinkTarget::Target(Target {
        address: Some("queue://amqp-crash".into()),
        ..Target::default()
    });
    let attach = Attach {
        name: "out".into(),
        handle: 0,
        role_receiver: false,
        snd_settle_mode: 0,
        rcv_settle_mode: 0,
        source: Value::Null,
        target: target.to_value(),
        initial_delivery_count: Some(0),
        max_message_size: 0,
        offered_capabilities: vec![],
        desired_capabilities: vec![],
        properties: Value::Null,
    };
    for p in [
        Performative::Open(open),
        Performative::Begin(begin),
        Performative::Attach(Box::new(attach)),
    ] {
        amqp_frame(&mut w, FrameKind::Amqp, &p.to_value(), &[]);
    }
    w.flush().unwrap();
    // The reader: skips the two headers and the SASL frames, then counts
    // credit and every delivery settled as accepted.
    let accepted = Arc::new(Mutex::new(BTreeSet::new()));
    let credit = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let reader = {
        let (accepted, credit) = (accepted.clone(), credit.clone());
        let mut r = stream.try_clone().unwrap();
        std::thread::spawn(move || {
            let mut headers = [0u8; 8];
            r.read_exact(&mut headers).unwrap();
            let mut sasl = [0u8; 4096];
            // The mechanisms and the outcome, then the AMQP header.
            let mut seen = Vec::new();
            while !seen.windows(8).any(|w| w == ProtocolHeader::Amqp.bytes()) {
                let n = r.read(&mut sasl).unwrap();
                assert!(n > 0, "closed during the handshake");
                seen.extend_from_slice(&sasl[..n]);
            }
            let at = seen
                .windows(8)
                .position(|w| w == ProtocolHeader::Amqp.bytes())
                .unwrap();
            let mut rest = std::io::Cursor::new(seen[at + 8..].to_vec()).chain(r);
            amqp_frames(&mut rest, |p| {
                match p {
                    Performative::Flow(f) => {
                        let allowed = f.delivery_count.unwrap_or(0) + f.link_credit.unwrap_or(0);
                        credit.store(allowed, Ordering::Release);
                    }
                    Performative::Disposition(d) if d.settled => {
                        assert!(format!("{:?}", d.state).contains("36"), "{:?}", d.state);
                        let mut got = accepted.lock().unwrap();
                        for id in d.first..=d.last.unwrap_or(d.first) {
                            assert!(got.insert(id), "delivery {id} settled twice");
                        }
                    }
                    _ => {}
                }
                true
            });
        })
    };
    // Durable, unsettled, numbered messages, under the credit, until the
    // server is killed.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, credit) = (stop.clone(), credit.clone());
        std::thread::spawn(move || {
            let mut sent = 0u32;
            while !stop.load(Ordering::Acquire) {
                if sent >= credit.load(Ordering::Acquire) {
                    let _ = w.flush();
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                let message = herald_protocol::amqp::message::Message {
                    header: Some(herald_protocol::amqp::message::Header {
                        durable: true,
                        ..Default::default()
                    }),
                    application_properties: vec![("n".into(), Value::Long(i64::from(sent)))],
                    body: herald_protocol::amqp::message::Body::Value(Value::String(format!(
                        "message {sent}"
                    ))),
                    ..Default::default()
                };
                let mut payload = Vec::new();
                message.encode(&mut payload);
                let t = Transfer {
                    handle: 0,
                    delivery_id: Some(sent),
                    delivery_tag: Some(bytes::Bytes::copy_from_slice(&sent.to_be_bytes())),
                    message_format: Some(0),
                    settled: false,
                    more: false,
                    state: Value::Null,
                    aborted: false,
                };
                amqp_frame(
                    &mut w,
                    FrameKind::Amqp,
                    &Performative::Transfer(t).to_value(),
                    &payload,
                );
                if w.flush().is_err() {
                    break;
                }
                sent += 1;
            }
            sent
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while accepted.lock().unwrap().len() < 300 {
        assert!(Instant::now() < deadline, "too few accepted");
        std::thread::sleep(Duration::from_millis(5));
    }
    server.kill().unwrap();
    let _ = server.wait();
    stop.store(true, Ordering::Release);
    let sent = writer.join().unwrap();
    let _ = reader.join();
    let accepted = accepted.lock().unwrap().clone();

    let (_server, factory) = start(&data.0);
    let got = drain(&factory, "amqp-crash");
    let unique: BTreeSet<i64> = got.iter().copied().collect();
    let lost: Vec<i64> = accepted
        .iter()
        .map(|id| i64::from(*id))
        .filter(|n| !unique.contains(n))
        .collect();
    eprintln!(
        "AMQP kill: sent {sent}, accepted {}, after the restart {} ({} distinct), lost {}",
        accepted.len(),
        got.len(),
        unique.len(),
        lost.len()
    );
    assert!(lost.is_empty(), "accepted and lost: {lost:?}");
    assert_eq!(got.len(), unique.len(), "a message came twice");
    assert!(unique.iter().all(|n| *n >= 0 && *n < i64::from(sent)));
}

/// The server's resident memory in bytes, from `/proc`.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// The server's resident memory now, and the most it has had, sampled
/// every 10 ms until `stop` (join the thread before reading it).
fn sample_rss(
    pid: u32,
    stop: &Arc<AtomicBool>,
) -> (
    u64,
    Arc<std::sync::atomic::AtomicU64>,
    std::thread::JoinHandle<()>,
) {
    let base = rss(pid);
    let most = Arc::new(std::sync::atomic::AtomicU64::new(base));
    let (m, stop) = (most.clone(), stop.clone());
    let sampler = std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            m.fetch_max(rss(pid), Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    (base, most, sampler)
}

type Receipted = Arc<Mutex<BTreeSet<i64>>>;

/// Sends numbered persistent messages of `size` bytes to `queue` with
/// 64 in flight until `stop`, recording each receipted number in
/// `receipted` and, while the server is up, each refusal.
fn flood(
    factory: &ConnectionFactory,
    (queue, size): (&str, usize),
    receipted: Receipted,
    (stop, killed): (Arc<AtomicBool>, Arc<AtomicBool>),
) -> std::thread::JoinHandle<Vec<String>> {
    let c = factory.create_connection().unwrap();
    let s = c.create_session(AckMode::Auto).unwrap();
    let p = s.create_producer(&Destination::queue(queue)).unwrap();
    std::thread::spawn(move || {
        let refused = Arc::new(Mutex::new(Vec::new()));
        let window = Arc::new((Mutex::new(0usize), std::sync::Condvar::new()));
        let body = "x".repeat(size);
        for i in 0.. {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            {
                let (n, cv) = &*window;
                let mut n = n.lock().unwrap();
                while *n >= 64 && !stop.load(Ordering::Relaxed) {
                    n = cv.wait_timeout(n, Duration::from_millis(50)).unwrap().0;
                }
                *n += 1;
            }
            let (r, f, w, k) = (
                receipted.clone(),
                refused.clone(),
                window.clone(),
                killed.clone(),
            );
            let sent = p.send_async(
                Message::text(body.clone()).with_property("n", i),
                move |result| {
                    match result {
                        Ok(()) => drop(r.lock().unwrap().insert(i)),
                        Err(e) if !k.load(Ordering::Relaxed) => {
                            f.lock().unwrap().push(e.to_string())
                        }
                        Err(_) => {}
                    }
                    *w.0.lock().unwrap() -= 1;
                    w.1.notify_one();
                },
            );
            if sent.is_err() {
                break;
            }
        }
        drop(c);
        let refused = refused.lock().unwrap().clone();
        refused
    })
}

/// Paging under fault (issue 50): a queue filled to ten times its
/// `max_size_bytes` with no consumer, while another queue and a topic
/// carry traffic without a refusal; SIGKILL mid-run; after the restart
/// every receipted message of both queues is there once, in order. The
/// server's resident memory grows by less than the bound and a fixed
/// overhead meanwhile.
#[test]
fn a_paging_queue_keeps_its_receipted_messages_through_a_sigkill_in_bounded_memory() {
    const BOUND: u64 = 8 << 20;
    const SIZE: usize = 8 * 1024;
    let rule = format!("[[addresses]]\nmatch = \"queue://paged\"\nmax_size_bytes = {BOUND}\n");
    let (data, etc) = with_config("page-kill", &rule);
    let start = || start_with_config(&data.0, &etc.0);
    let (mut server, factory) = start();
    let pid = server.id();
    let (stop, killed) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let flags = || (stop.clone(), killed.clone());
    // The busy queue's consumer and the topic's subscriber keep up.
    let busy_seen = Arc::new(Mutex::new(Vec::new()));
    let c = factory.create_connection().unwrap();
    let s = c.create_session(AckMode::Auto).unwrap();
    let seen = busy_seen.clone();
    let busy_consumer = s.create_consumer(&Destination::queue("busy")).unwrap();
    busy_consumer
        .set_message_listener(move |m| seen.lock().unwrap().push(n(&m)))
        .unwrap();
    let heard = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let h = heard.clone();
    let ticks = s.create_consumer(&Destination::topic("ticks")).unwrap();
    ticks
        .set_message_listener(move |_| {
            h.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
    let (base, most, sampler) = sample_rss(pid, &stop);
    let (paged_receipted, busy_receipted) = (Receipted::default(), Receipted::default());
    let paged = flood(&factory, ("paged", SIZE), paged_receipted.clone(), flags());
    let busy = flood(&factory, ("busy", SIZE), busy_receipted.clone(), flags());
    let ticker = {
        let (stop, killed) = flags();
        let c = factory.create_connection().unwrap();
        let p = c
            .create_session(AckMode::Auto)
            .unwrap()
            .create_producer(&Destination::topic("ticks"))
            .unwrap();
        std::thread::spawn(move || {
            let mut refused = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                if let Err(e) = p.send_with_receipt(Message::text("tick").non_persistent()) {
                    if !killed.load(Ordering::Relaxed) {
                        refused.push(e.to_string());
                    }
                }
            }
            drop(c);
            refused
        })
    };
    // Ten times the bound into the paging queue, then the kill.
    let target = 10 * BOUND as usize / SIZE;
    let deadline = Instant::now() + Duration::from_secs(120);
    while paged_receipted.lock().unwrap().len() < target
        && !paged.is_finished()
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    killed.store(true, Ordering::Relaxed);
    server.kill().unwrap();
    server.wait().unwrap();
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let (paged_refused, busy_refused) = (paged.join().unwrap(), busy.join().unwrap());
    let paged_receipted = paged_receipted.lock().unwrap().clone();
    let busy_receipted = busy_receipted.lock().unwrap().clone();
    let ticks_refused = ticker.join().unwrap();
    drop((busy_consumer, ticks, c));
    let grown = most.load(Ordering::Relaxed).saturating_sub(base);
    eprintln!(
        "paged {} receipted, busy {}, ticks heard {}, RSS grew {} KiB",
        paged_receipted.len(),
        busy_receipted.len(),
        heard.load(Ordering::Relaxed),
        grown >> 10
    );
    assert!(
        paged_refused.is_empty() && busy_refused.is_empty() && ticks_refused.is_empty(),
        "refused: {paged_refused:?} {busy_refused:?} {ticks_refused:?}"
    );
    assert!(
        paged_receipted.len() >= target,
        "{} receipted",
        paged_receipted.len()
    );
    assert!(grown < BOUND + (24 << 20), "RSS grew by {grown} bytes");

    let (_server, factory) = start();
    let check = |queue: &str, receipted: &BTreeSet<i64>, consumed: &[i64]| {
        let after = drain(&factory, queue);
        assert!(
            after.windows(2).all(|w| w[0] < w[1]),
            "{queue}: out of order or twice"
        );
        let after: BTreeSet<i64> = after.into_iter().collect();
        let lost: Vec<_> = receipted
            .iter()
            .filter(|i| !after.contains(i) && !consumed.contains(i))
            .collect();
        assert!(
            lost.is_empty(),
            "{queue}: {} lost, first {:?}",
            lost.len(),
            &lost[..lost.len().min(10)]
        );
    };
    check("paged", &paged_receipted, &[]);
    check("busy", &busy_receipted, &busy_seen.lock().unwrap());
}

/// A deterministic body of `len` bytes for seed `seed`: xorshift bytes.
struct Pattern(u64, u64);

impl Read for Pattern {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.1 as usize);
        for b in &mut buf[..n] {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            *b = self.0 as u8;
        }
        self.1 -= n as u64;
        Ok(n)
    }
}

/// Whether `body` reads exactly as `Pattern(seed, len)`.
fn same_as(mut body: impl Read, seed: u64, len: u64) -> bool {
    let mut expected = Pattern(seed, len);
    let (mut got, mut want) = (vec![0; 1 << 20], vec![0; 1 << 20]);
    let mut total = 0;
    loop {
        let n = body.read(&mut got).unwrap();
        if n == 0 {
            return total == len;
        }
        if expected.read_exact(&mut want[..n]).is_err() || got[..n] != want[..n] {
            return false;
        }
        total += n as u64;
    }
}

fn body_files(data: &Path) -> usize {
    std::fs::read_dir(data.join("large")).map_or(0, |d| d.count())
}

/// The 1 GiB drill of #50 by hand: `HERALD_LARGE_MIB=1024 cargo test
/// --release -p herald-server --test crash large`.
#[test]
fn a_large_message_passes_in_bounded_memory_and_a_sigkill_mid_stream_leaves_no_file() {
    let len: u64 = std::env::var("HERALD_LARGE_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(192)
        << 20;
    let data = TempDir::new("large-kill");
    let (mut server, factory) = start(&data.0);
    let pid = server.id();
    let stop = Arc::new(AtomicBool::new(false));
    let (base, most, sampler) = sample_rss(pid, &stop);
    let c = factory.create_connection().unwrap();
    let s = c.create_session(AckMode::Auto).unwrap();
    let p = s.create_producer(&Destination::queue("big")).unwrap();
    let m = Message::text("").with_property("n", 1);
    p.send_stream(m, len, Pattern(3, len)).unwrap();
    let consumer = s.create_consumer(&Destination::queue("big")).unwrap();
    let m = consumer.receive(Duration::from_secs(30)).unwrap().unwrap();
    assert!(same_as(consumer.body(&m).unwrap(), 3, len), "byte for byte");
    drop(consumer);
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let grown = most.load(Ordering::Relaxed).saturating_sub(base);
    eprintln!(
        "{} MiB through, server RSS grew {} KiB",
        len >> 20,
        grown >> 10
    );
    assert!(grown < 32 << 20, "RSS grew by {grown} bytes");
    // A persistent one receipted, another killed halfway.
    p.send_stream(
        Message::text("").with_property("n", 2),
        1 << 20,
        Pattern(4, 1 << 20),
    )
    .unwrap();
    let cut = std::thread::spawn(move || {
        let _ = p.send_stream(Message::text(""), len, Pattern(5, len));
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while body_files(&data.0) < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    server.kill().unwrap();
    server.wait().unwrap();
    let _ = cut.join();
    drop((s, c));
    let (_server, factory) = start(&data.0);
    assert_eq!(body_files(&data.0), 1, "the half-sent body is swept");
    let c = factory.create_connection().unwrap();
    let s = c.create_session(AckMode::Auto).unwrap();
    let consumer = s.create_consumer(&Destination::queue("big")).unwrap();
    let m = consumer.receive(Duration::from_secs(10)).unwrap().unwrap();
    assert_eq!(n(&m), 2);
    assert!(same_as(consumer.body(&m).unwrap(), 4, 1 << 20));
    assert!(consumer
        .receive(Duration::from_millis(200))
        .unwrap()
        .is_none());
}
