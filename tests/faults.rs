//! Faults a broker must survive, with every message counted by number:
//! a damaged journal, among others.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use herald_client::{AckMode, Destination, Message};
use herald_protocol::ErrorCode;
use herald_protocol::Frame;
use herald_server::config::FullPolicy;
use herald_server::store::disk::{Disk, SegmentFile};
use herald_server::store::FsyncPolicy;
use herald_server::{Config, Server};
use herald_tests::*;

/// A config on `dir` with small segments that sync every record.
fn on(dir: &Path) -> Config {
    let mut config = test_config();
    config.data_dir = dir.to_owned();
    config.journal.fsync = FsyncPolicy::Always;
    config.journal.segment_size = 65536;
    config
}

/// The journal's segment files that hold records, oldest first.
fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "hlog"))
        .filter(|p| std::fs::metadata(p).unwrap().len() > 16)
        .collect();
    files.sort();
    files
}

/// Receives every message waiting in `queue` and returns their numbers.
fn drain(server: &TestServer, queue: &str) -> BTreeSet<i64> {
    let (_c, s) = connect(server);
    let consumer = s.create_consumer(&Destination::queue(queue)).unwrap();
    let mut got = BTreeSet::new();
    while let Some(m) = consumer
        .receive(std::time::Duration::from_millis(500))
        .unwrap()
    {
        let n = m.property("n").and_then(|v| v.as_i64()).unwrap();
        assert!(got.insert(n), "message {n} twice");
    }
    got
}

#[test]
fn a_damaged_journal_stops_the_server_until_told_to_recover_and_then_loses_one_message() {
    let config = on(&temp_dir("damaged"));
    let dir = config.data_dir.clone();
    let server = start_with(config);
    {
        let (_c, s) = connect(&server);
        let p = s.create_producer(&Destination::queue("big")).unwrap();
        let kilobyte = "k".repeat(1000);
        for n in 0..200 {
            let m = Message::text(kilobyte.as_str())
                .with_property("n", n)
                .persistent();
            p.send_with_receipt(m).unwrap();
        }
    }
    server.stop_keeping_data();
    // One byte, in the first of several segments.
    let first = &segments(&dir)[0];
    let mut data = std::fs::read(first).unwrap();
    data[30_000] ^= 0x01;
    std::fs::write(first, &data).unwrap();

    let refused = Server::start(on(&dir))
        .err()
        .expect("a damaged journal is refused");
    let said = refused.to_string();
    assert!(
        said.contains("damaged") && said.contains("--recover-corrupt"),
        "{said}"
    );

    let mut config = on(&dir);
    config.journal.recover_corrupt = true;
    let server = start_with(config);
    let health = call(&server, "GET", "/api/health", None, None).json();
    assert_eq!(health["status"], "ok", "{health}");
    assert_eq!(health["warnings"][0], "recovered_damage", "{health}");
    assert_eq!(health["journal"]["damaged_records_skipped"], 1, "{health}");
    let got = drain(&server, "big");
    assert_eq!(got.len(), 199, "one lost, every other one kept");
    assert!(got.iter().all(|n| (0..200).contains(n)));
    let aside: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .to_string_lossy()
                .ends_with(".corrupt")
        })
        .collect();
    assert_eq!(aside.len(), 1, "the damaged segment is kept aside");
    server.stop_keeping_data();
    let _ = std::fs::remove_dir_all(dir);
}

/// A SEND frame's bytes for a message to queue `q`.
fn send_bytes(persistent: bool, request_id: u32) -> Vec<u8> {
    let mut m = Message::text("m");
    if persistent {
        m = m.persistent();
    }
    m.set_destination(Some(Destination::queue("q")));
    let mut block = bytes::BytesMut::new();
    m.encode(&mut block).unwrap();
    let view = herald_protocol::MessageView::parse(block.freeze()).unwrap();
    let mut wire = bytes::BytesMut::new();
    Frame::Send(view).encode(request_id, &mut wire).unwrap();
    wire.to_vec()
}

