//! Faults a broker must survive, with every message counted by number:
//! a damaged journal, among others.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use herald_client::{Destination, Message};
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
    assert_eq!(health["status"], "recovered_damage", "{health}");
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