fn frame_bytes(frame: &Frame, request_id: u32) -> Vec<u8> {
    let mut wire = bytes::BytesMut::new();
    frame.encode(request_id, &mut wire).unwrap();
    wire.to_vec()
}

/// The answers to come until the connection closes, as (kind, request id).
fn answers(raw: &mut RawClient, n: usize) -> Vec<(&'static str, u32)> {
    (0..n)
        .map(|_| match raw.read_frame() {
            Some((Frame::Receipt, id)) => ("RECEIPT", id),
            Some((Frame::Pong, id)) => ("PONG", id),
            other => panic!("expected an answer, got {other:?}"),
        })
        .collect()
}

#[test]
fn answers_come_in_the_order_of_the_frames_they_answer() {
    // fsync = always: a persistent SEND's RECEIPT waits for a real sync.
    let server = start_with(on(&temp_dir("order")));
    let mut raw = RawClient::connected(&server, 0);
    // A persistent SEND, then a PING, written in one go.
    let mut wire = send_bytes(true, 10);
    wire.extend(frame_bytes(&Frame::Ping, 11));
    raw.write(&wire);
    assert_eq!(answers(&mut raw, 2), [("RECEIPT", 10), ("PONG", 11)]);
    // A persistent SEND, then a non-persistent one.
    let mut wire = send_bytes(true, 20);
    wire.extend(send_bytes(false, 21));
    raw.write(&wire);
    assert_eq!(answers(&mut raw, 2), [("RECEIPT", 20), ("RECEIPT", 21)]);
    // Five persistent SENDs and a DISCONNECT: every RECEIPT, in order, and
    // the DISCONNECT's last, before the connection closes.
    let mut wire = Vec::new();
    for id in 30..35 {
        wire.extend(send_bytes(true, id));
    }
    wire.extend(frame_bytes(&Frame::Disconnect, 35));
    raw.write(&wire);
    let expected: Vec<_> = (30..36).map(|id| ("RECEIPT", id)).collect();
    assert_eq!(answers(&mut raw, 6), expected);
    assert!(raw.read_frame().is_none(), "closed after the last answer");
    // All eight messages are in the queue, seven of them persistent.
    let (_c, s) = connect(&server);
    let q = s.create_consumer(&Destination::queue("q")).unwrap();
    for _ in 0..8 {
        next(&q);
    }
    assert_nothing(&q);
}

#[test]
fn a_stomp_disconnect_is_answered_after_the_persistent_sends_before_it() {
    let server = start_with(on(&temp_dir("stomp-order")));
    let mut stomp = StompClient::connected(&server, &[]);
    let mut wire = Vec::new();
    for n in 0..5 {
        wire.extend(
            format!("SEND\ndestination:/queue/q\npersistent:true\nreceipt:s{n}\n\nm\0").bytes(),
        );
    }
    wire.extend(b"DISCONNECT\nreceipt:bye\n\n\0");
    stomp.write(&wire);
    for id in ["s0", "s1", "s2", "s3", "s4", "bye"] {
        assert_eq!(stomp.expect("RECEIPT").get("receipt-id"), Some(id));
    }
    assert!(stomp.read().is_none());
}

/// A disk with `room` bytes left: a write that does not fit fails whole,
/// as ENOSPC; deleting a file gives its bytes back, and so can the test.
/// While `sync_fails`, a sync fails with EIO.
#[derive(Clone, Default)]
struct SmallDisk {
    room: Arc<AtomicUsize>,
    sync_fails: Arc<AtomicBool>,
    /// While set, a large message's body file cannot be made (EACCES).
    large_fails: Arc<AtomicBool>,
}

struct SmallFile(std::fs::File, SmallDisk);

impl Disk for SmallDisk {
    fn create(&self, path: &Path) -> std::io::Result<Box<dyn SegmentFile>> {
        let body = path.extension().is_some_and(|e| e == "body");
        if body && self.large_fails.load(Ordering::SeqCst) {
            return Err(std::io::Error::from_raw_os_error(13));
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(path)?;
        Ok(Box::new(SmallFile(file, self.clone())))
    }

    fn remove(&self, path: &Path) -> std::io::Result<()> {
        let len = std::fs::metadata(path)?.len() as usize;
        std::fs::remove_file(path)?;
        self.give_back(len);
        Ok(())
    }

    fn free_space(&self, _dir: &Path) -> std::io::Result<u64> {
        Ok(self.room.load(Ordering::SeqCst) as u64)
    }
}

impl SmallDisk {
    fn with_room(room: usize) -> SmallDisk {
        let disk = SmallDisk::default();
        disk.room.store(room, Ordering::SeqCst);
        disk
    }

    fn give_back(&self, bytes: usize) {
        let _ = self
            .room
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |r| {
                Some(r.saturating_add(bytes))
            });
    }
}

impl SegmentFile for SmallFile {
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        let taken = self
            .1
            .room
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                left.checked_sub(buf.len())
            });
        if taken.is_err() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                "no space left on device (test disk)",
            ));
        }
        std::io::Write::write_all(&mut self.0, buf)
    }

    fn sync_data(&mut self) -> std::io::Result<()> {
        if self.1.sync_fails.load(Ordering::SeqCst) {
            return Err(std::io::Error::from_raw_os_error(5));
        }
        self.0.sync_data()
    }

    fn rewind_to(&mut self, len: u64) -> std::io::Result<()> {
        self.0.set_len(len)?;
        std::io::Seek::seek(&mut self.0, std::io::SeekFrom::Start(len)).map(drop)
    }
}

#[test]
fn a_persistent_send_that_failed_is_never_delivered() {
    let disk = SmallDisk::with_room(400_000);
    // No floor: the disk really fills.
    let mut config = on(&temp_dir("full"));
    config.journal.min_free_bytes = 0;
    let server = start_on(config, Arc::new(disk.clone()));
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("big")).unwrap();
    let body = "b".repeat(3000);
    let (mut receipted, mut failed) = (BTreeSet::new(), BTreeSet::new());
    for n in 0..400i64 {
        let m = Message::text(body.as_str())
            .with_property("n", n)
            .persistent();
        match p.send_with_receipt(m) {
            Ok(()) => receipted.insert(n),
            Err(e) => {
                assert!(e.to_string().contains("no space left"), "{e}");
                failed.insert(n)
            }
        };
    }
    assert!(
        !failed.is_empty() && receipted.len() > 50,
        "{} receipted",
        receipted.len()
    );
    // A transaction whose record does not fit fails whole.
    let (tc, _ts) = connect(&server);
    let tx = tc.create_session(AckMode::Transacted).unwrap();
    let tp = tx.create_producer(&Destination::queue("big")).unwrap();
    for n in 1000..1003i64 {
        tp.send(
            Message::text(body.as_str())
                .with_property("n", n)
                .persistent(),
        )
        .unwrap();
    }
    assert!(tx.commit().is_err(), "the commit cannot be kept");
    // And over STOMP: an ERROR instead of the RECEIPT.
    let mut stomp = StompClient::connected(&server, &[]);
    stomp.write(
        format!("SEND\ndestination:/queue/big\npersistent:true\nn:2000\nreceipt:r\n\n{body}\0")
            .as_bytes(),
    );
    stomp.expect_error_saying("no space left");
    // Exactly the receipted messages are delivered: none that failed.
    let got = drain(&server, "big");
    assert_eq!(got, receipted, "failed: {failed:?}");
    // Space comes back, and so does persistence.
    disk.room.store(usize::MAX, Ordering::SeqCst);
    p.send_with_receipt(Message::text("later").with_property("n", 9999).persistent())
        .unwrap();
    assert_eq!(drain(&server, "big"), BTreeSet::from([9999]));
}

#[test]
fn after_a_failed_sync_persistent_sends_fail_until_a_restart_and_health_says_so() {
    let disk = SmallDisk::with_room(usize::MAX);
    let config = on(&temp_dir("eio"));
    let dir = config.data_dir.clone();
    let server = start_on(config, Arc::new(disk.clone()));
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("q")).unwrap();
    let numbered = |n: i64| Message::text("m").with_property("n", n).persistent();
    p.send_with_receipt(numbered(1)).unwrap();
    // After a failed fsync the page cache may not match the disk: nothing
    // persistent is confirmed again, even once syncs work.
    disk.sync_fails.store(true, Ordering::SeqCst);
    assert!(p.send_with_receipt(numbered(2)).is_err());
    disk.sync_fails.store(false, Ordering::SeqCst);
    let e = p.send_with_receipt(numbered(3)).unwrap_err();
    assert!(e.to_string().contains("could not sync"), "{e}");
    let health = call(&server, "GET", "/api/health", None, None).json();
    assert_eq!(health["status"], "degraded", "{health}");
    assert_eq!(
        health["reasons"][0]["reason"], "journal_stopped",
        "{health}"
    );
    // Non-persistent traffic goes on, and so do consumers.
    p.send_with_receipt(Message::text("m").with_property("n", 4).non_persistent())
        .unwrap();
    assert_eq!(drain(&server, "q"), BTreeSet::from([1, 4]));
    // A restart recovers from the journal and takes persistent sends again.
    // What the journal wrote around the failed sync has an unknown
    // outcome, as in a crash: 1's acknowledgement could not be kept (it
    // comes again), 2 was written but not confirmed (it may come); 3 was
    // never written.
    drop((p, s, _c));
    server.stop_keeping_data();
    let server = start_with(on(&dir));
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("q")).unwrap();
    p.send_with_receipt(numbered(5)).unwrap();
    let got = drain(&server, "q");
    assert!(got.contains(&5) && !got.contains(&3), "{got:?}");
    assert!(got.is_subset(&BTreeSet::from([1, 2, 5])), "{got:?}");
}

const MIB: usize = 1 << 20;

/// [`on`] with a 1 MiB free-space floor and `queues.full_policy` `policy`.
fn floored(dir: &Path, policy: FullPolicy) -> Config {
    let mut config = on(dir);
    config.journal.min_free_bytes = MIB as u64;
    config.queues.full_policy = policy;
    config
}

/// A 3 KB persistent message numbered `n`.
fn big(n: i64) -> Message {
    Message::text("b".repeat(3000))
        .with_property("n", n)
        .persistent()
}

fn health(server: &TestServer) -> serde_json::Value {
    call(server, "GET", "/api/health", None, None).json()
}

#[test]
fn below_the_free_space_floor_persistent_sends_are_refused_and_go_on_once_space_is_freed() {
    let disk = SmallDisk::with_room(2 * MIB);
    let server = start_on(
        floored(&temp_dir("floor"), FullPolicy::Fail),
        Arc::new(disk.clone()),
    );
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("big")).unwrap();
    let mut receipted = BTreeSet::new();
    let refusal = (0..1000i64)
        .find_map(|n| match p.send_with_receipt(big(n)) {
            Ok(()) => {
                receipted.insert(n);
                None
            }
            Err(e) => Some(e),
        })
        .expect("refused before the disk is full");
    assert_eq!(refusal.server_code(), Some(ErrorCode::QueueFull));
    assert!(refusal.to_string().contains("min_free_bytes"), "{refusal}");
    assert!(disk.room.load(Ordering::SeqCst) > 0, "never actually full");
    assert!(receipted.len() > 100, "{} receipted", receipted.len());
    let h = health(&server);
    assert_eq!(h["reasons"][0]["reason"], "disk_low", "{h}");
    assert_eq!(h["journal"]["low_space"], true, "{h}");
    let metrics = call(&server, "GET", "/metrics", None, None).body;
    assert!(metrics.contains("herald_journal_low_space 1"), "{metrics}");
    // Non-persistent messages and transactions without persistent ones go
    // on; a transaction with one is rolled back whole.
    p.send_with_receipt(Message::text("m").with_property("n", -1).non_persistent())
        .unwrap();
    let (tc, _ts) = connect(&server);
    let tx = tc.create_session(AckMode::Transacted).unwrap();
    tx.create_producer(&Destination::queue("big"))
        .unwrap()
        .send(big(5000))
        .unwrap();
    let e = tx.commit().unwrap_err();
    assert!(e.to_string().contains("min_free_bytes"), "{e}");
    // Consumers drain the queue, which frees the segments it filled.
    let mut expected = receipted.clone();
    expected.insert(-1);
    assert_eq!(drain(&server, "big"), expected);
    wait_until("the floor is cleared", || health(&server)["status"] == "ok");
    p.send_with_receipt(big(9999)).unwrap();
    assert_eq!(drain(&server, "big"), BTreeSet::from([9999]));
}

#[test]
fn a_blocked_persistent_send_goes_on_by_itself_when_space_comes_back() {
    let disk = SmallDisk::with_room(MIB / 2);
    let server = start_on(
        floored(&temp_dir("floor-block"), FullPolicy::Block),
        Arc::new(disk.clone()),
    );
    assert_eq!(health(&server)["reasons"][0]["reason"], "disk_low");
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("q")).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let sender = std::thread::spawn(move || tx.send(p.send_with_receipt(big(1))).unwrap());
    assert!(
        rx.recv_timeout(std::time::Duration::from_millis(300))
            .is_err(),
        "held while the disk is low"
    );
    disk.give_back(4 * MIB);
    rx.recv_timeout(PATIENCE)
        .expect("answered once space is back")
        .unwrap();
    sender.join().unwrap();
    assert_eq!(drain(&server, "q"), BTreeSet::from([1]));
}

#[test]
fn a_server_restarted_on_a_full_disk_starts_serves_consumers_and_resumes_by_itself() {
    let disk = SmallDisk::with_room(2 * MIB);
    let config = floored(&temp_dir("restart-full"), FullPolicy::Fail);
    let dir = config.data_dir.clone();
    let server = start_on(config.clone(), Arc::new(disk.clone()));
    {
        let (_c, s) = connect(&server);
        let p = s.create_producer(&Destination::queue("big")).unwrap();
        for n in 0..100 {
            p.send_with_receipt(big(n)).unwrap();
        }
    }
    server.stop_keeping_data();
    assert!(dir.join("RESERVE").exists(), "the reserve was made");
    // Something else fills the disk to the last byte.
    disk.room.store(0, Ordering::SeqCst);
    let server = start_on(config, Arc::new(disk.clone()));
    let h = health(&server);
    assert_eq!(h["reasons"][0]["reason"], "disk_low", "{h}");
    assert_eq!(h["journal"]["reserve_released"], true, "{h}");
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("big")).unwrap();
    let e = p.send_with_receipt(big(100)).unwrap_err();
    assert!(e.to_string().contains("min_free_bytes"), "{e}");
    // The reserve holds the acknowledgements that let consumers drain.
    assert_eq!(drain(&server, "big"), (0..100).collect());
    // The operator frees space: producers go on, and the reserve is back.
    disk.give_back(4 * MIB);
    wait_until("the floor is cleared", || health(&server)["status"] == "ok");
    p.send_with_receipt(big(101)).unwrap();
    assert_eq!(health(&server)["journal"]["reserve_released"], false);
    drop((p, s, _c));
    server.stop_keeping_data();
    // Nothing acknowledged comes back.
    let server = start_on(on(&dir), Arc::new(disk.clone()));
    assert_eq!(drain(&server, "big"), BTreeSet::from([101]));
}

#[test]
fn an_acknowledgement_that_cannot_be_written_fails_and_the_message_comes_again() {
    let disk = SmallDisk::with_room(usize::MAX);
    let mut config = on(&temp_dir("ack-full"));
    config.journal.min_free_bytes = 0;
    let dir = config.data_dir.clone();
    let server = start_on(config, Arc::new(disk.clone()));
    let (c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("q")).unwrap();
    p.send_with_receipt(Message::text("m").with_property("n", 1).persistent())
        .unwrap();
    let worker = c.create_session(AckMode::Client).unwrap();
    let consumer = worker.create_consumer(&Destination::queue("q")).unwrap();
    let first = consumer.receive(PATIENCE).unwrap().expect("delivered");
    assert!(!first.redelivered);
    disk.room.store(0, Ordering::SeqCst);
    let e = worker.acknowledge().unwrap_err();
    assert!(e.to_string().contains("no space left"), "{e}");
    // Still kept: delivered again, as a redelivery.
    let again = consumer
        .receive(PATIENCE)
        .unwrap()
        .expect("delivered again");
    assert_eq!(again.property("n").and_then(|v| v.as_i64()), Some(1));
    assert!(again.redelivered && again.delivery_count == 2, "{again:?}");
    disk.room.store(usize::MAX, Ordering::SeqCst);
    worker.acknowledge().unwrap();
    assert!(consumer
        .receive(std::time::Duration::from_millis(300))
        .unwrap()
        .is_none());
    drop((consumer, worker, p, s, c));
    server.stop_keeping_data();
    let server = start_with(on(&dir));
    assert!(
        drain(&server, "q").is_empty(),
        "the acknowledgement was kept"
    );
}

#[test]
fn a_queue_whose_page_files_reach_the_floor_says_so_in_health_and_goes_on_once_drained() {
    let disk = SmallDisk::with_room(2 * MIB);
    let mut config = on(&temp_dir("page-floor"));
    config.journal.min_free_bytes = MIB as u64;
    config.addresses = vec![herald_server::config::AddressRule {
        pattern: "queue://paged".into(),
        max_size_bytes: Some(16 * 1024),
        ..Default::default()
    }];
    let server = start_on(config, Arc::new(disk.clone()));
    // Non-persistent, so that only the page files take the disk's room.
    let sender = {
        let c = factory(&server).create_connection().unwrap();
        std::thread::spawn(move || {
            let s = c.create_session(AckMode::Auto).unwrap();
            let p = s.create_producer(&Destination::queue("paged")).unwrap();
            for n in 0..1000i64 {
                let m = Message::text("p".repeat(3000)).with_property("n", n);
                p.send_with_receipt(m.non_persistent()).unwrap();
            }
        })
    };
    wait_until("paging stops at the floor", || {
        health(&server)["reasons"][0]["reason"] == "paging_stopped"
    });
    let h = health(&server);
    assert!(
        h["reasons"][0]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("queue paged")),
        "{h}"
    );
    let metrics = call(&server, "GET", "/metrics", None, None).body;
    assert!(
        metrics.contains("herald_queue_paging_stopped{queue=\"paged\"} 1"),
        "{metrics}"
    );
    // Publishers wait; connections are still welcome.
    assert_eq!(call(&server, "GET", "/api/ready", None, None).status, 200);
    let row = call(&server, "GET", "/api/queues/paged", None, None).json();
    assert_eq!(row["paging_stopped"], true, "{row}");
    assert!(row["paged"].as_u64().unwrap() > 50, "{row}");
    // The bound, and at most two messages past it.
    assert!(
        row["bytes"].as_u64().unwrap() < 16 * 1024 + 2 * 3100,
        "{row}"
    );
    // The publisher waits meanwhile; a consumer drains the queue, paging
    // goes on, and every message arrives once, in order.
    let (_c, s) = connect(&server);
    let consumer = s.create_consumer(&Destination::queue("paged")).unwrap();
    for n in 0..1000i64 {
        let m = next(&consumer);
        assert_eq!(m.property("n").and_then(|v| v.as_i64()), Some(n));
    }
    sender.join().unwrap();
    wait_until("health is ok", || health(&server)["status"] == "ok");
}

#[test]
fn a_large_body_the_disk_cannot_hold_is_refused_before_or_while_it_comes_and_leaves_no_file() {
    const MIB: usize = 1 << 20;
    let disk = SmallDisk::with_room(8 * MIB);
    let dir = temp_dir("large-full");
    let server = start_on(on(&dir), Arc::new(disk.clone()));
    let before = disk.room.load(Ordering::SeqCst);
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("big")).unwrap();
    // More than the disk has: refused before a byte is written.
    let zeros = || std::io::repeat(0);
    let e = p
        .send_stream(Message::text("").non_persistent(), 20 << 20, zeros())
        .unwrap_err();
    assert!(
        matches!(&e, herald_client::Error::Server { code, .. } if *code == ErrorCode::QueueFull as u32),
        "{e}"
    );
    assert!(e.to_string().contains("does not fit"), "{e}");
    // Two that fit alone and not together: one of them fills the disk
    // midway and is refused; the other goes.
    let senders: Vec<_> = (0..2)
        .map(|_| {
            let c = factory(&server).create_connection().unwrap();
            std::thread::spawn(move || {
                let p = c
                    .create_session(AckMode::Auto)
                    .unwrap()
                    .create_producer(&Destination::queue("big"))
                    .unwrap();
                let slow = SlowZeros(5 * MIB as u64);
                p.send_stream(Message::text("").non_persistent(), 5 * MIB as u64, slow)
            })
        })
        .collect();
    let results: Vec<_> = senders.into_iter().map(|t| t.join().unwrap()).collect();
    let refused: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!(refused.len(), 1, "{results:?}");
    assert!(
        refused[0].to_string().contains("cannot be kept"),
        "{}",
        refused[0]
    );
    let consumer = s.create_consumer(&Destination::queue("big")).unwrap();
    let m = next(&consumer);
    let mut body = consumer.body(&m).unwrap();
    assert_eq!(
        std::io::copy(&mut body, &mut std::io::sink()).unwrap(),
        5 * MIB as u64
    );
    drop(body);
    assert!(consumer
        .receive(std::time::Duration::from_millis(200))
        .unwrap()
        .is_none());
    wait_until("the disk's room comes back", || {
        disk.room.load(Ordering::SeqCst) == before
    });
}

/// Zeros in small reads, a millisecond apart: two senders interleave.
struct SlowZeros(u64);

impl std::io::Read for SlowZeros {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        std::thread::sleep(std::time::Duration::from_millis(1));
        let n = buf.len().min(256 * 1024).min(self.0 as usize);
        buf[..n].fill(0);
        self.0 -= n as u64;
        Ok(n)
    }
}

#[test]
fn a_large_store_that_cannot_write_says_so_in_health_until_a_body_is_written() {
    let disk = SmallDisk::with_room(usize::MAX);
    let server = start_on(on(&temp_dir("large-denied")), Arc::new(disk.clone()));
    let (_c, s) = connect(&server);
    let p = s.create_producer(&Destination::queue("big")).unwrap();
    let send = || {
        p.send_stream(
            Message::text("").non_persistent(),
            1 << 20,
            std::io::repeat(0),
        )
    };
    disk.large_fails.store(true, Ordering::SeqCst);
    let e = send().unwrap_err();
    assert!(e.to_string().contains("cannot be kept"), "{e}");
    let h = health(&server);
    assert_eq!(h["status"], "degraded", "{h}");
    assert_eq!(h["reasons"][0]["reason"], "large_messages_failing", "{h}");
    assert!(
        h["reasons"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("ermission"),
        "{h}"
    );
    // Still ready: everything else goes on.
    assert_eq!(call(&server, "GET", "/api/ready", None, None).status, 200);
    let metrics = call(&server, "GET", "/metrics", None, None).body;
    assert!(metrics.contains("herald_large_failing 1"), "{metrics}");
    disk.large_fails.store(false, Ordering::SeqCst);
    send().unwrap();
    assert_eq!(health(&server)["status"], "ok");
}
